// Package natstest holds what tests of NATS share: a connection that
// records the permission violations the server reports to it, and waits for
// one; and a JetStream cluster of N nodes on loopback with the pipeline's
// accounts and permissions (StartCluster), whose nodes a test can kill and
// restart and whose stream leader it can find.
package natstest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// StoreBytes is the JetStream store every test server gets (nothing is
// allocated up front). Left unset, a server's store is 75% of the disk free
// when it starts, and a stream's default cap (10 GiB) is refused on a host
// with less than ~14 GB free: tests must not pass or fail with the disk.
const StoreBytes = 20 << 30

// Violations collects the permission violations reported to a connection.
type Violations struct{ ch chan error }

// Drain forgets what was reported so far.
func (v *Violations) Drain() {
	for {
		select {
		case <-v.ch:
		default:
			return
		}
	}
}

// Wait fails t unless the server reports a permissions violation naming
// subject (a subject, or a quoted `Subscription to "..."`) within 10 s.
func (v *Violations) Wait(t testing.TB, subject string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-v.ch:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation reported for %s", subject)
		}
	}
}

// Connect connects with o (no retries) and records its violations; the
// connection is closed when t ends.
func Connect(t testing.TB, o stream.ConnOptions) (*nats.Conn, *Violations) {
	t.Helper()
	v := &Violations{ch: make(chan error, 64)}
	// One attempt, so a handshake gets minutes, not nats.go's 2 s: at a
	// load of 30 on two cores TestDeployNATSCluster's connection to a TLS
	// node timed out ("read tcp ...: i/o timeout").
	nc, err := stream.Connect(o, nats.RetryOnFailedConnect(false), nats.MaxReconnects(0), nats.Timeout(2*time.Minute),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case v.ch <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", o.Name, err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}
