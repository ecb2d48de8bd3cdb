package explain

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestSingleHostEndToEnd is the single host with no ClickHouse, with the
// real binaries: `mcpwarden daemon` with its embedded NATS (credentials
// generated into its state dir), the naive server under `mcpwarden run
// --daemon-socket` in enforce and audit mode (its records go through the
// daemon), then:
//   - `mcpwarden events` as root shows the run, and each finding
//     provisional before it is final;
//   - as nobody, `events` cannot read and `run --nats` cannot publish: the
//     embedded server takes only its own users;
//   - `mcpwarden why RUN_ID --scope` tells the denied and the escaped
//     paths and what would grant them.
func TestSingleHostEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	// Its daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	bin := testenv.Mcpwarden(t)
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	naive := filepath.Join(dir, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	state, socket := filepath.Join(dir, "state"), filepath.Join(dir, "run", "daemon.sock")
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	base := filepath.Join(dir, "base")
	inside, outside := filepath.Join(base, "ws", "a.txt"), filepath.Join(dir, "outside", "report.txt")
	scope := filepath.Join(dir, "scope.json")
	testenv.WriteFiles(t, map[string]string{
		inside:  "inside",
		outside: "OUTSIDE",
		scope:   `{"scope_id":"why-e2e","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`,
	})

	pintest.Unload(t, state)
	daemon := exec.Command(bin, "daemon", "--socket", socket, "--state-dir", state, "--nats-listen", strings.TrimPrefix(natsURL, "nats://"),
		"--enable-audit", "--crosscheck-window", "3s")
	dlog := &testenv.LockedBuffer{}
	daemon.Stderr = dlog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = daemon.Process.Signal(os.Interrupt)
		_ = daemon.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", dlog.String())
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(dlog.String(), "daemon started") {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", dlog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, f := range []string{"daemon.nk", "collector.nk", "reader.nk"} {
		st, err := os.Stat(filepath.Join(state, "nats-auth", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st.Mode(), err)
		}
	}

	runOnce := func(mode string, reqs ...string) {
		t.Helper()
		// --no-namespaces: in its own mount namespace the server would not
		// even see the path outside the base (ENOENT, no denial to explain),
		// and the daemon's view of a namespaced run is another matter.
		run := exec.Command(bin, "run", "--proxy=false", "--no-namespaces", "--mode", mode, "--daemon-socket", socket,
			"--scope", scope, "--base", base, "--state-dir", state, "--", naive)
		run.Dir = base
		testenv.RunNaive(t, run, reqs...)
	}
	runOnce("enforce", testenv.NaiveRead(inside), testenv.NaiveRead(outside))
	runOnce("audit", testenv.NaiveRead(outside))

	events := func(t *testing.T) []schema.Event {
		t.Helper()
		return testenv.Events(t, bin, "--nats", natsURL, "--state-dir", state)
	}
	// Wait for the final findings of both runs; each came provisional first.
	var runs []string
	var evs []schema.Event
	deadline = time.Now().Add(3 * time.Minute)
	for {
		evs = events(t)
		runs = runs[:0]
		finals := map[string]bool{}
		for _, e := range evs {
			if e.Kind == schema.KindLaunch && e.Launch.Phase == schema.PhaseStart {
				runs = append(runs, e.RunID)
			}
			if f := e.Finding; f != nil && f.Status == schema.StatusFinal && (f.Type == schema.FindingBlockedAttempt || f.Type == schema.FindingEscape) {
				finals[string(f.Type)] = true
			}
		}
		if len(runs) == 2 && finals["BLOCKED_ATTEMPT"] && finals["ESCAPE"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no final BLOCKED_ATTEMPT and ESCAPE after 3 minutes (runs %v)", runs)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, typ := range []schema.FindingType{schema.FindingBlockedAttempt, schema.FindingEscape} {
		provisional, final := -1, -1
		for i, e := range evs {
			if f := e.Finding; f != nil && f.Type == typ {
				if f.Status == schema.StatusProvisional && provisional < 0 {
					provisional = i
				}
				if f.Status == schema.StatusFinal && final < 0 {
					final = i
				}
			}
		}
		if provisional < 0 || provisional > final {
			t.Errorf("%s: provisional at %d, final at %d in the stream; want provisional first", typ, provisional, final)
		}
	}

	// Nobody: cannot read, cannot publish.
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	ev := exec.Command(bin, "events", "--json", "--nats", natsURL, "--state-dir", state)
	ev.SysProcAttr = nobody
	if out, err := ev.CombinedOutput(); err == nil || strings.Contains(string(out), `"kind"`) {
		t.Fatalf("nobody read the events (%v): %s", err, out)
	}
	// nobody's own scope and base, in a directory it may use (the test's
	// temporary directory is root's).
	home, err := os.MkdirTemp("", "mcpwarden-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	nbase, nscope := filepath.Join(home, "base"), filepath.Join(home, "scope.json")
	testenv.WriteFiles(t, map[string]string{filepath.Join(nbase, "ws", "x"): "x",
		nscope: `{"scope_id":"forged","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`})
	if err := filepath.Walk(home, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, 65534, 65534)
	}); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) (string, error) {
		c := exec.Command(bin, append([]string{"run", "--nats", natsURL}, append(args, "--scope", nscope, "--base", nbase,
			"--state-dir", filepath.Join(home, "state"), "--", "/bin/true")...)...)
		c.SysProcAttr = nobody
		c.Dir = home
		c.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
		out, err := c.CombinedOutput()
		return string(out), err
	}
	// With the host's key file named: it cannot read it.
	if out, err := asNobody("--nats-nkey", filepath.Join(state, "nats-auth", "daemon.nk")); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("nobody's run naming the host's key: %v: %s", err, out)
	}
	// Without a key: the server refuses it.
	if out, err := asNobody(); err == nil || !strings.Contains(strings.ToLower(out), "authorization violation") {
		t.Fatalf("nobody's run without a key: %v: %s", err, out)
	}
	for _, e := range events(t) {
		if e.Kind == schema.KindLaunch && !contains(runs, e.RunID) {
			t.Fatalf("a launch record of nobody's run reached the stream: %+v", e)
		}
	}

	// why, for the operator: the enforce run's denial and the audit run's
	// escape, told and with what grants them.
	for _, run := range runs {
		out, err := exec.Command(bin, "why", run, "--scope", scope, "--base", base, "--nats", natsURL, "--state-dir", state, "--json").Output()
		if err != nil {
			t.Fatalf("why %s: %v", run, err)
		}
		var rep Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("why --json: %v: %s", err, out)
		}
		told := false
		for _, it := range rep.Items {
			if it.Path == outside && strings.Contains(it.Grant, "--allow-runtime "+outside) {
				told = true
			}
		}
		if !told || rep.ScopeID != "why-e2e" {
			t.Errorf("why %s did not tell %s and its grant: %s", run, outside, out)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
