package launcher_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestFilesystemServerUnderFence runs the real npm filesystem server, given a
// wider directory on its command line than the scope allows, so that the
// fence and not the server's own check is what denies.
func TestFilesystemServerUnderFence(t *testing.T) {
	fencetest.RequireFence(t)
	fsServer := fencetest.FilesystemServer(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, Command: []string{"node", fsServer, w.base}})

	call := func(id int, method string, params any) map[string]any {
		t.Helper()
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if err := s.Send(append(msg, '\n')); err != nil {
			t.Fatal(err)
		}
		for {
			line, ok := s.ReadLine(30 * time.Second)
			if !ok {
				t.Fatalf("no answer to %s; stderr: %s", method, s.Stderr())
			}
			var resp map[string]any
			if err := json.Unmarshal([]byte(line), &resp); err != nil {
				t.Fatalf("bad JSON from server: %q", line)
			}
			if resp["id"] == float64(id) {
				return resp
			}
		}
	}
	init := call(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test", "version": "1"}})
	if init["result"] == nil {
		t.Fatalf("initialize failed: %v; stderr: %s", init, s.Stderr())
	}
	if err := s.Send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	text := func(resp map[string]any) (string, bool) {
		res, _ := resp["result"].(map[string]any)
		isErr, _ := res["isError"].(bool)
		content, _ := res["content"].([]any)
		var sb strings.Builder
		for _, c := range content {
			if m, ok := c.(map[string]any); ok {
				sb.WriteString(m["text"].(string))
			}
		}
		return sb.String(), isErr || resp["error"] != nil
	}
	read := func(id int, path string) (string, bool) {
		return text(call(id, "tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": path}}))
	}
	if got, isErr := read(2, w.deep1); isErr || got != "inside" {
		t.Fatalf("read inside: %q (error %v)", got, isErr)
	}
	if got, isErr := read(3, w.deep10); isErr || got != "deep inside" {
		t.Fatalf("read deep inside: %q (error %v)", got, isErr)
	}
	// Inside the server's own allowed directory (the base), outside the scope.
	for i, p := range []string{filepath.Join(w.sibling, "s.txt"), filepath.Join(w.allowed, "dir-sibling", "s.txt")} {
		got, isErr := read(10+i, p)
		if !isErr || strings.Contains(got, "SECRET-42") {
			t.Fatalf("read %s outside the scope: %q (error %v)", p, got, isErr)
		}
		if !strings.Contains(got, "EACCES") {
			t.Errorf("read %s: want the kernel's EACCES, got %q", p, got)
		}
	}
	// Outside the base altogether (the server's own check also refuses these).
	for i, p := range []string{w.secret, "/etc/shadow", filepath.Join(w.allowed, "link-out.txt")} {
		if got, isErr := read(20+i, p); !isErr || strings.Contains(got, "SECRET-42") || strings.Contains(got, "root:") {
			t.Fatalf("read %s: %q (error %v)", p, got, isErr)
		}
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, s.Stderr())
	}
	recs := readRecords(t, log)
	if len(recs) != 2 || recs[0].Launch.Phase != "start" || recs[1].Launch.Phase != "exit" {
		t.Fatalf("want start and exit records, got %d: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if r.RunID == "" || r.RunID != recs[0].RunID || r.ScopeID != "test-scope" || !strings.HasPrefix(r.ScopeHash, "sha256:") {
			t.Errorf("record envelope: %+v", r)
		}
		if r.Launch.Mode != "enforce" || r.Launch.LandlockABI != 7 || r.Launch.Degraded {
			t.Errorf("record body: %+v", r.Launch)
		}
		if strings.Contains(r.raw, w.base) || strings.Contains(r.raw, fsServer) || strings.Contains(r.raw, "/") {
			t.Errorf("record leaks a path: %s", r.raw)
		}
	}
	if recs[1].Launch.ExitReason != "exited" || recs[1].Launch.ExitStatus != 0 {
		t.Errorf("exit record: %+v", recs[1].Launch)
	}
}

