package proxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

func approvalServer(t *testing.T) (*approval.Server, string, string) {
	t.Helper()
	dir := t.TempDir()
	runID := "run-approvals"
	srv, err := approval.Listen(dir, runID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Close() })
	go srv.Serve(ctx)
	return srv, dir, runID
}

// pendingOp polls the approval socket until one call is pending.
func pendingOp(t *testing.T, dir, runID string) approval.Pending {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := approval.Send(context.Background(), dir, runID, approval.Request{Action: approval.ActionList})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Pending) > 0 {
			return resp.Pending[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no call became pending")
	return approval.Pending{}
}

func TestApprovals(t *testing.T) {
	srv, dir, runID := approvalServer(t)
	f := newFixture(t, fixtureOpts{
		scope:  func(s *schema.Scope) { s.Approval = schema.ApprovalRequiredForWrite },
		config: func(c *Config) { c.Approvals = srv; c.ApprovalTimeout = 2 * time.Second },
	})
	c := f.client
	c.initLegacy(false)
	target := filepath.Join(f.base, "allowed", "written.txt")
	write := func() chan *jsonrpc.Message {
		return c.start("tools/call", map[string]any{"name": "write_file", "arguments": map[string]any{"path": target, "content": "hello"}})
	}

	// Reads need no approval.
	mustRead(t, c, filepath.Join(f.base, "allowed", "probe.txt"), "MARKER-ALLOWED")

	// Approved out of band: the write happens once.
	ch := write()
	op := pendingOp(t, dir, runID)
	if op.Tool != "write_file" || op.Class != "destructive" || len(op.Paths) != 1 || op.Paths[0] != target || op.RunID == "" {
		t.Fatalf("pending = %+v: the approver must see the tool, its class and the path in clear", op)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("the write ran before it was approved")
	}
	if _, err := approval.Send(context.Background(), dir, runID, approval.Request{Action: approval.ActionApprove, OpID: op.OpID}); err != nil {
		t.Fatal(err)
	}
	if r := decodeTool(t, c.wait(ch)); r.IsError {
		t.Fatalf("approved write failed: %s", r.text())
	}
	if b, _ := os.ReadFile(target); string(b) != "hello" {
		t.Fatalf("file = %q", b)
	}
	rec := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.OpID == op.OpID })
	if rec.Decision != "allow" || rec.Approval != "approved" {
		t.Fatalf("approved record = %+v", rec)
	}

	// Denied out of band.
	os.Remove(target)
	ch = write()
	op = pendingOp(t, dir, runID)
	if _, err := approval.Send(context.Background(), dir, runID, approval.Request{Action: approval.ActionDeny, OpID: op.OpID}); err != nil {
		t.Fatal(err)
	}
	if r := decodeTool(t, c.wait(ch)); denialCode(r) != string(schema.ErrApprovalDenied) {
		t.Fatalf("denied write = %+v", r)
	}
	// Timed out: denied, never retried.
	r := decodeTool(t, c.wait(write()))
	if denialCode(r) != string(schema.ErrApprovalDenied) {
		t.Fatalf("timed-out write = %+v", r)
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Approval == "timed_out" && d.Decision == "deny" && d.RetryCount == 0
	})
	if _, err := os.Stat(target); err == nil {
		t.Fatal("a denied write happened")
	}
}

func TestApprovalByElicitation(t *testing.T) {
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) { s.Approval = schema.ApprovalRequiredForAll },
	})
	c := f.client
	res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"elicitation": map[string]any{}}, "clientInfo": map[string]string{"name": "t", "version": "1"}})
	if res.Error != nil {
		t.Fatal(res.Error)
	}
	c.notify("notifications/initialized", nil)
	in := filepath.Join(f.base, "allowed", "probe.txt")
	ch := c.start("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}})
	req := c.nextRequest("elicitation/create")
	if strings.Contains(string(req.Params), f.base) {
		t.Fatal("the elicitation names a path")
	}
	c.reply(req, map[string]any{"action": "accept", "content": map[string]any{}})
	if r := decodeTool(t, c.wait(ch)); r.IsError || !strings.Contains(r.text(), "MARKER-ALLOWED") {
		t.Fatalf("elicitation-approved read = %+v", r)
	}
	ch = c.start("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}})
	c.reply(c.nextRequest("elicitation/create"), map[string]any{"action": "decline"})
	if r := decodeTool(t, c.wait(ch)); denialCode(r) != string(schema.ErrApprovalDenied) {
		t.Fatalf("declined read = %+v", r)
	}
}

func TestApprovalWithoutChannel(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.Approval = schema.ApprovalRequiredForWrite }})
	c := f.client
	c.initLegacy(false)
	r := c.tool("write_file", map[string]any{"path": filepath.Join(f.base, "allowed", "x.txt"), "content": "x"})
	if denialCode(r) != string(schema.ErrApprovalRequired) {
		t.Fatalf("write without an approval channel = %+v", r)
	}
}

