// Package rawproc holds the process tricks of the hostile tests that Go's
// runtime does not offer: a fork without exec whose child only sleeps
// (cheap enough to fork hundreds of, for a fork bomb that stays bounded)
// and ending the main thread while the other threads live on.
//
// Test code only: a forked child of a multi-threaded Go process may only
// make raw system calls, which is all the child here ever does.
package rawproc

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// ForkPause forks the calling process. The child sleeps until it is killed
// (it never returns to Go code); the parent gets the child's pid.
func ForkPause() (int, error) {
	pid, errno := forkPause()
	if errno != 0 {
		return 0, errno
	}
	return pid, nil
}

// forkPause must not grow its stack or enter the scheduler between the
// fork and the child's sleep: the child has one thread and no runtime.
//
//go:nosplit
//go:norace
func forkPause() (int, syscall.Errno) {
	// clone(SIGCHLD, 0, ...) is fork(2), on every architecture.
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if pid == 0 {
		for {
			// ppoll(NULL, 0, NULL, NULL): sleep until a signal (SIGKILL).
			syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
		}
	}
	return int(pid), 0
}

// ExitMainThread ends the calling thread only, not the process. Called from
// the main goroutine locked to the main thread (runtime.LockOSThread in an
// init function), it leaves a process whose thread-group leader is a zombie
// while its other threads (the Go runtime's, and the goroutines they run)
// live on: /proc/PID/stat says "Z" for a process that still runs.
// It never returns.
func ExitMainThread() {
	runtime.LockOSThread()
	for {
		// Syscall, not RawSyscall: the runtime then treats this goroutine
		// as blocked in a system call forever, and keeps running the others.
		syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
	}
}

// ForkHop forks a child that hops: it forks and exits, its child forks
// and exits, and so on, n times, each generation a new pid, then ends
// (a process of the run that is never the same one for long: a kill list
// made from pids is always stale). The parent gets the first child's pid.
// Each generation writes its number and process group where Hops reads
// them: a scan of /proc rarely catches a process that lives for one fork.
func ForkHop(n int) (int, error) {
	hopPageOnce.Do(func() {
		var b []byte
		b, hopPageErr = syscall.Mmap(-1, 0, syscall.Getpagesize(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
		if hopPageErr == nil {
			hopPage = (*[2]uint64)(unsafe.Pointer(&b[0]))
		}
	})
	if hopPageErr != nil {
		return 0, hopPageErr
	}
	pid, errno := forkHop(uintptr(n), hopPage)
	if errno != 0 {
		return 0, errno
	}
	return pid, nil
}

// Hops returns the generation of the latest hopper of ForkHop (0: none
// forked yet) and its process group, as it wrote them.
func Hops() (generation uint64, pgid int) {
	if hopPage == nil {
		return 0, 0
	}
	return atomic.LoadUint64(&hopPage[0]), int(atomic.LoadUint64(&hopPage[1]))
}

var (
	hopPageOnce sync.Once
	hopPage     *[2]uint64 // shared (MAP_SHARED) with every hopper
	hopPageErr  error
)

//go:nosplit
//go:norace
func forkHop(n uintptr, page *[2]uint64) (int, syscall.Errno) {
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if pid != 0 {
		return int(pid), 0
	}
	for i := uintptr(0); i < n; i++ {
		p, _, _ := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
		if p != 0 {
			syscall.RawSyscall6(syscall.SYS_EXIT_GROUP, 0, 0, 0, 0, 0, 0)
		}
		// The new generation (plain stores: no runtime in this child).
		pg, _, _ := syscall.RawSyscall6(syscall.SYS_GETPGID, 0, 0, 0, 0, 0, 0)
		page[1] = uint64(pg)
		page[0] = uint64(i + 1)
	}
	syscall.RawSyscall6(syscall.SYS_EXIT_GROUP, 0, 0, 0, 0, 0, 0)
	return 0, 0
}
