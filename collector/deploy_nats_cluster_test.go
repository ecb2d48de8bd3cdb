package collector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
)

// TestDeployNATSCluster runs deploy/nats/cluster.conf (with accounts.conf)
// on three nodes, as deploy/README's cluster steps say (only paths, ports,
// host names and certificates replaced): embedded servers, and Debian's
// nats-server 2.9.10 as processes. The collector, given every node's URL,
// creates the stream, which is R3, and stores; host web-1 publishes through
// the publisher; the stream's leader is killed mid-stream (SIGKILL for
// Debian's) and comes back; every event is stored once. On every node
// web-1 cannot publish as web-2, and the route port admits no node without
// a certificate of the cluster's CA. Then the real `mcpwarden collect`
// binary, given the three URLs comma-separated, takes over and stores what
// web-1 publishes next.
func TestDeployNATSCluster(t *testing.T) {
	for _, debian := range []bool{false, true} {
		name := "embedded"
		if debian {
			name = "debian"
		}
		t.Run(name, func(t *testing.T) {
			bin := ""
			if debian {
				bin = natstest.DebianServer(t)
			}
			deployNATSCluster(t, bin)
		})
	}
}

func deployNATSCluster(t *testing.T, bin string) {
	conf, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := natstest.WriteTLS(t, dir)
	pw := map[string]string{"HOST_WEB_1_PASSWORD": randomPassword(t), "HOST_WEB_2_PASSWORD": randomPassword(t),
		"COLLECTOR_PASSWORD": randomPassword(t), "ANALYST_PASSWORD": randomPassword(t)}
	for k, v := range pw {
		t.Setenv(k, v)
	}
	var nodes []*natstest.Node
	for i := 1; i <= 3; i++ {
		name := "nats-" + strconv.Itoa(i)
		nodes = append(nodes, &natstest.Node{Server: natstest.Server{Name: name, ClientPort: testenv.FreePort(t), Bin: bin,
			Env: []string{"NATS_SERVER_NAME=" + name}}, RoutePort: testenv.FreePort(t)})
	}
	for _, n := range nodes {
		text := string(conf)
		repl := map[string]string{
			"0.0.0.0:4222":    "127.0.0.1:" + strconv.Itoa(n.ClientPort),
			"0.0.0.0:6222":    "127.0.0.1:" + strconv.Itoa(n.RoutePort),
			"127.0.0.1:8222":  "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
			"/data/jetstream": filepath.Join(dir, n.Name, "js"),
			"/etc/nats/tls/":  dir + "/",
		}
		for _, o := range nodes {
			repl[o.Name+":6222"] = "127.0.0.1:" + strconv.Itoa(o.RoutePort)
		}
		for old, r := range repl {
			if !strings.Contains(text, old) {
				t.Fatalf("deploy/nats/cluster.conf no longer contains %q, which this test replaces", old)
			}
			text = strings.ReplaceAll(text, old, r)
		}
		n.Conf = filepath.Join(dir, n.Name, "cluster.conf")
		testenv.WriteFiles(t, map[string]string{n.Conf: text, filepath.Join(dir, n.Name, "accounts.conf"): deployAccounts(t)})
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if log := n.Log(3000); t.Failed() && log != "" {
				t.Logf("nats-server %s log (tail):\n%s", n.Name, log)
			}
			n.Stop()
		}
	})
	for _, n := range nodes {
		n.Start(t)
	}
	if bin == "" {
		checkDeployPermissions(t, nodes[0].Options())
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(n.ClientPort)
	}
	conn := func(user, password string, role stream.Role, host string) stream.ConnOptions {
		return stream.ConnOptions{URL: strings.Join(urls, ","), User: user, Password: password,
			CAFile: ca, Name: user, InboxPrefix: role.Inbox(host)}
	}
	collectorOpts := conn("collector", pw["COLLECTOR_PASSWORD"], stream.RoleCollector, "")

	// The collector, as the README runs it: every node's URL, the stream's
	// replicas left to it.
	dsn := chtest.Database(t)
	c, err := New(Config{NATS: collectorOpts, ClickHouseDSN: dsn, Migrate: true, Stream: &stream.Config{},
		BatchEvents: 1000, BatchWait: 100 * time.Millisecond, AckWait: 10 * time.Second, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	leader := func() *natstest.Node {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			si, err := natstest.StreamInfo(collectorOpts, stream.Name)
			if err == nil && si.Cluster != nil {
				if si.Config.Replicas != stream.ClusterReplicas {
					t.Fatalf("the collector made the stream R%d on a cluster of three", si.Config.Replicas)
				}
				current := 0
				for _, p := range si.Cluster.Replicas {
					if p.Current && !p.Offline {
						current++
					}
				}
				for _, n := range nodes {
					if n.Name == si.Cluster.Leader && current >= 1 {
						return n
					}
				}
				err = fmt.Errorf("leader %q, %d current replicas", si.Cluster.Leader, current)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stream has no leader with a current replica: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	first := leader()

	hostNC, err := stream.Connect(conn("host-web-1", pw["HOST_WEB_1_PASSWORD"], stream.RoleDaemon, "web-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hostNC.Close)
	pub, err := publish.New(context.Background(), publish.Config{Conn: hostNC, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())
	evs := eventgen.New("web-1").Mixed(12_000)
	for i := 0; i < len(evs); i += 400 {
		if i == len(evs)/2 {
			first.Stop() // the stream's leader, mid-stream
		}
		if err := pub.Publish(context.Background(), evs[i:i+400]); err != nil {
			t.Fatal(err)
		}
	}
	second := leader()
	if second == first {
		t.Fatal("the killed node is still the stream's leader")
	}

	// On every node that runs: web-1 cannot publish as web-2; no route
	// without the cluster's certificate.
	web2Body, err := schema.EncodeBatch(eventgen.New("web-2").Mixed(5)[1:2])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(caPEM)
	for i, n := range nodes {
		if n == first {
			continue
		}
		o := conn("host-web-1", pw["HOST_WEB_1_PASSWORD"], stream.RoleDaemon, "web-1")
		o.URL = urls[i]
		nc, v := natstest.Connect(t, o)
		v.Drain()
		_ = nc.Publish(stream.Subject("web-2", schema.KindFileOp), web2Body)
		_ = nc.Flush()
		v.Wait(t, stream.Subject("web-2", schema.KindFileOp))
		addr := "127.0.0.1:" + strconv.Itoa(n.RoutePort)
		for _, cfg := range []*tls.Config{nil, {RootCAs: pool, ServerName: "127.0.0.1"}} {
			if err := natstest.RouteRefused(addr, cfg, "", ""); err != nil {
				t.Errorf("%s: a route without the cluster's certificate (TLS %v): %v", n.Name, cfg != nil, err)
			}
		}
		// The probe itself: with the cluster's certificate it is taken.
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "route.pem"), filepath.Join(dir, "route-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if natstest.RouteRefused(addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}}, "", "") == nil {
			t.Errorf("%s: a route with the cluster's certificate was refused: the probe proves nothing", n.Name)
		}
	}

	first.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, dsn)
	waitDistinct(t, st, uint64(len(evs)), 5*time.Minute)
	stop()
	assertNoDuplicatesInQueries(t, st, uint64(len(evs)))
	t.Logf("killed the leader %s; new leader %s; the publisher spooled %d messages and reconnected %d times",
		first.Name, second.Name, pub.Stats().Spooled, hostNC.Stats().Reconnects)

	// The README's collector step with the real binary: `mcpwarden collect`
	// given the three URLs comma-separated, the collector's user with its
	// password file and the cluster's CA, takes over the durable consumer
	// and stores what web-1 publishes next, each event once.
	pwFile := filepath.Join(dir, "collector.password")
	if err := os.WriteFile(pwFile, []byte(pw["COLLECTOR_PASSWORD"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(cctx, testenv.Mcpwarden(t), "collect", "--nats", strings.Join(urls, ","), "--nats-user", "collector",
		"--nats-password-file", pwFile, "--nats-tls-ca", ca, "--clickhouse", dsn, "--no-crosscheck")
	var clog testenv.LockedBuffer
	cmd.Stdout, cmd.Stderr = &clog, &clog
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ccancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("mcpwarden collect:\n%s", clog.String())
		}
	}()
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(clog.String(), "collecting"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("mcpwarden collect did not start collecting:\n%s", clog.String())
		}
	}
	more := eventgen.New("web-1").Mixed(2_000)
	for i := 0; i < len(more); i += 400 {
		if err := pub.Publish(context.Background(), more[i:i+400]); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitDistinct(t, st, uint64(len(evs)+len(more)), 5*time.Minute)
	assertNoDuplicatesInQueries(t, st, uint64(len(evs)+len(more)))
}
