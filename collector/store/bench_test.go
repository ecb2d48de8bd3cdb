package store

import (
	"context"
	"strconv"
	"testing"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
)

// BenchmarkInsert measures one ClickHouse block of 50,000 events (the
// collector's default batch) from []schema.Event to acknowledged insert.
func BenchmarkInsert(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, chtest.Database(b), true, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	evs := eventgen.New("bench").Mixed(50_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Insert(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkStoredBytes measures what an event costs on disk: 1,000,000
// events of eventgen's mix (20 runs of 50,000 on 20 hosts: a launch, a
// decision every tenth, file operations on 1,000 paths), merged into one
// part per partition (OPTIMIZE FINAL), as compressed bytes per row of the
// events table (B/event) and, for the current layout, whose file
// operations have partitions of their own, per file operation and per
// other event. The rollups are reported apart (B/event of rollups). The
// cost model (docs/fleet.md) rests on these figures.
func BenchmarkStoredBytes(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		s, err := Open(ctx, chtest.Database(b), true, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		const runs, perRun = 20, 50_000
		for r := 0; r < runs; r++ {
			g := eventgen.New("bench-host-" + strconv.Itoa(r))
			if err := s.Insert(ctx, g.Mixed(perRun)); err != nil {
				b.Fatal(err)
			}
		}
		for _, t := range []string{"events", "runs_rollup", "denials_rollup"} {
			if err := s.Exec(ctx, "OPTIMIZE TABLE "+t+" FINAL", nil); err != nil {
				b.Fatal(err)
			}
		}
		var rows, bytes, fileRows, fileBytes, rollupBytes uint64
		if err := s.QueryRow(ctx, "SELECT sum(rows), sum(bytes_on_disk), sumIf(rows, partition LIKE '%1)'), sumIf(bytes_on_disk, partition LIKE '%1)') FROM system.parts WHERE database = {db:String} AND table = 'events' AND active",
			Params{"db": s.Database()}, &rows, &bytes, &fileRows, &fileBytes); err != nil {
			b.Fatal(err)
		}
		if err := s.QueryRow(ctx, "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {db:String} AND table IN ('runs_rollup', 'denials_rollup') AND active",
			Params{"db": s.Database()}, &rollupBytes); err != nil {
			b.Fatal(err)
		}
		if rows != runs*perRun {
			b.Fatalf("%d rows stored, want %d", rows, runs*perRun)
		}
		b.ReportMetric(float64(bytes)/float64(rows), "B/event")
		b.ReportMetric(float64(rollupBytes)/float64(rows), "B/event_of_rollups")
		if s.Layout() == LayoutCurrent && fileRows > 0 && fileRows < rows {
			b.ReportMetric(float64(fileBytes)/float64(fileRows), "B/file_op")
			b.ReportMetric(float64(bytes-fileBytes)/float64(rows-fileRows), "B/other_event")
		}
		b.Logf("ClickHouse layout %s: %d events, %d bytes (%d file operations in %d bytes), rollups %d bytes", s.Layout(), rows, bytes, fileRows, fileBytes, rollupBytes)
		s.Close()
	}
}
