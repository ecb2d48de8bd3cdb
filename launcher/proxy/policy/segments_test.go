package policy

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestPathSegmentArrays: a path given as an array of segments whose first
// element is empty — ["", "etc", "passwd"], which a server joining with
// '/' reads as /etc/passwd — is checked joined, in a tool's arguments at
// any depth and in a prompt's; arrays of text, of other values, or that
// join inside the scope pass. Before: each element was checked alone,
// and none looked like a path.
func TestPathSegmentArrays(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	abs := func(rel string) []string {
		return append([]string{""}, strings.Split(strings.TrimPrefix(filepath.Join(base, rel), "/"), "/")...)
	}
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	for _, tc := range []struct {
		name string
		args json.RawMessage
		want schema.ErrorCode
	}{
		{"etc passwd", j(map[string]any{"segments": []string{"", "etc", "passwd"}}), schema.ErrPathOutsideScope},
		{"nested", j(map[string]any{"o": map[string]any{"parts": [][]string{{"", "etc", "shadow"}}}}), schema.ErrPathOutsideScope},
		{"one segment with slashes", j(map[string]any{"s": []string{"", "etc/passwd"}}), schema.ErrPathOutsideScope},
		{"outside the scope", j(map[string]any{"s": abs("outside/probe.txt")}), schema.ErrPathOutsideScope},
		{"a secret inside", j(map[string]any{"s": abs("allowed/sub/credentials")}), schema.ErrSecretPath},
		{"non-ASCII", j(map[string]any{"s": []string{"", "etc", "pässwd"}}), schema.ErrPathOutsideScope},
		{"inside the scope", j(map[string]any{"s": abs("allowed/probe.txt")}), ""},
		{"lines of text", j(map[string]any{"lines": []string{"", "Hello world", "second line"}}), ""},
		{"not all strings", j(map[string]any{"s": []any{"", "etc", 5}}), ""},
		{"only the empty one", j(map[string]any{"s": []string{""}}), ""},
		{"not first", j(map[string]any{"s": []string{"etc", "", "passwd"}}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, check := range []func() (*Denial, string){
				func() (*Denial, string) { _, d := p.CheckArguments("other", tc.args, eff); return d, "tool" },
				func() (*Denial, string) { _, d := p.CheckLooseArguments(tc.args, eff); return d, "prompt" },
			} {
				d, what := check()
				if tc.want == "" && d != nil {
					t.Fatalf("%s: denied: %v", what, d)
				}
				if tc.want != "" && (d == nil || d.Code != tc.want) {
					t.Fatalf("%s: got %v, want %s", what, d, tc.want)
				}
			}
		})
	}
}

// FuzzPathSegmentArrays: an array ["", parts...] of names whose join is
// a path the scope refuses is never passed, at any depth.
func FuzzPathSegmentArrays(f *testing.F) {
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	for _, s := range []string{"etc|passwd", "tmp", "ȺȺ|ⱥ", "\u212a|x", "..|x", "etc/|shadow", "a b|c", "ｅｔｃ|passwd"} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, depth uint8) {
		parts := strings.Split(s, "|")
		for _, part := range parts {
			if !isSegment(part) {
				return
			}
		}
		var v any = append([]any{""}, func() []any {
			out := make([]any, len(parts))
			for i, x := range parts {
				out[i] = x
			}
			return out
		}()...)
		for i := 0; i < int(depth%4); i++ {
			v = map[string]any{"k": []any{v}}
		}
		raw, _ := json.Marshal(map[string]any{"a": v})
		joined := "/" + strings.Join(parts, "/")
		if _, want := p.CheckPath(joined, p.baseRel, eff); want == nil {
			return
		}
		if _, d := p.CheckArguments("other", raw, eff); d == nil {
			t.Fatalf("%s passed; its join %q is refused", raw, joined)
		}
	})
}