func runCLI(t *testing.T, bin string, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader("")
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run %v: %v", args, err)
		}
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestRefusedScopesNeverStartTheServer: every refused scope exits 65, names
// the field, and the server command never runs (it would leave a marker).
func TestRefusedScopesNeverStartTheServer(t *testing.T) {
	b := fencetest.Build(t)
	w := newWorkspace(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "server-started")
	past := time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339)
	future := time.Now().Add(3 * time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name, body, field string
	}{
		{"empty", "", "empty"},
		{"not json", "{", "invalid JSON"},
		{"unknown field", `{"scope_id":"s","allowed_paths":["allowed"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5,"base":"/"}`, "base"},
		{"duplicate key", `{"scope_id":"s","allowed_paths":["allowed"],"allowed_paths":["/"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths"},
		{"wrong type", `{"scope_id":"s","allowed_paths":"allowed","resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths"},
		{"empty paths", `{"scope_id":"s","allowed_paths":[],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths"},
		{"absolute path", `{"scope_id":"s","allowed_paths":["/etc"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths[0]"},
		{"dotdot", `{"scope_id":"s","allowed_paths":["allowed/../../outside"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths[0]"},
		{"symlink escape", `{"scope_id":"s","allowed_paths":["allowed/dir-out"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths[0]"},
		{"missing path", `{"scope_id":"s","allowed_paths":["nope"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "allowed_paths[0]"},
		{"unknown mode", `{"scope_id":"s","allowed_paths":["allowed"],"resource_refs":[],"access_mode":"admin","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "access_mode"},
		{"expired", `{"scope_id":"s","allowed_paths":["allowed"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":60,"issued_at":"` + past + `"}`, "expire"},
		{"not yet valid", `{"scope_id":"s","allowed_paths":["allowed"],"resource_refs":[],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":60,"issued_at":"` + future + `"}`, "issued_at"},
		{"oversized", `{"scope_id":"s","allowed_paths":["allowed"],"resource_refs":["` + strings.Repeat("x", 70000) + `"],"access_mode":"read","tool_allowlist":["t"],"approval":"none","expires_after_minutes":5}`, "larger"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scope := filepath.Join(dir, "scope.json")
			if err := os.WriteFile(scope, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			// --mode audit: were the server started, nothing would stop it
			// from leaving the marker.
			code, _, stderr := runCLI(t, b.Mcpwarden, w.base, "run", "--scope", scope, "--base", w.base, "--mode", "audit",
				"--audit-log", filepath.Join(dir, "audit.jsonl"), "--", "/bin/sh", "-c", "touch "+marker)
			if code != 65 {
				t.Fatalf("exit %d, want 65; stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, c.field) {
				t.Errorf("stderr does not name %q: %s", c.field, stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the server was started for a refused scope")
			}
			code, _, _ = runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base)
			if code != 65 {
				t.Errorf("scope check exit %d, want 65", code)
			}
		})
	}
}

// TestRunExitCodes covers the launcher's own codes and the pass-through of
// the server's status.
func TestRunExitCodes(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	dir := t.TempDir()
	scope := fencetest.WriteScope(t, dir, map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(dir, "audit.jsonl")
	badInterp := filepath.Join(dir, "bad.sh")
	if err := os.WriteFile(badInterp, []byte("#!/nonexistent/interp\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "started")
	cases := []struct {
		name     string
		args     []string
		want     int
		inStderr string
	}{
		{"server exit status", []string{"--", "/bin/sh", "-c", "exit 7"}, 7, ""},
		{"server killed by signal", []string{"--", "/bin/sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM), ""},
		{"server ok", []string{"--", "/bin/sh", "-c", "exit 0"}, 0, ""},
		{"command not found", []string{"--", "no-such-server-binary"}, 70, "not found"},
		{"bad interpreter", []string{"--", badInterp}, 70, "interpreter"},
		{"usage: no command", []string{}, 64, "required"},
		{"usage: bad mode", []string{"--mode", "loose", "--", "/bin/true"}, 64, "mode"},
		{"audit log unwritable", []string{"--audit-log", filepath.Join(notADir, "audit.jsonl"), "--mode", "audit", "--", "/bin/sh", "-c", "touch " + marker}, 74, "audit log"},
		{"audit log inside the scope", []string{"--audit-log", filepath.Join(w.allowed, "audit.jsonl"), "--", "/bin/true"}, 65, "--audit-log"},
		{"state dir inside the scope through a symlinked dir", []string{"--state-dir", filepath.Join(w.base, "allowed", "dir-sibling", "..", "allowed", "state"), "--", "/bin/true"}, 65, "--state-dir"},
		{"allow-runtime relative", []string{"--allow-runtime", "etc", "--", "/bin/true"}, 70, "absolute"},
		{"allow-runtime root", []string{"--allow-runtime", "/", "--", "/bin/true"}, 70, "whole filesystem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", fencetest.RelayFlag, "--scope", scope, "--base", w.base}, c.args...)
			if !strings.Contains(strings.Join(c.args, " "), "--audit-log") {
				args = append([]string{"run", fencetest.RelayFlag, "--audit-log", log, "--scope", scope, "--base", w.base}, c.args...)
			}
			code, _, stderr := runCLI(t, b.Mcpwarden, w.base, args...)
			if code != c.want {
				t.Fatalf("exit %d, want %d; stderr: %s", code, c.want, stderr)
			}
			if c.inStderr != "" && !strings.Contains(stderr, c.inStderr) {
				t.Errorf("stderr lacks %q: %s", c.inStderr, stderr)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the server ran although the audit log could not be written")
	}
	// Runs refused before start are recorded too.
	var refused int
	for _, r := range readRecords(t, log) {
		if r.Launch != nil && r.Launch.ExitReason == "start_failed" && r.Launch.ExitStatus == -1 {
			refused++
		}
	}
	if refused < 2 {
		t.Errorf("%d refused runs recorded, want at least 2 (command not found, bad interpreter)", refused)
	}
}

// TestSignalForwarding: SIGTERM to the launcher reaches the server, and the
// launcher exits with the server's status.
func TestSignalForwarding(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Fatal("ping")
	}
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.Wait(); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d; stderr %s", code, 128+int(syscall.SIGTERM), s.Stderr())
	}
}

// TestScopeCheckOutput: text and JSON show the canonical scope, its hash and
// the ruleset, and never grant more than the scope plus the runtime.
func TestScopeCheckOutput(t *testing.T) {
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed", "allowed/a.txt"}, "network": map[string]any{"connect_tcp": []int{443}}})
	code, out, stderr := runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base, "--json", "--", b.Naive)
	if code != 0 && code != 69 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Scope struct {
			ScopeID      string `json:"scope_id"`
			AllowedPaths []struct{ Path, Kind string }
		} `json:"scope"`
		ScopeHash string `json:"scope_hash"`
		Ruleset   struct {
			Rules []struct {
				Path   string   `json:"path"`
				Kind   string   `json:"kind"`
				Access []string `json:"access"`
				Origin string   `json:"origin"`
			} `json:"rules"`
			ConnectTCP   []int `json:"connect_tcp"`
			BlockIOUring bool  `json:"block_io_uring"`
		} `json:"ruleset"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if !strings.HasPrefix(rep.ScopeHash, "sha256:") || len(rep.ScopeHash) != 71 {
		t.Errorf("scope_hash %q", rep.ScopeHash)
	}
	if len(rep.Ruleset.ConnectTCP) != 1 || rep.Ruleset.ConnectTCP[0] != 443 || !rep.Ruleset.BlockIOUring {
		t.Errorf("network/io_uring: %+v", rep.Ruleset)
	}
	var sawScopeDir, sawFile, sawExe bool
	for _, r := range rep.Ruleset.Rules {
		switch {
		case r.Path == w.allowed:
			sawScopeDir = r.Kind == "dir" && strings.Join(r.Access, ",") == "read_file,read_dir"
		case r.Path == w.deep1:
			sawFile = r.Kind == "file" && strings.Join(r.Access, ",") == "read_file"
		case r.Path == b.Naive:
			sawExe = strings.Contains(strings.Join(r.Access, ","), "execute")
		}
		if r.Path == "/" || r.Path == "/etc" || r.Path == w.base || strings.HasPrefix(w.base, r.Path+"/") {
			t.Errorf("ruleset grants %s wholesale", r.Path)
		}
		if r.Origin == "scope" && strings.Contains(strings.Join(r.Access, ","), "execute") {
			t.Errorf("scope path %s gets execute", r.Path)
		}
	}
	if !sawScopeDir || !sawFile || !sawExe {
		t.Errorf("ruleset misses scope dir (%v), scope file (%v) or server exe (%v): %s", sawScopeDir, sawFile, sawExe, out)
	}
	code, text, _ := runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base)
	if (code != 0 && code != 69) || !strings.Contains(text, rep.ScopeHash) || !strings.Contains(text, w.allowed) {
		t.Errorf("text output (exit %d): %s", code, text)
	}
}

// mcpCall sends one JSON-RPC request and returns the text of its result and
// whether it was an error.
func mcpCall(t *testing.T, s *fencetest.Session, id int, method string, params any) (string, bool) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := s.Send(append(msg, '\n')); err != nil {
		t.Fatal(err)
	}
	for {
		line, ok := s.ReadLine(30 * time.Second)
		if !ok {
			t.Fatalf("no answer to %s; stderr: %s", method, s.Stderr())
		}
		var resp struct {
			ID     any `json:"id"`
			Result struct {
				IsError bool `json:"isError"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &resp); err != nil {
			t.Fatalf("bad JSON from server: %q", line)
		}
		if resp.ID != float64(id) {
			continue
		}
		var sb strings.Builder
		for _, c := range resp.Result.Content {
			sb.WriteString(c.Text)
		}
		return sb.String(), resp.Result.IsError || resp.Error != nil
	}
}

// TestFilesystemServerWriteUnderFence: with a write scope the real server
// creates, edits and moves files inside, and the kernel refuses writes
// outside even where the server's own directory list would allow them.
func TestFilesystemServerWriteUnderFence(t *testing.T) {
	fencetest.RequireFence(t)
	fsServer := fencetest.FilesystemServer(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	// The server may write the scope dir and, by its own rules, the sibling.
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, Command: []string{"node", fsServer, w.allowed, w.sibling}})
	if _, isErr := mcpCall(t, s, 1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test", "version": "1"}}); isErr {
		t.Fatalf("initialize failed: %s", s.Stderr())
	}
	if err := s.Send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	call := func(id int, tool string, args map[string]any) (string, bool) {
		return mcpCall(t, s, id, "tools/call", map[string]any{"name": tool, "arguments": args})
	}
	steps := []struct {
		tool    string
		args    map[string]any
		wantErr bool
	}{
		{"write_file", map[string]any{"path": filepath.Join(w.allowed, "new.txt"), "content": "written"}, false},
		{"edit_file", map[string]any{"path": w.deep1, "edits": []map[string]string{{"oldText": "inside", "newText": "edited"}}}, false},
		{"create_directory", map[string]any{"path": filepath.Join(w.allowed, "made")}, false},
		{"move_file", map[string]any{"source": filepath.Join(w.allowed, "new.txt"), "destination": filepath.Join(w.allowed, "made", "new.txt")}, false},
		{"write_file", map[string]any{"path": filepath.Join(w.sibling, "planted.txt"), "content": "x"}, true},
		{"edit_file", map[string]any{"path": filepath.Join(w.sibling, "s.txt"), "edits": []map[string]string{{"oldText": "SIBLING", "newText": "OWNED"}}}, true},
	}
	for i, st := range steps {
		got, isErr := call(10+i, st.tool, st.args)
		if isErr != st.wantErr {
			t.Errorf("%s %v: error=%v (%q), want error=%v", st.tool, st.args, isErr, got, st.wantErr)
		}
	}
	s.Close()
	if b, _ := os.ReadFile(filepath.Join(w.allowed, "made", "new.txt")); string(b) != "written" {
		t.Errorf("moved file: %q", b)
	}
	if b, _ := os.ReadFile(w.deep1); string(b) != "edited" {
		t.Errorf("edited file: %q", b)
	}
	if _, err := os.Stat(filepath.Join(w.sibling, "planted.txt")); err == nil {
		t.Error("the server wrote outside the scope")
	}
	if b, _ := os.ReadFile(filepath.Join(w.sibling, "s.txt")); string(b) != "SIBLING-SECRET-42" {
		t.Errorf("sibling file changed: %q", b)
	}
}

// TestPythonServerUnderFence: a python script server starts under the fence
// (standard library granted by the runtime profile) and is still fenced.
func TestPythonServerUnderFence(t *testing.T) {
	fencetest.RequireFence(t)
	testenv.RequireFile(t, "/usr/bin/python3", "apt-get install python3")
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	script := filepath.Join(t.TempDir(), "srv.py")
	src := "import sys, json\nfor line in sys.stdin:\n    req = json.loads(line)\n    try:\n        print(json.dumps({'ok': True, 'data': open(req['path']).read()}), flush=True)\n    except OSError as e:\n        print(json.dumps({'ok': False, 'errno': 'EACCES' if e.errno == 13 else 'ENOENT' if e.errno == 2 else 'EROFS' if e.errno == 30 else str(e.errno)}), flush=True)\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, Command: []string{"/usr/bin/python3", script}})
	runCases(t, s, []fenceCase{
		{name: "read inside", req: map[string]any{"op": "read", "path": w.deep1}, wantOK: true, data: "inside"},
		{name: "read outside", req: map[string]any{"op": "read", "path": w.secret}, errno: []string{"EACCES"}},
		{name: "read shadow", req: map[string]any{"op": "read", "path": "/etc/shadow"}, errno: []string{"EACCES"}},
	})
}

// TestClientGoneStopsServer: when the client stops reading (its end of
// stdout closed), the launcher is not killed by SIGPIPE: it stops the
// server and still writes the exit record.
func TestClientGoneStopsServer(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(b.Mcpwarden, "run", fencetest.RelayFlag, "--scope", scope, "--base", w.base, "--audit-log", log, "--", b.Naive)
	cmd.Dir = w.base
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	if _, err := stdin.Write([]byte(`{"op":"ping"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 256)
	if _, err := outR.Read(line); err != nil {
		t.Fatal(err)
	}
	outR.Close() // the client stops reading; stdin stays open
	for i := 0; i < 3; i++ {
		_, _ = stdin.Write([]byte(`{"op":"ping"}` + "\n"))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the launcher kept running after its client went away")
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("the launcher died of %v", ws.Signal())
	}
	recs := readRecords(t, log)
	if len(recs) != 2 || recs[1].Launch.Phase != "exit" {
		t.Fatalf("want start and exit records, got %+v", recs)
	}
}

var update = flag.Bool("update", false, "rewrite golden files")

// TestScopeCheckGolden pins the text output of 'scope check' (paths, hash
// and time replaced by placeholders). Run with -update to accept a change.
func TestScopeCheckGolden(t *testing.T) {
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{
		"scope_id": "golden", "allowed_paths": []string{"allowed", "allowed/a.txt"}, "access_mode": "write",
		"tool_allowlist": []string{"write_file", "read_text_file"}, "approval": "required_for_write",
		"network": map[string]any{"connect_tcp": []int{443, 80}},
	})
	code, out, stderr := runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base)
	if code != 0 && code != 69 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out = strings.ReplaceAll(out, w.base, "$BASE")
	out = regexp.MustCompile(`sha256:[0-9a-f]{64}`).ReplaceAllString(out, "sha256:$$HASH")
	out = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).ReplaceAllString(out, "$$TIME")
	golden := filepath.Join("testdata", "scope-check.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if out != string(want) {
		t.Errorf("scope check output changed (run with -update to accept):\n--- got\n%s\n--- want\n%s", out, want)
	}
}

// TestNodeServerFromTheProfileCache: `mcpwarden run` keeps the runtime
// profile's walks in STATE_DIR/cache (0600 files of this user in a 0700
// directory): the first launch of the npm filesystem server writes them,
// the second is served from them (no file rewritten) and the server still
// reads inside its scope and is denied outside it.
func TestNodeServerFromTheProfileCache(t *testing.T) {
	fencetest.RequireFence(t)
	fsServer := fencetest.FilesystemServer(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	state := filepath.Join(t.TempDir(), "state")
	cache := filepath.Join(state, "cache")
	inodes := func() map[string]uint64 {
		files, _ := filepath.Glob(filepath.Join(cache, "native-*.scan"))
		m := map[string]uint64{}
		for _, f := range files {
			st, err := os.Lstat(f)
			if err != nil || st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
				t.Fatalf("cache file %s: %v %v; want a regular 0600 file", f, st.Mode(), err)
			}
			m[f] = st.Sys().(*syscall.Stat_t).Ino
		}
		return m
	}
	launch := func() {
		t.Helper()
		s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: filepath.Join(state, "audit.jsonl"),
			ExtraArgs: []string{"--state-dir", state}, Command: []string{"node", fsServer, w.base}})
		for i, m := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":` + strconvQuote(w.deep1) + `}}}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":` + strconvQuote(filepath.Join(w.sibling, "s.txt")) + `}}}`,
		} {
			if err := s.Send([]byte(m + "\n")); err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				continue
			}
			line, ok := s.ReadLine(60 * time.Second)
			if !ok {
				t.Fatalf("no answer to message %d; stderr: %s", i, s.Stderr())
			}
			switch i {
			case 2:
				if !strings.Contains(line, `"inside"`) || strings.Contains(line, `"isError":true`) {
					t.Fatalf("read inside: %s", line)
				}
			case 3:
				if strings.Contains(line, "SECRET-42") || !strings.Contains(line, "EACCES") {
					t.Fatalf("read outside the scope: %s", line)
				}
			}
		}
		if code := s.Close(); code != 0 {
			t.Fatalf("exit %d; stderr %s", code, s.Stderr())
		}
	}
	launch()
	first := inodes()
	if len(first) < 2 { // node's libraries and the node_modules walk
		t.Fatalf("cache after the first launch: %v", first)
	}
	if st, err := os.Stat(cache); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir: %v %v; want 0700", st.Mode(), err)
	}
	launch()
	if second := inodes(); !maps.Equal(first, second) {
		t.Fatalf("the second launch rewrote the cache: %v, then %v", first, second)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
