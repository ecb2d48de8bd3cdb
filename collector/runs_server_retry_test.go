package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestInsertBetweenRunsServerALTERsAndDropIsRetried: migration
// runs_server adds runs_rollup's columns, creates runs_rollup_mv2, then
// drops the old runs_rollup_mv. A collector inserting while another one
// migrates can meet the moment between: the old view still there, its
// target already wider. On 18.16 such an insert fails (the old view lacks
// the new columns), and the migration's comment and docs/pipeline.md say
// the collector retries it (nothing acked) so nothing is lost. The test
// puts the database in that state (the old view of 0002 recreated next to
// mv2), checks that an insert fails there on 18.16, lets the collector
// meet it (every message delivered, none acked), then drops the old view
// as the migration does: every event is stored once, and runs_rollup
// counts what the events table holds.
func TestInsertBetweenRunsServerALTERsAndDropIsRetried(t *testing.T) {
	ctx := context.Background()
	dsn := chtest.Database(t)
	e := newEnv(t, dsn)
	stop := start(t, e.collector(t, nil)) // migrates the database through every migration
	defer stop()
	st := openStore(t, dsn)
	for deadline := time.Now().Add(3 * time.Minute); st.CheckMigrated(ctx) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not migrate: %v", st.CheckMigrated(ctx))
		}
	}
	ms, err := chschema.Migrations(string(st.Layout()))
	if err != nil {
		t.Fatal(err)
	}
	oldView := ""
	for _, m := range ms {
		for _, s := range m.Statements {
			if strings.Contains(s, "MATERIALIZED VIEW IF NOT EXISTS runs_rollup_mv ") {
				oldView = s
			}
		}
	}
	if oldView == "" {
		t.Fatal("no migration creates runs_rollup_mv")
	}
	if err := st.Conn().Exec(ctx, oldView); err != nil {
		t.Fatalf("recreate the old view: %v", err)
	}
	legacy := st.Layout() == store.LayoutLegacy
	if err := st.Insert(ctx, eventgen.New("probe").Mixed(10)); legacy && err == nil {
		t.Fatal("on 18.16 an insert through the old view next to the wider runs_rollup succeeded: the test no longer makes the state it names")
	}
	evs := eventgen.New("retry-host").Mixed(3_000)
	for i := 0; i < len(evs); i += 500 {
		if err := e.pub.Publish(ctx, evs[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := e.pub.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if legacy {
		// The collector holds every message, none acked, while its inserts
		// fail (it retries them itself; the messages stay unacknowledged).
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			si, serr := natstest.StreamInfo(natsOpts(e), stream.Name)
			info, err := natstest.ConsumerInfo(natsOpts(e), stream.Name, stream.CollectorDurable)
			if serr == nil && err == nil && si.State.LastSeq > 0 && info.Delivered.Stream == si.State.LastSeq &&
				info.AckFloor.Stream == 0 && uint64(info.NumAckPending) == si.State.Msgs {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the collector does not hold every message unacked while inserts fail: %+v, %v, %v", info, err, serr)
			}
		}
	}
	if err := st.Conn().Exec(ctx, "DROP TABLE IF EXISTS runs_rollup_mv"); err != nil {
		t.Fatal(err)
	}
	// Every event once in events, and runs_rollup (fed by mv2 once the
	// retried insert went through) counts what a scan of events counts.
	const q = `SELECT
    (SELECT uniqExact(event_id) FROM events WHERE host = 'retry-host'),
    (SELECT count() FROM events FINAL WHERE host = 'retry-host'),
    (SELECT uniqExactIf(event_id, kind = 'decision' AND decision = 'allow') FROM events WHERE host = 'retry-host'),
    (SELECT uniqExactIfMerge(calls_allowed) FROM runs_rollup WHERE host = 'retry-host'),
    (SELECT uniqExactIf(event_id, kind = 'finding') FROM events WHERE host = 'retry-host'),
    (SELECT uniqExactIfMerge(findings) FROM runs_rollup WHERE host = 'retry-host')`
	var distinct, final, allowed, rolledAllowed, findings, rolledFindings uint64
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if err := st.Conn().QueryRow(ctx, q).Scan(&distinct, &final, &allowed, &rolledAllowed, &findings, &rolledFindings); err != nil {
			t.Fatal(err)
		}
		if distinct == uint64(len(evs)) && final == distinct && allowed > 0 && rolledAllowed == allowed && rolledFindings == findings {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored %d distinct (%d rows after FINAL) of %d; allowed calls %d, in runs_rollup %d; findings %d, in runs_rollup %d",
				distinct, final, len(evs), allowed, rolledAllowed, findings, rolledFindings)
		}
	}
}
