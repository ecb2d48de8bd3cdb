package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/e2etest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// stack is the real binaries around a real NATS JetStream: the daemon
// publishing to it, and `mcpwarden events` reading it back.
type stack struct {
	bin, naive, nats, socket, state, root string
	dlog                                  *testenv.LockedBuffer
	dpid                                  int // the daemon's pid, while it runs
}

func newStack(t testing.TB) *stack {
	t.Helper()
	testenv.RequireRoot(t)
	// Its daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	dir := t.TempDir()
	root, _ := filepath.EvalSymlinks(dir)
	st := &stack{bin: testenv.Mcpwarden(t), root: root, state: filepath.Join(root, "state"),
		socket: filepath.Join(root, "run", "daemon.sock"), naive: filepath.Join(root, "naiveserver")}
	testenv.MustGoBuild(t, st.naive, "./internal/naiveserver")
	// Probes a killed daemon left attached are detached when the test ends.
	pintest.Unload(t, st.state)
	st.nats = e2etest.NATS(t, filepath.Join(root, "nats"))
	return st
}

// startDaemon runs `mcpwarden daemon` until the test ends.
func (st *stack) startDaemon(t testing.TB) {
	t.Helper()
	stop := st.daemon(t)
	t.Cleanup(func() {
		if err := stop(os.Interrupt); err != nil {
			t.Errorf("daemon: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", st.dlog.String())
		}
	})
}

