package launcher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestStartFailureNamesTheGrant: for each way a server is launched, a
// server that cannot start under the fence makes `mcpwarden run` exit 70
// with the denied path and the flag or scope field that grants it.
func TestStartFailureNamesTheGrant(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	node := testenv.RequireCommand(t, "node")
	python := testenv.RequireCommand(t, "/usr/bin/python3")
	root := t.TempDir()
	base := filepath.Join(root, "base")
	conf := filepath.Join(root, "etc", "server.conf") // outside the base and the profile
	inst := filepath.Join(root, "inst")
	home := filepath.Join(root, "home")
	nodeScript := filepath.Join(inst, "node_modules", "srv", "index.js")
	shScript := filepath.Join(inst, "run.sh")
	lateScript := filepath.Join(inst, "late.sh")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(base, "ws", "a.txt"): "a",
		conf:                               "secret=1",
		nodeScript:                         "require('fs').readFileSync(" + quoteJS(conf) + ")\n",
		shScript:                           "#!/bin/sh\n/usr/bin/id\n",
		lateScript:                         "#!/bin/sh\necho '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}'\nexec 1>&-\nread -r line\nexit 3\n",
	})
	for _, s := range []string{shScript, lateScript} {
		if err := os.Chmod(s, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	venv := filepath.Join(root, "venv")
	if out, err := exec.Command(python, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		testenv.Missing(t, "python3 -m venv: "+string(out))
	}
	ver := strings.TrimSpace(mustOutput(t, python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"))
	site := filepath.Join(venv, "lib", "python"+ver, "site-packages")
	pyScript := filepath.Join(venv, "bin", "py-server")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(site, "py_server.py"): "open(" + quoteJS(conf) + ").read()\n",
		pyScript:                            "#!" + filepath.Join(venv, "bin", "python3") + "\nimport py_server\n",
	})
	if err := os.Chmod(pyScript, 0o755); err != nil {
		t.Fatal(err)
	}
	scope := fencetest.WriteScope(t, root, map[string]any{"allowed_paths": []string{"ws"}})

	tests := []struct {
		name    string
		command []string
		code    int
		want    []string // in stderr
	}{
		{"elf", []string{"/bin/cat", conf}, 70, []string{conf, "--allow-runtime " + conf}},
		{"node", []string{node, nodeScript}, 70, []string{conf, "--allow-runtime " + conf}},
		{"venv python", []string{pyScript}, 70, []string{conf, "--allow-runtime " + conf}},
		{"shell", []string{shScript}, 70, []string{"/usr/bin/id", "--allow-exec id"}},
		{"npx, not installed", []string{"npx", "-y", "mcpwarden-not-installed-pkg"}, 70, []string{"npx", "not in", "npm install -g mcpwarden-not-installed-pkg"}},
		{"uvx, not installed", []string{"uvx", "mcp-server-not-installed"}, 70, []string{"uv tool install mcp-server-not-installed"}},
		{"a server that answered keeps its status", []string{lateScript}, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", fencetest.RelayFlag, "--scope", scope, "--base", base, "--audit-log", filepath.Join(t.TempDir(), "a.jsonl"), "--"}, tt.command...)
			cmd := exec.Command(b.Mcpwarden, args...)
			cmd.Dir = base
			cmd.Env = append(os.Environ(), "HOME="+home)
			cmd.Stdin = strings.NewReader("{}\n")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			t.Logf("%s: exit %d after %v", tt.name, code, time.Since(start).Round(time.Millisecond))
		})
	}
}

func quoteJS(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

func mustOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(out)
}
