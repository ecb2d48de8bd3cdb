package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestWildcardGlobs: a glob with wildcards that a server expands itself
// is refused when it would match a secret under the scope — for a tool
// the proxy does not know, anywhere under the scope; for search_files,
// as the filesystem server matches it (relative to its path). Before:
// every one passed ("*.pem" names nothing that exists).
func TestWildcardGlobs(t *testing.T) {
	_, base := fixture(t)
	allowed := filepath.Join(base, "allowed")
	eff := []string{allowed}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The base is the scope: a relative name resolves inside it.
	sc, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"."}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"other"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, allowed, time.Now())
	must(err)
	p, err := New(Config{Scope: sc, Home: filepath.Join(base, "outside")})
	must(err)
	must(os.WriteFile(filepath.Join(allowed, "sub", "server.pem"), []byte("KEY"), 0o600))
	must(os.WriteFile(filepath.Join(allowed, ".git", "config"), []byte("[core]"), 0o600))
	must(os.WriteFile(filepath.Join(allowed, "sub", "notes.md"), []byte("n"), 0o600))
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	for _, tc := range []struct {
		tool string
		args any
		want schema.ErrorCode
	}{
		{"other", map[string]any{"q": "*.pem"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": ".e*"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "**/*"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "**/config"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "sub/*.p?m"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "*.[pP]em"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "{*.pem,x}"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "./**/.e??"}, schema.ErrSecretPath},
		{"other", map[string]any{"list": []string{"a", "**/*.pem"}}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "file://" + allowed + "/**/*.pem"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": allowed + "/*/server.*"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "*.md"}, ""},
		{"other", map[string]any{"q": "**/*.md"}, ""},
		{"other", map[string]any{"q": "what?"}, ""},
		{"other", map[string]any{"q": "https://example.com/?q=*.md"}, ""},
		{"other", map[string]any{"q": "is *.pem a secret?"}, ""},
		{"search_files", map[string]any{"path": allowed, "pattern": "*.pem"}, ""}, // matched from its path: sub/server.pem is not *.pem
		{"search_files", map[string]any{"path": allowed, "pattern": "**/*.pem"}, schema.ErrSecretPath},
		{"search_files", map[string]any{"pattern": "*.pem", "path": filepath.Join(allowed, "sub")}, schema.ErrSecretPath},
		{"search_files", map[string]any{"pattern": ".e*", "path": allowed}, schema.ErrSecretPath},
		{"search_files", map[string]any{"path": allowed, "pattern": ".git/*"}, schema.ErrSecretPath},
		{"search_files", map[string]any{"path": allowed, "pattern": "*"}, schema.ErrSecretPath},
		{"search_files", map[string]any{"path": allowed, "pattern": "**/*.md"}, ""},
		{"search_files", map[string]any{"path": allowed, "pattern": "*.txt", "excludePatterns": []string{"**/*.pem", ".env"}}, ""},
		{"directory_tree", map[string]any{"path": allowed, "excludePatterns": []string{"**/.env", "*.pem"}}, ""},
	} {
		_, d := p.CheckArguments(tc.tool, j(tc.args), eff)
		got := schema.ErrorCode("")
		if d != nil {
			got = d.Code
		}
		if got != tc.want {
			t.Errorf("%s %s = %v, want %q", tc.tool, j(tc.args), d, tc.want)
		}
	}
}

// TestGlobMatch: minimatch's {dot: true} reading of the patterns.
func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"*", ".env", true},
		{"*.pem", "a/x.pem", false},
		{"**/*.pem", "x.pem", true},
		{"**/*.pem", "a/b/x.pem", true},
		{"a/**", "a/b/c", true},
		{"a/**/c", "a/c", true},
		{"[!a]*", "b", true},
		{"[!a]*", "a", false},
		{"a[", "a[", true},
		{"?", "ab", false},
	} {
		if got := globMatch(splitGlob(tc.pat), splitGlob(tc.name)); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pat, tc.name, got)
		}
	}
}

// TestMinimatchExtglobs: minimatch (the filesystem server's matcher)
// reads extglob groups and POSIX classes, which need no '*' or '?', and
// negates a search pattern that begins with '!'. Each is matched as a
// glob at least as wide: "@(.env)", ".e+(n)v", "!(x)", ".e[[:alpha:]]v",
// "!x" reach a secret and are refused. Before: each passed (path.Match
// reads "@(.env)" as a literal name), and the real server listed the
// secret (TestSearchExtglobsReachingSecrets).
func TestMinimatchExtglobs(t *testing.T) {
	_, base := fixture(t)
	allowed := filepath.Join(base, "allowed")
	eff := []string{allowed}
	sc, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"."}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"other"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, allowed, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Scope: sc, Home: filepath.Join(base, "outside")})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "sub", "server.pem"), []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, ".env"), []byte("K=V"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "sub", "notes.md"), []byte("n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	refused := []string{"@(.env)", ".e+(n)v", "!(x)", ".e[[:alpha:]]v", "+(.env|x)", "*(.env)", "sub/server.@(pem)", "sub/!(x)", ".en[[:lower:]]", "**/.e[[:alpha:]]v", ".@(e)nv", "sub/+(s)erver.pem", "@(sub/server.pem|x)", "sub/server.[[:alpha:]]em", ".e[![:digit:]]v"}
	passed := []string{"@(notes).md", "sub/+(n)otes.md", "*.@(md)", "sub/[[:alpha:]]otes.md", "foo(bar)!", "@(x"}
	for _, pat := range refused {
		for _, tool := range []string{"search_files", "other"} {
			args := map[string]any{"path": allowed, "pattern": pat}
			if tool == "other" {
				args = map[string]any{"q": pat}
			}
			if _, d := p.CheckArguments(tool, j(args), eff); d == nil || d.Code != schema.ErrSecretPath {
				t.Errorf("%s %q = %v, want SECRET_PATH", tool, pat, d)
			}
		}
	}
	// A search pattern's negation: everything but x, secrets included.
	for _, pat := range []string{"!x", "!!x", "!sub/notes.md"} {
		if _, d := p.CheckArguments("search_files", j(map[string]any{"path": allowed, "pattern": pat}), eff); d == nil || d.Code != schema.ErrSecretPath {
			t.Errorf("search_files %q = %v, want SECRET_PATH", pat, d)
		}
	}
	for _, pat := range passed {
		if _, d := p.CheckArguments("search_files", j(map[string]any{"path": allowed, "pattern": pat}), eff); d != nil {
			t.Errorf("search_files %q = %v, want it passed", pat, d)
		}
	}
}

