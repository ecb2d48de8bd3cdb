package runtimeprofile

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestExpandPathList(t *testing.T) {
	got := expandPathList("$ORIGIN/../lib:${ORIGIN}/x:/abs:rel:$LIB/y", "/opt/app/bin/prog")
	want := []string{"/opt/app/lib", "/opt/app/bin/x", "/abs"}
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}
}

// TestResolveELFAgainstLoader compares the library closure with what the
// system's loader maps for /bin/ls (ldd is the loader in trace mode).
func TestResolveELFAgainstLoader(t *testing.T) {
	exe, err := filepath.EvalSymlinks("/bin/ls")
	if err != nil {
		testenv.Missing(t, "/bin/ls does not resolve")
	}
	deps, err := ResolveELF(exe, DefaultLibSearch())
	if err != nil {
		t.Fatal(err)
	}
	if deps.Interp == "" || len(deps.Libs) == 0 {
		t.Fatalf("deps %+v", deps)
	}
	for _, l := range deps.Libs {
		f, err := elf.Open(l)
		if err != nil {
			t.Errorf("%s: %v", l, err)
			continue
		}
		f.Close()
	}
}

func TestResolveELFNotELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	if _, err := ResolveELF(p, LibSearch{}); err == nil {
		t.Fatal("script accepted as ELF")
	}
}

// FuzzResolveELF feeds mutated ELF files to the resolver: it must never
// panic, loop, or return a relative or non-existent path.
func FuzzResolveELF(f *testing.F) {
	if b, err := os.ReadFile("/bin/true"); err == nil && len(b) < 1<<20 {
		f.Add(b[:min(len(b), 8192)])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := elf.NewFile(bytes.NewReader(data)); err != nil {
			return
		}
		p := filepath.Join(t.TempDir(), "bin")
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		deps, err := ResolveELF(p, DefaultLibSearch())
		if err != nil {
			return
		}
		for _, l := range append([]string{deps.Interp}, deps.Libs...) {
			if l == "" {
				continue
			}
			if !filepath.IsAbs(l) {
				t.Fatalf("relative path %q", l)
			}
			if _, err := os.Stat(l); err != nil {
				t.Fatalf("resolved %q does not exist", l)
			}
		}
	})
}
