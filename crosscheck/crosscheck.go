// Package crosscheck checks kernel evidence against the protocol audit, per
// run: it joins tool-call decisions, file operations seen by the eBPF probes
// and the kernel's Landlock denial records by run, time and path hash, and
// concludes findings (ESCAPE, BLOCKED_ATTEMPT, PROXY_GAP,
// UNATTRIBUTED_ACCESS, UNDECLARED_WRITE, OBSERVATION_GAP), which are events
// themselves.
//
// Check is pure: the same set of events gives the same findings whatever
// order they arrived in (events are sorted by time and id first), and a
// finding's id is a hash of its type, reason and evidence ids, so the same
// finding computed twice (by two collectors, by the daemon and a collector,
// or after a restart) is one row in the store.
//
// Late events: a finding is only final once its anchor time (the time of
// its earliest evidence) is older than asOf - Window. Any event that
// arrives within Window of the time it happened is therefore taken into
// account; an event later than that is judged on its own arrival and
// cannot retract a finding already emitted (it may add one). The streaming
// Engine also reports findings provisionally, as soon as their evidence is
// Settle old, and withdraws a provisional finding that the final check
// does not confirm.
//
// Attribution: a tool call explains kernel activity from the moment the
// proxy forwarded it until Slack after its answer went back; never before
// it started. In a run whose proxy identified the server (a launch record
// of phase identified), activity before the first tool call is start-up:
// a read there is the server's own business (no UNATTRIBUTED_ACCESS), a
// kernel denial there is a BLOCKED_ATTEMPT with reason
// kernel_denied_at_startup and never a PROXY_GAP. A relayed run has no
// calls to wait for, and so no start-up.
package crosscheck

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Config tunes the cross-check. The zero value uses the defaults.
type Config struct {
	// Window is the late-event window (default 2 minutes): how long after
	// an event happened it may still arrive and change a finding.
	Window time.Duration
	// Slack extends each tool call's [start, end] interval past its end
	// when attributing file operations to it (default 250 ms): the proxy
	// stamps forward and response, the kernel stamps the operation in
	// between, on the same host, and a server may finish the call's work
	// just after answering. A call never explains what happened before it
	// was forwarded.
	Slack time.Duration
	// DenialMatch pairs a Landlock denial record with the failed file
	// operation it explains when both are this close in time, same path hash
	// and pid (default 2 s).
	DenialMatch time.Duration
	// Settle is how old a finding's evidence must be before the Engine
	// reports it provisionally (default 1 s): long enough for the other
	// half of a kernel denial (the eBPF operation and the Landlock record)
	// to arrive, short enough that a finding reaches `mcpwarden events`
	// within a few seconds.
	Settle time.Duration
	// DaemonSilence is how long a host's daemon may send no health report
	// while a run is live before the run gets an OBSERVATION_GAP
	// daemon_silent (default DefaultDaemonSilence: three of the daemon's
	// default report intervals).
	DaemonSilence time.Duration
}

func (c Config) withDefaults() Config {
	if c.Window <= 0 {
		c.Window = 2 * time.Minute
	}
	if c.Slack <= 0 {
		c.Slack = 250 * time.Millisecond
	}
	if c.DenialMatch <= 0 {
		c.DenialMatch = 2 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = time.Second
	}
	if c.DaemonSilence <= 0 {
		c.DaemonSilence = DefaultDaemonSilence
	}
	return c
}

// Reasons: stable classes carried in Finding.Reason.
const (
	ReasonSucceededOutside = "succeeded_outside_scope"
	ReasonKernelDenied     = "kernel_denied"
	ReasonDeniedAtStartup  = "kernel_denied_at_startup"
	ReasonDeniedInAllowed  = "kernel_denied_during_allowed_call"
	ReasonNoCallInFlight   = "no_call_in_flight"
	ReasonWriteInReadCall  = "write_during_read_call"
	ReasonLandlockDegraded = "landlock_degraded"
	ReasonNoKernelEvents   = "no_kernel_events"
	ReasonEventsDropped    = "events_dropped"
	ReasonAuditStream      = "audit_stream_unavailable"
)

