package daemon

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// openCloseChild makes the test binary a process of its own that times
// open()+close() of one file: "PATH:N" runs N pairs after a warm-up and
// prints the mean ns per pair twice: the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID: what the pairs cost, free of the time other
// work on a shared machine kept the thread off the CPU) and wall-clock
// time. The daemon does not watch it.
const openCloseChild = "MCPWARDEN_BENCH_OPENCLOSE"

func openCloseLoop(spec string) int {
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return 2
	}
	path := spec[:i]
	n, err := strconv.Atoi(spec[i+1:])
	if err != nil || n <= 0 {
		return 2
	}
	runtime.LockOSThread()
	pair := func() error {
		fd, err := unix.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	}
	for range min(n/10, 10000) {
		if err := pair(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	var c0, c1 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
	start := time.Now()
	for range n {
		if err := pair(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	wall := time.Since(start)
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
	fmt.Printf("%.1f %.1f\n", float64(c1.Nano()-c0.Nano())/float64(n), float64(wall.Nanoseconds())/float64(n))
	return 0
}
