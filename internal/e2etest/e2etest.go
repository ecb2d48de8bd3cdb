// Package e2etest holds what the end-to-end tests of the real binaries
// share beyond internal/testenv (which stays free of NATS): an embedded
// NATS JetStream server with the event stream, as the daemon, the collector
// and `mcpwarden events` expect to find it.
package e2etest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// NATS starts an embedded NATS server with JetStream and without
// authentication on a random port (its store in dir), creates the event
// stream on it, and returns its client URL. It shuts down when the test
// ends, after what the test registered later (a daemon, a collector) has
// stopped: cleanups run last-in first-out.
func NATS(tb testing.TB, dir string) string {
	tb.Helper()
	ns, err := natsserver.Start(natsserver.Config{StoreDir: dir, MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		tb.Fatalf("embedded NATS: %v", err)
	}
	tb.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := stream.Ensure(context.Background(), js, stream.Config{}); err != nil {
		tb.Fatal(err)
	}
	return ns.ClientURL()
}
