package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestClusterSurvivesItsLeader: an R3 stream on a 3-node cluster keeps its
// messages and takes new ones after its leader is killed, and the restarted
// node catches up: with embedded nodes (shut down), and with Debian's
// nats-server 2.9.10 as processes (SIGKILL).
func TestClusterSurvivesItsLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		bin  func(t *testing.T) string
	}{
		{"embedded", func(*testing.T) string { return "" }},
		{"debian", func(t *testing.T) string { return DebianServer(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) { survivesItsLeader(t, tc.bin(t)) })
	}
}

func survivesItsLeader(t *testing.T, bin string) {
	c := StartCluster(t, ClusterConfig{Hosts: []string{"web-1"}, Bin: bin})
	nc, _ := Connect(t, c.Conn(stream.RoleCollector, "", "test"))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := stream.Ensure(ctx, js, stream.Config{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	c.WaitStreamCurrent(t, stream.Name, 3)
	host, _ := Connect(t, c.Conn(stream.RoleDaemon, "web-1", "host"))
	hjs, _ := jetstream.New(host)
	publish := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			for {
				_, err := hjs.Publish(ctx, stream.SubjectPrefix+".web-1.health", []byte("x"))
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("publish: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	publish(10)
	leader := c.StreamLeader(t, stream.Name)
	c.Kill(leader)
	if c.Running(leader) {
		t.Fatal("a killed node runs")
	}
	next := c.StreamLeader(t, stream.Name)
	if next == leader {
		t.Fatalf("the killed node %s is still the leader", c.Nodes()[leader].Name)
	}
	publish(10)
	c.Restart(leader)
	c.WaitStreamCurrent(t, stream.Name, 3)
	info, err := c.StreamInfo(stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 20 {
		t.Fatalf("the stream holds %d messages, want 20", info.State.Msgs)
	}
}
