package daemon_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// naiveRun is `mcpwarden run --daemon-socket` around the naive server,
// driven line by line.
func (st *stack) naiveRun(t *testing.T, scope, base string) *testenv.Naive {
	t.Helper()
	cmd := exec.Command(st.bin, "run", "--proxy=false", "--daemon-socket", st.socket, "--scope", scope, "--base", base, "--state-dir", st.state, "--", st.naive)
	cmd.Dir = base
	return testenv.StartNaive(t, cmd)
}

// readOK has run read path, failing the test unless the read succeeds.
func readOK(t *testing.T, run *testenv.Naive, path string) {
	t.Helper()
	if got := run.Do(testenv.NaiveRead(path)); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("read %s: %q (run log: %s)", filepath.Base(path), got, run.Log.String())
	}
}

// phaseFiles is a workspace of files named by the phase of a test in which
// the run reads them, and the read-only scope that grants it.
type phaseFiles struct {
	base, ws, scope string
	reads           int
	files           map[string]string // path -> phase (the scope file too)
}

// writePhases writes scope scopeID and reads files for each phase.
func writePhases(t *testing.T, st *stack, scopeID string, reads int, names ...string) *phaseFiles {
	t.Helper()
	ph := &phaseFiles{base: filepath.Join(st.root, "base"), scope: filepath.Join(st.root, "scope.json"), reads: reads}
	ph.ws = filepath.Join(ph.base, "ws")
	ph.files = map[string]string{
		ph.scope: `{"scope_id":"` + scopeID + `","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`,
	}
	for _, phase := range names {
		for i := range reads {
			ph.files[filepath.Join(ph.ws, fmt.Sprintf("%s-%d.txt", phase, i))] = phase
		}
	}
	testenv.WriteFiles(t, ph.files)
	return ph
}

// readAll has run read every file of phase.
func (ph *phaseFiles) readAll(t *testing.T, run *testenv.Naive, phase string) {
	t.Helper()
	for i := range ph.reads {
		readOK(t, run, filepath.Join(ph.ws, fmt.Sprintf("%s-%d.txt", phase, i)))
	}
}

// want maps each phase file's path hash to its phase.
func (ph *phaseFiles) want(t *testing.T, st *stack) map[schema.PathHash]string {
	t.Helper()
	hasher := st.hasher(t)
	want := map[schema.PathHash]string{}
	for p, phase := range ph.files {
		if p != ph.scope {
			want[hasher.Hash(p)] = phase
		}
	}
	return want
}

