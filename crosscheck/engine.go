package crosscheck

import (
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Engine runs the cross-check continuously over an event stream (the
// daemon on one host): Add events as they arrive, call Findings
// periodically (every second or so) to get what changed since the last
// call:
//
//   - a provisional finding (status provisional, an id of its own) as soon
//     as its evidence is Settle old, for every type but
//     UNATTRIBUTED_ACCESS, which rests on the absence of a call record
//     (the proxy writes a call's record when the call ends, so a call in
//     progress is invisible until then);
//   - the final finding (no status, the id Check gives it) once its
//     evidence is older than the window;
//   - a withdrawn finding for a provisional one whose window passed
//     without a final finding of the same type and kernel evidence (late
//     evidence changed the conclusion).
//
// It keeps each run's events until the run has exited and twice the window
// has passed, and health events for twice the window.
type Engine struct {
	cfg       Config
	maxPerRun int
	mu        sync.Mutex
	runs      map[runKey]*runState
	health    *runState // the host-level events: health reports
}

type runState struct {
	events []schema.Event
	seen   map[string]bool
	calls  map[string]bool // ids of the decision records among events
	// arrived is when each event was added (Unix ns), by id: a finding is
	// judged by when its evidence arrived as well as when it happened.
	arrived map[string]int64
	// all caches checkAll over events; dirty says events changed since.
	all   []schema.Event
	dirty bool
	// emitted holds the ids of final findings reported, confirmed their
	// keys; provisional maps the key of each provisional finding reported
	// and not yet resolved to it.
	emitted     map[string]bool
	confirmed   map[string]bool
	provisional map[string]pending
	exitNS      int64
	lastNS      int64 // wall clock of the last Add to this run
	capped      bool
}

// pending is a provisional finding reported and not yet resolved, and
// when its evidence settled.
type pending struct {
	ev      schema.Event
	settled int64
}

func newRunState() *runState {
	return &runState{seen: map[string]bool{}, calls: map[string]bool{}, arrived: map[string]int64{}, emitted: map[string]bool{},
		confirmed: map[string]bool{}, provisional: map[string]pending{}}
}

// NewEngine returns an engine; maxEventsPerRun bounds memory per run
// (default 200,000): a run over it gets an OBSERVATION_GAP finding
// (reason crosscheck_overflow) and its further file operations are not
// checked in this engine (the collector still checks them from ClickHouse).
func NewEngine(cfg Config, maxEventsPerRun int) *Engine {
	if maxEventsPerRun <= 0 {
		maxEventsPerRun = 200_000
	}
	return &Engine{cfg: cfg.withDefaults(), maxPerRun: maxEventsPerRun, runs: map[runKey]*runState{}, health: newRunState()}
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
			if h := en.health; !h.seen[e.EventID] {
				h.seen[e.EventID] = true
				h.arrived[e.EventID] = now.UnixNano()
				h.events = append(h.events, e)
				h.dirty = true
			}
			continue
		case e.RunID == "":
			continue
		}
		k := runKey{e.Host, e.RunID}
		r := en.runs[k]
		if r == nil {
			r = newRunState()
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
		r.arrived[e.EventID] = now.UnixNano()
		r.events = append(r.events, e)
		r.dirty = true
		if e.Kind == schema.KindDecision {
			r.calls[e.EventID] = true
		}
		if e.Kind == schema.KindLaunch && e.Launch.Phase == schema.PhaseExit {
			r.exitNS = now.UnixNano()
		}
	}
}

// Findings returns what changed as of now (provisional, final and
// withdrawn findings not returned before), and forgets runs that are done.
func (en *Engine) Findings(now time.Time) []schema.Event {
	en.mu.Lock()
	defer en.mu.Unlock()
	var out []schema.Event
	keep := 2 * en.cfg.Window.Nanoseconds()
	for k, r := range en.runs {
		out = en.report(out, r, now)
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
	out = en.report(out, en.health, now)
	en.trimHealth(now)
	sortEvents(out)
	return out
}

// report appends to out what changed in r's findings as of now.
func (en *Engine) report(out []schema.Event, r *runState, now time.Time) []schema.Event {
	if r.dirty {
		r.all = checkAll(r.events, en.cfg)
		sortEvents(r.all)
		r.dirty = false
	}
	cutoff := now.Add(-en.cfg.Window).UnixNano()
	settled := now.Add(-en.cfg.Settle).UnixNano()
	for i := range r.all {
		f := r.all[i]
		if f.TimeNS > settled {
			break // sorted by time: the rest has not settled either
		}
		key := r.key(&f)
		at := settledAt(&f, r.arrived, 0) // the daemon dates and judges on one clock
		switch {
		case at > settled:
			continue
		case at <= cutoff:
			if !r.emitted[f.EventID] {
				r.emitted[f.EventID] = true
				r.confirmed[key] = true
				out = append(out, f)
			}
		case f.Finding.Type != schema.FindingUnattributedAccess:
			if _, ok := r.provisional[key]; !ok && !r.confirmed[key] {
				p := provisional(f, key)
				r.provisional[key] = pending{p, at}
				out = append(out, p)
			}
		}
	}
	// A provisional finding whose window passed is confirmed by a final
	// one with its key (which may still be waiting for late evidence of
	// its own), or withdrawn when the findings no longer hold its key.
	var present map[string]bool
	for key, p := range r.provisional {
		if p.settled > cutoff {
			continue
		}
		if !r.confirmed[key] {
			if present == nil {
				present = make(map[string]bool, len(r.all))
				for i := range r.all {
					present[r.key(&r.all[i])] = true
				}
			}
			if present[key] {
				continue // its final finding is on its way
			}
			out = append(out, withdrawn(p.ev))
		}
		delete(r.provisional, key)
	}
	return out
}

// trimHealth keeps the health reports of the last two windows, and the
// newest one per source so that counters keep comparing.
func (en *Engine) trimHealth(now time.Time) {
	h := en.health
	if len(h.events) == 0 {
		return
	}
	latest := map[[3]string]schema.Event{}
	var kept []schema.Event
	cut := now.Add(-2 * en.cfg.Window).UnixNano()
	for _, e := range h.events {
		key := [3]string{e.Host, e.BootID, e.Health.Component}
		if cur, ok := latest[key]; !ok || e.TimeNS > cur.TimeNS {
			latest[key] = e
		}
		if e.TimeNS > cut {
			kept = append(kept, e)
		}
	}
	for _, e := range latest {
		if e.TimeNS <= cut {
			kept = append(kept, e)
		}
	}
	if len(kept) != len(h.events) {
		h.events = kept
		h.dirty = true
		arrived := make(map[string]int64, len(kept))
		for _, e := range kept {
			arrived[e.EventID] = h.arrived[e.EventID]
		}
		h.arrived = arrived
	}
}

// key is what a provisional finding and the final one that confirms it
// share: the type and the kernel's evidence (file operations, Landlock
// records, launch and health records). The calls in flight may still
// arrive, and with them the final finding's id and tool; and its reason
// may still change (a denial taken for start-up turns out to fall inside a
// call); so neither is part of the key.
func (r *runState) key(f *schema.Event) string {
	kernel := make([]string, 0, len(f.Finding.EvidenceIDs))
	for _, id := range f.Finding.EvidenceIDs {
		if !r.calls[id] {
			kernel = append(kernel, id)
		}
	}
	return FindingID(f.Finding.Type, "", kernel)
}

// provisional is f reported early: status provisional, an id of its own
// derived from its key (the final finding has Check's id).
func provisional(f schema.Event, key string) schema.Event {
	f.EventID = FindingID(f.Finding.Type, string(schema.StatusProvisional), []string{key})
	fc := *f.Finding
	fc.Status = schema.StatusProvisional
	f.Finding = &fc
	return f
}

// withdrawn retracts provisional finding p: same type, its evidence is p.
func withdrawn(p schema.Event) schema.Event {
	w := p
	w.EventID = FindingID(p.Finding.Type, string(schema.StatusWithdrawn), []string{p.EventID})
	fc := *p.Finding
	fc.Status = schema.StatusWithdrawn
	fc.EvidenceIDs = []string{p.EventID}
	w.Finding = &fc
	return w
}
