package launcher_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestRealServersUnderTheFilter: real MCP servers, with the default
// runtime profile and no flags beyond what their own configuration needs,
// answer initialize, tools/list and a tool call under the whole fence
// (seccomp allowlist included). What they need of the kernel was found
// with strace; a syscall missing from the allowlist shows here as a
// server that dies or answers with an error.
func TestRealServersUnderTheFilter(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	python := pythonVenv(t)

	tests := []struct {
		name    string
		mode    string
		command func(w workspace) []string
		env     func(w workspace) []string
		extra   func(w workspace) []string
		tool    string
		args    func(w workspace) map[string]any
		want    string
		check   func(t *testing.T, w workspace)
	}{
		{
			name:    "server-filesystem read",
			mode:    "read",
			command: func(w workspace) []string { return []string{"node", fencetest.FilesystemServer(t), w.allowed} },
			tool:    "read_text_file",
			args:    func(w workspace) map[string]any { return map[string]any{"path": w.deep1} },
			want:    "inside",
		},
		{
			name:    "server-filesystem write",
			mode:    "write",
			command: func(w workspace) []string { return []string{"node", fencetest.FilesystemServer(t), w.allowed} },
			tool:    "write_file",
			args: func(w workspace) map[string]any {
				return map[string]any{"path": filepath.Join(w.allowed, "written.txt"), "content": "written under the fence"}
			},
			want: "Successfully wrote",
			check: func(t *testing.T, w workspace) {
				if b, err := os.ReadFile(filepath.Join(w.allowed, "written.txt")); err != nil || string(b) != "written under the fence" {
					t.Errorf("written file: %q, %v", b, err)
				}
			},
		},
		{
			// The workspace holds secrets the fence masks (.env, a key):
			// listing the directory that holds them still works.
			name:    "server-filesystem list beside masked secrets",
			mode:    "read",
			command: func(w workspace) []string { return []string{"node", fencetest.FilesystemServer(t), w.allowed} },
			tool:    "list_directory",
			args:    func(w workspace) map[string]any { return map[string]any{"path": w.allowed} },
			want:    "a.txt",
		},
		{
			name: "server-everything",
			mode: "read",
			command: func(w workspace) []string {
				return []string{"node", fencetest.PinnedServer(t, "server-everything"), "stdio"}
			},
			tool: "echo",
			args: func(workspace) map[string]any { return map[string]any{"message": "hello fence"} },
			want: "Echo: hello fence",
		},
		{
			name:    "server-memory",
			mode:    "write",
			command: func(w workspace) []string { return []string{"node", fencetest.PinnedServer(t, "server-memory")} },
			env: func(w workspace) []string {
				return []string{"MEMORY_FILE_PATH=" + filepath.Join(w.allowed, "memory.jsonl")}
			},
			tool: "create_entities",
			args: func(workspace) map[string]any {
				return map[string]any{"entities": []map[string]any{{"name": "fence", "entityType": "layer", "observations": []string{"holds"}}}}
			},
			want: "fence",
			check: func(t *testing.T, w workspace) {
				if b, err := os.ReadFile(filepath.Join(w.allowed, "memory.jsonl")); err != nil || !strings.Contains(string(b), `"fence"`) {
					t.Errorf("memory file: %q, %v", b, err)
				}
			},
		},
		{
			name:    "go-sdk everything-server",
			mode:    "read",
			command: func(workspace) []string { return []string{fencetest.GoSDKEverythingServer(t)} },
			tool:    "test_simple_text",
			args:    func(workspace) map[string]any { return map[string]any{} },
			want:    "simple text response",
		},
		{
			name:    "python stdlib server in a venv",
			mode:    "read",
			command: func(workspace) []string { return []string{python.exe, python.script} },
			tool:    "read_file",
			args:    func(w workspace) map[string]any { return map[string]any{"path": w.deep1} },
			want:    "inside",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorkspace(t)
			// Secrets the fence masks, beside what the servers use.
			testenv.WriteFiles(t, map[string]string{filepath.Join(w.allowed, ".env"): "TOKEN=x\n", filepath.Join(w.allowed, "keys", "server.key"): "k"})
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{
				"allowed_paths": []string{"allowed"}, "access_mode": tt.mode, "tool_allowlist": []string{tt.tool},
			})
			var extra []string
			if tt.env != nil {
				for _, e := range tt.env(w) {
					extra = append(extra, "--env", e)
				}
			}
			if tt.extra != nil {
				extra = append(extra, tt.extra(w)...)
			}
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, Command: tt.command(w), ExtraArgs: extra})
			c := mcpClient{t: t, s: s}
			init := c.call("initialize", map[string]any{
				"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
				"clientInfo": map[string]any{"name": "mcpwarden-test", "version": "1"},
			})
			if !strings.Contains(string(init), "serverInfo") {
				t.Fatalf("initialize: %s", init)
			}
			c.notify("notifications/initialized")
			if list := c.call("tools/list", map[string]any{}); !strings.Contains(string(list), `"`+tt.tool+`"`) {
				t.Fatalf("tools/list lacks %s: %.500s", tt.tool, list)
			}
			res := c.call("tools/call", map[string]any{"name": tt.tool, "arguments": tt.args(w)})
			if strings.Contains(string(res), `"isError":true`) || !strings.Contains(string(res), tt.want) {
				t.Fatalf("tools/call %s: %.800s\nstderr: %s", tt.tool, res, s.Stderr())
			}
			if code := s.Close(); code != 0 {
				t.Errorf("exit %d; stderr: %s", code, s.Stderr())
			}
			if tt.check != nil {
				tt.check(t, w)
			}
		})
	}
}

