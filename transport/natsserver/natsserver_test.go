package natsserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
)

func TestStartServesJetStream(t *testing.T) {
	s, err := Start(Config{StoreDir: t.TempDir(), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("client URL %q is not loopback", s.ClientURL())
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "t.x", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Sequence != 1 {
		t.Fatalf("sequence %d, want 1", ack.Sequence)
	}
}

func TestStartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store dir", Config{Port: -1, NoAuth: true}, "no store directory"},
		{"no credentials", Config{StoreDir: t.TempDir(), Port: -1}, "no credentials"},
		{"non-loopback host", Config{StoreDir: t.TempDir(), Host: "0.0.0.0", Port: -1, NoAuth: true}, "loopback only"},
		{"hostname", Config{StoreDir: t.TempDir(), Host: "example.com", Port: -1, NoAuth: true}, "loopback only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(tc.cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("started; want refusal")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestDataSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(Config{StoreDir: dir, MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	url := s.ClientURL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	s.Shutdown()

	s2, err := Start(Config{StoreDir: dir, MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	nc2, err := nats.Connect(s2.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	st, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "kept" {
		t.Fatalf("got %q after restart", m.Data)
	}
}
