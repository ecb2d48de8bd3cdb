package runtimeprofile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestNativeCodeInNodeModules: an executable ELF shipped in a package gets
// execute, a native addon gets its libraries; a script with the x bit and
// a symlink out of the tree get nothing.
func TestNativeCodeInNodeModules(t *testing.T) {
	testenv.RequireCommand(t, "node")
	elfBin, err := filepath.EvalSymlinks("/bin/true")
	if err != nil {
		testenv.Missing(t, "/bin/true")
	}
	lib, _ := filepath.Glob("/lib/x86_64-linux-gnu/libz.so.*")
	if len(lib) == 0 {
		lib, _ = filepath.Glob("/usr/lib/*/libz.so.*")
	}
	if len(lib) == 0 {
		testenv.Missing(t, "libz")
	}
	dir := t.TempDir()
	nm := filepath.Join(dir, "node_modules")
	pkg := filepath.Join(nm, "srv")
	copyFile := func(src, dst string, mode os.FileMode) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(elfBin, filepath.Join(pkg, "bin", "tool"), 0o755)
	copyFile(lib[0], filepath.Join(nm, "addon", "build", "addon.node"), 0o644)
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(pkg, "index.js"):  "require('child_process')",
		filepath.Join(pkg, "script.sh"): "#!/bin/sh\n",
	})
	if err := os.Chmod(filepath.Join(pkg, "script.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin", filepath.Join(nm, "outside")); err != nil {
		t.Fatal(err)
	}
	p, err := Resolve([]string{"node", filepath.Join(pkg, "index.js")}, Options{PATH: os.Getenv("PATH"), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m := entryPaths(p)
	if m[filepath.Join(pkg, "bin", "tool")] != ClassExec {
		t.Errorf("the shipped binary is not executable: %v", m)
	}
	var libc bool
	for path, c := range m {
		if strings.Contains(filepath.Base(path), "libc.so") && c == ClassRead {
			libc = true
		}
		if strings.HasPrefix(path, "/usr/bin/") && c == ClassExec && path != p.Exe && filepath.Base(path) != "env" {
			t.Errorf("followed a symlink out of node_modules: %s", path)
		}
	}
	if !libc {
		t.Errorf("the addon's libraries are missing: %v", m)
	}
	if _, ok := m[filepath.Join(pkg, "script.sh")]; ok {
		t.Errorf("a script in node_modules was granted on its own")
	}
}
