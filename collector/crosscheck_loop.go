package collector

import (
	"context"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/schema"
)

// maxRunEvents bounds how much of one run the cross-check reads per pass.
const maxRunEvents = 1_000_000

// crossCheckLoop re-checks every run that had events stored recently: runs
// with new events, and runs whose events are just leaving the late-event
// window. The first pass looks back an hour, to cover a collector restart.
func (c *Collector) crossCheckLoop(ctx context.Context, st *store.Store) {
	window := c.cfg.CrossCheckCfg.Window
	if window <= 0 {
		window = 2 * time.Minute
	}
	emitted := map[string]bool{}
	// prev is the clock of the last pass that succeeded. A run is listed
	// again while any of its evidence that was not final then may be final
	// now: stored after prev minus the window (three periods of slack for
	// the server's clock and inserted_at's second resolution). A fixed
	// look-back of window plus three periods missed every run whose last
	// evidence became final while a pass took longer than the slack (a
	// loaded machine, a big fleet): such a run was never judged, and read
	// CLEAN whatever it did.
	var prev time.Time
	from := func(now time.Time) time.Time {
		if prev.IsZero() {
			return now.Add(-time.Hour)
		}
		return prev.Add(-window - 3*c.cfg.CrossCheckEvery)
	}
	t := time.NewTicker(c.cfg.CrossCheckEvery)
	defer t.Stop()
	for {
		switch now, err := c.crossCheckPass(ctx, st, from, emitted); {
		case err == nil:
			c.xcheckPasses.Add(1)
			prev = now
		case ctx.Err() == nil:
			c.xcheckFailures.Add(1)
			c.log.Warn("cross-check pass failed; retrying next period", "error", err)
		}
		if len(emitted) > 1_000_000 {
			clear(emitted) // re-inserting a finding is harmless: it collapses
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CrossCheckOnce runs one pass over runs stored in the last lookback (for
// tests and `mcpwarden collect --once`).
func (c *Collector) CrossCheckOnce(ctx context.Context, lookback time.Duration) error {
	st, err := store.Open(ctx, c.cfg.ClickHouseDSN, false, c.log)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = c.crossCheckPass(ctx, st, func(now time.Time) time.Time { return now.Add(-lookback) }, map[string]bool{})
	return err
}

// crossCheckPass judges the runs with events stored since from(now) and
// returns now, the clock the pass judged by.
func (c *Collector) crossCheckPass(ctx context.Context, st *store.Store, from func(now time.Time) time.Time, emitted map[string]bool) (time.Time, error) {
	now := c.cfg.Now()
	since := from(now)
	// inserted_at has second resolution and is the server's clock.
	runs, err := st.RunsInsertedSince(ctx, since.Unix()-1, 100_000)
	if err != nil {
		return now, err
	}
	healthSince := since.Add(-time.Hour).UnixNano()
	health, err := st.ReadHealthSince(ctx, healthSince)
	if err != nil {
		return now, err
	}
	// A host whose daemon went silent stops sending its runs' events, so
	// they leave RunsInsertedSince before the silence is final: its runs
	// with events in the hour before its last report are checked too.
	silence := c.cfg.CrossCheckCfg.DaemonSilence
	if silence <= 0 {
		silence = crosscheck.DefaultDaemonSilence
	}
	lastReport := map[string]int64{}
	for _, h := range health {
		if h.Health != nil && h.Health.Component == "daemon" {
			lastReport[h.Host] = max(lastReport[h.Host], h.TimeNS)
		}
	}
	seenRun := map[store.RunRef]bool{}
	for _, r := range runs {
		seenRun[r] = true
	}
	for host, last := range lastReport {
		if now.UnixNano()-last <= silence.Nanoseconds() {
			continue
		}
		more, err := st.RunsOnHostSince(ctx, host, last-time.Hour.Nanoseconds(), 100_000)
		if err != nil {
			return now, err
		}
		for _, r := range more {
			if !seenRun[r] {
				seenRun[r] = true
				runs = append(runs, r)
			}
		}
	}
	// The daemon's reports of each host, read once per pass from before
	// the earliest run that needs them.
	type hostReports struct {
		since int64
		evs   []schema.Event
	}
	reports := map[string]*hostReports{}
	daemonHealth := func(host string, since int64) ([]schema.Event, error) {
		if h := reports[host]; h != nil && h.since <= since {
			return h.evs, nil
		}
		if since >= healthSince && len(health) < 100_000 {
			// Within the health already read (complete: under its limit).
			var evs []schema.Event
			for _, e := range health {
				if e.Host == host && e.Health != nil && e.Health.Component == "daemon" {
					evs = append(evs, e)
				}
			}
			reports[host] = &hostReports{since: healthSince, evs: evs}
			return evs, nil
		}
		evs, err := st.ReadDaemonHealth(ctx, host, since, 1_000_000)
		if err != nil {
			return nil, err
		}
		reports[host] = &hostReports{since: since, evs: evs}
		return evs, nil
	}
	for _, run := range runs {
		evs, arrived, err := st.ReadRunArrived(ctx, run, maxRunEvents)
		if err != nil {
			return now, err
		}
		var fresh []schema.Event
		// Final once the evidence is a window old both by when it happened
		// and by when it was stored: a backlog stored late (a collector
		// catching up) is not judged before the rest of it arrived.
		findings := crosscheck.CheckArrived(evs, arrived, c.cfg.CrossCheckCfg, now)
		if len(evs) > 0 {
			// evs is oldest first: the run's daemon reports from a
			// silence before it started.
			hs, err := daemonHealth(run.Host, evs[0].TimeNS-silence.Nanoseconds()-1)
			if err != nil {
				return now, err
			}
			findings = append(findings, crosscheck.CheckSilenceArrived(evs, arrived, hs, c.cfg.CrossCheckCfg, now)...)
		}
		for _, f := range findings {
			if !emitted[f.EventID] {
				fresh = append(fresh, f)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		if err := st.Insert(ctx, fresh); err != nil {
			return now, err
		}
		for _, f := range fresh {
			emitted[f.EventID] = true
		}
		c.countFindings(fresh)
	}
	// Host-level observation gaps from health reports.
	var fresh []schema.Event
	for _, f := range crosscheck.Check(health, c.cfg.CrossCheckCfg, now) {
		if !emitted[f.EventID] {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) > 0 {
		if err := st.Insert(ctx, fresh); err != nil {
			return now, err
		}
		for _, f := range fresh {
			emitted[f.EventID] = true
		}
		c.countFindings(fresh)
	}
	return now, nil
}
