package collector

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDeployNATSConfig runs nats-server on deploy/nats/nats-server.conf
// (TLS, the host, collector and analyst users; only paths, ports and
// certificates replaced), checks that its permissions are exactly the
// pipeline's (transport/stream/perms.go), and walks each role: a collector
// creates the stream and stores; host web-1 publishes its own events over
// TLS, reads them back through its cross-check consumer, and can neither
// publish under web-2's subject nor read web-2's events by any way (a
// consumer of its own, the collectors' durable, the inboxes); the analyst
// reads but publishes and acks nothing; nobody connects without TLS or
// with a wrong password.
func TestDeployNATSConfig(t *testing.T) { checkDeployNATS(t, "") }

// TestDeployNATSConfigOnDebianNATSServer walks the same flow on Debian's
// own nats-server (2.9.10, the binary of the Debian package, which
// scripts/test-env.sh install unpacks into build/): an operator may run the
// distribution's server rather than the release the project embeds.
func TestDeployNATSConfigOnDebianNATSServer(t *testing.T) {
	checkDeployNATS(t, natstest.DebianServer(t))
}

// checkDeployNATS loads deploy/nats/nats-server.conf (paths, ports and
// certificates replaced), checks its permissions, starts a server on it
// (a process of bin, or embedded when bin is empty), and walks every role.
func checkDeployNATS(t *testing.T, bin string) {
	conf, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := natstest.WriteTLS(t, dir)
	port := testenv.FreePort(t)
	text := string(conf)
	for old, repl := range map[string]string{
		"0.0.0.0:4222":    "127.0.0.1:" + strconv.Itoa(port),
		"127.0.0.1:8222":  "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		"/data/jetstream": filepath.Join(dir, "js"),
		"/etc/nats/tls/":  dir + "/",
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("deploy/nats/nats-server.conf no longer contains %q, which this test replaces", old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	confPath := filepath.Join(dir, "nats-server.conf")
	testenv.WriteFiles(t, map[string]string{confPath: text, filepath.Join(dir, "accounts.conf"): deployAccounts(t)})
	pw := map[string]string{"HOST_WEB_1_PASSWORD": randomPassword(t), "HOST_WEB_2_PASSWORD": randomPassword(t),
		"COLLECTOR_PASSWORD": randomPassword(t), "ANALYST_PASSWORD": randomPassword(t)}
	for k, v := range pw {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		t.Fatalf("deploy/nats/nats-server.conf does not load: %v", err)
	}
	checkDeployPermissions(t, opts)
	ns := &natstest.Server{Name: "deploy", Conf: confPath, ClientPort: port, Bin: bin}
	t.Cleanup(func() {
		if log := ns.Log(1 << 20); t.Failed() && log != "" {
			t.Logf("nats-server log:\n%s", log)
		}
		ns.Stop()
	})
	ns.Start(t)
	url := func(user, password string) string {
		return "nats://" + user + ":" + password + "@127.0.0.1:" + strconv.Itoa(port)
	}
	// As the commands connect: the role's user, its inbox prefix, the CA.
	conn := func(user, password string, role stream.Role, host string) stream.ConnOptions {
		return stream.ConnOptions{URL: "nats://127.0.0.1:" + strconv.Itoa(port), User: user, Password: password,
			CAFile: ca, Name: user, InboxPrefix: role.Inbox(host)}
	}
	collectorOpts := conn("collector", pw["COLLECTOR_PASSWORD"], stream.RoleCollector, "")
	hostOpts := conn("host-web-1", pw["HOST_WEB_1_PASSWORD"], stream.RoleDaemon, "web-1")
	analystOpts := conn("analyst", pw["ANALYST_PASSWORD"], stream.RoleReader, "")

	// The collector creates the stream and its consumer, and stores.
	dsn := chtest.Database(t)
	c, err := New(Config{NATS: collectorOpts, ClickHouseDSN: dsn, Migrate: true,
		Stream: &stream.Config{}, BatchEvents: 1000, BatchWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := stream.Connect(collectorOpts)
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = js.Stream(ctx, stream.Name)
			cancel()
			nc.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not create the stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Host web-1 publishes its own events through the publisher, over TLS.
	hostNC, hv := natstest.Connect(t, hostOpts)
	pub, err := publish.New(context.Background(), publish.Config{Conn: hostNC, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatalf("host-web-1 cannot start a publisher: %v", err)
	}
	defer pub.Close(context.Background())
	evs := eventgen.New("web-1").Mixed(500)
	if err := pub.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	waitDistinct(t, openStore(t, dsn), uint64(len(evs)), 2*time.Minute)
	// web-2 publishes too, so there is something of web-2's to try to read.
	web2NC, _ := natstest.Connect(t, conn("host-web-2", pw["HOST_WEB_2_PASSWORD"], stream.RoleDaemon, "web-2"))
	web2, _ := jetstream.New(web2NC)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	web2Body, err := schema.EncodeBatch(eventgen.New("web-2").Mixed(5)[1:2])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := web2.Publish(ctx, stream.Subject("web-2", schema.KindFileOp), web2Body); err != nil {
		t.Fatalf("host-web-2 cannot publish its own events: %v", err)
	}

	// web-1 reads its own events back through its cross-check consumer.
	hjs, _ := jetstream.New(hostNC)
	xc := stream.CrossCheckConsumer("web-1")
	cons, err := hjs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Name: xc,
		FilterSubject: stream.SubjectPrefix + ".web-1.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("host-web-1 cannot create its cross-check consumer: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("host-web-1 cannot read its own events: %v", err)
	}
	if !strings.HasPrefix(msg.Subject(), stream.SubjectPrefix+".web-1.") {
		t.Fatalf("host-web-1 read %s", msg.Subject())
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatalf("host-web-1 cannot ack on its consumer: %v", err)
	}

	anc, av := natstest.Connect(t, analystOpts)
	ajs, _ := jetstream.New(anc)
	oc, err := ajs.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.AllSubjects}})
	if err != nil {
		t.Fatalf("the analyst cannot read: %v", err)
	}
	if _, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("the analyst cannot read: %v", err)
	}

	refused := []struct {
		name string
		v    *natstest.Violations
		subj string
		do   func(ctx context.Context) error
	}{
		{"web-1 publishes as web-2", hv, stream.Subject("web-2", schema.KindFileOp), func(ctx context.Context) error {
			_, err := hjs.Publish(ctx, stream.Subject("web-2", schema.KindFileOp), web2Body)
			return err
		}},
		{"web-1 reads web-2 through a consumer", hv, "$JS.API.CONSUMER.CREATE." + stream.Name + ".web-1-spy", func(ctx context.Context) error {
			_, err := hjs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Name: "web-1-spy", FilterSubject: stream.SubjectPrefix + ".web-2.>"})
			return err
		}},
		{"web-1 widens its own consumer", hv, "$JS.API.CONSUMER.CREATE." + stream.Name + "." + xc + "." + stream.AllSubjects, func(ctx context.Context) error {
			_, err := hjs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Name: xc, FilterSubject: stream.AllSubjects})
			return err
		}},
		{"web-1 pulls from the collectors' durable", hv, "$JS.API.CONSUMER.MSG.NEXT." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			return hostNC.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream.Name+"."+stream.CollectorDurable, stream.HostInbox("web-1")+".x", []byte(`{"batch":1}`))
		}},
		{"web-1 snoops on every inbox", hv, `Subscription to "_INBOX.>"`, func(ctx context.Context) error {
			if _, err := hostNC.SubscribeSync("_INBOX.>"); err != nil {
				return err
			}
			return hostNC.Flush()
		}},
		{"web-1 snoops on web-2's inbox", hv, `Subscription to "` + stream.HostInbox("web-2") + `.>"`, func(ctx context.Context) error {
			if _, err := hostNC.SubscribeSync(stream.HostInbox("web-2") + ".>"); err != nil {
				return err
			}
			return hostNC.Flush()
		}},
		{"web-1 deletes the stream", hv, "$JS.API.STREAM.DELETE." + stream.Name, func(ctx context.Context) error {
			return hjs.DeleteStream(ctx, stream.Name)
		}},
		{"the analyst publishes a finding", av, stream.Subject("web-1", schema.KindFinding), func(ctx context.Context) error {
			return anc.Publish(stream.Subject("web-1", schema.KindFinding), web2Body)
		}},
		{"the analyst retargets the collectors' durable", av, "$JS.API.CONSUMER.CREATE." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			_, err := ajs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Durable: stream.CollectorDurable, FilterSubject: stream.SubjectPrefix + ".nobody.>", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"the analyst acks for the collectors", av, "$JS.ACK." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			return anc.Publish("$JS.ACK."+stream.Name+"."+stream.CollectorDurable+".1.1.1.1.0", []byte("+ACK"))
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			tc.v.Drain()
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_ = tc.do(c) // a refused request times out; the violation is what counts
			tc.v.Wait(t, tc.subj)
		})
	}

	// No plain-text connections, no wrong passwords.
	if nc, err := nats.Connect(url("host-web-1", pw["HOST_WEB_1_PASSWORD"]), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client connected without TLS")
	}
	wrong := hostOpts
	wrong.Password = "wrong"
	if nc, err := stream.Connect(wrong, nats.MaxReconnects(0), nats.RetryOnFailedConnect(false)); err == nil {
		nc.Close()
		t.Error("a wrong password connected")
	}
}

