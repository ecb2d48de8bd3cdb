package approval

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestApproveDenyListRevoke(t *testing.T) {
	dir := t.TempDir()
	var revoked atomic.Int32
	s, err := Listen(dir, "run1", nil, func() { revoked.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)

	st, err := os.Stat(s.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, %v; want 0600", st.Mode(), err)
	}
	if st, _ := os.Stat(filepath.Dir(s.Path())); st.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode = %v, want 0700", st.Mode())
	}

	ch1 := s.Register(Pending{OpID: "op1", Tool: "write_file", Class: "destructive"})
	ch2 := s.Register(Pending{OpID: "op2", Tool: "edit_file", Class: "destructive"})
	resp, err := Send(ctx, dir, "run1", Request{Action: ActionList})
	if err != nil || len(resp.Pending) != 2 {
		t.Fatalf("list = %+v, %v", resp, err)
	}
	if _, err := Send(ctx, dir, "run1", Request{Action: ActionApprove, OpID: "op1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Send(ctx, dir, "run1", Request{Action: ActionDeny, OpID: "op2"}); err != nil {
		t.Fatal(err)
	}
	if v := <-ch1; !v {
		t.Fatal("op1 not approved")
	}
	if v := <-ch2; v {
		t.Fatal("op2 not denied")
	}
	if _, err := Send(ctx, dir, "run1", Request{Action: ActionApprove, OpID: "op1"}); err == nil {
		t.Fatal("a decided op was approved twice")
	}
	if _, err := Send(ctx, dir, "run1", Request{Action: ActionRevoke}); err != nil || revoked.Load() != 1 {
		t.Fatalf("revoke: %v (called %d)", err, revoked.Load())
	}
	if _, err := Send(ctx, dir, "../run1", Request{Action: ActionList}); err == nil {
		t.Fatal("path traversal in run id accepted")
	}
	if _, err := Send(ctx, dir, "other", Request{Action: ActionList}); err == nil {
		t.Fatal("connected to a run that does not exist")
	}
}

func TestOtherUserCannotConnect(t *testing.T) {
	testenv.RequireRoot(t)
	py := "/usr/bin/python3" // the system one: a per-user pyenv shim is not executable by nobody
	testenv.RequireFile(t, py, "apt-get install python3")
	dir := t.TempDir()
	// Let nobody reach the approvals dir itself, so only its own 0700 mode
	// and the socket's 0600 keep them out.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Listen(dir, "run2", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go s.Serve(ctx)
	// The server may answer a refused peer and close before the request is
	// sent, so a failed send is ignored and the answer read anyway.
	script := `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("refused", e.errno); sys.exit(0)
try:
    s.sendall(b'{"action":"list"}\n')
except OSError:
    pass
print(s.recv(4096).decode())`
	cmd := exec.CommandContext(ctx, py, "-c", script, s.Path())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python as nobody: %v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), "refused") {
		t.Fatalf("user nobody reached the approval socket: %s", out)
	}
	// Even with the file modes opened up, the peer credential check refuses.
	os.Chmod(filepath.Dir(s.Path()), 0o755)
	os.Chmod(s.Path(), 0o666)
	cmd = exec.CommandContext(ctx, py, "-c", script, s.Path())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python as nobody: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "only root or the user running the launcher") {
		t.Fatalf("peer check did not refuse user nobody: %s", out)
	}
}

// TestRequestsAreReadStrictly sends hostile request lines: a request read
// with case folding or "last key wins" could approve what the operator's
// tool meant to deny.
func TestRequestsAreReadStrictly(t *testing.T) {
	dir := t.TempDir()
	s, err := Listen(dir, "run3", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)
	ch := s.Register(Pending{OpID: "op1", Tool: "write_file", Class: "destructive"})
	for _, line := range []string{
		`{"action":"deny","op_id":"op1","ACTION":"approve"}`,
		`{"action":"approve","op_id":"op1","action":"deny"}`,
		`{"Action":"approve","op_id":"op1"}`,
		`{"action":"approve","OP_ID":"op1"}`,
		`{"action":"approve","op_id":"op1","extra":true}`,
		`{"action":"approve","op_id":"op1"} {"action":"deny","op_id":"op1"}`,
		`{"action":"appr\ud800ove","op_id":"op1"}`,
		`["approve","op1"]`,
	} {
		resp := rawRequest(t, s.Path(), line)
		if resp.OK || resp.Error == "" {
			t.Errorf("request %s accepted: %+v", line, resp)
		}
	}
	select {
	case v := <-ch:
		t.Fatalf("a refused request decided the call (approved=%v)", v)
	default:
	}
	if resp := rawRequest(t, s.Path(), `{"action":"approve","op_id":"op1"}`); !resp.OK {
		t.Fatalf("a plain approval was refused: %+v", resp)
	}
	if v := <-ch; !v {
		t.Fatal("op1 not approved")
	}
}

