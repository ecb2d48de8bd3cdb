package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// metaOps: metadata: times, extended attributes, ACLs, mode bits, set-id files, ...
var metaOps = map[string]op{
	// Times: by path (reaches any file), and through a read-only descriptor.
	"utimes_path": func(r Request) (string, error) {
		ts := []unix.Timespec{{Sec: 1}, {Sec: 1}}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, r.Path, ts, 0)
	},
	"futimens": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_RDONLY, func(fd int) error {
			ts := [2]unix.Timespec{{Sec: 1}, {Sec: 1}}
			_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
			return errnoErr(e)
		})
	},
	// Times set to now, which the kernel lets any process that may write
	// the file do (not only its owner): by path (utimensat with a NULL
	// times pointer), and through a descriptor opened for writing (N 1).
	"touch_now": func(r Request) (string, error) {
		if r.N == 1 {
			return "", withFD(r.Path, unix.O_WRONLY, func(fd int) error {
				_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, 0, 0, 0, 0)
				return errnoErr(e)
			})
		}
		path := append([]byte(r.Path), 0)
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, atFDCWD, uintptr(unsafe.Pointer(&path[0])), 0, 0, 0, 0)
		return "", errnoErr(e)
	},
	// Extended attributes: Name (default user.mcpwarden) = Value.
	"setxattr": func(r Request) (string, error) {
		return "", unix.Setxattr(r.Path, xattrName(r), []byte(r.Value), 0)
	},
	"fsetxattr": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_RDONLY, func(fd int) error {
			return unix.Fsetxattr(fd, xattrName(r), []byte(r.Value), 0)
		})
	},
	// setxattrat (Linux 6.13): the same by (dirfd, path).
	"setxattrat": func(r Request) (string, error) {
		path := append([]byte(r.Path), 0)
		name := append([]byte(xattrName(r)), 0)
		value := []byte(r.Value + "\x00")
		args := struct {
			value       uint64
			size, flags uint32
		}{uint64(uintptr(unsafe.Pointer(&value[0]))), uint32(len(r.Value)), 0}
		cwd := unix.AT_FDCWD
		_, _, e := unix.Syscall6(unix.SYS_SETXATTRAT, uintptr(cwd), uintptr(unsafe.Pointer(&path[0])), 0,
			uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
		runtime.KeepAlive(value)
		return "", errnoErr(e)
	},
	"removexattr": func(r Request) (string, error) {
		return "", unix.Removexattr(r.Path, xattrName(r))
	},
	"getxattr": func(r Request) (string, error) {
		buf := make([]byte, 4096)
		n, err := unix.Getxattr(r.Path, xattrName(r), buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	},
	// A POSIX access ACL is in effect a chmod: this one gives others rwx
	// (Mode's user/group/other bits become the ACL's entries).
	"setacl": func(r Request) (string, error) {
		return "", unix.Setxattr(r.Path, "system.posix_acl_access", aclOf(r.Mode), 0)
	},
	// Mode bits through a descriptor: Landlock checked the open, not this.
	"fchmod": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_RDONLY, func(fd int) error { return unix.Fchmod(fd, r.Mode) })
	},
	"fchmodat2_empty_path": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_PATH, func(fd int) error {
			empty := []byte{0}
			_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])), uintptr(r.Mode), unix.AT_EMPTY_PATH, 0, 0)
			return errnoErr(e)
		})
	},
	"fchown": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_RDONLY, func(fd int) error { return unix.Fchown(fd, -1, unix.Getgid()) })
	},
	"chown_path": func(r Request) (string, error) {
		return "", unix.Chown(r.Path, -1, unix.Getgid())
	},
	// chattr through FS_IOC_SETFLAGS (Flags, e.g. FS_NOATIME_FL).
	"chattr": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_RDONLY, func(fd int) error {
			return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, r.Flags)
		})
	},
	// Set-id files: created with the bits in the mode (open, mknod, an
	// O_TMPFILE in Path's directory), or given them later. Data is the
	// resulting mode, in octal.
	"create_mode": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, r.Mode)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return modeOf(fd)
	},
	"mknod_mode": func(r Request) (string, error) {
		if err := unix.Mknod(r.Path, unix.S_IFREG|r.Mode, 0); err != nil {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Stat(r.Path, &st); err != nil {
			return "", err
		}
		return strconv.FormatUint(uint64(st.Mode&0o7777), 8), nil
	},
	// A character device node at Path, device number N (0: a whiteout,
	// which the kernel lets any process make without CAP_MKNOD).
	"mknod_char": func(r Request) (string, error) {
		return "", unix.Mknod(r.Path, unix.S_IFCHR|0o644, r.N)
	},
	"tmpfile_mode": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, r.Mode)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return modeOf(fd)
	},
}

