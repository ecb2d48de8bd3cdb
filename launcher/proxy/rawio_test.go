package proxy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// A frame larger than the pipe's buffer is written whole (the writer waits
// in the poller while the pipe is full) and read back byte for byte, and
// the reader sees EOF when the writer closes.
func TestRawFileCarriesLargeFramesAndEOF(t *testing.T) {
	r, w := pipe(t)
	rr := newRawFile(r)
	if rr == nil {
		t.Fatal("a pipe of os.Pipe was not taken for raw reads")
	}
	rw, ok := rawWriter(w).(*rawFile)
	if !ok {
		t.Fatal("a pipe of os.Pipe was not taken for raw writes")
	}
	frame := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, 16 pipe buffers
	errc := make(chan error, 1)
	go func() {
		n, err := rw.Write(frame)
		if err == nil && n != len(frame) {
			err = errors.New("short write")
		}
		if cerr := rw.Close(); err == nil {
			err = cerr
		}
		errc <- err
	}()
	got, err := io.ReadAll(rr)
	if err != nil {
		t.Fatal(err)
	}
	if werr := <-errc; werr != nil {
		t.Fatal(werr)
	}
	if !bytes.Equal(got, frame) {
		t.Fatalf("read %d bytes back, want the %d written", len(got), len(frame))
	}
	if n, err := rr.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("after EOF: %d, %v", n, err)
	}
}

// A write to a pipe whose reader is gone fails with EPIPE (SIGPIPE is not
// raised for a descriptor other than 1 and 2 in a Go program), it does not
// hang or report success.
func TestRawFileWriteToAClosedPipeFails(t *testing.T) {
	r, w := pipe(t)
	r.Close()
	if _, err := rawWriter(w).Write([]byte("x\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without reader: %v, want EPIPE", err)
	}
}

// A read blocked in the poller ends when the file is closed.
func TestRawFileCloseEndsABlockedRead(t *testing.T) {
	r, _ := pipe(t)
	rr := newRawFile(r)
	errc := make(chan error, 1)
	go func() {
		_, err := rr.Read(make([]byte, 16))
		errc <- err
	}()
	r.Close()
	if err := <-errc; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after close: %v, want os.ErrClosed", err)
	}
}

// Blocking descriptors are never used with raw system calls: a regular
// file, a blocking pipe, and a non-blocking descriptor outside the poller
// are returned as they are.
func TestRawFileRefusesWhatThePollerDoesNotWatch(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	blocking := os.NewFile(uintptr(fds[0]), "blocking")
	defer blocking.Close()
	other := os.NewFile(uintptr(fds[1]), "made non-blocking later")
	defer other.Close()
	if err := unix.SetNonblock(fds[1], true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    *os.File
	}{{"regular file", f}, {"blocking pipe", blocking}, {"non-blocking outside the poller", other}} {
		if newRawFile(c.f) != nil {
			t.Errorf("%s: taken for raw reads", c.name)
		}
		if _, ok := rawWriter(c.f).(*rawFile); ok {
			t.Errorf("%s: taken for raw writes", c.name)
		}
	}
}

