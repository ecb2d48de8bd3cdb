package wrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/adopt/clientconfig"
	"github.com/mcpwarden/mcpwarden/internal/mcptest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// world is a user's machine in a temp dir: a home with a project, the
// pinned real servers, mcpwarden's scope and state directories.
type world struct {
	root, home, proj, ws, scopes, state string
	fs, everything                      string
	bin                                 string
	environ                             []string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	testenv.RequireCommand(t, "node")
	servers, _ := filepath.Abs("../../deploy/mcp-servers/node_modules/@modelcontextprotocol")
	w := &world{fs: filepath.Join(servers, "server-filesystem/dist/index.js"), everything: filepath.Join(servers, "server-everything/dist/index.js")}
	testenv.RequireFile(t, w.fs, "run scripts/test-env.sh install-npm")
	testenv.RequireFile(t, w.everything, "run scripts/test-env.sh install-npm")
	w.bin = testenv.Mcpwarden(t)
	w.root, _ = filepath.EvalSymlinks(t.TempDir())
	w.home = filepath.Join(w.root, "home")
	w.proj = filepath.Join(w.home, "proj")
	w.ws = filepath.Join(w.proj, "ws")
	w.scopes, w.state = filepath.Join(w.root, "scopes"), filepath.Join(w.root, "state")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(w.ws, "notes.txt"):               "inside the scope",
		filepath.Join(w.proj, "private", "secret.txt"): "OUTSIDE-SECRET",
		filepath.Join(w.proj, ".env"):                  "TEST_SETTING=from-the-env-file\n# comment\n",
	})
	w.environ = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.home, "LANG=C.UTF-8", "TOKEN_FROM_CLIENT_ENV=tok-12345678901234567890"}
	return w
}

// install writes testdata/name at dst with the placeholders filled in.
func (w *world) install(t *testing.T, name, dst string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("@@FS@@"), []byte(w.fs))
	b = bytes.ReplaceAll(b, []byte("@@EVERYTHING@@"), []byte(w.everything))
	b = bytes.ReplaceAll(b, []byte("@@WS@@"), []byte(w.ws))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o640); err != nil {
		t.Fatal(err)
	}
	return b
}

// options probe with a 5-minute timeout: the real npm servers start under
// the real fence, and on a loaded 2-core machine (load 20) one took more
// than the minute this used to allow.
func (w *world) options(config string) Options {
	return Options{Config: config, Mcpwarden: w.bin, ScopeDir: w.scopes, StateDir: w.state, Environ: w.environ, Home: w.home, ProbeTimeout: 5 * time.Minute}
}

