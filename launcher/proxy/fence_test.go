package proxy

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
