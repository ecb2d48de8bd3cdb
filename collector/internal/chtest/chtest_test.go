package chtest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
)

// TestPrivateServerSurvivesStrayClients: a client that does not speak the
// native protocol (a port probe sending a newline, an HTTP request on the
// wrong port, a Hello that lies about its lengths, random bytes, a
// connection that sends nothing) is dropped, and the server goes on
// answering clickhouse-go. Before, one newline aborted chdb-listen
// ("Unexpected packet from client": clickhouse-local terminates on any
// exception escaping a connection thread). Runs against a private server
// of its own (chdb-listen in `make test`'s current-release run,
// clickhouse-server in the legacy run), never the shared one.
func TestPrivateServerSurvivesStrayClients(t *testing.T) {
	s := chtest.StartServer(t)
	ping := func(after string) {
		t.Helper()
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("after %s: open: %v", after, err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var one uint8
		if err := conn.QueryRow(ctx, "SELECT toUInt8(1)").Scan(&one); err != nil || one != 1 {
			t.Fatalf("after %s: the server no longer answers: %v (%d)", after, err, one)
		}
	}
	ping("start-up")
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"a newline", []byte("\n")},
		{"an HTTP request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"nothing", nil},
		{"a Hello with a client name of 2^62 bytes", []byte{0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f}},
		{"a Hello cut short", []byte{0x00, 0x05, 'p', 'r'}},
		{"an unknown packet", []byte{0x7f, 0x00, 0x00}},
		{"random bytes", []byte("\x93\x1a\xff\x00\x10garbage\x00\x00\xfe\xed")},
	} {
		c, err := net.DialTimeout("tcp", s.Addr(), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: dial: %v", tc.name, err)
		}
		if len(tc.send) > 0 {
			if _, err := c.Write(tc.send); err != nil {
				t.Fatalf("%s: write: %v", tc.name, err)
			}
		}
		// Whatever the server answers (an exception packet, or nothing),
		// the stray client goes; closing with data unread is a reset.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Read(make([]byte, 4096))
		c.Close()
		ping(tc.name)
	}
}
