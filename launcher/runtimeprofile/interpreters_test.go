package runtimeprofile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOtherInterpreterCode: the script operand of perl, ruby, php, lua,
// Rscript, awk -f and tclsh, and the code files and directories their
// options name, are found (session 12: the runtime profile knew none of
// them, so such code in a write scope was not refused); inline programs
// name no file, and option values are not taken for the script.
func TestOtherInterpreterCode(t *testing.T) {
	dir := t.TempDir()
	files := []string{"x.pl", "x.rb", "hook.rb", "x.php", "php.ini", "pre.php", "x.lua", "x.R", "x.awk", "lib.awk", "x.tcl", "data.txt", "sub/y.rb"}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, filepath.Join(dir, n))
		}
		return out
	}
	cases := []struct {
		exe   string
		args  []string
		files []string
		dirs  []string
	}{
		{"perl", []string{"x.pl"}, in("x.pl"), nil},
		{"perl5.36.0", []string{"-w", "x.pl", "data.txt"}, in("x.pl"), nil},
		{"perl", []string{"-Ilib", "-MFile::Temp", "x.pl"}, in("x.pl"), in("lib")},
		{"perl", []string{"-I", "lib", "-T", "--", "x.pl"}, in("x.pl"), in("lib")},
		{"perl", []string{"-0777", "-wnl", "x.pl"}, in("x.pl"), nil},
		{"perl", []string{"-we", "print 1", "x.pl"}, nil, nil},
		{"perl", []string{"-E", "say 1"}, nil, nil},
		{"perl", []string{"-", "x.pl"}, nil, nil},
		{"ruby", []string{"x.rb"}, in("x.rb"), nil},
		{"ruby3.1", []string{"-w", "-r", "./hook.rb", "x.rb"}, in("hook.rb", "x.rb"), nil},
		{"ruby", []string{"-r./hook", "-Ilib", "x.rb"}, in("hook.rb", "x.rb"), in("lib")},
		{"ruby", []string{"-rjson", "--enable", "frozen-string-literal", "x.rb"}, in("x.rb"), nil},
		{"ruby", []string{"-C", "sub", "y.rb"}, in("sub/y.rb"), nil},
		{"ruby", []string{"-e", "puts 1", "x.rb"}, nil, nil},
		{"php", []string{"x.php"}, in("x.php"), []string{dir}},
		{"php8.2", []string{"-c", "php.ini", "-d", "auto_prepend_file=pre.php", "-f", "x.php"}, in("php.ini", "pre.php", "x.php"), []string{dir}},
		{"php", []string{"-n", "-dmemory_limit=1G", "x.php", "data.txt"}, in("x.php"), []string{dir}},
		{"php", []string{"-r", "echo 1;"}, nil, []string{dir}},
		{"php", []string{"-S", "127.0.0.1:8000", "-t", "lib"}, nil, append([]string{dir}, in("lib")...)},
		{"lua5.4", []string{"x.lua"}, in("x.lua"), []string{dir}},
		{"luajit", []string{"-e", "x=1", "-l", "mod", "x.lua"}, in("x.lua"), []string{dir}},
		{"Rscript", []string{"--no-save", "x.R"}, in("x.R"), []string{dir}},
		{"Rscript", []string{"--vanilla", "x.R"}, in("x.R"), nil},
		{"Rscript", []string{"-e", "1"}, nil, []string{dir}},
		{"awk", []string{"-f", "x.awk", "data.txt"}, in("x.awk"), nil},
		{"gawk", []string{"-v", "a=1", "-F:", "-fx.awk", "--include=lib", "data.txt"}, in("x.awk", "lib.awk"), []string{dir}},
		{"mawk", []string{"-W", "exec", "x.awk"}, in("x.awk"), nil},
		{"awk", []string{"{print}", "x.awk"}, nil, nil},
		{"gawk", []string{"-e", "BEGIN{}", "-E", "x.awk"}, in("x.awk"), []string{dir}},
		{"tclsh8.6", []string{"x.tcl", "a"}, in("x.tcl"), nil},
		{"tclsh", []string{"-encoding", "utf-8", "x.tcl"}, in("x.tcl"), nil},
		{"perl", []string{"missing.pl"}, nil, nil},
	}
	for _, c := range cases {
		got, family := otherInterpreterCode("", "/usr/bin/"+c.exe, c.args, dir)
		if family == "" {
			t.Errorf("%s: no family", c.exe)
			continue
		}
		var gotFiles, gotDirs []string
		for _, f := range got.files {
			if !slices.Contains(gotFiles, f) {
				gotFiles = append(gotFiles, f)
			}
		}
		for _, d := range got.dirs {
			gotDirs = append(gotDirs, d.Path)
		}
		if !slices.Equal(gotFiles, c.files) || !slices.Equal(gotDirs, c.dirs) {
			t.Errorf("%s %q: files %q dirs %q, want %q %q", c.exe, c.args, gotFiles, gotDirs, c.files, c.dirs)
		}
	}
	for _, exe := range []string{"node", "python3", "bash", "cat", "perldoc", "awkward"} {
		if _, family := otherInterpreterCode("", "/usr/bin/"+exe, []string{"x.pl"}, dir); family != "" {
			t.Errorf("%s taken for a %s interpreter", exe, family)
		}
	}
}

