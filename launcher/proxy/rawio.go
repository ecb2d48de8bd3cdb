package proxy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
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

// rawWriter returns a rawFile on v when v is an *os.File whose descriptor
// is non-blocking and watched by the poller (the pipes of os.Pipe, the
// client's stdout after PollableStdio); anything else is returned as it
// is. A blocking descriptor is never used with a raw system call: it would
// hold a thread and its processor without the runtime knowing.
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

// blockingFile reads a blocking descriptor with blocking read(2) through
// the runtime's system-call path (os.File's Read: entersyscall, so the
// collector and the scheduler go on while it waits): one read per message,
// where the poller needs a read that finds nothing before every wait and
// an epoll_pwait each time the thread idles. The goroutine that reads also
// decides and forwards the message, so an allowed call takes no hand-off.
//
// A processor stays with a thread blocked this way for up to 10 ms when
// another one is idle (runtime/proc.go, retake): the launcher raises
// GOMAXPROCS (see ReaderProcs) so that the two readers do not take every
// processor and have sysmon hand theirs off on every message.
//
// Nothing can interrupt read(2) on a pipe: a blocked read ends with data,
// EOF (every writer gone: the launcher kills the run's whole process tree
// on every way it ends) or an error; closing the file does not end it (the
// descriptor is closed once the read returns, so its number is never
// reused under it).
//
// A goroutine that only ever reads and forwards never goes through the
// scheduler, and the monitor takes a processor from a goroutine it has
// seen on the same scheduling tick for 10 ms (forcePreemptNS), at every
// one of its ticks after that: a hand-off per message. Read yields once
// every yieldEvery, which moves the tick on.
//
// A wait that long is also what a process pays most for when calls are
// far apart, as a model's are: a thread blocked in read(2) keeps its
// processor, so the runtime's monitor cannot go to its deep sleep while the
// proxy idles. It polls every 20 µs for a millisecond after every call,
// then takes the processor back after 10 ms with a signal to the blocked
// thread (0.9–1.1 ms of processor time per call, 69–79 context switches,
// with calls 20 ms apart; 33–42 µs for the C relay). So a reader whose
// last message came more than idleAfter after the one before waits for
// the next one in Go's poller instead (idle below): its processor is free
// while it waits, the monitor sleeps, and the read is a raw non-blocking
// read(2), which never wakes the monitor. When messages come close
// together again it goes back to blocking reads.
type blockingFile struct {
	f       *os.File
	yielded time.Time
	last    time.Time // when a read last returned
	idle    bool      // the last two reads returned more than idleAfter apart

	mu     sync.Mutex // polled, setNB, closed: Close may come from another goroutine
	polled *rawFile   // while idle: a descriptor of the same open file, in the poller
	setNB  bool       // the open file was made non-blocking for polled: undo it
	closed bool
}

// idleAfter is the gap between two messages after which a reader waits
// for the next one in the poller. The monitor takes a processor back from
// a thread blocked in read(2) 10 ms into its wait (with a signal to the
// thread) and polls every 20 µs for a millisecond after each wake-up: a
// gap that long is a client idling between calls, as a model's does, and
// a wait in the poller lets the monitor sleep. Shorter gaps keep blocking
// reads: with 2 ms here, calls back to back through seven process trees
// at load 20–35 (a proxy's calls 1–3 ms apart) went from blocking reads
// to poller waits and back, and the proxy's p99 was 10–12 ms in 5 of 8
// runs (the old binary's 0.5–3.8 ms, side by side).
const idleAfter = 10 * time.Millisecond

// yieldEvery is how often a blockingFile's reader goes through the
// scheduler: well within the monitor's 10 ms.
const yieldEvery = 9 * time.Millisecond

