package collector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/promtest"
	"github.com/mcpwarden/mcpwarden/internal/systemdtest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestSystemdSingleHost is deploy/README.md's single-host install, run:
// deploy/systemd's two units, loaded by a real systemd service manager
// (internal/systemdtest: root's user manager, since systemd is not PID 1
// on the test machines) with their whole sandbox. The daemon loads its
// probes and joins the audit stream with only its four capabilities; a
// server wrapped by `mcpwarden run` is observed (its read, its denied read
// with Landlock's record, the finding); the collector, a dynamic user with
// no capability, stores the run in ClickHouse, where `mcpwarden query runs`
// finds it; Debian's Prometheus scrapes both units' metrics.
//
// What the test changes in the units, and why: the binary path (the build
// under test), the ports (random: other tests run at the same time), the
// logs (no journald here). And the collector's NATS key: a user manager
// cannot hand a credential (LoadCredential=) to another uid, so the test
// gives the dynamic user a readable copy of the key instead; the
// credential itself is checked by systemd-analyze verify only
// (deploy/systemd_test.go).
func TestSystemdSingleHost(t *testing.T) {
	testenv.RequireRoot(t)
	// Its daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	dsn := chtest.Database(t)
	m := systemdtest.Start(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// replace substitutes old exactly once, so a changed unit fails here
	// rather than running something else.
	replace := func(s, old, new string) string {
		t.Helper()
		if n := strings.Count(s, old); n != 1 {
			t.Fatalf("the unit has %q %d times, want once (update the test with the unit)", old, n)
		}
		return strings.Replace(s, old, new, 1)
	}
	// The binary where every uid reaches it (PrivateTmp= hides /tmp).
	// mcpwarden execs mcpwarden-pipeline (daemon, collect) from next to
	// itself, as it does from /usr/local/bin.
	bin := filepath.Join(m.Dir, "bin", "mcpwarden")
	copyExecutable(t, testenv.Mcpwarden(t), bin)
	copyExecutable(t, filepath.Join(filepath.Dir(testenv.Mcpwarden(t)), testenv.PipelineName), filepath.Join(m.Dir, "bin", testenv.PipelineName))
	port := func() string { return strconv.Itoa(testenv.FreePort(t)) }
	natsPort, daemonMetrics, collectorMetrics := port(), port(), port()
	logs := func(unit string) string {
		p := filepath.Join(m.Dir, unit+".log")
		m.Install(t, unit+".d/test-logs.conf", "[Service]\nStandardOutput=append:"+p+"\nStandardError=append:"+p+"\n")
		return p
	}
	logOf := func(p string) string { b, _ := os.ReadFile(p); return string(b) }

	// The daemon.
	daemonUnit := read("mcpwarden-daemon.service")
	daemonUnit = replace(daemonUnit, "/usr/local/bin/mcpwarden ", bin+" ")
	daemonUnit = replace(daemonUnit, "--metrics-listen 127.0.0.1:9474", "--metrics-listen 127.0.0.1:"+daemonMetrics+" --nats-listen 127.0.0.1:"+natsPort)
	m.Install(t, "mcpwarden-daemon.service", daemonUnit)
	dlog := logs("mcpwarden-daemon.service")
	// Registered after the manager: it runs first, while the daemon still
	// holds its probes (unpinned, they detach when it stops).
	pintest.Unload(t, filepath.Join(m.StateDir, "mcpwarden"))
	m.StartUnit(t, "mcpwarden-daemon.service")
	socket := filepath.Join(m.RuntimeDir, "mcpwarden", "daemon.sock")
	state := filepath.Join(m.StateDir, "mcpwarden")
	waitFor(t, 3*time.Minute, func() bool { return strings.Contains(logOf(dlog), "daemon started") }, func() string {
		return fmt.Sprintf("the daemon unit did not start: %v\n%s", m.Show(t, "mcpwarden-daemon.service", "ActiveState", "Result", "ExecMainStatus"), logOf(dlog))
	})
	if st, err := os.Stat(filepath.Dir(socket)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("RuntimeDirectory %s: %v %v, want 0700", filepath.Dir(socket), st, err)
	}
	// The daemon process holds exactly its four capabilities, cannot gain
	// more, and runs under the system call filter.
	status := procStatus(t, m.MainPID(t, "mcpwarden-daemon.service"))
	// CAP_AUDIT_CONTROL 30, CAP_AUDIT_READ 37, CAP_PERFMON 38, CAP_BPF 39.
	wantCaps := fmt.Sprintf("%016x", uint64(1<<30|1<<37|1<<38|1<<39))
	for key, want := range map[string]string{"Uid": "0", "CapEff": wantCaps, "CapBnd": wantCaps, "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if got := status[key]; got != want {
			t.Errorf("daemon %s: %s, want %s", key, got, want)
		}
	}

	// A server wrapped by `mcpwarden run`, registered with the unit's
	// daemon at the unit's socket, with the daemon's state dir (its path
	// key).
	tr := testenv.NewTree(t, testenv.ReadScope("systemd-e2e"))
	base, inside, secret, scope := tr.Base, tr.Inside, tr.Secret, tr.Scope
	naive := filepath.Join(tr.Root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	// --no-namespaces: an outside path does not exist for a namespaced
	// server, so Landlock would never see the attempt (as in the daemon's
	// own end-to-end tests).
	cmd := exec.Command(testenv.Mcpwarden(t), "run", "--proxy=false", "--no-namespaces", "--daemon-socket", socket, "--scope", scope, "--base", base, "--state-dir", state, "--", naive)
	cmd.Dir = base
	run := testenv.StartNaive(t, cmd)
	run.Context = func() string { return "daemon log:\n" + logOf(dlog) }
	if got := run.Do(testenv.NaiveRead(inside)); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("inside read: %s", got)
	}
	if got := run.Do(testenv.NaiveRead(secret)); !strings.Contains(got, "EACCES") {
		t.Fatalf("outside read not denied: %s", got)
	}
	run.Finish()

	// What the daemon saw, read back as root with the state dir's reader key.
	nats := "nats://127.0.0.1:" + natsPort
	key, err := os.ReadFile(filepath.Join(state, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	hasher, err := schema.NewPathHasher(key)
	if err != nil {
		t.Fatal(err)
	}
	var runID string
	var allowed, blocked, denial, attempt bool
	waitFor(t, 3*time.Minute, func() bool {
		out, err := exec.Command(testenv.Mcpwarden(t), "events", "--json", "--nats", nats, "--state-dir", state).Output()
		if err != nil {
			return false
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			var e schema.Event
			if len(line) == 0 || json.Unmarshal(line, &e) != nil {
				continue
			}
			switch {
			case e.FileOp != nil && e.FileOp.PathHash == hasher.Hash(inside) && e.FileOp.Verdict == schema.VerdictAllowed:
				allowed, runID = true, e.RunID
			case e.FileOp != nil && e.FileOp.PathHash == hasher.Hash(secret) && e.FileOp.Verdict == schema.VerdictBlockedByKernel:
				blocked = true
			case e.LandlockDenial != nil && e.LandlockDenial.PathHash == hasher.Hash(secret):
				denial = true
			case e.Finding != nil && e.Finding.Type == schema.FindingBlockedAttempt:
				attempt = true
			}
		}
		return allowed && blocked && denial && attempt
	}, func() string {
		return fmt.Sprintf("the sandboxed daemon's events: allowed read %v, blocked read %v, Landlock record %v, BLOCKED_ATTEMPT %v\ndaemon log:\n%s", allowed, blocked, denial, attempt, logOf(dlog))
	})

	// The collector, as a dynamic user: its NATS key and ClickHouse DSN
	// come from outside its command line.
	credDir := filepath.Join(m.Dir, "credentials")
	if err := os.Mkdir(credDir, 0o755); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(credDir, "nats.nk")
	copyFile(t, filepath.Join(state, "nats-auth", "collector.nk"), seed, 0o644)
	env := filepath.Join(m.Dir, "collector.env")
	if err := os.WriteFile(env, []byte("MCPWARDEN_CLICKHOUSE_DSN="+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	collectorUnit := read("mcpwarden-collector.service")
	collectorUnit = replace(collectorUnit, "/usr/local/bin/mcpwarden ", bin+" ")
	collectorUnit = replace(collectorUnit, "--nats nats://127.0.0.1:4222", "--nats "+nats)
	collectorUnit = replace(collectorUnit, "--metrics-listen 127.0.0.1:9475", "--metrics-listen 127.0.0.1:"+collectorMetrics)
	collectorUnit = replace(collectorUnit, "--nats-nkey %d/nats.nk", "--nats-nkey "+seed)
	collectorUnit = replace(collectorUnit, "LoadCredential=nats.nk:/var/lib/mcpwarden/nats-auth/collector.nk\n", "")
	collectorUnit = replace(collectorUnit, "EnvironmentFile=-/etc/mcpwarden/collector.env", "EnvironmentFile="+env)
	m.Install(t, "mcpwarden-collector.service", collectorUnit)
	clog := logs("mcpwarden-collector.service")
	m.StartUnit(t, "mcpwarden-collector.service")
	waitFor(t, 3*time.Minute, func() bool { return strings.Contains(logOf(clog), "collecting") }, func() string {
		return fmt.Sprintf("the collector unit did not start: %v\n%s", m.Show(t, "mcpwarden-collector.service", "ActiveState", "Result", "ExecMainStatus"), logOf(clog))
	})
	cstatus := procStatus(t, m.MainPID(t, "mcpwarden-collector.service"))
	for key, want := range map[string]string{"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if got := cstatus[key]; got != want {
			t.Errorf("collector %s: %s, want %s", key, got, want)
		}
	}
	if cstatus["Uid"] == "0" || cstatus["Uid"] == "" {
		t.Errorf("collector runs as uid %q, want a dynamic user", cstatus["Uid"])
	}
	if strings.Contains(procCmdline(t, m.MainPID(t, "mcpwarden-collector.service")), "clickhouse://") {
		t.Error("the ClickHouse DSN is on the collector's command line")
	}
	// The run is in ClickHouse, as `mcpwarden query runs` tells it.
	waitFor(t, 3*time.Minute, func() bool {
		out, err := exec.Command(testenv.Mcpwarden(t), "query", "runs", "--clickhouse", dsn, "--since", "1h", "--json").Output()
		return err == nil && strings.Contains(string(out), runID)
	}, func() string { return "run " + runID + " is not in ClickHouse; collector log:\n" + logOf(clog) })

	// Both units' metrics, scraped by Prometheus.
	p := promtest.Start(t,
		promtest.Target{Job: "mcpwarden-daemon", Addrs: []string{"127.0.0.1:" + daemonMetrics}},
		promtest.Target{Job: "mcpwarden-collector", Addrs: []string{"127.0.0.1:" + collectorMetrics}})
	const wait = 3 * time.Minute
	p.WaitFor(t, `count(up == 1) == 2`, promtest.Any, wait)
	for _, expr := range []string{
		`mcpwarden_daemon_ready == 1`,
		`mcpwarden_daemon_runs_registered_total`,
		`mcpwarden_daemon_events_total{kind="file_op"}`,
		`mcpwarden_daemon_events_total{kind="landlock_denial"}`,
		`mcpwarden_daemon_findings_total{type="BLOCKED_ATTEMPT"}`,
		`mcpwarden_daemon_audit_stream{state="on"}`,
		`mcpwarden_daemon_kernel_records_total`,
		`mcpwarden_daemon_publish_messages_total{outcome="published"}`,
		`mcpwarden_collector_events_total{kind="file_op"}`,
		`mcpwarden_collector_inserts_total`,
		`mcpwarden_collector_nats_connected`,
		`mcpwarden_collector_consumer_info_timestamp_seconds`,
	} {
		p.WaitFor(t, expr, promtest.Positive, wait)
	}
	for _, expr := range []string{`mcpwarden_daemon_spool_bytes`, `mcpwarden_collector_consumer_lag_messages`, `mcpwarden_daemon_runs_active`} {
		p.WaitFor(t, expr, promtest.Any, wait)
	}
	if got := p.Query(t, `sum(mcpwarden_daemon_drops_total)`); len(got) != 1 || got[0].Value != 0 {
		t.Errorf("the daemon dropped events: %v", got)
	}

	// Stopping the units is clean and takes the socket with it.
	m.StopUnit(t, "mcpwarden-collector.service")
	m.StopUnit(t, "mcpwarden-daemon.service")
	for _, unit := range []string{"mcpwarden-collector.service", "mcpwarden-daemon.service"} {
		if st := m.Show(t, unit, "Result", "ActiveState"); st["Result"] != "success" || st["ActiveState"] != "inactive" {
			t.Errorf("%s after stop: %v", unit, st)
		}
	}
	if _, err := os.Stat(socket); err == nil {
		t.Error("the daemon's socket outlived the unit")
	}
	if strings.Contains(logOf(dlog), secret) || strings.Contains(logOf(clog), secret) {
		t.Error("a unit's log names a full path")
	}
}

// waitFor polls cond until it holds, failing t with what() after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// procStatus is /proc/PID/status as key → first field.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no main pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				out[k] = f[0]
			}
		}
	}
	return out
}

func procCmdline(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

// copyExecutable copies a binary to to, mode 0755 in 0755 directories.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, from, to, 0o755)
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}