// deployAccounts is deploy/nats/accounts.conf, which both configurations
// include.
func deployAccounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkDeployPermissions fails t unless every user of the deploy
// configuration holds exactly its role's permissions.
func checkDeployPermissions(t *testing.T, opts *server.Options) {
	t.Helper()
	want := map[string]stream.Permissions{
		"host-web-1": stream.HostPermissions("web-1", false),
		"host-web-2": stream.HostPermissions("web-2", false),
		"collector":  stream.CollectorPermissions(),
		"analyst":    stream.ReaderPermissions(),
	}
	if len(opts.Users) != len(want) {
		t.Fatalf("deploy/nats has %d users, want %d", len(opts.Users), len(want))
	}
	same := func(a, b []string) bool {
		a, b = slices.Clone(a), slices.Clone(b)
		slices.Sort(a)
		slices.Sort(b)
		return slices.Equal(a, b)
	}
	for _, u := range opts.Users {
		w, ok := want[u.Username]
		if !ok {
			t.Fatalf("deploy/nats has user %q, which is no role", u.Username)
		}
		p := u.Permissions
		var pubAllow, pubDeny, subAllow []string
		if p != nil && p.Publish != nil {
			pubAllow, pubDeny = p.Publish.Allow, p.Publish.Deny
		}
		if p != nil && p.Subscribe != nil {
			subAllow = p.Subscribe.Allow
		}
		if !same(pubAllow, w.PublishAllow) || !same(pubDeny, w.PublishDeny) || !same(subAllow, w.SubscribeAllow) {
			t.Errorf("deploy/nats user %s:\n publish allow %q\n  want %q\n publish deny %q\n  want %q\n subscribe %q\n  want %q",
				u.Username, pubAllow, w.PublishAllow, pubDeny, w.PublishDeny, subAllow, w.SubscribeAllow)
		}
	}
}
