package proxy

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// heldStdin delays what the proxy writes to the server from
// notifications/initialized on: it holds every frame until the first
// tools/call of the client (not the proxy's own list_allowed_directories
// poll) is written, or until hold has passed, then writes them all in
// order. To the server this is a server too slow (a loaded machine) to
// handle initialized and the proxy's ping before the proxy's own timers
// run out.
type heldStdin struct {
	w    io.WriteCloser
	hold time.Duration

	mu       sync.Mutex
	holding  bool
	released bool
	held     [][]byte
	timer    *time.Timer
}

func (h *heldStdin) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.holding && !h.released && bytes.Contains(p, []byte(`"notifications/initialized"`)) {
		h.holding = true
		h.timer = time.AfterFunc(h.hold, h.release)
	}
	if !h.holding {
		return h.w.Write(p)
	}
	h.held = append(h.held, bytes.Clone(p))
	if bytes.Contains(p, []byte(`"tools/call"`)) && !bytes.Contains(p, []byte("list_allowed_directories")) {
		h.releaseLocked()
	}
	return len(p), nil
}

func (h *heldStdin) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked()
}

func (h *heldStdin) releaseLocked() {
	if !h.holding {
		return
	}
	h.holding, h.released = false, true
	h.timer.Stop()
	for _, p := range h.held {
		if _, err := h.w.Write(p); err != nil {
			break
		}
	}
	h.held = nil
}

func (h *heldStdin) Close() error { return h.w.Close() }

// TestFirstCallWaitsForSlowRootsServer: the filesystem server takes its
// directories from roots only (no arguments). Whatever the server's pace,
// the client's first call reaches it only after it applied its roots.
// Before: when the server had not answered the proxy's ping (sent right
// after initialized) within AskTimeout (500 ms; seen under -race at load
// 20), the proxy took it for a server that does not ask for roots and let
// calls through: the server refused the first call with "path outside
// allowed directories: … not in " (an empty list) — and a server with a
// stale list would have run it against that. Here the server sees
// initialized, the ping and the call only when the call arrives (or 3 s
// later): before the fix the call arrives first and is refused.
func TestFirstCallWaitsForSlowRootsServer(t *testing.T) {
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) { s.AllowedPaths = []string{"allowed"} },
		upstream: func(t testing.TB) *procUpstream {
			u := startUpstream(t, nil, "node", fsServer(t))
			u.mu.Lock()
			u.stdin = &heldStdin{w: u.stdin, hold: 3 * time.Second}
			u.mu.Unlock()
			return u
		},
	})
	c := f.client
	c.initLegacy(false)
	r := c.tool("read_text_file", map[string]any{"path": filepath.Join(f.base, "allowed", "probe.txt")})
	if r.IsError || !strings.Contains(r.text(), "MARKER-ALLOWED-7f3a") {
		t.Fatalf("first call = %+v", r)
	}
}
