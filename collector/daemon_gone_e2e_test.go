package collector_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/e2etest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestDaemonGoneIsAGap: `mcpwarden daemon` SIGKILLed under a running run
// and never restarted. The run's kernel view ends there; the run ends
// (its exit record may or may not reach the stream). `query runs` must not
// read it CLEAN: the collector finds the host's daemon reports stopped
// while the run was live and puts an OBSERVATION_GAP daemon_silent on it.
// A run that ended while the daemon still reported, on the same host and
// in the same test, stays CLEAN (no false alarm from the silence after
// it). The daemon reports every second and the collector takes 5 s of
// silence as a gap, so the test does not wait the default 3 minutes.
func TestDaemonGoneIsAGap(t *testing.T) {
	testenv.RequireRoot(t)
	// Its daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	dsn := chtest.Database(t)
	bin := testenv.Mcpwarden(t)
	tr := testenv.NewTree(t, `{"scope_id":"daemon-gone","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"tool_classes":{"read_text_file":"read"},"approval":"none","expires_after_minutes":30}`)
	naive := filepath.Join(tr.Root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	natsURL := e2etest.NATS(t, filepath.Join(tr.Root, "nats"))
	pintest.Unload(t, tr.State)

	// The daemon, started by hand so that it can be SIGKILLed.
	daemonLog := &testenv.LockedBuffer{}
	daemon := exec.Command(bin, "daemon", "--socket", tr.Socket, "--nats", natsURL, "--state-dir", tr.State, "--enable-audit", "--crosscheck-window", "1s", "--health-interval", "1s")
	daemon.Stdout, daemon.Stderr = daemonLog, daemonLog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = daemon.Process.Signal(syscall.SIGTERM)
		}
		_ = daemon.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", daemonLog.String())
		}
	})
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(daemonLog.String(), "daemon started"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", daemonLog.String())
		}
	}
	background(t, "collecting", bin, "collect", "--nats", natsURL, "--clickhouse", dsn, "--migrate", "--crosscheck-window", "1s", "--batch-wait", "200ms", "--daemon-silence", "5s")

	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", tr.Socket, "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", naive)
		cmd.Dir = tr.Base
		return cmd
	}
	start := time.Now().Add(-time.Minute)
	// A clean run while the daemon reports.
	answers, log := testenv.RunNaive(t, run(), `{"op":"ping"}`, `{"op":"pid"}`)
	for _, a := range answers {
		if !strings.Contains(a, `"ok":true`) {
			t.Fatalf("naive: %q (%s)", a, log)
		}
	}
	// Reports go on past the clean run's end: the silence after the kill
	// must begin after it. Waited for in ClickHouse, not slept: a daemon
	// slowed by a loaded machine may not report for a few seconds.
	cleanEnd := time.Now()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, err := exec.Command(bin, "query", "health", "--clickhouse", dsn, "--from", start.UTC().Format(time.RFC3339), "--json").Output()
		var last int64
		if err == nil {
			for _, h := range parseRows[struct {
				LastReportNS int64 `json:"last_report_ns"`
			}](t, out) {
				last = max(last, h.LastReportNS)
			}
		}
		if last > cleanEnd.Add(time.Second).UnixNano() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon health report stored a second after the clean run ended (latest %s, err %v):\n%s", time.Unix(0, last).UTC().Format(time.RFC3339Nano), err, out)
		}
	}
	// The run the daemon dies under.
	gone := testenv.StartNaive(t, run())
	if a := gone.Do(`{"op":"ping"}`); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("naive: %q", a)
	}
	if err := daemon.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true
	_ = daemon.Wait()
	if a := gone.Do(`{"op":"pid"}`); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("naive: %q", a)
	}
	_ = gone.Wait() // its records may not reach a daemon: the exit status is not the point

	// Waits for the finding asserted below, not for any verdict but CLEAN:
	// another finding on the run could be stored before it.
	rows := scopeRuns(t, bin, dsn, "daemon-gone", start, 2, func(rows []scopeRun) bool {
		return rows[1].Verdict != "CLEAN" && slices.Contains(findingReasons(t, dsn, rows[1]), "OBSERVATION_GAP:"+crosscheck.ReasonDaemonSilent)
	})
	// Oldest first: the clean run, then the run the daemon died under.
	if rows[1].Verdict == "CLEAN" {
		t.Errorf("the run whose daemon was killed reads CLEAN: %+v", rows[1])
	}
	if rows[0].Verdict != "CLEAN" {
		out, _ := exec.Command(bin, "query", "findings", "--clickhouse", dsn, "--run", rows[0].RunID, "--from", start.UTC().Format(time.RFC3339)).CombinedOutput()
		t.Errorf("the run that ended while the daemon reported reads %s, want CLEAN:\n%s", rows[0].Verdict, out)
	}
	// The reason is in the stored finding (the queries group by type).
	if reasons := findingReasons(t, dsn, rows[1]); !slices.Contains(reasons, "OBSERVATION_GAP:"+crosscheck.ReasonDaemonSilent) {
		t.Errorf("no OBSERVATION_GAP daemon_silent on the run whose daemon was killed: %v", reasons)
	}
}
