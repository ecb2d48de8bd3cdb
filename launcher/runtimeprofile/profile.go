// Package runtimeprofile works out what an unmodified server needs to start
// and run under the fence, read-only: its executable and interpreters
// (following "#!" lines and "/usr/bin/env node"), the ELF program
// interpreter and the shared libraries the loader will map, a node script's
// installed packages, a CPython's standard library and virtual environment,
// the run's own /proc entry, and the host files the C library and the Node,
// Python and Go runtimes read at start-up and during calls (docs/launcher.md
// lists them, with what each runtime was measured to read).
//
// It never grants /, /etc, /proc, /sys, a home directory or any directory
// that contains the approved base: every entry is a single file, or a
// directory of runtime code or public host data.
package runtimeprofile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Class is how an entry may be used; the ruleset turns it into Landlock rights.
type Class string

const (
	ClassExec     Class = "exec"      // a file that is execve'd (executable, interpreter, ELF loader)
	ClassRead     Class = "read"      // a file that is only read (library, host config file)
	ClassReadTree Class = "read-tree" // a directory tree of code or data that is read (node packages, locales)
	ClassExecTree Class = "exec-tree" // a directory tree of programs a helper runs (git's git-core)
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
	Exe string `json:"exe"`
	// Argv, when set, replaces the command line the server is exec'd with:
	// a launcher (npx, uvx) that would download or resolve its package at
	// start-up is replaced by the installed package it would run.
	Argv    []string `json:"argv,omitempty"`
	Entries []Entry  `json:"entries"`
	// Env are variables the runtime needs under the fence (NAME=VALUE),
	// set unless the operator sets them: CPython's
	// PYTHONDONTWRITEBYTECODE=1, since its bytecode caches beside the
	// read-only packages would be denied writes.
	Env []string `json:"env,omitempty"`
	// Kind names how the server is launched (node, npx, python, venv, uv,
	// elf, shell), for messages and the compatibility table.
	Kind string `json:"kind"`
	// Names are paths the server's start-up opens literally (argv[0] and
	// interpreters as found on PATH or in '#!' lines, PT_INTERP, libraries
	// in their search directories) that differ from the resolved entries: a
	// minimal root (the launcher's mount namespace) reproduces the symlinks
	// along them. They grant nothing by themselves.
	Names []string `json:"names,omitempty"`
	// CodeDirs are directories the runtime loads code from that the
	// profile does not grant (CPython's working directory, sys.path[0]
	// with -m or -c): reachable only when a scope path holds them, and
	// refused by the ruleset when a writable one does.
	CodeDirs []Entry `json:"code_dirs,omitempty"`
	// CodeFiles are the server's own code files (its script, node's
	// preloaded modules; not the interpreters, whose other names are the
	// distribution's, nor a native program, which the kernel keeps from
	// being written while it runs: ETXTBSY): with a second name (a hard
	// link) one may lie in a writable path, which the ruleset refuses.
	CodeFiles []string `json:"code_files,omitempty"`
}

