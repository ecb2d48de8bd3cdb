package main

import "golang.org/x/sys/unix"

// int80raw makes a syscall through the i386 ABI (int 0x80).
func int80raw(nr, a1, a2, a3 uintptr) uintptr

func int80(nr, a1, a2, a3 uintptr) (uintptr, unix.Errno) {
	r := int80raw(nr, a1, a2, a3)
	if int32(r) < 0 && int32(r) > -4096 {
		return 0, unix.Errno(-int32(r))
	}
	return r, 0
}
