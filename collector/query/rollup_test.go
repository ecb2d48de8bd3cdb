package query

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

//go:embed testdata/runs_scan.sql
var runsScanSQL string

//go:embed testdata/denials_scan.sql
var denialsScanSQL string

// compareWithScan runs canned query name and the plain scan scanSQL with p
// and fails unless they return the same columns and rows.
func compareWithScan(t *testing.T, st *store.Store, name, scanSQL string, p Params) {
	t.Helper()
	ctx := context.Background()
	got, err := Run(ctx, st, name, p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := runSQL(ctx, st, name+"_scan", scanSQL, p.values())
	if err != nil {
		t.Fatal(err)
	}
	if name == "runs" {
		if err := addLauncherUIDs(ctx, st, want); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got.Columns, want.Columns) {
		t.Fatalf("columns %v, scan %v", got.Columns, want.Columns)
	}
	if !reflect.DeepEqual(got.Rows, want.Rows) {
		t.Fatalf("%s %+v: rollup\n%v\nscan\n%v", name, p, got.Rows, want.Rows)
	}
}

// storeBefore opens a database of its own migrated up to the one before
// the migration called name (what an earlier release left), checks that
// `mcpwarden query` refuses it naming that migration, and returns it with
// the layout's migrations and that one's version.
func storeBefore(t *testing.T, name string) (*store.Store, []chschema.Migration, int) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ms, err := chschema.Migrations(string(st.Layout()))
	if err != nil {
		t.Fatal(err)
	}
	version := 0
	for _, m := range ms {
		if m.Name == name {
			version = m.Version
		}
	}
	if version == 0 {
		t.Fatalf("the %s layout has no %s migration", st.Layout(), name)
	}
	if _, err := st.MigrateWith(ctx, store.MigrateOptions{Through: version - 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckMigrated(ctx); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "collect --migrate") {
		t.Fatalf("a database without %s is not refused clearly: %v", name, err)
	}
	return st, ms, version
}

// rerunMigration applies the statements of migration name again, as a
// crash before its record or two collectors migrating at once would: its
// backfill adds rows the materialized view already made.
func rerunMigration(t *testing.T, st *store.Store, name string) {
	t.Helper()
	ms, err := chschema.Migrations(string(st.Layout()))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range ms {
		if m.Name != name {
			continue
		}
		found = true
		for _, s := range m.Statements {
			err := st.Conn().Exec(context.Background(), s)
			if err != nil && strings.Contains(s, "ADD COLUMN") && strings.Contains(err.Error(), "already exists") {
				continue // 18.16 has no ADD COLUMN IF NOT EXISTS; Migrate accepts this too
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !found {
		t.Fatalf("no migration %s", name)
	}
}

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
		// As the launcher writes them: the start record names the
		// executable; once the proxy completed the handshake, the
		// identified record (and the exit record after it) names the
		// server, its version and era. Every fourth server never
		// identifies itself.
		mode := schema.ModeEnforce
		if r%5 == 0 {
			mode = schema.ModeAudit
		}
		l := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0)
		l.Launch = &schema.Launch{Phase: schema.PhaseStart, Mode: mode, LandlockABI: 7, ServerExe: []string{"node", "python3"}[r%2]}
		evs = append(evs, l)
		identified := r%4 != 3
		launch := func(phase schema.LaunchPhase, k int) {
			e := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0)
			e.Launch = &schema.Launch{Phase: phase, Mode: mode, LandlockABI: 7, ServerExe: l.Launch.ServerExe}
			if identified {
				e.Launch.ServerName, e.Launch.ServerVersion, e.Launch.ProtocolEra = "server-"+strconv.Itoa(r%4), "1."+strconv.Itoa(r), []string{"legacy", "modern"}[r%2]
			}
			at(&e, k)
			evs = append(evs, e)
		}
		for k := 1; k < 120; k++ {
			var e schema.Event
			if k == 2 && identified {
				launch(schema.PhaseIdentified, k)
			}
			if k == 119 && r%3 != 0 {
				launch(schema.PhaseExit, k)
			}
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
				types := []schema.FindingType{schema.FindingEscape, schema.FindingBlockedAttempt, schema.FindingUnattributedAccess, schema.FindingObservationGap}
				sevs := []schema.Severity{schema.SeverityCritical, schema.SeverityHigh, schema.SeverityMedium, schema.SeverityLow}
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
	st := migratedStore(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).Add(17*time.Second + 123456789)
	evs := rollupScenario(t0)
	// Inserted in three blocks; the middle third twice (a redelivery).
	third := len(evs) / 3
	for _, part := range [][]schema.Event{evs[:2*third], evs[third : 2*third], evs[2*third:]} {
		if err := st.Insert(ctx, part); err != nil {
			t.Fatal(err)
		}
	}

	compare := func(t *testing.T, p Params) { t.Helper(); compareWithScan(t, st, "runs", runsScanSQL, p) }
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

	rerunMigration(t, st, "runs_rollup")
	var rollupRows uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM runs_rollup").Scan(&rollupRows); err != nil {
		t.Fatal(err)
	}
	if rollupRows == 0 {
		t.Fatal("runs_rollup is empty: the materialized view did not fire")
	}
	t.Run("after backfill again", ranges)

	// And the counts are the distinct events, not the rows.
	res, err := Run(ctx, st, "runs", Params{From: t0.Add(-time.Hour), To: time.Now(), Limit: 1000})
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
	checkServers(t, res)
}

// checkServers: of rollupScenario's 12 runs, the 9 that identified
// themselves carry name, version and era, the other 3 only their
// executable.
func checkServers(t *testing.T, res *Result) {
	t.Helper()
	col := map[string]int{}
	for i, c := range res.Columns {
		col[c] = i
	}
	str := func(r []any, c string) string { s, _ := r[col[c]].(string); return s }
	identified := 0
	for _, r := range res.Rows {
		if str(r, "server_exe") == "" {
			t.Errorf("run %s: no executable", str(r, "run_id"))
		}
		if id, _ := r[col["identified"]].(uint8); id == 1 {
			identified++
			if !strings.HasPrefix(str(r, "server"), "server-") || !strings.HasPrefix(str(r, "server_version"), "1.") || str(r, "protocol_era") == "" {
				t.Errorf("an identified run without its server: %v", r)
			}
		} else if str(r, "server") != "" || str(r, "server_version") != "" || str(r, "protocol_era") != "" {
			t.Errorf("an unidentified run with a server: %v", r)
		}
	}
	if identified != 9 || len(res.Rows) != 12 {
		t.Errorf("%d of %d runs identified, want 9 of 12", identified, len(res.Rows))
	}
}

// TestRunsServerMigratesForward: a database an earlier release left
// (migrated up to the one before runs_server, holding runs) is migrated
// forward: the runs it held gain their servers' versions and eras from the
// backfill, the runs inserted afterwards from the new view, the old view
// is gone, and the query matches the scan. Until then `mcpwarden query`
// refuses the database, naming the migration.
func TestRunsServerMigratesForward(t *testing.T) {
	ctx := context.Background()
	st, ms, version := storeBefore(t, "runs_server")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).Add(17*time.Second + 123456789)
	evs := rollupScenario(t0)
	half := len(evs) / 2
	if err := st.Insert(ctx, evs[:half]); err != nil {
		t.Fatal(err)
	}
	var want []int // runs_server and every later migration
	for _, m := range ms {
		if m.Version >= version {
			want = append(want, m.Version)
		}
	}
	applied, err := st.Migrate(ctx)
	if err != nil || !reflect.DeepEqual(applied, want) {
		t.Fatalf("migrated forward: applied %v, %v; want %v", applied, err, want)
	}
	if err := st.CheckMigrated(ctx); err != nil {
		t.Fatal(err)
	}
	views := map[string]bool{}
	rows, err := st.Conn().Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'MaterializedView'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		views[n] = true
	}
	rows.Close()
	if views["runs_rollup_mv"] || !views["runs_rollup_mv2"] || !views["denials_rollup_mv"] {
		t.Fatalf("views after the migration: %v", views)
	}
	if err := st.Insert(ctx, evs[half:]); err != nil {
		t.Fatal(err)
	}
	end := t0.Add(12*23*time.Second + 121*1700*time.Millisecond)
	all := Params{From: t0.Add(-time.Hour), To: end.Add(time.Hour), Limit: 1000}
	compareWithScan(t, st, "runs", runsScanSQL, all)
	rng := rand.New(rand.NewPCG(31, 37))
	for i := 0; i < 10; i++ {
		from := t0.Add(-time.Minute + time.Duration(rng.Int64N(int64(end.Sub(t0)))))
		compareWithScan(t, st, "runs", runsScanSQL, Params{From: from, To: from.Add(time.Duration(rng.Int64N(int64(3 * time.Minute)))), Limit: 1000})
	}
	// Whole minutes only: the rollup alone must hold the servers of the
	// runs inserted before the migration.
	whole := Params{From: t0.Truncate(time.Minute), To: end.Truncate(time.Minute).Add(2 * time.Minute), Limit: 1000}
	compareWithScan(t, st, "runs", runsScanSQL, whole)
	res, err := Run(ctx, st, "runs", all)
	if err != nil {
		t.Fatal(err)
	}
	checkServers(t, res)
	// A second migrate (another collector) applies nothing; rerunning the
	// migration's statements (a crash before its record) changes nothing.
	if applied, err := st.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Fatalf("second migrate: %v, %v", applied, err)
	}
	rerunMigration(t, st, "runs_server")
	compareWithScan(t, st, "runs", runsScanSQL, all)
}

