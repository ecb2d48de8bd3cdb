package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// RepoRoot is the module root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// GoBuild builds pkg (a path relative to the module root, such as
// "./cmd/mcpwarden") into out, with extra environment entries such as
// "CGO_ENABLED=0".
func GoBuild(out, pkg string, env ...string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// LockedBuffer is a buffer that a child process's output copier and the test
// may use at once. It wraps rather than embeds bytes.Buffer: an embedded
// ReadFrom would let io.Copy write around the lock.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WriteFiles creates each file with its content, and its parent directories.
func WriteFiles(tb testing.TB, files map[string]string) {
	tb.Helper()
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// WriteTree50k creates under root the 50,000-entry tree of the walk
// benchmarks: 500 directories d0..d499 of 99 empty files f0.txt..f98.txt
// each.
func WriteTree50k(tb testing.TB, root string) {
	tb.Helper()
	for d := 0; d < 500; d++ {
		sub := filepath.Join(root, "d"+strconv.Itoa(d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			tb.Fatal(err)
		}
		for f := 0; f < 99; f++ {
			if err := os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(f)+".txt"), nil, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// MustGoBuild builds a command of this module without cgo, or fails tb.
func MustGoBuild(tb testing.TB, out, pkg string) {
	tb.Helper()
	if err := GoBuild(out, pkg, "CGO_ENABLED=0"); err != nil {
		tb.Fatal(err)
	}
}

// HelperName is the fence helper's file name (launcher/sandbox.HelperName);
// `mcpwarden run` finds it next to its own executable.
const HelperName = "mcpwarden-fence"

// ExecStageName is the fence's exec stage (launcher/sandbox.ExecStageName),
// a C program the launcher finds next to the fence helper.
const ExecStageName = "mcpwarden-exec"

// PipelineName is the program holding the daemon, collect, query, events
// and why commands (internal/cli.PipelineName); `mcpwarden COMMAND` execs it
// from next to its own executable.
const PipelineName = "mcpwarden-pipeline"

var mcpwardenBuild struct {
	once sync.Once
	bin  string
	err  error
}

// Mcpwarden returns the mcpwarden binary under test, with the fence helper
// and mcpwarden-pipeline next to it: $MCPWARDEN_BIN (after `make build`,
// which builds all three), or a fresh build of them into a temp dir, once
// per test binary.
func Mcpwarden(tb testing.TB) string {
	tb.Helper()
	b := &mcpwardenBuild
	b.once.Do(func() {
		if bin := os.Getenv("MCPWARDEN_BIN"); bin != "" {
			for _, name := range []string{HelperName, ExecStageName, PipelineName} {
				next := filepath.Join(filepath.Dir(bin), name)
				if _, err := os.Stat(next); err != nil {
					b.err = fmt.Errorf("MCPWARDEN_BIN=%s but %s is missing next to it: run 'make build'", bin, next)
					return
				}
			}
			b.bin = bin
			return
		}
		dir, err := os.MkdirTemp("", "mcpwarden-bin-")
		if err != nil {
			b.err = err
			return
		}
		// Mode 0755 like `make build`: the launcher refuses a helper others can write.
		if err := os.Chmod(dir, 0o755); err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, "mcpwarden")
		// Static, as `make build` makes it.
		if b.err = GoBuild(b.bin, "./cmd/mcpwarden", "CGO_ENABLED=0"); b.err != nil {
			return
		}
		if b.err = GoBuild(filepath.Join(dir, PipelineName), "./cmd/mcpwarden-pipeline"); b.err != nil {
			return
		}
		b.err = BuildFenceHelper(filepath.Join(dir, HelperName))
	})
	if b.err != nil {
		tb.Fatalf("build mcpwarden: %v", b.err)
	}
	return b.bin
}

// FenceHelper is the fence helper next to Mcpwarden(tb), for tests that run
// the launcher in-process (launcher.Config.HelperPath).
func FenceHelper(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(filepath.Dir(Mcpwarden(tb)), HelperName)
}

// BuildFenceHelper builds cmd/mcpwarden-fence the way `make build` does
// (static, no cgo, stripped) and its exec stage next to it (BuildExecStage).
func BuildFenceHelper(out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/mcpwarden-fence")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/mcpwarden-fence: %v\n%s", err, b)
	}
	return BuildExecStage(filepath.Join(filepath.Dir(out), ExecStageName))
}

// ExecStageSources are the C files of the exec stage, relative to the
// repository root; ExecStageCFlags are the Makefile's EXECSTAGE_CFLAGS.
var (
	ExecStageSources = []string{"launcher/sandbox/execstage/stage.c", "launcher/sandbox/execstage/handover.c", "launcher/sandbox/execstage/init.c"}
	ExecStageCFlags  = []string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-static", "-s"}
)

// BuildExecStage builds the exec stage the way `make build` does.
func BuildExecStage(out string) error {
	args := append(append([]string{}, ExecStageCFlags...), "-o", out)
	cmd := exec.Command("cc", append(args, ExecStageSources...)...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cc %s: %v (scripts/test-env.sh install installs gcc)\n%s", ExecStageSources[0], err, b)
	}
	return nil
}