// start runs a wrapped entry the way its client would: variables
// expanded, the env block added to the client's environment.
func (w *world) start(t *testing.T, c *clientconfig.Config, name string) *mcptest.Client {
	t.Helper()
	e := c.Entry(name)
	if e == nil || e.Wrapped == nil {
		t.Fatalf("%s is not wrapped: %+v", name, e)
	}
	env := map[string]string{}
	for _, kv := range w.environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	vars := clientconfig.Vars{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Home: w.home, WorkspaceFolder: c.WorkspaceFolder()}
	exp := func(s string) string {
		v, err := c.Format.Expand(s, vars)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var args []string
	for _, a := range e.Args {
		args = append(args, exp(a))
	}
	cmdEnv := append([]string{}, w.environ...)
	for _, v := range e.Env {
		if v.Set {
			cmdEnv = append(cmdEnv, v.Name+"="+exp(v.Value))
		}
	}
	if e.EnvFile != "" {
		b, _ := os.ReadFile(exp(e.EnvFile))
		for _, kv := range parseEnvFile(b) {
			cmdEnv = append(cmdEnv, kv[0]+"="+kv[1])
		}
	}
	cmd := exec.Command(exp(e.Command), args...)
	cmd.Env = append(cmdEnv, "MCPWARDEN_CONFIG="+filepath.Join(w.root, "no-config.json"), "MCPWARDEN_STATE_DIR="+w.state)
	os.WriteFile(filepath.Join(w.root, "no-config.json"), []byte("{}"), 0o600)
	cmd.Dir = w.proj
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	cl, err := mcptest.Start(cmd, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Close(5 * time.Second)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	if _, err := cl.Initialize(); err != nil {
		t.Fatalf("%s initialize: %v\n%s", name, err, stderr.String())
	}
	return cl
}

// reviewAsRead does what a reviewer does for a tool wrap left for review:
// give it a class in the scope file.
func reviewAsRead(t *testing.T, scopeFile string, tools ...string) {
	t.Helper()
	b, err := os.ReadFile(scopeFile)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	classes, _ := m["tool_classes"].(map[string]any)
	if classes == nil {
		classes = map[string]any{}
	}
	for _, tl := range tools {
		classes[tl] = "read"
	}
	m["tool_classes"] = classes
	b, _ = json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(scopeFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWrapEachFormat wraps a real file of each client's format, runs the
// wrapped servers as the client would (a read inside the scope works, one
// outside is denied, the env block reaches the server), wraps again
// (nothing changes) and unwraps (the file is byte for byte the original).
func TestWrapEachFormat(t *testing.T) {
	for _, c := range []struct {
		format   clientconfig.Format
		template string
		at       string // where the file lives, relative to home
		remote   string
		envVar   string // the value get-env must show for TEST_SETTING
	}{
		{clientconfig.ClaudeDesktop, "claude_desktop_config.json", ".config/Claude/claude_desktop_config.json", "remote", "from-the-env-block"},
		{clientconfig.ClaudeCode, ".mcp.json", "proj/.mcp.json", "sentry", "from-the-env-block"},
		{clientconfig.Cursor, "cursor-mcp.json", "proj/.cursor/mcp.json", "linear", "from-the-env-file"},
		{clientconfig.VSCode, "vscode-mcp.json", "proj/.vscode/mcp.json", "github", "from-the-env-block"},
	} {
		t.Run(string(c.format), func(t *testing.T) {
			w := newWorld(t)
			cfgPath := filepath.Join(w.home, c.at)
			orig := w.install(t, c.template, cfgPath)
			o := w.options(cfgPath)
			if c.format == clientconfig.ClaudeDesktop {
				o.Base = w.proj
			}
			rep, err := Wrap(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			status := map[string]EntryReport{}
			for _, e := range rep.Entries {
				status[e.Name] = e
			}
			if status["filesystem"].Status != StatusWrapped || status["everything"].Status != StatusWrapped || status[c.remote].Status != StatusRemote {
				t.Fatalf("report %+v", rep.Entries)
			}
			if strings.Contains(status[c.remote].URL, "pw") || strings.Contains(status[c.remote].URL, "key=") {
				t.Errorf("remote URL shown with its credentials: %s", status[c.remote].URL)
			}
			if c.format == clientconfig.VSCode {
				if s := status["asks-input"]; s.Status != StatusFailed || !strings.Contains(s.Reason, "input:token") {
					t.Errorf("a server asking the user for input: %+v", s)
				}
			}
			// Scopes: 0600, valid, read-only, the workspace only.
			fsScope := status["filesystem"].Scope
			st, err := os.Stat(fsScope)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("scope %s: %v %v", fsScope, st, err)
			}
			s, err := schema.ReadScopeFile(fsScope)
			if err != nil {
				t.Fatal(err)
			}
			if s.AccessMode != schema.AccessRead || len(s.AllowedPaths) != 1 || s.AllowedPaths[0] != "ws" || !slices.Contains(s.ToolAllowlist, "read_text_file") {
				t.Errorf("filesystem scope %+v (base %s)", s, status["filesystem"].Base)
			}
			if _, err := os.Stat(status["filesystem"].Review); err != nil {
				t.Error(err)
			}
			if len(status["everything"].Unknown) == 0 {
				t.Error("server-everything's tools are not in mcpwarden's table, yet none is left for review")
			}

			cfg, err := clientconfig.Read(cfgPath, "")
			if err != nil {
				t.Fatal(err)
			}
			cl := w.start(t, cfg, "filesystem")
			got, err := cl.CallTool("read_text_file", map[string]any{"path": filepath.Join(w.ws, "notes.txt")})
			if err != nil || got != "inside the scope" {
				t.Errorf("read inside the scope: %q %v", got, err)
			}
			got, err = cl.CallTool("read_text_file", map[string]any{"path": filepath.Join(w.proj, "private", "secret.txt")})
			if err == nil || strings.Contains(got, "OUTSIDE-SECRET") {
				t.Errorf("read outside the scope: %q %v", got, err)
			}
			if _, err := cl.CallTool("write_file", map[string]any{"path": filepath.Join(w.ws, "new.txt"), "content": "x"}); err == nil {
				t.Error("a write in a read-only starting scope")
			}

			// get-env is left for review: refused until the reviewer says read.
			ev := w.start(t, cfg, "everything")
			if _, err := ev.CallTool("get-env", map[string]any{}); !errors.Is(err, mcptest.ErrTool) {
				t.Errorf("an unreviewed tool ran: %v", err)
			}
			ev.Close(5 * time.Second)
			reviewAsRead(t, status["everything"].Scope, "get-env")
			ev = w.start(t, cfg, "everything")
			out, err := ev.CallTool("get-env", map[string]any{})
			if err != nil || !strings.Contains(out, c.envVar) || !strings.Contains(out, "tok-12345678901234567890") {
				t.Errorf("the env block did not reach the server (TEST_SETTING=%s and the token wanted): %v\n%.600s", c.envVar, err, out)
			}

			wrapped, _ := os.ReadFile(cfgPath)
			rep2, err := Wrap(context.Background(), o)
			if err != nil || rep2.Changed {
				t.Fatalf("second wrap changed the file: %v %+v", err, rep2)
			}
			if again, _ := os.ReadFile(cfgPath); !bytes.Equal(again, wrapped) {
				t.Fatal("wrapping a wrapped file changed it")
			}
			st0, _ := os.Stat(cfgPath)
			if st0.Mode().Perm() != 0o640 {
				t.Errorf("mode %v after wrap, want 0640 kept", st0.Mode().Perm())
			}

			un, err := Unwrap(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range un.Entries {
				if e.Status == StatusRestored && !e.Exact {
					t.Errorf("%s restored inexactly: %s", e.Name, e.Reason)
				}
			}
			if back, _ := os.ReadFile(cfgPath); !bytes.Equal(back, orig) {
				t.Fatalf("unwrap did not restore the original:\n%s", back)
			}
			if _, err := os.Stat(rep.Record); !os.IsNotExist(err) {
				t.Errorf("the wrap record is still there: %v", err)
			}
			// Wrapping again after unwrap meets the same scopes: the
			// filesystem one is what wrap writes, the reviewed one is kept.
			rep3, err := Wrap(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep3.Entries {
				switch e.Name {
				case "filesystem":
					if e.Status != StatusWrapped {
						t.Errorf("re-wrap of filesystem: %+v", e)
					}
				case "everything":
					if e.Status != StatusWrapped || !strings.Contains(e.Reason, "kept the existing scope") {
						t.Errorf("re-wrap over the reviewed scope: %+v", e)
					}
					if b, _ := os.ReadFile(e.Scope); !bytes.Contains(b, []byte(`"get-env": "read"`)) {
						t.Errorf("the reviewed scope was overwritten:\n%s", b)
					}
				}
			}
		})
	}
}

// TestWrapDryRun prints the change and writes nothing.
func TestWrapDryRun(t *testing.T) {
	w := newWorld(t)
	cfgPath := filepath.Join(w.proj, ".mcp.json")
	orig := w.install(t, ".mcp.json", cfgPath)
	o := w.options(cfgPath)
	o.DryRun = true
	rep, err := Wrap(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Changed || !strings.Contains(rep.Diff, "+      \"args\": [\"run\", \"--scope\"") && !strings.Contains(rep.Diff, `"run", "--scope"`) {
		t.Errorf("diff:\n%s", rep.Diff)
	}
	if now, _ := os.ReadFile(cfgPath); !bytes.Equal(now, orig) {
		t.Error("a dry run changed the file")
	}
	for _, p := range []string{w.scopes, filepath.Join(w.state, "wrap")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("a dry run wrote %s", p)
		}
	}
}

// TestWrapSymlinkedConfig: a configuration kept elsewhere (dotfiles) and
// linked into place stays a link; the file it points to is rewritten.
func TestWrapSymlinkedConfig(t *testing.T) {
	w := newWorld(t)
	target := filepath.Join(w.root, "dotfiles", "claude_desktop_config.json")
	orig := w.install(t, "claude_desktop_config.json", target)
	link := filepath.Join(w.home, ".config", "Claude", "claude_desktop_config.json")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	o := w.options(link)
	o.Base, o.Servers = w.proj, []string{"filesystem"}
	rep, err := Wrap(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries[1].Status != StatusSkipped {
		t.Errorf("--server filesystem wrapped more: %+v", rep.Entries)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if now, _ := os.ReadFile(target); bytes.Equal(now, orig) || !bytes.Contains(now, []byte(`"run"`)) {
		t.Fatal("the link's target was not rewritten")
	}
	if _, err := Unwrap(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(target); !bytes.Equal(now, orig) {
		t.Fatal("unwrap through the link did not restore the original")
	}
}

// TestWrapRefuses: files that mean two things are refused whole, a server
// that cannot start under the fence is listed with why and left as it was,
// a directory argument outside the base is named.
func TestWrapRefuses(t *testing.T) {
	w := newWorld(t)
	for name, content := range map[string]string{
		"dup-server": `{"mcpServers": {"fs": {"command": "node", "args": ["a.js"]}, "fs": {"command": "sh"}}}`,
		"dup-field":  `{"mcpServers": {"fs": {"command": "node", "args": ["a.js"], "args": ["b.js"]}}}`,
		"no-servers": `{"globalShortcut": ""}`,
	} {
		p := filepath.Join(w.root, name, "claude_desktop_config.json")
		testenv.WriteFiles(t, map[string]string{p: content})
		if _, err := Wrap(context.Background(), w.options(p)); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
		if now, _ := os.ReadFile(p); string(now) != content {
			t.Errorf("%s: the refused file changed", name)
		}
	}
	// A server whose code lies inside the base but outside its scope
	// cannot start under the fence (its runtime would widen the scope).
	script := filepath.Join(w.proj, "tools", "server.js")
	testenv.WriteFiles(t, map[string]string{script: "process.stdin.resume()\n"})
	p := filepath.Join(w.home, ".config", "Claude", "claude_desktop_config.json")
	content := `{"mcpServers": {"local": {"command": "node", "args": ["` + script + `", "` + w.ws + `"]}, "outside": {"command": "node", "args": ["` + w.fs + `", "/etc"]}}}`
	testenv.WriteFiles(t, map[string]string{p: content})
	o := w.options(p)
	o.Base = w.proj
	rep, err := Wrap(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Failed() || rep.Changed {
		t.Fatalf("report %+v", rep)
	}
	for _, e := range rep.Entries {
		switch e.Name {
		case "local":
			if !strings.Contains(e.Reason, "probe under `mcpwarden run --mode enforce` failed") || !strings.Contains(e.Reason, "exit status 70") {
				t.Errorf("local: %s", e.Reason)
			}
		case "outside":
			if !strings.Contains(e.Reason, "/etc is outside the base") {
				t.Errorf("outside: %s", e.Reason)
			}
		}
	}
	if now, _ := os.ReadFile(p); string(now) != content {
		t.Error("a file whose servers all failed changed")
	}
}
