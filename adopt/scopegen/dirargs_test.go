package scopegen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestDirectoryArgs finds the directories a server is given.
func TestDirectoryArgs(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "home")
	for _, d := range []string{"home/a", "home/b", "cwd/c", "nm/node_modules/x", "code"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	testenv.WriteFiles(t, map[string]string{filepath.Join(root, "data.json"): "{}", filepath.Join(root, "code", "s.js"): ""})
	dirs, rewritten, notes := DirectoryArgs([]string{
		"--root=" + filepath.Join(home, "a"), "~/b", "./c", "--directory", filepath.Join(root, "code"),
		filepath.Join(root, "nm/node_modules/x"), filepath.Join(root, "data.json"), filepath.Join(root, "code", "s.js"),
		"/does/not/exist", "plain-word", "~/b",
	}, home, filepath.Join(root, "cwd"))
	want := []string{filepath.Join(home, "a"), filepath.Join(home, "b"), filepath.Join(root, "cwd/c")}
	if !slices.Equal(dirs, want) {
		t.Errorf("dirs %q, want %q", dirs, want)
	}
	if rewritten[1] != filepath.Join(home, "b") || len(rewritten) != 2 {
		t.Errorf("rewritten %v", rewritten)
	}
	joined := strings.Join(notes, "\n")
	if !strings.Contains(joined, "data.json") || strings.Contains(joined, "s.js") || !strings.Contains(joined, "/does/not/exist") {
		t.Errorf("notes:\n%s", joined)
	}
}
