package runtimeprofile

import (
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestParseShebang(t *testing.T) {
	tests := []struct {
		line   string
		interp string
		args   []string
		ok     bool
		err    bool
	}{
		{line: "#!/bin/sh\n", interp: "/bin/sh", ok: true},
		{line: "#!/usr/bin/env node\n", interp: "/usr/bin/env", args: []string{"node"}, ok: true},
		{line: "#! /usr/bin/env -S node --experimental-x\n", interp: "/usr/bin/env", args: []string{"-S", "node", "--experimental-x"}, ok: true},
		{line: "#!node\n", err: true},
		{line: "#!\n", err: true},
		{line: "\x7fELF", ok: false},
		{line: "#!/bin/sh" + strings.Repeat("x", 300), err: true},
	}
	for _, tt := range tests {
		interp, args, ok, err := parseShebang(tt.line)
		if (err != nil) != tt.err || ok != tt.ok || interp != tt.interp || !reflect.DeepEqual(args, tt.args) && len(args)+len(tt.args) > 0 {
			t.Errorf("parseShebang(%q) = %q %q %v %v", tt.line, interp, args, ok, err)
		}
	}
}

func TestParseLdSoConf(t *testing.T) {
	text := "# comment\ninclude /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n  /opt/lib:/opt/lib2,/opt/lib3=libc5 # trailing\nhwcap 0 nosegneg\nrelative/dir\ninclude rel.conf\n"
	var includes []string
	got := parseLdSoConf(text, "/etc", func(p string) []string { includes = append(includes, p); return []string{"/inc" + p} })
	want := []string{"/inc/etc/ld.so.conf.d/*.conf", "/usr/local/lib", "/opt/lib", "/opt/lib2", "/opt/lib3", "/inc/etc/rel.conf"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(includes, []string{"/etc/ld.so.conf.d/*.conf", "/etc/rel.conf"}) {
		t.Errorf("includes %v", includes)
	}
}

func TestFirstScriptArg(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "s.js")
	os.WriteFile(script, nil, 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{script, "/data"}, script},
		{[]string{"--max-old-space-size=100", script}, script},
		{[]string{"-r", "ts-node/register", script}, script},
		{[]string{"-e", "1", script}, ""},
		{[]string{"s.js"}, script},
		{[]string{dir}, ""},            // a directory is not a script
		{[]string{"/nonexistent"}, ""}, // nothing to grant
		{[]string{"--", script}, script},
	}
	for _, tt := range tests {
		if got := firstScriptArg(tt.args, dir); got != tt.want {
			t.Errorf("firstScriptArg(%v) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func entryPaths(p *Profile) map[string]Class {
	m := map[string]Class{}
	for _, e := range p.Entries {
		m[e.Path] = e.Class
	}
	return m
}

// TestResolveRealBinary resolves /bin/sh on this machine: the executable,
// the ELF interpreter and libc, and nothing like /etc or / wholesale.
func TestResolveRealBinary(t *testing.T) {
	p, err := Resolve([]string{"sh", "-c", "true"}, Options{PATH: "/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	m := entryPaths(p)
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	if m[sh] != ClassExec || p.Exe != sh {
		t.Errorf("sh not exec: %v (exe %s)", m, p.Exe)
	}
	var libc, interp bool
	for path, c := range m {
		if strings.Contains(filepath.Base(path), "libc.so") && c == ClassRead {
			libc = true
		}
		if strings.HasPrefix(filepath.Base(path), "ld-linux") && c == ClassExec {
			interp = true
		}
		if path == "/" || path == "/etc" || path == "/usr" || path == "/home" || path == os.Getenv("HOME") {
			t.Errorf("wholesale grant %s", path)
		}
		if st, err := os.Stat(path); err == nil && st.IsDir() && !hostTree(path) {
			t.Errorf("a plain ELF got a directory grant that is not host data: %s", path)
		}
	}
	if !libc || !interp {
		t.Errorf("missing libc (%v) or ELF interpreter (%v): %v", libc, interp, m)
	}
	// The literal paths that go through symlinks are listed for the
	// minimal root; resolved ones are not.
	for _, n := range p.Names {
		if real, _ := filepath.EvalSymlinks(n); real == n || m[real] == "" {
			t.Errorf("name %s resolves to %s, which is not a distinct entry", n, real)
		}
	}
	if shInterp := elfInterp(t, sh); shInterp != "" {
		if real, _ := filepath.EvalSymlinks(shInterp); real != shInterp && !slices.Contains(p.Names, shInterp) {
			t.Errorf("PT_INTERP %s goes through a symlink but is not in names %v", shInterp, p.Names)
		}
	}
}

func elfInterp(t *testing.T, exe string) string {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// hostTree reports whether dir is one of the host data directories every
// profile has (time zones, locales, iconv modules, huge page settings) or
// the server's own /proc entry.
func hostTree(dir string) bool {
	if dir == ProcSelf || strings.HasSuffix(dir, "/gconv") {
		return true
	}
	for _, h := range hostEntries {
		if h.tree && !h.network {
			if real, err := filepath.EvalSymlinks(h.path); err == nil && real == dir {
				return true
			}
		}
	}
	return false
}

// TestResolveScripts follows "#!" lines, env, and node scripts' packages.
func TestResolveScripts(t *testing.T) {
	node, err := Resolve([]string{"node"}, Options{PATH: os.Getenv("PATH")})
	if err != nil {
		testenv.Missing(t, "node is not installed ("+err.Error()+")")
	}
	dir := t.TempDir()
	// An installed package: <root>/node_modules/@scope/pkg/dist/index.js
	pkg := filepath.Join(dir, "inst", "node_modules", "@scope", "pkg", "dist")
	os.MkdirAll(pkg, 0o755)
	script := filepath.Join(pkg, "index.js")
	os.WriteFile(script, []byte("#!/usr/bin/env node\nconsole.log(1)\n"), 0o755)
	bin := filepath.Join(dir, "inst", "node_modules", ".bin")
	os.MkdirAll(bin, 0o755)
	os.Symlink("../@scope/pkg/dist/index.js", filepath.Join(bin, "pkg"))
	// A checkout: <proj>/package.json, <proj>/node_modules, <proj>/src/main.js
	proj := filepath.Join(dir, "proj")
	os.MkdirAll(filepath.Join(proj, "src"), 0o755)
	os.MkdirAll(filepath.Join(proj, "node_modules"), 0o755)
	os.MkdirAll(filepath.Join(proj, "secrets"), 0o755)
	os.WriteFile(filepath.Join(proj, "package.json"), []byte("{}"), 0o644)
	main := filepath.Join(proj, "src", "main.js")
	os.WriteFile(main, nil, 0o644)

	tests := []struct {
		name    string
		argv    []string
		want    map[string]Class
		notWant []string
	}{
		{"node script in node_modules", []string{"node", script, "/data"}, map[string]Class{node.Exe: ClassExec, filepath.Join(dir, "inst", "node_modules"): ClassReadTree}, []string{filepath.Join(dir, "inst"), "/data"}},
		{"bin symlink with env shebang", []string{filepath.Join(bin, "pkg")}, map[string]Class{script: ClassExec, "/usr/bin/env": ClassExec, node.Exe: ClassExec, filepath.Join(dir, "inst", "node_modules"): ClassReadTree}, nil},
		{"node script in a checkout", []string{"node", main}, map[string]Class{filepath.Join(proj, "src"): ClassReadTree, filepath.Join(proj, "package.json"): ClassRead, filepath.Join(proj, "node_modules"): ClassReadTree}, []string{proj, filepath.Join(proj, "secrets")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Resolve(tt.argv, Options{PATH: os.Getenv("PATH"), Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			m := entryPaths(p)
			for path, c := range tt.want {
				real, _ := filepath.EvalSymlinks(path)
				if m[real] != c && m[path] != c {
					t.Errorf("%s: want %s, have %v", path, c, m)
				}
			}
			for _, path := range tt.notWant {
				if _, ok := m[path]; ok {
					t.Errorf("%s granted", path)
				}
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("#!/no/such/interp\n"), 0o755)
	loop := filepath.Join(dir, "loop")
	os.WriteFile(loop, []byte("#!"+loop+"\n"), 0o755)
	data := filepath.Join(dir, "data")
	os.WriteFile(data, []byte("not a program"), 0o755)
	for _, argv := range [][]string{nil, {""}, {"no-such-cmd-xyz"}, {bad}, {loop}, {data}, {filepath.Join(dir, "missing")}} {
		if _, err := Resolve(argv, Options{PATH: "/usr/bin:/bin", Dir: dir}); err == nil {
			t.Errorf("Resolve(%q) succeeded", argv)
		}
	}
}

// FuzzParseShebang: any first line parses without panic, and a result is
// always an absolute interpreter.
func FuzzParseShebang(f *testing.F) {
	for _, s := range []string{"#!/bin/sh\n", "#!/usr/bin/env -S node --x\n", "#!", "#!\x00/\n", "#!rel"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		interp, _, ok, err := parseShebang(line)
		if ok && (err != nil || !filepath.IsAbs(interp)) {
			t.Fatalf("parseShebang(%q) = %q, %v", line, interp, err)
		}
	})
}

// FuzzParseLdSoConf: only absolute, clean directories come out.
func FuzzParseLdSoConf(f *testing.F) {
	f.Add("include /etc/x/*.conf\n/usr/lib\n")
	f.Add("/a:/b,/c=x # c\nhwcap 1 x\n")
	f.Fuzz(func(t *testing.T, text string) {
		for _, d := range parseLdSoConf(text, "/etc", func(string) []string { return nil }) {
			if !filepath.IsAbs(d) || filepath.Clean(d) != d {
				t.Fatalf("dir %q", d)
			}
		}
	})
}

func TestPythonVersion(t *testing.T) {
	for name, want := range map[string]string{"python3.11": "3.11", "python3.9": "3.9", "python3": "", "python": "", "pythonista": "", "node": ""} {
		got, ok := pythonVersion("/usr/bin/" + name)
		if got != want || ok != (want != "") {
			t.Errorf("pythonVersion(%s) = %q, %v", name, got, ok)
		}
	}
}

// TestShellScriptArg: the script a shell runs is its first operand unless
// -c or -s come first; options that take a value are skipped with it. It
// fails on the code before (session 11): "sh script" added nothing, so a
// script in a write scope was not refused and its helpers not granted.
func TestShellScriptArg(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	onPath := filepath.Join(bin, "tool.sh")
	for _, f := range []string{script, onPath} {
		if err := os.WriteFile(f, []byte("echo hi\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run.sh"}, script},
		{[]string{script, "arg"}, script},
		{[]string{"-e", "run.sh"}, script},
		{[]string{"-eux", "run.sh"}, script},
		{[]string{"+x", "run.sh"}, script},
		{[]string{"-o", "pipefail", "run.sh"}, script},
		{[]string{"-eo", "pipefail", "run.sh"}, script},
		{[]string{"+O", "extglob", "run.sh"}, script},
		{[]string{"--norc", "--rcfile", "x", "run.sh"}, script},
		{[]string{"--", "run.sh"}, script},
		{[]string{"-", "run.sh"}, script},
		{[]string{"tool.sh"}, onPath},
		{[]string{"./tool.sh"}, ""},
		{[]string{"-c", "run.sh"}, ""},
		{[]string{"-ec", "echo", "run.sh"}, ""},
		{[]string{"-s", "run.sh"}, ""},
		{[]string{"-o", "run.sh"}, ""},
		{[]string{"missing.sh"}, ""},
		{[]string{}, ""},
		{[]string{"."}, ""},
	}
	for _, c := range cases {
		if got := shellScriptArg(c.args, dir, "relative:"+bin); got != c.want {
			t.Errorf("shellScriptArg(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// TestResolveShellScriptOperand: "sh script" and "bash script" grant the
// script for reading (the ruleset then refuses it in a write scope) and
// the programs it names, as for a "#!" script; "sh -c" adds no script.
func TestResolveShellScriptOperand(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "server.sh")
	if err := os.WriteFile(script, []byte("#no shebang\nexec cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := filepath.EvalSymlinks("/bin/cat")
	if err != nil {
		t.Fatal(err) // coreutils is on every Debian host
	}
	for _, shell := range []string{"sh", "bash"} {
		testenv.RequireCommand(t, shell)
		p, err := Resolve([]string{shell, "server.sh"}, Options{PATH: "/usr/bin:/bin", Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m := entryPaths(p)
		if m[script] != ClassRead || m[cat] != ClassExec || p.Kind != KindShell || !slices.Equal(p.CodeFiles, []string{script}) {
			t.Errorf("%s server.sh: script %v, cat %v, kind %q, code files %q", shell, m[script], m[cat], p.Kind, p.CodeFiles)
		}
		p, err = Resolve([]string{shell, "-c", "exec cat", script}, Options{PATH: "/usr/bin:/bin", Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := entryPaths(p)[script]; ok {
			t.Errorf("%s -c: the operand after the command was taken for a script", shell)
		}
	}
}

// TestNodePreloads: the modules node loads by option before its script (as
// paths; a bare name is a package) and its --env-file files. It fails on
// the code before (session 11): "node -r ./hook.js" in a write scope was
// not refused, and the next run ran the hook the server rewrote.
func TestNodePreloads(t *testing.T) {
	dir := t.TempDir()
	hook := filepath.Join(dir, "hook.js")
	env := filepath.Join(dir, "run.env")
	for _, f := range []string{hook, env} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"-r", "./hook.js", "server.js"}, []string{hook}},
		{[]string{"--require=./hook.js", "server.js"}, []string{hook}},
		{[]string{"--import", "file://" + hook, "server.js"}, []string{hook}},
		{[]string{"--loader", hook, "--env-file", "run.env", "server.js"}, []string{hook, env}},
		{[]string{"--env-file-if-exists=run.env", "server.js"}, []string{env}},
		{[]string{"--snapshot-blob", "run.env", "--openssl-config=" + hook, "server.js"}, []string{env, hook}},
		{[]string{"-r", "dotenv/config", "server.js"}, nil},
		{[]string{"-r", "hook.js", "server.js"}, nil}, // a package named hook.js
		{[]string{"server.js", "-r", "./hook.js"}, nil},
		{[]string{"-e", "1", "-r", "./hook.js"}, nil},
		{[]string{"-C", "-r", "server.js"}, nil},
		{[]string{"-r"}, nil},
		{[]string{"-r", "./missing.js"}, nil},
	}
	for _, c := range cases {
		if got := nodePreloads(c.args, dir); !slices.Equal(got, c.want) {
			t.Errorf("nodePreloads(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// TestPythonCodeDirs: with -m or -c (no script) CPython's sys.path[0] is
// the working directory: the profile names it as a code directory (which
// the ruleset refuses in a write scope), unless -P or -I keep it off.
func TestPythonCodeDirs(t *testing.T) {
	const python = "/usr/bin/python3"
	testenv.RequireFile(t, python, "apt-get install python3")
	dir := t.TempDir()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "s.py")
	if err := os.WriteFile(script, []byte("pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-m", "server"}, true},
		{[]string{"-c", "pass"}, true},
		{[]string{"-u", "-m", "server"}, true},
		{[]string{"-W", "ignore", "-m", "server"}, true},
		{[]string{}, true},
		{[]string{"-P", "-m", "server"}, false},
		{[]string{"-I", "-c", "pass"}, false},
		{[]string{"-uP", "-m", "server"}, false},
		{[]string{"-Im", "server"}, false},
		{[]string{"-mP"}, true}, // the module named "P"
		{[]string{"s.py"}, false},
	} {
		p, err := Resolve(append([]string{python}, c.args...), Options{PATH: "/usr/bin:/bin", Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		got := len(p.CodeDirs) == 1 && p.CodeDirs[0].Path == real
		if got != c.want || len(p.CodeDirs) > 1 {
			t.Errorf("python3 %q: code dirs %v, want the working directory: %v", c.args, p.CodeDirs, c.want)
		}
	}
}
