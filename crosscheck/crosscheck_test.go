package crosscheck

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

var (
	t0     = time.Unix(1_780_000_000, 0)
	hasher *schema.PathHasher
)

func init() { hasher, _ = schema.NewPathHasher(make([]byte, schema.PathKeySize)) }

type run struct {
	o    schema.Origin
	id   string
	evs  []schema.Event
	mode schema.RunMode
}

func newRun(mode schema.RunMode) *run {
	return &run{o: schema.Origin{Host: "h1", BootID: "b0070"}, id: schema.NewID(), mode: mode}
}

func (r *run) ev(kind schema.Kind, at time.Duration) *schema.Event {
	e := r.o.NewEvent(kind, r.id, "scope-1", "", t0.Add(at))
	r.evs = append(r.evs, e)
	return &r.evs[len(r.evs)-1]
}

func (r *run) start(at time.Duration, degraded bool) string {
	e := r.ev(schema.KindLaunch, at)
	e.Launch = &schema.Launch{Phase: "start", Mode: r.mode, LandlockABI: 7, Degraded: degraded}
	return e.EventID
}

// identified is the proxy's record of which server runs: the run is
// proxied, so it has a start-up before its first call.
func (r *run) identified(at time.Duration) string {
	e := r.ev(schema.KindLaunch, at)
	e.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: r.mode, LandlockABI: 7, ServerName: "naive", ServerVersion: "1", ProtocolEra: "legacy"}
	return e.EventID
}

func (r *run) exit(at time.Duration) string {
	e := r.ev(schema.KindLaunch, at)
	e.Launch = &schema.Launch{Phase: "exit", Mode: r.mode, LandlockABI: 7}
	return e.EventID
}

func (r *run) call(at, dur time.Duration, tool string, class schema.ActionClass, decision schema.Outcome) string {
	e := r.ev(schema.KindDecision, at)
	e.Decision = &schema.Decision{OpID: "op-" + e.EventID[:6], Method: "tools/call", Tool: tool, ActionClass: class, Decision: decision,
		StartNS: t0.Add(at).UnixNano(), EndNS: t0.Add(at + dur).UnixNano()}
	return e.EventID
}

func (r *run) op(at time.Duration, path string, class schema.PathClass, flags schema.OpAccess, result int, verdict schema.FileVerdict) string {
	e := r.ev(schema.KindFileOp, at)
	e.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: flags, Result: result, PathHash: hasher.Hash(path), PathClass: class, Verdict: verdict, PID: 42, Comm: "node"}
	return e.EventID
}

func (r *run) denial(at time.Duration, path string, class schema.PathClass) string {
	e := r.ev(schema.KindLandlockDenial, at)
	e.LandlockDenial = &schema.LandlockDenial{Domain: "18ed00109", Blockers: []string{"fs.read_file"}, PathHash: hasher.Hash(path), PathClass: class, PID: 42}
	return e.EventID
}

type want struct {
	typ      schema.FindingType
	sev      schema.Severity
	reason   string
	evidence []string
	tool     string
}

func summarize(fs []schema.Event) []want {
	var out []want
	for _, f := range fs {
		out = append(out, want{f.Finding.Type, f.Finding.Severity, f.Finding.Reason, f.Finding.EvidenceIDs, f.Finding.Tool})
	}
	slices.SortStableFunc(out, func(a, b want) int { return strings.Compare(string(a.typ)+a.reason, string(b.typ)+b.reason) })
	return out
}

func sorted(ids ...string) []string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}

