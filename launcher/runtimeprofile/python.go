package runtimeprofile

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// pythonVersion recognises a CPython executable named pythonX.Y.
func pythonVersion(exe string) (string, bool) {
	v, ok := strings.CutPrefix(filepath.Base(exe), "python")
	if !ok || v == "" || strings.Trim(v, "0123456789.") != "" || !strings.Contains(v, ".") {
		return "", false
	}
	return v, true
}

// addPython grants what CPython reads, found the way CPython finds it:
//   - the standard library PREFIX/lib/pythonX.Y (with lib-dynload), PREFIX
//     being the parent of the real executable's directory, and Debian's
//     dist-packages directories;
//   - a virtual environment: CPython looks for pyvenv.cfg next to the name it
//     was started as (a venv's bin/python is a symlink to the base
//     interpreter) and one directory up; then pyvenv.cfg and the venv's
//     lib/pythonX.Y/site-packages are granted, and the base interpreter it
//     points to (home =) is the real executable already granted;
//   - the directory of the script it runs (sys.path[0]).
func (b *builder) addPython(invoked, exe, ver string, args []string) error {
	b.setKind(KindPython)
	if !slices.Contains(b.env, "PYTHONDONTWRITEBYTECODE=1") {
		b.env = append(b.env, "PYTHONDONTWRITEBYTECODE=1")
	}
	prefix := filepath.Dir(filepath.Dir(exe))
	dirs := []string{
		filepath.Join(prefix, "lib", "python"+ver),
		filepath.Join(prefix, "lib", "python3", "dist-packages"),
		filepath.Join(prefix, "local", "lib", "python"+ver, "dist-packages"),
		filepath.Join("/usr/local/lib", "python"+ver, "dist-packages"),
		// Debian's site.py reads the sitecustomize.py linked from here.
		filepath.Join("/etc", "python"+ver),
	}
	if venv, cfg, ok := findVenv(invoked); ok {
		b.setKind(KindVenv)
		b.add(filepath.Join(venv, "pyvenv.cfg"), ClassRead, "pyvenv.cfg of the server's virtual environment")
		site := filepath.Join(venv, "lib", "python"+ver, "site-packages")
		if _, err := os.Stat(site); err != nil {
			return fmt.Errorf("virtual environment %s has no lib/python%s/site-packages (created by another Python than %s?): recreate it with the interpreter it points to", venv, ver, filepath.Base(exe))
		}
		dirs = append(dirs, site)
		if cfg.systemSite {
			// Already granted above for a Debian interpreter; a base
			// interpreter elsewhere has its own site-packages.
			dirs = append(dirs, filepath.Join(prefix, "lib", "python"+ver, "site-packages"))
		}
		if cfg.home != "" && filepath.IsAbs(cfg.home) {
			// The base interpreter named by home = must be the one the
			// symlink leads to; if not, CPython would read another
			// installation's standard library.
			if real, err := filepath.EvalSymlinks(cfg.home); err == nil && real != filepath.Dir(exe) {
				if base, err := filepath.EvalSymlinks(filepath.Join(real, filepath.Base(exe))); err == nil {
					bprefix := filepath.Dir(filepath.Dir(base))
					dirs = append(dirs, filepath.Join(bprefix, "lib", "python"+ver))
				}
			}
		}
	}
	for _, d := range dirs {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			if st, err := os.Stat(real); err == nil && st.IsDir() {
				b.add(real, ClassReadTree, "python standard library and site packages")
				b.addPythonNativeCode(real)
			}
		}
	}
	if script := pythonScriptArg(args, b.opt.Dir); script != "" {
		b.add(filepath.Dir(script), ClassReadTree, "directory of the server script (python's sys.path[0])")
		b.code(script)
	} else if !pythonSafePath(args) {
		// -m, -c or commands from stdin: sys.path[0] is the working
		// directory, searched before the standard library.
		dir := b.opt.Dir
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		b.codeDirs = append(b.codeDirs, Entry{Path: dir, Class: ClassReadTree, Reason: "the working directory, python's sys.path[0] with -m or -c"})
	}
	return nil
}

// pythonSafePath reports whether an option before the script, -m or -c
// keeps the working directory off sys.path: -P (safe path) or -I
// (isolated), alone or in a group of short options.
func pythonSafePath(args []string) bool {
	withValue := map[string]bool{"-W": true, "-X": true, "--check-hash-based-pycs": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case withValue[a]:
			i++
		case strings.HasPrefix(a, "--") || a == "-":
			return false
		case strings.HasPrefix(a, "-"):
			for _, c := range a[1:] {
				switch c {
				case 'P', 'I':
					return true
				case 'c', 'm', 'W', 'X':
					return false // the rest is its value
				}
			}
		default:
			return false
		}
	}
	return false
}

// venvConfig is what the launcher needs from pyvenv.cfg.
type venvConfig struct {
	home       string
	systemSite bool
}

// findVenv looks for pyvenv.cfg the way CPython's getpath does: next to the
// executable name, then in its parent directory.
func findVenv(invoked string) (string, venvConfig, bool) {
	if invoked == "" {
		return "", venvConfig{}, false
	}
	dir := filepath.Dir(invoked)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		f, err := os.Open(filepath.Join(d, "pyvenv.cfg"))
		if err != nil {
			continue
		}
		cfg := parsePyvenvCfg(bufio.NewReader(f))
		f.Close()
		return d, cfg, true
	}
	return "", venvConfig{}, false
}

// parsePyvenvCfg reads "key = value" lines (CPython splits at the first '=').
func parsePyvenvCfg(r *bufio.Reader) venvConfig {
	var cfg venvConfig
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for n := 0; sc.Scan() && n < 256; n++ {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "home":
			cfg.home = strings.TrimSpace(v)
		case "include-system-site-packages":
			cfg.systemSite = strings.EqualFold(strings.TrimSpace(v), "true")
		}
	}
	return cfg
}

// pythonScriptArg is the script CPython runs: the first argument that is not
// an option, unless -c or -m come first (then sys.path[0] is the working
// directory, which the fence does not open).
func pythonScriptArg(args []string, dir string) string {
	withValue := map[string]bool{"-W": true, "-X": true, "--check-hash-based-pycs": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" || a == "-m" || strings.HasPrefix(a, "-c") || strings.HasPrefix(a, "-m"):
			return ""
		case a == "--":
			if i+1 < len(args) {
				return pythonOperand(args[i+1], dir)
			}
			return ""
		case withValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return pythonOperand(a, dir)
		}
	}
	return ""
}

// pythonOperand is the file CPython runs for its operand a: a script (or
// a zip application), or a directory's __main__.py (the directory is then
// sys.path[0], as a script's directory is).
func pythonOperand(a, dir string) string {
	if f := regularFile(a, dir); f != "" {
		return f
	}
	p := a
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return regularFile(filepath.Join(p, "__main__.py"), "/")
}

// regularFile resolves p (relative to dir) and returns it if it is a regular file.
func regularFile(p, dir string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() {
		return real
	}
	return ""
}
