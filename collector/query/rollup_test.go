package query

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/schema"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

//go:embed testdata/runs_scan.sql
var runsScanSQL string

// rollupScenario makes runs on several hosts and scopes whose events of
// every kind the runs query counts are spread over a few minutes, at
// instants that are not minute-aligned.
func rollupScenario(t0 time.Time) []schema.Event {
	rng := rand.New(rand.NewPCG(5, 7))
	var evs []schema.Event
	for r := 0; r < 12; r++ {
		g := eventgen.New(fmt.Sprintf("host-%d", r%3))
		g.ScopeID = fmt.Sprintf("scope-%d", r%2)
		g.T0 = t0.Add(time.Duration(r) * 23 * time.Second)
		at := func(e *schema.Event, k int) {
			e.TimeNS = g.T0.Add(time.Duration(k)*1700*time.Millisecond + time.Duration(rng.IntN(1000))*time.Microsecond).UnixNano()
		}
		l := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0)
		l.Launch = &schema.Launch{Phase: "start", Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node",
			ServerName: "server-" + strconv.Itoa(r%4), ProtocolEra: "legacy"}
		if r%5 == 0 {
			l.Launch.Mode = schema.ModeAudit
		}
		evs = append(evs, l)
		for k := 1; k < 120; k++ {
			var e schema.Event
			switch k % 9 {
			case 0, 3, 6:
				e = g.Decision(k)
				if rng.IntN(4) == 0 {
					e.Decision.Decision, e.Decision.ErrorCode = "deny", string(schema.ErrPathOutsideScope)
				}
			case 1:
				e = g.Origin.NewEvent(schema.KindLandlockDenial, g.RunID, g.ScopeID, g.ScopeHash, g.T0)
				e.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"},
					PathHash: g.Hasher.Hash("/etc/shadow"), PathClass: schema.PathSecret, PID: 1}
			case 2:
				if rng.IntN(3) != 0 {
					continue
				}
				e = g.Origin.NewEvent(schema.KindFinding, g.RunID, g.ScopeID, g.ScopeHash, g.T0)
				types := []string{"ESCAPE", "BLOCKED_ATTEMPT", "UNATTRIBUTED_ACCESS", "OBSERVATION_GAP"}
				sevs := []string{"critical", "high", "medium", "low"}
				e.Finding = &schema.Finding{Type: types[rng.IntN(len(types))], Severity: sevs[rng.IntN(len(sevs))],
					EvidenceIDs: []string{schema.NewID()}, Reason: "test"}
			default:
				e = g.FileOp(k)
			}
			at(&e, k)
			evs = append(evs, e)
		}
	}
	return evs
}

// TestRunsRollupMatchesScan checks that the rollup-backed runs query gives
// exactly what a plain scan of the events table gives, for ranges whose
// edges fall inside minutes, with filters and small limits, after
// redelivered duplicates and after the migration's backfill has run again
// over rows the materialized view already saw.
func TestRunsRollupMatchesScan(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).Add(17*time.Second + 123456789)
	evs := rollupScenario(t0)
	// Inserted in three blocks; the middle third twice (a redelivery).
	third := len(evs) / 3
	for _, part := range [][]schema.Event{evs[:2*third], evs[third : 2*third], evs[2*third:]} {
		if err := st.Insert(ctx, part); err != nil {
			t.Fatal(err)
		}
	}

	compare := func(t *testing.T, p Params) {
		t.Helper()
		got, err := Run(ctx, st.Conn(), "runs", p)
		if err != nil {
			t.Fatal(err)
		}
		sql, err := Bind(runsScanSQL, p.values())
		if err != nil {
			t.Fatal(err)
		}
		want, err := runSQL(ctx, st.Conn(), "runs_scan", sql)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Columns, want.Columns) {
			t.Fatalf("columns %v, scan %v", got.Columns, want.Columns)
		}
		if !reflect.DeepEqual(got.Rows, want.Rows) {
			t.Fatalf("%+v: rollup\n%v\nscan\n%v", p, got.Rows, want.Rows)
		}
	}
	ranges := func(t *testing.T) {
		end := t0.Add(12*23*time.Second + 121*1700*time.Millisecond)
		compare(t, Params{From: t0.Add(-time.Hour), To: end.Add(time.Hour), Limit: 1000})
		rng := rand.New(rand.NewPCG(11, 13))
		span := int64(end.Sub(t0)) + int64(2*time.Minute)
		for i := 0; i < 40; i++ {
			from := t0.Add(-time.Minute + time.Duration(rng.Int64N(span)))
			to := from.Add(time.Duration(rng.Int64N(int64(3 * time.Minute))))
			if i%4 == 0 { // both edges inside one minute
				to = from.Add(time.Duration(rng.Int64N(int64(50 * time.Second))))
			}
			p := Params{From: from, To: to, Limit: 1 + rng.IntN(6)}
			switch i % 5 {
			case 1:
				p.Host = "host-1"
			case 2:
				p.Scope = "scope-0"
			case 3:
				p.Limit = 1000
			}
			compare(t, p)
		}
		// Minute-aligned edges: no partial minute at all.
		compare(t, Params{From: t0.Truncate(time.Minute), To: t0.Truncate(time.Minute).Add(3 * time.Minute), Limit: 1000})
	}
	t.Run("after redelivery", ranges)

	// The migration's backfill run again (a crash before its record, or
	// two collectors migrating at once) adds rows the view already made.
	ms, err := chschema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name != "runs_rollup" {
			continue
		}
		for _, s := range m.Statements {
			if err := st.Conn().Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	var rollupRows uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM runs_rollup").Scan(&rollupRows); err != nil {
		t.Fatal(err)
	}
	if rollupRows == 0 {
		t.Fatal("runs_rollup is empty: the materialized view did not fire")
	}
	t.Run("after backfill again", ranges)

	// And the counts are the distinct events, not the rows.
	res, err := Run(ctx, st.Conn(), "runs", Params{From: t0.Add(-time.Hour), To: time.Now(), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]uint64{}
	for _, e := range evs {
		if e.Kind == schema.KindDecision && e.Decision.Decision == "allow" {
			allowed[e.RunID]++
		}
	}
	col := map[string]int{}
	for i, c := range res.Columns {
		col[c] = i
	}
	if len(res.Rows) != 12 {
		t.Fatalf("%d runs, want 12", len(res.Rows))
	}
	for _, r := range res.Rows {
		if got := r[col["calls_allowed"]].(uint64); got != allowed[r[col["run_id"]].(string)] {
			t.Fatalf("run %v: %d allowed calls, want %d", r[col["run_id"]], got, allowed[r[col["run_id"]].(string)])
		}
	}
}
