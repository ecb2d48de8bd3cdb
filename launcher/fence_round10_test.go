package launcher_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// Session 10's attacks on the fence: what leaked (each fails on the code
// before) and the guards that held.

// ownFileCase is one of mcpwarden's own files placed where the scope lets
// the server reach it.
type ownFileCase struct {
	name string
	// setup places the file and returns the run's scope file and the extra
	// launcher arguments and environment.
	setup func(t *testing.T, w workspace) (scope string, args, env []string)
	// attack is what the server does with the file on a run that was not
	// refused; it returns what it got (or "" when nothing).
	attack func(t *testing.T, s *fencetest.Session, w workspace) string
	// refused: the run must be refused (exit 65) naming want; else it must
	// run (a guard against refusing too much).
	refused bool
	want    string
}

// TestFenceOwnFilesOutsideTheScope: the launcher refused its audit log,
// state directory and path key inside the scope's allowed paths, but not
// the scope record it enforces, nor the host configuration, nor the NATS
// credentials it publishes with. A server with a write scope holding its
// own scope record rewrote it to grant the whole base, and the next run
// under the same record read the sibling directory (both layerings: the
// record is a plain file of the workspace); through a hard link of the
// record in the workspace the same; it rewrote the host configuration
// (daemon_socket off: every later run unobserved) and read the NATS
// credentials (forged records). Now each is refused before anything starts
// (exit 65, naming the file and what to do); a read scope holding its own
// record still runs.
func TestFenceOwnFilesOutsideTheScope(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceOwnFiles)
}

func testFenceOwnFiles(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	writeScope := map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"}
	widened := map[string]any{"scope_id": "test-scope", "resource_refs": []string{}, "access_mode": "write",
		"tool_allowlist": []string{"read_text_file"}, "approval": "none", "expires_after_minutes": 30,
		"allowed_paths": []string{"."}}
	// rewriteScope rewrites the scope record in place through path (the
	// inode stays: a hard link sees it) to grant the whole base.
	rewriteScope := func(path string) func(t *testing.T, s *fencetest.Session, w workspace) string {
		return func(t *testing.T, s *fencetest.Session, w workspace) string {
			body, _ := json.Marshal(widened)
			if r := s.Do(map[string]any{"op": "write", "path": path, "data": string(body)}); !r.OK {
				return ""
			}
			return "rewrote the scope record"
		}
	}
	cases := []ownFileCase{
		{
			name: "the scope record in its own write path",
			setup: func(t *testing.T, w workspace) (string, []string, []string) {
				return fencetest.WriteScope(t, w.allowed, writeScope), nil, nil
			},
			refused: true, want: "the scope record (--scope) lies inside the scope's allowed paths",
		},
		{
			name: "a hard link of the scope record in its write path",
			setup: func(t *testing.T, w workspace) (string, []string, []string) {
				scope := fencetest.WriteScope(t, t.TempDir(), writeScope)
				if err := os.Link(scope, filepath.Join(w.allowed, "notes.json")); err != nil {
					t.Fatal(err)
				}
				return scope, nil, nil
			},
			refused: true, want: "the scope record (--scope) has 2 names (hard links)",
		},
		{
			name: "the host configuration in the write path",
			setup: func(t *testing.T, w workspace) (string, []string, []string) {
				cfg := filepath.Join(w.allowed, "mcpwarden.json")
				testenv.WriteFiles(t, map[string]string{cfg: "{}\n"})
				if err := os.Chmod(cfg, 0o600); err != nil {
					t.Fatal(err)
				}
				return fencetest.WriteScope(t, t.TempDir(), writeScope), nil, []string{"MCPWARDEN_CONFIG=" + cfg}
			},
			attack: func(t *testing.T, s *fencetest.Session, w workspace) string {
				if r := s.Do(map[string]any{"op": "write", "path": filepath.Join(w.allowed, "mcpwarden.json"), "data": `{"daemon_socket":"off"}`}); r.OK {
					return "rewrote the host configuration (daemon_socket off)"
				}
				return ""
			},
			refused: true, want: "the host configuration",
		},
		{
			name: "the NATS credentials in a read path",
			setup: func(t *testing.T, w workspace) (string, []string, []string) {
				creds := filepath.Join(w.allowed, "fleet.creds")
				testenv.WriteFiles(t, map[string]string{creds: "NATS-SEED-SECRET-42\n"})
				scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
				port := testenv.FreePort(t)
				return scope, []string{"--nats", fmt.Sprintf("nats://127.0.0.1:%d", port), "--nats-creds", creds, "--state-dir", t.TempDir()}, nil
			},
			attack: func(t *testing.T, s *fencetest.Session, w workspace) string {
				r := s.Do(map[string]any{"op": "read", "path": filepath.Join(w.allowed, "fleet.creds")})
				if strings.Contains(r.Data, "NATS-SEED-SECRET-42") {
					return "read the NATS credentials"
				}
				return ""
			},
			refused: true, want: "--nats-creds lies inside the scope's allowed paths",
		},
		{
			name: "the scope record in its own read path (a guard: reading it is harmless)",
			setup: func(t *testing.T, w workspace) (string, []string, []string) {
				return fencetest.WriteScope(t, w.allowed, map[string]any{"allowed_paths": []string{"allowed"}}), nil, nil
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkspace(t)
			scope, args, env := c.setup(t, w)
			start := func() (*fencetest.Session, bool) {
				s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, ExtraArgs: args, Env: env})
				if err := s.Send([]byte(`{"op":"ping"}` + "\n")); err != nil {
					return s, false
				}
				line, ok := s.ReadLine(2 * time.Minute)
				return s, ok && strings.Contains(line, "pong")
			}
			s, started := start()
			if !started {
				code := s.Wait()
				if !c.refused {
					t.Fatalf("the run was refused (exit %d): %s", code, s.Stderr())
				}
				if code != 65 || !strings.Contains(s.Stderr(), c.want) {
					t.Fatalf("refused with exit %d, want 65 naming %q: %s", code, c.want, s.Stderr())
				}
				return
			}
			if !c.refused {
				if code := s.Close(); code != 0 {
					t.Errorf("exit %d: %s", code, s.Stderr())
				}
				return
			}
			// Not refused: show what the server did with the file.
			attack := c.attack
			if attack == nil {
				path := scope
				if strings.Contains(c.name, "hard link") {
					path = filepath.Join(w.allowed, "notes.json")
				}
				attack = rewriteScope(path)
			}
			got := attack(t, s, w)
			s.Close()
			if got == "" {
				t.Fatalf("the run was not refused (want exit 65 naming %q): %s", c.want, s.Stderr())
			}
			if c.attack == nil {
				// The next run under the rewritten record.
				s2, ok := start()
				if ok {
					if r := s2.Do(map[string]any{"op": "read", "path": filepath.Join(w.sibling, "s.txt")}); strings.Contains(r.Data, "SIBLING-SECRET-42") {
						got += "; the next run read the sibling directory"
					}
				}
				s2.Close()
			}
			t.Errorf("ESCAPE: the run was not refused; the server %s", got)
		})
	}
}