const (
	eacces = -13
	eperm  = -1
)

type runKey struct{ host, run string }

type call struct {
	ev         *schema.Event
	start, end int64
}

// Check returns the findings that events support and that are final as of
// asOf. Findings in the input are ignored (they are conclusions, not
// evidence).
func Check(events []schema.Event, cfg Config, asOf time.Time) []schema.Event {
	return CheckArrived(events, nil, cfg, asOf)
}

// CheckArrived is Check for events that may have arrived well after they
// happened: arrived gives, by event id, when each arrived (Unix ns; an
// event not in it arrived when it happened). A finding is final once its
// evidence is older than the window both by when it happened and by when
// it arrived, so a backlog delivered late (a collector catching up, a
// daemon re-reading the stream after a restart) is judged only once the
// rest of it had a window to arrive too.
//
// Event times are the emitting host's clock, arrivals and asOf the
// judge's. A host whose clock is ahead dates its evidence in the judge's
// future: when arrivals say so (ClockOffset below zero), when it happened
// is read on the judge's clock, so its findings are not held back by the
// skew (up to the hour the collector takes; before, an ESCAPE on a host 30
// minutes ahead was reported 30 minutes late).
func CheckArrived(events []schema.Event, arrived map[string]int64, cfg Config, asOf time.Time) []schema.Event {
	cfg = cfg.withDefaults()
	cutoff := asOf.Add(-cfg.Window).UnixNano()
	ahead, _ := ClockOffset(events, arrived)
	ahead = min(ahead, 0)
	all := checkAll(events, cfg)
	out := all[:0]
	for _, f := range all {
		if settledAt(&f, arrived, ahead) <= cutoff {
			out = append(out, f)
		}
	}
	sortEvents(out)
	return out
}

// ClockOffset estimates how far the judge's clock is ahead of the clock
// that dated events (Unix ns; negative: the emitting host's clock is
// ahead), from the events whose arrival is known: the smallest arrival
// minus time. Transport delay and a backlog only make it larger, never
// smaller, so a correction by it never judges anything earlier than the
// evidence could have arrived. ok is false when no arrival is known.
func ClockOffset(events []schema.Event, arrived map[string]int64) (offset int64, ok bool) {
	for i := range events {
		e := &events[i]
		if e.Kind == schema.KindFinding {
			continue
		}
		a, known := arrived[e.EventID]
		if !known {
			continue
		}
		if d := a - e.TimeNS; !ok || d < offset {
			offset, ok = d, true
		}
	}
	return offset, ok
}

// settledAt is the later of when a finding's evidence happened (its time,
// moved by ahead: the emitting clock's lead, ≤ 0) and when the last of its
// evidence arrived.
func settledAt(f *schema.Event, arrived map[string]int64, ahead int64) int64 {
	t := f.TimeNS + ahead
	for _, id := range f.Finding.EvidenceIDs {
		if a, ok := arrived[id]; ok && a > t {
			t = a
		}
	}
	return t
}

// checkAll returns every finding events support, final or not.
func checkAll(events []schema.Event, cfg Config) []schema.Event {
	groups := map[runKey][]*schema.Event{}
	seen := map[string]bool{}
	var health []*schema.Event
	for i := range events {
		e := &events[i]
		if seen[e.EventID] || e.Kind == schema.KindFinding {
			continue
		}
		seen[e.EventID] = true
		if e.Kind == schema.KindHealth {
			health = append(health, e)
			continue
		}
		if e.RunID == "" {
			continue
		}
		k := runKey{e.Host, e.RunID}
		groups[k] = append(groups[k], e)
	}
	var out []schema.Event
	keys := make([]runKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].host != keys[j].host {
			return keys[i].host < keys[j].host
		}
		return keys[i].run < keys[j].run
	})
	for _, k := range keys {
		out = append(out, checkRun(groups[k], cfg)...)
	}
	return append(out, checkHealth(health)...)
}

