package collector

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/query"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestClickHouseClusterReplicaStoppedMidInsert runs the pipeline into a
// ClickHouse cluster of deploy/clickhouse/cluster's shape (2 shards × 2
// replicas, ZooKeeper; ClickHouse 18.16, the only clickhouse-server here):
// `mcpwarden collect --migrate-only --cluster` creates the schema on every
// node; the collector writes through the Distributed table; the replica the
// collector talks to is stopped while events flow. With the replica down
// the collector finishes (its inserts fail over) and the canned queries
// answer; once it is back it catches up (its local table equals its shard
// peer's), and nothing is lost: every produced event is stored once and
// counted once by the canned queries.
func TestClickHouseClusterReplicaStoppedMidInsert(t *testing.T) {
	bin := testenv.Mcpwarden(t)
	cl := chtest.StartCluster(t)
	db := cl.Database()
	dsn := cl.DSN(db)

	out, err := exec.Command(bin, "collect", "--migrate-only", "--cluster", cl.Name, "--clickhouse", dsn).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "on cluster "+cl.Name) {
		t.Fatalf("collect --migrate-only --cluster: %v\n%s", err, out)
	}
	for _, n := range cl.All() {
		for table, engine := range map[string]string{"events": "Distributed", "events_local": "ReplicatedReplacingMergeTree",
			"runs_rollup_local": "ReplicatedAggregatingMergeTree", "denials_rollup": "Distributed", "schema_migrations": "Distributed"} {
			c, err := n.Count("SELECT count() FROM system.tables WHERE database = '" + db + "' AND name = '" + table + "' AND engine = '" + engine + "'")
			if err != nil || c != 1 {
				t.Fatalf("node %s: %s is not a %s table (%d, %v)", n.Addr(), table, engine, c, err)
			}
		}
	}
	// A second migrate, from another node, finds everything applied.
	again, err := exec.Command(bin, "collect", "--migrate-only", "--cluster", cl.Name, "--clickhouse", cl.Nodes[1][1].DSN(db)).CombinedOutput()
	if err != nil || !strings.Contains(string(again), "0 migrations applied now") {
		t.Fatalf("second migrate on another node: %v\n%s", err, again)
	}

	e := newEnv(t, dsn)
	c := e.collector(t, func(cfg *Config) {
		cfg.Migrate = false
		cfg.LagEvery = 200 * time.Millisecond
		cfg.BatchEvents = 2000
		cfg.BatchWait = 100 * time.Millisecond
	})
	start(t, c)

	// 8 hosts, 4 runs each, spread over both shards.
	var evs []schema.Event
	runs := map[string]bool{}
	for h := 0; h < 8; h++ {
		for r := 0; r < 4; r++ {
			g := eventgen.New("cluster-host-" + string(rune('a'+h)))
			runs[g.RunID] = true
			evs = append(evs, g.Mixed(500)...)
		}
	}
	half := len(evs) / 2
	publishAll(t, e.pub, evs[:half], 500)
	// The first node of the DSN (the one the collector is connected to, a
	// replica of shard 1) goes down while the second half flows.
	victim := cl.Nodes[0][0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		publishAll(t, e.pub, evs[half:], 100)
	}()
	// Mid-insert: once the collector has stored the first half, while it
	// works on the second.
	for wait := time.Now().Add(3 * time.Minute); c.Stats().Events < uint64(half); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("the collector stored %d events in 3 minutes, want the first %d: %+v", c.Stats().Events, half, c.Stats())
		}
	}
	victim.Stop()
	<-done
	published := time.Now()

	// The collector stores everything with the replica down (its inserts
	// fail over to the live nodes): the shared consumer has nothing left.
	for wait := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		l := c.Stats().Consumer
		if l.At.After(published) && l.Pending == 0 && l.AckPending == 0 {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("the collector did not finish with a replica down within 3 minutes: %+v", c.Stats())
		}
	}
	st := openStore(t, cl.Nodes[1][0].DSN(db))
	if !st.Distributed() {
		t.Fatal("the store does not see a Distributed events table")
	}
	// The canned queries answer with a replica down. (Parts that only the
	// stopped replica held when it stopped, not yet fetched by its peer,
	// are counted once it is back: replication is asynchronous.)
	ctx := context.Background()
	p := query.Params{From: time.Now().Add(-3 * time.Hour), To: time.Now().Add(time.Hour), Limit: 1000}
	for _, name := range []string{"runs", "findings", "denials", "health", "inventory"} {
		if _, err := query.Run(ctx, st, name, p); err != nil {
			t.Fatalf("%s with a replica down: %v", name, err)
		}
	}
	if _, err := query.Run(ctx, st, "timeline", query.Params{Run: evs[0].RunID, Limit: 10000}); err != nil {
		t.Fatalf("timeline with a replica down: %v", err)
	}

	// The replica comes back; both replicas of its shard catch up.
	victim.Start()
	peer := cl.Nodes[0][1]
	for _, n := range []*chtest.Server{victim, peer} {
		for _, table := range []string{"events_local", "runs_rollup_local", "denials_rollup_local"} {
			if err := n.Exec("SYSTEM SYNC REPLICA " + db + "." + table); err != nil {
				t.Fatalf("sync %s on %s: %v", table, n.Addr(), err)
			}
		}
	}
	waitDistinct(t, st, uint64(len(evs)), 3*time.Minute)
	mine, err1 := victim.Count("SELECT uniqExact(event_id) FROM " + db + ".events_local")
	theirs, err2 := peer.Count("SELECT uniqExact(event_id) FROM " + db + ".events_local")
	if err1 != nil || err2 != nil || mine != theirs || mine == 0 {
		t.Fatalf("the restarted replica holds %d distinct events, its peer %d (%v, %v)", mine, theirs, err1, err2)
	}

	// Every event counted once by the canned queries.
	res, err := query.Run(ctx, st, "runs", p)
	if err != nil {
		t.Fatal(err)
	}
	var allowed int64
	for _, row := range res.Rows {
		allowed += toInt(row[col(t, res, "calls_allowed")])
	}
	wantCalls := int64(0)
	for _, ev := range evs {
		if ev.Kind == schema.KindDecision {
			wantCalls++
		}
	}
	if len(res.Rows) != len(runs) || allowed != wantCalls {
		t.Fatalf("runs: %d runs and %d allowed calls, want %d and %d", len(res.Rows), allowed, len(runs), wantCalls)
	}
	tl, err := query.Run(ctx, st, "timeline", query.Params{Run: evs[0].RunID, Limit: 10000})
	if err != nil || len(tl.Rows) != 500 {
		t.Fatalf("timeline of one run: %v rows, %v", len(tl.Rows), err)
	}
	// Both shards hold events, and together exactly the produced ones.
	var total uint64
	for s, row := range cl.Nodes {
		n, err := row[1].Count("SELECT uniqExact(event_id) FROM " + db + ".events_local")
		if err != nil || n == 0 {
			t.Fatalf("shard %d holds %d events (%v)", s+1, n, err)
		}
		total += n
	}
	if total != uint64(len(evs)) {
		t.Fatalf("the shards hold %d distinct events, produced %d", total, len(evs))
	}
	stats := c.Stats()
	t.Logf("collector %+v; %d events over %d runs", stats, len(evs), len(runs))
}

func col(t *testing.T, r *query.Result, name string) int {
	t.Helper()
	for i, c := range r.Columns {
		if c == name {
			return i
		}
	}
	t.Fatalf("no column %s in %v", name, r.Columns)
	return -1
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case uint64:
		return int64(x)
	case int64:
		return x
	case uint32:
		return int64(x)
	}
	return -1
}

// TestClickHouseClusterRefusesUnknownCluster: --cluster names a cluster of
// the server's remote_servers; a server without it, or without the shard
// and replica macros, refuses the migration with what to fix.
func TestClickHouseClusterRefusesUnknownCluster(t *testing.T) {
	st, err := store.Open(context.Background(), chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{"nosuchcluster", "bad-name;DROP"} {
		if _, err := st.MigrateWith(context.Background(), store.MigrateOptions{Cluster: name}); err == nil {
			t.Fatalf("migrated on cluster %q", name)
		}
	}
}
