package xcheck

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
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
	sink := &memSink{}
	l, err := New(Config{JetStream: js, Host: "here", Sink: sink, Check: crosscheck.Config{Window: 200 * time.Millisecond}, Every: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for l.Findings() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no finding within 2 minutes")
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
	testLoopSurvivesLostConsumer(t, 0)
}

// TestLoopResumesAfterASlowLossNotice loses the consumer and tells the
// loop only after more than two windows: what was published meanwhile is
// still checked. With no pull pending, the client notices the loss only
// after two missed heartbeats (about 10 s), longer than a short window;
// the loop once restarted twice a window back from the notice and skipped
// it (ci24, load 28: "no findings after the consumer was lost").
func TestLoopResumesAfterASlowLossNotice(t *testing.T) {
	testLoopSurvivesLostConsumer(t, 5*time.Second)
}

// slowLossJS hands out consumers whose loss is reported after delay.
type slowLossJS struct {
	jetstream.JetStream
	delay time.Duration
}

func (j slowLossJS) CreateConsumer(ctx context.Context, name string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
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

// testLoopSurvivesLostConsumer: an escape gives a provisional then a final
// finding; the consumer is deleted (the loop learns of it after
// noticeDelay), another escape is published at once, and it gives its two
// findings too.
func testLoopSurvivesLostConsumer(t *testing.T, noticeDelay time.Duration) {
	root := t.TempDir()
	creds, err := natsserver.LoadOrCreateCredentials(stream.CredentialsDir(root))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, Auth: creds, EventHost: "here"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := stream.Connect(ns.Client(stream.RoleDaemon, "test"))
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
	publishEscape := func(hash string) {
		t.Helper()
		e := schema.Origin{Host: "here", BootID: "b"}.NewEvent(schema.KindFileOp, schema.NewID(), "s", "", time.Now())
		e.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: "read", PathHash: schema.PathHash(strings.Repeat(hash, 32)), PathClass: schema.PathOutside, Verdict: "escape", PID: 7, Comm: "node"}
		body, _ := schema.EncodeBatch([]schema.Event{e})
		if _, err := js.Publish(ctx, stream.Subject("here", schema.KindFileOp), body); err != nil {
			t.Fatal(err)
		}
	}
	publishEscape("cd")
	sink := &memSink{}
	l, err := New(Config{JetStream: slowLossJS{JetStream: js, delay: noticeDelay}, Host: "here", Sink: sink, Check: crosscheck.Config{Window: 2 * time.Second, Settle: 100 * time.Millisecond}, Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	waitFor := func(what string, n uint64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for l.Findings() < n {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 2 minutes", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("provisional finding", 1)
	waitFor("final finding", 2)
	// The server loses the consumer: the loop creates it again and sees
	// what comes next.
	if err := js.DeleteConsumer(ctx, stream.Name, stream.CrossCheckConsumer("here")); err != nil {
		t.Fatal(err)
	}
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