// Options are the inputs besides the command line.
type Options struct {
	PATH   string    // the PATH the server gets; used to find argv[0] and "env" targets
	Dir    string    // working directory for relative paths in argv
	Search LibSearch // loader search path; DefaultLibSearch() when empty
	// Network is true when the scope grants TCP ports: name resolution
	// (resolv.conf, hosts, nsswitch.conf, the NSS modules, gai.conf) and
	// the CA certificates are added.
	Network bool
	// Exec names helper programs the server spawns (--allow-exec): each is
	// looked up on PATH and granted with what it needs to run.
	Exec []string
	// Home is the home directory of the user the launcher runs as, where
	// npm and uv keep the packages npx and uvx run; default os.UserHomeDir.
	Home string
	// Getenv reads the launcher's environment (npm_config_cache, UV_TOOL_DIR,
	// XDG_DATA_HOME); default os.Getenv.
	Getenv func(string) string
	// Host is where the host's files are read from; DefaultHost when zero.
	Host Host
	// NativeCache is a directory of this user (0700) where the walks of
	// package trees for native code are cached, each result used again
	// only while nothing it depends on changed (nativecache.go); empty:
	// every launch walks.
	NativeCache string
	now         func() time.Time // for tests; default time.Now
}

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
	if opt.Getenv == nil {
		opt.Getenv = os.Getenv
	}
	if opt.Home == "" {
		opt.Home, _ = os.UserHomeDir()
	}
	if opt.Host.Cgroup == "" {
		opt.Host = DefaultHost
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
	invoked, exe, err := b.lookPath(argv[0])
	if err != nil && !isPackageLauncher(argv[0]) {
		return nil, err
	}
	p := &Profile{Exe: exe}
	// npx and uvx fetch their package at start-up; run the installed one.
	if rewritten, kind, err := b.launcherPackage(argv, exe); err != nil {
		return nil, err
	} else if rewritten != nil {
		p.Argv, p.Kind = rewritten, kind
		if invoked, exe, err = b.lookPath(rewritten[0]); err != nil {
			return nil, err
		}
		p.Exe = exe
		argv = rewritten
	}
	if err := b.addProgram(invoked, exe, argv[1:], 0); err != nil {
		return nil, err
	}
	for _, name := range opt.Exec {
		if err := b.addHelper(name); err != nil {
			return nil, err
		}
	}
	if err := b.addHost(); err != nil {
		return nil, err
	}
	if p.Kind == "" {
		p.Kind = b.kind
	}
	p.Env = b.env
	p.Entries = b.entries
	p.Names = b.names
	p.CodeDirs = b.codeDirs
	p.CodeFiles = b.codeFiles
	return p, nil
}

type builder struct {
	opt       Options
	entries   []Entry
	seen      map[string]int  // path → index in entries
	kind      string          // how the server is launched (Kind*)
	helpers   map[string]bool // helper programs granted
	env       []string        // Profile.Env
	names     []string        // Profile.Names
	codeDirs  []Entry         // Profile.CodeDirs
	codeFiles []string        // Profile.CodeFiles
}

// name records a literal path that resolved to another.
func (b *builder) name(literal string) {
	if !slices.Contains(b.names, literal) {
		b.names = append(b.names, literal)
	}
}

// Launcher kinds, from the most specific.
const (
	KindNPX    = "npx"    // npx PKG, run from the npm cache or a global install
	KindUV     = "uv"     // uvx / uv tool run PKG, run from its uv tool environment
	KindVenv   = "venv"   // a Python virtual environment's interpreter or console script
	KindPython = "python" // a CPython
	KindNode   = "node"   // node and a script
	KindShell  = "shell"  // a "#!" script of another interpreter
	KindELF    = "elf"    // an ELF executable (Go, C, Rust, ...)
)

var kindRank = map[string]int{KindELF: 1, KindShell: 2, KindNode: 3, KindPython: 3, KindVenv: 4, KindUV: 5, KindNPX: 5}

// setKind records how the server is launched, keeping the most specific
// kind seen along the exec chain (a venv beats the python it points to).
func (b *builder) setKind(k string) {
	if kindRank[k] > kindRank[b.kind] {
		b.kind = k
	}
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
	case ClassExec, ClassExecTree:
		return 3
	case ClassReadTree:
		return 2
	case ClassDevice:
		return 2
	default:
		return 1
	}
}

// lookPath finds name like execvp does on the server's PATH. It returns the
// path as found (what the program sees as its own name: a venv's
// bin/python is a symlink to the base interpreter, and CPython finds its
// pyvenv.cfg from that name) and the path with every symlink resolved.
func (b *builder) lookPath(name string) (invoked, real string, err error) {
	var cand []string
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(b.opt.Dir, p)
		}
		cand = []string{filepath.Clean(p)}
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
		if c != real {
			b.name(c)
		}
		return c, real, nil
	}
	if strings.Contains(name, "/") {
		return "", "", fmt.Errorf("server executable %s does not exist or is not executable", name)
	}
	return "", "", fmt.Errorf("server executable %q not found on PATH (%s); give an absolute path", name, b.opt.PATH)
}

