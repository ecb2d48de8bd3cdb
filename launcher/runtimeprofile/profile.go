// Package runtimeprofile works out the few host files an unmodified server
// needs to start under the fence: its executable and interpreters (following
// "#!" lines and "/usr/bin/env node"), the ELF program interpreter and the
// shared libraries the loader will map, a node script's installed packages,
// and a short fixed list of host files runtimes read at start-up.
//
// It never grants /, /etc, a home directory or any directory that contains
// the approved base: every entry is a single file, except a node package's
// code directories.
package runtimeprofile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Class is how an entry may be used; the ruleset turns it into Landlock rights.
type Class string

const (
	ClassExec     Class = "exec"      // a file that is execve'd (executable, interpreter, ELF loader)
	ClassRead     Class = "read"      // a file that is only read (library, host config file)
	ClassReadTree Class = "read-tree" // a directory tree of code that is read (node packages)
	ClassDevice   Class = "device"    // a character device read and written (/dev/null)
)

// Entry is one runtime grant with the reason it is there.
type Entry struct {
	Path   string `json:"path"`
	Class  Class  `json:"class"`
	Reason string `json:"reason"`
}

// Profile is the runtime part of a run's ruleset.
type Profile struct {
	// Exe is the absolute path the helper execs (argv[0] resolved on PATH,
	// symlinks resolved).
	Exe     string  `json:"exe"`
	Entries []Entry `json:"entries"`
}

// Options are the inputs besides the command line.
type Options struct {
	PATH   string    // the PATH the server gets; used to find argv[0] and "env" targets
	Dir    string    // working directory for relative paths in argv
	Search LibSearch // loader search path; DefaultLibSearch() when empty
	// HostFiles are optional host files granted read-only when they exist;
	// DefaultHostFiles when nil.
	HostFiles []string
	// Devices are character devices granted read-write; DefaultDevices when nil.
	Devices []string
}

// DefaultHostFiles are read at start-up by the C library and by node
// (OpenSSL's configuration and CA bundle, the time zone). They hold no
// secrets. Anything else a runtime needs is granted by the operator with
// --allow-runtime.
var DefaultHostFiles = []string{
	"/etc/ld.so.cache",
	"/etc/localtime",
	"/etc/ssl/openssl.cnf",
	"/usr/lib/ssl/openssl.cnf",
	"/etc/ssl/certs/ca-certificates.crt",
	"/dev/urandom",
	"/dev/random",
}

// DefaultDevices are the character devices runtimes open and write
// (/dev/null, /dev/zero); the random devices are in DefaultHostFiles.
var DefaultDevices = []string{"/dev/null", "/dev/zero"}

// maxInterpDepth matches the kernel's limit on nested "#!" interpreters.
const maxInterpDepth = 4

// Resolve builds the profile for argv.
func Resolve(argv []string, opt Options) (*Profile, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no server command given; put it after '--'")
	}
	if len(opt.Search.Dirs) == 0 {
		opt.Search = DefaultLibSearch()
	}
	if opt.HostFiles == nil {
		opt.HostFiles = DefaultHostFiles
	}
	if opt.Devices == nil {
		opt.Devices = DefaultDevices
	}
	if opt.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		opt.Dir = wd
	}
	if dir, err := filepath.Abs(opt.Dir); err == nil {
		opt.Dir = dir
	}
	b := &builder{opt: opt, seen: map[string]int{}}
	exe, err := b.lookPath(argv[0])
	if err != nil {
		return nil, err
	}
	p := &Profile{Exe: exe}
	if err := b.addProgram(exe, argv[1:], 0); err != nil {
		return nil, err
	}
	for _, f := range opt.HostFiles {
		if real, err := filepath.EvalSymlinks(f); err == nil {
			if st, err := os.Stat(real); err == nil && (st.Mode().IsRegular() || st.Mode()&os.ModeCharDevice != 0) {
				b.add(real, ClassRead, "host file runtimes read at start-up")
			}
		}
	}
	for _, d := range opt.Devices {
		if st, err := os.Stat(d); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.add(d, ClassDevice, "character device")
		}
	}
	p.Entries = b.entries
	return p, nil
}

type builder struct {
	opt     Options
	entries []Entry
	seen    map[string]int // path → index in entries
}