// denialsScenario spreads denials of both layers, with and without a run,
// over three days on several hosts and scopes.
func denialsScenario(t0 time.Time) []schema.Event {
	rng := rand.New(rand.NewPCG(17, 19))
	var evs []schema.Event
	gens := make([]*eventgen.Gen, 6)
	for i := range gens {
		gens[i] = eventgen.New(fmt.Sprintf("host-%d", i%3))
		gens[i].ScopeID = fmt.Sprintf("scope-%d", i%2)
	}
	tools := []string{"read_text_file", "write_file", "list_directory"}
	classes := []schema.PathClass{schema.PathSecret, schema.PathOutside, schema.PathWorkspace}
	at := t0
	for i := 0; i < 900; i++ {
		at = at.Add(time.Duration(rng.Int64N(int64(9*time.Minute))) + 1)
		g := gens[rng.IntN(len(gens))]
		run := g.RunID
		var e schema.Event
		switch rng.IntN(4) {
		case 0, 1:
			e = g.Decision(i)
			e.Decision.Tool = tools[rng.IntN(len(tools))]
			if rng.IntN(3) != 0 {
				e.Decision.Decision, e.Decision.ErrorCode = "deny", []string{"PATH_OUTSIDE_SCOPE", "TOOL_NOT_ALLOWED"}[rng.IntN(2)]
			}
		default:
			scope, hash := g.ScopeID, g.ScopeHash
			if rng.IntN(3) == 0 {
				// A denial the daemon could not tie to a run: no run, no scope.
				run, scope, hash = "", "", ""
			}
			e = g.Origin.NewEvent(schema.KindLandlockDenial, run, scope, hash, at)
			e.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"},
				PathHash: g.Hasher.Hash("/etc/shadow"), PathClass: classes[rng.IntN(len(classes))], PID: 1}
		}
		e.TimeNS = at.UnixNano()
		evs = append(evs, e)
	}
	return evs
}

