package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pidfdOps: other processes through pidfds, ptrace, prctl and the tty.
var pidfdOps = map[string]op{
	// PIDFD_GET_INFO of process PID (Linux 6.13): Data is its ppid, uids
	// and cgroup id, which /proc/PID (out of the fence's reach) would tell.
	"pidfd_info": func(r Request) (string, error) {
		fd, err := unix.PidfdOpen(r.PID, 0)
		if err != nil {
			return "", fmt.Errorf("pidfd_open: %w", err)
		}
		defer unix.Close(fd)
		var info [64]byte                            // struct pidfd_info, version 0
		binary.LittleEndian.PutUint64(info[0:], 0x3) // PIDFD_INFO_PID | PIDFD_INFO_CREDS
		const pidfdGetInfo = 0xc040ff0b              // _IOWR(0xFF, 11, struct pidfd_info)
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), pidfdGetInfo, uintptr(unsafe.Pointer(&info[0])))
		if e != 0 {
			return "", e
		}
		le := binary.LittleEndian
		return fmt.Sprintf("pid=%d ppid=%d ruid=%d cgroupid=%d", le.Uint32(info[16:]), le.Uint32(info[24:]), le.Uint32(info[28:]), le.Uint64(info[8:])), nil
	},
	// PIDFD_GET_MNT_NAMESPACE (Flags: 1..10, the namespace ioctl's number)
	// of process PID: a descriptor of another process's namespace.
	"pidfd_ns": func(r Request) (string, error) {
		fd, err := unix.PidfdOpen(r.PID, 0)
		if err != nil {
			return "", fmt.Errorf("pidfd_open: %w", err)
		}
		defer unix.Close(fd)
		ns, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(0xff00|r.Flags), 0) // _IO(0xFF, Flags)
		if e != 0 {
			return "", e
		}
		unix.Close(int(ns))
		return "", nil
	},
	"pidfd_signal": func(r Request) (string, error) {
		fd, err := unix.PidfdOpen(r.PID, 0)
		if err != nil {
			return "", fmt.Errorf("pidfd_open: %w", err)
		}
		defer unix.Close(fd)
		return "", unix.PidfdSendSignal(fd, unix.Signal(r.Sig), nil, 0)
	},
	// SIGIO/SIGURG (Sig) delivered to PID through F_SETOWN and O_ASYNC on
	// a pipe this server writes to.
	"sigio_other": func(r Request) (string, error) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return "", err
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETOWN, r.PID); err != nil {
			return "", err
		}
		if r.Sig != 0 {
			if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETSIG, r.Sig); err != nil {
				return "", err
			}
		}
		fl, err := unix.FcntlInt(uintptr(p[0]), unix.F_GETFL, 0)
		if err != nil {
			return "", err
		}
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, fl|unix.O_ASYNC); err != nil {
			return "", err
		}
		_, err = unix.Write(p[1], []byte("x"))
		return "", err
	},
	// ptrace attach (Flags 0) or seize (1) of PID, or PTRACE_TRACEME (2).
	"ptrace": func(r Request) (string, error) {
		req := map[int]int{0: unix.PTRACE_ATTACH, 1: unix.PTRACE_SEIZE, 2: unix.PTRACE_TRACEME}[r.Flags]
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(r.PID), 0, 0, 0, 0)
		if e == 0 && req != unix.PTRACE_TRACEME {
			_, _, _ = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(r.PID), 0, 0, 0, 0)
		}
		return "", errnoErr(e)
	},
	// process_vm_readv of PID's memory at its own stack-ish address.
	"process_vm_readv": func(r Request) (string, error) {
		buf := make([]byte, 16)
		local := []unix.Iovec{{Base: &buf[0], Len: 16}}
		remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&buf[0])), Len: 16}}
		_, err := unix.ProcessVMReadv(r.PID, local, remote, 0)
		return "", err
	},
	// PR_SCHED_CORE: create a core-scheduling cookie for PID (N 0) or
	// pull PID's into this process (N 1).
	"sched_core_other": func(r Request) (string, error) {
		const prSchedCore, create, shareFrom, typeThread = 62, 1, 3, 0
		cmd := create
		if r.N == 1 {
			cmd = shareFrom
		}
		_, _, e := unix.Syscall6(unix.SYS_PRCTL, prSchedCore, uintptr(cmd), uintptr(r.PID), typeThread, 0, 0)
		return "", errnoErr(e)
	},
	"personality": func(r Request) (string, error) {
		old, _, e := unix.Syscall(unix.SYS_PERSONALITY, uintptr(uint32(r.Flags)), 0, 0)
		if e != 0 {
			return "", e
		}
		_, _, _ = unix.Syscall(unix.SYS_PERSONALITY, old, 0, 0)
		return fmt.Sprintf("%#x", old), nil
	},
	// TIOCSTI (N 0) or TIOCLINUX (N 1) on descriptor FD, or on /dev/tty
	// when Path names it.
	"tty_inject": func(r Request) (string, error) {
		fd := r.FD
		if r.Path != "" {
			f, err := os.OpenFile(r.Path, os.O_RDWR, 0)
			if err != nil {
				return "", err
			}
			defer f.Close()
			fd = int(f.Fd())
		}
		c := byte('x')
		req := uintptr(unix.TIOCSTI)
		if r.N == 1 {
			req, c = unix.TIOCLINUX, 2 // TIOCL_SETSEL-ish: any subcode
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&c)))
		return "", errnoErr(e)
	},
	// Raise RLIMIT_CORE (0 in every enforced run, hard limit included).
	"core_limit": func(r Request) (string, error) {
		lim := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
		return "", unix.Setrlimit(unix.RLIMIT_CORE, &lim)
	},
	// RLIMIT_NOFILE as "soft hard"; with N > 0, first try to raise both to
	// N (above the hard limit that needs CAP_SYS_RESOURCE).
	"nofile_limit": func(r Request) (string, error) {
		if r.N > 0 {
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(r.N), Max: uint64(r.N)}); err != nil {
				return "", err
			}
		}
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %d", lim.Cur, lim.Max), nil
	},
	// Raise the soft and hard RLIMIT_RTPRIO (Name "rtprio") or RLIMIT_NICE
	// ("nice") to 1, then (rtprio) run SCHED_FIFO: real-time threads
	// starve the host's CPUs.
	"raise_sched_limit": func(r Request) (string, error) {
		res := map[string]int{"rtprio": unix.RLIMIT_RTPRIO, "nice": unix.RLIMIT_NICE}[r.Name]
		if res == 0 {
			return "", fmt.Errorf("name must be rtprio or nice")
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: 1, Max: 1}); err != nil {
			return "", err
		}
		if res != unix.RLIMIT_RTPRIO {
			return "", nil
		}
		const schedFIFO = 1
		param := struct{ prio int32 }{1}
		_, _, e := unix.Syscall(unix.SYS_SCHED_SETSCHEDULER, 0, schedFIFO, uintptr(unsafe.Pointer(&param)))
		return "", errnoErr(e)
	},
	// execveat(fd, "", AT_EMPTY_PATH) of an O_PATH descriptor of Path (a
	// script whose interpreter does not exist: ENOENT means the exec got
	// as far as reading it, and this process is not replaced), or (N 1) a
	// child's execve of /proc/self/fd/N of the same descriptor ("pong"
	// means it ran).
	"exec_opath": func(r Request) (string, error) {
		fd, err := unix.Open(r.Path, unix.O_PATH, 0) // inherited by the child for N 1
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if r.N == 1 {
			return pingChild(exec.Command(fmt.Sprintf("/proc/self/fd/%d", fd)))
		}
		empty := []byte{0}
		arg0 := []byte("payload\x00")
		argv := []*byte{&arg0[0], nil}
		envp := []*byte{nil}
		_, _, e := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])),
			uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
		return "", errnoErr(e)
	},
}

