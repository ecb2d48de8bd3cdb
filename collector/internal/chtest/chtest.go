// Package chtest gives tests a fresh database on the local ClickHouse server
// that `scripts/test-env.sh up` starts (native port 9000). Outside CI a
// missing server skips the test; under CI=true it fails it.
package chtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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

// Server is a private clickhouse-server process (its own ports and data
// directory) that a fault test may stop and start without disturbing the
// shared server other tests use.
type Server struct {
	t                 testing.TB
	dir               string
	tcpPort, httpPort int
	interPort         int
	cmd               *exec.Cmd
	exited            chan struct{}
}

// StartServer starts a private clickhouse-server on free loopback ports.
func StartServer(t testing.TB) *Server {
	t.Helper()
	testenv.RequireCommand(t, "clickhouse-server")
	testenv.RequireFile(t, "/etc/clickhouse-server/config.xml", "install clickhouse-server with 'scripts/test-env.sh install'")
	s := &Server{t: t, dir: t.TempDir(), tcpPort: freePort(t), httpPort: freePort(t), interPort: freePort(t)}
	s.Start()
	t.Cleanup(func() { s.Kill() })
	return s
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is the native-protocol address.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.tcpPort) }

// DSN is a DSN for database db on this server.
func (s *Server) DSN(db string) string { return "clickhouse://" + s.Addr() + "/" + db }

// Start starts the server on its data directory and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	d := s.dir
	s.cmd = exec.Command("clickhouse-server", "--config-file=/etc/clickhouse-server/config.xml", "--",
		fmt.Sprintf("--tcp_port=%d", s.tcpPort), fmt.Sprintf("--http_port=%d", s.httpPort),
		fmt.Sprintf("--interserver_http_port=%d", s.interPort),
		"--path="+d+"/", "--tmp_path="+d+"/tmp/", "--user_files_path="+d+"/user_files/",
		"--format_schema_path="+d+"/format_schemas/",
		"--logger.log="+d+"/server.log", "--logger.errorlog="+d+"/server.err.log", "--logger.console=0")
	s.cmd.Dir = d
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
				return
			}
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(d + "/server.err.log")
			s.t.Fatalf("private clickhouse-server exited at start-up: %s", tail(log))
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.t.Fatalf("private clickhouse-server did not answer on %s within 60 s", s.Addr())
}

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