// TestFenceSecretsClientConfigsAndFleetCredentials: the MCP clients' server
// lists that mcpwarden wrap edits (they hold the servers' tokens and the
// `mcpwarden run` wrapper: a server with a write scope holding one could
// drop its own wrapper for its next start), mcpwarden's fleet credentials
// (a NATS .creds file, an nkey seed) and other credential stores and
// histories the built-in patterns did not name, in a scope at a home
// directory: the server read every one of them (the proxy served them to
// a client). Now each is masked with the namespaces (EACCES) and counted
// unmasked, with a warning, under --no-namespaces.
func TestFenceSecretsClientConfigsAndFleetCredentials(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		testFenceSecretFiles(t, noNS, map[string]string{
			".config/Claude/claude_desktop_config.json": `{"mcpServers":{"gh":{"env":{"GITHUB_TOKEN":"DESKTOP-SECRET-42"}}}}`,
			"proj/.mcp.json":                 `{"mcpServers":{"db":{"env":{"DB_TOKEN":"PROJECT-SECRET-42"}}}}`,
			".claude.json":                   `{"mcpServers":{"x":{"headers":{"Authorization":"CLAUDE-CODE-SECRET-42"}}}}`,
			".cursor/mcp.json":               `{"mcpServers":{"x":{"env":{"K":"CURSOR-SECRET-42"}}}}`,
			"proj/.vscode/mcp.json":          `{"servers":{"x":{"env":{"K":"VSCODE-SECRET-42"}}}}`,
			".config/Code/User/mcp.json":     `{"servers":{"x":{"env":{"K":"VSCODE-USER-SECRET-42"}}}}`,
			"fleet/collect.creds":            "-----BEGIN USER NKEY SEED-----\nSUACREDS-SECRET-42",
			"fleet/nats-auth/publisher.nk":   "SUANKEY-SECRET-42",
			".yarnrc.yml":                    "npmAuthToken: YARN-SECRET-42",
			".m2/settings.xml":               "<password>MAVEN-SECRET-42</password>",
			".gradle/gradle.properties":      "signing.password=GRADLE-SECRET-42",
			".sentryclirc":                   "token=SENTRY-SECRET-42",
			".kaggle/kaggle.json":            `{"key":"KAGGLE-SECRET-42"}`,
			".config/stripe/config.toml":     "live_mode_api_key = 'STRIPE-SECRET-42'",
			".supabase/access-token":         "SUPABASE-SECRET-42",
			".fly/config.yml":                "access_token: FLY-SECRET-42",
			".wakatime.cfg":                  "api_key = WAKATIME-SECRET-42",
			".config/helm/repositories.yaml": "password: HELM-SECRET-42",
			".config/netlify/config.json":    `{"token":"NETLIFY-SECRET-42"}`,
			".local/share/fish/fish_history": "- cmd: mysql -pFISH-SECRET-42",
			".rediscli_history":              "AUTH REDIS-SECRET-42",
			".python_history":                "login('PYTHON-SECRET-42')",
		})
	})
}

