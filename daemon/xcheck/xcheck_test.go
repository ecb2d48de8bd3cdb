package xcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

type memSink struct {
	mu     sync.Mutex
	events []schema.Event
}

func (s *memSink) Publish(_ context.Context, evs []schema.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, evs...)
	return nil
}

// TestLoopFindsEscapeOfThisHost publishes a successful read outside the
// scope for this host and one for another host to a real JetStream, and
// expects exactly one ESCAPE finding: this host's.
func TestLoopFindsEscapeOfThisHost(t *testing.T) {
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(t.TempDir(), "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := stream.Ensure(ctx, js, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	hash := schema.PathHash(strings.Repeat("ab", 32))
	escape := func(host string) schema.Event {
		e := schema.Origin{Host: host, BootID: "b"}.NewEvent(schema.KindFileOp, schema.NewID(), "s", "", time.Now())
		e.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: "read", PathHash: hash, PathClass: schema.PathOutside, Verdict: "escape", PID: 7, Comm: "node"}
		return e
	}
	sink := &memSink{}
	l, err := New(Config{JetStream: js, Host: "here", Sink: sink, Check: crosscheck.Config{Window: 200 * time.Millisecond}, Every: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	// Published once the loop reads: it starts two windows back, and a
	// stall of more than 400 ms between publishing first and starting lost
	// both events (once in ~30 runs at load 13).
	waitConsumer(t, ctx, js)
	for _, host := range []string{"here", "elsewhere"} {
		e := escape(host)
		body, err := schema.EncodeBatch([]schema.Event{e})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, stream.Subject(host, schema.KindFileOp), body); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for l.Findings() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no finding within 2 minutes (%d events received, %d batches rejected)", l.received.Load(), l.rejected.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a finding for the other host would have come by now
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.events) != 1 {
		t.Fatalf("%d findings, want 1: %+v", len(sink.events), sink.events)
	}
	f := sink.events[0]
	if f.Host != "here" || f.Finding.Type != schema.FindingEscape || f.Finding.PathHash != hash {
		t.Errorf("finding %+v on host %s", *f.Finding, f.Host)
	}
}

// TestLoopUnderHostPermissions runs the loop as the daemon role of the
// embedded server (which may read only this host's events, through its
// cross-check consumer): an escape is reported provisionally first, then
// final after the window, and the loop survives its consumer being deleted.
func TestLoopUnderHostPermissions(t *testing.T) {
	testLoopSurvivesLostConsumer(t, 0, 0, 0, deleteConsumer)
}

// TestLoopRetriesMakingTheConsumerAgain: after the loss, the first three
// attempts to make the consumer again fail; the loop retries and checks
// what comes next. Before, the first failed attempt ended the loop (and
// the daemon): ci38 failed TestLoopUnderHostPermissions this way at load
// 15, once in ~80 runs here.
func TestLoopRetriesMakingTheConsumerAgain(t *testing.T) {
	testLoopSurvivesLostConsumer(t, 0, 0, 3, deleteConsumer)
}

// TestLoopResumesAfterASlowLossNotice loses the consumer and tells the
// loop only after more than two windows: what was published meanwhile is
// still checked. With no pull pending, the client notices the loss only
// after two missed heartbeats (about 10 s), longer than a short window;
// the loop once restarted twice a window back from the notice and skipped
// it (ci24, load 28: "no findings after the consumer was lost").
func TestLoopResumesAfterASlowLossNotice(t *testing.T) {
	testLoopSurvivesLostConsumer(t, 0, 5*time.Second, 0, deleteConsumer)
}

// TestLoopNoticesAConsumerLostWhileDisconnected: the NATS server restarts
// from a store without the host's consumer (as when a server dropped it as
// inactive while the daemon was away). No pull is pending when it goes, so
// no one says "consumer deleted": the client misses heartbeats and its new
// pulls find no responder. The loop asks the server, makes the consumer
// again after the last message it took and checks what comes next. Before,
// it waited for a word that never came and the host's cross-check went dark
// without a log line (a consumer deleted between two pulls does the same;
// ci38 failed TestLoopUnderHostPermissions at load 15 with "no findings
// after the consumer was lost").
func TestLoopNoticesAConsumerLostWhileDisconnected(t *testing.T) {
	testLoopSurvivesLostConsumer(t, 0, 0, 0, restartWithoutConsumer)
}

// TestLoopStartOutlastsATimedOutRequest: the start's first two requests to
// make the consumer time out (as a daemon's does when it is stopped while
// the request waits, or a loaded server answers late); the loop retries
// and checks as before. Before, the start's first error ended the loop and
// the daemon (exit 71): ci45 failed TestDaemonStoppedMidRunIsAGap so, its
// SIGSTOP landing while the cross-check still made its consumer.
func TestLoopStartOutlastsATimedOutRequest(t *testing.T) {
	testLoopSurvivesLostConsumer(t, 2, 0, 0, deleteConsumer)
}

// TestLoopStartNamesAConfigurationError: a consumer that cannot be made
// for good (here: no stream) ends the start at its first attempt, with the
// cause, not after the retries' two minutes.
func TestLoopStartNamesAConfigurationError(t *testing.T) {
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(t.TempDir(), "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	attempts := countingJS{JetStream: js, deletes: new(atomic.Int32)}
	l, err := New(Config{JetStream: attempts, Host: "here", Sink: &memSink{}, Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Run(context.Background())
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), stream.Name) {
		t.Fatalf("Run = %v, want the stream %s not found", err, stream.Name)
	}
	if n := attempts.deletes.Load(); n != 1 {
		t.Fatalf("%d attempts to make the consumer, want 1 (no retry of a configuration error)", n)
	}
}

// countingJS counts the attempts to make the consumer (each begins by
// removing the old one).
type countingJS struct {
	jetstream.JetStream
	deletes *atomic.Int32
}

func (j countingJS) DeleteConsumer(ctx context.Context, streamName, name string) error {
	j.deletes.Add(1)
	return j.JetStream.DeleteConsumer(ctx, streamName, name)
}

// lossFixture is the embedded server and connection of a lost-consumer test.
type lossFixture struct {
	cfg natsserver.Config
	ns  *natsserver.Server
	js  jetstream.JetStream
}

// deleteConsumer deletes the host's consumer on the running server.
func deleteConsumer(t *testing.T, ctx context.Context, f *lossFixture) {
	if err := f.js.DeleteConsumer(ctx, stream.Name, stream.CrossCheckConsumer("here")); err != nil {
		t.Fatal(err)
	}
}

// restartWithoutConsumer stops the server, removes the host's consumer
// from its store and starts it again on the same port.
func restartWithoutConsumer(t *testing.T, _ context.Context, f *lossFixture) {
	f.ns.Shutdown()
	name := stream.CrossCheckConsumer("here")
	var removed int
	err := filepath.WalkDir(f.cfg.StoreDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == name && filepath.Base(filepath.Dir(path)) == "obs" {
			removed++
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil || removed != 1 {
		t.Fatalf("removing consumer %s from the store: %v (%d found)", name, err, removed)
	}
	ns, err := natsserver.Start(f.cfg)
	if err != nil {
		t.Fatalf("restart the server: %v", err)
	}
	f.ns = ns
}

// slowLossJS hands out consumers whose loss is reported after delay. The
// first timeOuts creations are real requests whose time has run out; the
// creations after the first that succeeds fail while failAgain counts down
// (the server still removing the old consumer, or restarting).
type slowLossJS struct {
	jetstream.JetStream
	delay     time.Duration
	timeOuts  int32
	created   *atomic.Int32
	failAgain *atomic.Int32
}

func (j slowLossJS) CreateConsumer(ctx context.Context, name string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	n := j.created.Add(1)
	if n <= j.timeOuts {
		late, cancel := context.WithDeadline(ctx, time.Now())
		defer cancel()
		_, err := j.JetStream.CreateConsumer(late, name, cfg)
		if !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("a request out of time answered %v, want %v", err, context.DeadlineExceeded)
		}
		return nil, err
	}
	if n > j.timeOuts+1 && j.failAgain.Add(-1) >= 0 {
		return nil, errors.New("nats: JetStream system temporarily unavailable")
	}
	c, err := j.JetStream.CreateConsumer(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	return slowLossConsumer{Consumer: c, delay: j.delay}, nil
}

type slowLossConsumer struct {
	jetstream.Consumer
	delay time.Duration
}

func (c slowLossConsumer) Consume(h jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	slow := make([]jetstream.PullConsumeOpt, 0, len(opts))
	for _, o := range opts {
		if inner, ok := o.(jetstream.ConsumeErrHandler); ok && c.delay > 0 {
			o = jetstream.ConsumeErrHandler(func(cc jetstream.ConsumeContext, err error) {
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
					time.AfterFunc(c.delay, func() { inner(cc, err) })
					return
				}
				inner(cc, err)
			})
		}
		slow = append(slow, o)
	}
	return c.Consumer.Consume(h, slow...)
}

// testLoopSurvivesLostConsumer: the start's first startTimeOuts requests
// to make the consumer time out; an escape gives a provisional then a final
// finding; the consumer is lost (the loop learns of it after noticeDelay,
// if it is told; making it again fails failAgain times), another escape is
// published, and it gives its two findings too.
func testLoopSurvivesLostConsumer(t *testing.T, startTimeOuts int32, noticeDelay time.Duration, failAgain int32, lose func(*testing.T, context.Context, *lossFixture)) {
	root := t.TempDir()
	creds, err := natsserver.LoadOrCreateCredentials(stream.CredentialsDir(root))
	if err != nil {
		t.Fatal(err)
	}
	f := &lossFixture{cfg: natsserver.Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: testenv.FreePort(t), Auth: creds, EventHost: "here"}}
	if f.ns, err = natsserver.Start(f.cfg); err != nil {
		t.Fatal(err)
	}
	defer func() { f.ns.Shutdown() }()
	nc, err := stream.Connect(f.ns.Client(stream.RoleDaemon, "test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	f.js = js
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := stream.Ensure(ctx, js, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	publishEscape := func(hash string) {
		t.Helper()
		e := schema.Origin{Host: "here", BootID: "b"}.NewEvent(schema.KindFileOp, schema.NewID(), "s", "", time.Now())
		e.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: "read", PathHash: schema.PathHash(strings.Repeat(hash, 32)), PathClass: schema.PathOutside, Verdict: "escape", PID: 7, Comm: "node"}
		body, _ := schema.EncodeBatch([]schema.Event{e})
		// After a restart the connection comes back on its own: publish
		// once it has (a publish is acknowledged by the stream, so it is
		// stored once).
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, err := js.Publish(ctx, stream.Subject("here", schema.KindFileOp), body)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	sink := &memSink{}
	failing := new(atomic.Int32)
	failing.Store(failAgain)
	l, err := New(Config{JetStream: slowLossJS{JetStream: js, delay: noticeDelay, timeOuts: startTimeOuts, created: new(atomic.Int32), failAgain: failing}, Host: "here", Sink: sink, Logger: testLog(t), Check: crosscheck.Config{Window: 2 * time.Second, Settle: 100 * time.Millisecond}, Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	waitConsumer(t, ctx, js)
	publishEscape("cd")
	waitFor := func(what string, n uint64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for l.Findings() < n {
			select {
			case err := <-done:
				t.Fatalf("waiting for the %s, the loop ended: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 2 minutes (%d events received, %d batches rejected, %d findings)", what, l.received.Load(), l.rejected.Load(), l.Findings())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("provisional finding", 1)
	waitFor("final finding", 2)
	// The server loses the consumer: the loop creates it again and sees
	// what comes next.
	lose(t, ctx, f)
	publishEscape("ef")
	waitFor("findings after the consumer was lost", 4)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.events) != 4 {
		t.Fatalf("%d findings, want provisional then final, twice: %+v", len(sink.events), sink.events)
	}
	for i, want := range []schema.FindingStatus{schema.StatusProvisional, schema.StatusFinal, schema.StatusProvisional, schema.StatusFinal} {
		if f := sink.events[i].Finding; f.Type != schema.FindingEscape || f.Status != want {
			t.Fatalf("finding %d: %+v, want an ESCAPE %q", i, *f, want)
		}
	}
}

// waitConsumer waits until the loop's consumer exists: what is published
// after is read whatever the loop's start point.
func waitConsumer(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := js.Consumer(ctx, stream.Name, stream.CrossCheckConsumer("here"))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop's consumer was not made within 2 minutes: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLog returns a logger writing to t's log until the test ends (the
// loop may still log while it stops).
func testLog(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, nil))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