// callStart is when a decision's call was forwarded (or denied).
func callStart(e *schema.Event) int64 {
	if e.Decision.StartNS != 0 {
		return e.Decision.StartNS
	}
	return e.TimeNS
}

func sortEvents(evs []schema.Event) {
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].TimeNS != evs[j].TimeNS {
			return evs[i].TimeNS < evs[j].TimeNS
		}
		return evs[i].EventID < evs[j].EventID
	})
}

func sortPtrs(evs []*schema.Event) {
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].TimeNS != evs[j].TimeNS {
			return evs[i].TimeNS < evs[j].TimeNS
		}
		return evs[i].EventID < evs[j].EventID
	})
}

// FindingID is the deterministic id of a finding.
func FindingID(typ schema.FindingType, reason string, evidence []string) string {
	ids := slices.Clone(evidence)
	slices.Sort(ids)
	sum := sha256.Sum256([]byte("mcpwarden-finding-v1|" + string(typ) + "|" + reason + "|" + strings.Join(ids, ",")))
	return hex.EncodeToString(sum[:16])
}

func finding(anchor *schema.Event, t int64, typ schema.FindingType, sev schema.Severity, reason string, evidence []string, c *call, ph schema.PathHash, pc schema.PathClass) schema.Event {
	ids := slices.Clone(evidence)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	f := schema.Event{
		EventID: FindingID(typ, reason, ids), SchemaVersion: schema.EventSchemaVersion,
		Host: anchor.Host, BootID: anchor.BootID, RunID: anchor.RunID, ScopeID: anchor.ScopeID, ScopeHash: anchor.ScopeHash,
		Kind: schema.KindFinding, TimeNS: t,
		Finding: &schema.Finding{Type: typ, Severity: sev, EvidenceIDs: ids, Reason: reason, PathHash: ph, PathClass: pc},
	}
	if c != nil {
		f.Finding.Tool, f.Finding.OpID = c.ev.Decision.Tool, c.ev.Decision.OpID
	}
	return f
}