// PollableStdio converts the client's pipes, leaves a descriptor shared
// with stderr and a regular file alone, and restore puts blocking mode back.
func TestPollableStdio(t *testing.T) {
	isNonblock := func(f *os.File) bool {
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl&unix.O_NONBLOCK != 0
	}
	blockingPipe := func() (*os.File, *os.File) {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	inR, inW := blockingPipe()
	outR, outW := blockingPipe()
	_, errW := blockingPipe()
	in, out, restore := PollableStdio(inR, outW, errW)
	if _, ok := in.(*blockingFile); !ok {
		t.Fatalf("stdin pipe not taken for blocking reads: %T", in)
	}
	if _, ok := out.(*rawFile); !ok {
		t.Fatalf("stdout pipe not converted: %T", out)
	}
	if isNonblock(inR) || !isNonblock(outW) {
		t.Fatal("stdin must stay blocking, stdout be made non-blocking")
	}
	go func() { _, _ = inW.Write([]byte("ping\n")) }()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("read through the converted stdin: %q, %v", buf, err)
	}
	if _, err := out.Write([]byte("pong\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "pong\n" {
		t.Fatalf("read what the converted stdout wrote: %q, %v", buf, err)
	}
	// Every read and write after restore fails as on a closed file: none
	// may use a descriptor that is blocking again as a non-blocking one.
	restore()
	if isNonblock(inR) || isNonblock(outW) {
		t.Fatal("restore left a descriptor non-blocking")
	}
	if _, err := in.Read(buf); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a read after restore: %v, want os.ErrClosed", err)
	}
	if _, err := out.Write([]byte("late\n")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a write after restore: %v, want os.ErrClosed", err)
	}
	// The client's own descriptors are still open and usable.
	go func() { _, _ = inW.Write([]byte("more\n")) }()
	if _, err := io.ReadFull(inR, buf); err != nil || string(buf) != "more\n" {
		t.Fatalf("the client's stdin after restore: %q, %v", buf, err)
	}

	// stdout is the same pipe as stderr (2>&1): a full pipe would make
	// stderr's writes fail, so it stays blocking; a regular file stays too.
	shR, shW := blockingPipe()
	_ = shR
	f, err := os.Create(filepath.Join(t.TempDir(), "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, out, restore = PollableStdio(f, shW, shW)
	defer restore()
	if in != io.Reader(f) || out != io.Writer(shW) || isNonblock(shW) {
		t.Fatalf("converted what it must not: %T %T", in, out)
	}
}

// PollableStdio on sockets (a client that hands the proxy a socketpair, as
// inetd-style supervisors and some MCP hosts do): a socket as stdin and
// another as stdout, and one socket as both, are converted, carry a frame
// larger than the socket buffer both ways, see the peer's shutdown as EOF,
// and are blocking again after restore.
func TestPollableStdioSockets(t *testing.T) {
	socketpair := func() (*os.File, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	isNonblock := func(f *os.File) bool {
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl&unix.O_NONBLOCK != 0
	}
	for _, tc := range []struct {
		name   string
		shared bool // stdin and stdout are one socket
		// open returns the proxy's stdin and stdout and the client's ends
		// that write to stdin and read from stdout.
		open func() (stdin, stdout, clientW, clientR *os.File)
	}{
		{"socketpair as stdin and another as stdout", false, func() (*os.File, *os.File, *os.File, *os.File) {
			in, inPeer := socketpair()
			out, outPeer := socketpair()
			return in, out, inPeer, outPeer
		}},
		{"one socket as stdin and stdout", true, func() (*os.File, *os.File, *os.File, *os.File) {
			s, peer := socketpair()
			return s, s, peer, peer
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin, stdout, clientW, clientR := tc.open()
			var fds [2]int
			if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			errR, errW := os.NewFile(uintptr(fds[0]), "er"), os.NewFile(uintptr(fds[1]), "ew")
			defer errR.Close()
			defer errW.Close()
			in, out, restore := PollableStdio(stdin, stdout, errW)
			if tc.shared {
				// One open file: stdout's mode is stdin's, so both wait
				// in the poller.
				if _, ok := in.(*rawFile); !ok || !isNonblock(stdin) {
					t.Fatalf("stdin, the same socket as stdout, not converted: %T", in)
				}
			} else if _, ok := in.(*blockingFile); !ok || isNonblock(stdin) {
				t.Fatalf("stdin socket not taken for blocking reads: %T", in)
			}
			if _, ok := out.(*rawFile); !ok {
				t.Fatalf("stdout socket not converted: %T", out)
			}
			if !isNonblock(stdout) {
				t.Fatal("the converted stdout is not non-blocking")
			}
			frame := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, more than a socket buffer
			// Client -> proxy: the client writes a large frame and shuts
			// its writing side; the proxy reads it whole, then EOF.
			werr := make(chan error, 1)
			go func() {
				_, err := clientW.Write(frame)
				if err == nil {
					err = unix.Shutdown(int(clientW.Fd()), unix.SHUT_WR)
				}
				werr <- err
			}()
			got, err := io.ReadAll(in)
			if err != nil {
				t.Fatalf("read through the converted stdin: %v", err)
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, frame) {
				t.Fatalf("read %d bytes through stdin, want the %d written", len(got), len(frame))
			}
			// Proxy -> client: a large frame written through the poller
			// (it waits while the socket is full) reaches the client whole.
			rc := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(clientR)
				rc <- b
			}()
			if n, err := out.Write(frame); err != nil || n != len(frame) {
				t.Fatalf("write through the converted stdout: %d, %v", n, err)
			}
			restore()
			if isNonblock(stdin) || isNonblock(stdout) {
				t.Fatal("restore left a socket non-blocking")
			}
			if err := unix.Shutdown(int(stdout.Fd()), unix.SHUT_WR); err != nil {
				t.Fatal(err)
			}
			if b := <-rc; !bytes.Equal(b, frame) {
				t.Fatalf("the client read %d bytes from stdout, want the %d written", len(b), len(frame))
			}
			if _, err := in.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
				t.Fatalf("a read after restore: %v, want os.ErrClosed", err)
			}
		})
	}
}

// takeBlocking reads the server's pipe through a blocking descriptor of its
// own, outside the poller, and closes the one it was given (which takes
// the open file out of the poller): a frame larger than the pipe's buffer
// arrives whole, then EOF.
func TestTakeBlockingCarriesLargeFramesAndEOF(t *testing.T) {
	r, w := pipe(t)
	in := takeBlocking(r)
	bf, ok := in.(*blockingFile)
	if !ok {
		t.Fatalf("a pipe of os.Pipe was not taken for blocking reads: %T", in)
	}
	defer bf.Close()
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the given file after takeBlocking: %v, want os.ErrClosed", err)
	}
	if err := r.SetReadDeadline(time.Time{}); err == nil {
		t.Fatal("the given file is still in the poller")
	}
	if bf.f.SetReadDeadline(time.Time{}) == nil {
		t.Fatal("the blocking descriptor was put into the poller")
	}
	rc, err := bf.f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fl int
	if err := rc.Control(func(fd uintptr) { fl, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		t.Fatal("the taken descriptor is non-blocking")
	}
	frame := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, 16 pipe buffers
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write(frame)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		errc <- err
	}()
	got, err := io.ReadAll(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, frame) {
		t.Fatalf("read %d bytes back, want the %d written", len(got), len(frame))
	}
	// Anything but an *os.File is left as it is.
	pr, _ := io.Pipe()
	if got := takeBlocking(pr); got != io.Reader(pr) {
		t.Fatalf("takeBlocking(io.Pipe) = %T", got)
	}
}

