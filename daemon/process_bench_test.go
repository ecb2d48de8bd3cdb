package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/daemon/runs"
	"github.com/mcpwarden/mcpwarden/schema"
)

type discardSink struct{ n int }

func (s *discardSink) Publish(_ context.Context, events []schema.Event) error {
	s.n += len(events)
	return nil
}

// BenchmarkRecordToEvent measures the user-space hot path for one kernel
// record: run lookup, classification, keyed path hash, event envelope and
// batching (the sink itself is measured in transport/publish).
func BenchmarkRecordToEvent(b *testing.B) {
	hasher, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	sink := &discardSink{}
	d, err := New(Config{Socket: "unused", Sink: sink, Hasher: hasher, Origin: schema.LocalOrigin()})
	if err != nil {
		b.Fatal(err)
	}
	slot, _ := d.table.Add(&runs.Run{ID: "r", ScopeID: "s", RootPID: 10, Policy: classify.Policy{
		Workspace: []string{"/srv/app"}, ReadOnly: true, Runtime: []classify.RuntimePath{{Path: "/usr/lib"}, {Path: "/usr/bin/node"}}}})
	p := newProcessor(d)
	r := kevent.Record{KtimeNS: uint64(time.Now().UnixNano()), TGID: 10, PID: 10, Slot: slot, Op: kevent.OpOpenat,
		Ret: 5, Comm: "node", Path1: "/srv/app/node_modules/pkg/dist/index.js", Path1OK: true}
	b.ReportAllocs()
	for b.Loop() {
		p.record(&r)
		if len(p.batch) >= 512 {
			p.flush(context.Background())
		}
	}
}
