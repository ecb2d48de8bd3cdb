package probes

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func load(t *testing.T) *Probes {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := Load(DefaultConfig())
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("load probes: %v", err)
		}
		t.Skipf("skipping: load probes: %+v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestWatchedOpenIsSeen(t *testing.T) {
	p := load(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "target.txt")
	if err := os.WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan kevent.Record, 1024)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	if err := p.Watch(uint32(os.Getpid()), 7); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(link)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, _ = os.Open(filepath.Join(dir, "missing"))
	deadline := time.After(5 * time.Second)
	var gotLink, gotMissing bool
	for !(gotLink && gotMissing) {
		select {
		case r := <-out:
			t.Logf("%+v", r)
			if r.Slot == 7 && r.Op == kevent.OpOpenat && r.Ret >= 0 && r.Path1 == target {
				gotLink = true
			}
			if r.Slot == 7 && r.Ret == -2 && r.Path1 == filepath.Join(dir, "missing") {
				gotMissing = true
			}
		case <-deadline:
			t.Fatalf("events not seen: link=%v missing=%v", gotLink, gotMissing)
		}
	}
	if _, err := p.Unwatch(7); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counters %+v hooks %v missing %v", c, p.Hooks(), p.Unavailable())
}
