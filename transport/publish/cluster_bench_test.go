package publish

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// BenchmarkClusterPublish measures events/s from Publish to JetStream
// acknowledgements on a 3-node cluster of Debian's nats-server, each node
// its own process, the publisher in this one, side by side in one run: the
// stream at R1 (one node stores) and at R3 (every message replicated to
// all three before it is acknowledged). It reports both and the ratio.
func BenchmarkClusterPublish(b *testing.B) {
	bin := natstest.DebianServer(b)
	evs := eventgen.New("bench-host").Mixed(100_000)
	rate := map[int]float64{}
	for _, replicas := range []int{1, 3} {
		// A cluster of its own for each, so that neither run replicates
		// or stores the other's messages.
		cl := natstest.StartCluster(b, natstest.ClusterConfig{Hosts: []string{"bench-host"}, Bin: bin})
		admin, _ := natstest.Connect(b, cl.Conn(stream.RoleCollector, "", "bench-admin"))
		ajs, _ := jetstream.New(admin)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if _, err := stream.Ensure(ctx, ajs, stream.Config{Replicas: replicas}); err != nil {
			b.Fatal(err)
		}
		cancel()
		cl.WaitStreamCurrent(b, stream.Name, replicas)
		nc, err := stream.Connect(cl.Conn(stream.RoleDaemon, "bench-host", "bench"))
		if err != nil {
			b.Fatal(err)
		}
		p, err := New(context.Background(), Config{Conn: nc, SpoolDir: b.TempDir(), MaxBatchEvents: 1000})
		if err != nil {
			b.Fatal(err)
		}
		const perCall = 1000
		b.ResetTimer()
		start := time.Now()
		n := 0
		for i := 0; i < b.N; i++ {
			off := (i * perCall) % len(evs)
			chunk := evs[off:min(off+perCall, len(evs))]
			if err := p.Publish(context.Background(), chunk); err != nil {
				b.Fatal(err)
			}
			n += len(chunk)
		}
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := p.Flush(fctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		rate[replicas] = float64(n) / time.Since(start).Seconds()
		b.StopTimer()
		if st := p.Stats(); st.Spooled != 0 {
			b.Fatalf("R%d: spooled %d messages during the benchmark", replicas, st.Spooled)
		}
		p.Close(context.Background())
		nc.Close()
		for i := range cl.Nodes() {
			cl.Kill(i)
		}
	}
	b.ReportMetric(rate[1], "R1-events/s")
	b.ReportMetric(rate[3], "R3-events/s")
	b.ReportMetric(rate[3]/rate[1], "R3/R1")
}

// BenchmarkClusterLeaderFailover measures how long JetStream on a 3-node
// cluster of Debian's nats-server (processes) takes to acknowledge a
// publish again after the R3 stream's leader is killed with SIGKILL: a
// publisher connected to every node publishes one batch after another
// (each waiting for its acknowledgement, retrying at once on an error);
// the time from the kill to the first acknowledgement is one failover.
// The node is restarted and caught up between iterations.
func BenchmarkClusterLeaderFailover(b *testing.B) {
	cl := natstest.StartCluster(b, natstest.ClusterConfig{Hosts: []string{"bench-host"}, Bin: natstest.DebianServer(b)})
	admin, _ := natstest.Connect(b, cl.Conn(stream.RoleCollector, "", "bench-admin"))
	ajs, _ := jetstream.New(admin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	if _, err := stream.Ensure(ctx, ajs, stream.Config{Replicas: 3}); err != nil {
		b.Fatal(err)
	}
	cancel()
	nc, err := stream.Connect(cl.Conn(stream.RoleDaemon, "bench-host", "bench"), nats.ReconnectBufSize(-1))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	body, err := schema.EncodeBatch(eventgen.New("bench-host").Mixed(100)[:100])
	if err != nil {
		b.Fatal(err)
	}
	subject := stream.Subject("bench-host", schema.KindFileOp)
	publish := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, subject, body)
		return err
	}
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cl.WaitStreamCurrent(b, stream.Name, 3)
		leader := cl.StreamLeader(b, stream.Name)
		if err := publish(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		cl.Kill(leader)
		deadline := t0.Add(3 * time.Minute)
		for publish() != nil {
			if time.Now().After(deadline) {
				b.Fatal("no publish was acknowledged for 3 minutes after the leader was killed")
			}
		}
		total += time.Since(t0)
		b.StopTimer()
		cl.Restart(leader)
		cl.WaitReady(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
}
