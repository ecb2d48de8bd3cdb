package policy

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

func TestExpandGlob(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"plain", nil},
		{"{a,b}", []string{"a", "b"}},
		{"x{a,b}y", []string{"xay", "xby"}},
		{"{a,{b,c}}", []string{"a", "b", "c"}},
		{"{a}", nil},
		{"{a,b", nil},
		{".e[n]v", []string{".env"}},
		{"[a-c]", []string{"a", "b", "c"}},
		{"[!a]", nil},
		{"{/etc/passwd,x}", []string{"/etc/passwd", "x"}},
		{"{,.}env", []string{"env", ".env"}},
	} {
		got, err := expandGlob(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("expandGlob(%q) = %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := expandGlob(strings.Repeat("{a,b}", 7)); err == nil {
		t.Error("128 expansions accepted")
	}
}

// TestGlobArguments (sixth round): a server that expands globs itself
// (a search tool, a shell) reads "{.env,x}" as .env and
// "{/etc/passwd,x}" as /etc/passwd. Each expansion is checked as a path.
// Before: none of these looked like a path, so all passed for a tool the
// proxy does not know, and the fence allows a secret inside the scope.
func TestGlobArguments(t *testing.T) {
	_, base := fixture(t)
	A := filepath.Join(base, "allowed")
	sc, _ := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"other", "search_files"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, base, time.Now())
	p, err := New(Config{Scope: sc, Home: A, WorkDir: A})
	if err != nil {
		t.Fatal(err)
	}
	eff := []string{A}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want schema.ErrorCode
	}{
		{"other", map[string]any{"q": "{allowed/.env,x}"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "allowed/.e[n]v"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "allowed/[.]env"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": "{allowed,a}/{.git,b}"}, schema.ErrSecretPath},
		// .env exists under the server's working directory: checked there
		// (and against the base, where it is outside the scope).
		{"other", map[string]any{"q": "{.env,x}"}, schema.ErrPathOutsideScope},
		{"other", map[string]any{"q": "{/etc/passwd,x}"}, schema.ErrPathOutsideScope},
		{"other", map[string]any{"q": "{x,../outside/probe.txt}"}, schema.ErrPathOutsideScope},
		{"other", map[string]any{"q": "{.,..}/outside/probe.txt"}, schema.ErrPathOutsideScope},
		{"other", map[string]any{"q": "{~,x}/.ssh/id_rsa"}, schema.ErrSecretPath},
		{"other", map[string]any{"q": strings.Repeat("{a,b}", 7)}, schema.ErrMalformedRequest},
		{"search_files", map[string]any{"path": A, "pattern": "{/etc/passwd,x}"}, schema.ErrPathOutsideScope},
		{"search_files", map[string]any{"path": A, "pattern": "x", "excludePatterns": []string{"{~,x}"}}, schema.ErrPathOutsideScope},
		// Honest globs and text pass.
		{"other", map[string]any{"q": "{a,b}.txt"}, ""},
		{"other", map[string]any{"q": "src/[abc].go"}, ""},
		{"other", map[string]any{"q": "{\"json\": [1, 2]}"}, ""},
		{"other", map[string]any{"q": "allowed/{probe,other}.txt"}, ""},
		{"search_files", map[string]any{"path": A, "pattern": "**/*.{go,md}"}, ""},
	} {
		raw, _ := json.Marshal(tc.args)
		_, d := p.CheckArguments(tc.tool, raw, eff)
		got := schema.ErrorCode("")
		if d != nil {
			got = d.Code
		}
		if got != tc.want {
			t.Errorf("%s %v: %v, want %q", tc.tool, tc.args, d, tc.want)
		}
	}
}

// FuzzExpandGlob: any string expands without panicking, to at most
// maxExpansions names, none longer than the string, with no brace group
// left that has a top-level comma.
func FuzzExpandGlob(f *testing.F) {
	for _, s := range []string{"{a,b}", "[a-z]", "{{a,b},[c-d]}", "[", "{", "{,}", "[]]", "[z-a]", "a{b,c}d[ef]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := expandGlob(s)
		if err != nil {
			return
		}
		if len(out) > maxExpansions {
			t.Fatalf("%d expansions", len(out))
		}
		for _, o := range out {
			if len(o) > len(s) {
				t.Fatalf("%q expands to the longer %q", s, o)
			}
		}
	})
}

// TestSecretNamesAnywhere (sixth round): a relative name that is a
// secret's is checked whether or not it exists under the base: a server
// resolves it under a directory of its own — a "cwd" member beside it, a
// project root it was started in. Before: ".env" next to {"cwd": dir}
// passed (nothing named .env under the base), and the server read
// dir/.env, inside the scope where the fence allows it.
func TestSecretNamesAnywhere(t *testing.T) {
	p, base := fixture(t)
	A := filepath.Join(base, "allowed")
	eff := []string{A}
	for _, tc := range []struct {
		args map[string]any
		deny bool
	}{
		{map[string]any{"cwd": A, "file": ".env"}, true},
		{map[string]any{"cwd": A, "file": ".git/config"}, true},
		{map[string]any{"cwd": A, "files": []any{"notes.txt", "keys/id_ed25519"}}, true},
		{map[string]any{"cwd": A, "file": "credentials.json"}, true},
		{map[string]any{"cwd": A, "file": "deploy/prod.tfstate"}, true},
		{map[string]any{"cwd": A, "file": ".ENV"}, true},
		// As a server that trims, decodes or normalises reads it.
		{map[string]any{"cwd": A, "file": " .env"}, true},
		{map[string]any{"cwd": A, "file": ".env\u200b"}, true},
		{map[string]any{"cwd": A, "file": "%2eenv"}, true},
		{map[string]any{"cwd": A, "file": "%252egit%252fconfig"}, true},
		{map[string]any{"cwd": A, "file": "\uff0eenv"}, true},
		{map[string]any{"cwd": A, "file": ".git\\config"}, true},
		// Text and ordinary names pass.
		{map[string]any{"cwd": A, "file": "notes.txt"}, false},
		{map[string]any{"kind": "credentials"}, false},
		{map[string]any{"q": "where is the .env file"}, false},
		{map[string]any{"q": "rotate the api.key and id_rsa today"}, false},
	} {
		raw, _ := json.Marshal(tc.args)
		_, d := p.CheckArguments("other", raw, eff)
		if (d != nil) != tc.deny {
			t.Errorf("%v: %v, want denied=%v", tc.args, d, tc.deny)
		}
	}
}
