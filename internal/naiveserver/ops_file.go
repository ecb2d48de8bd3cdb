package main

import (
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileOps: the file attacks Landlock decides by path and the kernel may
// reach another way: links, renames that exchange or leave whiteouts,
// O_TMPFILE, copies between descriptors, file handles, page-cache
// residency, locks.
var fileOps = map[string]op{
	// linkat(Path, To) with AT_SYMLINK_FOLLOW: Path may be a symlink in the
	// scope to a file outside it, or a /proc/self/fd link.
	"link_follow": func(r Request) (string, error) {
		return "", unix.Linkat(unix.AT_FDCWD, r.Path, unix.AT_FDCWD, r.To, unix.AT_SYMLINK_FOLLOW)
	},
	// renameat2(Path, To, Flags): RENAME_EXCHANGE swaps the two names,
	// RENAME_WHITEOUT leaves a whiteout device at Path. Data is what is at
	// Path afterwards (its file type, in octal).
	"renameat2": func(r Request) (string, error) {
		if err := unix.Renameat2(unix.AT_FDCWD, r.Path, unix.AT_FDCWD, r.To, uint(r.Flags)); err != nil {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Lstat(r.Path, &st); err != nil {
			return "gone", nil
		}
		return strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8), nil
	},
	// An O_TMPFILE in directory Path, holding Data, given the name To:
	// through /proc/self/fd (Flags 0) or with AT_EMPTY_PATH (Flags 1).
	"tmpfile_link": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return "", fmt.Errorf("open O_TMPFILE: %w", err)
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, []byte(r.Data)); err != nil {
			return "", err
		}
		if r.Flags == 1 {
			return "", unix.Linkat(fd, "", unix.AT_FDCWD, r.To, unix.AT_EMPTY_PATH)
		}
		return "", unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, r.To, unix.AT_SYMLINK_FOLLOW)
	},
	// Path opened read-only, its bytes copied to a new file To by
	// descriptor: copy_file_range (N 0), sendfile (1), splice through a
	// pipe (2).
	"copy_fd": func(r Request) (string, error) {
		in, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(in)
		out, err := unix.Open(r.To, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return "", err
		}
		defer unix.Close(out)
		switch r.N {
		case 0:
			_, err = unix.CopyFileRange(in, nil, out, nil, 1<<20, 0)
		case 1:
			_, err = unix.Sendfile(out, in, nil, 1<<20)
		default:
			var p [2]int
			if err = unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				return "", err
			}
			defer unix.Close(p[0])
			defer unix.Close(p[1])
			if _, err = unix.Splice(in, nil, p[1], nil, 1<<16, 0); err == nil {
				_, err = unix.Splice(p[0], nil, out, nil, 1<<16, 0)
			}
		}
		return "", err
	},
	// name_to_handle_at(Path), then open_by_handle_at through a descriptor
	// of directory To (on the same file system) and a read: Data is what
	// was read.
	"open_by_handle": func(r Request) (string, error) {
		h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, r.Path, 0)
		if err != nil {
			return "", fmt.Errorf("name_to_handle_at: %w", err)
		}
		mnt, err := unix.Open(r.To, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(mnt)
		fd, err := unix.OpenByHandleAt(mnt, h, unix.O_RDONLY)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		buf := make([]byte, 256)
		n, err := unix.Read(fd, buf)
		if n < 0 {
			n = 0
		}
		return string(buf[:n]), err
	},
	// Page-cache residency of Path (opened read-only): cachestat (N 0) or
	// mincore of a mapping (N 1). Data is the number of cached pages.
	"cachestat": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if r.N == 1 {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return "", err
			}
			if st.Size == 0 {
				return "", fmt.Errorf("empty file")
			}
			m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return "", err
			}
			defer unix.Munmap(m)
			vec := make([]byte, (len(m)+4095)/4096)
			if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
				return "", e
			}
			n := 0
			for _, v := range vec {
				n += int(v & 1)
			}
			return strconv.Itoa(n), nil
		}
		var rng [2]uint64 // off, len (0: to the end)
		var cs [6]uint64  // nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted
		_, _, e := unix.Syscall6(unix.SYS_CACHESTAT, uintptr(fd), uintptr(unsafe.Pointer(&rng[0])), uintptr(unsafe.Pointer(&cs[0])), 0, 0, 0)
		if e != 0 {
			return "", e
		}
		return strconv.FormatUint(cs[0], 10), nil
	},
	// An exclusive flock on Path opened read-only (held until unlock_all).
	"flock_hold": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			return "", err
		}
		heldLocks = append(heldLocks, fd)
		return "", nil
	},
	"unlock_all": func(r Request) (string, error) {
		for _, fd := range heldLocks {
			unix.Close(fd)
		}
		heldLocks = nil
		return "", nil
	},
}

var heldLocks []int

// fileMetaOps: times and modes through the descriptor and *at variants.
var fileMetaOps = map[string]op{
	"futimesat": func(r Request) (string, error) {
		path := append([]byte(r.Path), 0)
		tv := [2]unix.Timeval{{Sec: 1}, {Sec: 1}}
		_, _, e := unix.Syscall(unix.SYS_FUTIMESAT, atFDCWD, uintptr(unsafe.Pointer(&path[0])), uintptr(unsafe.Pointer(&tv[0])))
		return "", errnoErr(e)
	},
	// utimensat(fd, "", times, AT_EMPTY_PATH) on an O_PATH descriptor.
	"utimensat_empty_path": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_PATH, func(fd int) error {
			return unix.UtimesNanoAt(fd, "", []unix.Timespec{{Sec: 1}, {Sec: 1}}, unix.AT_EMPTY_PATH)
		})
	},
	// The times of a symlink itself (AT_SYMLINK_NOFOLLOW).
	"utimes_nofollow": func(r Request) (string, error) {
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, r.Path, []unix.Timespec{{Sec: 1}, {Sec: 1}}, unix.AT_SYMLINK_NOFOLLOW)
	},
	// chmod by path with Mode, through chmod (N 0), fchmodat (1) or
	// fchmodat2 (2).
	"chmod_mode": func(r Request) (string, error) {
		path := append([]byte(r.Path), 0)
		var e unix.Errno
		switch r.N {
		case 0:
			_, _, e = unix.Syscall(unix.SYS_CHMOD, uintptr(unsafe.Pointer(&path[0])), uintptr(r.Mode), 0)
		case 1:
			_, _, e = unix.Syscall6(unix.SYS_FCHMODAT, atFDCWD, uintptr(unsafe.Pointer(&path[0])), uintptr(r.Mode), 0, 0, 0)
		default:
			_, _, e = unix.Syscall6(unix.SYS_FCHMODAT2, atFDCWD, uintptr(unsafe.Pointer(&path[0])), uintptr(r.Mode), 0, 0, 0)
		}
		return "", errnoErr(e)
	},
}

// atFDCWD is AT_FDCWD as a raw syscall argument.
var atFDCWD = uintptr(^uint(99)) // -100
