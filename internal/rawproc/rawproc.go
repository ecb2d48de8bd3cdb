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
	"syscall"
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
func ForkHop(n int) (int, error) {
	pid, errno := forkHop(uintptr(n))
	if errno != 0 {
		return 0, errno
	}
	return pid, nil
}

//go:nosplit
//go:norace
func forkHop(n uintptr) (int, syscall.Errno) {
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
	}
	syscall.RawSyscall6(syscall.SYS_EXIT_GROUP, 0, 0, 0, 0, 0, 0)
	return 0, 0
}
