package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/query"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/schema"
)

// fleetQueryDB is the query benchmark's database, kept between runs:
// filling 100 million events takes a quarter of an hour on 2 cores.
const fleetQueryDB = "mcpwarden_fleet_bench"

// Shape of the query benchmark's fleet: fillHosts hosts of DefaultMix whose
// runs fill fillSpan of simulated time (one step a second apart within a
// run); each copy (current layout) adds as many hosts again, fillSpan
// earlier.
const (
	fillHosts = 1000
	fillSpan  = 12 * time.Hour
	fillBase  = 10_000_000
	fillBlock = 50_000 // the collector's default --batch-events
)

// fillQueryDB makes the benchmark database hold exactly n events of the
// fleet's shape: min(n, 10 M) generated host by host by the simulated
// hosts' generator (virtual time) and inserted through store.Insert, the
// collector's batch insert, in blocks of 50,000; when n is more, copies of
// those rows made server-side (INSERT ... SELECT) for further hosts
// (PREFIX-NNNN-cJ: every copy a new set of 1,000 hosts with new run and
// event ids), each fillSpan earlier. It returns the newest event's time.
func fillQueryDB(b *testing.B, n uint64) (*store.Store, time.Time) {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "clickhouse://"+chtest.Addr()+"/"+fleetQueryDB, true, nil)
	if err != nil {
		b.Fatalf("ClickHouse at %s: %v", chtest.Addr(), err)
	}
	b.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	var have uint64
	var maxNS int64
	if err := st.Conn().QueryRow(ctx, "SELECT count(), max(time_ns) FROM events").Scan(&have, &maxNS); err != nil {
		b.Fatal(err)
	}
	if have == n {
		return st, time.Unix(0, maxNS)
	}
	// MCPWARDEN_FLEET_QUERY_BASE (default 10 M) is how many are generated.
	gen := uint64(fillBase)
	if v, err := strconv.ParseUint(os.Getenv("MCPWARDEN_FLEET_QUERY_BASE"), 10, 64); err == nil && v > 0 {
		gen = v
	}
	base := min(n, gen)
	copies := n / base
	if n%base != 0 {
		b.Fatalf("MCPWARDEN_FLEET_QUERY_EVENTS=%d: give at most %d or a multiple of it", n, base)
	}
	if copies > 1 && st.Layout() != store.LayoutCurrent {
		b.Fatalf("more than %d events are copied server-side with the current layout's SQL; the legacy layout (18.16) takes at most %d", base, base)
	}
	// The fill is resumable, step by step: the generated hosts, then each
	// copy; MCPWARDEN_FLEET_QUERY_FILL_BUDGET (default 12m) bounds how long
	// one invocation fills (a flock hold), and the next one carries on.
	budget := 12 * time.Minute
	if v := os.Getenv("MCPWARDEN_FLEET_QUERY_FILL_BUDGET"); v != "" {
		if budget, err = time.ParseDuration(v); err != nil {
			b.Fatalf("MCPWARDEN_FLEET_QUERY_FILL_BUDGET=%q: %v", v, err)
		}
	}
	started := time.Now()
	have = 0
	perCopy := map[uint64]uint64{}
	rows, err := st.Query(ctx, "SELECT if(host LIKE 'fq-____', toUInt64(0), toUInt64OrZero(substring(host, 10))) AS c, count() FROM events GROUP BY c", nil)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var c, k uint64
		if err := rows.Scan(&c, &k); err != nil {
			b.Fatal(err)
		}
		perCopy[c] = k
	}
	rows.Close()
	if perCopy[0] != base {
		b.Logf("filling %s with %d events: %d generated, then %d copies (kept for later runs)", fleetQueryDB, n, base, copies-1)
		for _, t := range []string{"events", "runs_rollup", "denials_rollup"} {
			if err := st.Conn().Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
				b.Fatal(err)
			}
		}
		clear(perCopy)
		end := time.Now().Truncate(time.Second)
		if err := generateInto(ctx, st, base, end.Add(-fillSpan)); err != nil {
			b.Fatal(err)
		}
		b.Logf("generated and inserted %d events in %s", base, time.Since(started).Round(time.Second))
	}
	for j := uint64(1); j < copies; j++ {
		switch perCopy[j] {
		case base:
			continue
		case 0:
		default:
			b.Fatalf("copy %d holds %d of %d events (an interrupted fill): DROP DATABASE %s and run again", j, perCopy[j], base, fleetQueryDB)
		}
		if time.Since(started) > budget {
			b.Fatalf("the fill has used its budget (%s) with %d of %d copies made: run the benchmark again to carry on", budget, j-1, copies-1)
		}
		t := time.Now()
		if err := copyHosts(ctx, st, j); err != nil {
			b.Fatal(err)
		}
		b.Logf("copy %d inserted server-side in %s", j, time.Since(t).Round(time.Second))
	}
	// MCPWARDEN_FLEET_QUERY_OPTIMIZE=0 leaves the parts as the background
	// merges have them (OPTIMIZE FINAL of 100 M rows takes many minutes).
	if os.Getenv("MCPWARDEN_FLEET_QUERY_OPTIMIZE") != "0" {
		t := time.Now()
		chtest.MergeParts(b, st.Conn(), fleetQueryDB)
		b.Logf("merged (OPTIMIZE FINAL per partition) in %s", time.Since(t).Round(time.Second))
	}
	if err := st.Conn().QueryRow(ctx, "SELECT count(), max(time_ns) FROM events").Scan(&have, &maxNS); err != nil {
		b.Fatal(err)
	}
	if have != n {
		b.Fatalf("the benchmark database holds %d events after the fill, want %d", have, n)
	}
	return st, time.Unix(0, maxNS)
}