// TestFenceServerCodeOutsideTheWriteScope: the launcher refused a server
// executable in the scope's writable paths (the server could rewrite what
// runs next time), but not the code an interpreter reads: a node script in
// its own write scope rewrote itself, and the next run ran the new code; a
// python server whose virtual environment lay in its write scope dropped a
// .pth file into site-packages, which python ran at the next start. Now
// every runtime path in the writable paths is refused at start (exit 70,
// naming it); both layerings.
func TestFenceServerCodeOutsideTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceServerCode)
}

func testFenceServerCode(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	cases := []struct {
		name string
		// setup returns the server command; its first answer is "v1", and
		// it leaves behind code that answers "v2" on the next run.
		setup func(t *testing.T, w workspace) []string
		want  string
	}{
		{
			name: "a node script in its write scope",
			setup: func(t *testing.T, w workspace) []string {
				node := testenv.RequireCommand(t, "node")
				script := filepath.Join(w.allowed, "server.js")
				testenv.WriteFiles(t, map[string]string{script: `const fs = require('fs');
require('readline').createInterface({input: process.stdin}).on('line', () => {
  fs.writeFileSync(__filename, "require('readline').createInterface({input: process.stdin}).on('line', () => process.stdout.write('v2\\n'));");
  process.stdout.write('v1\n');
});
`})
				return []string{node, script}
			},
			want: "directory of the server script",
		},
		{
			name: "a python virtual environment in its write scope",
			setup: func(t *testing.T, w workspace) []string {
				testenv.RequireFile(t, debianPython, "apt-get install python3 python3-venv")
				venv := filepath.Join(w.allowed, "venv")
				if out, err := exec.Command(debianPython, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
					testenv.Missing(t, "python3 -m venv: "+err.Error()+": "+string(out)+" (apt-get install python3-venv)")
				}
				site, err := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
				if err != nil || len(site) != 1 {
					t.Fatalf("site-packages of %s: %v %v", venv, site, err)
				}
				script := filepath.Join(t.TempDir(), "server.py")
				testenv.WriteFiles(t, map[string]string{script: `import sys
for line in sys.stdin:
    try:
        with open(` + strconv.Quote(filepath.Join(site[0], "zz-planted.pth")) + `, "w") as f:
            f.write("import sys; print('v2', flush=True)\n")
    except OSError:
        pass
    print("v1", flush=True)
`})
				return []string{filepath.Join(venv, "bin", "python3"), script}
			},
			want: "lies in the scope's writable paths",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkspace(t)
			command := c.setup(t, w)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
			checkPlantedCodeRefused(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, Command: command},
				plantedCode{want: []string{c.want}, naming: fmt.Sprintf("%q", c.want), planted: "planted", unrefused: "the planting failed: "})
		})
	}
}

// TestFenceAllowRuntimeOutsideTheWriteScope: an operator's --allow-runtime
// directory inside a write scope's path (or holding one) adds Landlock's
// execute right where the scope grants writing: under --no-namespaces the
// server wrote a program there and ran it (exec of code that is not the
// runtime's). With the namespaces the runtime's read-only bind over the
// workspace held (EROFS). Now the run is refused at start in both
// layerings (exit 70, naming the overlap).
func TestFenceAllowRuntimeOutsideTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceAllowRuntime)
}