func xattrName(r Request) string {
	if r.Name != "" {
		return r.Name
	}
	return "user.mcpwarden"
}

func withFD(path string, flags int, f func(fd int) error) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

func modeOf(fd int) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	return strconv.FormatUint(uint64(st.Mode&0o7777), 8), nil
}

func errnoErr(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// aclOf encodes a minimal POSIX ACL (user::, group::, other::) with the
// permissions of mode, in the kernel's xattr format (version 2).
func aclOf(mode uint32) []byte {
	const (
		aclUserObj  = 0x01
		aclGroupObj = 0x04
		aclOther    = 0x20
		undefinedID = 0xffffffff
	)
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct{ tag, perm uint16 }{
		{aclUserObj, uint16(mode>>6) & 7},
		{aclGroupObj, uint16(mode>>3) & 7},
		{aclOther, uint16(mode) & 7},
	} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, undefinedID)
	}
	return b
}

// modeOps: ways to a world-writable entry in a write scope. Each sets the
// umask to Mode first (0: the attacker's), creates, and answers the mode
// the kernel gave, in octal.
var modeOps = map[string]op{
	// umask(Mode), then by N: mkdir(Path, 0777) (0), open(Path, O_CREAT,
	// 0666) (1), mknod(Path, S_IFIFO|0666) (2), an O_TMPFILE 0666 in the
	// directory Path linked as To (3).
	"umask_create": func(r Request) (string, error) {
		unix.Umask(int(r.Mode))
		name := r.Path
		switch r.N {
		case 0:
			if err := unix.Mkdir(r.Path, 0o777); err != nil {
				return "", err
			}
		case 1:
			fd, err := unix.Open(r.Path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
			if err != nil {
				return "", err
			}
			unix.Close(fd)
		case 2:
			if err := unix.Mknod(r.Path, unix.S_IFIFO|0o666, 0); err != nil {
				return "", err
			}
		default:
			fd, err := unix.Open(r.Path, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o666)
			if err != nil {
				return "", err
			}
			defer unix.Close(fd)
			if err := unix.Linkat(fd, "", unix.AT_FDCWD, r.To, unix.AT_EMPTY_PATH); err != nil {
				return "", err
			}
			name = r.To
		}
		return lmodeOf(name)
	},
	// old = umask(0); umask(old): how programs read their umask. Data is
	// "old final", final as /proc/self/status tells it.
	"umask_read": func(r Request) (string, error) {
		old := unix.Umask(0)
		unix.Umask(old)
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return "", err
		}
		final := "?"
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Umask:"); ok {
				final = strings.TrimSpace(v)
			}
		}
		return fmt.Sprintf("%o %s", old, final), nil
	},
	// fchmod(Mode) on an O_PATH descriptor of Path.
	"fchmod_opath": func(r Request) (string, error) {
		return "", withFD(r.Path, unix.O_PATH, func(fd int) error { return unix.Fchmod(fd, r.Mode) })
	},
	// A file made in $TMPDIR (umask 0, mode 0666, then fchmod Mode), renamed
	// to To: the mode it arrives with.
	"tmpdir_rename": func(r Request) (string, error) {
		unix.Umask(0)
		from := filepath.Join(os.Getenv("TMPDIR"), "mcpwarden-ww")
		fd, err := unix.Open(from, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return "", fmt.Errorf("create in TMPDIR: %w", err)
		}
		_ = unix.Fchmod(fd, r.Mode)
		unix.Close(fd)
		if err := unix.Rename(from, r.To); err != nil {
			return "", err
		}
		return lmodeOf(r.To)
	},
}

func lmodeOf(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return "", err
	}
	return strconv.FormatUint(uint64(st.Mode&0o7777), 8), nil
}
