package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// surfaceOps: the kernel's other doors: other syscall ABIs, socket
// families, kernel interfaces a server never needs, host files that a
// server running as uid 0 (without capabilities) may write by DAC alone,
// and the operator's channel (stderr).
var surfaceOps = map[string]op{
	// A syscall through another ABI: Name "x32" (the number with bit 30
	// set, x86_64's x32 ABI) or "i386" (int 0x80 from this 64-bit
	// process), number N, arguments from Args (decimal).
	"abi_syscall": func(r Request) (string, error) {
		var a [3]uintptr
		for i, s := range r.Args {
			if i < len(a) {
				a[i] = uintptr(atoiOr(s, 0))
			}
		}
		switch r.Name {
		case "x32":
			ret, _, e := unix.Syscall(uintptr(r.N)|0x40000000, a[0], a[1], a[2])
			if e != 0 {
				return "", e
			}
			if r.N == unix.SYS_SOCKET {
				unix.Close(int(ret))
			}
			return itoa(int(ret)), nil
		case "i386":
			ret, e := int80(uintptr(r.N), a[0], a[1], a[2])
			if e != 0 {
				return "", e
			}
			return itoa(int(ret)), nil
		}
		return "", unix.EINVAL
	},
	// A raw syscall by number N with up to six arguments from Args.
	"raw_syscall": func(r Request) (string, error) {
		var a [6]uintptr
		for i, s := range r.Args {
			if i < len(a) {
				a[i] = uintptr(atoiOr(s, 0))
			}
		}
		ret, _, e := unix.Syscall6(uintptr(r.N), a[0], a[1], a[2], a[3], a[4], a[5])
		if e != 0 {
			return "", e
		}
		return itoa(int(ret)), nil
	},
	// socket(Flags, Mode, N): family, type, protocol; closed at once.
	"socket": func(r Request) (string, error) {
		fd, err := unix.Socket(r.Flags, int(r.Mode), r.N)
		if err != nil {
			return "", err
		}
		unix.Close(fd)
		return "", nil
	},
	// A NETLINK_ROUTE datagram to the netlink socket of port id N (another
	// process's: the kernel's own is 0).
	"netlink_sendto": func(r Request) (string, error) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Sendto(fd, make([]byte, 20), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: uint32(r.N)})
	},
	// A Landlock domain nested in the run's, handling file reads with no
	// rule (so it denies every read), made with landlock_restrict_self
	// flags Flags on a thread of its own, which then opens Path and dies
	// (Go ends a goroutine's thread that is still locked). Data: the
	// open's errno; the error is restrict_self's.
	"landlock_nested": func(r Request) (string, error) {
		type result struct {
			data string
			err  error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			attr := struct{ fs, net, scoped uint64 }{fs: unix.LANDLOCK_ACCESS_FS_READ_FILE}
			fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
			if e != 0 {
				ch <- result{err: e}
				return
			}
			defer unix.Close(int(fd))
			if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, uintptr(r.Flags), 0); e != 0 {
				ch <- result{err: e}
				return
			}
			f, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(f)
				ch <- result{data: "opened"}
				return
			}
			ch <- result{data: unix.ErrnoName(err.(unix.Errno))}
		}()
		res := <-ch
		return res.data, res.err
	},
	// A TCP socket connected to Addr, disconnected with an AF_UNSPEC
	// connect, then connected again to To on the same socket.
	"tcp_reconnect": func(r Request) (string, error) {
		fd, sa, err := tcpTo(r.Addr)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return "", err
		}
		unspec := unix.RawSockaddrAny{}
		unspec.Addr.Family = unix.AF_UNSPEC
		if _, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&unspec)), unix.SizeofSockaddrInet4); e != 0 {
			return "", e
		}
		_, to, err := tcpTo(r.To)
		if err != nil {
			return "", err
		}
		return "", unix.Connect(fd, to)
	},
	// The kernel interfaces by name, each with harmless arguments: what
	// matters is whether the call reaches the kernel's own checks.
	"kernel_call": func(r Request) (string, error) {
		return "", kernelCall(r.Name)
	},
	// open(Path, O_WRONLY) without writing anything: whether the server
	// could write a host file (a sysctl, sysrq, a cgroup's limits).
	"open_write": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		unix.Close(fd)
		return "", nil
	},
	// The run's own cgroup directories (from /proc/self/cgroup, as
	// "hierarchy:path" lines with the hierarchy's mount under
	// /sys/fs/cgroup) and their parents' (the launcher's): one per line.
	"cgroup_dirs": func(r Request) (string, error) {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return "", err
		}
		var dirs []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 || f[2] == "/" {
				continue
			}
			mount := "/sys/fs/cgroup/unified"
			if f[1] != "" {
				mount = "/sys/fs/cgroup/" + strings.TrimPrefix(f[1], "name=")
			}
			dirs = append(dirs, mount+f[2])
		}
		return strings.Join(dirs, "\n"), nil
	},
	// N bytes written to stderr as lines of 100, as fast as it goes.
	"stderr_flood": func(r Request) (string, error) {
		line := []byte(strings.Repeat("f", 99) + "\n")
		chunk := []byte(strings.Repeat(string(line), 640)) // 64000 bytes
		for left := r.N; left > 0; {
			n := min(left, len(chunk))
			if _, err := os.Stderr.Write(chunk[:n]); err != nil {
				return "", err
			}
			left -= n
		}
		return "", nil
	},
}

