package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestDotDotAfterASymlink (sixth round): "link/../x" is "x" to a server
// that cleans its paths first (Node's path.resolve: the filesystem
// server), but the kernel resolves ".." from where the symlink points, so
// a server that passes the name to open(2) as it is reads the sibling of
// the symlink's target. Both readings must be inside the scope and not
// secret. Before: only the cleaned name was checked, so a symlink into
// .git (inside the scope, where the fence allows everything) uncovered
// .git/config, and one out of the scope a file outside.
func TestDotDotAfterASymlink(t *testing.T) {
	_, base := fixture(t)
	A := filepath.Join(base, "allowed")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(A, ".git", "refs"), 0o755))
	must(os.WriteFile(filepath.Join(A, ".git", "config"), []byte("[remote] token"), 0o600))
	must(os.Symlink(".git/refs", filepath.Join(A, "refs")))
	must(os.MkdirAll(filepath.Join(base, "outside", "deep"), 0o755))
	must(os.Symlink(filepath.Join(base, "outside", "deep"), filepath.Join(A, "deep")))
	must(os.MkdirAll(filepath.Join(A, "sub", "inner"), 0o755))
	must(os.Symlink("sub/inner", filepath.Join(A, "innerlink")))
	must(os.WriteFile(filepath.Join(A, "sub", "ok.txt"), []byte("ok"), 0o644))
	// The premise: the kernel reads the secret through the spelling.
	if b, err := os.ReadFile(A + "/refs/../config"); err != nil || string(b) != "[remote] token" {
		t.Fatalf("premise: the kernel does not read .git/config through refs/..: %q %v", b, err)
	}
	sc, _ := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"other", "custom"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
		ToolPathArgs: map[string][]string{"custom": {"where"}},
	}, base, time.Now())
	p, err := New(Config{Scope: sc, Home: A})
	must(err)
	eff := []string{A}
	for _, tc := range []struct {
		tool, arg string
		want      schema.ErrorCode
	}{
		{"other", A + "/refs/../config", schema.ErrSecretPath},
		{"other", "./allowed/refs/../config", schema.ErrSecretPath},
		{"other", "allowed/refs/../config", schema.ErrSecretPath},
		{"custom", "allowed/refs/../config", schema.ErrSecretPath},
		{"other", A + "/refs/./../config", schema.ErrSecretPath},
		{"other", A + "/refs/../refs/../config", schema.ErrSecretPath},
		{"other", "file://" + A + "/refs/../config", schema.ErrSecretPath},
		{"other", A + "/deep/../probe.txt", schema.ErrPathOutsideScope},
		{"other", A + "/deep/../new-file", schema.ErrPathOutsideScope},
		{"custom", "allowed/deep/../probe.txt", schema.ErrPathOutsideScope},
		{"other", "~/deep/../probe.txt", schema.ErrPathOutsideScope},
		// Inside, whichever way it is read.
		{"other", A + "/innerlink/../ok.txt", ""},
		{"other", A + "/sub/../probe.txt", ""},
		{"other", A + "/nothing/../probe.txt", ""},
	} {
		args, _ := json.Marshal(map[string]any{"q": tc.arg, "where": tc.arg})
		_, d := p.CheckArguments(tc.tool, args, eff)
		got := schema.ErrorCode("")
		if d != nil {
			got = d.Code
		}
		if got != tc.want {
			t.Errorf("%s %q: %v, want %q", tc.tool, tc.arg, d, tc.want)
		}
	}
}
