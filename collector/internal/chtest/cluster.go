package chtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// ZooKeeper is a private ZooKeeper server (Debian's zookeeper 3.8, one node
// of deploy/zookeeper/zoo.cfg) that coordinates a test cluster.
type ZooKeeper struct {
	Port int
	cmd  *exec.Cmd
	log  testenv.LockedBuffer
}

// zookeeperJar is where Debian's zookeeper package puts the server.
const zookeeperJar = "/usr/share/java/zookeeper.jar"

// StartZooKeeper starts a private ZooKeeper on a free loopback port,
// stopped when the test ends.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	testenv.RequireCommand(t, "java")
	testenv.RequireFile(t, zookeeperJar, "install Debian's zookeeper with 'scripts/test-env.sh install'")
	conf, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "zookeeper", "zoo.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	z := &ZooKeeper{Port: testenv.FreePort(t)}
	var lines []string
	for _, l := range strings.Split(string(conf), "\n") {
		switch {
		case strings.HasPrefix(l, "server."): // one node: no ensemble
			continue
		case strings.HasPrefix(l, "dataDir="):
			l = "dataDir=" + dir
		case strings.HasPrefix(l, "clientPort="):
			l = "clientPort=" + strconv.Itoa(z.Port) + "\nclientPortAddress=127.0.0.1"
		case strings.HasPrefix(l, "tickTime="):
			l = "tickTime=500" // sessions of dead test servers expire sooner
		}
		lines = append(lines, l)
	}
	cfg := filepath.Join(dir, "zoo.cfg")
	testenv.WriteFiles(t, map[string]string{cfg: strings.Join(lines, "\n")})
	z.cmd = exec.Command("java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", zookeeperJar,
		"-Dzookeeper.admin.enableServer=false", "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg)
	z.cmd.Stdout, z.cmd.Stderr = &z.log, &z.log
	z.cmd.Dir = dir
	z.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := z.cmd.Start(); err != nil {
		t.Fatalf("start ZooKeeper: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = z.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = z.cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if z.serving() {
			return z
		}
		select {
		case <-exited:
			t.Fatalf("ZooKeeper exited at start-up:\n%s", z.log.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("ZooKeeper did not answer on 127.0.0.1:%d within 60 s:\n%s", z.Port, z.log.String())
	return nil
}

// serving asks ZooKeeper's four-letter "stat": it answers "ruok" as soon as
// it listens, but drops clients in the handshake until it serves, and a
// ClickHouse 18.16 node whose first ZooKeeper session fails that way at
// start-up dies (a NULL ZooKeeper in its DDL worker).
func (z *ZooKeeper) serving() bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(z.Port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("stat")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return strings.HasPrefix(string(b), "Zookeeper version:") && strings.Contains(string(b), "Mode: standalone")
}

// Cluster is a private ClickHouse cluster: shards × replicas
// clickhouse-server processes (Debian's 18.16: clickhouse-local, which the
// 26.7 engine here is, neither replicates nor runs distributed DDL) on the
// configuration of deploy/clickhouse/cluster, coordinated by a private
// ZooKeeper.
type Cluster struct {
	// Name is the cluster's name in remote_servers.
	Name string
	// Nodes[s][r] is replica r of shard s.
	Nodes [][]*Server
	ZK    *ZooKeeper
}

// StartCluster starts a cluster of deploy/clickhouse/cluster's shape (two
// shards of two replicas) on free loopback ports.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterShards(t, 2)
}

// StartClusterShards is StartCluster with the first shards (1 or 2) of
// deploy/clickhouse/cluster's shards only, each of two replicas.
func StartClusterShards(t testing.TB, shards int) *Cluster {
	t.Helper()
	if shards < 1 || shards > 2 {
		t.Fatalf("chtest: a cluster of %d shards: deploy/clickhouse/cluster has 2", shards)
	}
	testenv.RequireCommand(t, "clickhouse-server")
	root := filepath.Join(testenv.RepoRoot(), "deploy", "clickhouse")
	clusterXML, err := os.ReadFile(filepath.Join(root, "cluster", "config.d", "cluster.xml"))
	if err != nil {
		t.Fatal(err)
	}
	zk := StartZooKeeper(t)
	c := &Cluster{Name: "mcpwarden", ZK: zk}
	const replicas = 2
	ports := map[string]int{}
	for i := 1; i <= 2*replicas; i++ {
		ports["ch-"+strconv.Itoa(i)] = testenv.FreePort(t)
	}
	text := string(clusterXML)
	replace := map[string]string{}
	for name, port := range ports {
		replace["<host>"+name+"</host><port>9000</port>"] = "<host>127.0.0.1</host><port>" + strconv.Itoa(port) + "</port>"
	}
	for _, z := range []string{"zk-1", "zk-2", "zk-3"} {
		replace["<host>"+z+"</host><port>2181</port>"] = "<host>127.0.0.1</host><port>" + strconv.Itoa(zk.Port) + "</port>"
	}
	for old, repl := range replace {
		if !strings.Contains(text, old) {
			t.Fatalf("deploy/clickhouse/cluster/config.d/cluster.xml no longer contains %q, which this test replaces", old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	if shards == 1 { // drop the second shard's block
		first := strings.Index(text, "</shard>") + len("</shard>")
		second := strings.Index(text[first:], "</shard>") + len("</shard>")
		text = text[:first] + text[first+second:]
	}
	files := map[string]string{"config.d/cluster.xml": text}
	for _, f := range []string{"config.d/mcpwarden.xml", "users.d/mcpwarden.xml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(b)
	}
	// The deploy users' password hashes are placeholders: given hashes of
	// passwords nobody holds (the cluster tests connect as "default", as the
	// nodes do among themselves).
	sum := sha256.Sum256([]byte(strconv.FormatInt(time.Now().UnixNano(), 10)))
	files["users.d/mcpwarden.xml"] = strings.ReplaceAll(files["users.d/mcpwarden.xml"], "REPLACE_WITH_SHA256_HEX", hex.EncodeToString(sum[:]))
	for s := 0; s < shards; s++ {
		var row []*Server
		for r := 0; r < replicas; r++ {
			name := "ch-" + strconv.Itoa(s*replicas+r+1)
			macros, err := os.ReadFile(filepath.Join(root, "cluster", "macros", name+".xml"))
			if err != nil {
				t.Fatal(err)
			}
			m := strings.ReplaceAll(string(macros), "<interserver_http_host>"+name+"</interserver_http_host>", "<interserver_http_host>127.0.0.1</interserver_http_host>")
			node := map[string]string{"config.d/macros.xml": m}
			for k, v := range files {
				node[k] = v
			}
			srv := newServerWithConfig(t, node)
			srv.tcpPort = ports[name]
			srv.Start()
			t.Cleanup(srv.Kill)
			t.Cleanup(func() {
				if t.Failed() {
					log, _ := os.ReadFile(srv.dir + "/server.err.log")
					t.Logf("node %s (%s) error log:\n%s", name, srv.Addr(), tail(log))
				}
			})
			row = append(row, srv)
		}
		c.Nodes = append(c.Nodes, row)
	}
	return c
}

// All lists every node.
func (c *Cluster) All() []*Server {
	var out []*Server
	for _, row := range c.Nodes {
		out = append(out, row...)
	}
	return out
}

// DSN is a DSN for database db listing every node (clickhouse-go fails
// over in that order).
func (c *Cluster) DSN(db string) string {
	var addrs []string
	for _, s := range c.All() {
		addrs = append(addrs, s.Addr())
	}
	return "clickhouse://" + strings.Join(addrs, ",") + "/" + db
}

// Database names a fresh database for the cluster (the migration creates
// it, ON CLUSTER; the nodes' data goes with their temporary directories).
func (c *Cluster) Database() string {
	return "mcpw_cluster_" + strconv.FormatInt(time.Now().UnixNano()%1_000_000_000_000, 36)
}

// Exec runs one statement on this server as "default".
func (s *Server) Exec(sql string) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, DialTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return conn.Exec(ctx, sql)
}

// Count runs a SELECT of one UInt64 on this server.
func (s *Server) Count(sql string) (uint64, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, DialTimeout: 2 * time.Second})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n uint64
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s on %s: %w", sql, s.Addr(), err)
	}
	return n, nil
}

// Stop stops the server the orderly way (SIGTERM), as an operator taking
// a replica down would, and waits for it to be gone.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}
