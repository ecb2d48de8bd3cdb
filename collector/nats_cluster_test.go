package collector

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSClusterNodeKilledMidStream runs the pipeline on a 3-node
// JetStream cluster with the stream and the collectors' durable consumer at
// R3 (the collector's default on a cluster): two hosts publish through the real publisher (spool, acks, Nats-Msg-Id)
// and a real collector stores into ClickHouse, all connected with every
// node's URL. Mid-stream one node is killed (a follower, or the stream's
// leader), the publishing goes on, and the node comes back. Then nothing is
// lost and nothing is duplicated: every produced event is stored, once
// after FINAL; the stream holds every batch once (no Nats-Msg-Id twice); the
// consumer has nothing pending. Embedded nodes are shut down; Debian's
// nats-server 2.9.10 nodes are killed with SIGKILL.
func TestNATSClusterNodeKilledMidStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		debian bool
		leader bool
	}{
		{"embedded/follower", false, false},
		{"embedded/leader", false, true},
		{"debian/leader", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := ""
			if tc.debian {
				bin = natstest.DebianServer(t)
			}
			killMidStream(t, bin, tc.leader)
		})
	}
}

func killMidStream(t *testing.T, bin string, leader bool) {
	hosts := []string{"web-1", "web-2"}
	cl := natstest.StartCluster(t, natstest.ClusterConfig{Hosts: hosts, Bin: bin})
	dsn := chtest.Database(t)
	c, err := New(Config{NATS: cl.Conn(stream.RoleCollector, "", "collector"), ClickHouseDSN: dsn, Migrate: true,
		Stream: &stream.Config{}, BatchEvents: 2000, BatchWait: 100 * time.Millisecond,
		AckWait: 10 * time.Second, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	waitClusterConsumer(t, cl)
	cl.WaitStreamCurrent(t, stream.Name, 3)
	checkConsumerR3(t, cl)

	const perHost, chunk = 24_000, 400
	type host struct {
		nc  *nats.Conn
		pub *publish.Publisher
		evs []schema.Event
	}
	var hs []*host
	for _, h := range hosts {
		nc, err := stream.Connect(cl.Conn(stream.RoleDaemon, h, "daemon@"+h))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		p, err := publish.New(context.Background(), publish.Config{Conn: nc, SpoolDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		hs = append(hs, &host{nc: nc, pub: p, evs: eventgen.New(h).Mixed(perHost)})
	}

	// Publish a third, kill a node, publish the rest while it is down.
	third := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(hs))
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < len(h.evs); j += chunk {
				if j == perHost/3/chunk*chunk {
					if i == 0 {
						close(third)
					}
				}
				if err := h.pub.Publish(context.Background(), h.evs[j:j+chunk]); err != nil {
					errs <- fmt.Errorf("%s: %w", hosts[i], err)
					return
				}
				time.Sleep(2 * time.Millisecond) // a stream, not one burst
			}
		}()
	}
	<-third
	leaderBefore := cl.StreamLeader(t, stream.Name)
	victim := leaderBefore
	if !leader {
		// A follower, the one the first host is connected to if it is one,
		// so that its publisher must reconnect too.
		for i := range cl.Nodes() {
			if i != leaderBefore && (victim == leaderBefore || hs[0].nc.ConnectedUrl() == cl.NodeURL(i)) {
				victim = i
			}
		}
	}
	cl.Kill(victim)
	leaderAfter := cl.StreamLeader(t, stream.Name)
	if leader && leaderAfter == victim {
		t.Fatalf("node %s was killed and is still the stream leader", cl.Nodes()[victim].Name)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	cl.Restart(victim)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i, h := range hs {
		if err := h.pub.Flush(ctx); err != nil {
			t.Fatalf("%s: %v", hosts[i], err)
		}
	}
	cl.WaitStreamCurrent(t, stream.Name, 3)

	produced := uint64(len(hosts) * perHost)
	st := openStore(t, dsn)
	waitDistinct(t, st, produced, 5*time.Minute)
	waitDrained(t, cl)
	stop()
	assertNoDuplicatesInQueries(t, st, produced)
	events, msgs, dups := streamContents(t, cl)
	if events != produced {
		t.Fatalf("the stream holds %d distinct batches' events, produced %d", events, produced)
	}
	var spooled, replayed, reconnects uint64
	for _, h := range hs {
		spooled += h.pub.Stats().Spooled
		replayed += h.pub.Stats().Replayed
		reconnects += h.nc.Stats().Reconnects
	}
	// A batch whose publish was in flight when the leader died may be in the
	// stream twice: the replay with the same Nats-Msg-Id can reach the new
	// leader before it has applied the first copy to its duplicate window
	// (seen with Debian's nats-server 2.9.10). Only a batch whose ack failed
	// (and was spooled for a replay) can be there twice; ClickHouse holds
	// each event once all the same (above).
	if dups > spooled {
		t.Fatalf("%d batches are in the stream twice, but the publishers spooled only %d", dups, spooled)
	}
	t.Logf("killed %s (leader before %s, after %s); %d messages in the stream, %d of them a second copy of a replayed batch; publishers spooled %d messages, replayed %d, reconnected %d times; the collector stored %d events for %d produced (redeliveries collapse)",
		cl.Nodes()[victim].Name, cl.Nodes()[leaderBefore].Name, cl.Nodes()[leaderAfter].Name, msgs, dups, spooled, replayed, reconnects, c.Stats().Events, produced)
}

// waitClusterConsumer waits until the collector has created its durable consumer.
func waitClusterConsumer(t *testing.T, cl *natstest.Cluster) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, err := cl.ConsumerInfo(stream.Name, stream.CollectorDurable)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not create its consumer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkConsumerR3 fails t unless the durable consumer is replicated on all
// three nodes.
func checkConsumerR3(t *testing.T, cl *natstest.Cluster) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		info, err := cl.ConsumerInfo(stream.Name, stream.CollectorDurable)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collectors' durable consumer is not R3: %+v, %v", info, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitDrained waits until the durable consumer has nothing pending or
// unacknowledged.
func waitDrained(t *testing.T, cl *natstest.Cluster) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		info, err := cl.ConsumerInfo(stream.Name, stream.CollectorDurable)
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not drain: %+v, %v", info, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// streamContents reads the whole stream through a consumer of its own with
// explicit acks (a message whose delivery is lost comes again; a stream
// sequence seen twice is counted once) and returns the events of its
// distinct batches (by Nats-Msg-Id), the number of messages, and how many of
// them repeat a batch already read. An ordered consumer is no good here:
// after the kill it reset itself hundreds of times and skipped messages.
func streamContents(t *testing.T, cl *natstest.Cluster) (events, msgs, dups uint64) {
	t.Helper()
	nc, _ := natstest.Connect(t, cl.Conn(stream.RoleCollector, "", "stream-reader"))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cl.StreamInfo(stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var cons jetstream.Consumer
	deadline := time.Now().Add(3 * time.Minute)
	for {
		cons, err = js.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{
			Durable: "test-stream-contents", DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: -1,
			FilterSubject: stream.AllSubjects, MaxRequestBatch: 1000,
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create a consumer to read the stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	seen := map[string]bool{}
	seqs := map[uint64]bool{}
	for msgs < info.State.Msgs {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(10*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				md, err := m.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				_ = m.Ack()
				if seqs[md.Sequence.Stream] {
					continue
				}
				seqs[md.Sequence.Stream] = true
				msgs++
				id := m.Headers().Get(jetstream.MsgIDHeader)
				if id == "" {
					t.Fatalf("message %d has no Nats-Msg-Id", md.Sequence.Stream)
				}
				if seen[id] {
					dups++
					continue
				}
				seen[id] = true
				evs, rejected, err := stream.DecodeBatch(m.Subject(), m.Data())
				if err != nil || rejected != 0 {
					t.Fatalf("message on %s: %d rejected, %v", m.Subject(), rejected, err)
				}
				events += uint64(len(evs))
			}
			err = batch.Error()
		}
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("read the stream after %d of %d messages: %v", msgs, info.State.Msgs, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("read the stream: %d of %d messages in 5 minutes", msgs, info.State.Msgs)
		}
	}
	return events, msgs, dups
}

// TestCollectorRefusedByNATSFails: a collector whose user may not manage
// the stream (here the analyst's) stops with the server's refusal instead
// of waiting for JetStream for ever.
func TestCollectorRefusedByNATSFails(t *testing.T) {
	cl := natstest.StartCluster(t, natstest.ClusterConfig{})
	c, err := New(Config{NATS: cl.Conn(stream.RoleReader, "", "not-a-collector"), ClickHouseDSN: chtest.Database(t), Migrate: true,
		Stream: &stream.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err = c.Run(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "NATS refused this user") || !strings.Contains(err.Error(), "Permissions Violation for Publish to \"$JS.API.STREAM.") {
		t.Fatalf("a collector without the right to manage the stream: %v", err)
	}
}
