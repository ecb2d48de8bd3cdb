package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The dentry-cache fast paths (one raw openat2) must give exactly the
// answers of the general ones: the kernel's own resolution and lstat(2).
func TestCachedLookupsAgreeWithTheGeneralPath(t *testing.T) {
	_, base := fixture(t)
	a := filepath.Join(base, "allowed")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(a, filepath.Join(base, "dirlink")))                                   // a directory symlink on the way
	must(os.Symlink(filepath.Join(base, "loop"), filepath.Join(base, "loop")))            // a symlink loop
	must(os.WriteFile(filepath.Join(a, "Case.txt"), []byte("x"), 0o644))                  // case
	must(os.WriteFile(filepath.Join(a, "caf\u00e9"), []byte("x"), 0o644))                 // NFC name
	must(os.WriteFile(filepath.Join(a, "%2e%2e"), []byte("x"), 0o644))                    // an encoded-looking name
	must(os.MkdirAll(filepath.Join(a, "sub", ".ssh"), 0o755))                             // a secret directory
	must(os.WriteFile(filepath.Join(a, "sub", ".ssh", "id_ed25519"), []byte("k"), 0o600)) // a secret file
	must(os.Symlink("../outside/probe.txt", filepath.Join(a, "rel-escape")))              // relative symlink out
	cases := []string{
		a,
		filepath.Join(a, "probe.txt"),
		filepath.Join(a, "sub"),
		filepath.Join(a, ".env"),
		filepath.Join(a, ".git"),
		filepath.Join(a, "sub", ".ssh", "id_ed25519"),
		filepath.Join(a, "escape"),              // symlink to outside
		filepath.Join(a, "escape", "probe.txt"), // through it
		filepath.Join(a, "dangling"),            // dangling symlink
		filepath.Join(a, "dangling", "x"),       // below it
		filepath.Join(a, "inner-link"),          // symlink to inside
		filepath.Join(a, "rel-escape"),
		filepath.Join(base, "dirlink", "probe.txt"),
		filepath.Join(base, "dirlink", "escape", "probe.txt"),
		filepath.Join(base, "outside", "link-in"),
		filepath.Join(base, "loop"),
		filepath.Join(base, "loop", "x"),
		filepath.Join(a, "Case.txt"),
		filepath.Join(a, "case.txt"), // another case: a different, missing name here
		filepath.Join(a, "CASE.TXT"),
		filepath.Join(a, "caf\u00e9"),
		filepath.Join(a, "%2e%2e"),
		filepath.Join(a, "missing"),                   // a write target
		filepath.Join(a, "missing", "deeper", "file"), // below a missing directory
		filepath.Join(a, "probe.txt", "below-a-file"), // ENOTDIR
		filepath.Join(a, "sub", "..", "probe.txt"),    // Join cleans it, as Resolve does before resolveReal
		"/proc/self/cwd",                              // a magic link
		"/proc/self/root" + a,
		"/",
		"/etc/passwd",
	}
	for _, p := range cases {
		for round := 0; round < 2; round++ { // the second round finds the names cached
			wantReal, wantErr := resolveRealSlow(p)
			gotReal, gotErr := resolveReal(p)
			if gotReal != wantReal || (gotErr == nil) != (wantErr == nil) {
				t.Errorf("resolveReal(%q) = %q, %v; the general path says %q, %v", p, gotReal, gotErr, wantReal, wantErr)
			}
			_, lerr := os.Lstat(p)
			if got := Exists(p); got != (lerr == nil) {
				t.Errorf("Exists(%q) = %v; lstat says %v", p, got, lerr)
			}
		}
	}
	// The fast paths are taken (else this test would compare the general
	// path with itself): a plain file and a missing name are answered
	// from the cache once looked up, a symlink on the way never is.
	file := filepath.Join(a, "probe.txt")
	_, _ = os.Lstat(file)
	if !noSymlinks(file) {
		t.Errorf("noSymlinks(%q) = false for a plain file whose names are cached", file)
	}
	for _, p := range []string{filepath.Join(a, "escape", "probe.txt"), filepath.Join(a, "inner-link"), filepath.Join(base, "dirlink", "probe.txt"), "/proc/self/cwd"} {
		_, _ = os.Stat(p)
		if noSymlinks(p) {
			t.Errorf("noSymlinks(%q) = true through a symlink", p)
		}
	}
	missing := filepath.Join(a, "missing")
	_, _ = os.Lstat(missing)
	if e := openCached(missing, 0, 0); e != 2 /* ENOENT */ {
		t.Errorf("openCached(missing) = %v, want ENOENT from the cached negative entry", e)
	}
}

// A symlink swapped in after a first (cached) check is seen at once: the
// cache holds names, not decisions.
func TestCachedLookupSeesASwappedSymlink(t *testing.T) {
	p, base := fixture(t)
	a := filepath.Join(base, "allowed")
	target := filepath.Join(a, "swap.txt")
	if err := os.WriteFile(target, []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	eff := []string{a}
	args := []byte(`{"path":"` + target + `"}`)
	for i := 0; i < 2; i++ {
		if _, d := p.CheckArguments("read_text_file", args, eff); d != nil {
			t.Fatalf("a plain file inside the scope was denied: %v", d)
		}
	}
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside", "probe.txt"), target); err != nil {
		t.Fatal(err)
	}
	if _, d := p.CheckArguments("read_text_file", args, eff); d == nil {
		t.Fatal("a symlink to outside swapped in after a cached check was allowed")
	}
}

// FuzzCachedLookupsAgree: for any name under the fixture (symlinks in and
// out, dangling, secrets), the dentry-cache fast paths answer as the
// general ones do.
func FuzzCachedLookupsAgree(f *testing.F) {
	for _, s := range []string{"allowed/probe.txt", "allowed/escape/probe.txt", "allowed/dangling", "allowed/inner-link", "outside/link-in", "allowed/.env", "allowed/../outside", "missing/x", "allowed/probe.txt/x", ""} {
		f.Add(s)
	}
	_, base := fixture(f)
	f.Fuzz(func(t *testing.T, rel string) {
		if strings.ContainsRune(rel, 0) {
			return
		}
		p := filepath.Join(base, rel)
		if p != base && !strings.HasPrefix(p, base+"/") {
			return // names elsewhere (/proc/self/fd/N) change between two looks
		}
		for round := 0; round < 2; round++ {
			wantReal, wantErr := resolveRealSlow(p)
			gotReal, gotErr := resolveReal(p)
			if gotReal != wantReal || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("resolveReal(%q) = %q, %v; the general path says %q, %v", p, gotReal, gotErr, wantReal, wantErr)
			}
			_, lerr := os.Lstat(p)
			if got := Exists(p); got != (lerr == nil) {
				t.Fatalf("Exists(%q) = %v; lstat says %v", p, got, lerr)
			}
		}
	})
}
