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
	deadline := time.After(30 * time.Second)
	var gotLink, gotMissing bool
	for !(gotLink && gotMissing) {
		select {
		case r := <-out:
			t.Logf("%+v", r)
			if r.Slot == 7 && r.Op == kevent.OpOpenat && r.Ret >= 0 && r.Path1 == target {
				gotLink = true
				if r.NSTGID != r.TGID || r.NSPID != r.PID {
					t.Errorf("outside a pid namespace the namespace ids %d/%d differ from %d/%d", r.NSTGID, r.NSPID, r.TGID, r.PID)
				}
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

// TestRingDropsAreCounted fills a one-page ring with nobody reading: the
// records that do not fit are counted in the kernel, none vanish.
func TestRingDropsAreCounted(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := DefaultConfig()
	cfg.RingBytes = 4096
	p, err := Load(cfg)
	if err != nil {
		t.Fatalf("load probes: %v", err)
	}
	defer p.Close()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Watch(uint32(os.Getpid()), 1); err != nil {
		t.Fatal(err)
	}
	const opens = 1000
	for range opens {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if _, err := p.Unwatch(1); err != nil {
		t.Fatal(err)
	}
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.RingDrops == 0 {
		t.Fatalf("no ring drops counted: %+v", c)
	}
	if c.Events+c.RingDrops < opens {
		t.Errorf("%d submitted + %d dropped < %d opens: records vanished", c.Events, c.RingDrops, opens)
	}
}
