package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// holdingRelay relays a NATS client's connections to the server. Once
// armed, the client's next `from` (a fetch's pull request) starts a hold:
// nothing the server sends reaches the client until the client has sent
// `until` (the reader, having waited out the fetch, makes its consumer
// again).
type holdingRelay struct {
	ln          net.Listener
	from, until []byte

	mu       sync.Mutex
	armed    bool
	held     bool
	sent     []byte        // what the client sent since armed
	released chan struct{} // closed when the hold ends
}

func newHoldingRelay(t *testing.T, server, from, until string) *holdingRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &holdingRelay{ln: ln, from: []byte(from), until: []byte(until), released: make(chan struct{})}
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			conns = append(conns, c, s)
			r.mu.Unlock()
			go r.clientToServer(c, s)
			go r.serverToClient(s, c)
		}
	}()
	return r
}

func (r *holdingRelay) url() string { return "nats://" + r.ln.Addr().String() }

// arm makes the client's next `from` start the hold.
func (r *holdingRelay) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = true
}

func (r *holdingRelay) clientToServer(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			r.mu.Lock()
			if r.armed {
				r.sent = append(r.sent, buf[:n]...)
				if i := bytes.Index(r.sent, r.from); i >= 0 && !r.held {
					// Held before the request reaches the server: its
					// answer is held too.
					r.held = true
					r.sent = r.sent[i+len(r.from):]
				}
				if r.held && bytes.Contains(r.sent, r.until) {
					r.armed, r.held = false, false
					close(r.released)
				}
			}
			r.mu.Unlock()
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			s.Close()
			return
		}
	}
}

func (r *holdingRelay) serverToClient(s, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			r.mu.Lock()
			held := r.held
			r.mu.Unlock()
			if held {
				<-r.released
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			c.Close()
			return
		}
	}
}

// TestReadToEndOutlastsAStall: the server's answers stop reaching the
// reader right after its first message, until the reader has waited out a
// fetch and asked again (a NATS server or a reader stopped, slow under
// load). ReadToEnd still hands over every message of the stream. Before
// (the loop of `mcpwarden events`, `why` and `profile learn`), a fetch that
// came back empty was taken for the stream's end: it returned after the
// first message, and the report said nothing was missing.
func TestReadToEndOutlastsAStall(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	direct, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	djs, _ := jetstream.New(direct)
	if _, err := stream.Ensure(ctx, djs, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		if _, err := djs.Publish(ctx, stream.SubjectPrefix+".web-1.file_op", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A stored message of another subject after them: the filter leaves it
	// out, so the stream's last message is not the read's.
	if _, err := djs.Publish(ctx, stream.SubjectPrefix+".web-2.file_op", []byte("other")); err != nil {
		t.Fatal(err)
	}

	relay := newHoldingRelay(t, strings.TrimPrefix(srv.ClientURL(), "nats://"), "$JS.API.CONSUMER.MSG.NEXT.", "$JS.API.CONSUMER.CREATE.")
	nc, err := nats.Connect(relay.url(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var got []string
	err = stream.ReadToEnd(ctx, js, jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.SubjectPrefix + ".web-1.>"}}, func(m jetstream.Msg) error {
		got = append(got, string(m.Data()))
		if len(got) == 1 {
			relay.arm()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ReadToEnd: %v (read %q)", err, got)
	}
	if want := "[m0 m1 m2 m3 m4]"; fmt.Sprint(got) != want {
		t.Fatalf("read %v, want %s", got, want)
	}
	select {
	case <-relay.released:
	default:
		t.Fatal("the relay never held: the test did not stall the read")
	}
}

// TestReadToEndEnds: a stream with nothing the filter selects, an empty
// selection after a start time, and a selection read at once all end
// without error.
func TestReadToEndEnds(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := stream.Ensure(ctx, js, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	count := func(cfg jetstream.OrderedConsumerConfig) int {
		t.Helper()
		n := 0
		if err := stream.ReadToEnd(ctx, js, cfg, func(jetstream.Msg) error { n++; return nil }); err != nil {
			t.Fatalf("ReadToEnd(%+v): %v", cfg, err)
		}
		return n
	}
	if n := count(jetstream.OrderedConsumerConfig{}); n != 0 {
		t.Fatalf("empty stream: %d messages", n)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, stream.SubjectPrefix+".web-1.file_op", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name string
		cfg  jetstream.OrderedConsumerConfig
		want int
	}{
		{"all", jetstream.OrderedConsumerConfig{}, 3},
		{"another host", jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.SubjectPrefix + ".web-2.>"}}, 0},
		{"after the last", jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &after}, 0},
	} {
		if n := count(c.cfg); n != c.want {
			t.Errorf("%s: %d messages, want %d", c.name, n, c.want)
		}
	}
}
