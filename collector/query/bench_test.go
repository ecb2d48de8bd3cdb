package query

import (
	"context"
	"crypto/md5"
	_ "embed"
	"encoding/hex"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

//go:embed testdata/generate_10m.sql
var generateSQL string

const benchDB = "mcpwarden_bench"

// benchStore returns the benchmark database, (re)generating its events
// inside ClickHouse when it does not hold exactly n of them. It is kept
// between runs: generating 10 million rows takes minutes on 2 cores.
func benchStore(b *testing.B, n uint64) (*store.Store, time.Time) {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "clickhouse://"+chtest.Addr()+"/"+benchDB, true, nil)
	if err != nil {
		testenv.Missing(b, "ClickHouse is not reachable: "+err.Error())
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
	if have != n {
		b.Logf("generating %d events in %s (kept for later runs)", n, benchDB)
		// The rollups are kept by materialized views: empty them too.
		for _, t := range []string{"events", "runs_rollup", "denials_rollup"} {
			if err := st.Conn().Exec(ctx, "TRUNCATE TABLE "+t); err != nil {
				b.Fatal(err)
			}
		}
		end := time.Now()
		start := time.Now()
		if err := st.Exec(ctx, generateSQLFor(st.Layout()), store.Params{"n": strconv.FormatUint(n, 10), "end_ns": strconv.FormatInt(end.UnixNano(), 10)}); err != nil {
			b.Fatal(err)
		}
		b.Logf("generated in %s", time.Since(start))
		chtest.MergeParts(b, st.Conn(), benchDB)
		if err := st.Conn().QueryRow(ctx, "SELECT max(time_ns) FROM events").Scan(&maxNS); err != nil {
			b.Fatal(err)
		}
	}
	return st, time.Unix(0, maxNS)
}

// generateSQLFor is generate_10m.sql for layout l: its @NS(x) are the
// instants, Unix ns in the legacy layout and DateTime64 in the current one.
func generateSQLFor(l store.Layout) string {
	sql := generateSQL
	if l == store.LayoutCurrent {
		sql = strings.NewReplacer("kind, time_ns,", "kind, time,", "start_ns, end_ns,", "call_start, call_end,", "@NS(", "fromUnixTimestamp64Nano(").Replace(sql)
	}
	return strings.ReplaceAll(sql, "@NS(", "(")
}

// BenchmarkCannedQueries runs every canned query over the benchmark
// database (MCPWARDEN_BENCH_QUERY_EVENTS events, default 10 million, over
// 7 days, all inside the queried range) and reports p50/p95 latency.
func BenchmarkCannedQueries(b *testing.B) {
	n := uint64(10_000_000)
	if v, err := strconv.ParseUint(os.Getenv("MCPWARDEN_BENCH_QUERY_EVENTS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	st, last := benchStore(b, n)
	sum := md5.Sum([]byte("run5"))
	run := hex.EncodeToString(sum[:])
	all := Params{From: last.Add(-8 * 24 * time.Hour), To: last.Add(time.Second), Limit: 1000}
	cases := []struct {
		name, query string
		p           Params
	}{
		{"runs", "runs", all},
		{"findings", "findings", all},
		{"findings_high_one_host", "findings", Params{From: all.From, To: all.To, Severity: "high", Host: "host-7", Limit: 1000}},
		{"denials", "denials", all},
		{"denials_one_scope", "denials", Params{From: all.From, To: all.To, Scope: "scope-3", Limit: 1000}},
		{"timeline", "timeline", Params{Run: run, Limit: 5000}},
		{"health", "health", all},
		{"inventory", "inventory", all},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				res, err := Run(context.Background(), st, c.query, c.p)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				if len(res.Rows) == 0 {
					b.Fatalf("%s returned no rows", c.name)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*95/100)].Microseconds())/1000, "p95-ms")
		})
	}
}
