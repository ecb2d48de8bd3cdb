package natstest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// ClusterConfig shapes a test cluster.
type ClusterConfig struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// Hosts get a user each (host-<host token>) holding exactly
	// stream.HostPermissions(host, false); the collector and analyst users
	// always exist, with stream.CollectorPermissions and
	// stream.ReaderPermissions.
	Hosts []string
	// Bin runs every node as its own process of this nats-server binary
	// (DebianServer), and Kill sends it SIGKILL. Empty: the nodes are embedded servers in
	// the test process, and Kill shuts one down.
	Bin string
	// MaxFileStore bounds each node's JetStream file store (default 20G: the stream reserves its 10 GiB MaxBytes on each node; nothing is allocated).
	MaxFileStore string
}

// Cluster is a JetStream cluster on loopback, with the pipeline's accounts
// and permissions (one account, one user per role and per host, routes
// that need their own credentials), on ports picked for it, its data in a
// temporary directory. Everything stops when the test ends.
type Cluster struct {
	t         testing.TB
	cfg       ClusterConfig
	dir       string
	nodes     []*Node
	passwords map[string]string
	routePass string
}

// Node is one server of a Cluster: its Name (n1, n2, ...), client port
// and configuration file are the Server's.
type Node struct {
	Server
	RoutePort int
}

// ClusterName is the name the test clusters' nodes share.
const ClusterName = "mcpwarden"

// StartCluster starts a cluster and waits until JetStream answers on every
// node (a meta leader is elected).
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.MaxFileStore == "" {
		cfg.MaxFileStore = "20G"
	}
	c := &Cluster{t: t, cfg: cfg, dir: t.TempDir(), passwords: map[string]string{}}
	for _, u := range c.users() {
		c.passwords[u.name] = secret(t)
	}
	c.passwords[readyUser] = secret(t)
	routePassword := secret(t)
	c.routePass = routePassword
	for i := 0; i < cfg.Nodes; i++ {
		c.nodes = append(c.nodes, &Node{Server: Server{Name: "n" + strconv.Itoa(i+1), ClientPort: testenv.FreePort(t), Bin: cfg.Bin}, RoutePort: testenv.FreePort(t)})
	}
	for _, n := range c.nodes {
		n.Conf = filepath.Join(c.dir, n.Name+".conf")
		if err := os.WriteFile(n.Conf, []byte(c.config(n, routePassword)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i, false)
		}
		if t.Failed() && cfg.Bin != "" {
			for _, n := range c.nodes {
				if log := n.Log(4000); log != "" {
					t.Logf("nats-server %s log (tail):\n%s", n.Name, log)
				}
			}
		}
	})
	for i := range c.nodes {
		c.start(i)
	}
	c.WaitReady(t)
	return c
}

type clusterUser struct {
	name  string
	perms stream.Permissions
}

func (c *Cluster) users() []clusterUser {
	us := []clusterUser{
		{"collector", stream.CollectorPermissions()},
		{"analyst", stream.ReaderPermissions()},
	}
	for _, h := range c.cfg.Hosts {
		us = append(us, clusterUser{HostUser(h), stream.HostPermissions(h, false)})
	}
	return us
}

// HostUser is the name of host's user on a test cluster (as in
// deploy/nats: host-<host token>).
func HostUser(host string) string { return "host-" + stream.HostToken(host) }

