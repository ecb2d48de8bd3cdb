package proxy

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// allowedDirs returns the server's own answer to list_allowed_directories.
func allowedDirs(c *testClient) []string {
	c.t.Helper()
	r := c.tool("list_allowed_directories", map[string]any{})
	if r.IsError {
		c.t.Fatalf("list_allowed_directories failed: %s", r.text())
	}
	var out []string
	for _, l := range strings.Split(r.text(), "\n")[1:] {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func mustRead(t *testing.T, c *testClient, path, marker string) {
	t.Helper()
	r := c.read(path)
	if r.IsError || !strings.Contains(r.text(), marker) {
		t.Fatalf("read of %s did not return its marker: isError=%v %q", filepath.Base(filepath.Dir(path)), r.IsError, r.text())
	}
}

func mustDeny(t *testing.T, c *testClient, path, marker string) toolResult {
	t.Helper()
	r := c.read(path)
	if !r.IsError || strings.Contains(r.text(), marker) {
		t.Fatalf("read of %s was not denied: %q", path, r.text())
	}
	return r
}

// TestSeedRevocationProtocol runs the revocation protocol of
// shared/seeds/001 through the proxy against the real, unmodified
// filesystem server started with no directory arguments (Roots only).
func TestSeedRevocationProtocol(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	c := f.client
	allowed := filepath.Join(f.base, "allowed")
	inFile := filepath.Join(allowed, "probe.txt")
	outFile := filepath.Join(f.base, "outside", "probe.txt")
	const inMarker, outMarker = "MARKER-ALLOWED-7f3a", "MARKER-OUTSIDE-91c2"

	// 1. Grant root "allowed" at initialisation; confirm; read; outside denied.
	c.initLegacy(true, allowed)
	if got := allowedDirs(c); len(got) != 1 || got[0] != allowed {
		t.Fatalf("step 1: server's allowed directories = %v, want [allowed]", got)
	}
	mustRead(t, c, inFile, inMarker)
	if code := denialCode(mustDeny(t, c, outFile, outMarker)); code != string(schema.ErrPathOutsideScope) {
		t.Fatalf("step 1: outside denied with %q, want PATH_OUTSIDE_SCOPE", code)
	}

	// 2. Revoke every root: list_changed, answer roots: []. Empty list, read denied.
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer())
	if got := allowedDirs(c); len(got) != 0 {
		t.Fatalf("step 2: server still lists %v after every root was revoked", got)
	}
	if code := denialCode(mustDeny(t, c, inFile, inMarker)); code != string(schema.ErrPathOutsideScope) {
		t.Fatalf("step 2: revoked read denied with %q", code)
	}

	// 3. Restore the same root: listed again, read works.
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(allowed))
	if got := allowedDirs(c); len(got) != 1 || got[0] != allowed {
		t.Fatalf("step 3: allowed directories = %v after restore", got)
	}
	mustRead(t, c, inFile, inMarker)

	// 4. Revoke with the reply held: a read sent after the roots/list request
	// arrived gets no answer for 200 ms, then is denied once roots: [] is sent.
	c.notify("notifications/roots/list_changed", nil)
	held := c.nextRequest("roots/list")
	pending := c.start("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": inFile}})
	select {
	case m := <-pending:
		t.Fatalf("step 4: the read was answered while the roots refresh was pending: %s", m.Result)
	case <-time.After(200 * time.Millisecond):
	}
	c.reply(held, rootsAnswer())
	r := decodeTool(t, c.wait(pending))
	if !r.IsError || strings.Contains(r.text(), inMarker) {
		t.Fatalf("step 4: the held read was not denied after the reply: %q", r.text())
	}

	// 5. Restore and confirm; then two refreshes, the older (granting) reply
	// held and released last: access must stay revoked.
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(allowed))
	mustRead(t, c, inFile, inMarker)
	c.notify("notifications/roots/list_changed", nil)
	older := c.nextRequest("roots/list")
	c.notify("notifications/roots/list_changed", nil)
	newer := c.nextRequest("roots/list")
	c.reply(newer, rootsAnswer())
	if got := allowedDirs(c); len(got) != 0 {
		t.Fatalf("step 5: allowed directories = %v after the newer empty answer", got)
	}
	mustDeny(t, c, inFile, inMarker)
	c.reply(older, rootsAnswer(allowed)) // the stale reply
	// The proxy logs and ignores it; prove it by the state, twice over time.
	for i := 0; i < 2; i++ {
		if got := allowedDirs(c); len(got) != 0 {
			t.Fatalf("step 5: the stale reply restored access: %v", got)
		}
		mustDeny(t, c, inFile, inMarker)
	}
	// Finally grant again and read.
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(allowed))
	mustRead(t, c, inFile, inMarker)

	// The fence followed every change: each narrowing restarted the server
	// with exactly the effective paths.
	f.up.mu.Lock()
	restarts := append([][]schema.CanonicalPath(nil), f.up.restarts...)
	f.up.mu.Unlock()
	if len(restarts) < 4 {
		t.Fatalf("server restarted %d times; want one per change of the effective scope", len(restarts))
	}
	for _, rs := range restarts {
		if len(rs) > 1 || (len(rs) == 1 && rs[0].Path != allowed) {
			t.Fatalf("restart with paths %v: wider than the effective scope", rs)
		}
	}
	// Records: no full paths, hashed path args, denials with codes.
	raw := f.sink.raw()
	if strings.Contains(raw, f.base) || strings.Contains(raw, inMarker) {
		t.Fatal("a decision record contains a full path or file contents")
	}
	d := f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Tool == "read_text_file" && d.Decision == "deny" && d.ErrorCode == string(schema.ErrPathOutsideScope)
	})
	if len(d.PathHashes) == 0 && d.ErrorCode == "" {
		t.Fatal("denied read has no path hash")
	}
	a := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Tool == "read_text_file" && d.Decision == "allow" })
	if len(a.PathHashes) != 1 || a.PathHashes[0] != f.proxy.cfg.Hasher.Hash(inFile) || a.ProtocolEra != "legacy" || a.ActionClass != "read" || a.Approval != "not_required" {
		t.Fatalf("allowed read record = %+v", a)
	}
}

// TestSeedBaselineBareServer runs the revoke step of the seed protocol
// against the bare filesystem server, without the proxy, as the control
// for TestSeedRevocationProtocol: the server keeps serving after every root
// is revoked (shared/FACTS.md). If this ever fails, the upstream fixed it.
func TestSeedBaselineBareServer(t *testing.T) {
	base := makeBase(t)
	up := startUpstream(t, nil, "node", fsServer(t))
	c := newTestClient(t, up.Stdin(), up.Stdout())
	allowed := filepath.Join(base, "allowed")
	in := filepath.Join(allowed, "probe.txt")
	c.initLegacy(true, allowed)
	deadline := time.Now().Add(10 * time.Second)
	for len(allowedDirs(c)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mustRead(t, c, in, "MARKER-ALLOWED")
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer())
	time.Sleep(200 * time.Millisecond) // the seed's observation window
	if got := allowedDirs(c); len(got) != 1 {
		t.Fatalf("bare server lists %v after revoking every root; the baseline changed", got)
	}
	r := c.read(in)
	if r.IsError || !strings.Contains(r.text(), "MARKER-ALLOWED") {
		t.Fatalf("bare server refused the read after revocation (%q): upstream fixed it; keep the proxy test, update FACTS", r.text())
	}
}