// heldSockets are what abstract_bind holds.
var heldSockets []int

// abstractOps: names in the abstract unix socket namespace, which is the
// network namespace's.
var abstractOps = map[string]op{
	// Bind one end of a socketpair (the only unix sockets the filter lets
	// the server make) to the abstract name Name, and hold it: a service
	// outside the run that binds the name later gets EADDRINUSE.
	"abstract_bind": func(r Request) (string, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("socketpair: %w", err)
		}
		if err := unix.Bind(fds[0], &unix.SockaddrUnix{Name: "@" + r.Name}); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return "", err
		}
		heldSockets = append(heldSockets, fds[0], fds[1])
		return "", nil
	},
}

// signalOps: signals to another process by the calls besides kill().
var signalOps = map[string]op{
	// rt_sigqueueinfo (N 0) or tgkill (N 1) of signal Sig to PID.
	"signal_other": func(r Request) (string, error) {
		if r.N == 1 {
			return "", unix.Tgkill(r.PID, r.PID, unix.Signal(r.Sig))
		}
		var info [128]byte // siginfo_t: si_signo, si_errno, si_code = SI_QUEUE (-1)
		binary.LittleEndian.PutUint32(info[0:], uint32(r.Sig))
		binary.LittleEndian.PutUint32(info[8:], ^uint32(0))
		_, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(r.PID), uintptr(r.Sig), uintptr(unsafe.Pointer(&info[0])))
		return "", errnoErr(e)
	},
}
