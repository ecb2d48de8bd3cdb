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

// TestNoQuorumSpoolsThenDelivers: two of the three nodes of an R3 cluster
// are down, so the stream has no quorum and takes nothing; the host's
// publisher (its own user, stream.HostPermissions) goes on accepting
// events, which wait in its spool; once the nodes are back every event is
// in the stream exactly once (no message lost, none stored twice: the
// replay keeps each batch's Nats-Msg-Id). Embedded nodes and Debian's
// nats-server 2.9.10 as processes (SIGKILLed).
func TestNoQuorumSpoolsThenDelivers(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { noQuorum(t, "") })
	t.Run("debian", func(t *testing.T) { noQuorum(t, natstest.DebianServer(t)) })
}

func noQuorum(t *testing.T, bin string) {
	const host = "host-q"
	cl := natstest.StartCluster(t, natstest.ClusterConfig{Hosts: []string{host}, Bin: bin})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin, _ := natstest.Connect(t, cl.Conn(stream.RoleCollector, "", "collector"))
	ajs, _ := jetstream.New(admin)
	if _, err := stream.Ensure(ctx, ajs, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	cl.WaitStreamCurrent(t, stream.Name, stream.ClusterReplicas)

	nc, err := stream.Connect(cl.Conn(stream.RoleDaemon, host, "publisher"), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p, err := New(ctx, Config{Conn: nc, SpoolDir: t.TempDir(), AckTimeout: time.Second, ReplayInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g := eventgen.New(host)
	var all []schema.Event
	publish := func(n int) {
		evs := g.Mixed(n)
		if err := p.Publish(ctx, evs); err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	publish(300)
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	fcancel()

	// Two nodes down, the stream's leader among them.
	leader := cl.StreamLeader(t, stream.Name)
	other := (leader + 1) % 3
	cl.Kill(leader)
	cl.Kill(other)
	for range 10 {
		publish(50)
	}
	for deadline := time.Now().Add(time.Minute); p.Stats().SpoolDepth == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing spooled in a minute without quorum: %+v", p.Stats())
		}
	}
	cl.Restart(leader)
	cl.Restart(other)
	publish(200)
	fctx, fcancel = context.WithTimeout(ctx, 3*time.Minute)
	defer fcancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatalf("flush once quorum returned: %v (%+v)", err, p.Stats())
	}
	if st := p.Stats(); st.SpoolDepth != 0 {
		t.Fatalf("spool not drained: %+v", st)
	}
	cl.WaitStreamCurrent(t, stream.Name, stream.ClusterReplicas)

	// Read the whole stream through a consumer of the collector's, on a
	// connection made after the restarts (the first one's node may have
	// been killed), retried until the cluster's meta leader answers.
	rd, _ := natstest.Connect(t, cl.Conn(stream.RoleCollector, "", "check"))
	rjs, _ := jetstream.New(rd)
	var cons jetstream.Consumer
	for deadline := time.Now().Add(2 * time.Minute); ; {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		cons, err = rjs.CreateOrUpdateConsumer(cctx, stream.Name, jetstream.ConsumerConfig{Durable: "noquorum-check", AckPolicy: jetstream.AckExplicitPolicy})
		ccancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consumer on the stream two minutes after the nodes came back: %v", err)
		}
	}
	ids := map[string]int{}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		batch, err := cons.Fetch(200, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			evs, rejected, err := schema.DecodeBatch(m.Data())
			if err != nil || rejected != 0 {
				t.Fatalf("decode: %v, %d rejected", err, rejected)
			}
			for _, e := range evs {
				ids[e.EventID]++
			}
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d distinct events of %d before the deadline", len(ids), len(all))
		}
	}
	lost, twice := 0, 0
	for _, e := range all {
		switch ids[e.EventID] {
		case 0:
			lost++
		case 1:
		default:
			twice++
		}
	}
	if lost != 0 || twice != 0 || len(ids) != len(all) {
		t.Fatalf("produced %d events: %d lost, %d stored more than once, %d distinct in the stream (publisher %+v)", len(all), lost, twice, len(ids), p.Stats())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
