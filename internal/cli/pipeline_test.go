package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPipelinePath(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, path string)
		err   string
	}{
		{"missing", func(*testing.T, string) {}, "missing next to mcpwarden"},
		{"a directory", func(t *testing.T, p string) { mkdir(t, p) }, "not an executable file"},
		{"not executable", func(t *testing.T, p string) { write(t, p, 0o644) }, "not an executable file"},
		{"group-writable", func(t *testing.T, p string) { write(t, p, 0o775) }, "writable by group or others"},
		{"world-writable", func(t *testing.T, p string) { write(t, p, 0o757) }, "writable by group or others"},
		{"ok", func(t *testing.T, p string) { write(t, p, 0o755) }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, filepath.Join(dir, PipelineName))
			got, err := PipelinePath(dir)
			if c.err == "" {
				if err != nil || got != filepath.Join(dir, PipelineName) {
					t.Fatalf("PipelinePath = %q, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("PipelinePath = %q, %v; want an error saying %q", got, err, c.err)
			}
		})
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // not masked by the umask
		t.Fatal(err)
	}
}