// mcpClient speaks newline-delimited JSON-RPC to a server in a session.
type mcpClient struct {
	t    *testing.T
	s    *fencetest.Session
	next int
}

func (c *mcpClient) notify(method string) {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	if err := c.s.Send(append(b, '\n')); err != nil {
		c.t.Fatalf("send %s: %v (stderr %s)", method, err, c.s.Stderr())
	}
}

// call sends a request and returns its result, skipping notifications and
// requests from the server.
func (c *mcpClient) call(method string, params any) json.RawMessage {
	c.t.Helper()
	c.next++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params})
	if err := c.s.Send(append(b, '\n')); err != nil {
		c.t.Fatalf("send %s: %v (stderr %s)", method, err, c.s.Stderr())
	}
	for {
		line, ok := c.s.ReadLine(30 * time.Second)
		if !ok {
			c.t.Fatalf("no answer to %s (stderr %s)", method, c.s.Stderr())
		}
		var m struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			c.t.Fatalf("bad line %q: %v", line, err)
		}
		if m.ID == nil || *m.ID != c.next || m.Method != "" {
			continue
		}
		if m.Error != nil {
			c.t.Fatalf("%s: error %s (stderr %s)", method, m.Error, c.s.Stderr())
		}
		return m.Result
	}
}

type venv struct{ venv, exe, script string }

// pythonVenv makes a virtual environment with Debian's python3 (stdlib
// only: PyPI is not reachable) and returns it with the test server script.
func pythonVenv(t *testing.T) venv {
	t.Helper()
	testenv.RequireFile(t, debianPython, "apt-get install python3 python3-venv")
	dir := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(debianPython, "-m", "venv", "--without-pip", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "python3 -m venv: "+err.Error()+": "+string(out)+" (apt-get install python3-venv)")
	}
	script := filepath.Join(testenv.RepoRoot(), "launcher", "testdata", "stdlib_mcp_server.py")
	testenv.RequireFile(t, script, "it is part of the repository")
	return venv{venv: dir, exe: filepath.Join(dir, "bin", "python3"), script: script}
}
