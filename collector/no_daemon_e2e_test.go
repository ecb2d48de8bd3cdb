package collector_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/e2etest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestHostWithoutADaemonIsAGap: a run whose launch records reach the
// collector through the launcher's own spool and NATS (`run --nats
// --daemon-socket off`), on a host whose daemon never sent a health report,
// was watched by nothing in the kernel. While it is live it must not read
// CLEAN: the collector puts an OBSERVATION_GAP no_daemon on it once the
// late-event window has passed. On the code before, a live run there read
// CLEAN (an ended one got no_kernel_events only once it exited).
func TestHostWithoutADaemonIsAGap(t *testing.T) {
	testenv.RequireRoot(t)
	dsn := chtest.Database(t)
	bin := testenv.Mcpwarden(t)
	tr := testenv.NewTree(t, testenv.ReadScope("no-daemon"))
	naive := filepath.Join(tr.Root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	natsURL := e2etest.NATS(t, filepath.Join(tr.Root, "nats"))
	background(t, "collecting", bin, "collect", "--nats", natsURL, "--clickhouse", dsn, "--migrate", "--crosscheck-window", "1s", "--batch-wait", "200ms", "--daemon-silence", "5s")

	from := time.Now().Add(-time.Minute)
	cmd := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", "off", "--nats", natsURL, "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", naive)
	cmd.Dir = tr.Base
	live := testenv.StartNaive(t, cmd)
	if a := live.Do(`{"op":"ping"}`); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("naive: %q", a)
	}
	// Judged while it is still live.
	// Waits for the finding asserted below, not for any verdict but CLEAN:
	// another finding on the run could be stored before it.
	rows := scopeRuns(t, bin, dsn, "no-daemon", from, 1, func(rows []scopeRun) bool {
		return rows[0].Verdict != "CLEAN" && slices.Contains(findingReasons(t, dsn, rows[0]), "OBSERVATION_GAP:"+crosscheck.ReasonNoDaemon)
	})
	if rows[0].Verdict == "CLEAN" {
		t.Errorf("a live run on a host without a daemon reads CLEAN: %+v", rows[0])
	}
	if reasons := findingReasons(t, dsn, rows[0]); !slices.Contains(reasons, "OBSERVATION_GAP:"+crosscheck.ReasonNoDaemon) {
		t.Errorf("no OBSERVATION_GAP %s on the run: %v", crosscheck.ReasonNoDaemon, reasons)
	}
	// No daemon took its records: the launcher says who launched it
	// (itself, root here), and the row says whose word that is. On the
	// code before it said nothing (-1).
	if rows[0].LauncherUID != 0 || rows[0].LauncherUIDBy != "launcher" {
		t.Errorf("launcher_uid %d by %q without a daemon, want 0 (root) by the launcher", rows[0].LauncherUID, rows[0].LauncherUIDBy)
	}
	if a := live.Do(`{"op":"pid"}`); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("naive: %q", a)
	}
	live.Finish()
}