// daemon starts `mcpwarden daemon`, waits until it serves its socket and
// returns a function that stops it with sig and waits for it to exit.
func (st *stack) daemon(t testing.TB) (stop func(sig os.Signal) error) {
	t.Helper()
	cmd := exec.Command(st.bin, "daemon", "--socket", st.socket, "--nats", st.nats, "--state-dir", st.state, "--enable-audit", "--crosscheck-window", "1s")
	st.dlog = &testenv.LockedBuffer{}
	cmd.Stderr = st.dlog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st.dpid = cmd.Process.Pid
	exited := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop = func(sig os.Signal) error {
		once.Do(func() {
			_ = cmd.Process.Signal(sig)
			<-exited
			if sig == os.Kill {
				werr = nil // the exit status of a killed daemon says nothing
			}
		})
		return werr
	}
	t.Cleanup(func() { _ = stop(os.Kill) })
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(st.dlog.String(), "daemon started") {
		select {
		case <-exited:
			t.Fatalf("daemon exited before it started (%v):\n%s", werr, st.dlog.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", st.dlog.String())
		}
	}
	return stop
}

// events reads every stored event with `mcpwarden events --json`.
func (st *stack) events(t *testing.T) []schema.Event {
	t.Helper()
	return testenv.Events(t, st.bin, "--nats", st.nats)
}

func (st *stack) hasher(t *testing.T) *schema.PathHasher {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(st.state, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := schema.NewPathHasher(key)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRunWithDaemonEndToEnd drives the real binaries: `mcpwarden daemon`
// publishing to a real NATS JetStream, `mcpwarden run --daemon-socket`
// fencing the naive test server, and `mcpwarden events --json` reading the
// result back.
func TestRunWithDaemonEndToEnd(t *testing.T) {
	st := newStack(t)
	bin, naive, state, socket := st.bin, st.naive, st.state, st.socket
	tr := testenv.NewTreeAt(t, st.root, testenv.ReadScope("e2e"))
	base, secret, inside, scope := tr.Base, tr.Secret, tr.Inside, tr.Scope

	// A run configured with a daemon that is not there must not start.
	refused := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", socket, "--scope", scope, "--base", base, "--state-dir", state, "--", naive)
	refused.Stdin = strings.NewReader(`{"op":"read","path":"` + inside + `"}` + "\n")
	out, err := refused.CombinedOutput()
	if err == nil || strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("run started without its daemon: err=%v output=%s", err, out)
	}

	st.startDaemon(t)
	dlog := st.dlog

	// --no-namespaces: these runs test what the daemon sees of Landlock's
	// denials; with the run's mount namespace an outside path does not
	// exist for the server (ENOENT) and Landlock never sees the attempt.
	cmd := exec.Command(bin, "run", "--proxy=false", "--no-namespaces", "--daemon-socket", socket, "--scope", scope, "--base", base, "--state-dir", state, "--", naive)
	cmd.Dir = base
	run := testenv.StartNaive(t, cmd)
	if got := run.Do(testenv.NaiveRead(inside)); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("inside read: %s", got)
	}
	if got := run.Do(testenv.NaiveRead(secret)); !strings.Contains(got, "EACCES") {
		t.Fatalf("outside read not denied: %s", got)
	}
	run.Finish()

	hasher := st.hasher(t)
	insideHash, secretHash := hasher.Hash(inside), hasher.Hash(secret)

	var allowed, blocked, denial *schema.Event
	var findings []schema.Event
	hasAttempt := func() bool {
		for _, f := range findings {
			if f.Finding.Type == schema.FindingBlockedAttempt && blocked != nil && denial != nil &&
				slicesContains(f.Finding.EvidenceIDs, blocked.EventID) && slicesContains(f.Finding.EvidenceIDs, denial.EventID) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(3 * time.Minute)
	for allowed == nil || blocked == nil || denial == nil || !hasAttempt() {
		if time.Now().After(deadline) {
			t.Fatalf("events missing: allowed=%v blocked=%v denial=%v blocked-attempt finding=%v (findings %d)", allowed != nil, blocked != nil, denial != nil, hasAttempt(), len(findings))
		}
		findings = findings[:0]
		for _, e := range st.events(t) {
			switch {
			case e.FileOp != nil && e.FileOp.PathHash == insideHash && e.FileOp.Verdict == "allowed":
				allowed = &e
			case e.FileOp != nil && e.FileOp.PathHash == secretHash && e.FileOp.Verdict == "blocked_by_kernel":
				blocked = &e
			case e.LandlockDenial != nil && e.LandlockDenial.PathHash == secretHash:
				denial = &e
			case e.Finding != nil:
				findings = append(findings, e)
			}
		}
	}
	if blocked.FileOp.Result != -13 || blocked.FileOp.PathClass != schema.PathOutside {
		t.Errorf("blocked file_op %+v", *blocked.FileOp)
	}
	if allowed.RunID == "" || allowed.RunID != blocked.RunID || denial.RunID != blocked.RunID {
		t.Errorf("run ids differ: allowed %s blocked %s denial %s", allowed.RunID, blocked.RunID, denial.RunID)
	}
	if allowed.ScopeID != "e2e" {
		t.Errorf("scope id %q", allowed.ScopeID)
	}
	if strings.Contains(fmt.Sprint(dlog.String()), secret) {
		t.Errorf("daemon log names a full path")
	}
}

func slicesContains(s []string, v string) bool { return slices.Contains(s, v) }

// TestFilesystemServerUnderDaemon runs the real npm filesystem server
// (node) under `mcpwarden run --daemon-socket`. The server is given the
// whole base while the scope grants only ws, so the server's own check lets
// a read of a sibling through:
//   - enforce: the kernel refuses it (file_op blocked_by_kernel + Landlock's
//     record), and — the consistency of the two views — every successful
//     operation of the run is inside the scope or the runtime profile the
//     launcher sent, so no file_op may be an escape;
//   - audit (no fence): the read succeeds and is reported as an escape, and
//     the daemon's cross-check turns it into an ESCAPE finding.
func TestFilesystemServerUnderDaemon(t *testing.T) {
	server := filepath.Join(testenv.RepoRoot(), "deploy", "mcp-servers", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	testenv.RequireFile(t, server, "run scripts/test-env.sh install-npm")
	node := testenv.RequireCommand(t, "node")
	st := newStack(t)
	base := filepath.Join(st.root, "base")
	ws := filepath.Join(base, "ws")
	sibling := filepath.Join(base, "sibling")
	inside, outside := filepath.Join(ws, "a.txt"), filepath.Join(sibling, "s.txt")
	scope := filepath.Join(st.root, "scope.json")
	testenv.WriteFiles(t, map[string]string{
		inside:  "INSIDE-42",
		outside: "SIBLING-SECRET",
		scope:   `{"scope_id":"fs-e2e","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`,
	})
	st.startDaemon(t)
	hasher := st.hasher(t)
	insideHash, outsideHash := hasher.Hash(inside), hasher.Hash(outside)

	// session runs the server in mode, reads inside then the sibling, and
	// returns the sibling read's answer.
	session := func(t *testing.T, mode string) string {
		// --no-namespaces: see TestRunWithDaemonEndToEnd.
		run := exec.Command(st.bin, "run", "--proxy=false", "--no-namespaces", "--mode", mode, "--daemon-socket", st.socket, "--scope", scope, "--base", base, "--state-dir", st.state, "--", node, server, base)
		run.Dir = base
		stdin, _ := run.StdinPipe()
		stdout, _ := run.StdoutPipe()
		rlog := &testenv.LockedBuffer{}
		run.Stderr = rlog
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stdin.Close(); _ = run.Wait() }()
		lines := bufio.NewScanner(stdout)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		call := func(id int, method string, params any) string {
			t.Helper()
			msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
			if _, err := stdin.Write(append(msg, '\n')); err != nil {
				t.Fatalf("send %s: %v (run log: %s)", method, err, rlog.String())
			}
			for lines.Scan() {
				var resp struct {
					ID any `json:"id"`
				}
				if json.Unmarshal(lines.Bytes(), &resp) == nil && resp.ID == float64(id) {
					return lines.Text()
				}
			}
			t.Fatalf("no answer to %s (run log: %s)", method, rlog.String())
			return ""
		}
		call(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}})
		if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := call(2, "tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": inside}}); !strings.Contains(got, "INSIDE-42") {
			t.Fatalf("inside read: %s", got)
		}
		return call(3, "tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": outside}})
	}
	// runOf waits until pred has matched an event of one run and returns
	// that run's events.
	runOf := func(t *testing.T, what string, pred func(*schema.Event) bool) []schema.Event {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			evs := st.events(t)
			for _, e := range evs {
				if pred(&e) {
					var mine []schema.Event
					for _, o := range evs {
						if o.RunID == e.RunID {
							mine = append(mine, o)
						}
					}
					return mine
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s event", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Run("enforce", func(t *testing.T) {
		if got := session(t, "enforce"); strings.Contains(got, "SIBLING-SECRET") {
			t.Fatalf("sibling read got through the fence: %s", got)
		}
		var evs []schema.Event
		var allowed, blocked, denial bool
		deadline := time.Now().Add(3 * time.Minute)
		for !(allowed && blocked && denial) {
			if time.Now().After(deadline) {
				t.Fatalf("events missing: allowed=%v blocked=%v denial=%v", allowed, blocked, denial)
			}
			evs = runOf(t, "blocked sibling read", func(e *schema.Event) bool {
				return e.FileOp != nil && e.FileOp.PathHash == outsideHash && e.FileOp.Verdict == "blocked_by_kernel"
			})
			for _, e := range evs {
				switch {
				case e.FileOp != nil && e.FileOp.PathHash == insideHash && e.FileOp.Verdict == "allowed":
					allowed = true
				case e.FileOp != nil && e.FileOp.PathHash == outsideHash && e.FileOp.Verdict == "blocked_by_kernel" && e.FileOp.Result == -13:
					blocked = true
				case e.LandlockDenial != nil && e.LandlockDenial.PathHash == outsideHash:
					denial = true
				}
			}
		}
		var ops, runtimeOps int
		for _, e := range evs {
			if e.FileOp == nil {
				continue
			}
			ops++
			if e.FileOp.PathClass == schema.PathRuntime {
				runtimeOps++
			}
			if e.FileOp.Verdict == "escape" {
				t.Errorf("enforce-mode run reported an escape: %+v", *e.FileOp)
			}
		}
		if runtimeOps == 0 {
			t.Errorf("node's %d file operations include none in its runtime profile", ops)
		}
		t.Logf("%d file operations, %d in the runtime profile", ops, runtimeOps)
	})

	t.Run("audit", func(t *testing.T) {
		if got := session(t, "audit"); !strings.Contains(got, "SIBLING-SECRET") {
			t.Fatalf("audit mode should not fence: %s", got)
		}
		runOf(t, "ESCAPE finding for the sibling read", func(e *schema.Event) bool {
			return e.Finding != nil && e.Finding.Type == schema.FindingEscape && e.Finding.PathHash == outsideHash
		})
		evs := runOf(t, "escape file_op", func(e *schema.Event) bool {
			return e.FileOp != nil && e.FileOp.PathHash == outsideHash && e.FileOp.Verdict == "escape" && e.FileOp.PathClass == schema.PathOutside
		})
		for _, e := range evs {
			if e.LandlockDenial != nil {
				t.Errorf("audit-mode run has a Landlock denial: %+v", *e.LandlockDenial)
			}
		}
	})
}

