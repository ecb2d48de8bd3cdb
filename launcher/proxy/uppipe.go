package proxy

import (
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"golang.org/x/sys/unix"
)

// upPipe reads one server process's stdout (a pipe) for two goroutines:
// the server's reader, and the client's reader for a moment right after it
// forwarded a request (spinFor, see spinForAnswer).
//
// Every message still crosses a process boundary twice on its way through
// the proxy, as through the C relay: the client's request wakes the
// proxy's client reader, the server's answer its server reader. A thread
// woken from a blocking wait on this VM (idle processors halt at once) is
// most of what the proxy adds over a relay. The client's reader, which has
// just written the request and would otherwise go back to sleep until the
// client's next one, reads the server's stdout itself for up to spinFor:
// a trivial server answers in that time, and the answer is then read,
// completed and written to the client by a thread that is already
// running. Measured with a C relay that does the same (two threads, the
// second waits in poll and then takes a lock, the first spins 50 µs after
// each request): 16–22 µs off the relay's p50, with or without the
// proxy's 12 µs of work on the path (docs/benchmarks-proxy.md, Session 10).
//
// Whoever reads holds mu, the read token: the pipe is read non-blocking
// (the open file is the proxy's own, see newUpPipe) into one
// jsonrpc.Reader, and every frame is decided and forwarded before the
// token is let go, so frames are handled one at a time and in order, as
// by one reader. The server's reader waits for the pipe to be readable
// (ppoll, or Go's poller when idle, as blockingFile) without the token,
// then takes it and reads what is there. A frame the client's reader
// began and could not finish within spinFor is finished by the server's
// reader (jsonrpc.ErrWouldBlock keeps the part read so far), and the
// client's reader never waits for the server: it gives up the spin
// instead. The server's reader ends the stream (EOF); the client's reader
// leaves it to it.
type upPipe struct {
	f  *os.File // the proxy's own non-blocking descriptor of the read end; not in the poller
	fd int

	mu sync.Mutex // the read token: r, every read of the pipe, and closed
	r  *jsonrpc.Reader
	// closed: f is closed (under mu and pmu both).
	closed bool

	// The server reader's own (see wait).
	yielded time.Time
	last    time.Time // when a wait last returned
	idle    bool

	pmu    sync.Mutex // polled and closed
	polled *os.File   // while idle: a descriptor of the same open file, in the poller
}

// spinFor is how long the client's reader reads the server's stdout after
// it forwarded a request before it goes back to the client (see upPipe).
// Each spin costs at most that much processor time, and no more than the
// server takes to answer when it answers sooner.
const spinFor = 50 * time.Microsecond

// newUpPipe takes over the read end of a pipe from v as takeBlocking does
// (a duplicate of the proxy's own, v closed), in non-blocking mode: the
// open file is the proxy's alone (the server holds the write end, another
// open file). Anything but a pipe, and a v that cannot be taken, gives
// nil: it is read as before (takeBlocking).
func newUpPipe(v io.Reader, max int) *upPipe {
	f, ok := v.(*os.File)
	if !ok {
		return nil
	}
	st, ok := fstat(f)
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	dup := -1
	if cerr := rc.Control(func(fd uintptr) {
		dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil || err != nil {
		return nil
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil
	}
	_ = f.Close()
	u := &upPipe{fd: dup}
	// os.NewFile would put a non-blocking descriptor into the poller (an
	// epoll wake-up of its own for every message the server writes, with
	// nobody waiting): the file is made while the descriptor is blocking.
	_ = unix.SetNonblock(dup, false)
	u.f = os.NewFile(uintptr(dup), f.Name())
	_ = unix.SetNonblock(dup, true)
	u.r = jsonrpc.NewReader(u, max)
	return u
}

// Read is the jsonrpc.Reader's source: one raw read(2) of the non-blocking
// descriptor (it never blocks, so it needs none of the runtime's system-
// call bookkeeping); jsonrpc.ErrWouldBlock when there is nothing yet.
// Under mu.
func (u *upPipe) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(u.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch {
		case e == 0 && n == 0:
			return 0, io.EOF
		case e == 0:
			return int(n), nil
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return 0, jsonrpc.ErrWouldBlock
		}
		return 0, &os.PathError{Op: "read", Path: u.f.Name(), Err: e}
	}
}

// readable reports whether a read would not block now (data, or the
// writer gone): a ppoll that does not wait.
func readable(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	var ts unix.Timespec
	n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return e == 0 && n > 0
}

// errPipeClosed: the upPipe was closed.
var errPipeClosed = errors.New("the server's stdout was closed")

// wait blocks the server's reader until the pipe is readable. As
// blockingFile's Read: a blocking ppoll through the runtime's system-call
// path (one system call per wait, like the relay's read(2)), a yield once
// every yieldEvery, and after a gap longer than idleAfter a wait in Go's
// poller instead.
func (u *upPipe) wait() error {
	var err error
	if u.idle {
		err = u.waitIdle()
	} else {
		err = u.waitBlocking()
	}
	now := time.Now()
	u.idle = !u.last.IsZero() && now.Sub(u.last) > idleAfter
	u.last = now
	return err
}

func (u *upPipe) waitBlocking() error {
	u.pmu.Lock()
	if u.closed {
		u.pmu.Unlock()
		return errPipeClosed
	}
	if u.polled != nil {
		_ = u.polled.Close()
		u.polled = nil
	}
	u.pmu.Unlock()
	if now := time.Now(); now.Sub(u.yielded) >= yieldEvery {
		u.yielded = now
		runtime.Gosched()
	}
	fds := [1]unix.PollFd{{Fd: int32(u.fd), Events: unix.POLLIN}}
	for {
		_, _, e := syscall.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0, 0, 0)
		if e == 0 {
			return nil
		}
		if e != syscall.EINTR {
			return &os.PathError{Op: "read", Path: u.f.Name(), Err: e}
		}
	}
}

