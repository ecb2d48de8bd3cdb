package runtimeprofile

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// nativeTree is a node package tree with an executable ELF and a native
// addon, as TestNativeCodeInNodeModules builds it.
type nativeTree struct {
	dir, nm, script, tool, addon, elf, lib string
}

func newNativeTree(t *testing.T) *nativeTree {
	t.Helper()
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
	nt := &nativeTree{dir: dir, nm: filepath.Join(dir, "node_modules"), elf: elfBin, lib: lib[0]}
	nt.script = filepath.Join(nt.nm, "srv", "index.js")
	nt.tool = filepath.Join(nt.nm, "srv", "bin", "tool")
	nt.addon = filepath.Join(nt.nm, "addon", "build", "addon.node")
	copyTo(t, elfBin, nt.tool, 0o755)
	copyTo(t, lib[0], nt.addon, 0o644)
	testenv.WriteFiles(t, map[string]string{nt.script: "require('child_process')"})
	return nt
}

func copyTo(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
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

// later is a clock an hour ahead: what the test just created is not racy.
func later() time.Time { return time.Now().Add(time.Hour) }

// resolve is the profile's entries for node SCRIPT with the cache in
// cache ("" for none).
func (nt *nativeTree) resolve(t *testing.T, cache string) map[string]Class {
	t.Helper()
	p, err := Resolve([]string{"node", nt.script}, Options{PATH: os.Getenv("PATH"), Dir: nt.dir, NativeCache: cache, now: later})
	if err != nil {
		t.Fatal(err)
	}
	return entryPaths(p)
}

func cacheFiles(_ testing.TB, cache string) []string {
	m, _ := filepath.Glob(filepath.Join(cache, "native-*.scan"))
	return m
}

// cacheFile is the cache file of the tree's walk (the others are of
// executables).
func (nt *nativeTree) cacheFile(t *testing.T, cache string) string {
	t.Helper()
	key := nativeKey{Version: nativeCacheVersion, Root: nt.nm, Kind: "node", Executables: true,
		Search: DefaultLibSearch().Dirs, Class: int(nativeClass()), Machine: int(nativeMachine())}
	f := key.file(cache)
	if _, err := os.Stat(f); err != nil {
		t.Fatalf("the tree's walk was not cached: %v (files: %v)", err, cacheFiles(t, cache))
	}
	return f
}

// rewrite changes a cache file, keeping it valid otherwise.
func rewrite(t *testing.T, file string, f func(*nativeScan)) {
	t.Helper()
	b, err := os.ReadFile(file)
	must(t, err)
	s, ok := decodeScanBytes(b)
	if !ok {
		t.Fatalf("%s does not parse", file)
	}
	f(s)
	b, err = s.encode()
	must(t, err)
	must(t, os.WriteFile(file, b, 0o600))
}

// addToCache adds an entry to the tree's cache file.
func (nt *nativeTree) addToCache(t *testing.T, cache string, e Entry) {
	t.Helper()
	rewrite(t, nt.cacheFile(t, cache), func(s *nativeScan) { s.Entries = append(s.Entries, e) })
}

// TestNativeCacheGrantsWhatTheWalkGrants: a launch served from the cache
// gets exactly the grants of a fresh walk, and the cache is really used.
func TestNativeCacheGrantsWhatTheWalkGrants(t *testing.T) {
	nt := newNativeTree(t)
	cache := filepath.Join(t.TempDir(), "cache")
	walked := nt.resolve(t, "")
	if walked[nt.tool] != ClassExec {
		t.Fatalf("the shipped executable is not granted: %v", walked)
	}
	first := nt.resolve(t, cache)
	nt.cacheFile(t, cache)
	if st, err := os.Stat(cache); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir: %v %v; want mode 0700", st.Mode(), err)
	}
	second := nt.resolve(t, cache)
	if !maps.Equal(walked, first) || !maps.Equal(walked, second) {
		t.Fatalf("grants differ:\nwalk   %v\nfirst  %v\ncached %v", walked, first, second)
	}
	// Proof that the second launch read the cache: an entry only the
	// cache holds is granted.
	marker := filepath.Join(nt.dir, "only-in-the-cache")
	nt.addToCache(t, cache, Entry{Path: marker, Class: ClassRead, Reason: "test"})
	if got := nt.resolve(t, cache); got[marker] != ClassRead {
		t.Fatalf("the cache was not used: %v", got)
	}
}

