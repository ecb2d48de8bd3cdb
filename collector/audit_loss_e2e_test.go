package collector_test

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/daemon/audit"
	"github.com/mcpwarden/mcpwarden/internal/e2etest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// scopeRun is a row of `query runs --json`.
type scopeRun struct {
	RunID    string `json:"run_id"`
	Verdict  string `json:"verdict"`
	Findings uint64 `json:"findings"`
	FirstNS  int64  `json:"first_ns"`
	Host     string `json:"host"`
	// LauncherUID: who launched the run; -1 when no launch record says.
	// LauncherUIDBy: whose word it is: "daemon" (its socket's peer
	// credentials) or "launcher" (a `run --nats` publishing itself).
	LauncherUID   int64  `json:"launcher_uid"`
	LauncherUIDBy string `json:"launcher_uid_by"`
}

// scopeRuns polls `query runs --scope` until it has want runs of the scope
// with a verdict each and done says the rows are what the test waits for
// (findings are stored after the runs' events), or two minutes pass; it
// returns them oldest first.
func scopeRuns(t *testing.T, bin, dsn, scope string, from time.Time, want int, done func([]scopeRun) bool) []scopeRun {
	t.Helper()
	var rows []scopeRun
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := exec.Command(bin, "query", "runs", "--clickhouse", dsn, "--scope", scope, "--from", from.UTC().Format(time.RFC3339), "--json").Output()
		rows = nil
		if err == nil {
			rows = parseRows[scopeRun](t, out)
		}
		judged := len(rows) == want
		for _, r := range rows {
			judged = judged && r.Verdict != ""
		}
		if judged {
			sort.Slice(rows, func(i, j int) bool { return rows[i].FirstNS < rows[j].FirstNS })
		}
		if judged && done(rows) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if len(rows) != want {
		t.Fatalf("query runs has %d runs of scope %s, want %d: %+v", len(rows), scope, want, rows)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].FirstNS < rows[j].FirstNS })
	return rows
}

