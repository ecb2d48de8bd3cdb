package proxy

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// TestRecordCompletedByWriter: the record writer completes a call's record
// off the call path (recorder.event) and the record is what it was when
// the reader built it: an allowed call's record gets its own op id and the
// keyed hashes of the paths it was checked against, in order; a denied
// call's record keeps the op id its answer named. (A guard for the move
// of the op id and the hashing to the writer: it holds on the code before.)
func TestRecordCompletedByWriter(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.AllowedPaths = []string{"allowed"} }})
	c := f.client
	c.initLegacy(false)
	h, err := schema.NewPathHasher(make([]byte, schema.PathKeySize)) // the fixture's key
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(f.base, "allowed", "probe.txt")
	out := filepath.Join(f.base, "outside", "probe.txt")
	for range 2 {
		if r := c.read(in); r.IsError || !strings.Contains(r.text(), "MARKER-ALLOWED") {
			t.Fatalf("read inside the scope = %+v", r)
		}
	}
	r := c.read(out)
	if denialCode(r) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("read outside the scope = %+v", r)
	}
	opID, _ := r.Meta["io.mcpwarden/op_id"].(string)
	isTool := func(d schema.Decision) bool { return d.Method == "tools/call" && d.Tool == "read_text_file" }
	denied := f.sink.waitDecision(t, func(d schema.Decision) bool { return isTool(d) && d.Decision == schema.OutcomeDeny })
	if opID == "" || denied.OpID != opID || !slices.Equal(denied.PathHashes, []schema.PathHash{h.Hash(out)}) {
		t.Fatalf("denied call's record %+v, its answer's op id %q", denied, opID)
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	// An allowed call's record is queued after its answer was written, so
	// the last one may follow the denial's: wait for both.
	var allowed []schema.Decision
	for deadline := time.Now().Add(2 * time.Minute); len(allowed) < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		allowed = allowed[:0]
		for _, d := range f.sink.decisions() {
			if isTool(d) && d.Decision == schema.OutcomeAllow {
				allowed = append(allowed, d)
			}
		}
	}
	if len(allowed) != 2 || allowed[0].OpID == allowed[1].OpID || allowed[0].OpID == opID {
		t.Fatalf("allowed calls' records = %+v", allowed)
	}
	for _, d := range allowed {
		if !hexID.MatchString(d.OpID) || !slices.Equal(d.PathHashes, []schema.PathHash{h.Hash(in)}) {
			t.Fatalf("allowed call's record = %+v", d)
		}
	}
}
