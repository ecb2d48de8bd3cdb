package crosscheck

import (
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Engine runs Check continuously over an event stream (the daemon on one
// host): Add events as they arrive, call Findings periodically to get the
// findings that became final since the last call. It keeps each run's events
// until the run has exited and twice the window has passed, and health
// events for twice the window.
type Engine struct {
	cfg         Config
	maxPerRun   int
	mu          sync.Mutex
	runs        map[runKey]*runState
	health      []schema.Event
	healthSeen  map[string]bool
	emittedHost map[string]bool
}

type runState struct {
	events  []schema.Event
	seen    map[string]bool
	emitted map[string]bool
	exitNS  int64
	lastNS  int64 // wall clock of the last Add to this run
	capped  bool
}

// NewEngine returns an engine; maxEventsPerRun bounds memory per run
// (default 200,000): a run over it gets an OBSERVATION_GAP finding
// (reason crosscheck_overflow) and its further file operations are not
// checked in this engine (the collector still checks them from ClickHouse).
func NewEngine(cfg Config, maxEventsPerRun int) *Engine {
	if maxEventsPerRun <= 0 {
		maxEventsPerRun = 200_000
	}
	return &Engine{cfg: cfg.withDefaults(), maxPerRun: maxEventsPerRun, runs: map[runKey]*runState{},
		healthSeen: map[string]bool{}, emittedHost: map[string]bool{}}
}

// ReasonOverflow marks a run the engine stopped checking in full.
const ReasonOverflow = "crosscheck_overflow"

// Add takes events in any order; duplicates are ignored.
func (en *Engine) Add(events []schema.Event, now time.Time) {
	en.mu.Lock()
	defer en.mu.Unlock()
	for _, e := range events {
		switch {
		case e.Kind == schema.KindFinding:
			continue
		case e.Kind == schema.KindHealth:
			if !en.healthSeen[e.EventID] {
				en.healthSeen[e.EventID] = true
				en.health = append(en.health, e)
			}
			continue
		case e.RunID == "":
			continue
		}
		k := runKey{e.Host, e.RunID}
		r := en.runs[k]
		if r == nil {
			r = &runState{seen: map[string]bool{}, emitted: map[string]bool{}}
			en.runs[k] = r
		}
		if r.seen[e.EventID] {
			continue
		}
		r.lastNS = now.UnixNano()
		if len(r.events) >= en.maxPerRun && (e.Kind == schema.KindFileOp || e.Kind == schema.KindLandlockDenial) {
			r.capped = true
			continue
		}
		r.seen[e.EventID] = true
		r.events = append(r.events, e)
		if e.Kind == schema.KindLaunch && e.Launch.Phase == "exit" {
			r.exitNS = now.UnixNano()
		}
	}
}

// Findings returns findings that became final as of now and were not
// returned before, and forgets runs that are done.
func (en *Engine) Findings(now time.Time) []schema.Event {
	en.mu.Lock()
	defer en.mu.Unlock()
	var out []schema.Event
	keep := 2 * en.cfg.Window.Nanoseconds()
	for k, r := range en.runs {
		for _, f := range Check(r.events, en.cfg, now) {
			if !r.emitted[f.EventID] {
				r.emitted[f.EventID] = true
				out = append(out, f)
			}
		}
		if r.capped && len(r.events) > 0 {
			anchor := r.events[0]
			f := finding(&anchor, anchor.TimeNS, schema.FindingObservationGap, schema.SeverityMedium, ReasonOverflow,
				[]string{anchor.EventID}, nil, "", "")
			if !r.emitted[f.EventID] {
				r.emitted[f.EventID] = true
				out = append(out, f)
			}
		}
		idle := now.UnixNano() - r.lastNS
		if (r.exitNS != 0 && now.UnixNano()-r.exitNS > keep) || idle > 30*keep {
			delete(en.runs, k)
		}
	}
	for _, f := range Check(en.health, en.cfg, now) {
		if !en.emittedHost[f.EventID] {
			en.emittedHost[f.EventID] = true
			out = append(out, f)
		}
	}
	// Keep the newest health report per source so counters keep comparing.
	if len(en.health) > 0 {
		latest := map[[3]string]schema.Event{}
		var old []schema.Event
		cut := now.Add(-2 * en.cfg.Window).UnixNano()
		for _, h := range en.health {
			key := [3]string{h.Host, h.BootID, h.Health.Component}
			if cur, ok := latest[key]; !ok || h.TimeNS > cur.TimeNS {
				latest[key] = h
			}
			if h.TimeNS > cut {
				old = append(old, h)
			}
		}
		for _, h := range latest {
			if h.TimeNS <= cut {
				old = append(old, h)
			}
		}
		en.health = old
	}
	sortEvents(out)
	return out
}