// addProgram adds exe (found as invoked, resolved to exe) and what it needs
// to run args.
func (b *builder) addProgram(invoked, exe string, args []string, depth int) error {
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
		b.code(exe)
		iInvoked, ip, err := b.lookPath(interp)
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
			pInvoked, prog, err := b.lookPath(words[0])
			if err != nil {
				return fmt.Errorf("%s: '#!%s %s': %w", filepath.Base(exe), interp, words[0], err)
			}
			if err := b.scriptKind(exe, prog); err != nil {
				return err
			}
			rest = append(append(rest, words[1:]...), exe)
			return b.addProgram(pInvoked, prog, append(rest, args...), depth+1)
		}
		if err := b.scriptKind(exe, ip); err != nil {
			return err
		}
		rest = append(append(rest, iargs...), exe)
		return b.addProgram(iInvoked, ip, append(rest, args...), depth+1)
	}
	if err := b.addELF(exe); err != nil {
		return err
	}
	b.setKind(KindELF)
	if isNode(exe) {
		b.setKind(KindNode)
		files, byName := nodePreloadsAndNames(args, b.opt.Dir)
		for _, m := range files {
			b.add(m, ClassRead, "module node preloads or file deciding what it runs (-r, --import, --loader, --env-file, --snapshot-blob, --openssl-config)")
			b.code(m)
		}
		if byName {
			b.nodeNameDir()
		}
		if script, mains := nodeScriptArg(args, b.opt.Dir); script != "" {
			for _, m := range mains {
				b.add(m, ClassRead, "package.json whose main is the server's entry point (node DIR)")
				b.code(m)
			}
			return b.addNodeScript(script)
		}
	}
	if ver, ok := pythonVersion(exe); ok {
		return b.addPython(invoked, exe, ver, args)
	}
	if c, family := otherInterpreterCode(invoked, exe, args, b.opt.Dir); family != "" {
		// perl x.pl, ruby x.rb, awk -f x, php x.php, lua x.lua, Rscript
		// x.R, tclsh x.tcl: the operand (and the files and directories
		// the options name) are the server's code, as a node script.
		for _, f := range c.files {
			b.add(f, ClassRead, family+" code the server runs (its script or a file its options name)")
			b.code(f)
		}
		for _, d := range c.dirs {
			if !slices.ContainsFunc(b.codeDirs, func(e Entry) bool { return e.Path == d.Path }) {
				b.codeDirs = append(b.codeDirs, d)
			}
		}
		if len(c.files) > 0 {
			b.setKind(KindShell)
		}
		return nil
	}
	if depth == 0 && (isShell(exe) || isShell(invoked)) {
		// "sh script", "bash script": the shell reads the script as a
		// "#!" line would make it (at depth > 0 the script is exe's
		// own, already added). It is the server's code: granted for
		// reading, which also puts it under the ruleset's refusal of
		// runtime paths in a write scope, and its helpers as for a
		// "#!" script.
		if script := shellScriptArg(args, b.opt.Dir, b.opt.PATH); script != "" {
			b.add(script, ClassRead, "shell script the server runs")
			b.code(script)
			b.setKind(KindShell)
			return b.addScriptHelpers(script)
		}
	}
	return nil
}

// code records a file of the server's own code (Profile.CodeFiles).
func (b *builder) code(p string) {
	if !slices.Contains(b.codeFiles, p) {
		b.codeFiles = append(b.codeFiles, p)
	}
}

// shells are the POSIX-style shells whose first operand is a script file.
var shells = map[string]bool{"sh": true, "dash": true, "bash": true, "ash": true, "zsh": true, "ksh": true,
	"ksh93": true, "mksh": true, "lksh": true, "pdksh": true, "yash": true, "posh": true, "rbash": true}

func isShell(exe string) bool { return shells[filepath.Base(exe)] }

