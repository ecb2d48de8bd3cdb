package runtimeprofile

import (
	"path/filepath"
	"strings"
)

// Other interpreters than node, CPython and the POSIX shells read the
// server's code from an operand of their command line (perl x.pl, ruby
// x.rb, awk -f x, php x.php, lua x.lua, Rscript x.R, tclsh x.tcl) and from
// files and directories their options name (ruby -r ./hook.rb, perl -I
// lib, php -c php.ini, gawk -i lib.awk). Each such file is the server's
// code: granted for reading and refused in a write scope, as a node or
// python script; each such directory (and the working directory where the
// interpreter looks for code there by default) is a code directory,
// refused when writable.

// interpCode is what an interpreter's command line names as code.
type interpCode struct {
	files []string // the script and other code files (resolved, regular files)
	dirs  []Entry  // directories code is loaded from (Profile.CodeDirs)
}

// interpFamily names the interpreter family of an executable's base name
// ("perl5.36.0" → perl, "gawk" → awk, "lua5.4" → lua), or "".
func interpFamily(name string) string {
	base := strings.TrimRight(name, "0123456789.")
	switch base {
	case "perl":
		return "perl"
	case "ruby":
		return "ruby"
	case "php", "php-cli", "php-cgi":
		return "php"
	case "lua", "luajit":
		return "lua"
	case "Rscript":
		return "Rscript"
	case "awk", "gawk", "mawk", "nawk", "original-awk", "onetrue-awk", "bwk-awk", "goawk":
		return "awk"
	case "tclsh", "wish", "jimsh":
		return "tcl"
	}
	return ""
}

// otherInterpreterCode returns the code an interpreter of another family
// reads, found from its command line args run in dir. ok is false for an
// executable of no known family.
func otherInterpreterCode(invoked, exe string, args []string, dir string) (c interpCode, family string) {
	family = interpFamily(filepath.Base(exe))
	if family == "" {
		family = interpFamily(filepath.Base(invoked))
	}
	p := &interpParse{dir: dir}
	switch family {
	case "perl":
		p.perl(args)
	case "ruby":
		p.ruby(args)
	case "php":
		p.php(args)
	case "lua":
		p.lua(args)
	case "Rscript":
		p.rscript(args)
	case "awk":
		if filepath.Base(exe) == "gawk" || filepath.Base(invoked) == "gawk" {
			// gawk's AWKPATH starts with ".": -f, -i and @include
			// names are looked for in the working directory first.
			p.codeDir(".", "the working directory, gawk's AWKPATH .")
		}
		p.awk(args)
	case "tcl":
		p.tcl(args)
	default:
		return interpCode{}, ""
	}
	return p.c, family
}

type interpParse struct {
	dir string
	c   interpCode
}

// file records a code file named on the command line, when it is a regular
// file (a name that is no file is the interpreter's error at start).
func (p *interpParse) file(name string) {
	if name == "" || name == "-" {
		return
	}
	if f := regularFile(name, p.dir); f != "" {
		p.c.files = append(p.c.files, f)
	}
}

// codeDir records a directory code is loaded from.
func (p *interpParse) codeDir(name, reason string) {
	if name == "" {
		return
	}
	d := name
	if !filepath.IsAbs(d) {
		d = filepath.Join(p.dir, d)
	}
	if real, err := filepath.EvalSymlinks(d); err == nil {
		d = real
	}
	p.c.dirs = append(p.c.dirs, Entry{Path: filepath.Clean(d), Class: ClassReadTree, Reason: reason})
}

// operand reports whether args[i] ends the options: "--" (the next
// argument, if any, is the program file), "-" (the program comes on
// stdin), or the first argument that is not an option (the program file).
// A program file is the server's code.
func (p *interpParse) operand(args []string, i int) bool {
	switch a := args[i]; {
	case a == "--":
		if i+1 < len(args) {
			p.file(args[i+1])
		}
		return true
	case a == "-":
		return true
	case !strings.HasPrefix(a, "-"):
		p.file(a)
		return true
	}
	return false
}

