package runtimeprofile

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxLibs bounds the dependency walk so a hostile or corrupt ELF cannot make
// the launcher loop or build a giant ruleset.
const maxLibs = 512

// ELFDeps is what the dynamic loader needs to start one executable.
type ELFDeps struct {
	Interp string   // PT_INTERP, symlinks resolved; empty for static binaries
	Libs   []string // DT_NEEDED closure, symlinks resolved, in discovery order
	// Names are the paths the kernel and the loader open literally
	// (PT_INTERP as written, each library as found in its search directory)
	// where they differ from the resolved ones: a minimal root must
	// reproduce their symlinks.
	Names []string
}

// LibSearch is the loader's search path: dirs from ld.so.conf and the
// built-in defaults. Tests may build one by hand.
type LibSearch struct {
	Dirs []string
}

// DefaultLibSearch reads /etc/ld.so.conf (with its include globs) and appends
// the loader's trusted default directories.
func DefaultLibSearch() LibSearch {
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		d = filepath.Clean(d)
		if !filepath.IsAbs(d) || seen[d] {
			return
		}
		seen[d] = true
		dirs = append(dirs, d)
	}
	for _, d := range readLdSoConf("/etc/ld.so.conf", 0) {
		add(d)
	}
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		add(d)
	}
	return LibSearch{Dirs: dirs}
}

// readLdSoConf parses an ld.so.conf file: one directory per line, '#'
// comments, "include GLOB" lines (relative globs are relative to the file's
// directory) and the obsolete "hwcap" lines, which are ignored.
func readLdSoConf(name string, depth int) []string {
	if depth > 8 {
		return nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return parseLdSoConf(string(data), filepath.Dir(name), func(pattern string) []string {
		m, _ := filepath.Glob(pattern)
		var out []string
		for _, f := range m {
			out = append(out, readLdSoConf(f, depth+1)...)
		}
		return out
	})
}

// parseLdSoConf is the pure part of readLdSoConf; include resolves one
// include pattern to the directories it yields.
func parseLdSoConf(text, dir string, include func(pattern string) []string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "include"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			for _, pat := range strings.Fields(rest) {
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(dir, pat)
				}
				out = append(out, include(pat)...)
			}
			continue
		}
		if strings.HasPrefix(line, "hwcap") {
			continue
		}
		// ld.so.conf allows "dir=TYPE" and comma or space separated lists.
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' || r == ':' }) {
			if i := strings.IndexByte(f, '='); i >= 0 {
				f = f[:i]
			}
			if filepath.IsAbs(f) {
				out = append(out, filepath.Clean(f))
			}
		}
	}
	return out
}

// ErrNotELF says the file is not an ELF object (a script, say).
var ErrNotELF = errors.New("not an ELF file")

// ResolveELF walks exe's program interpreter and the closure of its
// DT_NEEDED libraries the way the glibc loader searches them: DT_RPATH (only
// without DT_RUNPATH), DT_RUNPATH, then the ld.so.conf and default
// directories. LD_LIBRARY_PATH is ignored because the server gets an explicit
// environment without it. Libraries of another ELF class or machine are
// skipped like the loader skips them.
func ResolveELF(exe string, search LibSearch) (ELFDeps, error) {
	return resolveELF(exe, search, nil)
}

