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
