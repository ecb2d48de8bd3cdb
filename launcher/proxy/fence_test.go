package proxy

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestSeedThroughLauncher runs the revocation protocol through the real
// launcher: the server runs under Landlock, and every change of the
// effective scope restarts it under a narrowed ruleset.
func TestSeedThroughLauncher(t *testing.T) {
	testenv.RequireRoot(t)
	fs := fsServer(t)
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed")
	}
	base := makeBase(t)
	sc := &schema.Scope{
		ScopeID: "fence-seed", AllowedPaths: []string{"."}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"read_text_file", "list_allowed_directories"},
		Approval:      schema.ApprovalNone, ExpiresAfterMinutes: 30,
	}
	cs, err := schema.Canonicalize(sc, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	sink := &memSink{}
	runID := "fence-" + schema.NewID()[:8]
	cfg := Config{Scope: cs, RunID: runID, Hasher: h, Sink: sink, ServerOrigin: "node"}
	if testing.Verbose() {
		cfg.Logger = testLogger(t)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cr, cw := io.Pipe()
	pr, pw := io.Pipe()
	l, err := launcher.New(launcher.Config{
		Scope: cs, Command: []string{node, fs}, RunID: runID,
		AuditLog: sink, Mediator: p, Stdin: cr, Stdout: pw, Stderr: io.Discard,
		HelperPath: testenv.FenceHelper(t), Signals: make(chan os.Signal),
	})
	if err != nil {
		var ke interface{ Error() string } = err
		testenv.Missing(t, "the launcher refused to start here: "+ke.Error())
	}
	errc := make(chan error, 1)
	go func() { errc <- l.Run(context.Background()); pw.Close() }()
	c := newTestClient(t, cw, pr)
	allowed := filepath.Join(base, "allowed")
	in := filepath.Join(allowed, "probe.txt")
	out := filepath.Join(base, "outside", "probe.txt")

	c.initLegacy(true, allowed)
	if got := allowedDirs(c); len(got) != 1 || got[0] != allowed {
		t.Fatalf("allowed directories = %v", got)
	}
	mustRead(t, c, in, "MARKER-ALLOWED")
	mustDeny(t, c, out, "MARKER-OUTSIDE")
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer())
	if got := allowedDirs(c); len(got) != 0 {
		t.Fatalf("after revoking every root the server lists %v", got)
	}
	mustDeny(t, c, in, "MARKER-ALLOWED")
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(allowed))
	mustRead(t, c, in, "MARKER-ALLOWED")

	cw.Close()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("launcher: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end after the client left")
	}
	var launches, decisions int
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, e := range sink.events {
		switch e.Kind {
		case schema.KindLaunch:
			launches++
		case schema.KindDecision:
			decisions++
			if e.RunID != runID || e.ScopeHash != cs.Hash {
				t.Fatalf("decision envelope = %+v", e)
			}
		}
	}
	if launches == 0 || decisions < 6 {
		t.Fatalf("records: %d launch, %d decision", launches, decisions)
	}
}

// swapServer is a server (node, no file of its own: the fence need not
// grant a script) whose tool "swap_read" does what a racing process
// would do between the proxy's check and the server's use: it replaces
// the symlink it was given, which the proxy checked pointing inside the
// scope, with one to argv[1] ("one") or argv[2] ("two"), then
// reads it.
var swapServer = nodeToolServer("swap", `
    const a = m.params.arguments;
    const target = a.which === 'two' ? process.argv[2] : process.argv[1];
    let text;
    try { fs.unlinkSync(a.path); fs.symlinkSync(target, a.path); text = fs.readFileSync(a.path, 'utf8'); }
    catch (e) { text = 'ERR ' + e.code; }
    return send({content: [{type: 'text', text}]});`)

// nodeToolServer is a legacy server in node (no file of its own: the
// fence need not grant a script) named name, whose tools/call runs body
// (JavaScript: the request is m, fs is loaded, send(result) answers it);
// it answers initialize, and every other request with {}.
func nodeToolServer(name, body string) string {
	return `
const fs = require('fs');
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', l => {
  let m; try { m = JSON.parse(l); } catch { return; }
  if (m.id === undefined) return;
  const send = r => process.stdout.write(JSON.stringify({jsonrpc: '2.0', id: m.id, result: r}) + '\n');
  if (m.method === 'initialize') return send({protocolVersion: '2025-11-25', capabilities: {tools: {}}, serverInfo: {name: '` + name + `', version: '1'}});
  if (m.method === 'tools/call') {` + body + `
  }
  send({});
});
`
}

