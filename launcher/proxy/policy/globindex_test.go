package policy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestGlobIndexKeptAndRefreshed: the secrets under the scope, listed for
// a glob's check, are kept while no directory under the scope changed
// (a text argument such as "**bold**" no longer walks the scope on every
// call), and listed again after any change: a secret created in an
// existing directory, in a new directory, or moved in with its directory
// from outside the scope is matched at the next call. Before: one walk
// per call (no kept listing).
func TestGlobIndexKeptAndRefreshed(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scope, outside := filepath.Join(base, "scope"), filepath.Join(base, "outside")
	for _, d := range []string{"a/b/c", "docs"} {
		if err := os.MkdirAll(filepath.Join(scope, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(scope, "docs", "notes.md"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"."}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"other"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, scope, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Scope: sc, Home: outside})
	if err != nil {
		t.Fatal(err)
	}
	eff := []string{scope}
	check := func(q string) schema.ErrorCode {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"text": q})
		if _, d := p.CheckArguments("other", b, eff); d != nil {
			return d.Code
		}
		return ""
	}
	walks := func() int {
		p.globs.mu.Lock()
		defer p.globs.mu.Unlock()
		return p.globs.walks
	}
	waitListingKeepable(scope)
	if got := check("**bold**"); got != "" {
		t.Fatalf("**bold** = %q", got)
	}
	n := walks()
	for i := 0; i < 20; i++ {
		if got := check("**bold**"); got != "" {
			t.Fatalf("**bold** = %q", got)
		}
	}
	if walks() != n {
		t.Fatalf("%d walks of an unchanged scope for 20 more calls, want none", walks()-n)
	}
	// A secret created in an existing directory.
	if err := os.WriteFile(filepath.Join(scope, "a", "b", "c", ".env"), []byte("K=V"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := check("**/.e*"); got != schema.ErrSecretPath {
		t.Fatalf("**/.e* after .env was created = %q", got)
	}
	// A secret in a new directory.
	if err := os.MkdirAll(filepath.Join(scope, "docs", "new", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scope, "docs", "new", "deep", "id_rsa"), []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := check("**/id_*"); got != schema.ErrSecretPath {
		t.Fatalf("**/id_* after id_rsa was created = %q", got)
	}
	// A directory holding a secret moved in from outside the scope.
	if err := os.MkdirAll(filepath.Join(outside, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "keys", "server.pem"), []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(outside, "keys"), filepath.Join(scope, "a", "k")); err != nil {
		t.Fatal(err)
	}
	if got := check("a/*/server.p?m"); got != schema.ErrSecretPath {
		t.Fatalf("a/*/server.p?m after keys/ was moved in = %q", got)
	}
	// Removed again: the glob passes.
	if err := os.RemoveAll(filepath.Join(scope, "a", "k")); err != nil {
		t.Fatal(err)
	}
	if got := check("a/*/server.p?m"); got != "" {
		t.Fatalf("a/*/server.p?m after keys/ was removed = %q", got)
	}
}

// TestGlobIndexStampChanges: a kept listing is fresh only while every
// directory keeps its stamp: an entry created or removed in it, or the
// directory replaced, makes it stale.
func TestGlobIndexStampChanges(t *testing.T) {
	dir := t.TempDir()
	x := &globIndex{}
	s, ok := stampOf(dir)
	if !ok {
		t.Fatal("no stamp")
	}
	x.dirs = []dirStamp{s}
	if !x.fresh() {
		t.Fatal("an unchanged directory is stale")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if x.fresh() {
		t.Fatal("a removed directory is fresh")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if x.fresh() {
		t.Fatal("a directory replaced by another is fresh")
	}
}

// BenchmarkGlobArgument: one call's check of a text argument taken for a
// glob ("**bold**") to a tool the proxy does not know, over a scope of
// 5000 files in 500 directories with one secret: "kept" is now (the
// listing kept, one lstat per directory), "walked" lists the scope for
// each call, as every call did before.
func BenchmarkGlobArgument(b *testing.B) {
	base, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for d := 0; d < 500; d++ {
		dir := filepath.Join(base, fmt.Sprintf("d%03d/e%d", d, d%7))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 10; f++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.md", f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(base, "d000", ".env"), []byte("K=V"), 0o600); err != nil {
		b.Fatal(err)
	}
	sc, err := schema.Canonicalize(&schema.Scope{ScopeID: "t", AllowedPaths: []string{"."}, AccessMode: schema.AccessRead, ToolAllowlist: []string{"other"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5}, base, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(Config{Scope: sc})
	if err != nil {
		b.Fatal(err)
	}
	waitListingKeepable(base)
	args := json.RawMessage(`{"text":"**bold**"}`)
	eff := []string{base}
	for _, mode := range []string{"kept", "walked"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if mode == "walked" {
					p.globs.mu.Lock()
					p.globs.dirs = nil
					p.globs.mu.Unlock()
				}
				if _, d := p.CheckArguments("other", args, eff); d != nil {
					b.Fatal(d)
				}
			}
		})
	}
}

// waitListingKeepable waits until every directory under root changed
// longer than racyWindow ago: only then is a listing of it kept (a listing
// of a directory that just changed could miss a change in the same clock
// tick).
func waitListingKeepable(root string) {
	for {
		old := true
		_ = filepath.WalkDir(root, func(path string, de os.DirEntry, err error) error {
			if s, ok := stampOf(path); err == nil && de.IsDir() && (!ok || time.Since(time.Unix(0, s.ctime)) <= racyWindow+100*time.Millisecond) {
				old = false
			}
			return nil
		})
		if old {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
