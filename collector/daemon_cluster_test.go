package collector

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/query"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestDaemonBinaryIntoNATSClusterLeaderKilled: the real `mcpwarden daemon`
// binary publishes into a 3-node JetStream cluster (embedded nodes, the
// stream and the collectors' consumer R3) as its host's user, with every
// node's URL, while a run registered with it is live and the stream's
// leader is killed mid-run and comes back. Every event the daemon
// published is in the stream and stored in ClickHouse exactly once (FINAL
// rows == distinct == the stream's distinct batches' events), and the run
// is judged. The other cluster tests drive the publisher in process.
func TestDaemonBinaryIntoNATSClusterLeaderKilled(t *testing.T) {
	testenv.RequireRoot(t)
	// Its daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	host := schema.LocalOrigin().Host
	cl := natstest.StartCluster(t, natstest.ClusterConfig{Hosts: []string{host}})
	dsn := chtest.Database(t)
	c, err := New(Config{NATS: cl.Conn(stream.RoleCollector, "", "collector"), ClickHouseDSN: dsn, Migrate: true,
		Stream: &stream.Config{}, BatchEvents: 2000, BatchWait: 100 * time.Millisecond,
		AckWait: 10 * time.Second, MaxBackoff: 500 * time.Millisecond,
		CrossCheckEvery: time.Second, CrossCheckCfg: crosscheck.Config{Window: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	waitClusterConsumer(t, cl)
	cl.WaitStreamCurrent(t, stream.Name, 3)

	bin := testenv.Mcpwarden(t)
	tr := testenv.NewTree(t, testenv.ReadScope("cluster-daemon"))
	naive := filepath.Join(tr.Root, "naiveserver")
	testenv.MustGoBuild(t, naive, "./internal/naiveserver")
	pintest.Unload(t, tr.State)
	user := cl.User(stream.RoleDaemon, host)
	pw := filepath.Join(tr.Root, "host.password")
	if err := os.WriteFile(pw, []byte(cl.Password(user)), 0o600); err != nil {
		t.Fatal(err)
	}
	dlog := &testenv.LockedBuffer{}
	daemon := exec.Command(bin, "daemon", "--socket", tr.Socket, "--nats", cl.URL(), "--nats-user", user, "--nats-password-file", pw,
		"--state-dir", tr.State, "--enable-audit", "--no-crosscheck", "--health-interval", "1s")
	daemon.Stdout, daemon.Stderr = dlog, dlog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = daemon.Process.Signal(syscall.SIGTERM)
			_ = daemon.Wait()
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", dlog.String())
		}
	})
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(dlog.String(), "daemon started"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", dlog.String())
		}
	}

	run := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", tr.Socket, "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", naive)
	run.Dir = tr.Base
	live := testenv.StartNaive(t, run)
	// 500 reads of the workspace before the kill and 500 while the leader
	// is down: file operations in flight when it dies.
	reads := fmt.Sprintf(`{"op":"openloop","path":%q,"fd":500}`, tr.Inside)
	for _, op := range []string{`{"op":"ping"}`, reads} {
		if a := live.Do(op); !strings.Contains(a, `"ok":true`) {
			t.Fatalf("naive: %q", a)
		}
	}
	leader := cl.StreamLeader(t, stream.Name)
	cl.Kill(leader)
	// The daemon publishes a health report every second and the run goes
	// on while the leader is down.
	time.Sleep(time.Second)
	for _, op := range []string{reads, `{"op":"pid"}`} {
		if a := live.Do(op); !strings.Contains(a, `"ok":true`) {
			t.Fatalf("naive: %q", a)
		}
	}
	cl.Restart(leader)
	live.Finish()
	cl.WaitStreamCurrent(t, stream.Name, 3)
	// Everything the daemon had is published (a stop flushes its publisher)
	// before the counts are taken.
	time.Sleep(2 * time.Second)
	stopped = true
	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err != nil {
		t.Fatalf("daemon: %v\n%s", err, dlog.String())
	}

	events, msgs, dups := streamContents(t, cl)
	if events == 0 {
		t.Fatal("the stream holds no events")
	}
	st := openStore(t, dsn)
	if got := waitCount(t, st, "SELECT uniqExact(event_id) FROM events", events, 5*time.Minute); got < events {
		t.Fatalf("%d distinct events stored, the stream holds %d", got, events)
	}
	waitDrained(t, cl)

	// The run is judged (the collector's cross-check runs every second).
	var verdict string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		res, err := query.Run(context.Background(), st, "runs", query.Params{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Minute), Scope: "cluster-daemon"})
		if err == nil && len(res.Rows) == 1 {
			for i, col := range res.Columns {
				if col == "verdict" {
					verdict, _ = res.Rows[0][i].(string)
				}
			}
		}
		if verdict != "" || time.Now().After(deadline) {
			break
		}
	}
	if verdict == "" {
		t.Errorf("the run was not judged")
	}
	stop()
	// Exactly once: every event of the stream stored, plus the collector's
	// own findings (inserted directly, never through the stream), and no
	// event id twice after FINAL.
	var rows, distinct uint64
	if err := st.Conn().QueryRow(context.Background(), "SELECT count(), uniqExact(event_id) FROM events FINAL").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	var readsStored uint64
	key, err := os.ReadFile(filepath.Join(tr.State, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	hasher, err := schema.NewPathHasher(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.QueryRow(context.Background(), "SELECT uniqExact(event_id) FROM events WHERE kind = 'file_op' AND path_hash = {h:String}", store.Params{"h": string(hasher.Hash(tr.Inside))}, &readsStored); err != nil {
		t.Fatal(err)
	}
	if readsStored < 1000 {
		t.Errorf("%d reads of the workspace file stored, the run made 1000", readsStored)
	}
	if findings := c.Stats().Findings; rows != distinct || distinct != events+findings {
		t.Errorf("events FINAL: %d rows, %d distinct; the stream holds %d events and the collector made %d findings", rows, distinct, events, findings)
	}
	t.Logf("killed the stream leader %s mid-run; the stream holds %d messages (%d second copies of a replayed batch), %d events; stored %d rows FINAL, %d distinct, %d reads; the run reads %s",
		cl.Nodes()[leader].Name, msgs, dups, events, rows, distinct, readsStored, verdict)
}