// shellScriptArg returns the script a POSIX-style shell runs: its first
// operand, unless -c (the command is inline) or -s (commands from stdin)
// is among the options before it. Options taking a value (-o, +o, -O, +O,
// bash's --rcfile and --init-file) are skipped with it. Like bash, an
// operand without a '/' that is not in dir is looked up on PATH.
func shellScriptArg(args []string, dir, path string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			if i+1 < len(args) {
				return shellScriptFile(args[i+1], dir, path)
			}
			return ""
		case a == "--rcfile" || a == "--init-file":
			i++
		case strings.HasPrefix(a, "--"):
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+"):
			opts := a[1:]
			if a[0] == '-' && strings.ContainsAny(opts, "cs") {
				return ""
			}
			if strings.ContainsAny(opts, "oO") {
				i++
			}
		default:
			return shellScriptFile(a, dir, path)
		}
	}
	return ""
}

func shellScriptFile(name, dir, path string) string {
	if f := regularFile(name, dir); f != "" || strings.Contains(name, "/") {
		return f
	}
	for _, d := range filepath.SplitList(path) {
		if d != "" && filepath.IsAbs(d) {
			if f := regularFile(filepath.Join(d, name), "/"); f != "" {
				return f
			}
		}
	}
	return ""
}

// scriptKind marks a "#!" script run by an interpreter that is neither
// node nor CPython as a shell script, and grants the helper programs it
// names (see addScriptHelpers).
func (b *builder) scriptKind(script, interp string) error {
	if isNode(interp) {
		return nil
	}
	if _, ok := pythonVersion(interp); ok {
		return nil
	}
	b.setKind(KindShell)
	return b.addScriptHelpers(script)
}
func (b *builder) addELF(exe string) error {
	deps, err := b.cachedELF(exe)
	if errors.Is(err, ErrNotELF) {
		return fmt.Errorf("%s is neither an ELF executable nor a '#!' script", filepath.Base(exe))
	}
	if err != nil {
		return err
	}
	if deps.Interp != "" {
		b.add(deps.Interp, ClassExec, "ELF program interpreter")
	}
	for _, n := range deps.Names {
		b.name(n)
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
	script, _ := nodeScriptArg(args, dir)
	return script
}

// nodeScriptArg is firstScriptArg, and the package.json files whose
// "main" decided which file that is (node DIR): each decides what node
// runs, so each is the server's code as the script is (refused in a write
// scope: a server that could rewrite one would choose its next run's
// entry point).
func nodeScriptArg(args []string, dir string) (string, []string) {
	withValue := map[string]bool{"-r": true, "--require": true, "--import": true, "--loader": true, "--experimental-loader": true, "-C": true, "--conditions": true, "--input-type": true, "--title": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				a = args[i+1]
			} else {
				return "", nil
			}
		} else if strings.HasPrefix(a, "-") {
			if a == "-e" || a == "--eval" || a == "-p" || a == "--print" {
				return "", nil // inline code, no script file
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
		var mains []string
		return nodeEntry(p, 0, &mains), mains
	}
	return "", nil
}

// nodeEntry resolves node's main entry p as its CommonJS loader does
// (Module._findPath): the file itself, then with .js, .json, .node; a
// directory's package.json "main" (resolved the same way), then its
// index.js, index.json, index.node. Symlinks are resolved (node's
// --preserve-symlinks-main is off by default). "" when nothing resolves:
// node then fails to start. Each package.json whose "main" decided the
// entry is appended to mains.
func nodeEntry(p string, depth int, mains *[]string) string {
	for _, ext := range []string{"", ".js", ".json", ".node"} {
		if f := regularFile(p+ext, "/"); f != "" {
			return f
		}
	}
	st, err := os.Stat(p)
	if err != nil || !st.IsDir() {
		return ""
	}
	if depth < 2 {
		if b, err := os.ReadFile(filepath.Join(p, "package.json")); err == nil && len(b) < 1<<20 {
			var pkg struct {
				Main string `json:"main"`
			}
			if json.Unmarshal(b, &pkg) == nil && pkg.Main != "" {
				main := pkg.Main // node: path.resolve(DIR, main)
				if !filepath.IsAbs(main) {
					main = filepath.Join(p, main)
				}
				if f := nodeEntry(main, depth+1, mains); f != "" {
					if pj := regularFile(filepath.Join(p, "package.json"), "/"); pj != "" {
						*mains = append(*mains, pj)
					}
					return f
				}
			}
		}
	}
	for _, name := range []string{"index.js", "index.json", "index.node"} {
		if f := regularFile(filepath.Join(p, name), "/"); f != "" {
			return f
		}
	}
	return ""
}

// nodePreloads returns the files node reads code from besides its script,
// named by options before it: the modules of -r/--require, --import,
// --loader and --experimental-loader given as paths (./x, ../x, /x,
// file:///x; a bare name is a package, found in the node_modules the
// script's package grants), and the files that decide what it runs:
// --env-file (whose NODE_OPTIONS node applies), --snapshot-blob,
// --openssl-config. Each is the server's code: granted for reading, and
// so refused in a write scope.
func nodePreloads(args []string, dir string) []string {
	files, _ := nodePreloadsAndNames(args, dir)
	return files
}

// nodePreloadsAndNames is nodePreloads, and whether a module is preloaded
// by a package name (-r NAME): node resolves that from the working
// directory's node_modules (and its parents'), which makes the working
// directory a code directory.
func nodePreloadsAndNames(args []string, dir string) (out []string, byName bool) {
	loaders := map[string]bool{"-r": true, "--require": true, "--import": true, "--loader": true, "--experimental-loader": true}
	// Files node reads that decide what runs: env files (NODE_OPTIONS),
	// a V8 start-up snapshot, an OpenSSL configuration (its engines and
	// providers are native code).
	envFiles := map[string]bool{"--env-file": true, "--env-file-if-exists": true, "--snapshot-blob": true, "--openssl-config": true}
	withValue := map[string]bool{"-C": true, "--conditions": true, "--input-type": true, "--title": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-e" || a == "--eval" || a == "-p" || a == "--print" {
			break
		}
		name, value, hasValue := strings.Cut(a, "=")
		if !loaders[name] && !envFiles[name] {
			if withValue[a] {
				i++
			}
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				break
			}
			i++
			value = args[i]
		}
		if loaders[name] {
			if rest, ok := strings.CutPrefix(value, "file://"); ok {
				value = rest
			} else if !strings.HasPrefix(value, "/") && !strings.HasPrefix(value, "./") && !strings.HasPrefix(value, "../") {
				byName = byName || value != "" && !strings.HasPrefix(value, "node:")
				continue // a package name
			}
		}
		if f := regularFile(value, dir); f != "" {
			out = append(out, f)
		}
	}
	return out, byName
}

