package runtimeprofile

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxNodeModulesEntries bounds the walk of a node_modules tree for native
// code; a larger tree is walked this far.
const maxNodeModulesEntries = 200000

// addNativeCode finds the native code installed packages bring along in the
// node_modules tree nm, which is granted read-only as a whole:
//   - native addons (*.node, loaded with dlopen): their DT_NEEDED libraries,
//     which live outside the tree (librt, libstdc++, ...);
//   - ELF executables a package runs (a Go or Rust binary shipped in the
//     npm package, started by its JavaScript launcher): execute on the file
//     and its loader and libraries.
//
// Symlinks are not followed: a link out of the tree grants nothing.
func (b *builder) addNativeCode(nm string) error {
	b.native(nm, "node", true)
	return nil
}

// addPythonNativeCode finds the extension modules (*.so) of a Python
// library tree (lib-dynload, site-packages) and adds the libraries they
// need: _ssl and _hashlib need libssl and libcrypto, _bz2 libbz2, _lzma
// liblzma, and a wheel's native module its own.
func (b *builder) addPythonNativeCode(dir string) {
	b.native(dir, "python", false)
}

// addonTests say which file names are native libraries, by kind of tree.
var addonTests = map[string]func(string) bool{
	"node":   func(name string) bool { return strings.HasSuffix(name, ".node") },
	"python": func(name string) bool { return strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.") },
}

// native grants what a walk of root for native code finds, from the cache
// (Options.NativeCache, see nativecache.go) when nothing it depends on
// changed, else by walking the tree (and caching the result).
func (b *builder) native(root, kind string, executables bool) {
	key := nativeKey{Version: nativeCacheVersion, Root: root, Kind: kind, Executables: executables,
		Search: b.opt.Search.Dirs, Class: int(nativeClass()), Machine: int(nativeMachine())}
	s, _ := cachedScan(b.opt.NativeCache, key, b.opt.now, func() (*nativeScan, error) {
		return walkNative(root, addonTests[kind], executables, b.opt.Search), nil
	})
	for _, e := range s.Entries {
		b.add(e.Path, e.Class, e.Reason)
	}
}

// walkNative walks root for native libraries (names for which isAddon is
// true) and, when executables is set, for executable ELF files, and returns
// what to grant for them with what that depends on.
func walkNative(root string, isAddon func(string) bool, executables bool, search LibSearch) *nativeScan {
	s := &nativeScan{}
	deps := newDepSet(s)
	depend := deps.add
	libsDone := map[string]bool{}
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			// Before the directory is read: a later change to its entries
			// moves its mtime.
			depend(p, false)
		}
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > maxNodeModulesEntries {
			s.truncated = true
			return fs.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		addon := isAddon(d.Name())
		if !addon && (!executables || textExt[filepath.Ext(d.Name())]) {
			return nil // most of the tree: no need to lstat it
		}
		if !addon {
			info, err := d.Info()
			if err != nil || info.Mode().Perm()&0o111 == 0 || info.Size() < 64 {
				return nil
			}
		}
		if !isELF(p) {
			return nil
		}
		depend(p, false)
		elf, err := resolveELF(p, search, libsDone)
		if err != nil {
			return nil // the loader would fail the same way; the server reports it
		}
		if !addon {
			s.Entries = append(s.Entries, Entry{Path: p, Class: ClassExec, Reason: "an executable shipped in an installed node package"})
			if elf.Interp != "" {
				depend(elf.Interp, false)
				s.Entries = append(s.Entries, Entry{Path: elf.Interp, Class: ClassExec, Reason: "ELF program interpreter"})
			}
		}
		for _, l := range elf.Libs {
			libsDone[l] = true
			depend(l, false)
			depend(filepath.Dir(l), false)
			s.Entries = append(s.Entries, Entry{Path: l, Class: ClassRead, Reason: "shared library of native code in node_modules"})
		}
		return nil
	})
	// A library found later in the search path moves when one of the same
	// name appears in an earlier directory.
	deps.search(search)
	return s
}

// textExt are extensions of files in node packages that are never
// executables the package runs.
var textExt = map[string]bool{
	".js": true, ".cjs": true, ".mjs": true, ".ts": true, ".cts": true, ".mts": true, ".jsx": true, ".tsx": true,
	".json": true, ".map": true, ".md": true, ".markdown": true, ".txt": true, ".yml": true, ".yaml": true,
	".css": true, ".scss": true, ".html": true, ".htm": true, ".svg": true, ".png": true, ".jpg": true, ".gif": true,
	".wasm": true, ".flow": true, ".coffee": true, ".lock": true, ".xml": true, ".csv": true, ".proto": true,
}

// isELF reports whether the file at p starts with the ELF magic.
func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [4]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return bytes.Equal(head[:], []byte("\x7fELF"))
}
