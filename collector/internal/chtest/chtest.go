// Package chtest gives tests a fresh database on the local ClickHouse server
// that `scripts/test-env.sh up` starts (native port 9000). Outside CI a
// missing server skips the test; under CI=true it fails it.
//
// `make test` points the tests at a current ClickHouse release first
// (test-go): MCPWARDEN_CLICKHOUSE_ADDR names the chdb-listen server
// (ClickHouse 26.7), MCPWARDEN_CLICKHOUSE_LISTEN_BIN makes private servers
// chdb-listen processes too, and MCPWARDEN_CLICKHOUSE_EXPECT_VERSION makes
// every test fail unless the server's version starts with it, so a pass
// cannot silently test the other release. The ClickHouse packages then run
// again against 18.16 (test-clickhouse-legacy).
package chtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Addr is the server the tests use; MCPWARDEN_CLICKHOUSE_ADDR overrides it.
func Addr() string {
	if a := os.Getenv("MCPWARDEN_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}

// Database creates a uniquely named database, drops it when the test ends,
// and returns a DSN for it.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{Addr()}, DialTimeout: 3 * time.Second})
	if err == nil {
		err = conn.Ping(ctx)
	}
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("ClickHouse is not reachable at %s (%v); start it with 'scripts/test-env.sh up'", Addr(), err))
	}
	checkVersion(t, ctx, conn)
	name := "mcpw_test_" + strings.ReplaceAll(schema.NewID()[:12], "-", "")
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
		conn.Close()
	})
	return "clickhouse://" + Addr() + "/" + name
}

// checkVersion fails the test when MCPWARDEN_CLICKHOUSE_EXPECT_VERSION is set
// and the server's version does not start with it.
func checkVersion(t testing.TB, ctx context.Context, conn clickhouse.Conn) {
	t.Helper()
	want := os.Getenv("MCPWARDEN_CLICKHOUSE_EXPECT_VERSION")
	if want == "" {
		return
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&got); err != nil {
		t.Fatalf("read ClickHouse version: %v", err)
	}
	if !strings.HasPrefix(got, want) {
		t.Fatalf("ClickHouse at %s is version %s, but MCPWARDEN_CLICKHOUSE_EXPECT_VERSION=%s", Addr(), got, want)
	}
}

// Server is a private clickhouse-server process (its own ports and data
// directory) that a fault test may stop and start without disturbing the
// shared server other tests use.
type Server struct {
	t                 testing.TB
	dir               string
	tcpPort, httpPort int
	interPort         int
	configDir         string // "" = /etc/clickhouse-server
	uid               int    // runs the server when not 0 (StartServerAs)
	cmd               *exec.Cmd
	stderr            testenv.LockedBuffer
	exited            chan struct{}
}

// StartServer starts a private clickhouse-server on free loopback ports, or
// a private chdb-listen when MCPWARDEN_CLICKHOUSE_LISTEN_BIN names one.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if listenBin() == "" {
		testenv.RequireCommand(t, "clickhouse-server")
		testenv.RequireFile(t, "/etc/clickhouse-server/config.xml", "install clickhouse-server with 'scripts/test-env.sh install'")
	} else {
		testenv.RequireFile(t, listenBin(), "build it with 'scripts/test-env.sh install'")
	}
	return startServer(t, "")
}