// nodeNameDir is the code directory of a node started with a package
// preloaded by name: its working directory.
func (b *builder) nodeNameDir() {
	dir := b.opt.Dir
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if !slices.ContainsFunc(b.codeDirs, func(e Entry) bool { return e.Path == dir }) {
		b.codeDirs = append(b.codeDirs, Entry{Path: dir, Class: ClassReadTree, Reason: "the working directory, where node resolves a module preloaded by name (-r NAME) from node_modules"})
	}
}

// addNodeScript grants what node reads to run script:
//   - script inside a node_modules tree: the outermost node_modules directory
//     (installed packages only, hoisted dependencies included);
//   - otherwise the package root (nearest ancestor with package.json): its
//     package.json, its node_modules, and the directory holding the script.
//
// If no package.json is found, only the script's directory is granted.
func (b *builder) addNodeScript(script string) error {
	b.code(script)
	parts := strings.Split(script, "/")
	if i := slices.Index(parts, "node_modules"); i > 0 {
		nm := strings.Join(parts[:i+1], "/")
		b.add(nm, ClassReadTree, "node_modules tree of the server script")
		return b.addNativeCode(nm)
	}
	dir := filepath.Dir(script)
	b.add(dir, ClassReadTree, "directory of the server script")
	home, _ := os.UserHomeDir()
	for d := dir; d != "/" && d != home; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, "package.json")); err == nil && st.Mode().IsRegular() {
			b.add(filepath.Join(d, "package.json"), ClassRead, "package.json of the server script")
			if st, err := os.Stat(filepath.Join(d, "node_modules")); err == nil && st.IsDir() {
				b.add(filepath.Join(d, "node_modules"), ClassReadTree, "node_modules of the server package")
				return b.addNativeCode(filepath.Join(d, "node_modules"))
			}
			break
		}
	}
	return nil
}