// config is node n's configuration file.
func (c *Cluster) config(n *Node, routePassword string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\n", n.Name, n.ClientPort)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_file_store: %s\n  max_memory_store: 64M\n}\n",
		filepath.Join(c.dir, n.Name), c.cfg.MaxFileStore)
	fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  authorization { user: route, password: %q }\n  routes: [\n", ClusterName, n.RoutePort, routePassword)
	for _, o := range c.nodes {
		if o != n {
			fmt.Fprintf(&b, "    nats-route://route:%s@127.0.0.1:%d\n", routePassword, o.RoutePort)
		}
	}
	b.WriteString("  ]\n}\naccounts {\n  MCPWARDEN: {\n    jetstream: enabled\n    users: [\n")
	for _, u := range c.users() {
		perms := map[string]any{
			"publish":   map[string][]string{"allow": u.perms.PublishAllow, "deny": nonNil(u.perms.PublishDeny)},
			"subscribe": map[string][]string{"allow": u.perms.SubscribeAllow},
		}
		var p bytes.Buffer
		enc := json.NewEncoder(&p)
		enc.SetEscapeHTML(false) // nats-server's parser knows no \u escapes
		_ = enc.Encode(perms)
		fmt.Fprintf(&b, "      { user: %q, password: %q, permissions: %s }\n", u.name, c.passwords[u.name], bytes.TrimSpace(p.Bytes()))
	}
	// The harness's own user, with every right: WaitReady places a probe
	// stream with it. No test connects as it.
	fmt.Fprintf(&b, "      { user: %q, password: %q }\n", readyUser, c.passwords[readyUser])
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

// readyUser is the harness's own user (WaitReady).
const readyUser = "natstest-ready"

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Nodes are the cluster's nodes, in order.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// URL lists every node's client URL, comma-separated, as --nats takes it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.NodeURL(i)
	}
	return strings.Join(urls, ",")
}

// NodeURL is node i's client URL.
func (c *Cluster) NodeURL(i int) string {
	return "nats://127.0.0.1:" + strconv.Itoa(c.nodes[i].ClientPort)
}

// Conn is how role r (of host, for RoleDaemon) connects to every node of the
// cluster: its user, its password, its inbox prefix.
func (c *Cluster) Conn(r stream.Role, host, name string) stream.ConnOptions {
	user := c.User(r, host)
	pw, ok := c.passwords[user]
	if !ok {
		c.t.Fatalf("natstest: the cluster has no user %s (add the host to ClusterConfig.Hosts)", user)
	}
	return stream.ConnOptions{URL: c.URL(), User: user, Password: pw, Name: name, InboxPrefix: r.Inbox(host)}
}

// User is the name of role r's user (of host, for RoleDaemon).
func (c *Cluster) User(r stream.Role, host string) string {
	switch r {
	case stream.RoleDaemon:
		return HostUser(host)
	case stream.RoleCollector:
		return "collector"
	default:
		return "analyst"
	}
}

// RoutePassword is the password the nodes' routes log in with (user route).
func (c *Cluster) RoutePassword() string { return c.routePass }

// Password is user's password.
func (c *Cluster) Password(user string) string { return c.passwords[user] }

// Index is the position of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// Running reports whether node i is running.
func (c *Cluster) Running(i int) bool { return c.nodes[i].Running() }

func (c *Cluster) start(i int) {
	c.t.Helper()
	c.nodes[i].Start(c.t)
}

// stop stops node i: SIGKILL for a process, a shutdown for an embedded one.
func (c *Cluster) stop(i int, mustRun bool) {
	if !c.nodes[i].Stop() && mustRun {
		c.t.Fatalf("natstest: node %s is not running", c.nodes[i].Name)
	}
}

// Kill stops node i at once: SIGKILL when the nodes are processes
// (ClusterConfig.Bin), a shutdown of the embedded server otherwise. Its data
// stays for Restart.
func (c *Cluster) Kill(i int) { c.stop(i, true) }

// Restart starts node i again on its ports and data.
func (c *Cluster) Restart(i int) {
	if c.Running(i) {
		c.t.Fatalf("natstest: node %s is running", c.nodes[i].Name)
	}
	c.start(i)
}