// generateInto inserts n events of fillHosts simulated hosts, their runs
// spread over fillSpan from t0, in blocks of fillBlock.
func generateInto(ctx context.Context, st *store.Store, n uint64, t0 time.Time) error {
	hosts := make([]*host, fillHosts)
	for i := range hosts {
		h, err := newHost(fmt.Sprintf("fq-%04d", i+1))
		if err != nil {
			return err
		}
		hosts[i] = h
	}
	m := DefaultMix
	perHost := float64(n) / float64(fillHosts)
	runsPerHost := max(1, int(perHost/m.EventsPerRun()))
	gap := fillSpan / time.Duration(runsPerHost)
	block := make([]schema.Event, 0, fillBlock)
	var done uint64
	flush := func() error {
		if len(block) == 0 {
			return nil
		}
		if err := st.Insert(ctx, block); err != nil {
			return err
		}
		done += uint64(len(block))
		block = block[:0]
		return nil
	}
	nextHealth := make([]time.Time, len(hosts))
	for i := range nextHealth {
		nextHealth[i] = t0
	}
	// Round by round, every host's next run, until n events are made.
	for k := 0; done+uint64(len(block)) < n; k++ {
		for i, h := range hosts {
			r := h.newRun(m)
			at := t0.Add(time.Duration(k)*gap + time.Duration(i)*gap/time.Duration(len(hosts)))
			for s := 0; s < r.steps(); s++ {
				now := at.Add(time.Duration(s) * time.Second)
				evs := r.step(s, now)
				for !nextHealth[i].After(now) {
					evs = append(evs, h.health(nextHealth[i]))
					nextHealth[i] = nextHealth[i].Add(m.HealthEvery)
				}
				for _, e := range evs {
					if done+uint64(len(block)) == n {
						return flush()
					}
					block = append(block, e)
					if len(block) == fillBlock {
						if err := flush(); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return flush()
}

// copyHosts inserts copy j of the generated hosts' rows server-side: new
// hosts (HOST-cJ), new run and event ids, j × fillSpan earlier.
func copyHosts(ctx context.Context, st *store.Store, j uint64) error {
	sql := `INSERT INTO events SELECT * REPLACE (
    concat(host, '-c', toString({j:UInt64})) AS host,
    if(run_id = '', '', lower(hex(MD5(concat(run_id, '/', toString({j:UInt64})))))) AS run_id,
    lower(hex(MD5(concat(event_id, '/', toString({j:UInt64}))))) AS event_id,
    time - toIntervalSecond({shift:Int64}) AS time,
    call_start - toIntervalSecond({shift:Int64}) AS call_start,
    call_end - toIntervalSecond({shift:Int64}) AS call_end)
FROM (SELECT * FROM events WHERE host LIKE 'fq-____')` // inside: REPLACE's host would be the WHERE's
	return st.Exec(ctx, sql, store.Params{"j": strconv.FormatUint(j, 10), "shift": strconv.FormatInt(int64(j)*int64(fillSpan/time.Second), 10)})
}

// BenchmarkFleetQueries runs the per-run and per-scope canned queries (and
// the fleet-wide runs and denials for reference) over
// MCPWARDEN_FLEET_QUERY_EVENTS events of the simulated fleet (default 10
// million; 100 million for the figure) and reports p50/p95. The
// runs of the timeline query are picked at random from the stored runs.
func BenchmarkFleetQueries(b *testing.B) {
	n := uint64(fillBase)
	if v, err := strconv.ParseUint(os.Getenv("MCPWARDEN_FLEET_QUERY_EVENTS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	st, last := fillQueryDB(b, n)
	ctx := context.Background()
	type runOf struct{ run, host string }
	var runs []runOf
	rows, err := st.Query(ctx, "SELECT run_id, any(host) FROM runs_rollup GROUP BY run_id ORDER BY cityHash64(run_id) LIMIT 2000", nil)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var r runOf
		if err := rows.Scan(&r.run, &r.host); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, r)
	}
	rows.Close()
	if len(runs) == 0 {
		b.Fatal("no runs stored")
	}
	// What the fleet's events cost on disk (compressed, active parts), by
	// table: the cost model's bytes per stored event (docs/fleet.md).
	var evBytes, evRows, rollBytes uint64
	if err := st.QueryRow(ctx, "SELECT sumIf(data_compressed_bytes, table = 'events'), sumIf(rows, table = 'events'), sumIf(data_compressed_bytes, table != 'events') FROM system.parts WHERE database = {db:String} AND active", store.Params{"db": fleetQueryDB}, &evBytes, &evRows, &rollBytes); err != nil {
		b.Fatal(err)
	}
	var parts uint64
	if err := st.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = {db:String} AND table = 'events' AND active", store.Params{"db": fleetQueryDB}, &parts); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d events stored in %d compressed bytes (%d active parts): %.1f B/event, rollups %.2f B/event", evRows, evBytes, parts, float64(evBytes)/float64(evRows), float64(rollBytes)/float64(evRows))
	week := query.Params{From: last.Add(-8 * 24 * time.Hour), To: last.Add(time.Second), Limit: 1000}
	scoped := week
	scoped.Scope = "scope-3"
	day := query.Params{From: last.Add(-24 * time.Hour), To: last.Add(time.Second), Limit: 1000, Scope: "scope-3"}
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name, query string
		p           func() query.Params
	}{
		// One round trip that reads nothing (SELECT 1): what the connection
		// alone costs, side by side with the queries.
		{"round_trip", "", nil},
		// As `query timeline --run ID` (the run's host looked up first) and
		// with --host too.
		{"timeline_one_run", "timeline", func() query.Params { return query.Params{Run: runs[rng.IntN(len(runs))].run, Limit: 5000} }},
		{"timeline_one_run_host", "timeline", func() query.Params {
			r := runs[rng.IntN(len(runs))]
			return query.Params{Run: r.run, Host: r.host, Limit: 5000}
		}},
		{"runs_one_scope_8d", "runs", func() query.Params { return scoped }},
		{"runs_one_scope_1d", "runs", func() query.Params { return day }},
		{"denials_one_scope_8d", "denials", func() query.Params { return scoped }},
		{"findings_one_host_8d", "findings", func() query.Params { p := week; p.Host = "fq-0007"; return p }},
		{"runs_all_8d", "runs", func() query.Params { return week }},
		{"denials_all_8d", "denials", func() query.Params { return week }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			for range b.N {
				if c.p == nil {
					start := time.Now()
					var one uint8
					if err := st.QueryRow(ctx, "SELECT toUInt8(1)", nil, &one); err != nil || one != 1 {
						b.Fatalf("SELECT 1: %d, %v", one, err)
					}
					lat = append(lat, time.Since(start))
					continue
				}
				p := c.p()
				start := time.Now()
				res, err := query.Run(ctx, st, c.query, p)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				if len(res.Rows) == 0 {
					b.Fatalf("%s returned no rows (%+v)", c.name, p)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*95/100)]), "p95-ms")
		})
	}
}
