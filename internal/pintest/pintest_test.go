package pintest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestUnloadDetachesWhatADaemonKept: probes kept pinned, as by a daemon
// stopping with live runs, are gone from bpffs once the test that
// registered their state directory ends; a state directory whose daemon
// never pinned anything is no error.
func TestUnloadDetachesWhatADaemonKept(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	var dir string
	t.Run("daemon", func(t *testing.T) {
		Unload(t, state)
		var err error
		if dir, err = probes.StatePinDir(state, true); err != nil {
			t.Fatal(err)
		}
		cfg := probes.DefaultConfig()
		cfg.PinDir = dir
		p, err := probes.Load(cfg)
		if err != nil {
			if testenv.InCI() {
				t.Fatalf("load probes: %v", err)
			}
			t.Skipf("skipping: load probes: %v", err)
		}
		if err := p.Keep(); err != nil {
			t.Fatalf("keep: %v", err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("pin directory after Keep: %v %v, want the object's pins", entries, err)
		}
	})
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after the test: %v, want it removed", err)
	}
	if left := Left(); len(left) != 0 {
		t.Errorf("Left() = %v", left)
	}
	t.Run("no daemon", func(t *testing.T) { Unload(t, t.TempDir()) })
}

// daemonStart is how a test starts the real daemon with a state directory.
var daemonStart = regexp.MustCompile(`"daemon",\s*"--[a-z-]+",[^\n]*"--state-dir"|"daemon",\s*"--state-dir"`)

// TestEveryTestDaemonIsUnloaded: a test file that starts `mcpwarden daemon`
// with a state directory registers it with Unload (and its package fails
// through Main when pins remain): the daemon of a test leaves nothing
// attached to the host, whether it was killed or stopped with live runs.
func TestEveryTestDaemonIsUnloaded(t *testing.T) {
	root := testenv.RepoRoot()
	var checked int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if !daemonStart.MatchString(src) {
			return nil
		}
		checked++
		rel, _ := filepath.Rel(root, path)
		t.Logf("%s starts a daemon", rel)
		if !strings.Contains(src, "pintest.Unload(") {
			t.Errorf("%s starts a daemon with a state directory but never calls pintest.Unload on it", rel)
		}
		pkg := filepath.Dir(path)
		if !packageUsesMain(t, pkg) {
			t.Errorf("%s: its package has no TestMain calling pintest.Main", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("found no test that starts a daemon: the pattern is stale")
	}
}

func packageUsesMain(t *testing.T, dir string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "pintest.Main(m)") {
			return true
		}
	}
	return false
}