// add records path, keeping the strongest class when a path repeats.
func (b *builder) add(path string, c Class, reason string) {
	if i, ok := b.seen[path]; ok {
		if rank(c) > rank(b.entries[i].Class) {
			b.entries[i].Class = c
			b.entries[i].Reason = reason
		}
		return
	}
	b.seen[path] = len(b.entries)
	b.entries = append(b.entries, Entry{Path: path, Class: c, Reason: reason})
}

func rank(c Class) int {
	switch c {
	case ClassExec:
		return 3
	case ClassReadTree:
		return 2
	case ClassDevice:
		return 2
	default:
		return 1
	}
}

// lookPath finds name like execvp does on the server's PATH and resolves symlinks.
func (b *builder) lookPath(name string) (string, error) {
	var cand []string
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(b.opt.Dir, p)
		}
		cand = []string{p}
	} else {
		for _, d := range filepath.SplitList(b.opt.PATH) {
			if d == "" || !filepath.IsAbs(d) {
				continue // a relative PATH entry depends on the cwd; execvp would, we don't
			}
			cand = append(cand, filepath.Join(d, name))
		}
	}
	for _, c := range cand {
		real, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		return real, nil
	}
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("server executable %s does not exist or is not executable", name)
	}
	return "", fmt.Errorf("server executable %q not found on PATH (%s); give an absolute path", name, b.opt.PATH)
}

// addProgram adds exe (already resolved) and what it needs to run args.
func (b *builder) addProgram(exe string, args []string, depth int) error {
	if depth > maxInterpDepth {
		return fmt.Errorf("%s: more than %d nested '#!' interpreters", filepath.Base(exe), maxInterpDepth)
	}
	b.add(exe, ClassExec, "server executable or interpreter")
	interp, iargs, isScript, err := readShebang(exe)
	if err != nil {
		return err
	}
	if isScript {
		// The kernel runs "interp [iarg] exe args..."; the script itself is read.
		ip, err := b.lookPath(interp)
		if err != nil {
			return fmt.Errorf("%s: interpreter: %w", filepath.Base(exe), err)
		}
		var rest []string
		if filepath.Base(ip) == "env" {
			// "/usr/bin/env [-S] prog [args]": env execs prog found on PATH.
			words := iargs
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				words = words[1:]
			}
			if len(words) == 0 {
				return fmt.Errorf("%s: '#!%s' names no program", filepath.Base(exe), interp)
			}
			b.add(ip, ClassExec, "env named in a '#!' line")
			if err := b.addELF(ip); err != nil {
				return err
			}
			prog, err := b.lookPath(words[0])
			if err != nil {
				return fmt.Errorf("%s: '#!%s %s': %w", filepath.Base(exe), interp, words[0], err)
			}
			rest = append(append(rest, words[1:]...), exe)
			return b.addProgram(prog, append(rest, args...), depth+1)
		}
		rest = append(append(rest, iargs...), exe)
		return b.addProgram(ip, append(rest, args...), depth+1)
	}
	if err := b.addELF(exe); err != nil {
		return err
	}
	if isNode(exe) {
		if script := firstScriptArg(args, b.opt.Dir); script != "" {
			return b.addNodeScript(script)
		}
	}
	if ver, ok := pythonVersion(exe); ok {
		b.addPython(exe, ver)
		if script := firstScriptArg(args, b.opt.Dir); script != "" {
			b.add(filepath.Dir(script), ClassReadTree, "directory of the server script (python's sys.path[0])")
		}
	}
	return nil
}

// pythonVersion recognises a CPython executable named pythonX.Y.
func pythonVersion(exe string) (string, bool) {
	v, ok := strings.CutPrefix(filepath.Base(exe), "python")
	if !ok || v == "" || strings.Trim(v, "0123456789.") != "" || !strings.Contains(v, ".") {
		return "", false
	}
	return v, true
}

// addPython grants CPython's standard library and site packages, found the
// way CPython finds them: PREFIX/lib/pythonX.Y with PREFIX the parent of
// the executable's directory, plus Debian's dist-packages directories.
func (b *builder) addPython(exe, ver string) {
	prefix := filepath.Dir(filepath.Dir(exe))
	for _, d := range []string{
		filepath.Join(prefix, "lib", "python"+ver),
		filepath.Join(prefix, "lib", "python3", "dist-packages"),
		filepath.Join(prefix, "local", "lib", "python"+ver, "dist-packages"),
		filepath.Join("/usr/local/lib", "python"+ver, "dist-packages"),
	} {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			if st, err := os.Stat(real); err == nil && st.IsDir() {
				b.add(real, ClassReadTree, "python standard library and site packages")
			}
		}
	}
}

