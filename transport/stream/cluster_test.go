package stream_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestClusterPermissionsOnEveryNode walks the roles' rights on every node
// of a 3-node cluster with the stream at R3 (embedded nodes, and Debian's
// nats-server 2.9.10): a host publishes its own events through any node and
// nothing else: not another host's subjects (through JetStream or plain
// NATS), not a stream of its own, not a change to or the deletion of the
// stream, not a read of another host's events (a consumer, a message get, a
// plain subscription, another's inbox), not the system account's subjects.
// The collector consumes and publishes no events; the analyst reads and
// publishes nothing. The route port takes no client and no route without
// the routes' own password.
func TestClusterPermissionsOnEveryNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		debian bool
	}{{"embedded", false}, {"debian", true}} {
		t.Run(tc.name, func(t *testing.T) {
			bin := ""
			if tc.debian {
				bin = natstest.DebianServer(t)
			}
			clusterPermissions(t, bin)
		})
	}
}

func clusterPermissions(t *testing.T, bin string) {
	cl := natstest.StartCluster(t, natstest.ClusterConfig{Hosts: []string{"web-1", "web-2"}, Bin: bin})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	collectorNC, _ := natstest.Connect(t, cl.Conn(stream.RoleCollector, "", "collector"))
	cjs, _ := jetstream.New(collectorNC)
	// Asked for no replicas, a stream on a cluster gets three.
	if _, err := stream.Ensure(ctx, cjs, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	cl.WaitStreamCurrent(t, stream.Name, 3)
	body := func(host string, kind schema.Kind) []byte {
		evs := eventgen.New(host).Mixed(20)
		for i := range evs {
			if evs[i].Kind == kind {
				b, err := schema.EncodeBatch(evs[i : i+1])
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
		t.Fatalf("eventgen made no %s", kind)
		return nil
	}
	web2Op := body("web-2", schema.KindFileOp)
	web1Op := body("web-1", schema.KindFileOp)
	// web-2 has events in the stream that web-1 might try to read.
	w2, _ := natstest.Connect(t, cl.Conn(stream.RoleDaemon, "web-2", "web-2"))
	w2js, _ := jetstream.New(w2)
	if _, err := w2js.Publish(ctx, stream.Subject("web-2", schema.KindFileOp), web2Op); err != nil {
		t.Fatalf("web-2 cannot publish its own events: %v", err)
	}

	for i, n := range cl.Nodes() {
		t.Run(n.Name, func(t *testing.T) {
			only := func(o stream.ConnOptions) stream.ConnOptions { o.URL = cl.NodeURL(i); return o }
			hostNC, hv := natstest.Connect(t, only(cl.Conn(stream.RoleDaemon, "web-1", "web-1")))
			hjs, _ := jetstream.New(hostNC)
			if _, err := hjs.Publish(ctx, stream.Subject("web-1", schema.KindFileOp), web1Op); err != nil {
				t.Fatalf("web-1 cannot publish its own events through %s: %v", n.Name, err)
			}
			anc, av := natstest.Connect(t, only(cl.Conn(stream.RoleReader, "", "analyst")))
			ajs, _ := jetstream.New(anc)
			oc, err := ajs.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.AllSubjects}})
			if err != nil {
				t.Fatalf("the analyst cannot read through %s: %v", n.Name, err)
			}
			if _, err := nextMsg(oc); err != nil {
				t.Fatalf("the analyst cannot read through %s: %v", n.Name, err)
			}
			cnc, cv := natstest.Connect(t, only(cl.Conn(stream.RoleCollector, "", "collector")))

			refused := []struct {
				name string
				v    *natstest.Violations
				subj string
				do   func(ctx context.Context) error
			}{
				{"web-1 publishes as web-2 through JetStream", hv, stream.Subject("web-2", schema.KindFileOp), func(ctx context.Context) error {
					_, err := hjs.Publish(ctx, stream.Subject("web-2", schema.KindFileOp), web2Op)
					return err
				}},
				{"web-1 publishes a finding as web-2", hv, stream.Subject("web-2", schema.KindFinding), func(context.Context) error {
					return hostNC.Publish(stream.Subject("web-2", schema.KindFinding), web2Op)
				}},
				{"web-1 publishes under a wildcard-like token", hv, stream.SubjectPrefix + ".web-1_x.file_op", func(context.Context) error {
					return hostNC.Publish(stream.SubjectPrefix+".web-1_x.file_op", web1Op)
				}},
				{"web-1 publishes on a subject of no kind", hv, stream.SubjectPrefix + ".web-1.flood", func(context.Context) error {
					return hostNC.Publish(stream.SubjectPrefix+".web-1.flood", web1Op)
				}},
				{"web-1 publishes below a kind's subject", hv, stream.Subject("web-1", schema.KindFileOp) + ".x", func(context.Context) error {
					return hostNC.Publish(stream.Subject("web-1", schema.KindFileOp)+".x", web1Op)
				}},
				{"web-1 creates a stream", hv, "$JS.API.STREAM.CREATE.SPY", func(ctx context.Context) error {
					_, err := hjs.CreateStream(ctx, jetstream.StreamConfig{Name: "SPY", Subjects: []string{"spy.>"}})
					return err
				}},
				{"web-1 updates the stream", hv, "$JS.API.STREAM.UPDATE." + stream.Name, func(ctx context.Context) error {
					_, err := hjs.UpdateStream(ctx, stream.Config{Replicas: 1}.JetStream())
					return err
				}},
				{"web-1 deletes the stream", hv, "$JS.API.STREAM.DELETE." + stream.Name, func(ctx context.Context) error {
					return hjs.DeleteStream(ctx, stream.Name)
				}},
				{"web-1 purges the stream", hv, "$JS.API.STREAM.PURGE." + stream.Name, func(context.Context) error {
					return hostNC.PublishRequest("$JS.API.STREAM.PURGE."+stream.Name, stream.HostInbox("web-1")+".x", nil)
				}},
				{"web-1 gets a message by sequence", hv, "$JS.API.STREAM.MSG.GET." + stream.Name, func(context.Context) error {
					return hostNC.PublishRequest("$JS.API.STREAM.MSG.GET."+stream.Name, stream.HostInbox("web-1")+".x", []byte(`{"seq":1}`))
				}},
				{"web-1 gets a message directly", hv, "$JS.API.DIRECT.GET." + stream.Name, func(context.Context) error {
					return hostNC.PublishRequest("$JS.API.DIRECT.GET."+stream.Name, stream.HostInbox("web-1")+".x", []byte(`{"seq":1}`))
				}},
				{"web-1 reads web-2 through a consumer", hv, "$JS.API.CONSUMER.CREATE." + stream.Name + ".spy", func(ctx context.Context) error {
					_, err := hjs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Name: "spy", FilterSubject: stream.SubjectPrefix + ".web-2.>"})
					return err
				}},
				{"web-1 subscribes to every event", hv, `Subscription to "` + stream.AllSubjects + `"`, func(context.Context) error {
					if _, err := hostNC.SubscribeSync(stream.AllSubjects); err != nil {
						return err
					}
					return hostNC.Flush()
				}},
				{"web-1 subscribes to web-2's inbox", hv, `Subscription to "` + stream.HostInbox("web-2") + `.>"`, func(context.Context) error {
					if _, err := hostNC.SubscribeSync(stream.HostInbox("web-2") + ".>"); err != nil {
						return err
					}
					return hostNC.Flush()
				}},
				{"web-1 asks the system account", hv, "$SYS.REQ.SERVER.PING", func(context.Context) error {
					return hostNC.PublishRequest("$SYS.REQ.SERVER.PING", stream.HostInbox("web-1")+".x", nil)
				}},
				{"web-1 asks the JetStream meta leader to step down", hv, "$JS.API.META.LEADER.STEPDOWN", func(context.Context) error {
					return hostNC.PublishRequest("$JS.API.META.LEADER.STEPDOWN", stream.HostInbox("web-1")+".x", nil)
				}},
				{"web-1 asks the stream leader to step down", hv, "$JS.API.STREAM.LEADER.STEPDOWN." + stream.Name, func(context.Context) error {
					return hostNC.PublishRequest("$JS.API.STREAM.LEADER.STEPDOWN."+stream.Name, stream.HostInbox("web-1")+".x", nil)
				}},
				{"the collector publishes an event", cv, stream.Subject("web-1", schema.KindFileOp), func(context.Context) error {
					return cnc.Publish(stream.Subject("web-1", schema.KindFileOp), web1Op)
				}},
				{"the collector deletes the stream", cv, "$JS.API.STREAM.DELETE." + stream.Name, func(context.Context) error {
					return cnc.PublishRequest("$JS.API.STREAM.DELETE."+stream.Name, stream.CollectorInbox+".x", nil)
				}},
				{"the analyst publishes a finding", av, stream.Subject("web-1", schema.KindFinding), func(context.Context) error {
					return anc.Publish(stream.Subject("web-1", schema.KindFinding), web1Op)
				}},
				{"the analyst pulls from the collectors' durable", av, "$JS.API.CONSUMER.MSG.NEXT." + stream.Name + "." + stream.CollectorDurable, func(context.Context) error {
					return anc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream.Name+"."+stream.CollectorDurable, stream.ReaderInbox+".x", []byte(`{"batch":1}`))
				}},
			}
			for _, tc := range refused {
				t.Run(tc.name, func(t *testing.T) {
					tc.v.Drain()
					c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
					_ = tc.do(c) // a refused request times out; the violation is what counts
					tc.v.Wait(t, tc.subj)
				})
			}

			// The route port: no client, no route without the routes' password.
			for _, who := range []struct{ user, password string }{
				{"", ""}, {"route", "wrong"}, {natstest.HostUser("web-1"), cl.Password(natstest.HostUser("web-1"))},
			} {
				if err := natstest.RouteRefused("127.0.0.1:"+strconv.Itoa(n.RoutePort), nil, who.user, who.password); err != nil {
					t.Errorf("a route as %q: %v", who.user, err)
				}
			}
			// The probe itself: with the routes' password it is taken.
			if natstest.RouteRefused("127.0.0.1:"+strconv.Itoa(n.RoutePort), nil, "route", cl.RoutePassword()) == nil {
				t.Error("a route with the routes' password was refused: the probe proves nothing")
			}
			route := only(cl.Conn(stream.RoleDaemon, "web-1", "rogue"))
			route.User, route.Password = "route", "x"
			if nc, err := stream.Connect(route, nats.RetryOnFailedConnect(false), nats.MaxReconnects(0)); err == nil {
				nc.Close()
				t.Error("a client logged in as the route user")
			}
		})
	}

	// Nothing of web-2's was stored in web-1's name, or the other way round.
	info, err := cl.StreamInfo(stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1 + len(cl.Nodes())); info.State.Msgs != want {
		t.Fatalf("the stream holds %d messages, want %d (web-2's one and web-1's one per node)", info.State.Msgs, want)
	}
}

