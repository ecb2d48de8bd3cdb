package policy

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// BenchmarkCheckArguments is the policy's share of one tools/call: a call
// with a path argument (resolved through the filesystem) and one with a
// plain string (looked up under the base once).
func BenchmarkCheckArguments(b *testing.B) {
	p, base := fixture(b)
	eff := []string{filepath.Join(base, "allowed")}
	for _, c := range []struct {
		name, tool string
		args       any
	}{
		{"path", "read_text_file", map[string]any{"path": filepath.Join(base, "allowed", "probe.txt")}},
		{"declared-path", "custom", map[string]any{"where": filepath.Join(base, "allowed", "probe.txt")}},
		{"no-path", "other", map[string]any{"text": "hello"}},
	} {
		raw, _ := json.Marshal(c.args)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, d := p.CheckArguments(c.tool, raw, eff); d != nil {
					b.Fatal(d)
				}
			}
		})
	}
}

// TestCheckArgumentsAllocationBudgets holds the allocations of the
// argument check of the calls BenchmarkCheckArguments times (the shapes of
// BenchmarkProcessRoundTrip's calls): a plain string is walked without a
// decoder and probed with no allocation of its own beyond the probe's
// name. Session 8 took them from 16 / 13 / 10 to 9 / 7 / 6 (the tool name's
// words, Within's string per directory and the normal-form checks of ASCII
// strings allocated).
func TestCheckArgumentsAllocationBudgets(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	for _, c := range []struct {
		name, tool string
		args       any
		budget     float64
	}{
		{"path", "read_text_file", map[string]any{"path": filepath.Join(base, "allowed", "probe.txt")}, 9},
		{"declared-path", "custom", map[string]any{"where": filepath.Join(base, "allowed", "probe.txt")}, 7},
		{"no-path", "other", map[string]any{"text": "hello"}, 6},
	} {
		raw, _ := json.Marshal(c.args)
		n := testing.AllocsPerRun(100, func() {
			if _, d := p.CheckArguments(c.tool, raw, eff); d != nil {
				t.Fatal(d)
			}
		})
		if n > c.budget+raceSlack {
			t.Errorf("%s: CheckArguments allocates %.0f times, budget %.0f (the decoder's walk took 7 more)", c.name, n, c.budget+raceSlack)
		}
	}
}