// adminConn is how the collector connects to the running nodes only (or
// to node only, if only >= 0).
func (c *Cluster) adminConn(only int) (stream.ConnOptions, error) {
	var urls []string
	for i := range c.nodes {
		if (only < 0 || i == only) && c.Running(i) {
			urls = append(urls, c.NodeURL(i))
		}
	}
	if len(urls) == 0 {
		return stream.ConnOptions{}, fmt.Errorf("no node is running")
	}
	o := c.Conn(stream.RoleCollector, "", "natstest-admin")
	o.URL = strings.Join(urls, ",")
	return o, nil
}

// withJetStream connects with o, failing fast, and runs f on JetStream
// with a 5-second deadline.
func withJetStream(o stream.ConnOptions, f func(context.Context, jetstream.JetStream) error) error {
	nc, err := stream.Connect(o, nats.RetryOnFailedConnect(false), nats.MaxReconnects(0), nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f(ctx, js)
}

// StreamInfo is stream name's info, asked through a new connection of o
// that fails fast.
func StreamInfo(o stream.ConnOptions, name string) (info *jetstream.StreamInfo, err error) {
	err = withJetStream(o, func(ctx context.Context, js jetstream.JetStream) error {
		s, err := js.Stream(ctx, name)
		if err == nil {
			info, err = s.Info(ctx)
		}
		return err
	})
	return info, err
}

// ConsumerInfo is the info of streamName's consumer name, asked through a
// new connection of o that fails fast.
func ConsumerInfo(o stream.ConnOptions, streamName, name string) (info *jetstream.ConsumerInfo, err error) {
	err = withJetStream(o, func(ctx context.Context, js jetstream.JetStream) error {
		cons, err := js.Consumer(ctx, streamName, name)
		if err == nil {
			info, err = cons.Info(ctx)
		}
		return err
	})
	return info, err
}

// WaitReady waits (up to 3 minutes) until JetStream answers an account
// request through every running node, which needs an elected meta leader,
// and, with two or more nodes running, until a stream replicated on all of
// them can be placed.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	var urls []string
	for i := range c.nodes {
		if !c.Running(i) {
			continue
		}
		urls = append(urls, c.NodeURL(i))
		c.poll(t, 3*time.Minute, "JetStream to answer on node "+c.nodes[i].Name, func() error {
			o, err := c.adminConn(i)
			if err != nil {
				return err
			}
			return withJetStream(o, func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.AccountInfo(ctx)
				return err
			})
		})
	}
	if len(urls) < 2 {
		return
	}
	// JetStream answers on every node as soon as a meta leader is elected,
	// but the leader learns its peers' JetStream state a little later: a
	// stream of as many replicas as nodes created before that fails with
	// "no suitable peers for placement" (seen with Debian's 2.9.10 under
	// load). Ready means such a stream can be placed: a probe stream is
	// created and deleted.
	o := stream.ConnOptions{URL: strings.Join(urls, ","), User: readyUser, Password: c.passwords[readyUser], Name: "natstest-ready"}
	c.poll(t, 3*time.Minute, fmt.Sprintf("a stream of %d replicas to be placed", len(urls)), func() error {
		return withJetStream(o, func(ctx context.Context, js jetstream.JetStream) error {
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST_READY", Subjects: []string{"natstest.ready"}, Replicas: len(urls), MaxBytes: 1 << 20}); err != nil {
				return err
			}
			return js.DeleteStream(ctx, "NATSTEST_READY")
		})
	})
}

// StreamInfo is the stream's info as a running node reports it.
func (c *Cluster) StreamInfo(name string) (*jetstream.StreamInfo, error) {
	o, err := c.adminConn(-1)
	if err != nil {
		return nil, err
	}
	return StreamInfo(o, name)
}

// ConsumerInfo is the info of streamName's consumer name as a running node
// reports it.
func (c *Cluster) ConsumerInfo(streamName, name string) (*jetstream.ConsumerInfo, error) {
	o, err := c.adminConn(-1)
	if err != nil {
		return nil, err
	}
	return ConsumerInfo(o, streamName, name)
}

