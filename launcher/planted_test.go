package launcher

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
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

// TestHomeWriteWarning: a write scope path that is a home directory (the
// launcher's $HOME, root's or a login user's in passwd) or holds one is
// warned about; a project directory below a home, a read scope, a system
// account's home and a home elsewhere are not.
func TestHomeWriteWarning(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"home/alice/proj", "home/bob", "srv/www", "launcher-home", "var/lib/pg"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	passwd := filepath.Join(root, "passwd")
	lines := "root:x:0:0:root:" + root + "/rootshome:/bin/bash\n" +
		"alice:x:1000:1000::" + root + "/home/alice:/bin/bash\n" +
		"bob:x:1001:1001::" + root + "/home/bob:/bin/sh\n" +
		"postgres:x:108:112::" + root + "/var/lib/pg:/bin/bash\n" +
		"nobody:x:65534:65534::" + root + "/srv/www:/usr/sbin/nologin\n" +
		"broken line\n"
	if err := os.WriteFile(passwd, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	scope := func(mode schema.AccessMode, dir string) *schema.CanonicalScope {
		return &schema.CanonicalScope{AccessMode: mode, AllowedPaths: []schema.CanonicalPath{{Path: filepath.Join(root, dir), Kind: schema.KindDir}}}
	}
	home := filepath.Join(root, "launcher-home")
	for _, c := range []struct {
		mode schema.AccessMode
		dir  string
		want string
	}{
		{schema.AccessWrite, "home/alice", `is the home directory of user "alice"`},
		{schema.AccessWrite, "home", "holds the home directory of user"},
		{schema.AccessWrite, "launcher-home", "is the home directory of the launching user"},
		{schema.AccessWrite, "home/alice/proj", ""},
		{schema.AccessRead, "home/alice", ""},
		{schema.AccessWrite, "var/lib/pg", ""},
		{schema.AccessWrite, "srv/www", ""},
	} {
		got := homeWriteWarning(scope(c.mode, c.dir), home, passwd)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s %s: %q, want %q", c.mode, c.dir, got, c.want)
		}
		if got != "" && strings.Contains(got, root) {
			t.Errorf("the warning names a path: %s", got)
		}
	}
}

// BenchmarkPlantedCheck: the run-end walk alone, in process, over the
// 50,000 entries of BenchmarkSecretWalk's tree (500 directories of 99
// files and a .env, all older than since); for profiling. What a run's
// end waits for is BenchmarkRunEndPlantedCheck.
func BenchmarkPlantedCheck(b *testing.B) {
	root := b.TempDir()
	testenv.WriteTree50k(b, root)
	if err := os.WriteFile(filepath.Join(root, ".env"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	scope := &schema.CanonicalScope{AccessMode: schema.AccessWrite, AllowedPaths: []schema.CanonicalPath{{Path: root, Kind: schema.KindDir}}}
	none, _ := schema.NewSecrets(nil)
	since := time.Now().Add(time.Minute)
	for b.Loop() {
		if p := plantedCheck(scope, schema.DefaultSecrets, none, since, 0); p.count != 0 || !p.complete() {
			b.Fatalf("%+v", p)
		}
	}
}

// TestPlantedWarningEscapesNames: a planted name is the server's text on
// the operator's terminal: control characters, C1 and bidi overrides come
// out escaped (strconv.Quote), never raw.
func TestPlantedWarningEscapesNames(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{".ssh/\x1b]0;owned\x07", ".ssh/a\u202egpj.sh", ".ssh/\u009b2J"} {
		p := filepath.Join(root, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	none, _ := schema.NewSecrets(nil)
	scope := &schema.CanonicalScope{AccessMode: schema.AccessWrite, AllowedPaths: []schema.CanonicalPath{{Path: root, Kind: schema.KindDir}}}
	p := plantedCheck(scope, schema.DefaultSecrets, none, time.Now().Add(-time.Minute), 0)
	var sb strings.Builder
	p.warn(&sb, "at the run's end")
	out := sb.String()
	if p.count != 4 || strings.ContainsAny(out, "\x1b\x07\u202e\u009b") || !strings.Contains(out, `\x1b]0;owned\a`) {
		t.Errorf("count %d, warning %q", p.count, out)
	}
}

// TestPlantedCheckSaysWhatItCouldNotList: a directory of the write scope
// the walk cannot list is counted (planted_unchecked=N, and the scope "could
// not be checked whole"), not passed over as clean. The walk runs on a
// thread whose file-system uid is nobody's (the kernel then drops the
// thread's capabilities to read past permissions), over a directory its
// owner, root, may pass through but not list.
func TestPlantedCheckSaysWhatItCouldNotList(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hidden := filepath.Join(root, "private")
	testenv.WriteFiles(t, map[string]string{filepath.Join(hidden, ".env"): "X=1", filepath.Join(root, "notes.txt"): "n"})
	if err := os.Chmod(hidden, 0o311); err != nil {
		t.Fatal(err)
	}
	unmask, err := schema.NewSecrets(nil)
	if err != nil {
		t.Fatal(err)
	}
	scope := &schema.CanonicalScope{AccessMode: schema.AccessWrite, AllowedPaths: []schema.CanonicalPath{{Path: root, Kind: schema.KindDir}}}
	done := make(chan *planted, 1)
	go func() {
		// The thread is left locked: it ends with this goroutine, its
		// changed file-system uid with it.
		runtime.LockOSThread()
		if _, _, errno := unix.RawSyscall(unix.SYS_SETFSUID, 65534, 0, 0); errno != 0 {
			t.Errorf("setfsuid: %v", errno)
		}
		done <- plantedCheck(scope, schema.DefaultSecrets, unmask, time.Now().Add(-time.Minute), 0)
	}()
	p := <-done
	if p.complete() || p.unchecked != 1 || !strings.Contains(p.layerNote(), "planted_unchecked=1") {
		t.Fatalf("a directory the walk could not list: %+v (note %q), want planted_unchecked=1", p, p.layerNote())
	}
}