// TestNativeCacheSeesChanges: after each change to the tree (or to what
// its grants point at) the cached launch grants what a fresh walk grants.
func TestNativeCacheSeesChanges(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, nt *nativeTree)
		check  func(t *testing.T, nt *nativeTree, got map[string]Class)
	}{
		{"an executable added in a new package", func(t *testing.T, nt *nativeTree) {
			copyTo(t, nt.elf, filepath.Join(nt.nm, "new", "bin", "x"), 0o755)
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if got[filepath.Join(nt.nm, "new", "bin", "x")] != ClassExec {
				t.Error("the new executable is not granted")
			}
		}},
		{"an executable added next to another", func(t *testing.T, nt *nativeTree) {
			copyTo(t, nt.elf, nt.tool+"2", 0o755)
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if got[nt.tool+"2"] != ClassExec {
				t.Error("the new executable is not granted")
			}
		}},
		{"the executable removed", func(t *testing.T, nt *nativeTree) {
			must(t, os.Remove(nt.tool))
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if _, ok := got[nt.tool]; ok {
				t.Error("a removed executable is still granted")
			}
		}},
		{"the executable made non-executable", func(t *testing.T, nt *nativeTree) {
			must(t, os.Chmod(nt.tool, 0o644))
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if _, ok := got[nt.tool]; ok {
				t.Error("a file without the x bit is still granted execute")
			}
		}},
		{"the executable rewritten in place as a script", func(t *testing.T, nt *nativeTree) {
			f, err := os.OpenFile(nt.tool, os.O_WRONLY|os.O_TRUNC, 0)
			must(t, err)
			_, err = f.WriteString("#!/bin/sh\necho not an ELF any more, padded past sixty-four bytes of content\n")
			must(t, err)
			must(t, f.Close())
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if _, ok := got[nt.tool]; ok {
				t.Error("a file that is no ELF any more is still granted execute")
			}
		}},
		{"a package directory replaced by a symlink out of the tree", func(t *testing.T, nt *nativeTree) {
			bin := filepath.Dir(nt.tool)
			must(t, os.RemoveAll(bin))
			must(t, os.Symlink("/usr/bin", bin))
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if _, ok := got[nt.tool]; ok {
				t.Error("the executable behind the replaced directory is still granted")
			}
		}},
		{"the addon removed", func(t *testing.T, nt *nativeTree) {
			must(t, os.Remove(nt.addon))
		}, nil}, // its libraries are the C library's, granted anyway
		{"the tree moved away and an empty one put in its place", func(t *testing.T, nt *nativeTree) {
			must(t, os.Rename(nt.nm, nt.nm+".old"))
			testenv.WriteFiles(t, map[string]string{nt.script: "require('child_process')"})
		}, func(t *testing.T, nt *nativeTree, got map[string]Class) {
			if _, ok := got[nt.tool]; ok {
				t.Error("the executable of the old tree is still granted")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			nt := newNativeTree(t)
			cache := filepath.Join(t.TempDir(), "cache")
			before := nt.resolve(t, cache)
			nt.cacheFile(t, cache)
			if before[nt.tool] != ClassExec {
				t.Fatalf("set-up: grants %v", before)
			}
			c.change(t, nt)
			walked := nt.resolve(t, "")
			got := nt.resolve(t, cache)
			if !maps.Equal(walked, got) {
				t.Fatalf("after the change the cache grants\n%v\na fresh walk\n%v", got, walked)
			}
			if c.check != nil && maps.Equal(before, got) {
				t.Fatalf("the change changed nothing the test can see: %v", got)
			}
			if c.check != nil {
				c.check(t, nt, got)
			}
		})
	}
}

// TestNativeCacheDoubtWalks: a cache file that is not certainly ours and
// about this tree is not used (a fresh walk's grants, no extra entry).
func TestNativeCacheDoubtWalks(t *testing.T) {
	marker := "/only-in-the-cache"
	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, cache string, files []string)
		root   bool
	}{
		{"garbage", func(t *testing.T, _ string, files []string) {
			must(t, os.WriteFile(files[0], []byte("{not json"), 0o600))
		}, false},
		{"readable by others", func(t *testing.T, _ string, files []string) {
			must(t, os.Chmod(files[0], 0o644))
		}, false},
		{"directory open to others", func(t *testing.T, cache string, _ []string) {
			must(t, os.Chmod(cache, 0o755))
		}, false},
		{"a symlink", func(t *testing.T, _ string, files []string) {
			other := files[0] + ".real"
			must(t, os.Rename(files[0], other))
			must(t, os.Symlink(other, files[0]))
		}, false},
		{"a tree grant in it", func(t *testing.T, cache string, files []string) {
			rewrite(t, files[0], func(s *nativeScan) { s.Entries = append(s.Entries, Entry{Path: "/", Class: ClassReadTree}) })
		}, false},
		{"a relative path in it", func(t *testing.T, cache string, files []string) {
			rewrite(t, files[0], func(s *nativeScan) { s.Entries = append(s.Entries, Entry{Path: "../../etc/shadow", Class: ClassRead}) })
		}, false},
		{"about another tree", func(t *testing.T, cache string, files []string) {
			rewrite(t, files[0], func(s *nativeScan) { s.Key.Root = "/elsewhere/node_modules" })
		}, false},
		{"nothing it depends on", func(t *testing.T, cache string, files []string) {
			rewrite(t, files[0], func(s *nativeScan) { s.Depends = nil })
		}, false},
		{"another user's", func(t *testing.T, _ string, files []string) {
			must(t, os.Chown(files[0], 65534, 65534))
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root {
				testenv.RequireRoot(t)
			}
			nt := newNativeTree(t)
			cache := filepath.Join(t.TempDir(), "cache")
			walked := nt.resolve(t, cache)
			nt.addToCache(t, cache, Entry{Path: marker, Class: ClassRead, Reason: "test"})
			c.tamper(t, cache, []string{nt.cacheFile(t, cache)})
			got := nt.resolve(t, cache)
			if _, ok := got[marker]; ok {
				t.Fatal("the doubtful cache file was used")
			}
			if !maps.Equal(walked, got) {
				t.Fatalf("grants differ from the walk's:\n%v\n%v", got, walked)
			}
		})
	}
}

