package publish

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func startNATS(t testing.TB, dir string, port int) *natsserver.Server {
	t.Helper()
	s, err := natsserver.Start(natsserver.Config{StoreDir: dir, MaxStoreBytes: natstest.StoreBytes, Port: port, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func portOf(t testing.TB, u string) int {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(pu.Port())
	return p
}

func connect(t testing.TB, u string) *nats.Conn {
	t.Helper()
	nc, err := stream.Connect(stream.ConnOptions{URL: u, Name: "test"}, nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// readAll reads every event in the stream, with the subjects they came on,
// polling until want events arrived or the deadline passed.
func readAll(t testing.TB, nc *nats.Conn, want int) (ids map[string]int, subjects map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	cons, err := js.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ids = map[string]int{}
	subjects = map[string]string{}
	total := 0
	for total < want {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if m.Headers().Get(schema.BatchHeader) != schema.BatchFormat {
				t.Fatalf("message without batch header")
			}
			evs, rejected, err := schema.DecodeBatch(m.Data())
			if err != nil || rejected != 0 {
				t.Fatalf("decode: %v, %d rejected", err, rejected)
			}
			for _, e := range evs {
				ids[e.EventID]++
				subjects[e.EventID] = m.Subject()
				total++
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d events before the deadline", total, want)
		}
	}
	return ids, subjects
}

func TestPublishBatchesBySubject(t *testing.T) {
	srv := startNATS(t, t.TempDir(), -1)
	defer srv.Shutdown()
	nc := connect(t, srv.ClientURL())
	ctx := context.Background()
	p, err := New(ctx, Config{Conn: nc, SpoolDir: t.TempDir(), EnsureStream: &stream.Config{}, MaxBatchEvents: 50})
	if err != nil {
		t.Fatal(err)
	}
	g := eventgen.New("web-1.example.com")
	events := g.Mixed(2000)
	for i := 0; i < len(events); i += 300 {
		if err := p.Publish(ctx, events[i:min(i+300, len(events))]); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ids, subjects := readAll(t, nc, len(events))
	for _, e := range events {
		if ids[e.EventID] != 1 {
			t.Fatalf("event %s stored %d times", e.EventID, ids[e.EventID])
		}
		want := "mcpwarden.v1.web-1_example_com." + string(e.Kind)
		if subjects[e.EventID] != want {
			t.Fatalf("event of kind %s on %q, want %q", e.Kind, subjects[e.EventID], want)
		}
	}
	st := p.Stats()
	if st.Spooled != 0 || st.Events != uint64(len(events)) {
		t.Fatalf("stats %+v", st)
	}
	// 2000 events, ≤50 per message: at least 40 messages, far fewer than 2000.
	if st.Published < 40 || st.Published > 100 {
		t.Fatalf("published %d messages for 2000 events in batches of 50", st.Published)
	}
}

// TestSpoolReplaysAfterNATSRestart stops NATS in the middle of a run: what
// is published meanwhile goes to the spool, and once NATS is back every
// event is in the stream exactly once.
func TestSpoolReplaysAfterNATSRestart(t *testing.T) {
	store := t.TempDir()
	srv := startNATS(t, store, -1)
	port := portOf(t, srv.ClientURL())
	nc := connect(t, srv.ClientURL())
	ctx := context.Background()
	spoolDir := t.TempDir()
	p, err := New(ctx, Config{Conn: nc, SpoolDir: spoolDir, EnsureStream: &stream.Config{}, AckTimeout: time.Second, ReplayInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g := eventgen.New("host-a")
	var all []schema.Event
	publish := func(n int) {
		evs := g.Mixed(n)
		if err := p.Publish(ctx, evs); err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	publish(500)
	srv.Shutdown()
	deadline := time.Now().Add(2 * time.Minute)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		publish(100)
	}
	if p.Stats().SpoolDepth == 0 {
		t.Fatalf("nothing spooled while NATS was down: %+v", p.Stats())
	}
	srv = startNATS(t, store, port)
	defer srv.Shutdown()
	publish(200)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	ids, _ := readAll(t, nc, len(all))
	if len(ids) != len(all) {
		t.Fatalf("%d distinct events in the stream, produced %d", len(ids), len(all))
	}
	for _, e := range all {
		if ids[e.EventID] != 1 {
			t.Fatalf("event %s stored %d times", e.EventID, ids[e.EventID])
		}
	}
	if st := p.Stats(); st.SpoolDepth != 0 || st.Replayed == 0 {
		t.Fatalf("after replay: %+v", st)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFullSpoolRefusesAndKeepsWhatItHas: with NATS unreachable and a tiny
// spool, Publish refuses with ErrSinkUnavailable once full; everything it
// accepted arrives once NATS comes up, in a publisher restarted on the same
// spool.
func TestFullSpoolRefusesAndKeepsWhatItHas(t *testing.T) {
	port := testenv.FreePort(t)
	u := "nats://127.0.0.1:" + strconv.Itoa(port)
	nc := connect(t, u)
	ctx := context.Background()
	spoolDir := t.TempDir()
	p, err := New(ctx, Config{Conn: nc, SpoolDir: spoolDir, SpoolMaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	g := eventgen.New("host-b")
	var accepted []schema.Event
	var refusedErr error
	for i := 0; i < 1000 && refusedErr == nil; i++ {
		evs := g.Mixed(20)
		if err := p.Publish(ctx, evs); err != nil {
			refusedErr = err
			break
		}
		accepted = append(accepted, evs...)
	}
	if !errors.Is(refusedErr, ErrSinkUnavailable) {
		t.Fatalf("spool never refused (err %v)", refusedErr)
	}
	if len(accepted) == 0 {
		t.Fatal("spool accepted nothing")
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_ = p.Close(cctx) // NATS is down: the spool keeps the events
	nc.Close()

	srv := startNATS(t, t.TempDir(), port)
	defer srv.Shutdown()
	nc2 := connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc2)
	if _, err := stream.Ensure(ctx, js, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	p2, err := New(ctx, Config{Conn: nc2, SpoolDir: spoolDir, ReplayInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if err := p2.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	ids, _ := readAll(t, nc2, len(accepted))
	if len(ids) != len(accepted) {
		t.Fatalf("%d events in the stream, %d accepted", len(ids), len(accepted))
	}
	for _, e := range accepted {
		if ids[e.EventID] != 1 {
			t.Fatalf("accepted event %s stored %d times", e.EventID, ids[e.EventID])
		}
	}
	if err := p2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptsOrphanedSpools: a run that ended while NATS was away left its
// spool behind; the next publisher configured to adopt such spools
// delivers them and removes the directory.
func TestAdoptsOrphanedSpools(t *testing.T) {
	port := testenv.FreePort(t)
	nc := connect(t, "nats://127.0.0.1:"+strconv.Itoa(port))
	ctx := context.Background()
	root := t.TempDir()
	orphan := filepath.Join(root, "run-1")
	p, err := New(ctx, Config{Conn: nc, SpoolDir: orphan})
	if err != nil {
		t.Fatal(err)
	}
	evs := eventgen.New("host-o").Mixed(300)
	if err := p.Publish(ctx, evs); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_ = p.Close(cctx)

	srv := startNATS(t, t.TempDir(), port)
	defer srv.Shutdown()
	nc2 := connect(t, srv.ClientURL())
	p2, err := New(ctx, Config{Conn: nc2, SpoolDir: filepath.Join(root, "run-2"), EnsureStream: &stream.Config{},
		Adopt: filepath.Join(root, "run-*"), ReplayInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close(ctx)
	ids, _ := readAll(t, nc2, len(evs))
	if len(ids) != len(evs) {
		t.Fatalf("%d of %d orphaned events delivered", len(ids), len(evs))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(orphan); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("drained orphan spool not removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNewOutlastsAServerAway: the publisher starts while its server is
// away (restarting; or this process was stopped while its request waited):
// the first request to make the stream times out, New retries, and makes
// it once the server is back. Before, that first timeout ended New and
// with it the daemon (exit 72).
func TestNewOutlastsAServerAway(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	port := testenv.FreePort(t)
	s := startNATS(t, dir, port)
	// Requests made while the server is away wait in the client's
	// reconnect buffer until they time out.
	nc, err := stream.Connect(stream.ConnOptions{URL: s.ClientURL(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s.Shutdown()
	deadline := time.Now().Add(2 * time.Minute)
	for nc.Status() == nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice the server going within 2 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	logs := &lineLog{want: "retrying", seen: make(chan struct{})}
	type result struct {
		p   *Publisher
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := New(context.Background(), Config{Conn: nc, SpoolDir: t.TempDir(), EnsureStream: &stream.Config{}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		done <- result{p, err}
	}()
	select {
	case <-logs.seen:
	case r := <-done:
		t.Fatalf("New with the server away ended before retrying: %v", r.err)
	}
	s = startNATS(t, dir, port)
	defer s.Shutdown()
	r := <-done
	if r.err != nil {
		t.Fatalf("New after the server came back: %v", r.err)
	}
	defer r.p.Close(context.Background())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(context.Background(), stream.Name); err != nil {
		t.Fatalf("the stream after New: %v", err)
	}
}

// lineLog is a log writer that closes seen at the first line holding want.
type lineLog struct {
	mu   sync.Mutex
	want string
	seen chan struct{}
	once sync.Once
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.Contains(string(p), l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return len(p), nil
}
