package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
)

// recorder is a frameHandler that keeps what it was given, in order.
type frameLog struct {
	mu     sync.Mutex
	frames []string
	bySpin int // frames handled by spin (the client's reader)
	inSpin bool
}

func (l *frameLog) handler() frameHandler {
	return frameHandler{
		frame: func(f []byte) jsonrpc.Kind {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.frames = append(l.frames, string(f))
			if l.inSpin {
				l.bySpin++
			}
			m, err := jsonrpc.Parse(f)
			if err != nil {
				return 0
			}
			return m.Kind
		},
		oversized: func(head, _ []byte) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.frames = append(l.frames, "TOO LARGE "+string(head[:min(len(head), 12)]))
		},
	}
}

func (l *frameLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.frames)
}

// spinning runs spin with inSpin set (under the token, so no frame of
// the server's reader is counted as the spin's).
func (l *frameLog) spin(u *upPipe, d time.Duration) {
	h := l.handler()
	inner := h.frame
	h.frame = func(f []byte) jsonrpc.Kind {
		l.mu.Lock()
		l.inSpin = true
		l.mu.Unlock()
		k := inner(f)
		l.mu.Lock()
		l.inSpin = false
		l.mu.Unlock()
		return k
	}
	u.spin(time.Now().Add(d), h)
}

func newTestUpPipe(t *testing.T, max int) (*upPipe, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	u := newUpPipe(r, max)
	if u == nil {
		t.Fatal("newUpPipe did not take a pipe")
	}
	return u, w
}

// The server's stdout is read by two goroutines taking turns (the
// server's reader, and the client's reader spinning after each request):
// whatever the cut of the stream — frames in pieces of any size, split
// across the turns, a frame over the limit, pauses longer than a spin —
// every frame is handled once, whole and in order, and the stream's end
// ends the server's reader.
func TestUpPipeReadersShareTheStreamInOrder(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			u, w := newTestUpPipe(t, 4096)
			var want []string
			var stream strings.Builder
			for i := range 400 {
				var f string
				switch rng.IntN(5) {
				case 0:
					f = fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"n":%d}}`, i)
				case 1:
					f = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"big":"%s"}}`, i, strings.Repeat("x", 5000))
					want = append(want, "TOO LARGE "+f[:12])
					stream.WriteString(f + "\n")
					continue
				default:
					f = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"%s"}]}}`, i, strings.Repeat("y", rng.IntN(300)))
				}
				want = append(want, f)
				stream.WriteString(f + "\r\n")
			}
			data := []byte(stream.String())
			var log frameLog
			served := make(chan struct{})
			go func() {
				defer close(served)
				u.serve(log.handler())
			}()
			wrote := make(chan error, 1)
			go func() {
				defer w.Close()
				for len(data) > 0 {
					n := min(len(data), 1+rng.IntN(700))
					if _, err := w.Write(data[:n]); err != nil {
						wrote <- err
						return
					}
					data = data[n:]
					if rng.IntN(8) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
				}
				wrote <- nil
			}()
			// The client's reader's turns, as after each forwarded request.
			for done := false; !done; {
				log.spin(u, spinFor)
				select {
				case <-served:
					done = true
				default:
				}
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			u.Close()
			if len(log.frames) != len(want) {
				t.Fatalf("%d frames handled, want %d", len(log.frames), len(want))
			}
			for i := range want {
				if log.frames[i] != want[i] {
					t.Fatalf("frame %d: %.80q, want %.80q", i, log.frames[i], want[i])
				}
			}
			t.Logf("%d of %d frames handled by the spinning reader", log.bySpin, len(want))
		})
	}
}

// A server that writes notifications without end cannot hold the client's
// reader: a spin that finds no response hands over once its time is up,
// and the server's reader handles the rest, in order.
func TestUpPipeSpinLetsGoOfAFloodingServer(t *testing.T) {
	u, w := newTestUpPipe(t, 1024)
	var log frameLog
	served := make(chan struct{})
	go func() {
		defer close(served)
		u.serve(log.handler())
	}()
	stop := make(chan struct{})
	wrote := make(chan int, 1)
	go func() {
		n := 0
		defer func() { w.Close(); wrote <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			f := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d}}`+"\n", n)
			if _, err := w.Write([]byte(f)); err != nil {
				return
			}
			n++
		}
	}()
	for log.count() < 1000 {
		time.Sleep(time.Millisecond)
	}
	spun := make(chan struct{})
	go func() {
		for range 20 {
			log.spin(u, spinFor)
		}
		close(spun)
	}()
	select {
	case <-spun:
	case <-time.After(2 * time.Minute):
		t.Fatal("the spinning reader did not let go of a server writing without end")
	}
	close(stop)
	n := <-wrote
	<-served
	u.Close()
	if len(log.frames) != n {
		t.Fatalf("%d frames handled, %d written", len(log.frames), n)
	}
	for i, f := range log.frames {
		if want := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d}}`, i); f != want {
			t.Fatalf("frame %d: %q, want %q", i, f, want)
		}
	}
}

// The server's reader waits in Go's poller after a gap longer than
// idleAfter (as blockingFile; its processor is free and the runtime's
// monitor can sleep) and blocks in ppoll again when messages come close
// together; Close ends an idle wait.
func TestUpPipeWaitsInThePollerWhenIdle(t *testing.T) {
	u, w := newTestUpPipe(t, 1024)
	var log frameLog
	served := make(chan struct{})
	go func() {
		defer close(served)
		u.serve(log.handler())
	}()
	polled := func() bool {
		u.pmu.Lock()
		defer u.pmu.Unlock()
		return u.polled != nil
	}
	send := func(i int) {
		t.Helper()
		if _, err := fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"result":{}}`+"\n", i); err != nil {
			t.Fatal(err)
		}
		for log.count() < i {
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitPolled := func(want bool, what string) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); polled() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: waiting in the poller %v, want %v", what, !want, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	send(1)
	time.Sleep(4 * idleAfter)
	send(2)
	waitPolled(true, "after a gap")
	// Messages close together (as close as this machine's load lets them
	// come: as many as it takes) end the idle spell.
	i := 3
	for deadline := time.Now().Add(2 * time.Minute); polled(); i++ {
		if time.Now().After(deadline) {
			t.Fatal("still waiting in the poller with messages close together")
		}
		send(i)
	}
	time.Sleep(4 * idleAfter)
	send(i)
	waitPolled(true, "after a second gap")
	u.Close()
	select {
	case <-served:
	case <-time.After(2 * time.Minute):
		t.Fatal("Close did not end an idle wait")
	}
	if polled() {
		t.Fatal("the poller's descriptor is left open after Close")
	}
}

// Only a pipe is read so: a socket or anything else is read as before
// (takeBlocking, one reader), and is not taken.
func TestUpPipeOnlyForPipes(t *testing.T) {
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if u := newUpPipe(a, 0); u != nil {
		t.Fatal("a socket was taken as a pipe")
	}
	if _, err := a.Write(nil); err != nil {
		t.Fatalf("the socket was closed: %v", err)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	if u := newUpPipe(pr, 0); u != nil {
		t.Fatal("an io.Pipe was taken")
	}
}

func socketPair() (*os.File, *os.File, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: "", Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	c, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	s, err := l.AcceptUnix()
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	fa, err := c.File()
	if err != nil {
		return nil, nil, err
	}
	fb, err := s.File()
	if err != nil {
		fa.Close()
		return nil, nil, err
	}
	return fa, fb, nil
}
