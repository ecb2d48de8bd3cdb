package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestCrossCheckUnderClockSkew: hosts' events are dated by their clocks,
// which the collector's need not match (a VM resumed, NTP not yet synced).
// Through the real NATS, collector and ClickHouse:
//   - a host 10 minutes behind, its daemon reporting while its clean run
//     is live: the run gets no daemon_silent gap. On the code before, the
//     collector measured the silence since the last report on its own
//     clock, and every live run there got one (10 minutes > 3 + window);
//   - a host 30 minutes ahead: its run's ESCAPE is found a window after it
//     arrived. On the code before it was held back until the collector's
//     clock reached the event's time, 30 minutes later.
//
// The hosts' events are dated off the real clock by the skew.
func TestCrossCheckUnderClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name   string
		skew   time.Duration // the host's clock minus the collector's
		escape bool
	}{
		{"host behind", -10 * time.Minute, false},
		{"host ahead", 30 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, chtest.Database(t))
			st := openStore(t, e.dsn)
			c := e.collector(t, func(c *Config) {
				c.CrossCheck = true
				c.CrossCheckEvery = 200 * time.Millisecond
				// A silence bound no stall of a loaded machine between two
				// reports reaches, far below the skew: on the code before, the
				// 10 minutes were a silence.
				c.CrossCheckCfg = crosscheck.Config{Window: time.Second, DaemonSilence: 2 * time.Minute}
			})
			start(t, c)
			host := "skewed-" + map[bool]string{true: "ahead", false: "behind"}[tc.skew > 0]
			// The host's clock reads base now; its events are dated over
			// the 3 s before, in the order a live run makes them.
			base := time.Now().Add(tc.skew).Add(-3 * time.Second)
			g := eventgen.New(host)
			report := func(at time.Time) schema.Event {
				h := g.Origin.NewEvent(schema.KindHealth, "", "", "", at)
				h.Health = &schema.Health{Component: "daemon", LandlockABI: 7, AuditStream: "on"}
				return h
			}
			// The daemon reported before the run and goes on reporting
			// (every 500 ms, far within the silence bound) while it is live.
			evs := []schema.Event{report(base)}
			g.T0 = base.Add(time.Millisecond)
			run := g.Mixed(1) // the run's launch, a call, its file operations
			evs = append(evs, run...)
			for i := 1; i <= 6; i++ {
				evs = append(evs, report(base.Add(time.Duration(i)*500*time.Millisecond)))
			}
			if tc.escape {
				esc := g.FileOp(1)
				esc.TimeNS = base.Add(2 * time.Second).UnixNano()
				esc.FileOp.PathClass, esc.FileOp.Verdict, esc.FileOp.PathHash = schema.PathOutside, "escape", g.Hasher.Hash("/etc/passwd")
				evs = append(evs, esc)
			}
			publishValid(t, e, evs)
			stored := uint64(len(run)) + 1 + 6 + map[bool]uint64{true: 1}[tc.escape]
			if got := waitCount(t, st, fmt.Sprintf("SELECT uniqExact(event_id) FROM events WHERE host = '%s' AND kind != 'finding'", host), stored, 3*time.Minute); got != stored {
				t.Fatalf("%d events stored, want %d (stats %+v)", got, stored, c.Stats())
			}
			if tc.escape {
				q := fmt.Sprintf("SELECT uniqExact(event_id) FROM events WHERE host = '%s' AND kind = 'finding' AND finding_type = 'ESCAPE'", host)
				if got := waitCount(t, st, q, 1, 3*time.Minute); got != 1 {
					t.Fatalf("no ESCAPE on a host %v ahead within 3 minutes of its arrival (stats %+v)", tc.skew, c.Stats())
				}
				return
			}
			// Every pass from here on judges all the run's evidence (a
			// window old): ten of them, and no silence gap, while the
			// daemon is still reporting (its last report is 0.5 s old on
			// its clock; 10 minutes on the collector's).
			passes := c.Stats().CrossCheckPasses
			for deadline := time.Now().Add(3 * time.Minute); c.Stats().CrossCheckPasses < passes+10; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the cross-check made %d passes in 3 minutes", c.Stats().CrossCheckPasses-passes)
				}
			}
			var gaps uint64
			if err := st.Conn().QueryRow(context.Background(), fmt.Sprintf("SELECT uniqExact(event_id) FROM events WHERE host = '%s' AND kind = 'finding' AND reason IN ('%s', '%s')", host, crosscheck.ReasonDaemonSilent, crosscheck.ReasonNoDaemon)).Scan(&gaps); err != nil {
				t.Fatal(err)
			}
			if gaps != 0 {
				evs, err := st.ReadRun(context.Background(), store.RunRef{Host: host, RunID: g.RunID}, 1000)
				for _, e := range evs {
					if e.Finding != nil {
						t.Logf("finding %s %s at %s (the run's first event at %s), evidence %v", e.Finding.Type, e.Finding.Reason, time.Unix(0, e.TimeNS).UTC().Format(time.RFC3339Nano), time.Unix(0, evs[0].TimeNS).UTC().Format(time.RFC3339Nano), e.Finding.EvidenceIDs)
					}
				}
				hs, _ := st.ReadHealthSince(context.Background(), 0)
				for _, h := range hs {
					t.Logf("report at %s", time.Unix(0, h.TimeNS).UTC().Format(time.RFC3339Nano))
				}
				t.Logf("read: %v", err)
				t.Fatalf("%d silence gaps on the live run of a host whose daemon reports, its clock %v behind the collector's", gaps, -tc.skew)
			}
		})
	}
}

func publishValid(t *testing.T, e *env, evs []schema.Event) {
	t.Helper()
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.pub.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}