// takeBlocking takes over the read end of a pipe or socket from v when v
// is an *os.File: it reads from a blocking descriptor of its own (a dup,
// put into blocking mode: the mode belongs to the open file, which only
// the proxy reads), and closes v. Closing v takes the open file out of
// Go's poller, which would otherwise wake a thread of its own (epoll) for
// every message the server writes, with nobody waiting in it. Whoever
// closes v again later gets os.ErrClosed. Anything else, and a v that
// cannot be duplicated, is returned as it is.
func takeBlocking(v io.Reader) io.Reader {
	f, ok := v.(*os.File)
	if !ok {
		return v
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return v
	}
	dup := -1
	if cerr := rc.Control(func(fd uintptr) {
		dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil || err != nil {
		return v
	}
	if err := unix.SetNonblock(dup, false); err != nil {
		unix.Close(dup)
		return v
	}
	_ = f.Close()
	// A blocking descriptor: os.NewFile leaves it out of the poller.
	return &blockingFile{f: os.NewFile(uintptr(dup), f.Name())}
}

// Read reads what is there, blocking until something is. A descriptor made
// non-blocking behind the proxy's back (the flag belongs to the open file,
// which the client's other processes may share) is waited on with a
// blocking poll(2) instead of ending the stream on EAGAIN.
//
// After a gap longer than idleAfter it waits in the poller (see idle).
// Read is for one goroutine at a time; Close may come from another.
func (b *blockingFile) Read(p []byte) (int, error) {
	var n int
	var err error
	if b.idle {
		n, err = b.readIdle(p)
	} else {
		n, err = b.readBlocking(p)
	}
	now := time.Now()
	b.idle = !b.last.IsZero() && now.Sub(b.last) > idleAfter
	b.last = now
	return n, err
}

func (b *blockingFile) readBlocking(p []byte) (int, error) {
	b.mu.Lock()
	if b.polled != nil {
		b.leavePollerLocked()
	}
	b.mu.Unlock()
	if now := time.Now(); now.Sub(b.yielded) >= yieldEvery {
		b.yielded = now
		runtime.Gosched()
	}
	for {
		n, err := b.f.Read(p)
		if err == nil || !errors.Is(err, syscall.EAGAIN) {
			return n, err
		}
		if werr := b.waitReadable(); werr != nil {
			return 0, werr
		}
	}
}

// readIdle reads through the poller: a raw read(2) of a non-blocking
// descriptor of the same open file, and a wait in the poller when there
// is nothing yet. A descriptor the poller cannot take is read blocking.
func (b *blockingFile) readIdle(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, closedErr("read", b.f, os.ErrClosed)
	}
	if b.polled == nil && !b.enterPollerLocked() {
		b.mu.Unlock()
		b.idle = false
		return b.readBlocking(p)
	}
	r := b.polled
	b.mu.Unlock()
	return r.Read(p)
}

// enterPollerLocked makes the open file non-blocking (its mode is the
// proxy's: the descriptor was taken over, see takeBlocking and
// PollableStdio) and opens a descriptor of it in the poller.
func (b *blockingFile) enterPollerLocked() bool {
	rc, err := b.f.SyscallConn()
	if err != nil {
		return false
	}
	dup, setNB := -1, false
	if cerr := rc.Control(func(fd uintptr) {
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			return
		}
		if fl&unix.O_NONBLOCK == 0 {
			if _, err := unix.FcntlInt(fd, unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
				return
			}
			setNB = true
		}
		if dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err != nil {
			dup = -1
		}
	}); cerr != nil || dup < 0 {
		b.setNB = setNB
		b.restoreModeLocked()
		if dup >= 0 {
			unix.Close(dup)
		}
		return false
	}
	// Non-blocking: os.NewFile puts it into the poller.
	f := os.NewFile(uintptr(dup), b.f.Name())
	r := newRawFile(f)
	if r == nil {
		f.Close()
		b.setNB = setNB
		b.restoreModeLocked()
		return false
	}
	b.polled, b.setNB = r, setNB
	return true
}

// leavePollerLocked closes the poller's descriptor (which takes it out of
// the poller) and puts the open file back into blocking mode.
func (b *blockingFile) leavePollerLocked() {
	_ = b.polled.Close()
	b.polled = nil
	b.restoreModeLocked()
}

func (b *blockingFile) restoreModeLocked() {
	if !b.setNB {
		return
	}
	b.setNB = false
	if rc, err := b.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil {
				_, _ = unix.FcntlInt(fd, unix.F_SETFL, fl&^unix.O_NONBLOCK)
			}
		})
	}
}

func (b *blockingFile) waitReadable() error {
	rc, err := b.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	cerr := rc.Control(func(fd uintptr) {
		fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, _, e := syscall.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0, 0, 0)
			if e != unix.EINTR {
				errno = e
				return
			}
		}
	})
	if cerr != nil {
		return closedErr("read", b.f, cerr)
	}
	if errno != 0 {
		return &os.PathError{Op: "read", Path: b.f.Name(), Err: errno}
	}
	return nil
}

// Close closes the file (a read blocked in read(2) goes on until it
// returns; one waiting in the poller fails as on a closed file) and puts
// the open file back into blocking mode if the reader had taken it out.
func (b *blockingFile) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.polled != nil {
		b.leavePollerLocked()
	}
	b.mu.Unlock()
	return b.f.Close()
}
