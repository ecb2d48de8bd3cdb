package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/mcptest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestRunRestartMasksNewSecrets: `mcpwarden run` (real binary, proxy and
// fence) in front of the official filesystem server, with a client that
// has roots. After launch the host creates a secret in the scope (a .env)
// with a hard link to it under a harmless name: the proxy cannot tell the
// link holds the secret's bytes, only the fence's walk can. A roots change
// restarts the server (narrowing, then widening again): each new root must
// mask what matches then. Fails on the code before (a restart reused the
// launch's walk: the narrowed server read the new .env through its link).
func TestRunRestartMasksNewSecrets(t *testing.T) {
	testenv.RequireRoot(t)
	node := testenv.RequireCommand(t, "node")
	fsServer, _ := filepath.Abs("../../deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	testenv.RequireFile(t, fsServer, "run scripts/test-env.sh install-npm")
	bin := mcpwardenBin(t)
	tr := testenv.NewTree(t, testenv.ReadScope("restart-rewalk"))
	sub := filepath.Join(tr.WS, "sub")
	testenv.WriteFiles(t, map[string]string{filepath.Join(sub, "plain.txt"): "PLAIN"})
	cmd := exec.Command(bin, "run", "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", node, fsServer, tr.WS)
	cmd.Dir = tr.Base
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	c, err := mcptest.Start(cmd, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(20 * time.Second)
	if err := c.SetRoots([]string{tr.WS}); err != nil {
		t.Fatal(err)
	}
	// The server answered: the launch's walk is done.
	if _, err := c.Initialize(); err != nil {
		t.Fatalf("initialize: %v\n%s", err, stderr.String())
	}
	read := func(p string) (string, error) {
		t.Helper()
		return c.CallTool("read_text_file", map[string]any{"path": p})
	}
	if text, err := read(filepath.Join(sub, "plain.txt")); err != nil || !strings.Contains(text, "PLAIN") {
		t.Fatalf("plain file before: %q %v\n%s", text, err, stderr.String())
	}
	// The host (the user) creates secrets since launch, each with a hard
	// link under a harmless name.
	newSecret := func(dir, name, link, content string) string {
		t.Helper()
		testenv.WriteFiles(t, map[string]string{filepath.Join(dir, name): content})
		if err := os.Link(filepath.Join(dir, name), filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, link)
	}
	link1 := newSecret(sub, ".env", "notes.txt", "NEW-SECRET-ONE")
	// The premise: with the launch's root the link reads the secret (the
	// walk ran before it existed); the proxy lets the harmless name through.
	if text, err := read(link1); err != nil || !strings.Contains(text, "NEW-SECRET-ONE") {
		t.Fatalf("premise: the link to a secret made after launch, before a restart: %q %v", text, err)
	}
	// Narrow to sub: the server restarts.
	if err := c.SetRoots([]string{sub}); err != nil {
		t.Fatal(err)
	}
	// Outside the new roots: refused by the proxy once the roots apply.
	if text, err := read(tr.Inside); err == nil {
		t.Fatalf("outside the narrowed roots: %q, want a refusal", text)
	}
	if text, err := read(filepath.Join(sub, "plain.txt")); err != nil || !strings.Contains(text, "PLAIN") {
		t.Fatalf("plain file after the narrowing restart: %q %v\n%s", text, err, stderr.String())
	}
	if text, err := read(link1); !errors.Is(err, mcptest.ErrTool) || strings.Contains(text, "NEW-SECRET-ONE") {
		t.Errorf("narrowing restart: the link to a secret created since launch: %q %v: ESCAPE, want it masked", text, err)
	}
	// Widen back to the whole scope, after another secret appeared.
	link2 := newSecret(tr.WS, "deploy.pem", "readme.md", "NEW-SECRET-TWO")
	if err := c.SetRoots([]string{tr.WS}); err != nil {
		t.Fatal(err)
	}
	if text, err := read(tr.Inside); err != nil || !strings.Contains(text, "inside") {
		t.Fatalf("after widening: %q %v\n%s", text, err, stderr.String())
	}
	for _, l := range []string{link1, link2} {
		if text, err := read(l); !errors.Is(err, mcptest.ErrTool) || strings.Contains(text, "NEW-SECRET") {
			t.Errorf("widening restart: %s: %q %v: ESCAPE, want it masked", filepath.Base(l), text, err)
		}
	}
	if strings.Contains(stderr.String(), "NEW-SECRET") || strings.Contains(stderr.String(), ".env") {
		t.Errorf("a secret or its name on stderr: %s", stderr.String())
	}
}
