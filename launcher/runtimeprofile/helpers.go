package runtimeprofile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxHelpers bounds the helper programs one profile grants.
const maxHelpers = 64

// helperData are the files a helper program reads or runs besides its own
// executable and libraries.
var helperData = map[string][]hostEntry{
	"git": {
		{path: "/usr/lib/git-core", tree: true, reason: "git's own programs (git-remote-*, hooks runner)"},
		{path: "/usr/share/git-core", tree: true, reason: "git's templates"},
		{path: "/etc/gitconfig", reason: "git's system configuration"},
	},
}

// addHelper grants a helper program the server spawns (--allow-exec NAME):
// the program found on PATH, what it needs to run (interpreters, ELF
// loader, libraries) and its known data files. It runs inside the same
// fence, so what it may read and write is still the scope's.
func (b *builder) addHelper(name string) error {
	if name == "" || strings.ContainsRune(name, 0) {
		return fmt.Errorf("--allow-exec %q: name a program", name)
	}
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		return fmt.Errorf("--allow-exec %s: give a program name found on PATH or an absolute path", name)
	}
	invoked, exe, err := b.lookPath(name)
	if err != nil {
		return fmt.Errorf("--allow-exec %s: %w", name, err)
	}
	return b.addHelperProgram(invoked, exe)
}

func (b *builder) addHelperProgram(invoked, exe string) error {
	if b.helpers[exe] {
		return nil
	}
	if len(b.helpers) >= maxHelpers {
		return fmt.Errorf("more than %d helper programs", maxHelpers)
	}
	if b.helpers == nil {
		b.helpers = map[string]bool{}
	}
	b.helpers[exe] = true
	kind := b.kind
	if err := b.addProgram(invoked, exe, nil, 1); err != nil {
		return err
	}
	b.kind = kind // a helper does not change how the server is launched
	for _, h := range helperData[filepath.Base(exe)] {
		real, err := filepath.EvalSymlinks(h.path)
		if err != nil {
			continue
		}
		st, err := os.Stat(real)
		if err != nil {
			continue
		}
		if real != h.path {
			b.name(h.path)
		}
		switch {
		case h.tree && st.IsDir():
			c := ClassReadTree
			if strings.Contains(h.reason, "programs") {
				c = ClassExecTree
			}
			b.add(real, c, h.reason)
		case !h.tree && st.Mode().IsRegular():
			b.add(real, ClassRead, h.reason)
		}
	}
	return nil
}

// addScriptHelpers grants the programs a shell script runs: the first word
// of each simple command (after assignments, "exec", "command", "env" and
// the like) that is found on the server's PATH. Words with quotes,
// expansions or a '/' are not followed: the script's own relative helpers
// live in its directory, which is not granted execute.
func (b *builder) addScriptHelpers(script string) error {
	f, err := os.Open(script)
	if err != nil {
		return nil // exec will say
	}
	data, _ := io.ReadAll(io.LimitReader(f, 256<<10))
	f.Close()
	for _, name := range scriptCommands(string(data)) {
		invoked, exe, err := b.lookPath(name)
		if err != nil {
			continue // a function, an alias or a program that is not installed
		}
		if err := b.addHelperProgram(invoked, exe); err != nil {
			return fmt.Errorf("%s runs %s: %w", filepath.Base(script), name, err)
		}
	}
	for _, words := range scriptCodeWords(string(data)) {
		b.addScriptCode(words)
	}
	return nil
}

// addScriptCode adds the code one simple command of a shell script of the
// server names with literal words (words[0] the command): the file it
// sources (". FILE", "source FILE"), and the script and code options of
// an interpreter it runs (node, CPython, a shell, perl, awk, ...), found
// as for the server's own command line, relative to the server's working
// directory (the script's). Each is the server's code: granted for
// reading and refused in a write scope. An operand with an expansion or
// quotes is not known (Known limits).
func (b *builder) addScriptCode(words []string) {
	name, args, complete := words[0], words[1:], true
	for i, a := range args {
		if !literalWord(a) {
			args, complete = args[:i], false
			break
		}
	}
	code := func(f, reason string) {
		b.add(f, ClassRead, reason)
		b.code(f)
	}
	if name == "." || name == "source" {
		if len(args) > 0 {
			if f := shellScriptFile(args[0], b.opt.Dir, b.opt.PATH); f != "" {
				code(f, "file a shell script of the server sources")
			}
		}
		return
	}
	invoked, exe, err := b.lookPath(name)
	if err != nil {
		return
	}
	switch {
	case isNode(exe):
		files, byName := nodePreloadsAndNames(args, b.opt.Dir)
		for _, m := range files {
			code(m, "module node preloads or file deciding what it runs (-r, --import, --loader, --env-file, --snapshot-blob, --openssl-config)")
		}
		if byName {
			b.nodeNameDir()
		}
		if s, mains := nodeScriptArg(args, b.opt.Dir); s != "" {
			for _, m := range mains {
				code(m, "package.json whose main is the entry point of node a shell script of the server runs")
			}
			_ = b.addNodeScript(s) // its package's grants, as for the server's own script
		}
	case isPython(exe):
		if s := pythonScriptArg(args, b.opt.Dir); s != "" {
			b.add(filepath.Dir(s), ClassReadTree, "directory of a script a shell script of the server runs (python's sys.path[0])")
			b.code(s)
		} else if complete && !pythonSafePath(args) {
			dir := b.opt.Dir
			if real, err := filepath.EvalSymlinks(dir); err == nil {
				dir = real
			}
			if !slices.ContainsFunc(b.codeDirs, func(e Entry) bool { return e.Path == dir }) {
				b.codeDirs = append(b.codeDirs, Entry{Path: dir, Class: ClassReadTree, Reason: "the working directory, python's sys.path[0] with -m or -c"})
			}
		}
	case isShell(exe) || isShell(invoked):
		if s := shellScriptArg(args, b.opt.Dir, b.opt.PATH); s != "" {
			code(s, "shell script a shell script of the server runs")
		}
	default:
		if c, family := otherInterpreterCode(invoked, exe, args, b.opt.Dir); family != "" {
			for _, f := range c.files {
				code(f, family+" code a shell script of the server runs")
			}
			for _, d := range c.dirs {
				if !slices.ContainsFunc(b.codeDirs, func(e Entry) bool { return e.Path == d.Path }) {
					b.codeDirs = append(b.codeDirs, d)
				}
			}
		}
	}
}

