package auditlog

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

func TestPublishAppendsLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "audit.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	o := schema.Origin{Host: "h", BootID: "b"}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := o.NewEvent(schema.KindLaunch, "run", "scope", "sha256:x", time.Now())
			ev.Launch = &schema.Launch{Phase: "start", Mode: schema.ModeEnforce}
			if err := l.Publish(context.Background(), []schema.Event{ev, ev}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	l.Close()
	if err := l.Publish(context.Background(), []schema.Event{{}}); err == nil {
		t.Error("publish after close succeeded")
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("log mode %v, err %v", st.Mode(), err)
	}
	if dst, _ := os.Stat(filepath.Dir(path)); dst.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v", dst.Mode())
	}
	f, _ := os.Open(path)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev schema.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Launch == nil {
			t.Fatalf("line %d: %v %q", n, err, sc.Text())
		}
		n++
	}
	if n != 40 {
		t.Errorf("%d lines, want 40", n)
	}
}

func TestOpenFailsClosed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o600)
	for _, p := range []string{filepath.Join(file, "audit.jsonl"), dir} {
		if _, err := Open(p); err == nil {
			t.Errorf("Open(%s) succeeded", p)
		}
	}
}

func TestDefaultStateDir(t *testing.T) {
	d, err := DefaultStateDir()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && d != "/var/lib/mcpwarden" {
		t.Errorf("root state dir %s", d)
	}
	if !filepath.IsAbs(d) {
		t.Errorf("state dir %s not absolute", d)
	}
}

// TestPublishDeferSync: records written with PublishDeferSync are in the
// file at once and left unsynced; the next Publish (even of nothing) or
// Close syncs them.
func TestPublishDeferSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ev := schema.Origin{Host: "h", BootID: "b"}.NewEvent(schema.KindDecision, "run", "scope", "sha256:x", time.Now())
	ev.Decision = &schema.Decision{OpID: "op"}
	ctx := context.Background()
	lines := func() int {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	if err := l.PublishDeferSync(ctx, []schema.Event{ev, ev}); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 2 || !l.dirty {
		t.Fatalf("after PublishDeferSync: %d lines, dirty %v; want 2, true", n, l.dirty)
	}
	if err := l.Publish(ctx, []schema.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 3 || l.dirty {
		t.Fatalf("after Publish: %d lines, dirty %v; want 3, false", n, l.dirty)
	}
	if err := l.PublishDeferSync(ctx, []schema.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(ctx, nil); err != nil || l.dirty {
		t.Fatalf("Publish of nothing: %v, dirty %v; want it to sync", err, l.dirty)
	}
	if err := l.PublishDeferSync(ctx, []schema.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil || l.dirty {
		t.Fatalf("Close: %v, dirty %v", err, l.dirty)
	}
	if n := lines(); n != 5 {
		t.Errorf("%d lines in the end, want 5", n)
	}
	if err := l.PublishDeferSync(ctx, []schema.Event{ev}); err == nil {
		t.Error("PublishDeferSync after Close succeeded")
	}
}