// StreamLeader waits (up to 3 minutes) until the stream has a leader and
// returns its index.
func (c *Cluster) StreamLeader(t testing.TB, name string) int {
	t.Helper()
	leader := -1
	c.poll(t, 3*time.Minute, "stream "+name+" to have a leader", func() error {
		info, err := c.StreamInfo(name)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no leader")
		}
		if leader = c.Index(info.Cluster.Leader); leader < 0 {
			return fmt.Errorf("leader %q is no node of this cluster", info.Cluster.Leader)
		}
		return nil
	})
	return leader
}

// WaitStreamCurrent waits (up to 3 minutes) until the stream has a leader
// and replicas-1 replicas that are all online and current.
func (c *Cluster) WaitStreamCurrent(t testing.TB, name string, replicas int) {
	t.Helper()
	c.poll(t, 3*time.Minute, fmt.Sprintf("stream %s to have %d current replicas", name, replicas), func() error {
		info, err := c.StreamInfo(name)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no leader")
		}
		if len(info.Cluster.Replicas) != replicas-1 {
			return fmt.Errorf("%d peers besides the leader", len(info.Cluster.Replicas))
		}
		for _, p := range info.Cluster.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("replica %s: current %v, offline %v, lag %d", p.Name, p.Current, p.Offline, p.Lag)
			}
		}
		return nil
	})
}

func (c *Cluster) poll(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: waited %s for %s: %v", within, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// DebianServer is Debian's nats-server binary as scripts/test-env.sh
// install unpacks it (MCPWARDEN_NATS_SERVER_BIN overrides); without it the
// test is skipped, or fails under CI=true.
func DebianServer(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("MCPWARDEN_NATS_SERVER_BIN")
	if bin == "" {
		bin = filepath.Join(testenv.RepoRoot(), "build", "nats-server-debian", "usr", "sbin", "nats-server")
	}
	testenv.RequireFile(t, bin, "run scripts/test-env.sh install")
	return bin
}

func secret(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// RouteRefused speaks the route protocol to a node's route port at addr
// (over TLS with tlsCfg, when it is not nil) as user, and returns nil if the
// node refuses the route (an Authorization Violation, a failed TLS
// handshake, or the connection closed), an error if it took it.
func RouteRefused(addr string, tlsCfg *tls.Config, user, password string) error {
	if tlsCfg == nil {
		return routeRefused(addr, nil, false, user, password)
	}
	// Servers differ in when a route's TLS starts: 2.9 sends its INFO in
	// the clear first, newer releases wait for the handshake. Try both.
	if err := routeRefused(addr, tlsCfg, true, user, password); err != nil {
		return err
	}
	return routeRefused(addr, tlsCfg, false, user, password)
}

func routeRefused(addr string, tlsCfg *tls.Config, tlsFirst bool, user, password string) error {
	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(time.Minute))
	var conn net.Conn = raw
	handshake := func() bool {
		tc := tls.Client(raw, tlsCfg)
		if err := tc.Handshake(); err != nil {
			return false
		}
		conn = tc
		return true
	}
	if tlsFirst && !handshake() {
		return nil // refused: no certificate it trusts (or not TLS first)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil // closed before it spoke: no route
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fmt.Errorf("no INFO from the route port: %q", line)
	}
	if tlsCfg != nil && !tlsFirst {
		if !handshake() {
			return nil
		}
		r = bufio.NewReader(conn)
	}
	connect := fmt.Sprintf(`CONNECT {"verbose":false,"pedantic":false,"user":%q,"pass":%q,"tls_required":%v,"name":"rogue","cluster":%q}`+"\r\nPING\r\n",
		user, password, tlsCfg != nil, ClusterName)
	if _, err := conn.Write([]byte(connect)); err != nil {
		return nil // closed on us: refused
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil // closed without taking the route
		}
		switch {
		case strings.Contains(line, "Authorization Violation"):
			return nil
		case strings.HasPrefix(line, "PONG"):
			return fmt.Errorf("the node answered PONG: the route was taken")
		}
	}
}
