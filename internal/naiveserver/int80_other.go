//go:build !amd64

package main

import "golang.org/x/sys/unix"

// int80: there is no i386 ABI to call from here.
func int80(nr, a1, a2, a3 uintptr) (uintptr, unix.Errno) { return 0, unix.ENOSYS }
