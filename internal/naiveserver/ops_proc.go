package main

import (
	"fmt"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// heldInotify and heldAIO are what inotify_hog and aio_hog hold.
var (
	heldInotify []int
	heldAIO     []uint64
)

// procOps: other processes: resource limits, scheduling, IPC objects, inotify on directories outside the scope, ...
var procOps = map[string]op{
	// Limits and scheduling of process PID (outside the run, same uid).
	"prlimit_other": func(r Request) (string, error) {
		lim := unix.Rlimit{Cur: 1, Max: 1}
		return "", unix.Prlimit(r.PID, unix.RLIMIT_NOFILE, &lim, nil)
	},
	"setpriority_other": func(r Request) (string, error) {
		return "", unix.Setpriority(unix.PRIO_PROCESS, r.PID, 19)
	},
	"setpriority_user": func(r Request) (string, error) {
		return "", unix.Setpriority(unix.PRIO_USER, 0, 19)
	},
	"sched_setaffinity_other": func(r Request) (string, error) {
		var set unix.CPUSet
		set.Set(0)
		return "", unix.SchedSetaffinity(r.PID, &set)
	},
	"sched_setscheduler_other": func(r Request) (string, error) {
		const schedIdle = 5
		param := struct{ prio int32 }{}
		_, _, e := unix.Syscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(r.PID), schedIdle, uintptr(unsafe.Pointer(&param)))
		return "", errnoErr(e)
	},
	"ioprio_set_other": func(r Request) (string, error) {
		const whoProcess, classIdle = 1, 3
		_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, whoProcess, uintptr(r.PID), classIdle<<13)
		return "", errnoErr(e)
	},
	// SysV shared memory of another process, by key (N): attach and read.
	"shm_read": func(r Request) (string, error) {
		id, err := unix.SysvShmGet(r.N, 0, 0)
		if err != nil {
			return "", err
		}
		b, err := unix.SysvShmAttach(id, 0, unix.SHM_RDONLY)
		if err != nil {
			return "", err
		}
		defer unix.SysvShmDetach(b)
		n := 0
		for n < len(b) && b[n] != 0 {
			n++
		}
		return string(b[:n]), nil
	},
	"msgget": func(r Request) (string, error) {
		id, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(r.N), 0, 0)
		if e != 0 {
			return "", e
		}
		return strconv.Itoa(int(id)), nil
	},
	"mq_open": func(r Request) (string, error) {
		name := append([]byte(r.Name), 0)
		fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(&name[0])), unix.O_RDONLY, 0, 0, 0, 0)
		if e != 0 {
			return "", e
		}
		unix.Close(int(fd))
		return "", nil
	},
	// Inotify instances, as many as the kernel gives (up to N), held
	// until inotify_release: fs.inotify.max_user_instances is per host
	// uid (and charged to each user namespace's owner), so whatever the
	// run holds, the other processes of that uid lack. Data: the count.
	"inotify_hog": func(r Request) (string, error) {
		var err error
		for len(heldInotify) < r.N {
			fd, e := unix.InotifyInit1(unix.IN_CLOEXEC)
			if e != nil {
				err = e
				break
			}
			heldInotify = append(heldInotify, fd)
		}
		if len(heldInotify) == 0 {
			return "0", err
		}
		return strconv.Itoa(len(heldInotify)), nil
	},
	"inotify_release": func(r Request) (string, error) {
		for _, fd := range heldInotify {
			unix.Close(fd)
		}
		heldInotify = nil
		return "", nil
	},
	// Linux AIO contexts of N events each, as many as the kernel gives,
	// held until the server exits: fs.aio-max-nr (65536 events) is one budget
	// for the whole host. Data: the count.
	"aio_hog": func(r Request) (string, error) {
		var err error
		for len(heldAIO) < 1<<16 {
			var ctx uint64
			if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(r.N), uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
				err = e
				break
			}
			heldAIO = append(heldAIO, ctx)
		}
		if len(heldAIO) == 0 {
			return "0", err
		}
		return strconv.Itoa(len(heldAIO)), nil
	},
	// Real-time signal Sig queued to this thread (which blocks it, so
	// they stay pending) up to N times or until the kernel says EAGAIN:
	// pending signals count per user (RLIMIT_SIGPENDING) and up each user
	// namespace's owner. The thread stays locked, holding them, until the
	// server exits. Data: the count.
	"sigqueue_hog": func(r Request) (string, error) {
		runtime.LockOSThread()
		set := uint64(1) << (r.Sig - 1)
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0); e != 0 {
			return "", e
		}
		pid, tid := unix.Getpid(), unix.Gettid()
		n := 0
		var err error
		for ; n < r.N; n++ {
			if err = unix.Tgkill(pid, tid, unix.Signal(r.Sig)); err != nil {
				break
			}
		}
		if n == 0 {
			return "0", err
		}
		return strconv.Itoa(n), nil
	},
	// 2 MiB huge pages of the host's reserved pool, mapped and touched
	// until the kernel says no (at most N), held until the server exits.
	// Data: the count.
	"hugetlb_hog": func(r Request) (string, error) {
		var err error
		n := 0
		for ; n < r.N; n++ {
			if _, err = unix.Mmap(-1, 0, 2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_POPULATE); err != nil {
				break
			}
		}
		if n == 0 {
			return "0", err
		}
		return strconv.Itoa(n), nil
	},
	// An inotify watch on a directory the fence will not list.
	"inotify_watch": func(r Request) (string, error) {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			return "", fmt.Errorf("inotify_init1: %w", err)
		}
		defer unix.Close(fd)
		_, err = unix.InotifyAddWatch(fd, r.Path, unix.IN_CREATE)
		return "", err
	},
}