func TestReadOnlyScope(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.AccessMode = schema.AccessRead }})
	c := f.client
	c.initLegacy(false)
	r := c.tool("write_file", map[string]any{"path": filepath.Join(f.base, "allowed", "x.txt"), "content": "x"})
	if denialCode(r) != string(schema.ErrToolNotAllowed) {
		t.Fatalf("write in a read scope = %+v", r)
	}
}

func TestAttribution(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.Attribution = &schema.Attribution{Required: true} }})
	c := f.client
	c.initLegacy(false)
	in := filepath.Join(f.base, "allowed", "probe.txt")
	r := c.read(in)
	if denialCode(r) != string(schema.ErrUnattributed) {
		t.Fatalf("unattributed read = %+v", r)
	}
	for _, bad := range []any{"not-a-traceparent", 42, ""} {
		r = decodeTool(t, c.call("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}, "_meta": map[string]any{"traceparent": bad}}))
		if denialCode(r) != string(schema.ErrUnattributed) {
			t.Fatalf("traceparent %v = %+v", bad, r)
		}
	}
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r = decodeTool(t, c.call("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}, "_meta": map[string]any{"traceparent": tp}}))
	if r.IsError {
		t.Fatalf("attributed read = %+v", r)
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool { return d.CorrelationID == tp && d.Decision == "allow" })
}

func TestResponseCap(t *testing.T) {
	f := newFixture(t, fixtureOpts{config: func(c *Config) { c.MaxResponseBytes = 4096 }})
	c := f.client
	c.initLegacy(false)
	big := filepath.Join(f.base, "allowed", "big.txt")
	os.WriteFile(big, []byte(strings.Repeat("x", 10000)), 0o644)
	if r := c.read(big); denialCode(r) != string(schema.ErrResponseTooLarge) {
		t.Fatalf("big read = %+v", r)
	}
	mustRead(t, c, filepath.Join(f.base, "allowed", "probe.txt"), "MARKER-ALLOWED")
	f.sink.waitDecision(t, func(d schema.Decision) bool { return d.ErrorCode == string(schema.ErrResponseTooLarge) })
}

func TestOversizedUpstreamFrame(t *testing.T) {
	f := newFixture(t, fixtureOpts{config: func(c *Config) { c.MaxMessageBytes = 64 << 10; c.MaxResponseBytes = 32 << 10 }})
	c := f.client
	c.initLegacy(false)
	big := filepath.Join(f.base, "allowed", "big.txt")
	os.WriteFile(big, []byte(strings.Repeat("y", 200<<10)), 0o644)
	if r := c.read(big); denialCode(r) != string(schema.ErrResponseTooLarge) {
		t.Fatalf("read beyond the frame limit = %+v", r)
	}
	mustRead(t, c, filepath.Join(f.base, "allowed", "probe.txt"), "MARKER-ALLOWED")
}

func TestExpiryStopsTheRun(t *testing.T) {
	var skew atomic.Int64
	f := newFixture(t, fixtureOpts{config: func(c *Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	}})
	c := f.client
	c.initLegacy(false)
	in := filepath.Join(f.base, "allowed", "probe.txt")
	mustRead(t, c, in, "MARKER-ALLOWED")
	skew.Store(int64(2 * time.Hour)) // past the scope's 60 minutes
	// The client itself (not only the model) learns why: a JSON-RPC error
	// naming SCOPE_EXPIRED.
	if m := c.call("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}}); rpcErrorCode(m) != string(schema.ErrScopeExpired) {
		t.Fatalf("read after expiry = %+v %s", m.Error, m.Result)
	}
	select {
	case err := <-f.errc:
		if !errors.Is(err, ErrScopeExpired) {
			t.Fatalf("Mediate = %v, want ErrScopeExpired", err)
		}
		f.errc <- err // for the fixture's cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Mediate did not stop after expiry")
	}
	select {
	case <-f.up.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server was not stopped after expiry")
	}
}

func TestRevokeStopsTheRun(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	c := f.client
	c.initLegacy(false)
	mustRead(t, c, filepath.Join(f.base, "allowed", "probe.txt"), "MARKER-ALLOWED")
	f.proxy.Revoke()
	select {
	case err := <-f.errc:
		if !errors.Is(err, ErrScopeRevoked) {
			t.Fatalf("Mediate = %v, want ErrScopeRevoked", err)
		}
		f.errc <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Mediate did not stop after revocation")
	}
	select {
	case <-f.up.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server was not stopped after revocation")
	}
}

func TestSinkFailureFailsClosed(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	c := f.client
	c.initLegacy(false)
	in := filepath.Join(f.base, "allowed", "probe.txt")
	mustRead(t, c, in, "MARKER-ALLOWED")
	f.sink.mu.Lock()
	f.sink.fail = true
	f.sink.mu.Unlock()
	// Its record cannot be written: the run stops (records are written off
	// the call path, so this call itself may still have been answered).
	c.start("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}})
	select {
	case err := <-f.errc:
		if !errors.Is(err, ErrAuditSink) {
			t.Fatalf("Mediate = %v, want ErrAuditSink", err)
		}
		f.errc <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Mediate kept running without an audit sink")
	}
}

func TestRootsRefreshTimeout(t *testing.T) {
	f := newFixture(t, fixtureOpts{config: func(c *Config) { c.RootsTimeout = 300 * time.Millisecond }})
	c := f.client
	allowed := filepath.Join(f.base, "allowed")
	c.initLegacy(true, allowed)
	mustRead(t, c, filepath.Join(allowed, "probe.txt"), "MARKER-ALLOWED")
	c.notify("notifications/roots/list_changed", nil)
	held := c.nextRequest("roots/list") // never answered in time
	r := c.read(filepath.Join(allowed, "probe.txt"))
	if denialCode(r) != string(schema.ErrRootsPending) {
		t.Fatalf("read during a stuck refresh = %+v", r)
	}
	c.reply(held, rootsAnswer(allowed))
}

func TestClientRootsOnlyNarrow(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.AllowedPaths = []string{"allowed"} }})
	c := f.client
	// The client offers / and the outside dir: only the scope remains.
	c.initLegacy(true, "/", filepath.Join(f.base, "outside"))
	if got := allowedDirs(c); len(got) != 1 || got[0] != filepath.Join(f.base, "allowed") {
		t.Fatalf("allowed directories = %v, want the scope only", got)
	}
	if r := c.read(filepath.Join(f.base, "outside", "probe.txt")); !r.IsError {
		t.Fatal("client roots widened the scope")
	}
}

// TestSymlinkSwapDuringApproval swaps a checked symlink to point outside
// while the call waits for its approval: the paths are checked again
// before the call is forwarded. (The remaining window, between the last
// check and the server's own open, is closed by the Landlock fence, not by
// the proxy: see TestSeedThroughLauncher and the launcher's fence tests.)
func TestSymlinkSwapDuringApproval(t *testing.T) {
	srv, dir, runID := approvalServer(t)
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.Approval = schema.ApprovalRequiredForAll
			s.AllowedPaths = []string{"allowed"}
		},
		config: func(c *Config) { c.Approvals = srv },
	})
	c := f.client
	c.initLegacy(false)
	link := filepath.Join(f.base, "allowed", "link.txt")
	if err := os.Symlink(filepath.Join(f.base, "allowed", "probe.txt"), link); err != nil {
		t.Fatal(err)
	}
	ch := c.start("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": link}})
	op := pendingOp(t, dir, runID)
	os.Remove(link)
	if err := os.Symlink(filepath.Join(f.base, "outside", "probe.txt"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := approval.Send(context.Background(), dir, runID, approval.Request{Action: approval.ActionApprove, OpID: op.OpID}); err != nil {
		t.Fatal(err)
	}
	r := decodeTool(t, c.wait(ch))
	if denialCode(r) != string(schema.ErrPathOutsideScope) || strings.Contains(r.text(), "MARKER-OUTSIDE") {
		t.Fatalf("swapped symlink after approval = %+v", r)
	}
	d := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.OpID == op.OpID })
	if d.Approval != "approved" || d.Decision != "deny" || len(d.PathHashes) == 0 {
		t.Fatalf("record = %+v", d)
	}
}