func atoiOr(s string, def int) int {
	n := 0
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return def
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return def
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		return -n
	}
	return n
}

// kernelCall makes one call of a kernel interface the fence refuses.
func kernelCall(name string) error {
	str := func(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }
	var e unix.Errno
	call := func(nr uintptr, a ...uintptr) {
		var x [6]uintptr
		copy(x[:], a)
		_, _, e = unix.Syscall6(nr, x[0], x[1], x[2], x[3], x[4], x[5])
	}
	var buf [256]byte
	p := uintptr(unsafe.Pointer(&buf[0]))
	const keySpecSession = ^uintptr(2) // KEY_SPEC_SESSION_KEYRING, -3
	switch name {
	case "add_key":
		call(unix.SYS_ADD_KEY, str("user"), str("mcpwarden-test"), str("v"), 1, keySpecSession)
	case "keyctl":
		call(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, keySpecSession, 0)
	case "request_key":
		call(unix.SYS_REQUEST_KEY, str("user"), str("mcpwarden-test"), 0, 0)
	case "userfaultfd":
		call(unix.SYS_USERFAULTFD, unix.O_CLOEXEC)
	case "perf_event_open":
		attr := (*unix.PerfEventAttr)(unsafe.Pointer(&buf[0]))
		attr.Type = unix.PERF_TYPE_SOFTWARE
		attr.Size = uint32(unsafe.Sizeof(unix.PerfEventAttr{}))
		attr.Config = unix.PERF_COUNT_SW_CPU_CLOCK
		call(unix.SYS_PERF_EVENT_OPEN, p, 0, ^uintptr(0), ^uintptr(0), 0)
	case "bpf":
		call(unix.SYS_BPF, unix.BPF_MAP_CREATE, p, 72)
	case "fsopen":
		call(unix.SYS_FSOPEN, str("tmpfs"), 0)
	case "fspick":
		call(unix.SYS_FSPICK, ^uintptr(99), str("/"), 0) // AT_FDCWD
	case "open_tree":
		call(unix.SYS_OPEN_TREE, ^uintptr(99), str("/"), unix.OPEN_TREE_CLONE)
	case "move_mount":
		call(unix.SYS_MOVE_MOUNT, ^uintptr(99), str("/"), ^uintptr(99), str("/"), 0)
	case "mount_setattr":
		call(unix.SYS_MOUNT_SETATTR, ^uintptr(99), str("/"), 0, p, 32)
	case "mount":
		call(unix.SYS_MOUNT, str("none"), str("/"), str("tmpfs"), 0, 0)
	case "umount":
		call(unix.SYS_UMOUNT2, str("/"), unix.MNT_DETACH)
	case "pivot_root":
		call(unix.SYS_PIVOT_ROOT, str("."), str("."))
	case "chroot":
		call(unix.SYS_CHROOT, str("/"))
	case "unshare_time":
		call(unix.SYS_UNSHARE, unix.CLONE_NEWTIME)
	case "unshare_cgroup":
		call(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP)
	case "unshare_user":
		call(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	case "setns_pidfd":
		pfd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		call(unix.SYS_SETNS, uintptr(pfd), unix.CLONE_NEWNET)
	case "clone3":
		call(unix.SYS_CLONE3, p, 88)
	case "iopl":
		call(unix.SYS_IOPL, 3)
	case "ioperm":
		call(unix.SYS_IOPERM, 0x80, 1, 1)
	case "clock_settime":
		call(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, p)
	case "settimeofday":
		call(unix.SYS_SETTIMEOFDAY, 0, 0)
	case "acct":
		call(unix.SYS_ACCT, 0)
	case "swapoff":
		call(unix.SYS_SWAPOFF, str("/nonexistent"))
	case "syslog":
		call(unix.SYS_SYSLOG, 3, p, uintptr(len(buf))) // SYSLOG_ACTION_READ_ALL
	case "kexec_load":
		call(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0)
	case "init_module":
		call(unix.SYS_INIT_MODULE, p, 0, str(""))
	case "delete_module":
		call(unix.SYS_DELETE_MODULE, str("mcpwarden_none"), 0)
	case "reboot":
		call(unix.SYS_REBOOT, unix.LINUX_REBOOT_MAGIC1, unix.LINUX_REBOOT_MAGIC2, 0) // LINUX_REBOOT_CMD_CAD_OFF
	case "quotactl":
		call(unix.SYS_QUOTACTL, 0x800007, str("/"), 0, p) // Q_GETFMT
	case "fanotify_init":
		call(unix.SYS_FANOTIFY_INIT, 0, 0)
	case "memfd_secret":
		call(unix.SYS_MEMFD_SECRET, 0)
	case "kcmp":
		call(unix.SYS_KCMP, uintptr(os.Getpid()), 1, 0, 0, 0) // KCMP_FILE
	case "pidfd_getfd":
		pfd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		call(unix.SYS_PIDFD_GETFD, uintptr(pfd), 0, 0)
	default:
		return unix.EINVAL
	}
	if e != 0 {
		return e
	}
	return nil
}

// fsIoctlOps: file system ioctls on a directory the server opened
// read-only (Landlock checks opens, mkdir and the like, not these).
var fsIoctlOps = map[string]op{
	// fcntl(fd, N, Flags) on Path opened read-only (F_SETLEASE, F_NOTIFY
	// on a directory ...).
	"fcntl": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		v, err := unix.FcntlInt(uintptr(fd), r.N, r.Flags)
		return strconv.Itoa(v), err
	},
	// fallocate(fd, N, 0, 4096) on Path opened read-only, or for writing
	// with Flags 1 (N: FALLOC_FL_PUNCH_HOLE|KEEP_SIZE, COLLAPSE_RANGE ...).
	"fallocate": func(r Request) (string, error) {
		mode := unix.O_RDONLY
		if r.Flags == 1 {
			mode = unix.O_RDWR
		}
		fd, err := unix.Open(r.Path, mode|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Fallocate(fd, uint32(r.N), 0, 4096)
	},
	// Any ioctl request N on Path (opened read-only, or for writing with
	// Flags 1), with a zeroed 4 KiB buffer as its argument; the answer is
	// the call's return value.
	"ioctl": func(r Request) (string, error) {
		mode := unix.O_RDONLY
		if r.Flags == 1 {
			mode = unix.O_RDWR
		}
		fd, err := unix.Open(r.Path, mode|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		var buf [4096]byte
		ret, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(uint32(r.N)), uintptr(unsafe.Pointer(&buf[0])))
		if e != 0 {
			return "", e
		}
		return strconv.Itoa(int(ret)), nil
	},
	// A btrfs subvolume named Name made in directory Path: Flags 0 with
	// BTRFS_IOC_SUBVOL_CREATE, 1 with BTRFS_IOC_SUBVOL_CREATE_V2, 2 a
	// snapshot of the subvolume Path is in (BTRFS_IOC_SNAP_CREATE_V2).
	"btrfs_subvol": func(r Request) (string, error) {
		d, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(d)
		const (
			subvolCreate   = 0x5000940e // BTRFS_IOC_SUBVOL_CREATE
			snapCreateV2   = 0x50009417 // BTRFS_IOC_SNAP_CREATE_V2
			subvolCreateV2 = 0x50009418 // BTRFS_IOC_SUBVOL_CREATE_V2
		)
		// struct btrfs_ioctl_vol_args: fd, name[4088]; _v2: fd, transid,
		// flags, 32 bytes of union, then the name at 56.
		var args [4096]byte
		switch r.Flags {
		case 0:
			copy(args[8:], r.Name)
			return "", ioctlPtr(d, subvolCreate, unsafe.Pointer(&args[0]))
		case 1:
			copy(args[56:], r.Name)
			return "", ioctlPtr(d, subvolCreateV2, unsafe.Pointer(&args[0]))
		default:
			*(*int64)(unsafe.Pointer(&args[0])) = int64(d) // the source: the subvolume of Path
			copy(args[56:], r.Name)
			return "", ioctlPtr(d, snapCreateV2, unsafe.Pointer(&args[0]))
		}
	},
	// A v1 fscrypt policy set on the empty directory Path: files the host
	// makes there afterwards need a key it does not have.
	"fscrypt_policy": func(r Request) (string, error) {
		d, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(d)
		p := unix.FscryptPolicyV1{Version: 0, Contents_encryption_mode: unix.FSCRYPT_MODE_AES_256_XTS, Filenames_encryption_mode: unix.FSCRYPT_MODE_AES_256_CTS}
		copy(p.Master_key_descriptor[:], "mcpwardn")
		return "", ioctlPtr(d, unix.FS_IOC_SET_ENCRYPTION_POLICY, unsafe.Pointer(&p))
	},
}

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}
