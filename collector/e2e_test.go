package collector_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/e2etest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// background starts a long-running mcpwarden command; it is interrupted at
// the end of the test.
func background(t *testing.T, ready string, name string, args ...string) *testenv.LockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, name, args...)
	var logBuf testenv.LockedBuffer
	cmd.Stderr = &logBuf
	cmd.Stdout = &logBuf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s log:\n%s", filepath.Base(name), args[0], logBuf.String())
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(logBuf.String(), ready) {
		if time.Now().After(deadline) {
			t.Fatalf("%s %s did not get ready:\n%s", name, args[0], logBuf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &logBuf
}

// TestEndToEndFindingsInClickHouse drives the real pieces: the naive test
// server wrapped by `mcpwarden run` (enforce and audit mode), `mcpwarden
// daemon` watching it from the kernel and publishing to JetStream, and
// `mcpwarden collect` moving everything into ClickHouse and cross-checking
// it. It expects ESCAPE (audit-mode read outside the scope),
// BLOCKED_ATTEMPT (enforce-mode read outside) and UNATTRIBUTED_ACCESS (a
// workspace read with no tool call in flight: the proxy is off) there.
func TestEndToEndFindingsInClickHouse(t *testing.T) {
	testenv.RequireRoot(t)
	// Its daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	dsn := chtest.Database(t)
	bin := testenv.Mcpwarden(t)
	tr := testenv.NewTree(t, testenv.ReadScope("e2e-pipeline"))
	state, socket, base, scope, inside, secret := tr.State, tr.Socket, tr.Base, tr.Scope, tr.Inside, tr.Secret
	naive := filepath.Join(tr.Root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	natsURL := e2etest.NATS(t, filepath.Join(tr.Root, "nats")) // shut down after the daemon and collector stop

	pintest.Unload(t, state)
	background(t, "daemon started", bin, "daemon", "--socket", socket, "--nats", natsURL, "--state-dir", state, "--enable-audit", "--crosscheck-window", "1s")
	background(t, "collecting", bin, "collect", "--nats", natsURL, "--clickhouse", dsn, "--migrate", "--crosscheck-window", "1s", "--batch-wait", "200ms")

	runOnce := func(mode string, reqs ...string) []string {
		// --no-namespaces: the findings expected here come from Landlock's
		// denials, which the run's mount namespace pre-empts (ENOENT).
		run := exec.Command(bin, "run", "--proxy=false", "--no-namespaces", "--mode", mode, "--daemon-socket", socket, "--scope", scope, "--base", base, "--state-dir", state, "--", naive)
		run.Dir = base
		out, _ := testenv.RunNaive(t, run, reqs...)
		return out
	}
	readInside := testenv.NaiveRead(inside)
	readSecret := testenv.NaiveRead(secret)
	if got := runOnce("enforce", readInside, readSecret); !strings.Contains(got[0], `"ok":true`) || !strings.Contains(got[1], "EACCES") {
		t.Fatalf("enforce run: %v", got)
	}
	if got := runOnce("audit", readSecret); !strings.Contains(got[0], `"ok":true`) {
		t.Fatalf("audit run could not read outside (the fence must be off): %v", got)
	}

	key, err := os.ReadFile(filepath.Join(state, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	hasher, _ := schema.NewPathHasher(key)
	secretHash, insideHash := string(hasher.Hash(secret)), string(hasher.Hash(inside))

	st, err := store.Open(context.Background(), dsn, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	type hit struct {
		typ         schema.FindingType
		class, hash string
	}
	want := map[hit]bool{
		{schema.FindingEscape, "outside", secretHash}:               false,
		{schema.FindingBlockedAttempt, "outside", secretHash}:       false,
		{schema.FindingUnattributedAccess, "workspace", insideHash}: false,
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		rows, err := st.Conn().Query(context.Background(),
			"SELECT DISTINCT finding_type, path_class, path_hash FROM events FINAL WHERE kind = 'finding' AND scope_id = 'e2e-pipeline'")
		if err == nil {
			for rows.Next() {
				var h hit
				var typ string
				if err := rows.Scan(&typ, &h.class, &h.hash); err != nil {
					t.Fatal(err)
				}
				h.typ = schema.FindingType(typ)
				if _, ok := want[h]; ok {
					want[h] = true
				}
			}
			rows.Close()
		}
		all := true
		for _, ok := range want {
			all = all && ok
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("findings in ClickHouse after 3 minutes: %v", want)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The ESCAPE finding carries the audit-mode severity and points at the
	// kernel's file_op event, which is stored too.
	var sev string
	var evidence []string
	if err := st.Conn().QueryRow(context.Background(),
		"SELECT severity, evidence_ids FROM events FINAL WHERE kind = 'finding' AND finding_type = 'ESCAPE' AND scope_id = 'e2e-pipeline' AND path_hash = ? LIMIT 1", secretHash).Scan(&sev, &evidence); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := st.Conn().QueryRow(context.Background(), "SELECT count() FROM events FINAL WHERE has(?, event_id) AND kind = 'file_op' AND verdict = 'escape'", evidence).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if sev != string(schema.SeverityHigh) || n != 1 {
		t.Fatalf("ESCAPE severity %s, evidence %v (%d escape file_op events)", sev, evidence, n)
	}
	// Every other escape must come from the audit-mode run (the server's own
	// runtime reading /sys and the like, which the fence would have denied);
	// an escape in the enforce-mode run would be a hole in the fence or a
	// classification gap, and fails the test.
	candidates := map[string]string{}
	for _, p := range []string{"/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "/etc/localtime", "/proc/self/exe",
		"/proc/self/maps", "/proc/self/status", "/proc/self/cgroup", "/sys/fs/cgroup/cpu.max", "/proc/sys/net/core/somaxconn",
		"/proc/self/mountinfo", "/proc/stat", "/dev/null", "/etc/ld.so.cache", naive, bin, "/proc/self/fd", "/dev/urandom"} {
		candidates[string(hasher.Hash(p))] = p
	}
	auditRuns := map[string]bool{}
	if rows, err := st.Conn().Query(context.Background(), "SELECT DISTINCT run_id FROM events FINAL WHERE kind = 'launch' AND mode = 'audit'"); err == nil {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatalf("scan audit run: %v", err)
			}
			auditRuns[id] = true
		}
		rows.Close()
	} else {
		t.Fatalf("query audit runs: %v", err)
	}
	if len(auditRuns) != 1 {
		t.Fatalf("want one audit-mode run in the store, found %d", len(auditRuns))
	}
	if rows, err := st.Conn().Query(context.Background(), `SELECT syscall, comm, path_class, flags_class, path_hash, run_id
		FROM events FINAL WHERE kind = 'file_op' AND verdict = 'escape' AND path_hash != ?`, secretHash); err == nil {
		for rows.Next() {
			var sc, comm, class, flags, h string
			var runID string
			if err := rows.Scan(&sc, &comm, &class, &flags, &h, &runID); err != nil {
				t.Fatalf("scan escape row: %v", err)
			}
			path := candidates[h]
			if path == "" {
				path = "(not among the candidates)"
			}
			if !auditRuns[runID] {
				// The fence was on: a successful open outside scope and
				// runtime would be a real escape or a classification gap.
				t.Errorf("escape reported in an enforce-mode run: %s %s by %s (%s): %s", sc, flags, comm, class, path)
				continue
			}
			t.Logf("audit-mode run, the fence would have denied: %s %s by %s (%s): %s", sc, flags, comm, class, path)
		}
		if err := rows.Err(); err != nil {
			t.Errorf("query escapes: %v", err)
		}
		rows.Close()
	} else {
		t.Errorf("query escapes: %v", err)
	}
	// No duplicates in query results even though the daemon and the
	// collector both computed findings.
	var rowsN, distinct uint64
	if err := st.Conn().QueryRow(context.Background(), "SELECT count(), uniqExact(event_id) FROM events FINAL").Scan(&rowsN, &distinct); err != nil {
		t.Fatal(err)
	}
	if rowsN != distinct {
		t.Fatalf("FINAL returned %d rows for %d events", rowsN, distinct)
	}
}