func TestCheckScenarios(t *testing.T) {
	later := t0.Add(time.Hour)
	for _, tc := range []struct {
		name  string
		build func(r *run) []want
		mode  schema.RunMode
	}{
		{"read inside scope during a read call is clean", func(r *run) []want {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			r.op(time.Second+10*time.Millisecond, "/w/a", schema.PathWorkspace, "read", 0, "allowed")
			r.op(50*time.Millisecond, "/usr/lib/x.so", schema.PathRuntime, "read", 0, "allowed")
			r.exit(2 * time.Second)
			return nil
		}, schema.ModeEnforce},
		{"escape in audit mode", func(r *run) []want {
			r.start(0, false)
			c := r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(time.Second+10*time.Millisecond, "/etc/passwd", schema.PathOutside, "read", 0, "escape")
			return []want{{schema.FindingEscape, schema.SeverityHigh, ReasonSucceededOutside, sorted(o, c), "read_text_file"}}
		}, schema.ModeAudit},
		{"escape under enforcement is critical", func(r *run) []want {
			r.start(0, false)
			o := r.op(time.Second, "/home/u/.ssh/id_rsa", schema.PathSecret, "read", 3, "escape")
			return []want{{schema.FindingEscape, schema.SeverityCritical, ReasonSucceededOutside, []string{o}, ""}}
		}, schema.ModeEnforce},
		{"kernel denial paired with its landlock record during an allowed call", func(r *run) []want {
			r.start(0, false)
			c := r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(time.Second+10*time.Millisecond, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
			d := r.denial(time.Second+11*time.Millisecond, "/etc/shadow", schema.PathOutside)
			return []want{
				{schema.FindingBlockedAttempt, schema.SeverityMedium, ReasonKernelDenied, sorted(o, d, c), "read_text_file"},
				{schema.FindingProxyGap, schema.SeverityHigh, ReasonDeniedInAllowed, sorted(o, d, c), "read_text_file"},
			}
		}, schema.ModeEnforce},
		{"kernel denial before any call is start-up", func(r *run) []want {
			r.start(0, false)
			r.identified(20 * time.Millisecond)
			d := r.denial(time.Second, "/etc/shadow", schema.PathSecret)
			return []want{{schema.FindingBlockedAttempt, schema.SeverityHigh, ReasonDeniedAtStartup, []string{d}, ""}}
		}, schema.ModeEnforce},
		{"kernel denial between calls", func(r *run) []want {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			d := r.denial(3*time.Second, "/etc/shadow", schema.PathSecret)
			return []want{{schema.FindingBlockedAttempt, schema.SeverityHigh, ReasonKernelDenied, []string{d}, ""}}
		}, schema.ModeEnforce},
		{"a call right after start-up is not blamed for start-up denials", func(r *run) []want {
			r.start(0, false)
			r.identified(20 * time.Millisecond)
			o := r.op(time.Second, "/proc/1/statm", schema.PathOutside, "read", -13, "blocked_by_kernel")
			d := r.denial(time.Second, "/proc/1/statm", schema.PathOutside)
			r.call(time.Second+50*time.Millisecond, 100*time.Millisecond, "read_text_file", "read", "allow")
			return []want{{schema.FindingBlockedAttempt, schema.SeverityMedium, ReasonDeniedAtStartup, sorted(o, d), ""}}
		}, schema.ModeEnforce},
		{"a call's window never reaches before it started", func(r *run) []want {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(1900*time.Millisecond, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
			r.call(2*time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			return []want{{schema.FindingBlockedAttempt, schema.SeverityMedium, ReasonKernelDenied, []string{o}, ""}}
		}, schema.ModeEnforce},
		{"a denial just after the answer is still the call's", func(r *run) []want {
			r.start(0, false)
			c := r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(1200*time.Millisecond, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
			return []want{
				{schema.FindingBlockedAttempt, schema.SeverityMedium, ReasonKernelDenied, sorted(o, c), "read_text_file"},
				{schema.FindingProxyGap, schema.SeverityHigh, ReasonDeniedInAllowed, sorted(o, c), "read_text_file"},
			}
		}, schema.ModeEnforce},
		{"the landlock record's millisecond time does not move a denial out of its call", func(r *run) []want {
			r.start(0, false)
			c := r.call(time.Second+300*time.Microsecond, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(time.Second+500*time.Microsecond, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
			d := r.denial(time.Second, "/etc/shadow", schema.PathOutside) // the record's time, floored to the millisecond
			return []want{
				{schema.FindingBlockedAttempt, schema.SeverityMedium, ReasonKernelDenied, sorted(o, d, c), "read_text_file"},
				{schema.FindingProxyGap, schema.SeverityHigh, ReasonDeniedInAllowed, sorted(o, d, c), "read_text_file"},
			}
		}, schema.ModeEnforce},
		{"start-up reads of the workspace are the server's; a start-up write is not", func(r *run) []want {
			r.start(0, false)
			r.identified(20 * time.Millisecond)
			r.op(500*time.Millisecond, "/w", schema.PathWorkspace, "read", 0, "allowed")
			w := r.op(600*time.Millisecond, "/w/.index", schema.PathWorkspace, "create", 0, "allowed")
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			return []want{{schema.FindingUnattributedAccess, schema.SeverityMedium, ReasonNoCallInFlight, []string{w}, ""}}
		}, schema.ModeEnforce},
		{"a relayed run has no start-up", func(r *run) []want {
			r.start(0, false)
			o := r.op(100*time.Millisecond, "/w", schema.PathWorkspace, "read", 0, "allowed")
			d := r.denial(200*time.Millisecond, "/etc/shadow", schema.PathOutside)
			return []want{
				{schema.FindingBlockedAttempt, schema.SeverityMedium, ReasonKernelDenied, []string{d}, ""},
				{schema.FindingUnattributedAccess, schema.SeverityMedium, ReasonNoCallInFlight, []string{o}, ""},
			}
		}, schema.ModeEnforce},
		{"a run that only starts up is clean", func(r *run) []want {
			r.start(0, false)
			r.identified(20 * time.Millisecond)
			r.op(50*time.Millisecond, "/usr/lib/x.so", schema.PathRuntime, "read", 0, "allowed")
			r.op(100*time.Millisecond, "/w", schema.PathWorkspace, "read", 0, "allowed")
			r.exit(2 * time.Second)
			return nil
		}, schema.ModeAudit},
		{"a denied call does not explain file operations", func(r *run) []want {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "write_file", "write", "deny")
			o := r.op(time.Second+10*time.Millisecond, "/w/a", schema.PathWorkspace, "read", 0, "allowed")
			return []want{{schema.FindingUnattributedAccess, schema.SeverityMedium, ReasonNoCallInFlight, []string{o}, ""}}
		}, schema.ModeEnforce},
		{"workspace access after the call ended", func(r *run) []want {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(3*time.Second, "/w/b", schema.PathWorkspace, "read", 0, "allowed")
			return []want{{schema.FindingUnattributedAccess, schema.SeverityMedium, ReasonNoCallInFlight, []string{o}, ""}}
		}, schema.ModeEnforce},
		{"write during a read call", func(r *run) []want {
			r.start(0, false)
			c := r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			o := r.op(time.Second+5*time.Millisecond, "/w/a", schema.PathWorkspace, "write", 0, "allowed")
			return []want{{schema.FindingUndeclaredWrite, schema.SeverityHigh, ReasonWriteInReadCall, sorted(o, c), "read_text_file"}}
		}, schema.ModeEnforce},
		{"write during an overlapping write call is declared", func(r *run) []want {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			r.call(time.Second, 100*time.Millisecond, "write_file", "write", "allow")
			r.op(time.Second+5*time.Millisecond, "/w/a", schema.PathWorkspace, "write", 0, "allowed")
			return nil
		}, schema.ModeEnforce},
		{"degraded landlock and a run without kernel events", func(r *run) []want {
			s := r.start(0, true)
			e := r.exit(time.Second)
			return []want{
				{schema.FindingObservationGap, schema.SeverityMedium, ReasonLandlockDegraded, []string{s}, ""},
				{schema.FindingObservationGap, schema.SeverityMedium, ReasonNoKernelEvents, sorted(e, s), ""},
			}
		}, schema.ModeEnforce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(tc.mode)
			w := tc.build(r)
			got := summarize(Check(r.evs, Config{}, later))
			w = summarize(toEvents(w))
			if !slices.EqualFunc(got, w, func(a, b want) bool {
				return a.typ == b.typ && a.sev == b.sev && a.reason == b.reason && a.tool == b.tool && slices.Equal(a.evidence, b.evidence)
			}) {
				t.Fatalf("findings\n got %+v\nwant %+v", got, w)
			}
			for _, f := range Check(r.evs, Config{}, later) {
				if err := f.Validate(); err != nil {
					t.Fatalf("finding is not a valid event: %v", err)
				}
			}
		})
	}
}

// TestCheckOrderIndependent: any arrival order, and duplicates, give the
// same findings with the same ids.
func TestCheckOrderIndependent(t *testing.T) {
	r := newRun(schema.ModeAudit)
	r.start(0, false)
	for i := 0; i < 20; i++ {
		at := time.Duration(i) * time.Second
		r.call(at, 200*time.Millisecond, "read_text_file", "read", "allow")
		r.op(at+time.Millisecond, "/w/x", schema.PathWorkspace, "read", 0, "allowed")
		r.op(at+500*time.Millisecond, "/w/y", schema.PathWorkspace, "read", 0, "allowed")
		r.op(at+2*time.Millisecond, "/etc/passwd", schema.PathOutside, "read", 0, "escape")
		r.op(at+3*time.Millisecond, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
		r.denial(at+4*time.Millisecond, "/etc/shadow", schema.PathOutside)
		r.op(at+5*time.Millisecond, "/w/z", schema.PathWorkspace, "create", 0, "allowed")
	}
	r.exit(30 * time.Second)
	later := t0.Add(time.Hour)
	base := Check(r.evs, Config{}, later)
	if len(base) < 100 {
		t.Fatalf("only %d findings", len(base))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		shuffled := slices.Clone(r.evs)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		shuffled = append(shuffled, shuffled[:10]...) // redelivered duplicates
		got := Check(shuffled, Config{}, later)
		if len(got) != len(base) {
			t.Fatalf("permutation %d: %d findings, want %d", i, len(got), len(base))
		}
		for j := range got {
			if got[j].EventID != base[j].EventID {
				t.Fatalf("permutation %d: finding %d differs", i, j)
			}
		}
	}
}

// TestLateWindow: a finding is held back until its evidence is older than
// the window, and an event that arrives within the window (the decision
// explaining an access) changes the outcome.
func TestLateWindow(t *testing.T) {
	r := newRun(schema.ModeEnforce)
	r.start(0, false)
	r.call(200*time.Millisecond, 50*time.Millisecond, "list_directory", "read", "allow")
	o := r.op(time.Second, "/w/a", schema.PathWorkspace, "read", 0, "allowed")
	cfg := Config{Window: time.Minute}
	if got := Check(r.evs, cfg, t0.Add(30*time.Second)); len(got) != 0 {
		t.Fatalf("finding emitted inside the window: %+v", summarize(got))
	}
	// The decision arrives late but within the window: no finding.
	withCall := slices.Clone(r.evs)
	rc := &run{o: r.o, id: r.id}
	rc.call(time.Second-10*time.Millisecond, 50*time.Millisecond, "read_text_file", "read", "allow")
	withCall = append(withCall, rc.evs...)
	if got := Check(withCall, cfg, t0.Add(2*time.Minute)); len(got) != 0 {
		t.Fatalf("explained access flagged: %+v", summarize(got))
	}
	got := Check(r.evs, cfg, t0.Add(2*time.Minute))
	if len(got) != 1 || got[0].Finding.Type != schema.FindingUnattributedAccess || got[0].Finding.EvidenceIDs[0] != o {
		t.Fatalf("after the window: %+v", summarize(got))
	}
	// Stored an hour late (a collector catching up): not final until a
	// window after it arrived, whatever its own time.
	arrived := map[string]int64{o: t0.Add(time.Hour).UnixNano()}
	if got := CheckArrived(r.evs, arrived, cfg, t0.Add(time.Hour+30*time.Second)); len(got) != 0 {
		t.Fatalf("a backlog judged before the rest of it could arrive: %+v", summarize(got))
	}
	if got := CheckArrived(r.evs, arrived, cfg, t0.Add(time.Hour+2*time.Minute)); len(got) != 1 {
		t.Fatalf("a window after it arrived: %+v", summarize(got))
	}
}

func TestEngineEmitsOnceAndForgets(t *testing.T) {
	en := NewEngine(Config{Window: time.Minute}, 0)
	r := newRun(schema.ModeAudit)
	r.start(0, false)
	r.op(time.Second, "/etc/passwd", schema.PathOutside, "read", 0, "escape")
	r.exit(2 * time.Second)
	// Arrive in reverse order, the exit first.
	for i := len(r.evs) - 1; i >= 0; i-- {
		en.Add(r.evs[i:i+1], t0.Add(3*time.Second))
	}
	got := en.Findings(t0.Add(10 * time.Second))
	if len(got) != 1 || got[0].Finding.Status != schema.StatusProvisional {
		t.Fatalf("inside the window, want one provisional finding: %+v", got)
	}
	got = en.Findings(t0.Add(2 * time.Minute))
	if len(got) != 1 || got[0].Finding.Type != schema.FindingEscape || got[0].Finding.Status != schema.StatusFinal {
		t.Fatalf("got %+v", summarize(got))
	}
	en.Add(r.evs, t0.Add(2*time.Minute)) // redelivery
	if again := en.Findings(t0.Add(2*time.Minute + time.Second)); len(again) != 0 {
		t.Fatalf("emitted twice: %+v", summarize(again))
	}
	en.Findings(t0.Add(10 * time.Minute))
	if len(en.runs) != 0 {
		t.Fatalf("run kept after exit + 2 windows")
	}
}

func TestHealthGaps(t *testing.T) {
	o := schema.Origin{Host: "h1", BootID: "b"}
	var evs []schema.Event
	for i, drops := range []uint64{0, 0, 5, 5, 9} {
		e := o.NewEvent(schema.KindHealth, "", "", "", t0.Add(time.Duration(i)*time.Second))
		e.Health = &schema.Health{Component: "daemon", AuditStream: "on", DropsQueueFull: drops}
		if i == 3 {
			e.Health.AuditStream = "unavailable"
		}
		evs = append(evs, e)
	}
	got := summarize(Check(evs, Config{}, t0.Add(time.Hour)))
	var drops, audit int
	for _, f := range got {
		switch f.reason {
		case ReasonEventsDropped:
			drops++
		case ReasonAuditStream:
			audit++
		}
	}
	if drops != 2 || audit != 1 {
		t.Fatalf("got %+v", got)
	}
}

func BenchmarkCheck(b *testing.B) {
	r := newRun(schema.ModeEnforce)
	r.start(0, false)
	for i := 0; i < 10000; i++ {
		at := time.Duration(i) * 10 * time.Millisecond
		if i%10 == 0 {
			r.call(at, 50*time.Millisecond, "read_text_file", "read", "allow")
		}
		r.op(at+time.Millisecond, "/w/x", schema.PathWorkspace, "read", 0, "allowed")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Check(r.evs, Config{}, t0.Add(time.Hour))
	}
	b.ReportMetric(float64(len(r.evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// toEvents lets expectations go through summarize's ordering.
func toEvents(ws []want) []schema.Event {
	var out []schema.Event
	for _, w := range ws {
		out = append(out, schema.Event{Finding: &schema.Finding{Type: w.typ, Severity: w.sev, Reason: w.reason, EvidenceIDs: w.evidence, Tool: w.tool}})
	}
	return out
}