// A blocking reader whose open file is made non-blocking behind its back
// (another process sharing the client's pipe may) waits for data instead
// of ending the stream on EAGAIN.
func TestBlockingFileSurvivesANonBlockingDescriptor(t *testing.T) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	defer r.Close()
	defer w.Close()
	bf := &blockingFile{f: r}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := bf.Read(buf)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	// Give the reader a moment to find the pipe empty first (it is correct
	// either way: this only makes the EAGAIN path the likely one).
	time.Sleep(20 * time.Millisecond)
	if _, err := w.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "ping\n" {
		t.Fatalf("read %q, want the frame written", s)
	}
}

// A reader whose messages come more than idleAfter apart waits for the
// next one in the poller, on the open file made non-blocking (so that its
// processor is free and the runtime's monitor can sleep while the proxy
// idles), and goes back to blocking reads when messages come close
// together again; restore and Close end an idle wait and put blocking
// mode back. (Fails on the code before: the open file stayed blocking.)
func TestBlockingFileWaitsInThePollerWhenIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		// open returns the reader on r and a function that closes it the
		// way the proxy does (Close, or PollableStdio's restore).
		open func(t *testing.T, r *os.File) (io.Reader, func())
	}{
		{"server-stdout", func(t *testing.T, r *os.File) (io.Reader, func()) {
			in := takeBlocking(r)
			bf, ok := in.(*blockingFile)
			if !ok {
				t.Fatalf("not taken for blocking reads: %T", in)
			}
			return bf, func() { bf.Close() }
		}},
		{"client-stdin", func(t *testing.T, r *os.File) (io.Reader, func()) {
			_, outW := pipe(t)
			_, errW := pipe(t)
			in, _, restore := PollableStdio(r, outW, errW)
			if _, ok := in.(*blockingFile); !ok {
				t.Fatalf("stdin not taken for blocking reads: %T", in)
			}
			return in, restore
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fds [2]int
			if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
			defer w.Close()
			// A descriptor of the same open file, to watch its mode.
			probe, err := unix.FcntlInt(uintptr(fds[0]), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(probe)
			nonblocking := func() bool {
				fl, err := unix.FcntlInt(uintptr(probe), unix.F_GETFL, 0)
				if err != nil {
					t.Fatal(err)
				}
				return fl&unix.O_NONBLOCK != 0
			}
			waitMode := func(want bool, what string) {
				for deadline := time.Now().Add(5 * time.Second); nonblocking() != want; {
					if time.Now().After(deadline) {
						t.Fatalf("%s: the open file's non-blocking flag is %v, want %v", what, !want, want)
					}
					time.Sleep(time.Millisecond)
				}
			}
			in, closeIn := tc.open(t, r)
			type result struct {
				s   string
				err error
			}
			got := make(chan result)
			next := make(chan struct{})
			go func() {
				buf := make([]byte, 16)
				for range next {
					n, err := in.Read(buf)
					got <- result{string(buf[:n]), err}
				}
			}()
			defer close(next)
			read := func(msg string) {
				t.Helper()
				if _, err := w.Write([]byte(msg)); err != nil {
					t.Fatal(err)
				}
				if res := <-got; res.err != nil || res.s != msg {
					t.Fatalf("read %q, %v; want %q", res.s, res.err, msg)
				}
			}
			next <- struct{}{}
			read("a\n")
			next <- struct{}{}
			time.Sleep(4 * idleAfter) // a gap: the wait after the next message is idle
			read("b\n")
			next <- struct{}{}
			waitMode(true, "waiting after a gap")
			read("c\n")
			// Messages close together: the next wait is a blocking read
			// again, on a blocking open file.
			next <- struct{}{}
			read("d\n")
			next <- struct{}{}
			waitMode(false, "waiting after messages close together")
			read("e\n")
			// Idle again, then closed during the wait: the read fails as on
			// a closed file and the open file is blocking again.
			next <- struct{}{}
			time.Sleep(4 * idleAfter)
			read("f\n")
			next <- struct{}{}
			waitMode(true, "waiting after a second gap")
			closeIn()
			if res := <-got; !errors.Is(res.err, os.ErrClosed) {
				t.Fatalf("a read waiting at close: %q, %v; want os.ErrClosed", res.s, res.err)
			}
			if nonblocking() {
				t.Fatal("the open file is left non-blocking after close")
			}
		})
	}
}

// An idle wait ends at EOF like a blocking one.
func TestBlockingFileIdleWaitSeesEOF(t *testing.T) {
	r, w := pipe(t)
	in := takeBlocking(r)
	bf, ok := in.(*blockingFile)
	if !ok {
		t.Fatalf("not taken for blocking reads: %T", in)
	}
	defer bf.Close()
	buf := make([]byte, 8)
	for _, msg := range []string{"a", "b"} {
		if _, err := w.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if n, err := bf.Read(buf); err != nil || string(buf[:n]) != msg {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		time.Sleep(4 * idleAfter)
	}
	if !bf.idle {
		t.Fatal("the reader did not turn idle after a gap")
	}
	done := make(chan error, 1)
	go func() {
		_, err := bf.Read(buf)
		done <- err
	}()
	time.Sleep(4 * idleAfter)
	w.Close()
	if err := <-done; err != io.EOF {
		t.Fatalf("an idle wait at the writer's close: %v, want EOF", err)
	}
}
