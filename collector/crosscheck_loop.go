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
	lookback := time.Hour
	t := time.NewTicker(c.cfg.CrossCheckEvery)
	defer t.Stop()
	for {
		switch err := c.crossCheckPass(ctx, st, lookback, emitted); {
		case err == nil:
			c.xcheckPasses.Add(1)
			lookback = window + 3*c.cfg.CrossCheckEvery
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
	return c.crossCheckPass(ctx, st, lookback, map[string]bool{})
}

func (c *Collector) crossCheckPass(ctx context.Context, st *store.Store, lookback time.Duration, emitted map[string]bool) error {
	now := c.cfg.Now()
	// inserted_at has second resolution and is the server's clock.
	runs, err := st.RunsInsertedSince(ctx, now.Add(-lookback).Unix()-1, 100_000)
	if err != nil {
		return err
	}
	for _, run := range runs {
		evs, arrived, err := st.ReadRunArrived(ctx, run, maxRunEvents)
		if err != nil {
			return err
		}
		var fresh []schema.Event
		// Final once the evidence is a window old both by when it happened
		// and by when it was stored: a backlog stored late (a collector
		// catching up) is not judged before the rest of it arrived.
		for _, f := range crosscheck.CheckArrived(evs, arrived, c.cfg.CrossCheckCfg, now) {
			if !emitted[f.EventID] {
				fresh = append(fresh, f)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		if err := st.Insert(ctx, fresh); err != nil {
			return err
		}
		for _, f := range fresh {
			emitted[f.EventID] = true
		}
		c.countFindings(fresh)
	}
	// Host-level observation gaps from health reports.
	health, err := st.ReadHealthSince(ctx, now.Add(-lookback-time.Hour).UnixNano())
	if err != nil {
		return err
	}
	var fresh []schema.Event
	for _, f := range crosscheck.Check(health, c.cfg.CrossCheckCfg, now) {
		if !emitted[f.EventID] {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) > 0 {
		if err := st.Insert(ctx, fresh); err != nil {
			return err
		}
		for _, f := range fresh {
			emitted[f.EventID] = true
		}
		c.countFindings(fresh)
	}
	return nil
}