// TestExpiryTimer lets the scope run out in real time: the run stops by
// itself, and a call sent afterwards still gets the model-visible denial.
func TestExpiryTimer(t *testing.T) {
	// The scope must outlive the server's start, the handshake and one
	// read, and then run out. How long those take depends on the load, so
	// a run without expiry measures them first, and the window is four
	// times that, 8 s at least.
	began := time.Now()
	probe := newFixture(t, fixtureOpts{})
	probe.client.initLegacy(false)
	mustRead(t, probe.client, filepath.Join(probe.base, "allowed", "probe.txt"), "MARKER-ALLOWED")
	window := max(8*time.Second, 4*time.Since(began))
	f := newFixture(t, fixtureOpts{keepClientOpen: true, scope: func(s *schema.Scope) {
		issued := time.Now().Add(-60*time.Minute + window)
		s.IssuedAt = &issued
	}})
	c := f.client
	c.initLegacy(false)
	in := filepath.Join(f.base, "allowed", "probe.txt")
	mustRead(t, c, in, "MARKER-ALLOWED")
	select {
	case err := <-f.errc:
		if !errors.Is(err, ErrScopeExpired) {
			t.Fatalf("Mediate = %v, want ErrScopeExpired", err)
		}
		f.errc <- err
	case <-time.After(window + 30*time.Second):
		t.Fatal("the run did not stop at the scope's expiry")
	}
	for _, method := range []string{"tools/call", "tools/list", "resources/read"} {
		m := c.call(method, map[string]any{"name": "read_text_file", "uri": "file://" + in, "arguments": map[string]any{"path": in}})
		if rpcErrorCode(m) != string(schema.ErrScopeExpired) || !strings.Contains(m.Error.Message, "SCOPE_EXPIRED") {
			t.Fatalf("%s after expiry = %+v %s", method, m.Error, m.Result)
		}
	}
	select {
	case <-f.up.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server was not stopped at expiry")
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool { return d.ErrorCode == string(schema.ErrScopeExpired) })
}