// StartServerWithConfig starts a private clickhouse-server (always Debian's,
// even in the current-release run: clickhouse-local does not read server
// configuration) whose configuration is the system's config.xml and
// users.xml plus files, keyed by path relative to the configuration
// directory ("users.d/x.xml").
func StartServerWithConfig(t testing.TB, files map[string]string) *Server {
	t.Helper()
	s := newServerWithConfig(t, files)
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// StartServerAs starts a private Debian clickhouse-server run by uid, its
// data directory given to that user: a server another local user runs.
func StartServerAs(t testing.TB, uid int) *Server {
	t.Helper()
	testenv.RequireCommand(t, "clickhouse-server")
	testenv.RequireFile(t, "/etc/clickhouse-server/config.xml", "install clickhouse-server with 'scripts/test-env.sh install'")
	parent, err := os.MkdirTemp("", "mcpwarden-chtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "data")
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, dir: dir, tcpPort: testenv.FreePort(t), httpPort: testenv.FreePort(t),
		interPort: testenv.FreePort(t), configDir: "/etc/clickhouse-server", uid: uid}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// newServerWithConfig is StartServerWithConfig's server, not started yet.
func newServerWithConfig(t testing.TB, files map[string]string) *Server {
	t.Helper()
	testenv.RequireCommand(t, "clickhouse-server")
	testenv.RequireFile(t, "/etc/clickhouse-server/config.xml", "install clickhouse-server with 'scripts/test-env.sh install'")
	dir := t.TempDir()
	all := map[string]string{}
	for _, f := range []string{"config.xml", "users.xml"} {
		b, err := os.ReadFile("/etc/clickhouse-server/" + f)
		if err != nil {
			t.Fatal(err)
		}
		all[dir+"/"+f] = string(b)
	}
	for name, content := range files {
		all[dir+"/"+name] = content
	}
	testenv.WriteFiles(t, all)
	return &Server{t: t, dir: t.TempDir(), tcpPort: testenv.FreePort(t), httpPort: testenv.FreePort(t),
		interPort: testenv.FreePort(t), configDir: dir}
}

// startServer starts a private server on free ports, killed when the test
// ends; configDir "" means the system configuration.
func startServer(t testing.TB, configDir string) *Server {
	s := &Server{t: t, dir: t.TempDir(), tcpPort: testenv.FreePort(t), httpPort: testenv.FreePort(t),
		interPort: testenv.FreePort(t), configDir: configDir}
	s.Start()
	t.Cleanup(func() { s.Kill() })
	return s
}

// Addr is the native-protocol address.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.tcpPort) }

// DSN is a DSN for database db on this server.
func (s *Server) DSN(db string) string { return "clickhouse://" + s.Addr() + "/" + db }

// Start starts the server on its data directory and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	d := s.dir
	if bin := listenBin(); bin != "" && s.configDir == "" {
		s.cmd = exec.Command(bin, "--path="+d+"/", fmt.Sprintf("--tcp_port=%d", s.tcpPort))
		s.cmd.Stderr = &s.stderr
	} else {
		conf := "/etc/clickhouse-server"
		if s.configDir != "" {
			conf = s.configDir
		}
		s.cmd = exec.Command("clickhouse-server", "--config-file="+conf+"/config.xml", "--", "--listen_host=127.0.0.1",
			fmt.Sprintf("--tcp_port=%d", s.tcpPort), fmt.Sprintf("--http_port=%d", s.httpPort),
			fmt.Sprintf("--interserver_http_port=%d", s.interPort),
			"--path="+d+"/", "--tmp_path="+d+"/tmp/", "--user_files_path="+d+"/user_files/",
			"--format_schema_path="+d+"/format_schemas/",
			"--logger.log="+d+"/server.log", "--logger.errorlog="+d+"/server.err.log", "--logger.console=0")
		s.cmd.Stdout, s.cmd.Stderr = &s.stderr, &s.stderr // configuration errors go here
	}
	s.cmd.Dir = d
	// A test binary that dies (a timeout's panic skips the cleanups) takes
	// its servers with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if s.uid != 0 {
		s.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.uid)}
	}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start private clickhouse-server: %v", err)
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, ch chan struct{}) { _ = c.Wait(); close(ch) }(s.cmd, s.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, DialTimeout: time.Second})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = conn.Ping(ctx)
			cancel()
			conn.Close()
			if err == nil {
				if s.configDir == "" {
					s.checkVersion()
				}
				return
			}
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(d + "/server.err.log")
			log = append(log, s.stderr.String()...)
			s.t.Fatalf("private ClickHouse server exited at start-up: %s", tail(log))
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.t.Fatalf("private ClickHouse server did not answer on %s within 60 s", s.Addr())
}

func (s *Server) checkVersion() {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, DialTimeout: time.Second})
	if err != nil {
		s.t.Fatalf("connect to private ClickHouse server: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	checkVersion(s.t, ctx, conn)
}

func listenBin() string { return os.Getenv("MCPWARDEN_CLICKHOUSE_LISTEN_BIN") }

// Kill stops the server abruptly (SIGKILL), as a crash or an operator
// pulling the plug would, and waits for it to be gone.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// MergeParts merges every active partition of the pipeline's tables in
// database db into one part (OPTIMIZE … FINAL per partition), as background
// merges eventually would, so that a benchmark reads a settled layout.
func MergeParts(tb testing.TB, conn driver.Conn, db string) {
	tb.Helper()
	ctx := context.Background()
	for _, t := range []string{"events", "runs_rollup", "denials_rollup"} {
		rows, err := conn.Query(ctx, "SELECT DISTINCT partition_id FROM system.parts WHERE database = ? AND table = ? AND active", db, t)
		if err != nil {
			tb.Fatal(err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				tb.Fatal(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			if err := conn.Exec(ctx, "OPTIMIZE TABLE "+db+"."+t+" PARTITION ID '"+id+"' FINAL"); err != nil {
				tb.Fatal(err)
			}
		}
	}
}
