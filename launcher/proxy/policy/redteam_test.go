package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestArgumentsRedTeam holds the argument spellings of the fourth attack
// round: each was passed unchecked before (see docs/proxy.md, "Paths").
func TestArgumentsRedTeam(t *testing.T) {
	_, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The server's working directory is not the base: a plain relative
	// name that exists there is read there.
	work := filepath.Join(base, "outside")
	must(os.WriteFile(filepath.Join(work, "notes.txt"), []byte("out"), 0o644))
	sc, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"other"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, base, time.Now())
	must(err)
	p, err := New(Config{Scope: sc, Home: filepath.Join(base, "allowed"), WorkDir: work})
	must(err)
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	tests := []struct {
		name string
		args json.RawMessage
		want schema.ErrorCode
	}{
		{"$HOME secret", j(map[string]any{"q": "$HOME/.ssh/id_rsa"}), schema.ErrSecretPath},
		{"${HOME} escape", j(map[string]any{"q": "${HOME}/../outside/probe.txt"}), schema.ErrPathOutsideScope},
		// Checked both expanded and as the relative name a server that does
		// not expand it reads ("$HOME" under the base, outside the scope).
		{"$HOME literal", j(map[string]any{"q": "$HOME/probe.txt"}), schema.ErrPathOutsideScope},
		{"another variable", j(map[string]any{"q": "$XDG_CONFIG_HOME/gcloud/credentials.db"}), schema.ErrPathOutsideScope},
		{"a variable alone", j(map[string]any{"q": "$PWD"}), schema.ErrPathOutsideScope},
		{"a price is not a path", j(map[string]any{"q": "$5/month"}), ""},
		{"~user", j(map[string]any{"q": "~root/.bashrc"}), schema.ErrPathOutsideScope},
		{"relative name under the server's working directory", j(map[string]any{"q": "notes.txt"}), schema.ErrPathOutsideScope},
		{"double percent-encoding", j(map[string]any{"q": "%252e%252e%252foutside%252fprobe.txt"}), schema.ErrPathOutsideScope},
		{"double percent-encoded absolute", j(map[string]any{"q": "%252Fetc%252Fpasswd"}), schema.ErrPathOutsideScope},
		{"file: without slashes", j(map[string]any{"q": "file:/etc/passwd"}), schema.ErrPathOutsideScope},
		{"file://localhost", j(map[string]any{"q": "file://localhost/etc/passwd"}), schema.ErrPathOutsideScope},
		{"file uri with a query", j(map[string]any{"q": "file://" + filepath.Join(base, "allowed", "probe.txt") + "?x=1"}), schema.ErrPathOutsideScope},
		{"trailing dot on a secret", j(map[string]any{"q": filepath.Join(base, "allowed", ".git.")}), schema.ErrSecretPath},
		{"trailing space on a secret", j(map[string]any{"q": filepath.Join(base, "allowed", ".ssh ")}), schema.ErrSecretPath},
		{"a secret as a member name", j(map[string]any{"m": map[string]any{filepath.Join(base, "allowed", ".env"): 1}}), schema.ErrSecretPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, d := p.CheckArguments("other", tt.args, eff)
			if tt.want == "" {
				if d != nil {
					t.Fatalf("denied: %v", d)
				}
				return
			}
			if d == nil || d.Code != tt.want {
				t.Fatalf("got %v, want %s", d, tt.want)
			}
		})
	}
	// The same names in a prompt's arguments.
	if _, d := p.CheckLooseArguments(j(map[string]any{"file": "notes.txt"}), eff); d == nil {
		t.Fatal("prompt argument naming a file under the server's working directory passed")
	}
	if _, d := p.CheckLooseArguments(j(map[string]any{"file": "$HOME/.env"}), eff); d == nil || d.Code != schema.ErrSecretPath {
		t.Fatalf("prompt argument $HOME/.env = %v", d)
	}
}

// TestCallBounds: one call cannot make the proxy check paths or walk
// subtrees without end (every check runs before anything else of the
// client's is read).
func TestCallBounds(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	in := filepath.Join(base, "allowed", "probe.txt")
	paths := make([]string, maxPaths+1)
	for i := range paths {
		paths[i] = in
	}
	args, _ := json.Marshal(map[string]any{"list": paths})
	if _, d := p.CheckArguments("other", args, eff); d == nil || d.Code != schema.ErrMalformedRequest {
		t.Fatalf("more paths than the bound = %v, want a refusal", d)
	}
	// Many moves of one directory: the subtree bound is per call.
	dir := filepath.Join(base, "allowed", "tree")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxSubtree/8; i++ {
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srcs := make([]string, 10)
	for i := range srcs {
		srcs[i] = dir
	}
	args, _ = json.Marshal(map[string]any{"sources": srcs})
	if _, d := p.CheckArguments("copy_all", args, eff); d == nil || d.Code != schema.ErrPathOutsideScope {
		t.Fatalf("ten walks of one large directory = %v, want a refusal", d)
	}
	args, _ = json.Marshal(map[string]any{"sources": srcs[:2]})
	if _, d := p.CheckArguments("copy_all", args, eff); d != nil {
		t.Fatalf("two walks = %v", d)
	}
}

// TestFileRefsFollowThePathRules: a file:// URI listed in resource_refs is
// still a path: outside the effective scope (client roots narrowed or
// revoked it) or secret, it is refused like any other file URI.
func TestFileRefsFollowThePathRules(t *testing.T) {
	_, base := fixture(t)
	in := "file://" + filepath.Join(base, "allowed", "probe.txt")
	secret := "file://" + filepath.Join(base, "allowed", ".env")
	out := "file://" + filepath.Join(base, "outside", "probe.txt")
	sc, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"x"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
		ResourceRefs: []string{in, secret, out, "config://app"},
	}, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Scope: sc})
	if err != nil {
		t.Fatal(err)
	}
	eff := []string{filepath.Join(base, "allowed")}
	for uri, want := range map[string]schema.ErrorCode{in: "", "config://app": "", secret: schema.ErrSecretPath, out: schema.ErrPathOutsideScope} {
		if _, d := p.CheckURI(uri, eff); (d == nil) != (want == "") || d != nil && d.Code != want {
			t.Errorf("CheckURI(%s) = %v, want %q", uri, d, want)
		}
	}
	// Every root revoked: no file is served, listed or not.
	if _, d := p.CheckURI(in, nil); d == nil {
		t.Error("a listed file URI passed with every root revoked")
	}
	if _, d := p.CheckURI("config://app", nil); d != nil {
		t.Errorf("a listed non-file reference = %v", d)
	}
}
