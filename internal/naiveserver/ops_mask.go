package main

import (
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// maskOps: reaching what a mount covers (the fence's masks over the
// scope's secrets) around the mount: each returns the bytes it read.
var maskOps = map[string]op{
	// umount2(Path, MNT_DETACH), then read Path.
	"umount_path": func(r Request) (string, error) {
		if err := unix.Unmount(r.Path, unix.MNT_DETACH); err != nil {
			return "", err
		}
		return readAll(r.Path)
	},
	// A clone of Path's directory without the mounts below it
	// (open_tree without AT_RECURSIVE), then Path's name read in it.
	"open_tree_path": func(r Request) (string, error) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Dir(r.Path), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		f, err := unix.Openat(fd, filepath.Base(r.Path), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		return readFD(f)
	},
	// The directory Path opened, then "../"+Name read from it.
	"dotdot_read": func(r Request) (string, error) {
		d, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(d)
		f, err := unix.Openat(d, "../"+r.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		return readFD(f)
	},
	// Path opened O_PATH (no permission needed), then re-opened for
	// reading through /proc/self/fd.
	"procfd_reopen": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return readAll("/proc/self/fd/" + strconv.Itoa(fd))
	},
	// FICLONE of Path's bytes into a new file To.
	"ficlone": func(r Request) (string, error) {
		src, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(src)
		dst, err := unix.Open(r.To, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return "", err
		}
		defer unix.Close(dst)
		if err := unix.IoctlFileClone(dst, src); err != nil {
			return "", err
		}
		return readAll(r.To)
	},
}

func readAll(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", unwrapExec(err)
	}
	return string(b), nil
}

func readFD(fd int) (string, error) {
	f := os.NewFile(uintptr(fd), "fd")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", unwrapExec(err)
	}
	return string(b), nil
}
