package collector

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
)

// BenchmarkPipelineEndToEnd measures events/s from Publish to distinct rows
// in ClickHouse (publisher → embedded JetStream → one collector →
// ClickHouse 18.16), with zero loss checked at the end. Events per
// iteration: MCPWARDEN_BENCH_EVENTS (default 500,000).
func BenchmarkPipelineEndToEnd(b *testing.B) {
	n := 500_000
	if v, err := strconv.Atoi(os.Getenv("MCPWARDEN_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dsn := chtest.Database(b)
		e := newEnvTB(b, dsn)
		g := eventgen.New("bench-host")
		evs := g.Mixed(n)
		c, err := New(Config{NATS: natsOpts(e), ClickHouseDSN: dsn, Migrate: true, Stream: nil, BatchEvents: 100_000, BatchWait: 500 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		st := openStore(b, dsn)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- c.Run(ctx) }()
		for j := 0; j < len(evs); j += 1000 {
			if err := e.pub.Publish(context.Background(), evs[j:min(j+1000, len(evs))]); err != nil {
				b.Fatal(err)
			}
		}
		// Poll the collector's own counter (a ClickHouse count every few ms
		// would compete for the same 2 cores), then check the store once.
		deadline := time.Now().Add(10 * time.Minute)
		for c.Stats().Events < uint64(n) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		el := time.Since(start)
		b.StopTimer()
		var distinct uint64
		if err := st.Conn().QueryRow(context.Background(), "SELECT uniqExact(event_id) FROM events").Scan(&distinct); err != nil {
			b.Fatal(err)
		}
		cancel()
		<-done
		if distinct != uint64(n) {
			b.Fatalf("stored %d distinct events of %d", distinct, n)
		}
		b.ReportMetric(float64(n)/el.Seconds(), "events/s")
		b.Logf("publisher %+v; collector %+v", e.pub.Stats(), c.Stats())
	}
}