func TestCancelWhileAwaitingApproval(t *testing.T) {
	srv, dir, runID := approvalServer(t)
	f := newFixture(t, fixtureOpts{
		scope:  func(s *schema.Scope) { s.Approval = schema.ApprovalRequiredForWrite },
		config: func(c *Config) { c.Approvals = srv },
	})
	c := f.client
	c.initLegacy(false)
	target := filepath.Join(f.base, "allowed", "cancelled.txt")
	ch := c.expect("77")
	c.sendRaw(`{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"` + target + `","content":"x"}}}`)
	op := pendingOp(t, dir, runID)
	c.notify("notifications/cancelled", map[string]any{"requestId": 77, "reason": "user"})
	if r := decodeTool(t, c.wait(ch)); denialCode(r) != string(schema.ErrApprovalDenied) {
		t.Fatalf("cancelled call = %+v", r)
	}
	if _, err := approval.Send(context.Background(), dir, runID, approval.Request{Action: approval.ActionApprove, OpID: op.OpID}); err == nil {
		t.Fatal("a cancelled call could still be approved")
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("the cancelled write happened")
	}
}

// TestRevokeAnswersCallsInFlight revokes the scope while a call waits for
// its approval: the call is answered with a JSON-RPC error naming
// SCOPE_REVOKED (not a generic denial), and so is every later request.
func TestRevokeAnswersCallsInFlight(t *testing.T) {
	srv, dir, runID := approvalServer(t)
	f := newFixture(t, fixtureOpts{
		keepClientOpen: true,
		scope:          func(s *schema.Scope) { s.Approval = schema.ApprovalRequiredForWrite },
		config:         func(c *Config) { c.Approvals = srv },
	})
	c := f.client
	c.initLegacy(false)
	target := filepath.Join(f.base, "allowed", "never.txt")
	ch := c.start("tools/call", map[string]any{"name": "write_file", "arguments": map[string]any{"path": target, "content": "x"}})
	pendingOp(t, dir, runID)
	f.proxy.Revoke()
	m := c.wait(ch)
	if rpcErrorCode(m) != string(schema.ErrScopeRevoked) || !strings.Contains(m.Error.Message, "SCOPE_REVOKED") {
		t.Fatalf("call in flight at revocation = %+v %s", m.Error, m.Result)
	}
	select {
	case err := <-f.errc:
		if !errors.Is(err, ErrScopeRevoked) {
			t.Fatalf("Mediate = %v, want ErrScopeRevoked", err)
		}
		f.errc <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Mediate did not stop after revocation")
	}
	if m := c.call("tools/list", map[string]any{}); rpcErrorCode(m) != string(schema.ErrScopeRevoked) {
		t.Fatalf("tools/list after revocation = %+v %s", m.Error, m.Result)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("the write happened")
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.ErrorCode == string(schema.ErrScopeRevoked) && d.Tool == "write_file"
	})
}