// TestNamespacedRunIsObserved runs the naive server under `mcpwarden run
// --daemon-socket` with the launcher's defaults: its own mount, pid, ipc,
// uts and user namespaces, a minimal root, the dedicated uid. The run's
// init starts the exec stage (which becomes the server) before the launcher
// registers the run, so the daemon must adopt it; then every operation of
// the server is seen and judged like a run without namespaces:
//   - its runtime's start-up reads and its own /proc entry, by /proc/self
//     or by the pid its own /proc gives it: runtime, allowed, one hash;
//   - a read inside the scope: workspace, allowed, under the server's comm;
//   - a read of a host path outside the minimal root: the path is not
//     there for the server (ENOENT), so nothing was disclosed: failed,
//     class outside;
//   - listing the scope's parent directory, which the minimal root has (a
//     mount point's parent) and Landlock does not grant: blocked_by_kernel
//     (EACCES), Landlock's own record of it attributed to the run, and the
//     cross-check's BLOCKED_ATTEMPT joining the two;
//   - a write to its own /proc entry (granted read-only): blocked_by_kernel,
//     and Landlock's record of it, which names the entry by the server's
//     pid in its namespace, classified runtime like the probe's event;
//   - nothing of the fence helper (the init, the exec stage before it exec'd
//     the server) is reported as the run's, and nothing is an escape.
func TestNamespacedRunIsObserved(t *testing.T) {
	st := newStack(t)
	tr := testenv.NewTreeAt(t, st.root, testenv.ReadScope("e2e-ns"))
	base, secret, inside, scope := tr.Base, tr.Secret, tr.Inside, tr.Scope
	st.startDaemon(t)

	cmd := exec.Command(st.bin, "run", "--proxy=false", "--daemon-socket", st.socket, "--scope", scope, "--base", base, "--state-dir", st.state, "--", st.naive)
	cmd.Dir = base
	run := testenv.StartNaive(t, cmd)
	rlog := run.Log
	do := func(req string) (ok bool, text string) {
		t.Helper()
		answer := run.Do(req)
		var resp struct {
			OK    bool   `json:"ok"`
			Data  string `json:"data"`
			Errno string `json:"errno"`
		}
		if err := json.Unmarshal([]byte(answer), &resp); err != nil {
			t.Fatalf("answer to %s: %q", req, answer)
		}
		return resp.OK, resp.Data + resp.Errno
	}
	ok, pids := do(`{"op":"pid"}`)
	nsPID, ppid, _ := strings.Cut(pids, " ")
	if !ok || ppid != "1" {
		t.Fatalf("the server's pid and parent are %q in its namespace, want its parent to be the run's init, 1 (no pid namespace? run log: %s)", pids, rlog.String())
	}
	if ok, got := do(testenv.NaiveRead(inside)); !ok || got != "inside" {
		t.Fatalf("inside read: %v %s", ok, got)
	}
	if ok, got := do(testenv.NaiveRead(secret)); ok || !strings.Contains(got, "ENOENT") {
		t.Fatalf("a host path outside the minimal root: %v %s, want ENOENT", ok, got)
	}
	if ok, got := do(`{"op":"readdir","path":"` + base + `"}`); ok || !strings.Contains(got, "EACCES") {
		t.Fatalf("listing the scope's parent: %v %s, want EACCES from Landlock", ok, got)
	}
	for _, p := range []string{"/proc/self/status", "/proc/" + nsPID + "/status"} {
		if ok, got := do(testenv.NaiveRead(p)); !ok {
			t.Fatalf("read %s: %s", p, got)
		}
	}
	// Its own /proc entry is granted read-only: Landlock refuses a write.
	if ok, got := do(`{"op":"write","path":"/proc/self/comm","data":"x"}`); ok || !strings.Contains(got, "EACCES") {
		t.Fatalf("writing its own /proc/self/comm: %v %s, want EACCES from Landlock", ok, got)
	}
	run.Finish()

	hasher := st.hasher(t)
	insideHash, secretHash, baseHash := hasher.Hash(inside), hasher.Hash(secret), hasher.Hash(base)
	procHash := hasher.Hash("/proc/" + nsPID + "/status")
	commHash := hasher.Hash("/proc/" + nsPID + "/comm")
	var commOp, commDenial *schema.Event
	var runID string
	var evs []schema.Event
	var allowed, missing, blocked, denial *schema.Event
	var procReads []*schema.Event
	attempt := false
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		all := st.events(t)
		for _, e := range all {
			if e.FileOp != nil && e.FileOp.PathHash == insideHash {
				runID = e.RunID
			}
		}
		evs, procReads, allowed, missing, blocked, denial, attempt = nil, nil, nil, nil, nil, nil, false
		commOp, commDenial = nil, nil
		for _, e := range all {
			if runID == "" || e.RunID != runID {
				continue
			}
			evs = append(evs, e)
			e := e
			switch {
			case e.FileOp != nil && e.FileOp.PathHash == insideHash:
				allowed = &e
			case e.FileOp != nil && e.FileOp.PathHash == secretHash:
				missing = &e
			case e.FileOp != nil && e.FileOp.PathHash == baseHash && e.FileOp.Result < 0:
				blocked = &e
			case e.FileOp != nil && e.FileOp.PathHash == procHash:
				procReads = append(procReads, &e)
			case e.LandlockDenial != nil && e.LandlockDenial.PathHash == baseHash:
				denial = &e
			case e.FileOp != nil && e.FileOp.PathHash == commHash:
				commOp = &e
			case e.LandlockDenial != nil && e.LandlockDenial.PathHash == commHash:
				commDenial = &e
			}
		}
		for _, e := range evs {
			if f := e.Finding; f != nil && f.Type == schema.FindingBlockedAttempt && blocked != nil && denial != nil &&
				slices.Contains(f.EvidenceIDs, blocked.EventID) && slices.Contains(f.EvidenceIDs, denial.EventID) {
				attempt = true
			}
		}
		if allowed != nil && missing != nil && blocked != nil && denial != nil && attempt && len(procReads) >= 2 && commOp != nil && commDenial != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespaced run's events are incomplete: run %q, inside %v, outside %v, blocked %v, Landlock record %v, BLOCKED_ATTEMPT %v, own /proc reads %d, own /proc write %v and its Landlock record %v\ndaemon log:\n%s\nrun log:\n%s",
				runID, allowed != nil, missing != nil, blocked != nil, denial != nil, attempt, len(procReads), commOp != nil, commDenial != nil, st.dlog.String(), rlog.String())
		}
	}
	if f := allowed.FileOp; f.Verdict != "allowed" || f.PathClass != schema.PathWorkspace || f.Comm != "naiveserver" {
		t.Errorf("inside read: %+v", *f)
	}
	if f := missing.FileOp; f.Verdict != "failed" || f.PathClass != schema.PathOutside || f.Result != -2 {
		t.Errorf("read outside the minimal root: %+v, want failed, outside, -2 (ENOENT)", *f)
	}
	if f := blocked.FileOp; f.Verdict != "blocked_by_kernel" || f.PathClass != schema.PathOutside || f.Result != -13 {
		t.Errorf("listing the scope's parent: %+v, want blocked_by_kernel, outside, -13", *f)
	}
	if !slices.Contains(denial.LandlockDenial.Blockers, "fs.read_dir") || denial.LandlockDenial.PathClass != schema.PathOutside {
		t.Errorf("Landlock's record: %+v", *denial.LandlockDenial)
	}
	// Both views of the refused write name the server's own /proc entry
	// (the record by the pid its /proc gives it, the daemon's probe by
	// /proc/self) and classify it alike: the runtime's.
	if f := commOp.FileOp; f.Verdict != "blocked_by_kernel" || f.PathClass != schema.PathRuntime || f.Result != -13 {
		t.Errorf("writing its own /proc entry: %+v, want blocked_by_kernel, runtime, -13", *f)
	}
	if ld := commDenial.LandlockDenial; !slices.Contains(ld.Blockers, "fs.write_file") || ld.PathClass != schema.PathRuntime {
		t.Errorf("Landlock's record of the write to its own /proc entry: %+v, want fs.write_file, runtime (as the probe's event)", *ld)
	}
	for _, e := range procReads {
		if f := e.FileOp; f.Verdict != "allowed" || f.PathClass != schema.PathRuntime || f.PID != allowed.FileOp.PID {
			t.Errorf("the server's own /proc entry: %+v, want allowed, runtime, pid %d", *f, allowed.FileOp.PID)
		}
	}
	runtimeOps := 0
	for _, e := range evs {
		f := e.FileOp
		if f == nil {
			if e.Finding != nil && e.Finding.Type == schema.FindingObservationGap {
				t.Errorf("the namespaced run has an OBSERVATION_GAP finding: %+v", *e.Finding)
			}
			continue
		}
		if f.PathClass == schema.PathRuntime {
			runtimeOps++
		}
		if f.Verdict == "escape" || f.PathClass == schema.PathUnknown {
			t.Errorf("the namespaced run reported %s %s: %+v", f.Verdict, f.PathClass, *f)
		}
		if f.PID != allowed.FileOp.PID || f.Comm != "naiveserver" {
			t.Errorf("an operation of another process than the server (pid %d) in the run: %+v", allowed.FileOp.PID, *f)
		}
	}
	if runtimeOps == 0 {
		t.Error("none of the server's runtime reads was observed")
	}
	t.Logf("%d events of the run, %d runtime file operations", len(evs), runtimeOps)
}