// fencedNodeBase: the test runs as root with node (missing: a failure
// under CI), in a base of its own (makeBase).
func fencedNodeBase(t *testing.T) (node, base string) {
	t.Helper()
	testenv.RequireRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed")
	}
	return node, makeBase(t)
}

// startFencedNode runs command (a node server) under the real launcher
// and its fence, behind a proxy of a write scope of base's "allowed"
// (scope scopeID, run id runPrefix-…) that allows tool alone. It returns
// the proxy's client (not initialised) and stop, which closes the
// client's side and waits for the run to end.
func startFencedNode(t *testing.T, base, scopeID, runPrefix, tool string, command []string) (c *testClient, stop func()) {
	t.Helper()
	sc := &schema.Scope{
		ScopeID: scopeID, AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{tool}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 30,
	}
	cs, err := schema.Canonicalize(sc, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	sink := &memSink{}
	runID := runPrefix + "-" + schema.NewID()[:8]
	p, err := New(Config{Scope: cs, RunID: runID, Hasher: h, Sink: sink, ServerOrigin: "node"})
	if err != nil {
		t.Fatal(err)
	}
	cr, cw := io.Pipe()
	pr, pw := io.Pipe()
	l, err := launcher.New(launcher.Config{
		Scope: cs, Command: command, RunID: runID,
		AuditLog: sink, Mediator: p, Stdin: cr, Stdout: pw, Stderr: io.Discard,
		HelperPath: testenv.FenceHelper(t), Signals: make(chan os.Signal),
	})
	if err != nil {
		testenv.Missing(t, "the launcher refused to start here: "+err.Error())
	}
	errc := make(chan error, 1)
	go func() { errc <- l.Run(context.Background()); pw.Close() }()
	return newTestClient(t, cw, pr), func() {
		cw.Close()
		if err := <-errc; err != nil {
			t.Logf("run: %v", err)
		}
	}
}

// TestSymlinkSwappedAfterTheCheck: a symlink inside the scope, checked by
// the proxy while it points inside, is swapped (by the server itself: the
// race won for certain) to a file outside the scope, and to a secret
// inside it that existed at launch, before the server opens it. The
// proxy cannot see this (docs/proxy.md, Known limits: TOCTOU); the fence
// is what holds: the open fails in the kernel (Landlock outside the
// scope; the secret's empty mode-000 mount inside it). The premise: the
// same server run directly reads both. A guard (held before).
func TestSymlinkSwappedAfterTheCheck(t *testing.T) {
	node, base := fencedNodeBase(t)
	allowed, out := filepath.Join(base, "allowed"), filepath.Join(base, "outside", "probe.txt")
	secret, link := filepath.Join(allowed, ".env"), filepath.Join(allowed, "link")
	if err := os.WriteFile(secret, []byte("TOKEN=SWAPPED-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	relink := func() {
		t.Helper()
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(allowed, "probe.txt"), link); err != nil {
			t.Fatal(err)
		}
	}
	// The premise: unfenced, the server reads what it swapped in.
	relink()
	direct := exec.Command(node, "-e", swapServer, out, secret)
	q := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	direct.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"swap_read","arguments":` + q(map[string]string{"path": link, "which": "one"}) + "}}\n")
	if b, err := direct.Output(); err != nil || !strings.Contains(string(b), "MARKER-OUTSIDE") {
		t.Fatalf("direct: %s %v; the server should read the swapped-in file", b, err)
	}

	relink()
	c, stop := startFencedNode(t, base, "fence-swap", "swap", "swap_read", []string{node, "-e", swapServer, out, secret})
	c.initLegacy(false)
	for _, which := range []string{"one", "two"} { // outside the scope, the secret
		relink()
		r := c.tool("swap_read", map[string]any{"path": link, "which": which})
		if r.IsError || strings.Contains(r.text(), "MARKER-OUTSIDE") || strings.Contains(r.text(), "SWAPPED-SECRET") || !strings.HasPrefix(r.text(), "ERR ") {
			t.Errorf("%s: the fenced server read the swapped-in file: %+v", which, r)
		}
	}
	stop()
}
