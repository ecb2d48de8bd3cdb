package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// mcpwardenBin returns the binary under test (with its fence helper).
func mcpwardenBin(t *testing.T) string {
	t.Helper()
	return testenv.Mcpwarden(t)
}

// TestRunApproveRevoke drives `mcpwarden run` (proxy on, real fence, real
// filesystem server) with a write that needs approval, approves it with
// `mcpwarden approve`, then revokes the scope with `mcpwarden approve
// --revoke` and checks the run ends. With a state dir of over 150 bytes
// too: the approval socket's path is then over the 107 bytes a socket
// address holds, and is bound and reached through its directory
// (internal/unixsock). Before, such a state dir was refused with exit 71
// ("choose a state dir of at most 59 bytes"), and tests whose state dir
// was a t.TempDir() under a TMPDIR of over 9 bytes failed for it.
func TestRunApproveRevoke(t *testing.T) {
	testenv.RequireRoot(t)
	node := testenv.RequireCommand(t, "node")
	fsServer, _ := filepath.Abs("../../deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	testenv.RequireFile(t, fsServer, "run scripts/test-env.sh install-npm")
	bin := mcpwardenBin(t)
	for _, c := range []struct {
		name string
		long bool
	}{{"short state dir", false}, {"state dir of over 150 bytes", true}} {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			if c.long {
				state = filepath.Join(state, strings.Repeat("s", 150))
				if err := os.Mkdir(state, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			runApproveRevoke(t, bin, node, fsServer, state)
		})
	}
}

func runApproveRevoke(t *testing.T, bin, node, fsServer, state string) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(filepath.Join(base, "work"), 0o755)
	scope := filepath.Join(state, "scope.json")
	os.WriteFile(scope, []byte(`{"scope_id":"approve-e2e","allowed_paths":["work"],"resource_refs":[],"access_mode":"write",
		"tool_allowlist":["write_file","read_text_file"],"approval":"required_for_write","expires_after_minutes":10}`), 0o600)

	cmd := exec.Command(bin, "run", "--scope", scope, "--base", base, "--state-dir", state, "--approval-timeout", "60s", "--", node, fsServer)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waiting := make(chan [2]string, 4)
	go func() {
		re := regexp.MustCompile(`call waiting for approval"? run_id=(\S+) op_id=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				waiting <- [2]string{m[1], m[2]}
			}
		}
	}()
	answers := make(chan map[string]json.RawMessage, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["id"] != nil && m["method"] == nil {
				answers <- m
			}
		}
		close(answers)
	}()
	send := func(s string) { io.WriteString(stdin, s+"\n") }
	next := func() map[string]json.RawMessage {
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatal("the run ended early")
			}
			return m
		case <-time.After(2 * time.Minute):
			t.Fatal("no answer from mcpwarden run")
		}
		return nil
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	target := filepath.Join(base, "work", "approved.txt")
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file","arguments":{"path":%q,"content":"ok"}}}`, target))
	var ids [2]string
	select {
	case ids = <-waiting:
	case <-time.After(2 * time.Minute):
		t.Fatal("the write never waited for approval")
	}
	out, err := exec.Command(bin, "approve", "--state-dir", state, "--list", ids[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ids[1]) || !strings.Contains(string(out), "write_file") || !strings.Contains(string(out), target) {
		t.Fatalf("approve --list: %v\n%s", err, out)
	}
	// Without a run id: every pending call on the host, with its run.
	out, err = exec.Command(bin, "approve", "--state-dir", state, "--list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), ids[0]+"  "+ids[1]) || !strings.Contains(string(out), `path "`+target+`"`) {
		t.Fatalf("approve --list (all runs): %v\n%s", err, out)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("written before approval")
	}
	if out, err := exec.Command(bin, "approve", "--state-dir", state, ids[0], ids[1]).CombinedOutput(); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	res := next()
	if strings.Contains(string(res["result"]), `"isError":true`) {
		t.Fatalf("approved write failed: %s", res["result"])
	}
	if b, _ := os.ReadFile(target); string(b) != "ok" {
		t.Fatalf("file after approval = %q", b)
	}
	if out, err := exec.Command(bin, "approve", "--state-dir", state, "--revoke", ids[0]).CombinedOutput(); err != nil {
		t.Fatalf("approve --revoke: %v\n%s", err, out)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end after revocation")
	}
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitScopeEnded {
		t.Errorf("exit %d after revocation, want %d", code, cli.ExitScopeEnded)
	}
	log, _ := os.ReadFile(filepath.Join(state, "audit.jsonl"))
	if !strings.Contains(string(log), `"exit_reason":"scope_revoked"`) {
		t.Errorf("no exit record with exit_reason scope_revoked:\n%s", log)
	}
	if !strings.Contains(string(log), `"approval":"approved"`) || strings.Contains(string(log), base) {
		t.Fatalf("audit log lacks the approved decision or holds a full path:\n%s", log)
	}
}

// TestRunFailedStartLeavesNoApprovalSocket: the run's approval socket is
// made from the go-ahead on, while the server starts (so that the proxy
// does not wait for it after the start); a server that then cannot start
// (the kernel refuses its executable: an ELF for another machine) ends the
// run with exit 70 and leaves no socket behind. It fails when the
// launcher does not call Abandon on a failed start.
func TestRunFailedStartLeavesNoApprovalSocket(t *testing.T) {
	bin := mcpwardenBin(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(base, "ws", "a.txt"): "x",
		filepath.Join(base, "scope.json"):  `{"scope_id":"nostart","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["x"],"approval":"none","expires_after_minutes":5}`,
	})
	srv := filepath.Join(base, "srv")
	if err := testenv.GoBuild(srv, "github.com/mcpwarden/mcpwarden/internal/mcpecho", "CGO_ENABLED=0"); err != nil {
		t.Fatal(err)
	}
	// e_machine (offset 18) = EM_AARCH64 (183): execve refuses it with
	// ENOEXEC, after the profile, the plan and the go-ahead.
	f, err := os.OpenFile(srv, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{183, 0}, 18); err != nil {
		t.Fatal(err)
	}
	f.Close()
	state := t.TempDir()
	cmd := exec.Command(bin, "run", "--scope", filepath.Join(base, "scope.json"), "--base", base, "--state-dir", state, "--", srv)
	cmd.Dir = base
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitServerStart {
		t.Fatalf("a server the kernel cannot exec: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "exec") {
		t.Fatalf("the failure is not the server's exec:\n%s", out)
	}
	entries, err := os.ReadDir(filepath.Join(state, "approvals"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the approvals dir: %s", e.Name())
	}
}