func testFenceAllowRuntime(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	for _, c := range []struct {
		name    string
		scope   string // the write scope's path
		runtime string // --allow-runtime, relative to the base
		program string // where the server writes its program, relative to the base
	}{
		{"a runtime directory inside the write path", "allowed", "allowed/bin", "allowed/bin/tool"},
		{"the write path itself", "allowed", "allowed", "allowed/tool"},
		{"a runtime directory holding the write path", "allowed/d1", "allowed", "allowed/d1/tool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkspace(t)
			if err := os.MkdirAll(filepath.Join(w.base, c.runtime), 0o755); err != nil {
				t.Fatal(err)
			}
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{c.scope}, "access_mode": "write"})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS,
				ExtraArgs: []string{"--allow-runtime", filepath.Join(w.base, c.runtime)}})
			if err := s.Send([]byte(`{"op":"ping"}` + "\n")); err == nil {
				if line, ok := s.ReadLine(2 * time.Minute); ok && strings.Contains(line, "pong") {
					program := filepath.Join(w.base, c.program)
					copied := s.Do(map[string]any{"op": "copy", "path": b.Naive, "to": program})
					ran := s.Do(map[string]any{"op": "exec", "path": program, "args": []string{"not-a-mode"}})
					s.Close()
					if copied.OK && ran.OK {
						t.Fatalf("ESCAPE: the run was not refused; the server wrote a program into its write path and ran it")
					}
					t.Fatalf("the run was not refused (copy %+v, exec %+v)", copied, ran)
				}
			}
			code := s.Wait()
			if code != 70 || !strings.Contains(s.Stderr(), "overlaps the scope's writable path") {
				t.Fatalf("refused with exit %d, want 70 naming the overlap: %s", code, s.Stderr())
			}
		})
	}
}

// TestFenceLauncherProgramsOutsideTheWriteScope: mcpwarden installed inside
// a write scope's path (a home directory's bin, a tools directory the
// server may write). The server replaced the exec stage or the fence
// helper next to the launcher by a rename (no ETXTBSY for a new inode):
// the next run would run its program as root before the fence. Now the
// run is refused (exit 65, naming the directory); both layerings.
func TestFenceLauncherProgramsOutsideTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		fencetest.RequireFence(t)
		b := fencetest.Build(t)
		w := newWorkspace(t)
		dir := filepath.Join(w.allowed, "tools")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		installed := b
		for _, p := range []*string{&installed.Mcpwarden, &installed.Fence, &installed.ExecStage} {
			to := filepath.Join(dir, filepath.Base(*p))
			if out, err := exec.Command("cp", *p, to).CombinedOutput(); err != nil {
				t.Fatalf("cp %s: %v %s", *p, err, out)
			}
			*p = to
		}
		scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
		s := fencetest.Start(t, installed, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
		if err := s.Send([]byte(`{"op":"ping"}` + "\n")); err == nil {
			if line, ok := s.ReadLine(2 * time.Minute); ok && strings.Contains(line, "pong") {
				var replaced []string
				for _, p := range []string{installed.ExecStage, installed.Fence} {
					if s.Do(map[string]any{"op": "copy", "path": b.Naive, "to": p + ".new"}).OK &&
						s.Do(map[string]any{"op": "rename", "path": p + ".new", "to": p}).OK {
						replaced = append(replaced, filepath.Base(p))
					}
				}
				s.Close()
				t.Fatalf("ESCAPE: the run was not refused; the server replaced %v", replaced)
			}
		}
		if code := s.Wait(); code != 65 || !strings.Contains(s.Stderr(), "the directory of mcpwarden's programs") {
			t.Fatalf("refused with exit %d, want 65 naming the directory: %s", code, s.Stderr())
		}
	})
}

// TestLifeLauncherSIGKILLedWithoutNamespaces guards (held in session 10)
// the other row of the table in "When the launcher itself is SIGKILLed":
// without a pid namespace, with the cgroup, the server dies by its
// parent-death signal and the watcher kills the rest, a daemonised
// grandchild in a process group of its own and a child whose main thread
// exited among them.
func TestLifeLauncherSIGKILLedWithoutNamespaces(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: true})
	server := pidOf(t, fencetest.Response{OK: true, Data: strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]})
	leader := pidOf(t, s.Do(map[string]any{"op": "leaderexit"}))
	daemon := pidOf(t, s.Do(map[string]any{"op": "daemon", "name": "sleep"}))
	waitMainThreadExited(t, leader)
	if err := s.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	waitGone(t, "after the launcher was SIGKILLed (no namespaces)", server, leader, daemon)
}
