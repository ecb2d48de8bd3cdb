package roots

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestIntersectKinds(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "f.txt"), []byte("x"), 0o644)
	scope := []schema.CanonicalPath{{Path: dir, Kind: schema.KindDir}}
	got := Intersect(scope, []string{filepath.Join(dir, "sub"), filepath.Join(dir, "f.txt"), filepath.Join(dir, "gone")})
	if len(got) != 2 || got[0].Kind != schema.KindFile || got[1].Kind != schema.KindDir {
		t.Fatalf("Intersect = %+v; want f.txt as a file and sub as a dir, the missing root dropped", got)
	}
}

func TestIntersect(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"b/a/x", "b/c", "b/ab"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	base, _ = filepath.EvalSymlinks(base)
	d := func(p string) schema.CanonicalPath { return schema.CanonicalPath{Path: base + p, Kind: schema.KindDir} }
	scope := []schema.CanonicalPath{d("/b/a"), d("/b/c")}
	tests := []struct {
		name   string
		client []string
		want   []string
	}{
		{"same", []string{"/b/a"}, []string{"/b/a"}},
		{"narrower", []string{"/b/a/x"}, []string{"/b/a/x"}},
		{"wider only narrows to scope", []string{"/"}, []string{"/b/a", "/b/c"}},
		{"outside dropped", []string{"/etc", "/b/ab"}, nil},
		{"none", nil, nil},
		{"nested client roots collapse", []string{"/b/a/x", "/b/a"}, []string{"/b/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := func(in []string) []string {
				var out []string
				for _, p := range in {
					if strings.HasPrefix(p, "/b") {
						p = base + p
					}
					out = append(out, p)
				}
				return out
			}
			got := Paths(Intersect(scope, pre(tt.client)))
			want := pre(tt.want)
			if len(got) != len(want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("got %v, want %v", got, want)
				}
			}
		})
	}
}

func TestParseResultAndURIRoundTrip(t *testing.T) {
	dir := t.TempDir()
	weird := filepath.Join(dir, "a b%c#d")
	if err := os.Mkdir(weird, 0o755); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(weird)
	raw := ListResult([]schema.CanonicalPath{{Path: real, Kind: schema.KindDir}})
	got, err := ParseResult(raw)
	if err != nil || len(got) != 1 || got[0] != real {
		t.Fatalf("round trip: %v %v (raw %s)", got, err, raw)
	}
	p, err := policy.FilePath(FileURI(real))
	if err != nil || p != real {
		t.Fatalf("FilePath(FileURI) = %q, %v", p, err)
	}
	for _, bad := range []string{`{}`, `{"roots":null}`, `[]`, `{"roots":"x"}`} {
		if _, err := ParseResult(json.RawMessage(bad)); err == nil {
			t.Errorf("ParseResult(%s) accepted", bad)
		}
	}
	got, err = ParseResult(json.RawMessage(`{"roots":[{"uri":"https://x/"},{"uri":"file:///does/not/exist"},{"uri":"file://` + real + `/%2e%2e"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g != dir && g != filepath.Dir(real) {
			t.Fatalf("unexpected root %q", g)
		}
	}
}

func TestTrackerNewestWins(t *testing.T) {
	var tr Tracker
	g1 := tr.Begin()
	g2 := tr.Begin()
	if !tr.Pending() {
		t.Fatal("not pending after Begin")
	}
	if !tr.Accept(g2) {
		t.Fatal("newest reply refused")
	}
	if tr.Pending() {
		t.Fatal("still pending after the newest reply")
	}
	if tr.Accept(g1) {
		t.Fatal("an older reply was applied after the newer one")
	}
	g3 := tr.Begin()
	if tr.Accept(g2) || !tr.Pending() {
		t.Fatal("old generation accepted while a newer one is pending")
	}
	if !tr.Accept(g3) {
		t.Fatal("g3 refused")
	}
}

// TestRootsAnswersNeverWiden: a client's roots answer in every spelling —
// a symlink out of the scope, "..", encoded separators, a remote host, a
// case-variant scheme, a file root above the scope, hundreds of roots —
// narrows to at most the scope (fifth attack round).
func TestRootsAnswersNeverWiden(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	for _, d := range []string{"allowed/sub", "outside"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	allowed := filepath.Join(base, "allowed")
	if err := os.Symlink(filepath.Join(base, "outside"), filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	scope := []schema.CanonicalPath{{Path: allowed, Kind: schema.KindDir}}
	answers := []string{
		"file://" + allowed + "/escape",
		"file://" + allowed + "/../outside",
		"file://" + allowed + "%2f..%2foutside",
		"file://" + allowed + "/%2e%2e/outside",
		"file://evil.example" + base + "/outside",
		"FILE://" + base,
		"file:" + base,
		"file://localhost/",
		"file://" + base + "/outside",
		"file://" + allowed + "/sub/../../outside",
		"file://" + allowed + "\x00/../outside",
		"/" + base + "/outside",
		"https://example.com/",
	}
	for _, a := range answers {
		raw, _ := json.Marshal(map[string]any{"roots": []map[string]string{{"uri": a}}})
		client, err := ParseResult(raw)
		if err != nil {
			continue // no roots at all: nothing widens
		}
		for _, p := range Intersect(scope, client) {
			if !schema.IsWithin(allowed, p.Path) {
				t.Errorf("root %q made %s effective, outside the scope", a, p.Path)
			}
		}
	}
	// Case variants are read by no one: "Roots" is no answer (no roots),
	// a root's "URI" no uri (the root is dropped).
	if _, err := ParseResult(json.RawMessage(`{"Roots":[{"uri":"file://` + allowed + `"}]}`)); err == nil {
		t.Error(`{"Roots": …} read as a roots answer`)
	}
	if got, err := ParseResult(json.RawMessage(`{"roots":[{"URI":"file:///"}]}`)); err != nil || len(got) != 0 {
		t.Errorf(`{"roots":[{"URI": …}]} = %v, %v; want no root`, got, err)
	}
	many := make([]map[string]string, MaxRoots+1)
	for i := range many {
		many[i] = map[string]string{"uri": "file://" + allowed}
	}
	raw, _ := json.Marshal(map[string]any{"roots": many})
	if _, err := ParseResult(raw); err == nil {
		t.Errorf("%d roots accepted", len(many))
	}
}
