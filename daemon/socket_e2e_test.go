package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestFencedServerCannotReachTheDaemonSocket: a non-root launcher in the
// daemon's --socket-group runs its server as its own uid, with the group's
// membership. In enforce mode that server must not reach the daemon's
// socket (it could register runs of its own or describe its launcher's):
// the fence refuses the connect, and the launcher's own registration and
// the server's allowed read still work. (In audit mode there is no fence,
// and the server is its launcher's user: docs/daemon.md.)
func TestFencedServerCannotReachTheDaemonSocket(t *testing.T) {
	testenv.RequireRoot(t)
	const group = 4246
	tr := testenv.NewTree(t, testenv.ReadScope("socket-reach"))
	// The user must reach the binaries, the tree and its own state.
	for d := tr.Root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{tr.Base, tr.WS} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{tr.Inside, tr.Scope} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	binDir := filepath.Join(tr.Root, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := testenv.Mcpwarden(t)
	for _, name := range []string{"mcpwarden", "mcpwarden-pipeline", "mcpwarden-exec", "mcpwarden-fence"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(src), name))
		if err != nil {
			t.Fatalf("%v (run make build)", err)
		}
		if err := os.WriteFile(filepath.Join(binDir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(binDir, "mcpwarden")
	naive := filepath.Join(binDir, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")

	pintest.Unload(t, tr.State)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemon := exec.CommandContext(ctx, bin, "daemon", "--socket", tr.Socket, "--socket-group", fmt.Sprint(group), "--state-dir", tr.State,
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--no-crosscheck")
	dlog := &testenv.LockedBuffer{}
	daemon.Stdout, daemon.Stderr = dlog, dlog
	daemon.Cancel = func() error { return daemon.Process.Signal(os.Interrupt) }
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = daemon.Wait() })
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(dlog.String(), "daemon started"); {
		if time.Now().After(deadline) || daemon.ProcessState != nil {
			t.Fatalf("the daemon did not start: %s", dlog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The user's own state, with the daemon's path key (a run with another
	// key is refused).
	ustate := filepath.Join(tr.Root, "ustate")
	key, err := os.ReadFile(filepath.Join(tr.State, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.WriteFiles(t, map[string]string{filepath.Join(ustate, "path.key"): string(key)})
	for _, p := range []string{ustate, filepath.Join(ustate, "path.key")} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ustate, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ustate, "path.key"), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", tr.Socket, "--state-dir", ustate, "--path-key", filepath.Join(ustate, "path.key"),
		"--scope", tr.Scope, "--base", tr.Base, "--", naive)
	cmd.Dir = tr.Base
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + ustate}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{group}}}
	dial, _ := json.Marshal(map[string]string{"op": "unix", "path": tr.Socket})
	answers, log := testenv.RunNaive(t, cmd, string(dial), testenv.NaiveRead(tr.Inside))
	if len(answers) != 2 {
		t.Fatalf("answers %q (run log: %s)", answers, log)
	}
	if strings.Contains(answers[0], `"ok":true`) {
		t.Errorf("the fenced server of a socket-group member connected to the daemon's socket: %s", answers[0])
	}
	if !strings.Contains(answers[1], `"ok":true`) {
		t.Errorf("the server's allowed read failed (was the run registered?): %s (run log: %s)", answers[1], log)
	}
	if t.Failed() {
		t.Logf("daemon log: %s", dlog.String())
	}
}
