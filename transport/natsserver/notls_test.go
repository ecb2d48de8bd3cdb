package natsserver

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestEmbeddedSpeaksNoTLSAndJoinsNoCluster: the daemon's embedded server
// offers no TLS (its INFO says so, and a client that requires TLS is
// refused), listens on a loopback address only, and has no route
// (cluster) or leafnode listener to join a cluster with: docs/fleet.md
// and docs/pipeline.md say so.
func TestEmbeddedSpeaksNoTLSAndJoinsNoCluster(t *testing.T) {
	for _, host := range []string{"", "::1"} {
		t.Run("host="+host, func(t *testing.T) {
			s, err := Start(Config{StoreDir: t.TempDir(), MaxStoreBytes: natstest.StoreBytes, Host: host, Port: -1, NoAuth: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown()
			u, err := url.Parse(s.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
				t.Fatalf("client URL %s is not on a loopback address", s.ClientURL())
			}
			// The first thing the server says: its INFO.
			c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || !strings.HasPrefix(line, "INFO ") {
				t.Fatalf("first line %q, %v", line, err)
			}
			var info map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"tls_required", "tls_available", "tls_verify"} {
				if v, ok := info[k]; ok && v != false {
					t.Errorf("INFO %s = %v", k, v)
				}
			}
			if _, ok := info["connect_urls"]; ok {
				t.Errorf("INFO lists cluster peers: %v", info["connect_urls"])
			}
			nc, err := nats.Connect(s.ClientURL(), nats.Secure(&tls.Config{InsecureSkipVerify: true}), nats.Timeout(10*time.Second))
			if err == nil {
				nc.Close()
				t.Fatal("a client that requires TLS connected")
			}
			if !strings.Contains(err.Error(), "secure connection not available") {
				t.Fatalf("a TLS client: %v, want the server to offer no TLS", err)
			}
			if a := s.ns.ClusterAddr(); a != nil {
				t.Errorf("the embedded server listens for routes on %v", a)
			}
			if a := s.ns.GatewayAddr(); a != nil {
				t.Errorf("the embedded server listens for gateways on %v", a)
			}
			if n := s.ns.NumRoutes(); n != 0 {
				t.Errorf("%d routes", n)
			}
		})
	}
}

// TestClientReconnectsForEverThroughTheList: stream.Connect is given a
// list whose first URL never answers; it connects through the list, and
// when the server is away for longer than nats.go's default 60 attempts
// at 250 ms would last (20 s), it is still trying, and reconnects once
// the server is back on the same port (docs/fleet.md: reconnects for
// ever, 250 ms between attempts, through the list).
func TestClientReconnectsForEverThroughTheList(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(Config{StoreDir: dir, MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(s.ClientURL())
	port, _ := strconv.Atoi(u.Port())
	dead := fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t))
	nc, err := stream.Connect(stream.ConnOptions{URL: dead + "," + s.ClientURL(), Name: "reconnect-test"})
	if err != nil {
		s.Shutdown()
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.Opts.MaxReconnect != -1 || nc.Opts.ReconnectWait != 250*time.Millisecond {
		t.Fatalf("MaxReconnect %d, ReconnectWait %s; want -1 and 250ms", nc.Opts.MaxReconnect, nc.Opts.ReconnectWait)
	}
	waitStatus := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %v", what, nc.Status())
			}
		}
	}
	waitStatus("connected through the list", nc.IsConnected)
	if nc.ConnectedUrl() != s.ClientURL() {
		t.Fatalf("connected to %s, want %s", nc.ConnectedUrl(), s.ClientURL())
	}
	s.Shutdown()
	waitStatus("reconnecting once the server is gone", nc.IsReconnecting)
	time.Sleep(20 * time.Second) // longer than 60 attempts at 250 ms
	if nc.IsClosed() || !nc.IsReconnecting() {
		t.Fatalf("after 20 s without a server: status %v, want still reconnecting", nc.Status())
	}
	s2, err := Start(Config{StoreDir: dir, MaxStoreBytes: natstest.StoreBytes, Port: port, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	waitStatus("reconnected to the restarted server", nc.IsConnected)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if nc.Stats().Reconnects < 1 {
		t.Fatalf("reconnects %d", nc.Stats().Reconnects)
	}
}