func checkRun(evs []*schema.Event, cfg Config) []schema.Event {
	sortPtrs(evs)
	var (
		out     []schema.Event
		calls   []call
		ops     []*schema.Event
		denials []*schema.Event
		start   *schema.Event
		exit    *schema.Event
		mode    = schema.ModeEnforce
		slack   = cfg.Slack.Nanoseconds()
		// firstCall is when the first tool call was forwarded: whatever
		// happened before is the server's start-up. Only a run whose proxy
		// identified the server (launch phase identified) has calls to
		// wait for; a relayed run (--proxy=false) has no start-up.
		firstCall int64 = math.MaxInt64
		proxied   bool
	)
	for _, e := range evs {
		switch e.Kind {
		case schema.KindLaunch:
			switch {
			case e.Launch.Phase == schema.PhaseStart && start == nil:
				start = e
				mode = e.Launch.Mode
			case e.Launch.Phase == schema.PhaseIdentified:
				proxied = true
			case e.Launch.Phase == schema.PhaseExit && exit == nil:
				exit = e
			}
		case schema.KindDecision:
			d := e.Decision
			if d.Tool == "" {
				continue // not a tool call
			}
			if s := callStart(e); s < firstCall {
				firstCall = s // allowed or denied: the client is calling
			}
			if d.Decision != schema.OutcomeAllow {
				continue // a denied call never reached the server
			}
			s := callStart(e)
			end := d.EndNS + slack
			if d.EndNS == 0 || d.EndNS < s {
				end = math.MaxInt64 // still in flight as far as we know
			}
			calls = append(calls, call{ev: e, start: s, end: end})
		case schema.KindFileOp:
			ops = append(ops, e)
		case schema.KindLandlockDenial:
			denials = append(denials, e)
		}
	}
	if !proxied {
		firstCall = math.MinInt64
	}
	sort.SliceStable(calls, func(i, j int) bool {
		if calls[i].start != calls[j].start {
			return calls[i].start < calls[j].start
		}
		return calls[i].ev.EventID < calls[j].ev.EventID
	})
	// Calls still open (no end seen) are few; the rest are found by binary
	// search on start and a bounded look-back of the longest call.
	var open, closed []call
	var longest int64
	for _, c := range calls {
		if c.end == math.MaxInt64 {
			open = append(open, c)
			continue
		}
		closed = append(closed, c)
		longest = max(longest, c.end-c.start)
	}
	inflight := func(t int64) []call {
		var in []call
		hi := sort.Search(len(closed), func(i int) bool { return closed[i].start > t })
		for i := hi - 1; i >= 0 && closed[i].start >= t-longest; i-- {
			if closed[i].end >= t {
				in = append(in, closed[i])
			}
		}
		for _, c := range open {
			if c.start <= t {
				in = append(in, c)
			}
		}
		sort.Slice(in, func(i, j int) bool {
			if in[i].start != in[j].start {
				return in[i].start < in[j].start
			}
			return in[i].ev.EventID < in[j].ev.EventID
		})
		return in
	}
	ids := func(cs []call) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.ev.EventID
		}
		return out
	}
	first := func(cs []call) *call {
		if len(cs) == 0 {
			return nil
		}
		return &cs[0]
	}

	// Failed file operations the kernel refused, to pair with Landlock's
	// own records of the same attempt.
	var refused []*schema.Event
	for _, e := range ops {
		f := e.FileOp
		in := inflight(e.TimeNS)
		denied := f.Verdict == "blocked_by_kernel" || f.Result == eacces || f.Result == eperm
		success := f.Result >= 0 && f.Verdict != "blocked_by_kernel"
		outside := f.PathClass == schema.PathOutside || f.PathClass == schema.PathSecret
		switch {
		case denied:
			refused = append(refused, e)
		case success && (f.Verdict == "escape" || outside):
			sev := schema.SeverityCritical
			if mode == schema.ModeAudit {
				sev = schema.SeverityHigh // the fence was off on purpose: a would-have-been denial
			}
			out = append(out, finding(e, e.TimeNS, schema.FindingEscape, sev, ReasonSucceededOutside,
				append([]string{e.EventID}, ids(in)...), first(in), f.PathHash, f.PathClass))
		case success && len(in) == 0 && f.PathClass == schema.PathWorkspace && (e.TimeNS >= firstCall || f.FlagsClass != schema.OpRead):
			// A read before the first call is start-up; a write there is not.
			out = append(out, finding(e, e.TimeNS, schema.FindingUnattributedAccess, schema.SeverityMedium, ReasonNoCallInFlight,
				[]string{e.EventID}, nil, f.PathHash, f.PathClass))
		}
		if (f.FlagsClass == "write" || f.FlagsClass == "create") && f.PathClass != schema.PathRuntime && f.PathClass != schema.PathUnknown && len(in) > 0 {
			allRead := true
			for _, c := range in {
				if c.ev.Decision.ActionClass != "read" {
					allRead = false
				}
			}
			if allRead {
				out = append(out, finding(e, e.TimeNS, schema.FindingUndeclaredWrite, schema.SeverityHigh, ReasonWriteInReadCall,
					append([]string{e.EventID}, ids(in)...), first(in), f.PathHash, f.PathClass))
			}
		}
	}

	// Blocked attempts: every Landlock record, joined with the refused file
	// operation of the same pid and path nearby; refused operations without
	// a record stand alone.
	match := cfg.DenialMatch.Nanoseconds()
	used := make([]bool, len(refused))
	type attempt struct {
		evs []*schema.Event
	}
	var attempts []attempt
	for _, d := range denials {
		a := attempt{evs: []*schema.Event{d}}
		for i, r := range refused {
			if used[i] {
				continue
			}
			dt := r.TimeNS - d.TimeNS
			if dt < 0 {
				dt = -dt
			}
			samePath := d.LandlockDenial.PathHash == "" || r.FileOp.PathHash == "" || d.LandlockDenial.PathHash == r.FileOp.PathHash
			samePID := d.LandlockDenial.PID == 0 || r.FileOp.PID == 0 || d.LandlockDenial.PID == r.FileOp.PID
			if dt <= match && samePath && samePID {
				used[i] = true
				a.evs = append(a.evs, r)
				break
			}
		}
		attempts = append(attempts, a)
	}
	for i, r := range refused {
		if !used[i] {
			attempts = append(attempts, attempt{evs: []*schema.Event{r}})
		}
	}
	for _, a := range attempts {
		sortPtrs(a.evs)
		anchor := a.evs[0]
		var ph schema.PathHash
		var pc schema.PathClass
		var evidence []string
		// When it happened: the eBPF operation's time when there is one
		// (nanoseconds), else the Landlock record's (milliseconds).
		at := anchor.TimeNS
		for _, e := range a.evs {
			evidence = append(evidence, e.EventID)
			switch {
			case e.FileOp != nil:
				ph, pc = e.FileOp.PathHash, e.FileOp.PathClass
				at = e.TimeNS
			case e.LandlockDenial != nil && ph == "":
				ph, pc = e.LandlockDenial.PathHash, e.LandlockDenial.PathClass
			}
		}
		sev := schema.SeverityMedium
		switch pc {
		case schema.PathSecret:
			sev = schema.SeverityHigh
		case schema.PathRuntime:
			sev = schema.SeverityLow
		}
		in := inflight(at)
		reason := ReasonKernelDenied
		if at < firstCall {
			reason = ReasonDeniedAtStartup
		}
		out = append(out, finding(anchor, anchor.TimeNS, schema.FindingBlockedAttempt, sev, reason,
			append(slices.Clone(evidence), ids(in)...), first(in), ph, pc))
		if len(in) > 0 {
			out = append(out, finding(anchor, anchor.TimeNS, schema.FindingProxyGap, schema.SeverityHigh, ReasonDeniedInAllowed,
				append(slices.Clone(evidence), ids(in)...), first(in), ph, pc))
		}
	}

	// Observation gaps of the run itself.
	if start != nil && start.Launch.Degraded {
		out = append(out, finding(start, start.TimeNS, schema.FindingObservationGap, schema.SeverityMedium, ReasonLandlockDegraded,
			[]string{start.EventID}, nil, "", ""))
	}
	if exit != nil && len(ops) == 0 && len(denials) == 0 {
		evidence := []string{exit.EventID}
		if start != nil {
			evidence = append(evidence, start.EventID)
		}
		out = append(out, finding(exit, exit.TimeNS, schema.FindingObservationGap, schema.SeverityMedium, ReasonNoKernelEvents,
			evidence, nil, "", ""))
	}
	return out
}

// checkHealth reports drop counters that grew and an audit stream that is
// not on, per (host, boot, component), once per change.
func checkHealth(evs []*schema.Event) []schema.Event {
	sortPtrs(evs)
	type key struct{ host, boot, comp string }
	type state struct {
		drops    uint64
		auditOff bool
	}
	last := map[key]state{}
	var out []schema.Event
	for _, e := range evs {
		h := e.Health
		k := key{e.Host, e.BootID, h.Component}
		prev := last[k]
		drops := h.DropsBPFReserve + h.DropsQueueFull + h.DropsPublishFail
		if drops > prev.drops {
			out = append(out, finding(e, e.TimeNS, schema.FindingObservationGap, schema.SeverityHigh, ReasonEventsDropped,
				[]string{e.EventID}, nil, "", ""))
		}
		off := h.AuditStream == "off" || h.AuditStream == "unavailable"
		if off && !prev.auditOff {
			out = append(out, finding(e, e.TimeNS, schema.FindingObservationGap, schema.SeverityLow, ReasonAuditStream,
				[]string{e.EventID}, nil, "", ""))
		}
		last[k] = state{drops: max(drops, prev.drops), auditOff: off}
	}
	return out
}