// findingReasons reads the run's stored findings as TYPE:reason (the
// queries group by type only).
func findingReasons(t *testing.T, dsn string, r scopeRun) []string {
	t.Helper()
	st, err := store.Open(context.Background(), dsn, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.ReadRun(context.Background(), store.RunRef{Host: r.Host, RunID: r.RunID}, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs {
		if e.Finding != nil && !slices.Contains(reasons, string(e.Finding.Type)+":"+e.Finding.Reason) {
			reasons = append(reasons, string(e.Finding.Type)+":"+e.Finding.Reason)
		}
	}
	return reasons
}

// restoreAuditSettings puts the kernel's audit backlog_limit (the daemon
// raises it) and rate_limit (the flood lowers it) back as the test found
// them when the test ends.
func restoreAuditSettings(t *testing.T) audit.Status {
	t.Helper()
	orig, err := audit.GetStatus()
	if err != nil {
		t.Fatalf("read the kernel's audit status: %v", err)
	}
	t.Cleanup(func() {
		st, err := audit.GetStatus()
		if err != nil || st.BacklogLimit != orig.BacklogLimit {
			if err := audit.SetBacklogLimit(orig.BacklogLimit); err != nil {
				t.Errorf("restore the kernel's audit backlog_limit %d: %v", orig.BacklogLimit, err)
			}
		}
		if err != nil || st.RateLimit != orig.RateLimit {
			if err := audit.SetRateLimit(orig.RateLimit); err != nil {
				t.Errorf("restore the kernel's audit rate_limit %d: %v", orig.RateLimit, err)
			}
		}
	})
	return orig
}

// floodRateLimit is the kernel's audit rate_limit (records per second)
// during TestKernelAuditLossIsAGap's flood: far below a round of 20,000
// denials, far above the few records the test's own runs make.
const floodRateLimit = 200

// TestKernelAuditLossIsAGap: the kernel drops audit records when its
// backlog overflows or a rate limit is passed (here: a hostile fenced
// server outside the daemon's runs floods Landlock denials past a lowered
// rate_limit), and a Landlock record lost there reaches
// no reader. The real daemon reads the kernel's audit status every second;
// a growth of its `lost` counter puts an OBSERVATION_GAP kernel_audit_lost
// on every run live meanwhile. A run that did nothing wrong but was live
// during the loss must not read CLEAN; a run before it stays CLEAN. The
// daemon also raised the kernel's default backlog_limit of 64 at start;
// the test puts the host's settings back. On the code before, the run live
// during the loss read CLEAN.
func TestKernelAuditLossIsAGap(t *testing.T) {
	testenv.RequireRoot(t)
	// The flood makes the kernel lose records for every reader on the host,
	// and the test lowers backlog_limit: no daemon test may run meanwhile.
	testenv.AuditDisturber(t)
	orig := restoreAuditSettings(t)
	if orig.Failure == 2 {
		t.Fatal("the kernel's audit failure mode is 2 (panic on a lost record): this test makes the kernel lose records; run it on a host with `auditctl -f 1`")
	}
	dsn := chtest.Database(t)
	bin := testenv.Mcpwarden(t)
	tr := testenv.NewTree(t, testenv.ReadScope("audit-loss"))
	naive := filepath.Join(tr.Root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	natsURL := e2etest.NATS(t, filepath.Join(tr.Root, "nats"))
	pintest.Unload(t, tr.State)

	dlog := background(t, "daemon started", bin, "daemon", "--socket", tr.Socket, "--nats", natsURL, "--state-dir", tr.State, "--enable-audit", "--crosscheck-window", "1s")
	if st, err := audit.GetStatus(); err != nil {
		t.Fatal(err)
	} else if orig.BacklogLimit != 0 && orig.BacklogLimit < daemon.DefaultAuditBacklogFloor && st.BacklogLimit != daemon.DefaultAuditBacklogFloor {
		t.Errorf("the daemon left the kernel's audit backlog_limit at %d (was %d), want it raised to %d", st.BacklogLimit, orig.BacklogLimit, daemon.DefaultAuditBacklogFloor)
	}
	// Lowered while the daemon runs, the limit is raised again.
	if err := audit.SetBacklogLimit(64); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if st, err := audit.GetStatus(); err == nil && st.BacklogLimit == daemon.DefaultAuditBacklogFloor {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the kernel's audit backlog_limit, lowered to 64 while the daemon runs, was not raised again within 2 minutes")
			break
		}
	}
	background(t, "collecting", bin, "collect", "--nats", natsURL, "--clickhouse", dsn, "--migrate", "--crosscheck-window", "1s", "--batch-wait", "200ms")

	run := func(socket string) *exec.Cmd {
		// --no-namespaces: the hostile server's reads outside must be
		// Landlock denials, not ENOENT in a mount namespace.
		cmd := exec.Command(bin, "run", "--proxy=false", "--no-namespaces", "--daemon-socket", socket, "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", naive)
		cmd.Dir = tr.Base
		return cmd
	}
	from := time.Now().Add(-time.Minute)
	// A clean run, no loss while it lives.
	if answers, log := testenv.RunNaive(t, run(tr.Socket), `{"op":"ping"}`, `{"op":"pid"}`); !strings.Contains(strings.Join(answers, ""), `"ok":true`) {
		t.Fatalf("naive: %q (%s)", answers, log)
	}
	// Past the clean run's end by more than any loss window reaches back:
	// the kernel's lost counter a second, the daemon's own socket
	// overflowing in the flood (events_dropped) ten seconds. Counted from
	// when the daemon saw the run end (its window is on its own clock), not
	// from the run's exit: on a loaded machine the daemon sees it later.
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(dlog.String(), `msg="run ended"`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not see the clean run end within 2 minutes:\n%s", dlog.String())
		}
	}
	time.Sleep(11 * time.Second)

	// A run that does nothing wrong, live while the kernel loses records.
	live := testenv.StartNaive(t, run(tr.Socket))
	if a := live.Do(`{"op":"ping"}`); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("naive: %q", a)
	}
	// The flood: a fenced server the daemon does not watch reads outside
	// its scope until the kernel has lost records (rounds of 20,000
	// denials; stopped at the first loss, so other readers on the host
	// lose as little as possible). A quiet machine drains any flood
	// through a backlog of 8192 (CI once lost nothing in 20 rounds), so
	// the kernel's rate_limit is lowered for the flood: records past it
	// are lost and counted like a backlog overflow, on any machine.
	hostile := testenv.StartNaive(t, run("off"))
	before, err := audit.GetStatus()
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.SetRateLimit(floodRateLimit); err != nil {
		t.Fatalf("lower the kernel's audit rate_limit for the flood: %v", err)
	}
	lost := false
	for round := 0; round < 20 && !lost; round++ {
		if a := hostile.Do(fmt.Sprintf(`{"op":"denyloop","path":%q,"n":20000}`, tr.Secret)); !strings.Contains(a, `"ok":true`) || strings.Contains(a, `"data":"0"`) {
			t.Fatalf("hostile server: %q (its reads outside must be denied)", a)
		}
		st, err := audit.GetStatus()
		if err != nil {
			t.Fatal(err)
		}
		lost = st.Lost != before.Lost
	}
	_ = hostile.Wait()
	if err := audit.SetRateLimit(before.RateLimit); err != nil {
		t.Errorf("restore the kernel's audit rate_limit %d: %v", before.RateLimit, err)
	}
	if !lost {
		t.Fatalf("the kernel lost no audit records after 20 rounds of 20,000 denials (backlog_limit %d, rate_limit %d)", before.BacklogLimit, floodRateLimit)
	}
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(dlog.String(), "the kernel lost audit records"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the daemon did not report the kernel's loss within 2 minutes")
			break
		}
	}
	if a := live.Do(`{"op":"pid"}`); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("naive: %q", a)
	}
	live.Finish()

	// The flood can also overflow the daemon's own queue: its
	// events_dropped gap may be stored before the kernel_audit_lost one,
	// so the wait is for the latter, not for any verdict but CLEAN. And
	// for the verdict in the same rows: the findings are read after the
	// rows, so the gap can be stored between the two reads (the rows then
	// said CLEAN, as they did when they were read).
	rows := scopeRuns(t, bin, dsn, "audit-loss", from, 2, func(rows []scopeRun) bool {
		return rows[1].Verdict != "CLEAN" && slices.Contains(findingReasons(t, dsn, rows[1]), "OBSERVATION_GAP:"+daemon.GapKernelAuditLost)
	})
	if rows[0].Verdict != "CLEAN" {
		t.Errorf("the run before the loss reads %s, want CLEAN: %v", rows[0].Verdict, findingReasons(t, dsn, rows[0]))
	}
	// Launched by root through the daemon's socket: the daemon says so.
	for _, r := range rows {
		if r.LauncherUID != 0 || r.LauncherUIDBy != "daemon" {
			t.Errorf("run %s: launcher_uid %d by %q, want 0 (root) by the daemon (its socket's peer credentials)", r.RunID, r.LauncherUID, r.LauncherUIDBy)
		}
	}
	if rows[1].Verdict == "CLEAN" {
		t.Errorf("the run live while the kernel lost audit records reads CLEAN: %+v", rows[1])
	}
	if reasons := findingReasons(t, dsn, rows[1]); !slices.Contains(reasons, "OBSERVATION_GAP:"+daemon.GapKernelAuditLost) {
		t.Errorf("no OBSERVATION_GAP %s on the run live during the loss: %v", daemon.GapKernelAuditLost, reasons)
	}
	// `query health` shows the host's loss too (the daemon's health
	// report's drops_kernel_audit, schema_version 3): on the code before it
	// had no such column.
	var out []byte
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		out, err = exec.Command(bin, "query", "health", "--clickhouse", dsn, "--from", from.UTC().Format(time.RFC3339), "--json").Output()
		var lostRecords uint64
		if err == nil {
			for _, h := range parseRows[struct {
				Host             string `json:"host"`
				DropsKernelAudit uint64 `json:"drops_kernel_audit"`
			}](t, out) {
				if h.Host == rows[1].Host {
					lostRecords = h.DropsKernelAudit
				}
			}
		}
		if lostRecords > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("query health does not show the kernel's audit loss on %s within 3 minutes (err %v):\n%s", rows[1].Host, err, out)
		}
	}
}
