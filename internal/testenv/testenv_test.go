package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFreePortNeverRepeats(t *testing.T) {
	lo, hi := portPool()
	seen := map[int]bool{}
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("FreePort returned %d, outside [%d, %d) below the ephemeral range", p, lo, hi)
		}
	}
}

// TestGoTool: a Go tool is found where go install put it: GOBIN when set
// (tests looked in GOPATH/bin only, and missed the tools on a runner that
// sets GOBIN), else the first GOPATH entry's bin.
func TestGoTool(t *testing.T) {
	gobin, gopath := t.TempDir(), t.TempDir()
	for _, dir := range []string{gobin, filepath.Join(gopath, "bin")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOPATH", gopath+string(filepath.ListSeparator)+t.TempDir())
	t.Setenv("GOBIN", gobin)
	if got := GoTool(t, "tool"); got != filepath.Join(gobin, "tool") {
		t.Errorf("with GOBIN set: %s, want %s", got, filepath.Join(gobin, "tool"))
	}
	t.Setenv("GOBIN", "")
	if got := GoTool(t, "tool"); got != filepath.Join(gopath, "bin", "tool") {
		t.Errorf("with GOBIN unset: %s, want %s", got, filepath.Join(gopath, "bin", "tool"))
	}
}