func rawRequest(t *testing.T, path, line string) Response {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	out, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("read answer to %s: %v", line, err)
	}
	var r Response
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("answer %q: %v", out, err)
	}
	return r
}

// TestListAll lists the pending calls of every run in a state directory,
// skipping the stale socket of a run that is gone, with run ids and paths.
func TestListAll(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var servers []*Server
	for _, run := range []string{"run-a", "run-b"} {
		s, err := Listen(dir, run, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		go s.Serve(ctx)
		servers = append(servers, s)
	}
	// A stale socket: bound once, its listener gone.
	stale, err := Listen(dir, "run-gone", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale.ln.SetUnlinkOnClose(false)
	stale.ln.Close()
	many := make([]string, MaxPendingPaths+5)
	for i := range many {
		many[i] = "/work/f" + strings.Repeat("x", i)
	}
	servers[0].Register(Pending{OpID: "op1", Tool: "write_file", Class: "destructive", Paths: []string{"/work/a.txt"}})
	servers[1].Register(Pending{OpID: "op2", Tool: "move_file", Class: "destructive", Paths: many})
	got, errs := ListAll(ctx, dir)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if len(got) != 2 || got[0].RunID != "run-a" || got[0].OpID != "op1" || got[0].Paths[0] != "/work/a.txt" ||
		got[1].RunID != "run-b" || len(got[1].Paths) != MaxPendingPaths {
		t.Fatalf("ListAll = %+v", got)
	}
}

// TestLongStateDir: under a state dir of any length (here over 150
// bytes, so the socket's path is over the 107 bytes a socket address
// holds) the run's socket is made, answers Send and ListAll, and Close
// removes it. Before, such a state dir was refused ("choose a state dir
// of at most 59 bytes"). A run id too long for a socket's name is still
// refused by name, before anything listens.
func TestLongStateDir(t *testing.T) {
	runID := strings.Repeat("a", 32)
	for _, n := range []int{1, 59, 60, 150, 250} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, strings.Repeat("d", n))
			s, err := Listen(state, runID, nil, nil)
			if err != nil {
				t.Fatalf("Listen under a state dir of %d bytes: %v", len(state), err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go s.Serve(ctx)
			s.Register(Pending{OpID: "op1", Tool: "write_file", Class: "destructive"})
			resp, err := Send(ctx, state, runID, Request{Action: ActionList})
			if err != nil || len(resp.Pending) != 1 || resp.Pending[0].OpID != "op1" {
				t.Fatalf("Send list under a state dir of %d bytes = %+v, %v", len(state), resp, err)
			}
			got, errs := ListAll(ctx, state)
			if len(errs) != 0 || len(got) != 1 || got[0].RunID != runID {
				t.Fatalf("ListAll = %+v, %v", got, errs)
			}
			s.Close()
			if _, err := os.Lstat(s.Path()); !os.IsNotExist(err) {
				t.Errorf("the socket is left after Close: %v", err)
			}
		})
	}
	long := strings.Repeat("r", 100)
	if _, err := SocketPath("/"+strings.Repeat("d", 100), long); err == nil || !strings.Contains(err.Error(), "too long for its approval socket") {
		t.Errorf("SocketPath with a run id of 100 bytes under a long state dir = %v, want a refusal", err)
	}
	if _, err := Listen(filepath.Join(t.TempDir(), strings.Repeat("d", 100)), long, nil, nil); err == nil {
		t.Error("Listen with a run id of 100 bytes under a long state dir succeeded")
	}
}

// TestListenLeavesTheUmaskAlone: the launcher makes the approval socket
// while its other goroutines create files and directories (from the
// go-ahead on), so Listen must not touch the process-wide umask. A
// directory made under Listen's former umask 0177 had mode 0600: no search
// bit, unusable. Directories made in a loop beside repeated Listens keep
// the mode the umask gives.
func TestListenLeavesTheUmaskAlone(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	state, other := t.TempDir(), t.TempDir()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 300; i++ {
			s, err := Listen(state, "run-umask", nil, nil)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		}
	}()
	var bad []string
	for i := 0; ; i++ {
		select {
		case <-done:
			if len(bad) > 0 {
				t.Fatalf("%d of %d directories made beside Listen lost their mode 0755, e.g. %s", len(bad), i, bad[0])
			}
			return
		default:
		}
		p := filepath.Join(other, strconv.Itoa(i))
		if err := os.Mkdir(p, 0o777); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o755 {
			bad = append(bad, fmt.Sprintf("%v (%v)", st.Mode(), err))
		}
	}
}