// TestDenialsRollupMatchesScan checks the rollup-backed denials query
// (whole days, hours and minutes from denials_rollup, partial minutes from
// the events table) against a plain scan, for ranges from seconds to days,
// after redelivered duplicates and a repeated backfill.
func TestDenialsRollupMatchesScan(t *testing.T) {
	ctx := context.Background()
	st := migratedStore(t)
	t0 := time.Now().Add(-4 * 24 * time.Hour).Truncate(time.Hour).Add(7*time.Minute + 3*time.Second + 5)
	evs := denialsScenario(t0)
	end := time.Unix(0, evs[len(evs)-1].TimeNS)
	half := len(evs) / 2
	for _, part := range [][]schema.Event{evs[:half], evs[half/2 : half], evs[half:], evs[len(evs)-50:]} {
		if err := st.Insert(ctx, part); err != nil { // two overlaps: redeliveries
			t.Fatal(err)
		}
	}
	ranges := func(t *testing.T) {
		compareWithScan(t, st, "denials", denialsScanSQL, Params{From: t0.Add(-time.Hour), To: end.Add(time.Hour), Limit: 1000})
		rng := rand.New(rand.NewPCG(23, 29))
		span := int64(end.Sub(t0))
		widths := []time.Duration{40 * time.Second, 3 * time.Minute, 2 * time.Hour, 30 * time.Hour, 80 * time.Hour}
		for i := 0; i < 40; i++ {
			from := t0.Add(time.Duration(rng.Int64N(span)))
			to := from.Add(time.Duration(rng.Int64N(int64(widths[i%len(widths)]))))
			p := Params{From: from, To: to, Limit: 1000}
			switch i % 7 {
			case 1:
				p.Host = "host-2"
			case 2:
				p.Scope = "scope-1"
			case 3:
				p.Limit = 2
			}
			compareWithScan(t, st, "denials", denialsScanSQL, p)
		}
		// Edges in the same minute as a denial, with and without a run.
		for i, e := range evs {
			if i%37 != 0 {
				continue
			}
			at := time.Unix(0, e.TimeNS)
			compareWithScan(t, st, "denials", denialsScanSQL, Params{From: at.Add(-time.Duration(i%50) * time.Second), To: at.Add(26 * time.Hour), Limit: 1000})
			compareWithScan(t, st, "denials", denialsScanSQL, Params{From: at.Add(-27 * time.Hour), To: at.Add(time.Nanosecond), Limit: 1000})
		}
		day := t0.Truncate(24 * time.Hour).Add(24 * time.Hour)
		compareWithScan(t, st, "denials", denialsScanSQL, Params{From: day, To: day.Add(48 * time.Hour), Limit: 1000})
	}
	t.Run("after redelivery", ranges)
	rerunMigration(t, st, "denials_rollup")
	t.Run("after backfill again", ranges)

	// The counts are distinct events: the overall total is the number of
	// denials produced, however often they were inserted.
	res, err := Run(ctx, st, "denials", Params{From: t0.Add(-time.Hour), To: end.Add(time.Hour), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var want, got, runless uint64
	for _, e := range evs {
		switch {
		case e.RunID == "":
			runless++
		case e.Kind == schema.KindLandlockDenial || e.Decision.Decision == "deny":
			want++
		}
	}
	if runless == 0 {
		t.Fatal("the scenario has no denial outside a run")
	}
	for _, r := range res.Rows {
		if r[0] == "" {
			t.Fatalf("a row without a scope: %v (denials outside any run belong to query health)", r)
		}
	}
	for _, r := range res.Rows {
		got += r[4].(uint64)
	}
	if res.Columns[4] != "denials" || got != want {
		t.Fatalf("%d denials counted (column %s), want %d", got, res.Columns[4], want)
	}
}
