package natsserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// impostorEnv makes a re-executed test binary (run as nobody) serve a NATS
// server with JetStream and no authentication on the port it names: what
// any local user can start on the embedded server's loopback port while
// the daemon is down (a restart, a crash), with Debian's nats-server or a
// program of its own.
const impostorEnv = "MCPWARDEN_TEST_NATS_IMPOSTOR"

// runImpostor is the child side: it serves until its stdin closes.
func runImpostor(arg string) int {
	var a struct {
		Port int
		Dir  string
	}
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// No authentication, but a nonce in its greeting, so that clients
	// holding an nkey sign it and go on (a server without one they leave).
	ns, err := server.NewServer(&server.Options{ServerName: "impostor", Host: "127.0.0.1", Port: a.Port,
		JetStream: true, StoreDir: filepath.Join(a.Dir, "nats"), JetStreamMaxStore: natstest.StoreBytes, NoSigs: true, AlwaysEnableNonce: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "impostor not ready")
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	ns.Shutdown()
	return 0
}

// startImpostor starts the test binary bin as nobody serving on port, and
// returns once it accepts clients; stop ends it.
func startImpostor(t *testing.T, bin string, port int) (stop func()) {
	t.Helper()
	dir := filepath.Join(filepath.Dir(bin), fmt.Sprintf("impostor-%d", port))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	arg, _ := json.Marshal(map[string]any{"Port": port, "Dir": dir})
	cmd := exec.Command(bin, "-test.run=^TestMain$")
	cmd.Env = []string{impostorEnv + "=" + string(arg), "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		stdin.Close()
		_ = cmd.Wait()
		t.Fatalf("the impostor did not start: %q %v", line, err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestImpostorOnTheLoopbackPortIsRefused: the embedded server listens on a
// loopback port above 1024 and speaks no TLS, so nothing but the port
// tells a client it reached the daemon's server. While the daemon is down
// (restarting, crashed), any local user can listen on that port: a server
// with no authentication takes every client's nkey signature as it comes,
// acknowledges the records `run --nats` and the daemon's publishers send
// (they leave the spool, and are lost), and feeds `collect`, `events` and
// `why` whatever events it likes, in any host's name. A client now checks,
// on every connection and reconnection to a server on this host, that the
// server's socket is owned by root or by the client's own user, and refuses
// it otherwise, naming the owner. Both the first connection and a
// reconnection after the real server went away are tried.
func TestImpostorOnTheLoopbackPortIsRefused(t *testing.T) {
	if os.Getenv(impostorEnv) != "" {
		return
	}
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(mustPublicDir(t), "natsserver.test")
	copyFile(t, exe, bin, 0o755)
	root := t.TempDir()
	creds, err := LoadOrCreateCredentials(stream.CredentialsDir(root))
	if err != nil {
		t.Fatal(err)
	}
	url := func(port int) string { return fmt.Sprintf("nats://127.0.0.1:%d", port) }

	t.Run("first connection", func(t *testing.T) {
		port := testenv.FreePort(t)
		startImpostor(t, bin, port)
		for _, r := range []stream.Role{stream.RoleDaemon, stream.RoleCollector, stream.RoleReader} {
			nc, err := stream.Connect(ClientOptions(url(port), creds.Dir, r, testHost, "test-"+string(r)))
			if err == nil {
				// stream.Connect goes on trying in the background after a
				// first attempt that failed for another reason than a
				// refusal: a success is a connection that came up.
				up := nc.FlushTimeout(30*time.Second) == nil && nc.Status() == nats.CONNECTED
				name := nc.ConnectedServerName()
				nc.Close()
				if up {
					t.Fatalf("%s connected to %s, a server on the loopback port run by uid 65534", r, name)
				}
				t.Fatalf("%s: no refusal, and no connection either: %v", r, nc.LastError())
			}
			if !strings.Contains(err.Error(), "uid 65534") {
				t.Fatalf("%s: the refusal does not name the server's owner: %v", r, err)
			}
		}
	})

	t.Run("reconnection", func(t *testing.T) {
		port := testenv.FreePort(t)
		store := filepath.Join(root, "nats")
		s, err := Start(Config{StoreDir: store, MaxStoreBytes: natstest.StoreBytes, Port: port, Auth: creds, EventHost: testHost, ServerName: "real"})
		if err != nil {
			t.Fatal(err)
		}
		reconnected := make(chan string, 16)
		failed := make(chan error, 1024)
		nc, err := stream.Connect(ClientOptions(url(port), creds.Dir, stream.RoleDaemon, testHost, "test-daemon"),
			nats.ReconnectHandler(func(c *nats.Conn) { reconnected <- c.ConnectedServerName() }),
			nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
				select {
				case failed <- err:
				default:
				}
			}))
		if err != nil {
			s.Shutdown()
			t.Fatal(err)
		}
		defer nc.Close()
		s.Shutdown()                        // the daemon restarts ...
		stop := startImpostor(t, bin, port) // ... and a local user takes its port
		deadline := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case name := <-reconnected:
				t.Fatalf("the client reconnected to %s, a server on the loopback port run by uid 65534", name)
			case err := <-failed:
				if strings.Contains(err.Error(), "uid 65534") {
					break wait
				}
			case <-deadline:
				t.Fatal("no reconnection attempt reached the impostor in 2 minutes")
			}
		}
		stop()
		// The real server back on its port: the client reconnects to it.
		s, err = Start(Config{StoreDir: store, MaxStoreBytes: natstest.StoreBytes, Port: port, Auth: creds, EventHost: testHost, ServerName: "real"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		select {
		case name := <-reconnected:
			if name != "real" {
				t.Fatalf("reconnected to %q, want the real server", name)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the client did not reconnect to the real server in 2 minutes")
		}
	})
}
