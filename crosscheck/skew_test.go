package crosscheck

import (
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestClockSkew: a host's events are dated by its clock, the collector
// judges by its own. A host whose clock is behind by more than
// DaemonSilence plus the window, with its daemon reporting every minute,
// must not have its live clean runs called daemon_silent (before, every
// one was); a host ahead by half an hour must have an ESCAPE reported one
// window after it arrived, not half an hour later, and a daemon that died
// there found as soon as on a host with the right time. The offset comes
// from the arrivals (ClockOffset); with none known, nothing changes.
func TestClockSkew(t *testing.T) {
	cfg := Config{Window: 10 * time.Second, DaemonSilence: 3 * time.Minute}
	const latency = 150 * time.Millisecond
	for _, tc := range []struct {
		name    string
		skew    time.Duration // the host's clock minus the collector's
		reports time.Duration // daemon reports from -5 min until this (host time)
		escape  bool          // the run reads a file outside its scope
		asOf    time.Duration // the collector's clock, after the run's last arrival
		want    []string      // TYPE:reason, final as of asOf
	}{
		{name: "in step, daemon reporting", skew: 0, reports: 10 * time.Minute, asOf: 30 * time.Second},
		{name: "10 minutes behind, daemon reporting", skew: -10 * time.Minute, reports: 10 * time.Minute, asOf: 30 * time.Second},
		{name: "59 minutes behind, daemon reporting", skew: -59 * time.Minute, reports: 10 * time.Minute, asOf: 30 * time.Second},
		{name: "10 minutes behind, daemon killed", skew: -10 * time.Minute, reports: 2 * time.Minute, asOf: 30 * time.Second,
			want: []string{"OBSERVATION_GAP:" + ReasonDaemonSilent}},
		{name: "30 minutes ahead, escape", skew: 30 * time.Minute, reports: 10 * time.Minute, escape: true, asOf: cfg.Window + time.Second,
			want: []string{"ESCAPE:" + ReasonSucceededOutside}},
		{name: "30 minutes ahead, daemon killed", skew: 30 * time.Minute, reports: 2 * time.Minute, asOf: 30 * time.Second,
			want: []string{"OBSERVATION_GAP:" + ReasonDaemonSilent}},
		{name: "in step, daemon killed", skew: 0, reports: 2 * time.Minute, asOf: 30 * time.Second,
			want: []string{"OBSERVATION_GAP:" + ReasonDaemonSilent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The run: started at 0, live, its last event at 6 min (host
			// time); each event arrives latency after it happened, on the
			// collector's clock.
			r := newRun(schema.ModeEnforce)
			r.start(0, false)
			for at := time.Second; at <= 6*time.Minute; at += time.Minute {
				r.op(at, "/usr/lib/node", schema.PathRuntime, schema.OpRead, 0, "allowed")
			}
			if tc.escape {
				r.op(6*time.Minute, "/etc/passwd", schema.PathOutside, schema.OpRead, 0, "escape")
			}
			arrived := map[string]int64{}
			last := int64(0)
			for _, e := range r.evs {
				a := e.TimeNS - tc.skew.Nanoseconds() + latency.Nanoseconds()
				arrived[e.EventID], last = a, max(last, a)
			}
			var health []schema.Event
			for at := -5 * time.Minute; at <= tc.reports; at += time.Minute {
				e := r.o.NewEvent(schema.KindHealth, "", "", "", t0.Add(at))
				e.Health = &schema.Health{Component: "daemon", AuditStream: "on"}
				// A report after the collector's clock is not there yet.
				if e.TimeNS-tc.skew.Nanoseconds()+latency.Nanoseconds() <= last+tc.asOf.Nanoseconds() {
					health = append(health, e)
				}
			}
			asOf := time.Unix(0, last).Add(tc.asOf)
			var got []string
			for _, f := range append(CheckArrived(r.evs, arrived, cfg, asOf), CheckSilenceArrived(r.evs, arrived, health, cfg, asOf)...) {
				got = append(got, string(f.Finding.Type)+":"+f.Finding.Reason)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("findings %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("findings %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestClockOffset(t *testing.T) {
	r := newRun(schema.ModeEnforce)
	a := r.start(0, false)
	b := r.op(time.Second, "/ws/a", schema.PathWorkspace, schema.OpRead, 0, "allowed")
	if _, ok := ClockOffset(r.evs, nil); ok {
		t.Fatal("an offset without arrivals")
	}
	// The smallest delay is the offset; a later arrival (a backlog) never
	// makes it smaller.
	arrived := map[string]int64{a: t0.Add(5 * time.Second).UnixNano(), b: t0.Add(time.Hour).UnixNano()}
	if off, ok := ClockOffset(r.evs, arrived); !ok || off != (5*time.Second).Nanoseconds() {
		t.Fatalf("offset %v %v, want 5s", time.Duration(off), ok)
	}
	arrived = map[string]int64{a: t0.Add(-30 * time.Minute).UnixNano()}
	if off, ok := ClockOffset(r.evs, arrived); !ok || off != (-30*time.Minute).Nanoseconds() {
		t.Fatalf("offset %v %v, want -30m", time.Duration(off), ok)
	}
}
