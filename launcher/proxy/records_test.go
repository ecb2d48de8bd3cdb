package proxy

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/schema"
)

// deferSink is a launcher.DeferSyncSink that notes how each record came.
type deferSink struct {
	mu               sync.Mutex
	synced, deferred []string // op ids
}

func (d *deferSink) Publish(_ context.Context, evs []schema.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		d.synced = append(d.synced, ev.Decision.OpID)
	}
	return nil
}

func (d *deferSink) PublishDeferSync(_ context.Context, evs []schema.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		d.deferred = append(d.deferred, ev.Decision.OpID)
	}
	return nil
}

func (d *deferSink) got() (synced, deferred []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.synced), slices.Clone(d.deferred)
}

var _ launcher.DeferSyncSink = (*deferSink)(nil)

func startRecorder(sink launcher.Sink, delay time.Duration) *recorder {
	s := &session{cfg: &Config{Sink: sink, FlushDelay: delay, Scope: &schema.CanonicalScope{}}, log: slog.New(slog.DiscardHandler)}
	s.rec = newRecorder(s)
	go s.rec.run()
	return s.rec
}

// TestRecorderDefersOnlyTheLastBatchsSync: batches of a running session
// are published (and synced) as they go; the batch taken when the session
// has ended goes through PublishDeferSync where the sink offers it, since
// the run's exit record follows it in the same log; a sink without it
// gets every batch through Publish.
func TestRecorderDefersOnlyTheLastBatchsSync(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		ds := &deferSink{}
		r := startRecorder(ds, 0)
		r.add(schema.Decision{OpID: "a"})
		deadline := time.Now().Add(time.Minute)
		for synced, _ := ds.got(); len(synced) == 0; synced, _ = ds.got() {
			if time.Now().After(deadline) {
				t.Fatal("the batch of a running session was never published")
			}
			time.Sleep(time.Millisecond)
		}
		r.close()
		if synced, deferred := ds.got(); !slices.Equal(synced, []string{"a"}) || len(deferred) != 0 {
			t.Errorf("synced %q, deferred %q; want [a] synced", synced, deferred)
		}
	})
	t.Run("ended", func(t *testing.T) {
		ds := &deferSink{}
		r := startRecorder(ds, time.Hour) // nothing goes before close
		r.add(schema.Decision{OpID: "b"})
		r.add(schema.Decision{OpID: "c"})
		r.close()
		if synced, deferred := ds.got(); len(synced) != 0 || !slices.Equal(deferred, []string{"b", "c"}) {
			t.Errorf("synced %q, deferred %q; want [b c] deferred", synced, deferred)
		}
	})
	t.Run("plain sink", func(t *testing.T) {
		m := &memSink{}
		r := startRecorder(m, time.Hour)
		r.add(schema.Decision{OpID: "d"})
		r.close()
		if got := m.decisions(); len(got) != 1 || got[0].OpID != "d" {
			t.Errorf("plain sink got %+v", got)
		}
	})
}

// TestRecorderAddAllocatesNothing: queueing a record on a reader makes no
// id, no envelope and no copy on the heap (the writer does that off the
// call path); it was two allocations per call (TestRecorderAddAllocatesNothing
// fails on the code before).
func TestRecorderAddAllocatesNothing(t *testing.T) {
	m := &memSink{}
	r := startRecorder(m, time.Hour) // nothing goes before close
	d := schema.Decision{OpID: "x", Method: "tools/call", Tool: "echo"}
	if n := testing.AllocsPerRun(100, func() { r.add(d) }); n != 0 {
		t.Errorf("recorder.add allocates %v times per record, want 0", n)
	}
	r.close()
	got := m.decisions()
	if len(got) != 101 || got[0].OpID != "x" || got[100].Method != "tools/call" {
		t.Fatalf("the sink got %d records (%+v...), want 101 copies of the record", len(got), got[:min(len(got), 1)])
	}
}