// TestSingleServerReplicas: on a single server a stream asked for no
// replicas gets one, and one asked for three is refused with what to do.
func TestSingleServerReplicas(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, _ := natstest.Connect(t, srv.Client(stream.RoleCollector, "test"))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = stream.Ensure(ctx, js, stream.Config{Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "3 replicas need a NATS cluster") {
		t.Fatalf("R3 on a single server: %v", err)
	}
	s, err := stream.Ensure(ctx, js, stream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 1 {
		t.Fatalf("a single server's stream has %d replicas, want 1", got)
	}
}

// TestStreamCapFitsTheServersStore: on a server whose JetStream store is
// smaller than the default cap (what a host with under ~14 GB free gets by
// default), a new stream at the default cap is refused with what to do; a
// stream made to fit (as the daemon's embedded server does) is kept at its
// cap by a later Ensure that names none (the collector's), and a cap given
// again is applied.
func TestStreamCapFitsTheServersStore(t *testing.T) {
	const store = 1 << 30
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), MaxStoreBytes: store, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, _ := natstest.Connect(t, srv.Client(stream.RoleCollector, "test"))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = stream.Ensure(ctx, js, stream.Config{})
	if err == nil {
		t.Fatalf("a %d-byte stream on a %d-byte store was created", int64(stream.DefaultMaxBytes), store)
	}
	for _, want := range []string{"max_file_store", "--stream-max-bytes", strconv.Itoa(stream.DefaultMaxBytes)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if _, err := js.Stream(ctx, stream.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after the refusal, looking the stream up: %v, want not found", err)
	}
	for _, c := range []struct {
		name      string
		give, cap int64
	}{
		{"the daemon's fitted cap", srv.StreamBytes(), srv.StreamBytes()},
		{"no cap named keeps it", 0, srv.StreamBytes()},
		{"a cap given is applied", 256 << 20, 256 << 20},
		{"and kept again", 0, 256 << 20},
	} {
		s, err := stream.Ensure(ctx, js, stream.Config{MaxBytes: c.give})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := s.CachedInfo().Config.MaxBytes; got != c.cap {
			t.Fatalf("%s: the stream's cap is %d, want %d", c.name, got, c.cap)
		}
	}
	if got := srv.StreamBytes(); got >= store || got <= 0 {
		t.Fatalf("the embedded server fits the stream to %d bytes on a %d-byte store", got, store)
	}
}

func nextMsg(oc jetstream.Consumer) (jetstream.Msg, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err == nil || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(200 * time.Millisecond) // see collector's streamContents: interest spreads late
	}
}

// TestClusterStreamRaisedToR3: on a cluster, a stream already there at R1
// (made before the cluster's stream was R3, or by hand) is updated to R3 by
// Ensure asked for no replicas, as the collectors call it (deploy/README).
func TestClusterStreamRaisedToR3(t *testing.T) {
	cl := natstest.StartCluster(t, natstest.ClusterConfig{})
	nc, _ := natstest.Connect(t, cl.Conn(stream.RoleCollector, "", "collector"))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := stream.Ensure(ctx, js, stream.Config{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if info, err := cl.StreamInfo(stream.Name); err != nil || info.Config.Replicas != 1 {
		t.Fatalf("the stream made at R1: %+v, %v", info, err)
	}
	s, err := stream.Ensure(ctx, js, stream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != stream.ClusterReplicas {
		t.Fatalf("Ensure left the cluster's R1 stream at R%d", got)
	}
	cl.WaitStreamCurrent(t, stream.Name, stream.ClusterReplicas)
}

// TestOneHostCannotFillTheStream: the stream is shared by every host. A
// compromised host that publishes as fast and as much as it can, on every
// subject its rights allow, is refused at the stream's per-subject cap
// (MaxMsgsPerSubject, DiscardNewPerSubject) once per kind, and another
// host's events still go in. Before, the flood filled the stream (discard
// new) and every other host's publishes were refused until its events aged
// out. On embedded nodes and on Debian's nats-server 2.9.10, as the hosts'
// real users (stream.HostPermissions).
func TestOneHostCannotFillTheStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		debian bool
	}{{"embedded", false}, {"debian", true}} {
		t.Run(tc.name, func(t *testing.T) {
			bin := ""
			if tc.debian {
				bin = natstest.DebianServer(t)
			}
			cl := natstest.StartCluster(t, natstest.ClusterConfig{Hosts: []string{"web-1", "web-2"}, Bin: bin})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cnc, _ := natstest.Connect(t, cl.Conn(stream.RoleCollector, "", "collector"))
			cjs, _ := jetstream.New(cnc)
			// 8 messages a subject; six kinds of 64 KiB messages at the cap
			// (3 MiB) fit in the 4 MiB stream.
			const perSubject, size = 8, 64 << 10
			// A cluster just up may not have placed its peers yet ("no
			// suitable peers"): the collector retries the same way.
			for deadline := time.Now().Add(2 * time.Minute); ; {
				_, err := stream.Ensure(ctx, cjs, stream.Config{MaxBytes: 4 << 20, MaxMsgsPerSubject: perSubject})
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
			}
			cl.WaitStreamCurrent(t, stream.Name, 3)
			flooder, _ := natstest.Connect(t, cl.Conn(stream.RoleDaemon, "web-1", "web-1"))
			fjs, _ := jetstream.New(flooder)
			junk := []byte(strings.Repeat("x", size))
			for _, k := range schema.Kinds {
				took := 0
				for i := 0; i < 100; i++ {
					if _, err := fjs.Publish(ctx, stream.Subject("web-1", k), junk, jetstream.WithMsgID("flood-"+string(k)+"-"+strconv.Itoa(i))); err != nil {
						break
					}
					took++
				}
				if took != perSubject {
					t.Errorf("the stream took %d of web-1's flood on %s, want its cap %d", took, k, perSubject)
				}
			}
			// web-2 publishes as much as web-1 could on one kind: its
			// messages still go in (web-1's 3 MiB and web-2's 512 KiB fit).
			honest, _ := natstest.Connect(t, cl.Conn(stream.RoleDaemon, "web-2", "web-2"))
			hjs, _ := jetstream.New(honest)
			for i := 0; i < perSubject; i++ {
				if _, err := hjs.Publish(ctx, stream.Subject("web-2", schema.KindFileOp), junk, jetstream.WithMsgID("web-2-"+strconv.Itoa(i))); err != nil {
					t.Fatalf("web-2's message %d is refused after web-1's flood: %v", i, err)
				}
			}
		})
	}
}
