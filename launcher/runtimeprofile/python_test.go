package runtimeprofile

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// makeVenv creates a virtual environment with python's venv module (no pip).
func makeVenv(t *testing.T, python, dir string) {
	t.Helper()
	if out, err := exec.Command(python, "-m", "venv", "--without-pip", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "python3 -m venv failed (install python3-venv): "+string(out))
	}
}

// TestResolveVenv: a console script of a virtual environment gets the
// venv's pyvenv.cfg and site-packages, the base interpreter and its
// standard library, and nothing else of the venv's parent.
func TestResolveVenv(t *testing.T) {
	python := testenv.RequireCommand(t, "/usr/bin/python3")
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	makeVenv(t, python, venv)
	script := filepath.Join(venv, "bin", "my-server")
	testenv.WriteFiles(t, map[string]string{script: "#!" + filepath.Join(venv, "bin", "python3") + "\nimport sys\n"})
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.EvalSymlinks(python)
	for _, argv := range [][]string{{script}, {filepath.Join(venv, "bin", "python"), "-m", "my_server"}} {
		p, err := Resolve(argv, Options{PATH: "/usr/bin:/bin", Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m := entryPaths(p)
		ver, _ := pythonVersion(base)
		site := filepath.Join(venv, "lib", "python"+ver, "site-packages")
		if p.Kind != KindVenv || m[filepath.Join(venv, "pyvenv.cfg")] != ClassRead || m[site] != ClassReadTree || m[base] != ClassExec {
			t.Errorf("%q: kind %s, entries %v", argv, p.Kind, m)
		}
		if _, ok := m[venv]; ok {
			t.Errorf("%q: the whole venv granted", argv)
		}
		if _, ok := m[dir]; ok {
			t.Errorf("%q: the venv's parent granted", argv)
		}
		if !strings.Contains(strings.Join(p.Env, " "), "PYTHONDONTWRITEBYTECODE=1") {
			t.Errorf("%q: env %v", argv, p.Env)
		}
	}
}

func TestPythonScriptArg(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "s.py")
	testenv.WriteFiles(t, map[string]string{s: "print(1)"})
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{s}, s}, {[]string{"-u", "-X", "utf8", s}, s}, {[]string{"-m", "pkg"}, ""}, {[]string{"-c", "x"}, ""},
		{[]string{"-mpkg"}, ""}, {[]string{"--", s}, s}, {[]string{"s.py"}, s}, {nil, ""},
	} {
		if got := pythonScriptArg(tt.args, dir); got != tt.want {
			t.Errorf("pythonScriptArg(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func FuzzParsePyvenvCfg(f *testing.F) {
	f.Add("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
	f.Add("home=\n=x\nINCLUDE-SYSTEM-SITE-PACKAGES = True")
	f.Fuzz(func(t *testing.T, text string) {
		cfg := parsePyvenvCfg(bufio.NewReader(strings.NewReader(text)))
		if strings.ContainsAny(cfg.home, "\n") {
			t.Fatalf("home %q", cfg.home)
		}
	})
}
