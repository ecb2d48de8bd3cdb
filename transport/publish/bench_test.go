package publish

import (
	"context"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// BenchmarkJetStreamPublish measures events/s from Publish to JetStream
// acknowledgements (file storage, embedded server), in batches of 1000
// events per message.
func BenchmarkJetStreamPublish(b *testing.B) {
	srv := startNATS(b, b.TempDir(), -1)
	defer srv.Shutdown()
	nc := connect(b, srv.ClientURL())
	ctx := context.Background()
	p, err := New(ctx, Config{Conn: nc, SpoolDir: b.TempDir(), EnsureStream: &stream.Config{}, MaxBatchEvents: 1000})
	if err != nil {
		b.Fatal(err)
	}
	const perCall = 1000
	evs := eventgen.New("bench-host").Mixed(100_000)
	b.ResetTimer()
	start := time.Now()
	n := 0
	for i := 0; i < b.N; i++ {
		off := (i * perCall) % len(evs)
		chunk := evs[off:min(off+perCall, len(evs))]
		if err := p.Publish(ctx, chunk); err != nil {
			b.Fatal(err)
		}
		n += len(chunk)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	if st := p.Stats(); st.Spooled != 0 {
		b.Fatalf("spooled %d messages during the benchmark", st.Spooled)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	p.Close(ctx)
}
