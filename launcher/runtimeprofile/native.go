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
	b.walkNative(nm, func(name string) bool { return strings.HasSuffix(name, ".node") }, true)
	return nil
}

// addPythonNativeCode finds the extension modules (*.so) of a Python
// library tree (lib-dynload, site-packages) and adds the libraries they
// need: _ssl and _hashlib need libssl and libcrypto, _bz2 libbz2, _lzma
// liblzma, and a wheel's native module its own.
func (b *builder) addPythonNativeCode(dir string) {
	b.walkNative(dir, func(name string) bool {
		return strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")
	}, false)
}

// walkNative walks root for native libraries (names for which isAddon is
// true) and, when executables is set, for executable ELF files.
func (b *builder) walkNative(root string, isAddon func(string) bool, executables bool) {
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > maxNodeModulesEntries {
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
		if b.libsDone == nil {
			// The libraries granted so far (the interpreter's) come with
			// their closure already.
			b.libsDone = map[string]bool{}
			for _, e := range b.entries {
				if e.Class == ClassRead || e.Class == ClassExec {
					b.libsDone[e.Path] = true
				}
			}
		}
		deps, err := resolveELF(p, b.opt.Search, b.libsDone)
		if err != nil {
			return nil // the loader would fail the same way; the server reports it
		}
		for _, l := range deps.Libs {
			b.libsDone[l] = true
		}
		if !addon {
			b.add(p, ClassExec, "an executable shipped in an installed node package")
			if deps.Interp != "" {
				b.add(deps.Interp, ClassExec, "ELF program interpreter")
			}
		}
		for _, l := range deps.Libs {
			b.add(l, ClassRead, "shared library of native code in node_modules")
		}
		return nil
	})
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