// TestNativeCacheNotStoredWhenRacy: a tree changed within the timestamp
// window of the walk is walked again next time, not cached.
func TestNativeCacheNotStoredWhenRacy(t *testing.T) {
	nt := newNativeTree(t)
	cache := filepath.Join(t.TempDir(), "cache")
	// "Just now" is the tree's newest change, not the clock when Resolve
	// runs: on a loaded machine writing the tree can take longer than the
	// racy window.
	var newest time.Time
	if err := filepath.Walk(nt.nm, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if c := time.Unix(st.Ctim.Sec, st.Ctim.Nsec); c.After(newest) {
				newest = c
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	opt := Options{PATH: os.Getenv("PATH"), Dir: nt.dir, NativeCache: cache, now: func() time.Time { return newest }}
	if _, err := Resolve([]string{"node", nt.script}, opt); err != nil {
		t.Fatal(err)
	}
	key := nativeKey{Version: nativeCacheVersion, Root: nt.nm, Kind: "node", Executables: true,
		Search: DefaultLibSearch().Dirs, Class: int(nativeClass()), Machine: int(nativeMachine())}
	if _, err := os.Stat(key.file(cache)); err == nil {
		t.Fatal("a tree written just now was cached")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzNativeCacheDecode: whatever a cache file holds, decoding never
// panics and accepts only file grants with absolute clean paths.
func FuzzNativeCacheDecode(f *testing.F) {
	key := nativeKey{Version: nativeCacheVersion, Root: "/", Kind: "elf", Search: []string{"/lib"}}
	good, _ := (&nativeScan{Key: key, Entries: []Entry{{Path: "/lib64/ld-linux-x86-64.so.2", Class: ClassExec}, {Path: "/lib/libc.so.6", Class: ClassRead}},
		Names: []string{"/lib64/x"}, Depends: []fileID{{Path: "/"}, {Path: "/nope", Absent: true}}}).encode()
	f.Add(good)
	f.Add([]byte(nativeCacheMagic + " 2\nk 2 0 0 0 \"elf\" \"/\" \"/lib\"\ne \"read-tree\" \"/\" \"\"\n0 0 0 0 0 0 0 \"/\"\n"))
	f.Add([]byte(nativeCacheMagic + " 2\nk 2 0 0 0 \"elf\" \"/\" \"/lib\"\nn \"/a\"\ne \"read\" \"/b\" \"r\"\n"))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := decodeNativeScan(b, key)
		if !ok {
			return
		}
		for i, e := range s.Entries {
			if (e.Class != ClassExec && e.Class != ClassRead) || !cleanAbs(e.Path) || (e.Class == ClassExec && i > 0) {
				t.Fatalf("accepted %+v", e)
			}
		}
		if out, err := s.encode(); err != nil {
			t.Fatal(err)
		} else if again, ok := decodeScanBytes(out); !ok || !reflect.DeepEqual(again, s) {
			t.Fatalf("does not round-trip: %q", out)
		}
	})
}

// TestNativeCacheSeesLibraries: an addon's library that moves (another of
// its name in an earlier search directory, or the same file replaced) is
// granted where the loader will find it, cached or not.
func TestNativeCacheSeesLibraries(t *testing.T) {
	nt := newNativeTree(t)
	ssl, _ := filepath.Glob("/usr/lib/*/libssl.so.3")
	crypto, _ := filepath.Glob("/usr/lib/*/libcrypto.so.3")
	if len(ssl) == 0 || len(crypto) == 0 {
		testenv.Missing(t, "libssl3 (libssl.so.3, libcrypto.so.3)")
	}
	copyTo(t, ssl[0], nt.addon, 0o644) // an addon that needs libcrypto
	first := filepath.Join(t.TempDir(), "lib")
	must(t, os.Mkdir(first, 0o755))
	search := DefaultLibSearch()
	search.Dirs = append([]string{first}, search.Dirs...)
	cache := filepath.Join(t.TempDir(), "cache")
	resolve := func(cache string) map[string]Class {
		p, err := Resolve([]string{"node", nt.script}, Options{PATH: os.Getenv("PATH"), Dir: nt.dir, Search: search, NativeCache: cache, now: later})
		must(t, err)
		return entryPaths(p)
	}
	mine := filepath.Join(first, "libcrypto.so.3")
	if got := resolve(cache); got[mine] != "" || len(cacheFiles(t, cache)) != 2 {
		t.Fatalf("set-up: %v, cache %v (want node's and the tree's)", got, cacheFiles(t, cache))
	}
	copyTo(t, crypto[0], mine, 0o644)
	if got, walked := resolve(cache), resolve(""); got[mine] != ClassRead || !maps.Equal(got, walked) {
		t.Fatalf("a library put first in the search path: cached %v, walked %v", got[mine], walked[mine])
	}
	// Replaced by rename (as a package upgrade does), then removed.
	copyTo(t, crypto[0], mine+".new", 0o644)
	must(t, os.Rename(mine+".new", mine))
	if got, walked := resolve(cache), resolve(""); !maps.Equal(got, walked) {
		t.Fatalf("a replaced library: cached %v, walked %v", got, walked)
	}
	must(t, os.Remove(mine))
	if got := resolve(cache); got[mine] != "" {
		t.Fatalf("a removed library is still granted")
	}
}

// TestNativeCacheRoundTrips: what encode writes, decodeScanBytes reads back
// the same, whatever the strings hold (spaces, quotes, line breaks, bytes
// that are not UTF-8); and a line out of its place, a field too many or
// too few, or a string not quoted the one way encode quotes is refused.
func TestNativeCacheRoundTrips(t *testing.T) {
	odd := []string{"", " ", "a b", "\"", "\\", "\n", "e \"x\"", "\xff\xfe", "é☃", "`raw`", "0 0 0"}
	for i, x := range odd {
		s := &nativeScan{
			Key:     nativeKey{Version: nativeCacheVersion, Root: "/r" + x, Kind: x, Executables: i%2 == 0, Search: []string{x, "/lib"}, Class: i, Machine: -i},
			Entries: []Entry{{Path: "/p" + x, Class: Class(x), Reason: x}, {Path: "/q", Class: ClassRead, Reason: "r " + x}},
			Names:   []string{"/n" + x, x},
			Depends: []fileID{{Path: "/d" + x, Dev: 1, Ino: 2, Mode: 3, Size: 4, Mtime: 5, Ctime: 6}, {Path: x, Absent: true}},
		}
		if i == 0 {
			s.Key.Search, s.Names = nil, nil
		}
		b, err := s.encode()
		must(t, err)
		got, ok := decodeScanBytes(b)
		if !ok || !reflect.DeepEqual(got, s) {
			t.Fatalf("%q does not round-trip:\n%q\n%+v\n%+v", x, b, got, s)
		}
	}
	head := nativeCacheMagic + " 2\n"
	key := "k 2 1 2 62 \"elf\" \"/\" \"/lib\"\n"
	for name, b := range map[string]string{
		"a name after a dependency":  head + key + "0 0 0 0 0 0 0 \"/\"\nn \"/a\"\n",
		"an entry after a name":      head + key + "n \"/a\"\ne \"read\" \"/b\" \"r\"\n",
		"an entry of two fields":     head + key + "e \"read\" \"/b\"\n",
		"an entry of four fields":    head + key + "e \"read\" \"/b\" \"r\" \"x\"\n",
		"two spaces":                 head + key + "e \"read\"  \"/b\" \"r\"\n",
		"a trailing space":           head + key + "n \"/a\" \n",
		"a backquoted string":        head + key + "n `/a`\n",
		"an unquoted string":         head + key + "n /a\n",
		"a key without its root":     head + "k 2 1 2 62 \"elf\"\n",
		"a key with executables 2":   head + "k 2 2 2 62 \"elf\" \"/\"\n",
		"a key that is not a number": head + "k 2 1 x 62 \"elf\" \"/\"\n",
		"the version 1 header":       nativeCacheMagic + " 1\n{\"key\":{\"v\":1},\"entries\":[]}\n",
		"no line break at the end":   head + key + "n \"/a\"",
	} {
		if _, ok := decodeScanBytes([]byte(b)); ok {
			t.Errorf("%s: accepted %q", name, b)
		}
	}
}