func (b *builder) addELF(exe string) error {
	deps, err := ResolveELF(exe, b.opt.Search)
	if errors.Is(err, ErrNotELF) {
		return fmt.Errorf("%s is neither an ELF executable nor a '#!' script", filepath.Base(exe))
	}
	if err != nil {
		return err
	}
	if deps.Interp != "" {
		b.add(deps.Interp, ClassExec, "ELF program interpreter")
	}
	for _, l := range deps.Libs {
		b.add(l, ClassRead, "shared library (DT_NEEDED)")
	}
	return nil
}

// readShebang reads the "#!" line of exe, if it has one. Like the kernel it
// splits it into the interpreter and one optional argument string; for env
// the argument string is split on blanks (env -S semantics).
func readShebang(exe string) (interp string, args []string, ok bool, err error) {
	f, err := os.Open(exe)
	if err != nil {
		return "", nil, false, fmt.Errorf("read server executable: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 512)
	head, _ := r.Peek(2)
	if string(head) != "#!" {
		return "", nil, false, nil
	}
	line, err := r.ReadSlice('\n')
	if err != nil && !errors.Is(err, bufio.ErrBufferFull) && len(line) == 0 {
		return "", nil, false, fmt.Errorf("read '#!' line of %s: %w", filepath.Base(exe), err)
	}
	return parseShebang(string(line))
}

// parseShebang is the pure part of readShebang.
func parseShebang(line string) (interp string, args []string, ok bool, err error) {
	rest, found := strings.CutPrefix(line, "#!")
	if !found {
		return "", nil, false, nil
	}
	if i := strings.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	} else if len(line) >= 256 {
		return "", nil, false, errors.New("'#!' line longer than 256 bytes")
	}
	fields := strings.Fields(strings.TrimSpace(rest))
	if len(fields) == 0 {
		return "", nil, false, errors.New("empty '#!' line")
	}
	if !filepath.IsAbs(fields[0]) {
		return "", nil, false, fmt.Errorf("'#!' interpreter %q is not an absolute path", fields[0])
	}
	return fields[0], fields[1:], true, nil
}

func isNode(exe string) bool {
	b := filepath.Base(exe)
	return b == "node" || b == "nodejs" || strings.HasPrefix(b, "node") && strings.Trim(b[4:], "0123456789.") == ""
}

// firstScriptArg returns the script node will run: the first argument that
// is not an option, when it names a regular file. Node options that take a
// separate value are skipped with it.
func firstScriptArg(args []string, dir string) string {
	withValue := map[string]bool{"-r": true, "--require": true, "--import": true, "--loader": true, "--experimental-loader": true, "-C": true, "--conditions": true, "--input-type": true, "--title": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				a = args[i+1]
			} else {
				return ""
			}
		} else if strings.HasPrefix(a, "-") {
			if a == "-e" || a == "--eval" || a == "-p" || a == "--print" {
				return "" // inline code, no script file
			}
			if withValue[a] {
				i++
			}
			continue
		}
		p := a
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
	return ""
}

// addNodeScript grants what node reads to run script:
//   - script inside a node_modules tree: the outermost node_modules directory
//     (installed packages only, hoisted dependencies included);
//   - otherwise the package root (nearest ancestor with package.json): its
//     package.json, its node_modules, and the directory holding the script.
//
// If no package.json is found, only the script's directory is granted.
func (b *builder) addNodeScript(script string) error {
	parts := strings.Split(script, "/")
	if i := slices.Index(parts, "node_modules"); i > 0 {
		nm := strings.Join(parts[:i+1], "/")
		b.add(nm, ClassReadTree, "node_modules tree of the server script")
		return nil
	}
	dir := filepath.Dir(script)
	b.add(dir, ClassReadTree, "directory of the server script")
	home, _ := os.UserHomeDir()
	for d := dir; d != "/" && d != home; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, "package.json")); err == nil && st.Mode().IsRegular() {
			b.add(filepath.Join(d, "package.json"), ClassRead, "package.json of the server script")
			if st, err := os.Stat(filepath.Join(d, "node_modules")); err == nil && st.IsDir() {
				b.add(filepath.Join(d, "node_modules"), ClassReadTree, "node_modules of the server package")
			}
			break
		}
	}
	return nil
}