// TestMinimatchSuperset pins the rewrite.
func TestMinimatchSuperset(t *testing.T) {
	for _, tc := range []struct {
		in   string
		neg  bool
		want string
	}{
		{"@(.env)", false, ".env"},
		{".e+(n)v", false, ".en*v"},
		{"a/@(b/c|d)/e", false, "a/{b/c,d}/e"},
		{"a/!(b/c|d)/e", false, "a/**/e"},
		{"x*(y)", false, "x*"},
		{"?(a|b).md", false, "{,a,b}.md"},
		{`\@(x)`, false, `\@(x)`},
		{"@(a(b)c)x", false, "a(b)cx"},
		{"@(+(a)|b)", false, "{a*,b}"},
		{"@(x", false, "@(x"},
		{"[abc]", false, "[abc]"},
		{"!x", true, "**"},
		{"!x", false, "!x"},
		{"!(x)", true, "*"},
		{"*.md", true, "*.md"},
	} {
		if got := minimatchSuperset(tc.in, tc.neg); got != tc.want {
			t.Errorf("minimatchSuperset(%q, %v) = %q, want %q", tc.in, tc.neg, got, tc.want)
		}
	}
	for in, want := range map[string]string{".e[[:alpha:]]v": ".e?v", "[[:alpha:][:digit:]_]x": "?x", "[![:digit:]]": "?", "[abc]": "[abc]", "[[:x": "[[:x"} {
		if got := posixClasses(in); got != want {
			t.Errorf("posixClasses(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzMinimatchSuperset: the rewrite never panics and keeps every byte
// outside the groups and classes it replaces.
func FuzzMinimatchSuperset(f *testing.F) {
	for _, s := range []string{"@(.env)", "a/!(b|c)/d", ".e[[:alpha:]]v", "!x", `\(`, "[[:", "@(", "+(a(b)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := minimatchSuperset(s, true)
		if !strings.Contains(s, "(") && !strings.HasPrefix(s, "!") && out != s {
			t.Fatalf("%q rewritten to %q", s, out)
		}
		if !strings.Contains(s, "[:") && posixClasses(s) != s {
			t.Fatalf("%q rewritten by posixClasses", s)
		}
		if alts, err := globAlternatives(s, true); err == nil && len(alts) > maxExpansions {
			t.Fatalf("%q: %d alternatives", s, len(alts))
		}
	})
}

// TestTableToolScalars: a table tool's counts, flags and words (head,
// tail, dryRun, sortBy) are never paths as numbers or booleans, but a
// string in them is checked as an unknown tool's argument: a server
// whose tool of the same name takes a path there (another server, or a
// tool list changed to another schema) would read it. Before: any string
// there passed ("head": "/etc/passwd", "tail": ".env").
func TestTableToolScalars(t *testing.T) {
	_, base := fixture(t)
	allowed := filepath.Join(base, "allowed")
	eff := []string{allowed}
	sc, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"."}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"read_text_file", "edit_file", "list_directory_with_sizes", "write_file"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, allowed, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Scope: sc, Home: filepath.Join(base, "outside")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool, args string
		want       schema.ErrorCode
	}{
		{"read_text_file", `{"path":"x.md","head":"/etc/passwd"}`, schema.ErrPathOutsideScope},
		{"read_text_file", `{"path":"x.md","tail":".env"}`, schema.ErrSecretPath},
		{"read_text_file", `{"path":"x.md","head":{"p":"../outside/x"}}`, schema.ErrPathOutsideScope},
		{"edit_file", `{"path":"x.md","edits":[],"dryRun":"/etc/shadow"}`, schema.ErrPathOutsideScope},
		{"list_directory_with_sizes", `{"path":".","sortBy":".git/config"}`, schema.ErrSecretPath},
		{"read_text_file", `{"path":"x.md","head":10,"tail":"10"}`, ""},
		{"edit_file", `{"path":"x.md","edits":[{"oldText":"/etc/passwd","newText":".env"}],"dryRun":true}`, ""},
		{"list_directory_with_sizes", `{"path":".","sortBy":"size"}`, ""},
		{"write_file", `{"path":"x.md","content":"/etc/passwd"}`, ""},
	} {
		_, d := p.CheckArguments(tc.tool, json.RawMessage(tc.args), eff)
		got := schema.ErrorCode("")
		if d != nil {
			got = d.Code
		}
		if got != tc.want {
			t.Errorf("%s %s = %v, want %q", tc.tool, tc.args, d, tc.want)
		}
	}
}
