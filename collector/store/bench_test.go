package store

import (
	"context"
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