// resolveELF is ResolveELF that does not walk into the libraries in done
// (already granted, with their own closure) nor return them.
func resolveELF(exe string, search LibSearch, done map[string]bool) (ELFDeps, error) {
	f, err := elf.Open(exe)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return ELFDeps{}, fmt.Errorf("%s: %w", filepath.Base(exe), ErrNotELF)
		}
		return ELFDeps{}, fmt.Errorf("read executable: %w", err)
	}
	defer f.Close()
	var deps ELFDeps
	class, machine := f.Class, f.Machine
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		buf := make([]byte, min(p.Filesz, 4096))
		if _, err := p.ReadAt(buf, 0); err != nil {
			return ELFDeps{}, fmt.Errorf("read PT_INTERP of %s: %w", filepath.Base(exe), err)
		}
		interp := strings.TrimRight(string(buf), "\x00")
		if !filepath.IsAbs(interp) {
			return ELFDeps{}, fmt.Errorf("%s: program interpreter %q is not absolute", filepath.Base(exe), interp)
		}
		real, err := filepath.EvalSymlinks(interp)
		if err != nil {
			return ELFDeps{}, fmt.Errorf("%s: program interpreter %s: %w", filepath.Base(exe), interp, err)
		}
		deps.Interp = real
		if interp != real {
			deps.Names = append(deps.Names, interp)
		}
	}
	seen := map[string]bool{}
	queue := []*elfFile{{f: f, path: exe}}
	defer func() {
		for _, q := range queue[1:] {
			q.f.Close()
		}
	}()
	for i := 0; i < len(queue); i++ {
		cur := queue[i]
		needed, err := cur.f.ImportedLibraries()
		if err != nil {
			// A static binary has no dynamic section.
			continue
		}
		rpaths, _ := cur.f.DynString(elf.DT_RPATH)
		runpaths, _ := cur.f.DynString(elf.DT_RUNPATH)
		rpath, runpath := strings.Join(rpaths, ":"), strings.Join(runpaths, ":")
		for _, name := range needed {
			if done != nil && rpath == "" && runpath == "" && knownLib(name, search, done) {
				continue // granted with its closure already; skip parsing it again
			}
			lib, literal, lf, err := findLib(name, cur.path, rpath, runpath, search, class, machine)
			if err != nil {
				return ELFDeps{}, fmt.Errorf("%s needs %s: %w", filepath.Base(cur.path), name, err)
			}
			if literal != lib {
				deps.Names = append(deps.Names, literal)
			}
			if seen[lib] || done[lib] {
				lf.Close()
				continue
			}
			seen[lib] = true
			if len(seen) > maxLibs {
				lf.Close()
				return ELFDeps{}, fmt.Errorf("%s: more than %d shared libraries", filepath.Base(exe), maxLibs)
			}
			deps.Libs = append(deps.Libs, lib)
			queue = append(queue, &elfFile{f: lf, path: lib})
		}
	}
	return deps, nil
}

// knownLib reports whether the first file named name in the search
// directories is one of done. It opens nothing; a wrong guess (a library of
// another class first in the path) only costs the full lookup.
func knownLib(name string, search LibSearch, done map[string]bool) bool {
	if strings.Contains(name, "/") {
		return false
	}
	for _, d := range search.Dirs {
		real, err := filepath.EvalSymlinks(filepath.Join(d, name))
		if err != nil {
			continue
		}
		return done[real]
	}
	return false
}

type elfFile struct {
	f    *elf.File
	path string
}

// findLib returns the library's resolved path, the path it was found
// under, and the open file.
func findLib(name, from, rpath, runpath string, search LibSearch, class elf.Class, machine elf.Machine) (string, string, *elf.File, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			return "", "", nil, errors.New("relative library path with '/' depends on the working directory; refusing")
		}
		real, f, err := openLib(p, class, machine)
		return real, p, f, err
	}
	var dirs []string
	if runpath == "" {
		dirs = append(dirs, expandPathList(rpath, from)...)
	}
	dirs = append(dirs, expandPathList(runpath, from)...)
	dirs = append(dirs, search.Dirs...)
	for _, d := range dirs {
		literal := filepath.Join(d, name)
		if p, f, err := openLib(literal, class, machine); err == nil {
			return p, literal, f, nil
		}
	}
	return "", "", nil, errors.New("not found in the loader's search path; install it or grant it with --allow-runtime")
}

// expandPathList splits a DT_RPATH/DT_RUNPATH value and expands $ORIGIN.
func expandPathList(list, from string) []string {
	if list == "" {
		return nil
	}
	origin := filepath.Dir(from)
	var out []string
	for _, d := range strings.Split(list, ":") {
		d = strings.ReplaceAll(d, "${ORIGIN}", origin)
		d = strings.ReplaceAll(d, "$ORIGIN", origin)
		if filepath.IsAbs(d) && !strings.Contains(d, "$") {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}

func openLib(p string, class elf.Class, machine elf.Machine) (string, *elf.File, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", nil, err
	}
	st, err := os.Stat(real)
	if err != nil || !st.Mode().IsRegular() {
		return "", nil, errors.New("not a regular file")
	}
	f, err := elf.Open(real)
	if err != nil {
		return "", nil, err
	}
	if f.Class != class || f.Machine != machine {
		f.Close()
		return "", nil, errors.New("wrong ELF class or machine")
	}
	return real, f, nil
}