// value returns the value of a short option at a[j:] (attached) or the next
// argument, and the index of the last argument used.
func value(args []string, i int, attached string) (string, int) {
	if attached != "" {
		return attached, i
	}
	if i+1 < len(args) {
		return args[i+1], i + 1
	}
	return "", i
}

// perl [switches] [--] [programfile] [args]: -e/-E give the program inline;
// -I dir (attached or separate) adds a directory of modules; -M, -m, -x,
// -i, -d, -D, -C, -V take the rest of their argument; -0 and -l digits.
func (p *interpParse) perl(args []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if p.operand(args, i) {
			return
		}
	bundle:
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'e', 'E':
				return // inline program: no program file
			case 'I':
				var v string
				v, i = value(args, i, a[j+1:])
				p.codeDir(v, "a directory of modules perl -I names")
				break bundle
			case 'M', 'm', 'x', 'i', 'd', 'D', 'C', 'V':
				break bundle // the rest is its value
			case '0':
				for j+1 < len(a) && strings.IndexByte("0123456789abcdefABCDEFxX", a[j+1]) >= 0 {
					j++
				}
			case 'l':
				for j+1 < len(a) && a[j+1] >= '0' && a[j+1] <= '7' {
					j++
				}
			}
		}
	}
}

// ruby [switches] [--] [programfile] [args]: -e inline; -I dir and -r lib
// (attached or separate: a library given as a path is code), -C dir (the
// program is found from there), -E, -X take a value; -F, -K, -T, -W, -x,
// -0 the rest of their argument. Long options with a separate value are
// skipped with it.
func (p *interpParse) ruby(args []string) {
	longValue := map[string]bool{"--encoding": true, "--external-encoding": true, "--internal-encoding": true,
		"--enable": true, "--disable": true, "--dump": true, "--backtrace-limit": true, "--crash-report": true, "--parser": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if p.operand(args, i) {
			return
		}
		if strings.HasPrefix(a, "--") {
			if !strings.Contains(a, "=") && longValue[a] {
				i++
			}
			continue
		}
	bundle:
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'e':
				return
			case 'I', 'r', 'C', 'X', 'E':
				var v string
				c := a[j]
				v, i = value(args, i, a[j+1:])
				switch c {
				case 'I':
					p.codeDir(v, "a directory of libraries ruby -I names")
				case 'r':
					if strings.Contains(v, "/") {
						p.file(v)
						if !strings.HasSuffix(v, ".rb") {
							p.file(v + ".rb")
						}
					}
				case 'C', 'X':
					if v != "" {
						if filepath.IsAbs(v) {
							p.dir = v
						} else {
							p.dir = filepath.Join(p.dir, v)
						}
					}
				}
				break bundle
			case 'F', 'K', 'T', 'W', 'x':
				break bundle
			case '0':
				for j+1 < len(a) && a[j+1] >= '0' && a[j+1] <= '7' {
					j++
				}
			}
		}
	}
}

// php [options] [-f] file [--] [args]: -f file; -r, -B, -R, -E give code
// inline (no file unless -f or -F names one); -F file runs a file per
// input line; -c names php.ini (or a directory holding it: its
// auto_prepend_file and extensions decide what runs), -z a Zend extension,
// -d auto_prepend_file=/auto_append_file= a file run around every script;
// -S serves the directory of -t (the working directory without it) as
// code; the working directory is a code directory (include_path "."). Options
// take their value attached or separate.
func (p *interpParse) php(args []string) {
	// include_path starts with ".": a relative include is looked for in
	// the working directory first.
	p.codeDir(".", "the working directory, php's include_path .")
	withValue := "cdzfrBRFESt"
	inline, server, docroot := false, false, ""
	var script string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--rf", "--rc", "--re", "--rz", "--ri", "--php-ini", "--define", "--zend-extension", "--file", "--run", "--process-begin", "--process-code", "--process-file", "--process-end":
				i++
			}
			continue
		}
		if a == "-" || !strings.HasPrefix(a, "-") || len(a) < 2 {
			if script == "" && !inline {
				script = a
			}
			break
		}
		c := a[1]
		if strings.IndexByte(withValue, c) < 0 {
			continue
		}
		var v string
		v, i = value(args, i, a[2:])
		switch c {
		case 'f', 'F':
			p.file(v)
			if c == 'f' {
				script = v
			}
			inline = inline || c == 'F'
		case 'c':
			p.file(v)
			p.file(filepath.Join(v, "php.ini"))
		case 'z':
			p.file(v)
		case 'd':
			k, val, _ := strings.Cut(v, "=")
			if k = strings.TrimSpace(k); k == "auto_prepend_file" || k == "auto_append_file" {
				p.file(strings.Trim(strings.TrimSpace(val), `"'`))
			}
		case 'r', 'B', 'R', 'E':
			inline = true
		case 'S':
			server = true
		case 't':
			docroot = v
		}
	}
	if script != "" && script != "-" {
		p.file(script)
	}
	if server {
		if docroot == "" {
			docroot = "."
		}
		p.codeDir(docroot, "the document root php -S serves and runs")
	}
}

