package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestLateRootsAsker: server-everything asks roots/list about 350 ms after
// initialized, after the pong that tells the proxy it is not an asker. The
// roots it gets late are still the effective scope (scope ∩ client roots),
// never the client's own, the fence follows every narrowing (a restart
// under exactly the effective paths), and the proxy's checks narrow with
// it. After a restart, the late asker gets its roots again.
func TestLateRootsAsker(t *testing.T) {
	f := everythingJSFixture(t, "get-roots-list", "echo")
	c := f.client
	allowed := filepath.Join(f.base, "allowed")
	sub := filepath.Join(allowed, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// A client root outside the scope is dropped, one inside narrows.
	c.initLegacy(true, allowed, "/etc")
	serverRoots := func() string {
		t.Helper()
		// The tool lists what the server was given; until it asked, it
		// says it has none: wait (generously) for its late roots/list.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			r := c.tool("get-roots-list", map[string]any{})
			if r.IsError {
				t.Fatalf("get-roots-list: %s", r.text())
			}
			if txt := r.text(); strings.Contains(txt, "file://") || time.Now().After(deadline) {
				return txt
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	got := serverRoots()
	if !strings.Contains(got, "(1 total)") || !strings.Contains(got, "URI: file://"+allowed+"\n") {
		t.Fatalf("the late asker's roots: %q, want only %s", got, allowed)
	}
	if rs := restartsOf(f.up); len(rs) != 1 || len(rs[0]) != 1 || rs[0][0].Path != allowed {
		t.Fatalf("fence restarts = %v, want one, under exactly %s", rs, allowed)
	}
	// The proxy's own checks narrowed too: a path under the scope but
	// outside the client's roots is refused (echo's message is checked as
	// a path because it is absolute).
	outside := filepath.Join(f.base, "outside", "probe.txt")
	if r := c.tool("echo", map[string]any{"message": outside}); denialCode(r) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("echo of a path outside the client's roots: %+v", r)
	}
	if r := c.tool("echo", map[string]any{"message": filepath.Join(allowed, "probe.txt")}); r.IsError {
		t.Fatalf("echo of a path inside the client's roots: %s", r.text())
	}

	// The client narrows again: the new process asks late as well, and gets
	// the narrowed roots; the old ones are gone.
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(sub))
	deadline := time.Now().Add(2 * time.Minute)
	for f.up.restartCount() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if rs := restartsOf(f.up); len(rs) != 2 || len(rs[1]) != 1 || rs[1][0].Path != sub {
		t.Fatalf("fence restarts = %v, want a second one under exactly %s", rs, sub)
	}
	got = serverRoots()
	if !strings.Contains(got, "(1 total)") || !strings.Contains(got, "URI: file://"+sub+"\n") {
		t.Fatalf("after narrowing to %s the late asker lists %q", sub, got)
	}
	if r := c.tool("echo", map[string]any{"message": filepath.Join(allowed, "probe.txt")}); denialCode(r) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("echo of a path outside the narrowed roots: %+v", r)
	}
}

func restartsOf(u *procUpstream) [][]schema.CanonicalPath {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]schema.CanonicalPath(nil), u.restarts...)
}
