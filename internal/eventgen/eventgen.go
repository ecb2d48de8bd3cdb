// Package eventgen makes valid, varied events for the pipeline's tests and
// benchmarks.
package eventgen

import (
	"fmt"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Gen produces events for one host and run.
type Gen struct {
	Origin    schema.Origin
	RunID     string
	ScopeID   string
	ScopeHash string
	Hasher    *schema.PathHasher
	T0        time.Time
	n         int
}

// New returns a generator for host.
func New(host string) *Gen {
	h, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	return &Gen{
		Origin:    schema.Origin{Host: host, BootID: "0b6c2a58-4a4d-4f3b-9a55-2f3c5e0d9e11"},
		RunID:     schema.NewID(),
		ScopeID:   "scope-test",
		ScopeHash: "sha256:5a1f3e0c9b7d2e4f6a8c0b1d3e5f7a9c2b4d6e8f0a1c3e5b7d9f1a3c5e7b9d0f",
		Hasher:    h,
		// Recent, so that the default retention (file operations 30 days)
		// keeps what a test inserts.
		T0: time.Now().Add(-time.Hour).Truncate(time.Second),
	}
}

func (g *Gen) next(kind schema.Kind) schema.Event {
	g.n++
	return g.Origin.NewEvent(kind, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Duration(g.n)*time.Millisecond))
}

// FileOp returns a file operation on a path derived from i.
func (g *Gen) FileOp(i int) schema.Event {
	e := g.next(schema.KindFileOp)
	e.FileOp = &schema.FileOp{
		Syscall: "openat", FlagsClass: "read", Result: 0,
		PathHash: g.Hasher.Hash(fmt.Sprintf("/work/base/file-%d", i%1000)), PathClass: schema.PathWorkspace,
		Verdict: "allowed", PID: 1000 + i%7, Comm: "node",
	}
	return e
}

// Decision returns an allowed tools/call decision.
func (g *Gen) Decision(i int) schema.Event {
	e := g.next(schema.KindDecision)
	start := e.TimeNS
	e.Decision = &schema.Decision{
		OpID: fmt.Sprintf("op-%d", i), Method: "tools/call", ProtocolEra: "legacy", ProtocolVersion: "2025-11-25",
		ServerOrigin: "stdio", Tool: "read_text_file", ActionClass: "read", Decision: "allow", Approval: "not_required",
		LatencyMS: 1.5, StartNS: start, EndNS: start + int64(2*time.Millisecond),
	}
	return e
}

// Mixed returns n events: mostly file operations, some decisions, one
// launch start.
func (g *Gen) Mixed(n int) []schema.Event {
	out := make([]schema.Event, 0, n)
	for i := 0; i < n; i++ {
		switch {
		case i == 0:
			e := g.next(schema.KindLaunch)
			e.Launch = &schema.Launch{Phase: "start", Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node"}
			out = append(out, e)
		case i%10 == 0:
			out = append(out, g.Decision(i))
		default:
			out = append(out, g.FileOp(i))
		}
	}
	return out
}
