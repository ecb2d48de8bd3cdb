package proxy

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawFile reads and writes a non-blocking descriptor that Go's poller
// watches with raw system calls: read(2) and write(2) on a non-blocking
// descriptor never block, so they need none of the runtime's system-call
// bookkeeping. That bookkeeping (entersyscall) wakes the runtime's monitor
// thread whenever the process was idle, which is every message of a
// request-response protocol: one futex wake-up and a few sleeps of another
// thread per message, on the machine's few cores. When a read finds no
// data or a write finds the pipe full, the goroutine waits in the poller
// as os.File's own methods do. Nothing may call Fd on a file taken raw:
// Fd puts the descriptor back into blocking mode.
type rawFile struct {
	f  *os.File
	rc syscall.RawConn
}

// rawReader and rawWriter return a rawFile on v when v is an *os.File
// whose descriptor is non-blocking and watched by the poller (the pipes of
// os.Pipe, the client's stdio after PollableStdio); anything else is
// returned as it is. A blocking descriptor is never used with a raw
// system call: it would hold a thread and its processor without the
// runtime knowing.
func rawReader(v io.Reader) io.Reader {
	if f, ok := v.(*os.File); ok {
		if r := newRawFile(f); r != nil {
			return r
		}
	}
	return v
}

func rawWriter(v io.Writer) io.Writer {
	if f, ok := v.(*os.File); ok {
		if r := newRawFile(f); r != nil {
			return r
		}
	}
	return v
}

func newRawFile(f *os.File) *rawFile {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	nonblocking := false
	if cerr := rc.Control(func(fd uintptr) {
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		nonblocking = err == nil && fl&unix.O_NONBLOCK != 0
	}); cerr != nil || !nonblocking {
		return nil
	}
	// A non-blocking descriptor that the poller does not watch (made
	// non-blocking after os.NewFile) would make Read and Write fail with
	// EAGAIN: a wait on it reports an error at once, which is what this
	// probe looks for. SetReadDeadline fails only for files outside the
	// poller.
	if f.SetReadDeadline(time.Time{}) != nil {
		return nil
	}
	return &rawFile{f: f, rc: rc}
}

// Read reads what is there, or waits in the poller for data.
func (r *rawFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			rn, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if e == unix.EINTR {
				continue
			}
			if e == unix.EAGAIN {
				return false
			}
			n, errno = int(rn), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, closedErr("read", r.f, err)
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting in the poller while the pipe is full.
func (r *rawFile) Write(p []byte) (int, error) {
	done := 0
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			wn, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
			if e == unix.EINTR {
				continue
			}
			if e == unix.EAGAIN {
				return false
			}
			if e != 0 {
				errno = e
				return true
			}
			done += int(wn)
		}
		return true
	})
	if err != nil {
		return done, closedErr("write", r.f, err)
	}
	if errno != 0 {
		return done, &os.PathError{Op: "write", Path: r.f.Name(), Err: errno}
	}
	return done, nil
}

// closedErr is the error of a poller wait: no deadline is ever set, so the
// only one is the file being closed, reported as os.File reports it.
func closedErr(op string, f *os.File, err error) error {
	return &os.PathError{Op: op, Path: f.Name(), Err: fmt.Errorf("%w (%v)", os.ErrClosed, err)}
}

// Close closes the file.
func (r *rawFile) Close() error { return r.f.Close() }