// TestDaemonRestartAdoptsRuns kills the daemon (SIGKILL, then SIGTERM)
// under a running run and starts it again: the file reads the run makes
// while no daemon runs and after the restart produce events, and each lapse
// is an OBSERVATION_GAP finding on the run.
func TestDaemonRestartAdoptsRuns(t *testing.T) {
	st := newStack(t)
	const reads = 25
	ph := writePhases(t, st, "restart", reads, "before", "down-killed", "after-killed", "down-stopped", "after-stopped")
	stop := st.daemon(t)
	run := st.naiveRun(t, ph.scope, ph.base)
	readAll := func(phase string) { ph.readAll(t, run, phase) }
	want := ph.want(t, st)
	// seen counts the allowed reads of each phase in the stream.
	seen := func() map[string]int {
		n := map[string]int{}
		for _, e := range st.events(t) {
			if e.FileOp != nil && e.FileOp.Verdict == "allowed" {
				if phase, ok := want[e.FileOp.PathHash]; ok {
					n[phase]++
				}
			}
		}
		return n
	}
	readAll("before")
	// A SIGKILL loses what the daemon had read and not yet published (the
	// unclean restart's finding says so): the kill comes once they are in.
	for deadline := time.Now().Add(3 * time.Minute); seen()["before"] < reads; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reads before the kill not published: %v\ndaemon log:\n%s\nrun log:\n%s", seen(), st.dlog.String(), run.Log.String())
		}
	}

	stop(os.Kill)
	readAll("down-killed")
	stop = st.daemon(t)
	readAll("after-killed")

	if err := stop(os.Interrupt); err != nil {
		t.Fatalf("daemon stopped with live runs: %v\n%s", err, st.dlog.String())
	}
	if !strings.Contains(st.dlog.String(), "probes stay attached") {
		t.Errorf("a stop with a live run did not keep the probes:\n%s", st.dlog.String())
	}
	readAll("down-stopped")
	st.daemon(t)
	readAll("after-stopped")
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, run.Log.String())
	}

	deadline := time.Now().Add(3 * time.Minute)
	for {
		seen := map[string]int{}
		var runID string
		gaps := map[string]bool{}
		launches := map[schema.LaunchPhase]bool{}
		for _, e := range st.events(t) {
			if e.FileOp != nil && e.FileOp.Verdict == "allowed" {
				if phase, ok := want[e.FileOp.PathHash]; ok {
					seen[phase]++
					runID = e.RunID
				}
			}
			if e.Finding != nil && e.Finding.Type == schema.FindingObservationGap && e.RunID != "" {
				gaps[e.RunID+"/"+e.Finding.Reason] = true
			}
			if e.Launch != nil {
				launches[e.Launch.Phase] = true
			}
		}
		done := runID != "" && gaps[runID+"/daemon_restart_unclean"] && gaps[runID+"/daemon_restart"] && launches[schema.PhaseStart] && launches[schema.PhaseExit]
		for phase := range strings.FieldsSeq("before down-killed after-killed down-stopped after-stopped") {
			done = done && seen[phase] >= reads
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after two restarts: reads seen per phase %v (want %d each), gap findings %v, launch records %v\ndaemon log:\n%s", seen, reads, gaps, launches, st.dlog.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestDaemonStoppedMidRunIsAGap stops the daemon (SIGSTOP) under a running
// run for longer than its stall limit and lets it go on (SIGCONT): the
// reads made while it was stopped still become events (the kernel went on
// recording), and the run carries an OBSERVATION_GAP `daemon_stalled`
// instead of reading as if it had been watched live the whole time (before,
// nothing said the daemon had stopped: such a run was CLEAN).
func TestDaemonStoppedMidRunIsAGap(t *testing.T) {
	st := newStack(t)
	const reads = 5
	phases := []string{"before", "stopped", "after"}
	ph := writePhases(t, st, "stopped", reads, phases...)
	st.startDaemon(t)
	run := st.naiveRun(t, ph.scope, ph.base)
	readAll := func(phase string) { ph.readAll(t, run, phase) }
	want := ph.want(t, st)
	readAll("before")
	if err := syscall.Kill(st.dpid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	readAll("stopped")
	// Held stopped past the stall limit (a condition of the test, not a
	// measurement): the lapse is what the daemon must report.
	time.Sleep(time.Until(stopped.Add(daemon.StallLimit + time.Second)))
	if err := syscall.Kill(st.dpid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	readAll("after")
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, run.Log.String())
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		seen := map[string]int{}
		var runID string
		gaps := map[string]bool{}
		for _, e := range st.events(t) {
			if e.FileOp != nil && e.FileOp.Verdict == "allowed" {
				if phase, ok := want[e.FileOp.PathHash]; ok {
					seen[phase]++
					runID = e.RunID
				}
			}
			if e.Finding != nil && e.Finding.Type == schema.FindingObservationGap && e.RunID != "" {
				gaps[e.RunID+"/"+e.Finding.Reason] = true
			}
		}
		done := runID != "" && gaps[runID+"/"+daemon.GapStalled]
		for _, phase := range phases {
			done = done && seen[phase] >= reads
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a SIGSTOP: reads seen per phase %v (want %d each), gap findings %v\ndaemon log:\n%s", seen, reads, gaps, st.dlog.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}
