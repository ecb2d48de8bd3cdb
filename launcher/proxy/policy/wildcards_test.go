package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
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