func isPython(exe string) bool {
	_, ok := pythonVersion(exe)
	return ok
}

// literalWord: a shell word that means itself (no quotes, expansions,
// globs, redirections or escapes).
func literalWord(w string) bool {
	return w != "" && !strings.ContainsAny(w, "\"'`$<>*?[]{}~\\!")
}

// scriptCodeWords lists, for each simple command of a shell script that
// sources a file or runs a program, its words from the command on (after
// assignments and exec/env/nice/...), at most maxHelpers of them.
func scriptCodeWords(text string) [][]string {
	var out [][]string
	for _, line := range strings.Split(text, "\n") {
		line = stripShellComment(line)
		for _, seg := range splitCommands(line) {
			words := strings.Fields(seg)
			if len(words) >= 2 && (words[0] == "." || words[0] == "source") {
				out = append(out, words)
			} else if w := commandWords(words); len(w) > 1 {
				out = append(out, w)
			}
			if len(out) >= maxHelpers {
				return out
			}
		}
	}
	return out
}

var shellWords = map[string]bool{
	// keywords
	"if": true, "then": true, "else": true, "elif": true, "fi": true, "for": true, "while": true, "until": true,
	"do": true, "done": true, "case": true, "esac": true, "in": true, "function": true, "select": true, "time": true,
	"{": true, "}": true, "!": true, "[[": true, "]]": true, "((": true, "))": true,
	// builtins of sh and bash
	"export": true, "local": true, "readonly": true, "declare": true, "typeset": true, "set": true, "unset": true,
	"shift": true, "return": true, "exit": true, "break": true, "continue": true, "eval": true, "source": true,
	".": true, ":": true, "read": true, "echo": true, "printf": true, "test": true, "[": true, "true": true,
	"false": true, "cd": true, "pwd": true, "trap": true, "wait": true, "kill": true, "umask": true,
	"ulimit": true, "alias": true, "unalias": true, "type": true, "hash": true, "getopts": true, "let": true,
	"builtin": true, "mapfile": true, "readarray": true, "shopt": true, "jobs": true, "fg": true, "bg": true,
}

// prefixWords run the command that follows them.
var prefixWords = map[string]bool{"exec": true, "command": true, "env": true, "nohup": true, "nice": true, "timeout": true, "stdbuf": true}

// scriptCommands lists the program names a shell script runs, in order,
// each once (at most maxHelpers).
func scriptCommands(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = stripShellComment(line)
		for _, seg := range splitCommands(line) {
			name := commandWord(strings.Fields(seg))
			if name == "" || seen[name] {
				continue
			}
			seen[name] = true
			out = append(out, name)
			if len(out) >= maxHelpers {
				return out
			}
		}
	}
	return out
}

// stripShellComment drops a '#' comment that starts a word.
func stripShellComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t' || line[i-1] == ';') {
			return line[:i]
		}
	}
	return line
}

// splitCommands splits a line at the shell's command separators.
func splitCommands(line string) []string {
	return strings.FieldsFunc(line, func(r rune) bool {
		switch r {
		case ';', '|', '&', '(', ')', '`':
			return true
		}
		return false
	})
}

// commandWord is the program a simple command's words run, or "".
func commandWord(words []string) string {
	if w := commandWords(words); len(w) > 0 {
		return w[0]
	}
	return ""
}

// commandWords are a simple command's words from the program it runs on,
// or nil.
func commandWords(words []string) []string {
	for len(words) > 0 {
		w := words[0]
		switch {
		case shellWords[w]:
			if w == "then" || w == "else" || w == "do" || w == "!" || w == "time" || w == "{" || w == "if" || w == "while" || w == "until" || w == "elif" {
				words = words[1:]
				continue
			}
			return nil
		case prefixWords[w]:
			words = words[1:]
			for len(words) > 0 && (strings.HasPrefix(words[0], "-") || strings.Contains(words[0], "=") || isNumber(words[0])) {
				words = words[1:]
			}
		case strings.Contains(w, "=") && !strings.HasPrefix(w, "="):
			words = words[1:] // NAME=value before the command
		default:
			if isProgramName(w) {
				return words
			}
			return nil
		}
	}
	return nil
}

func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.smhd") == ""
}

// isProgramName accepts a bare program name: no quotes, expansions,
// redirections or '/'.
func isProgramName(w string) bool {
	if w == "" || len(w) > 64 {
		return false
	}
	for _, c := range w {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '+') {
			return false
		}
	}
	return w[0] != '-' && w[0] != '.'
}