// TestResolveOtherInterpreter: perl's and awk's script operands are granted
// for reading and are the server's code files (the ruleset refuses them,
// and a second name of them, in a write scope).
func TestResolveOtherInterpreter(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"server.pl", "server.awk"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		argv []string
		file string
	}{
		{[]string{"perl", "server.pl"}, "server.pl"},
		{[]string{"awk", "-f", "server.awk"}, "server.awk"},
	} {
		if _, err := os.Stat("/usr/bin/" + c.argv[0]); err != nil {
			t.Fatalf("%s: %v (Debian's perl-base and mawk are essential packages)", c.argv[0], err)
		}
		p, err := Resolve(c.argv, Options{PATH: "/usr/bin:/bin", Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(dir, c.file)
		if !slices.Contains(p.CodeFiles, want) {
			t.Errorf("%q: code files %q lack %s", c.argv, p.CodeFiles, want)
		}
		if !slices.ContainsFunc(p.Entries, func(e Entry) bool { return e.Path == want && e.Class == ClassRead }) {
			t.Errorf("%q: %s not granted for reading", c.argv, want)
		}
	}
}

// TestEntryPointsAsTheRuntimeResolves (session 12): node's main entry is
// resolved as its CommonJS loader does (extension added, a directory's
// package.json main or index.js) and CPython's directory operand is its
// __main__.py; before, only an existing regular file was taken, so such
// code in a write scope was not refused.
func TestEntryPointsAsTheRuntimeResolves(t *testing.T) {
	dir := t.TempDir()
	for f, c := range map[string]string{"server.js": "1", "app/index.js": "1", "pkg/package.json": `{"main": "lib/main"}`, "pkg/lib/main.js": "1",
		"badpkg/package.json": `{"main": "missing.js"}`, "badpkg/index.js": "1", "py/__main__.py": "1", "empty/.keep": ""} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ arg, want string }{
		{"server.js", "server.js"}, {"server", "server.js"}, {"./app", "app/index.js"}, {"pkg", "pkg/lib/main.js"},
		{"badpkg", "badpkg/index.js"}, {"empty", ""}, {"nothing", ""},
	} {
		want := ""
		if c.want != "" {
			want = filepath.Join(dir, c.want)
		}
		if got := firstScriptArg([]string{c.arg}, dir); got != want {
			t.Errorf("node %s: %q, want %q", c.arg, got, want)
		}
	}
	// The package.json whose main decided the entry decides what node
	// runs (review, session 12): it is listed, and only then.
	for _, c := range []struct {
		arg   string
		mains []string
	}{{"pkg", []string{filepath.Join(dir, "pkg/package.json")}}, {"badpkg", nil}, {"./app", nil}, {"server", nil}} {
		if _, mains := nodeScriptArg([]string{c.arg}, dir); !slices.Equal(mains, c.mains) {
			t.Errorf("node %s: package.json files deciding the entry %q, want %q", c.arg, mains, c.mains)
		}
	}
	// An absolute main is node's path.resolve(DIR, main): that file (it
	// was joined below DIR, naming nothing).
	abs := filepath.Join(dir, "abspkg", "package.json")
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(abs, []byte(`{"main": "`+filepath.Join(dir, "server.js")+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, mains := nodeScriptArg([]string{"abspkg"}, dir); got != filepath.Join(dir, "server.js") || !slices.Equal(mains, []string{abs}) {
		t.Errorf("node abspkg (absolute main): %q, %q", got, mains)
	}
	if got := pythonScriptArg([]string{"py"}, dir); got != filepath.Join(dir, "py/__main__.py") {
		t.Errorf("python3 py: %q", got)
	}
	if got := pythonScriptArg([]string{"empty"}, dir); got != "" {
		t.Errorf("python3 empty: %q", got)
	}
}

// TestWrapperScriptCode (session 12): the literal operands a "#!" shell
// wrapper gives its interpreters, and the files it sources, are the
// server's code files; an operand with an expansion is not followed.
func TestWrapperScriptCode(t *testing.T) {
	dir := t.TempDir()
	for f, c := range map[string]string{"srv.js": "1", "lib.sh": "x=1", "lib2.sh": "y=1", "tool.pl": "1", "other.js": "1",
		"wrapper": "#!/bin/sh\n. ./lib.sh\nsource lib2.sh # comment\nperl tool.pl 2>/dev/null\nnode \"$DIR/other.js\"\nFOO=1 exec env NODE_ENV=x node srv.js \"$@\"\n"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Resolve([]string{filepath.Join(dir, "wrapper")}, Options{PATH: "/usr/bin:/bin", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"wrapper", "lib.sh", "lib2.sh", "tool.pl", "srv.js"} {
		if !slices.Contains(p.CodeFiles, filepath.Join(dir, f)) {
			t.Errorf("code files %q lack %s", p.CodeFiles, f)
		}
	}
	if slices.Contains(p.CodeFiles, filepath.Join(dir, "other.js")) {
		t.Errorf("an operand with an expansion taken for code: %q", p.CodeFiles)
	}
}

// TestNodePreloadByName (session 12): a module node preloads by package
// name is resolved from the working directory's node_modules, which makes
// the working directory a code directory; a path or a node: builtin does
// not.
func TestNodePreloadByName(t *testing.T) {
	for _, c := range []struct {
		args   []string
		byName bool
	}{
		{[]string{"-r", "dotenv/config", "s.js"}, true},
		{[]string{"--import=tsx", "s.js"}, true},
		{[]string{"--require", "./hook.js", "s.js"}, false},
		{[]string{"--import", "node:fs", "s.js"}, false},
		{[]string{"s.js", "-r", "x"}, false},
	} {
		if _, byName := nodePreloadsAndNames(c.args, t.TempDir()); byName != c.byName {
			t.Errorf("%q: by name %v, want %v", c.args, byName, c.byName)
		}
	}
}

// FuzzOtherInterpreterCode (review, session 12): any operands of each
// family's interpreter give absolute files and directories only, and only
// files that exist.
func FuzzOtherInterpreterCode(f *testing.F) {
	f.Add("perl", "-Ilib\x00-MFile::Temp\x00x.pl")
	f.Add("ruby", "-r./hook\x00-C\x00sub\x00y.rb")
	f.Add("php", "-c\x00php.ini\x00-d\x00auto_prepend_file=pre.php\x00-f\x00x.php")
	f.Add("gawk", "-v\x00a=1\x00-fx.awk\x00--include=lib\x00-E\x00x.awk")
	f.Add("mawk", "-W\x00exec\x00x.awk")
	f.Add("Rscript", "--vanilla\x00x.R")
	f.Add("tclsh", "-encoding\x00utf-8\x00x.tcl")
	f.Add("luajit", "-e\x00x=1\x00-l\x00mod\x00x.lua")
	dir := f.TempDir()
	for _, n := range []string{"x.pl", "hook.rb", "sub/y.rb", "php.ini", "pre.php", "x.php", "x.awk", "lib.awk", "x.R", "x.tcl", "x.lua"} {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, exe, args string) {
		c, family := otherInterpreterCode("", "/usr/bin/"+filepath.Base(exe), strings.Split(args, "\x00"), dir)
		if family == "" {
			return
		}
		for _, p := range c.files {
			if !filepath.IsAbs(p) {
				t.Fatalf("%s %q: file %q", exe, args, p)
			}
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				t.Fatalf("%s %q: file %q is no regular file (%v)", exe, args, p, err)
			}
		}
		for _, d := range c.dirs {
			if !filepath.IsAbs(d.Path) {
				t.Fatalf("%s %q: directory %q", exe, args, d.Path)
			}
		}
	})
}
