package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
)

// privateRun is a mount namespace of its own with a fresh /run, so a
// daemon can serve the default socket (/run/mcpwarden/daemon.sock) without
// any other process on this shared host seeing it. A holder process keeps
// the namespace alive; commands enter it with nsenter.
type privateRun struct{ holder *exec.Cmd }

func newPrivateRun(t *testing.T) *privateRun {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare")
	testenv.RequireCommand(t, "nsenter")
	h := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", "mount -t tmpfs -o mode=0755 tmpfs /run && echo ready && exec sleep 3600")
	out, _ := h.StdoutPipe()
	h.Stderr = os.Stderr
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Process.Kill(); h.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("private /run: %q %v", line, err)
	}
	return &privateRun{holder: h}
}

// command runs name args inside the namespace.
func (p *privateRun) command(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--mount=/proc/" + strconv.Itoa(p.holder.Process.Pid) + "/ns/mnt", "--", name}, args...)...)
	cmd.Env = env
	return cmd
}

// TestZeroConfigDaemon: with only --scope FILE -- CMD on the command line
// and the path key in the configuration file, a run registers with the
// daemon at the default socket on its own; a run whose key is not the
// daemon's is refused (78); 'off' runs unregistered; a daemon that is gone
// but left its socket refuses the run (fail closed); a daemon that stopped
// cleanly is no daemon.
func TestZeroConfigDaemon(t *testing.T) {
	pr := newPrivateRun(t)
	bin := mcpwardenBin(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	naive := filepath.Join(root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()

	daemonState, runState := filepath.Join(root, "daemon-state"), filepath.Join(root, "run-state")
	base := filepath.Join(root, "base")
	scope := filepath.Join(root, "scope.json")
	cfgDir := filepath.Join(root, "etc")
	cfgFile := filepath.Join(cfgDir, "config.json")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(base, "ws", "a.txt"): "a",
		scope:                              `{"scope_id":"zero-config","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["x"],"approval":"none","expires_after_minutes":10}`,
		cfgFile:                            fmt.Sprintf(`{"state_dir":%q,"path_key":%q}`, runState, filepath.Join(daemonState, "path.key")),
	})
	os.Chmod(cfgFile, 0o600)
	env := append(cleanEnv(t), "MCPWARDEN_CONFIG="+cfgFile)

	dlog := &testenv.LockedBuffer{}
	pintest.Unload(t, daemonState)
	daemon := pr.command(env, bin, "daemon", "--nats", ns.ClientURL(), "--state-dir", daemonState, "--no-crosscheck")
	daemon.Stderr = dlog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer daemon.Process.Kill()
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(dlog.String(), "daemon started"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", dlog.String())
		}
	}
	if !strings.Contains(dlog.String(), client.DefaultSocket) {
		t.Fatalf("daemon does not serve the default socket:\n%s", dlog.String())
	}

	// run starts `mcpwarden run --scope FILE [extra] -- naive` with an empty
	// stdin and returns its exit code, stderr and run id.
	run := func(extraEnv []string, extra ...string) (int, string, string) {
		t.Helper()
		auditLog := filepath.Join(root, "audit-"+strconv.Itoa(len(dlog.String()))+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".jsonl")
		args := append([]string{"run", "--scope", scope, "--base", base, "--proxy=false", "--audit-log", auditLog}, extra...)
		cmd := pr.command(append(append([]string{}, env...), extraEnv...), bin, append(args, "--", naive)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		runID := ""
		if b, err := os.ReadFile(auditLog); err == nil {
			var e schema.Event
			if json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &e) == nil {
				runID = e.RunID
			}
		}
		return code, stderr.String(), runID
	}
	registered := func(runID string) bool {
		return runID != "" && strings.Contains(dlog.String(), "run registered") && strings.Contains(dlog.String(), "run_id="+runID)
	}

	code, stderr, id := run(nil)
	if code != 0 || !registered(id) {
		t.Fatalf("zero-config run: exit %d, registered %v\nrun: %s\ndaemon: %s", code, registered(id), stderr, dlog.String())
	}

	code, stderr, _ = run([]string{"MCPWARDEN_PATH_KEY=" + filepath.Join(root, "other.key")})
	if code != cli.ExitConfig || !strings.Contains(stderr, "not the daemon's") {
		t.Errorf("run with another path key: exit %d, want %d: %s", code, cli.ExitConfig, stderr)
	}

	code, stderr, id = run(nil, "--daemon-socket", "off")
	if code != 0 || registered(id) {
		t.Errorf("--daemon-socket off: exit %d, registered %v: %s", code, registered(id), stderr)
	}

	// A daemon killed without cleaning up leaves its socket: the run is
	// refused rather than run unobserved.
	daemon.Process.Kill()
	daemon.Wait()
	code, stderr, _ = run(nil)
	if code != cli.ExitInternal || !strings.Contains(stderr, "cannot watch it") {
		t.Errorf("run with a dead daemon's socket: exit %d, want %d: %s", code, cli.ExitInternal, stderr)
	}
	// A socket this run cannot find means no daemon on this host.
	if out, err := pr.command(env, "rm", client.DefaultSocket).CombinedOutput(); err != nil {
		t.Fatalf("rm: %v %s", err, out)
	}
	if code, stderr, _ = run(nil); code != 0 {
		t.Errorf("run with no daemon: exit %d: %s", code, stderr)
	}
}
