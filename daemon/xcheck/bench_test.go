package xcheck

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// BenchmarkEvidenceToProvisional measures what the operator waits for on
// one host: from the moment a kernel event is published (its time) until
// the provisional finding it supports is in the stream for `mcpwarden
// events`, through the embedded server with credentials, the daemon's
// publisher and its cross-check loop at the daemon's defaults (a finding
// is reported once its evidence settled, 1 s; the loop ticks every
// second). One escape per iteration; ns/op is the latency.
func BenchmarkEvidenceToProvisional(b *testing.B) {
	root := b.TempDir()
	creds, err := natsserver.LoadOrCreateCredentials(stream.CredentialsDir(root))
	if err != nil {
		b.Fatal(err)
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, Auth: creds, EventHost: "here"})
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := stream.Connect(ns.Client(stream.RoleDaemon, "bench-daemon"))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub, err := publish.New(ctx, publish.Config{Conn: nc, SpoolDir: b.TempDir(), EnsureStream: &stream.Config{}})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close(context.Background())
	js, _ := jetstream.New(nc)
	l, err := New(Config{JetStream: js, Host: "here", Sink: pub, Check: crosscheck.Config{}})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = l.Run(ctx) }()
	rnc, err := stream.Connect(ns.Client(stream.RoleReader, "bench-reader"))
	if err != nil {
		b.Fatal(err)
	}
	defer rnc.Close()
	rjs, _ := jetstream.New(rnc)
	now := time.Now()
	oc, err := rjs.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.Subject("here", schema.KindFinding)}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &now})
	if err != nil {
		b.Fatal(err)
	}
	var worst time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := schema.Origin{Host: "here", BootID: "b"}.NewEvent(schema.KindFileOp, schema.NewID(), "s", "", time.Now())
		e.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: "read", PathHash: schema.PathHash(strings.Repeat("ab", 32)), PathClass: schema.PathOutside, Verdict: "escape", PID: 7, Comm: "node"}
		if err := pub.Publish(ctx, []schema.Event{e}); err != nil {
			b.Fatal(err)
		}
		for {
			msg, err := oc.Next(jetstream.FetchMaxWait(30 * time.Second))
			if err != nil {
				b.Fatalf("no finding: %v", err)
			}
			evs, _, err := stream.DecodeBatch(msg.Subject(), msg.Data())
			if err != nil {
				b.Fatal(err)
			}
			if len(evs) > 0 && evs[0].RunID == e.RunID && evs[0].Finding.Status == schema.StatusProvisional {
				break
			}
		}
		worst = max(worst, time.Since(time.Unix(0, e.TimeNS)))
	}
	b.ReportMetric(worst.Seconds(), "worst-s")
}