// lua [options] [script [args]]: -e code does not end the options (a
// script may follow); -l and -e take a value, attached or separate. Lua's
// default package.path searches the working directory first (./?.lua), so
// it is a code directory.
func (p *interpParse) lua(args []string) {
	p.codeDir(".", "the working directory, lua's package.path ./?.lua")
	for i := 0; i < len(args); i++ {
		if p.operand(args, i) {
			return
		}
		if a := args[i]; a == "-e" || a == "-l" {
			i++
		}
	}
}

// Rscript [options] file [args]: -e expr gives the code inline; every other
// option is one argument (--name or --name=value). R reads .Rprofile from
// the working directory at start unless --vanilla or --no-init-file.
func (p *interpParse) rscript(args []string) {
	initFile := true
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--vanilla" || a == "--no-init-file":
			initFile = false
		case a == "-e":
			if initFile {
				p.codeDir(".", "the working directory, where R reads .Rprofile")
			}
			return
		case strings.HasPrefix(a, "-"):
		default:
			p.file(a)
			if initFile {
				p.codeDir(".", "the working directory, where R reads .Rprofile")
			}
			return
		}
	}
}

// awk [-F fs] [-v var=value] [-f progfile ...] ['program'] [file ...]:
// every -f (gawk's --file, -i/--include, -E/--exec, mawk's -W exec) names
// a program file, gawk's -l/--load an extension; without one, the first
// operand is the program's text.
func (p *interpParse) awk(args []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			return
		}
		if strings.HasPrefix(a, "--") {
			name, v, has := strings.Cut(a, "=")
			switch name {
			case "--file", "--include", "--exec", "--load":
				if !has {
					v, i = value(args, i, "")
				}
				p.file(v)
				if name == "--include" || name == "--load" {
					p.file(v + map[string]string{"--include": ".awk", "--load": ".so"}[name])
				}
			case "--field-separator", "--assign", "--source":
				if !has {
					i++
				}
			}
			continue
		}
		switch a[1] {
		case 'f', 'i', 'E', 'l':
			var v string
			v, i = value(args, i, a[2:])
			p.file(v)
			switch a[1] {
			case 'i':
				p.file(v + ".awk")
			case 'l':
				p.file(v + ".so")
			}
		case 'W':
			var v string
			v, i = value(args, i, a[2:])
			if name, f, ok := strings.Cut(v, "="); ok && (name == "exec" || name == "e") {
				p.file(f)
			} else if (v == "exec" || v == "e") && i+1 < len(args) {
				i++
				p.file(args[i])
			}
		case 'F', 'v', 'e':
			_, i = value(args, i, a[2:])
		}
	}
}

// tclsh ?-encoding name? ?fileName arg ...?: the first argument, unless it
// is an option (then the shell is interactive).
func (p *interpParse) tcl(args []string) {
	if len(args) >= 2 && args[0] == "-encoding" {
		args = args[2:]
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		p.file(args[0])
	}
}
