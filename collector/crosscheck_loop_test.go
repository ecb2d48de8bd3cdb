package collector

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestCrossCheckJudgesRunsAcrossASlowPass: a run whose evidence became
// final while a cross-check pass took longer than the loop's slack is
// still judged. The loop listed only the runs stored within the window
// plus three periods before each pass, so evidence not final at one pass
// and older than that at the next was never judged: its run read CLEAN
// whatever it did (seen on 18.16 at load 20-30: TestCollectEndToEnd got
// none of its three findings). Here the collector's clock moves 30 s per
// pass after the first (window 15 s, period 200 ms): on the code before,
// the ESCAPE below was never found.
func TestCrossCheckJudgesRunsAcrossASlowPass(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	st := openStore(t, e.dsn)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := eventgen.New("host-slow-pass")
	g.T0 = time.Now().Add(-30 * time.Minute)
	evs := g.Mixed(200)
	esc := g.FileOp(1)
	esc.FileOp.PathClass, esc.FileOp.Verdict, esc.FileOp.PathHash = schema.PathOutside, "escape", g.Hasher.Hash("/etc/passwd")
	evs = append(evs, esc)
	if err := st.Insert(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	c := e.collector(t, func(c *Config) {
		c.CrossCheck = true
		c.CrossCheckEvery = 200 * time.Millisecond
		c.CrossCheckCfg = crosscheck.Config{Window: 15 * time.Second}
		// The first pass sees the events just stored (not final); each
		// later one runs 30 s after the one before, as a slow pass would.
		c.Now = func() time.Time { return time.Now().Add(time.Duration(calls.Add(1)-1) * 30 * time.Second) }
	})
	start(t, c)
	if got := waitCount(t, st, "SELECT uniqExact(event_id) FROM events WHERE kind = 'finding' AND finding_type = 'ESCAPE'", 1, 2*time.Minute); got != 1 {
		t.Fatalf("%d ESCAPE findings after the passes (%d clock reads, stats %+v), want 1: the run was never judged", got, calls.Load(), c.Stats())
	}
}
