package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// MustGoBuild builds a command of this module without cgo, or fails tb.
func MustGoBuild(tb testing.TB, out, pkg string) {
	tb.Helper()
	if err := GoBuild(out, pkg, "CGO_ENABLED=0"); err != nil {
		tb.Fatal(err)
	}
}
