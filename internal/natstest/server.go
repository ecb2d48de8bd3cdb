package natstest

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// Server is one nats-server run on a configuration file: embedded in the
// test process, or a process of Bin (DebianServer). The cluster's nodes and
// the tests of deploy/nats run their servers through it.
type Server struct {
	// Name is the server's name, as JetStream reports a stream's leader
	// and replicas (and as the logs name it).
	Name string
	// Conf is the configuration file; ClientPort the client port it
	// listens on (Start waits for it).
	Conf       string
	ClientPort int
	// Bin, when set, runs the server as a process of this binary (Stop
	// sends it SIGKILL); empty, the server is embedded (Stop shuts it down).
	Bin string
	// Env (KEY=VALUE) are variables the configuration reads: the process's
	// environment, or the test's (t.Setenv) for an embedded server.
	Env []string

	mu   sync.Mutex
	ns   *server.Server
	opts *server.Options
	cmd  *exec.Cmd
	out  *testenv.LockedBuffer
}

// Start starts the server and waits (up to 2 minutes) until it takes
// clients.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Bin != "" {
		if s.out == nil {
			s.out = &testenv.LockedBuffer{}
		}
		cmd := exec.Command(s.Bin, "-c", s.Conf)
		cmd.Env = append(os.Environ(), s.Env...)
		cmd.Stdout, cmd.Stderr = s.out, s.out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("natstest: start %s: %v", s.Bin, err)
		}
		s.cmd = cmd
		deadline := time.Now().Add(2 * time.Minute)
		for {
			conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.ClientPort), time.Second)
			if err == nil {
				conn.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("natstest: nats-server %s did not listen on port %d:\n%s", s.Name, s.ClientPort, tail(s.out.String(), 4000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(s.Conf)
	if err != nil {
		t.Fatalf("natstest: server %s: configuration %s: %v", s.Name, s.Conf, err)
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: server %s: %v", s.Name, err)
	}
	if s.out == nil {
		s.out = &testenv.LockedBuffer{}
	}
	// What the server logs goes to Log: an embedded server that cannot
	// start (its monitoring port taken meanwhile, say) says why only there,
	// and never becomes ready.
	log := &logTo{w: s.out}
	ns.SetLogger(log, false, false)
	go ns.Start()
	for deadline := time.Now().Add(2 * time.Minute); !ns.ReadyForConnections(time.Second); {
		if log.fatal.Load() || time.Now().After(deadline) {
			ns.Shutdown()
			t.Fatalf("natstest: server %s did not accept clients on port %d:\n%s", s.Name, s.ClientPort, tail(s.out.String(), 4000))
		}
	}
	s.ns, s.opts = ns, opts
}

// Stop stops the server at once: SIGKILL for a process, a shutdown for an
// embedded server. Its data stays for another Start. It reports whether
// the server was running.
func (s *Server) Stop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cmd != nil:
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	case s.ns != nil:
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.ns = nil
	default:
		return false
	}
	return true
}

// Running reports whether the server runs.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns != nil || s.cmd != nil
}

// Options are the options an embedded server was last started with (nil
// for a process).
func (s *Server) Options() *server.Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// Log is the tail (up to n bytes) of the server's output: a process's, or
// what an embedded server logged.
func (s *Server) Log(n int) string {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if out == nil {
		return ""
	}
	return tail(out.String(), n)
}

// logTo is a nats-server logger writing to w; fatal is set once the
// server logged a fatal error.
type logTo struct {
	w     io.Writer
	fatal atomic.Bool
}

func (l *logTo) logf(level, format string, v []any) {
	fmt.Fprintf(l.w, "["+level+"] "+format+"\n", v...)
}
func (l *logTo) Noticef(format string, v ...any) { l.logf("INF", format, v) }
func (l *logTo) Warnf(format string, v ...any)   { l.logf("WRN", format, v) }
func (l *logTo) Errorf(format string, v ...any)  { l.logf("ERR", format, v) }
func (l *logTo) Fatalf(format string, v ...any) {
	l.logf("FTL", format, v)
	l.fatal.Store(true)
}
func (l *logTo) Debugf(format string, v ...any) { l.logf("DBG", format, v) }
func (l *logTo) Tracef(format string, v ...any) { l.logf("TRC", format, v) }
