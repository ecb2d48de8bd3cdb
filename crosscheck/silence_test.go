package crosscheck

import (
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestCheckSilence: a run on a host whose daemon stopped reporting for
// longer than DaemonSilence while the run was live gets one OBSERVATION_GAP
// daemon_silent, final only once the late-event window has passed; runs
// the daemon reported through, or that ended before it went silent, get
// none. A run on a host with no daemon report from DaemonSilence before it
// on (no daemon at all, or one started later) gets one no_daemon, live or
// not (it read CLEAN while live before).
func TestCheckSilence(t *testing.T) {
	cfg := Config{Window: 10 * time.Second, DaemonSilence: 30 * time.Second}
	every := func(from, to time.Duration) []time.Duration {
		var out []time.Duration
		for at := from; at <= to; at += 10 * time.Second {
			out = append(out, at)
		}
		return out
	}
	const none = -1
	for _, tc := range []struct {
		name     string
		reports  []time.Duration // daemon health reports
		other    []time.Duration // another component's (the launcher's) reports
		start    time.Duration
		exit     time.Duration // none: no exit record
		asOf     time.Duration
		want     bool
		wantTime time.Duration // when the silence reached DaemonSilence
		noDaemon bool          // the reason is no_daemon, not daemon_silent
	}{
		{name: "daemon reports throughout", reports: every(-20*time.Second, 600*time.Second), start: 0, exit: 300 * time.Second, asOf: 600 * time.Second},
		{name: "live run, daemon reporting", reports: every(-20*time.Second, 600*time.Second), start: 0, exit: none, asOf: 600 * time.Second},
		{name: "killed mid-run, no exit record", reports: every(-20*time.Second, 60*time.Second), start: 0, exit: none, asOf: 600 * time.Second, want: true, wantTime: 90 * time.Second},
		{name: "killed mid-run, exit by the launcher's spool", reports: every(-20*time.Second, 60*time.Second), start: 0, exit: 65 * time.Second, asOf: 600 * time.Second, want: true, wantTime: 90 * time.Second},
		{name: "killed, then back after the bound", reports: append(every(-20*time.Second, 60*time.Second), every(200*time.Second, 600*time.Second)...), start: 0, exit: 300 * time.Second, asOf: 600 * time.Second, want: true, wantTime: 90 * time.Second},
		{name: "restarted within the bound", reports: append(every(-20*time.Second, 60*time.Second), every(85*time.Second, 600*time.Second)...), start: 0, exit: 300 * time.Second, asOf: 600 * time.Second},
		{name: "silence not final yet", reports: every(-20*time.Second, 60*time.Second), start: 0, exit: none, asOf: 95 * time.Second},
		{name: "silence final at the window", reports: every(-20*time.Second, 60*time.Second), start: 0, exit: none, asOf: 100 * time.Second, want: true, wantTime: 90 * time.Second},
		{name: "run ended before the daemon went silent", reports: every(-20*time.Second, 60*time.Second), start: 0, exit: 30 * time.Second, asOf: 600 * time.Second},
		{name: "no daemon report before the run", reports: every(100*time.Second, 600*time.Second), start: 0, exit: 300 * time.Second, asOf: 600 * time.Second, want: true, wantTime: 0, noDaemon: true},
		{name: "host without a daemon", other: every(-20*time.Second, 600*time.Second), start: 0, exit: 300 * time.Second, asOf: 600 * time.Second, want: true, noDaemon: true},
		{name: "host without a daemon, live run", start: 0, exit: none, asOf: 600 * time.Second, want: true, noDaemon: true},
		{name: "host without a daemon, not final yet", start: 0, exit: none, asOf: 9 * time.Second},
		{name: "only the launcher reports", reports: every(-20*time.Second, 60*time.Second), other: every(-20*time.Second, 600*time.Second), start: 0, exit: none, asOf: 600 * time.Second, want: true, wantTime: 90 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(schema.ModeEnforce)
			r.start(tc.start, false)
			r.op(tc.start+time.Second, "/ws/a", schema.PathWorkspace, schema.OpRead, 0, "allowed")
			if tc.exit != none {
				r.exit(tc.exit)
			}
			var health []schema.Event
			for _, comp := range []struct {
				name string
				at   []time.Duration
			}{{"daemon", tc.reports}, {"launcher", tc.other}} {
				for _, at := range comp.at {
					e := r.o.NewEvent(schema.KindHealth, "", "", "", t0.Add(at))
					e.Health = &schema.Health{Component: comp.name, AuditStream: "on"}
					health = append(health, e)
				}
			}
			// Another host's silent daemon says nothing about this run.
			other := schema.Origin{Host: "h2", BootID: "b"}.NewEvent(schema.KindHealth, "", "", "", t0)
			other.Health = &schema.Health{Component: "daemon"}
			health = append(health, other)
			got := CheckSilence(r.evs, health, cfg, t0.Add(tc.asOf))
			if !tc.want {
				if len(got) != 0 {
					t.Fatalf("got %+v, want no finding", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d findings, want 1: %+v", len(got), got)
			}
			f := got[0]
			reason := ReasonDaemonSilent
			if tc.noDaemon {
				reason = ReasonNoDaemon
			}
			if f.Finding.Type != schema.FindingObservationGap || f.Finding.Reason != reason || f.RunID != r.id || f.Host != "h1" {
				t.Fatalf("got %+v", f)
			}
			if wantNS := t0.Add(tc.wantTime).UnixNano(); tc.wantTime != 0 && f.TimeNS != wantNS {
				t.Fatalf("dated %v, want %v", time.Duration(f.TimeNS-t0.UnixNano()), tc.wantTime)
			}
			// The same finding (one row) whether or not the daemon came back.
			later := CheckSilence(r.evs, append(health, func() schema.Event {
				e := r.o.NewEvent(schema.KindHealth, "", "", "", t0.Add(tc.asOf+time.Second))
				e.Health = &schema.Health{Component: "daemon"}
				return e
			}()), cfg, t0.Add(tc.asOf+time.Hour))
			if len(later) != 1 || later[0].EventID != f.EventID {
				t.Fatalf("after the daemon came back: %+v, want the same finding %s", later, f.EventID)
			}
		})
	}
}
