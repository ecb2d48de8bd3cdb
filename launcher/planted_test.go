package launcher

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestPlantedCheck: the walk at a run's end reports the entries of a write
// scope named as a secret or as code the host runs (or inside such a
// directory) whose inode changed since the go-ahead, and nothing else:
// not a plain file, not an old one, not an unmasked secret, not a read
// scope; past its bound it says the scope was not checked whole.
func TestPlantedCheck(t *testing.T) {
	root := t.TempDir()
	files := []string{".env", "notes.txt", ".ssh/authorized_keys", ".vscode/tasks.json", ".vscode/extensions.json",
		"proj/.git/hooks/pre-commit", "proj/src/main.go", ".config/systemd/user/x.service", "site/usercustomize.py",
		"CLAUDE.md", "lib/evil.pth", ".Bashrc.", ".claude/settings.json", "dotfiles/bashrc"}
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(mode schema.AccessMode) *schema.CanonicalScope {
		return &schema.CanonicalScope{AccessMode: mode, AllowedPaths: []schema.CanonicalPath{{Path: root, Kind: schema.KindDir}}}
	}
	unmask, err := schema.NewSecrets(nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(scope *schema.CanonicalScope, since time.Time, u *schema.Secrets, limit int) *planted {
		return plantedCheck(scope, schema.DefaultSecrets, u, since, limit)
	}
	// Everything was made before since: nothing to report.
	if p := check(write(schema.AccessWrite), time.Now().Add(time.Minute), unmask, 0); p.count != 0 || !p.complete() {
		t.Errorf("old entries reported: %+v", p)
	}
	// Everything was made after since.
	p := check(write(schema.AccessWrite), time.Now().Add(-time.Minute), unmask, 0)
	want := []string{".env", ".ssh", ".ssh/authorized_keys", ".vscode/tasks.json", "proj/.git", "proj/.git/hooks",
		"proj/.git/hooks/pre-commit", ".config/systemd/user", ".config/systemd/user/x.service", "site/usercustomize.py",
		"CLAUDE.md", "lib/evil.pth", ".Bashrc.", ".claude/settings.json"}
	got := slices.Clone(p.names)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || p.count != len(want) || !p.complete() {
		t.Errorf("reported %q (count %d, complete %v), want %q", got, p.count, p.complete(), want)
	}
	// .env, .ssh, .ssh/authorized_keys, proj/.git, proj/.git/hooks,
	// proj/.git/hooks/pre-commit, .Bashrc.
	if p.secret != 7 {
		t.Errorf("%d secrets' names, want 7", p.secret)
	}
	if note := p.layerNote(); note != "planted=14" {
		t.Errorf("layer note %q", note)
	}
	// Unmasked secrets are the operator's choice.
	u, err := schema.NewSecrets([]string{".git", ".env"})
	if err != nil {
		t.Fatal(err)
	}
	if p := check(write(schema.AccessWrite), time.Now().Add(-time.Minute), u, 0); slices.ContainsFunc(p.names, func(n string) bool { return strings.Contains(n, ".git") || n == ".env" }) {
		t.Errorf("unmasked names reported: %q", p.names)
	}
	// A read scope: the server could not write there.
	if p := check(write(schema.AccessRead), time.Now().Add(-time.Minute), unmask, 0); p.count != 0 {
		t.Errorf("read scope: %+v", p)
	}
	// The bound: said, never silent.
	p = check(write(schema.AccessWrite), time.Now().Add(-time.Minute), unmask, 5)
	if p.complete() || p.bound != "entries" || !strings.Contains(p.layerNote(), "planted_unchecked_bound_entries") {
		t.Errorf("past the bound: %+v, note %q", p, p.layerNote())
	}
	var sb strings.Builder
	p.warn(&sb, "at the run's end")
	if !strings.Contains(sb.String(), "could not be checked whole") {
		t.Errorf("no warning past the bound: %s", sb.String())
	}
	if strings.Contains(sb.String(), root) {
		t.Errorf("the warning names the scope path: %s", sb.String())
	}
}
