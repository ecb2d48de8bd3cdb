package crosscheck

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// step is one Findings call of a scenario: the events that arrived before
// it, and what it must report (type and status, in time order).
type step struct {
	at     time.Duration
	arrive []schema.Event
	want   []reported
}

type reported struct {
	typ    schema.FindingType
	status schema.FindingStatus
}

// got lists what fs reports, ordered by type and status (findings of one
// instant come in id order, which the test cannot know).
func got(fs []schema.Event) []reported {
	out := []reported{}
	for _, f := range fs {
		out = append(out, reported{f.Finding.Type, f.Finding.Status})
	}
	slices.SortFunc(out, func(a, b reported) int {
		if a.typ != b.typ {
			return strings.Compare(string(a.typ), string(b.typ))
		}
		return strings.Compare(string(a.status), string(b.status))
	})
	return out
}

// TestEngineReportsProvisionalThenFinal walks the engine through the life
// of findings: provisional once the evidence settled, final after the
// window (confirmed: nothing more to say), withdrawn when late evidence
// explained what the provisional finding said.
func TestEngineReportsProvisionalThenFinal(t *testing.T) {
	window := time.Minute
	for _, tc := range []struct {
		name  string
		steps func(r *run) []step
	}{
		{"escape: provisional within seconds, final after the window, the late call named", func(r *run) []step {
			r.start(0, false)
			r.call(500*time.Millisecond, 50*time.Millisecond, "list_directory", "read", "allow")
			r.op(time.Second, "/etc/passwd", schema.PathOutside, "read", 0, "escape")
			early := slices.Clone(r.evs)
			// The call the operation happened in: its record arrives when it ends.
			late := &run{o: r.o, id: r.id}
			late.call(900*time.Millisecond, 5*time.Second, "read_text_file", "read", "allow")
			return []step{
				{at: 1100 * time.Millisecond, arrive: early, want: []reported{}}, // not settled yet
				{at: 2500 * time.Millisecond, want: []reported{{schema.FindingEscape, schema.StatusProvisional}}},
				{at: 3 * time.Second, want: []reported{}},
				{at: 6 * time.Second, arrive: late.evs, want: []reported{}}, // same key: nothing new
				// The call arrived at 6 s: the final waits a window from then.
				{at: window + 2*time.Second, want: []reported{}},
				{at: window + 7*time.Second, want: []reported{{schema.FindingEscape, schema.StatusFinal}}},
				{at: window + 20*time.Second, want: []reported{}},
			}
		}},
		{"undeclared write withdrawn when the write call's record arrives", func(r *run) []step {
			r.start(0, false)
			r.call(time.Second, 100*time.Millisecond, "read_text_file", "read", "allow")
			r.op(time.Second+10*time.Millisecond, "/w/a", schema.PathWorkspace, "write", 0, "allowed")
			early := slices.Clone(r.evs)
			late := &run{o: r.o, id: r.id}
			late.call(time.Second, 100*time.Millisecond, "write_file", "write", "allow")
			return []step{
				{at: 1100 * time.Millisecond, arrive: early, want: []reported{}},
				{at: 3 * time.Second, want: []reported{{schema.FindingUndeclaredWrite, schema.StatusProvisional}}},
				{at: 20 * time.Second, arrive: late.evs, want: []reported{}},
				{at: window + 2*time.Second, want: []reported{{schema.FindingUndeclaredWrite, schema.StatusWithdrawn}}},
				{at: window + 30*time.Second, want: []reported{}},
			}
		}},
		{"a backlog is judged a window after it arrived, not when it happened", func(r *run) []step {
			r.start(0, false)
			r.call(200*time.Millisecond, 50*time.Millisecond, "list_directory", "read", "allow")
			r.op(time.Second, "/w/a", schema.PathWorkspace, "read", 0, "allowed")
			late := &run{o: r.o, id: r.id}
			late.call(900*time.Millisecond, 200*time.Millisecond, "read_text_file", "read", "allow")
			// An hour later the whole run arrives at once, the call last.
			return []step{
				{at: time.Hour, arrive: r.evs, want: []reported{}},
				{at: time.Hour + 10*time.Second, arrive: late.evs, want: []reported{}},
				{at: time.Hour + 2*window, want: []reported{}},
			}
		}},
		{"unattributed access is only ever final", func(r *run) []step {
			r.start(0, false)
			r.call(200*time.Millisecond, 50*time.Millisecond, "list_directory", "read", "allow")
			r.op(time.Second, "/w/a", schema.PathWorkspace, "read", 0, "allowed")
			return []step{
				{at: 1100 * time.Millisecond, arrive: r.evs, want: []reported{}},
				{at: 5 * time.Second, want: []reported{}},
				{at: window + 2*time.Second, want: []reported{{schema.FindingUnattributedAccess, schema.StatusFinal}}},
			}
		}},
		{"a blocked attempt whose landlock record comes late is withdrawn and found again", func(r *run) []step {
			r.start(0, false)
			r.op(time.Second, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
			early := slices.Clone(r.evs)
			late := &run{o: r.o, id: r.id}
			late.denial(time.Second+time.Millisecond, "/etc/shadow", schema.PathOutside)
			return []step{
				{at: 1100 * time.Millisecond, arrive: early, want: []reported{}},
				{at: 2500 * time.Millisecond, want: []reported{{schema.FindingBlockedAttempt, schema.StatusProvisional}}},
				{at: 4 * time.Second, arrive: late.evs, want: []reported{}},
				{at: 5500 * time.Millisecond, want: []reported{{schema.FindingBlockedAttempt, schema.StatusProvisional}}},
				{at: window + 3*time.Second, want: []reported{{schema.FindingBlockedAttempt, schema.StatusWithdrawn}}},
				{at: window + 5*time.Second, want: []reported{{schema.FindingBlockedAttempt, schema.StatusFinal}}},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			en := NewEngine(Config{Window: window}, 0)
			r := newRun(schema.ModeEnforce)
			for i, s := range tc.steps(r) {
				en.Add(s.arrive, t0.Add(s.at))
				out := en.Findings(t0.Add(s.at))
				if g := got(out); !slices.Equal(g, s.want) {
					t.Fatalf("step %d at %v: reported %+v, want %+v", i, s.at, g, s.want)
				}
				for _, f := range out {
					if err := f.Validate(); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
			}
		})
	}
}

// TestEngineFinalIsCheck: the final findings the engine reports are exactly
// Check's, with the same ids, so the daemon's and a collector's findings
// are one row; provisional ones never share an id with them.
func TestEngineFinalIsCheck(t *testing.T) {
	r := newRun(schema.ModeEnforce)
	r.start(0, false)
	for i := 0; i < 10; i++ {
		at := time.Duration(i) * time.Second
		r.call(at, 200*time.Millisecond, "read_text_file", "read", "allow")
		r.op(at+time.Millisecond, "/etc/passwd", schema.PathOutside, "read", 0, "escape")
		r.op(at+3*time.Millisecond, "/etc/shadow", schema.PathOutside, "read", -13, "blocked_by_kernel")
		r.denial(at+4*time.Millisecond, "/etc/shadow", schema.PathOutside)
		r.op(at+500*time.Millisecond, "/w/y", schema.PathWorkspace, "read", 0, "allowed")
	}
	en := NewEngine(Config{}, 0)
	var all []schema.Event
	for _, step := range []time.Duration{5 * time.Second, 20 * time.Second, time.Hour} {
		en.Add(r.evs, t0.Add(step))
		all = append(all, en.Findings(t0.Add(step))...)
	}
	var finals, provisionals []string
	for _, f := range all {
		switch f.Finding.Status {
		case schema.StatusFinal:
			finals = append(finals, f.EventID)
		case schema.StatusProvisional:
			provisionals = append(provisionals, f.EventID)
		default:
			t.Fatalf("unexpected %s %s", f.Finding.Status, f.Finding.Type)
		}
	}
	var want []string
	for _, f := range Check(r.evs, Config{}, t0.Add(time.Hour)) {
		want = append(want, f.EventID)
	}
	slices.Sort(finals)
	slices.Sort(want)
	if !slices.Equal(finals, want) {
		t.Fatalf("final ids differ from Check's: %d vs %d", len(finals), len(want))
	}
	if len(provisionals) == 0 {
		t.Fatal("no provisional findings")
	}
	for _, p := range provisionals {
		if slices.Contains(want, p) {
			t.Fatalf("provisional id %s is a final id", p)
		}
	}
}

// TestEngineHealthGapIsProvisionalFirst: drops reported by a health event
// become a provisional OBSERVATION_GAP within seconds.
func TestEngineHealthGapIsProvisionalFirst(t *testing.T) {
	o := schema.Origin{Host: "h1", BootID: "b"}
	var evs []schema.Event
	for i, drops := range []uint64{0, 7} {
		e := o.NewEvent(schema.KindHealth, "", "", "", t0.Add(time.Duration(i)*time.Second))
		e.Health = &schema.Health{Component: "daemon", AuditStream: "on", DropsQueueFull: drops}
		evs = append(evs, e)
	}
	en := NewEngine(Config{Window: time.Minute}, 0)
	en.Add(evs, t0.Add(2*time.Second))
	if g := got(en.Findings(t0.Add(3 * time.Second))); !slices.Equal(g, []reported{{schema.FindingObservationGap, schema.StatusProvisional}}) {
		t.Fatalf("reported %+v", g)
	}
	if g := got(en.Findings(t0.Add(2 * time.Minute))); !slices.Equal(g, []reported{{schema.FindingObservationGap, schema.StatusFinal}}) {
		t.Fatalf("reported %+v", g)
	}
}
