package runtimeprofile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestParseNPX(t *testing.T) {
	tests := []struct {
		args []string
		want npxArgs
		err  bool
	}{
		{args: []string{"-y", "@modelcontextprotocol/server-memory"}, want: npxArgs{packages: []string{"@modelcontextprotocol/server-memory"}}},
		{args: []string{"--yes", "pkg@1.2.3", "/data", "-v"}, want: npxArgs{packages: []string{"pkg@1.2.3"}, args: []string{"/data", "-v"}}},
		{args: []string{"-p", "a", "--package=b", "cmd", "x"}, want: npxArgs{packages: []string{"a", "b"}, command: "cmd", args: []string{"x"}}},
		{args: []string{"--registry", "http://r", "--", "pkg", "--flag"}, want: npxArgs{packages: []string{"pkg"}, args: []string{"--flag"}}},
		{args: []string{"-c", "echo hi"}, err: true},
		{args: []string{"-y"}, err: true},
		{args: []string{"-p"}, err: true},
	}
	for _, tt := range tests {
		got, err := parseNPX(tt.args)
		if (err != nil) != tt.err {
			t.Errorf("parseNPX(%q) error %v", tt.args, err)
			continue
		}
		if !tt.err && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseNPX(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

// TestNPXCacheKey pins the npx cache directory names to what npm computes
// (node -e "crypto.createHash('sha512').update(specs.sort(localeCompare).join('\n'))").
func TestNPXCacheKey(t *testing.T) {
	if got := npxCacheKey([]string{"@modelcontextprotocol/server-memory"}); got != "15b07286cbcc3329" {
		t.Errorf("key %s", got)
	}
	if got := npxCacheKey([]string{"b@1", "a"}); got != "83378bc900d57d98" {
		t.Errorf("key of two specs %s", got)
	}
	if collate("a_b", "a1") >= 0 || collate("@s/x", "a") >= 0 || collate("a", "ab") >= 0 {
		t.Error("collation order differs from CLDR root")
	}
}

func TestValidPackageName(t *testing.T) {
	for name, ok := range map[string]bool{
		"pkg": true, "@scope/pkg": true, "a.b-c_d": true,
		"": false, "../x": false, "@scope": false, "a/b": false, "@s/a/b": false, "Pkg": false, ".hidden": false, "@s/..": false,
	} {
		if validPackageName(name) != ok {
			t.Errorf("validPackageName(%q) = %v", name, !ok)
		}
	}
}

// writeNPMPackage installs a fake package under nm with a bin script.
func writeNPMPackage(t *testing.T, nm, name, bin string) string {
	t.Helper()
	dir := filepath.Join(nm, name)
	script := filepath.Join(dir, "dist", "index.js")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(dir, "package.json"): `{"name":"` + name + `","version":"1.0.0","bin":` + bin + `}`,
		script:                             "#!/usr/bin/env node\nconsole.log(1)\n",
	})
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestResolveNPX: npx PKG runs the package from the npm cache (or a global
// or local install) directly; a package that is not installed is refused
// with how to install it.
func TestResolveNPX(t *testing.T) {
	testenv.RequireCommand(t, "node")
	home := t.TempDir()
	work := t.TempDir()
	spec := "@modelcontextprotocol/server-memory"
	nm := filepath.Join(home, ".npm", "_npx", npxCacheKey([]string{spec}), "node_modules")
	script := writeNPMPackage(t, nm, spec, `{"mcp-server-memory":"dist/index.js"}`)
	opt := Options{PATH: os.Getenv("PATH"), Dir: work, Home: home, Getenv: func(string) string { return "" }}

	p, err := Resolve([]string{"npx", "-y", spec, "--flag"}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindNPX || len(p.Argv) != 2 || p.Argv[0] != script || p.Argv[1] != "--flag" {
		t.Fatalf("profile kind %s argv %q, want npx running %s", p.Kind, p.Argv, script)
	}
	if m := entryPaths(p); m[nm] != ClassReadTree {
		t.Errorf("the cached package's node_modules is not granted: %v", m)
	}

	// A version that is not cached, and a package that is not installed.
	for _, argv := range [][]string{{"npx", "-y", spec + "@9.9.9"}, {"npx", "-y", "not-installed-pkg"}} {
		_, err := Resolve(argv, opt)
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "npm install -g") {
			t.Errorf("Resolve(%q): %v, want a refusal saying how to install it", argv, err)
		}
	}

	// npm_config_cache moves the cache; a local install wins over it.
	cache := t.TempDir()
	nm2 := filepath.Join(cache, "_npx", npxCacheKey([]string{"tool"}), "node_modules")
	s2 := writeNPMPackage(t, nm2, "tool", `"dist/index.js"`)
	opt.Getenv = func(k string) string {
		if k == "npm_config_cache" {
			return cache
		}
		return ""
	}
	if p, err := Resolve([]string{"npx", "tool"}, opt); err != nil || p.Argv[0] != s2 {
		t.Fatalf("npm_config_cache: %v %v", p, err)
	}
	local := writeNPMPackage(t, filepath.Join(work, "node_modules"), "tool", `"dist/index.js"`)
	if p, err := Resolve([]string{"npx", "tool"}, opt); err != nil || p.Argv[0] != local {
		t.Fatalf("local install: %v %v", p, err)
	}
}

func TestPackageBinStaysInPackage(t *testing.T) {
	nm := t.TempDir()
	writeNPMPackage(t, nm, "evil", `{"evil":"../../../bin/sh"}`)
	if _, err := packageBin(nm, "evil", ""); err == nil {
		t.Fatal("a bin outside its package was accepted")
	}
	writeNPMPackage(t, nm, "multi", `{"a":"dist/index.js","b":"dist/index.js"}`)
	if _, err := packageBin(nm, "multi", ""); err == nil || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("ambiguous bin: %v", err)
	}
	if _, err := packageBin(nm, "multi", "b"); err != nil {
		t.Fatal(err)
	}
}

// TestResolveUVTool: uvx TOOL runs the tool's environment made by uv tool
// install (a venv); a tool that is not installed is refused.
func TestResolveUVTool(t *testing.T) {
	python := testenv.RequireCommand(t, "python3")
	home := t.TempDir()
	venv := filepath.Join(home, ".local", "share", "uv", "tools", "mcp-server-time")
	makeVenv(t, python, venv)
	bin := filepath.Join(venv, "bin", "mcp-server-time")
	testenv.WriteFiles(t, map[string]string{bin: "#!" + filepath.Join(venv, "bin", "python3") + "\nimport sys\n"})
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	opt := Options{PATH: os.Getenv("PATH"), Dir: t.TempDir(), Home: home, Getenv: func(string) string { return "" }}
	p, err := Resolve([]string{"uvx", "mcp-server-time@1.0", "--local-timezone", "UTC"}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindUV || p.Argv[0] != bin || !reflect.DeepEqual(p.Argv[1:], []string{"--local-timezone", "UTC"}) {
		t.Fatalf("kind %s argv %q", p.Kind, p.Argv)
	}
	if m := entryPaths(p); m[filepath.Join(venv, "pyvenv.cfg")] != ClassRead {
		t.Errorf("the tool's pyvenv.cfg is not granted: %v", m)
	}
	if _, err := Resolve([]string{"uv", "tool", "run", "other-tool"}, opt); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "uv tool install other-tool") {
		t.Errorf("missing tool: %v", err)
	}
	if _, err := Resolve([]string{"uvx", "../../etc"}, opt); err == nil || errors.Is(err, ErrNotInstalled) {
		t.Errorf("path-like tool name: %v", err)
	}
}

// FuzzParseNPX: any argument list parses without panic; a package that is
// accepted is a registry name.
func FuzzParseNPX(f *testing.F) {
	f.Add("-y\x00@s/p@1\x00x")
	f.Add("-p\x00a\x00--\x00b")
	f.Fuzz(func(t *testing.T, joined string) {
		n, err := parseNPX(strings.Split(joined, "\x00"))
		if err != nil {
			return
		}
		if len(n.packages) == 0 {
			t.Fatalf("no package: %+v", n)
		}
		for _, p := range n.packages {
			if validPackageName(packageName(p)) && (strings.Contains(packageName(p), "..") || filepath.IsAbs(packageName(p))) {
				t.Fatalf("accepted %q", p)
			}
		}
	})
}
