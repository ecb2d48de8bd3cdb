package collector_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestCollectProcessKilled runs the real `mcpwarden collect`, SIGKILLs it
// while events are flowing (no chance to nak or finish an insert), starts
// a new one, and checks that events produced == distinct events stored and
// that queries see no duplicates.
func TestCollectProcessKilled(t *testing.T) {
	dsn := chtest.Database(t)
	bin := testenv.Mcpwarden(t)
	dir := t.TempDir()
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(dir, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := stream.Connect(stream.ConnOptions{URL: ns.ClientURL()}, nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p, err := publish.New(context.Background(), publish.Config{Conn: nc, SpoolDir: filepath.Join(dir, "spool"), EnsureStream: &stream.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	collect := func() *exec.Cmd {
		cmd := exec.Command(bin, "collect", "--nats", ns.ClientURL(), "--clickhouse", dsn, "--migrate",
			"--no-crosscheck", "--batch-events", "2000", "--batch-wait", "50ms", "--ack-wait", "3s")
		var logBuf testenv.LockedBuffer
		cmd.Stderr = &logBuf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("collect log:\n%s", logBuf.String())
			}
		})
		return cmd
	}
	first := collect()
	evs := eventgen.New("host-k").Mixed(60_000)
	ctx := context.Background()
	for i := 0; i < 30_000; i += 500 {
		if err := p.Publish(ctx, evs[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the first collector has stored something, then kill it.
	var st *store.Store
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st == nil {
			st, _ = store.Open(ctx, dsn, false, nil)
		}
		var n uint64
		if st != nil && st.CheckSchema(ctx) == nil {
			_ = st.Conn().QueryRow(ctx, "SELECT count() FROM events").Scan(&n)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first collector stored nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer st.Close()
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	for i := 30_000; i < len(evs); i += 500 {
		if err := p.Publish(ctx, evs[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	collect()
	deadline = time.Now().Add(90 * time.Second)
	var distinct uint64
	for distinct < uint64(len(evs)) && time.Now().Before(deadline) {
		_ = st.Conn().QueryRow(ctx, "SELECT uniqExact(event_id) FROM events").Scan(&distinct)
		time.Sleep(100 * time.Millisecond)
	}
	if distinct != uint64(len(evs)) {
		t.Fatalf("%d distinct events stored, %d produced", distinct, len(evs))
	}
	var rows uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count(), uniqExact(event_id) FROM events FINAL").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != distinct {
		t.Fatalf("FINAL: %d rows for %d events", rows, distinct)
	}
	// The canned query, through the CLI, counts every call once even though
	// the killed collector's messages were redelivered.
	var allowed int
	for _, e := range evs {
		if e.Decision != nil && e.Decision.Decision == "allow" {
			allowed++
		}
	}
	out, err := exec.Command(bin, "query", "runs", "--clickhouse", dsn, "--from", "2020-01-01T00:00:00Z", "--json").Output()
	if err != nil {
		t.Fatalf("mcpwarden query runs: %v", err)
	}
	var runs []map[string]any
	if err := json.Unmarshal(out, &runs); err != nil {
		t.Fatalf("query --json printed %q: %v", out, err)
	}
	if len(runs) != 1 || runs[0]["calls_allowed"] != float64(allowed) || runs[0]["verdict"] != "CLEAN" {
		t.Fatalf("runs: %v (want one run, %d allowed calls)", runs, allowed)
	}
	table, err := exec.Command(bin, "query", "runs", "--clickhouse", dsn, "--from", "2020-01-01T00:00:00Z").Output()
	if err != nil || !strings.Contains(string(table), "VERDICT") || !strings.Contains(string(table), "CLEAN") {
		t.Fatalf("table output: %v\n%s", err, table)
	}
}