// waitIdle waits in the poller, on a duplicate of the descriptor made for
// the idle spell (closed when messages come close again, or at Close).
func (u *upPipe) waitIdle() error {
	u.pmu.Lock()
	if u.closed {
		u.pmu.Unlock()
		return errPipeClosed
	}
	if u.polled == nil {
		dup, err := unix.FcntlInt(uintptr(u.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			u.pmu.Unlock()
			u.idle = false
			return u.waitBlocking()
		}
		// Non-blocking: os.NewFile puts it into the poller.
		u.polled = os.NewFile(uintptr(dup), u.f.Name())
	}
	p := u.polled
	u.pmu.Unlock()
	rc, err := p.SyscallConn()
	if err != nil {
		return errPipeClosed
	}
	// The poller is edge-triggered and forgets what came before the wait:
	// look first.
	if err := rc.Read(func(fd uintptr) bool { return readable(int(fd)) }); err != nil {
		u.pmu.Lock()
		closed := u.closed
		u.pmu.Unlock()
		if closed {
			return errPipeClosed
		}
		return &os.PathError{Op: "read", Path: u.f.Name(), Err: err}
	}
	return nil
}

// Close closes the pipe once no one reads it (a spin ends within spinFor).
func (u *upPipe) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pmu.Lock()
	defer u.pmu.Unlock()
	if u.closed {
		return nil
	}
	u.closed = true
	if u.polled != nil {
		_ = u.polled.Close()
		u.polled = nil
	}
	return u.f.Close()
}

// readUpstreamPipe is readUpstream for a pipe: it publishes u for the
// client's reader to spin on (spinForAnswer) and reads whatever the
// client's reader left.
func (s *session) readUpstreamPipe(gen uint64, u *upPipe, w *jsonrpc.Writer) {
	defer u.Close()
	s.upst.mu.Lock()
	if s.upst.gen == gen {
		s.upst.rd, s.upst.rdGen = u, gen
	}
	s.upst.mu.Unlock()
	defer func() {
		s.upst.mu.Lock()
		if s.upst.rd == u {
			s.upst.rd = nil
		}
		s.upst.mu.Unlock()
	}()
	u.serve(s.upstreamHandler(gen, w))
}

// upstreamHandler handles the frames of server process gen.
func (s *session) upstreamHandler(gen uint64, w *jsonrpc.Writer) frameHandler {
	return frameHandler{
		frame:     func(frame []byte) jsonrpc.Kind { return s.handleUpstreamFrame(gen, w, frame) },
		oversized: func(head, tail []byte) { s.onOversizedUpstream(gen, head, tail) },
	}
}

// spinForAnswer: the client's reader, right after it forwarded a request
// to process gen, reads and handles what it writes for up to spinFor (see
// upPipe). It never waits for the token.
func (s *session) spinForAnswer(u *upPipe, gen uint64, w *jsonrpc.Writer) {
	if u != nil {
		u.spin(time.Now().Add(spinFor), s.upstreamHandler(gen, w))
	}
}

// frameHandler is what is done with each frame read.
type frameHandler struct {
	frame     func([]byte) jsonrpc.Kind // decide and forward one frame; its kind (0: malformed)
	oversized func(head, tail []byte)   // a frame over the size limit was skipped
}

// serve is the server's reader: it waits for the pipe, takes the token
// and handles what is there, until the stream ends.
func (u *upPipe) serve(h frameHandler) {
	for {
		if err := u.wait(); err != nil {
			return
		}
		if !u.mu.TryLock() {
			// The client's reader holds the token: it reads what came,
			// unless it is about to let go.
			if !readable(u.fd) {
				continue
			}
			u.mu.Lock()
		}
		ended, _ := u.drain(time.Time{}, h)
		u.mu.Unlock()
		if ended {
			return
		}
	}
}

// spin is the client's reader's turn (see upPipe): it reads and handles
// frames until it handled a response or until passed. It never waits for
// the token.
func (u *upPipe) spin(until time.Time, h frameHandler) {
	if !u.mu.TryLock() {
		return
	}
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.drain(until, h)
}

// drain reads and handles the frames there are, under u.mu. With a zero
// until (the server's reader) it returns when the pipe has nothing more
// now. Otherwise (the client's reader) it reads until it handled a
// response or until passed, and then hands over: it returns once the
// frames it read are handled, or at once when the pipe has more (the
// server's reader, woken by it, handles what was read first), so a server
// that writes without end cannot hold the client's reader. ended: the
// stream ended (EOF or a read error), which only the server's reader acts
// on: a later read reports it again.
func (u *upPipe) drain(until time.Time, h frameHandler) (ended, answered bool) {
	spin := !until.IsZero()
	for {
		if spin && (answered || !time.Now().Before(until)) && (u.r.Buffered() == 0 || readable(u.fd)) {
			return false, answered
		}
		frame, err := u.r.Next()
		switch {
		case errors.Is(err, jsonrpc.ErrWouldBlock):
			if spin && !answered && time.Now().Before(until) {
				continue
			}
			return false, answered
		case errors.Is(err, jsonrpc.ErrFrameTooLarge):
			h.oversized(u.r.Head, u.r.Tail)
			continue
		case err != nil:
			return true, answered
		}
		if h.frame(frame) == jsonrpc.KindResponse {
			answered = true
		}
		// What the Reader holds was read from the pipe already: no one
		// is woken for it. It is handled before the token is let go.
		if !spin && u.r.Buffered() == 0 {
			return false, answered
		}
	}
}
