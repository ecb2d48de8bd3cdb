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

// TestRunDotDotAfterASymlink: `mcpwarden run` (real binary, real fence)
// in front of the repository's Python standard-library server, whose
// read_text_file opens the name it is given as it is. "ws/refs/../config"
// with ws/refs a symlink to ws/.git/refs is ws/.git/config to the kernel
// (the lexical form, "ws/config", is harmless) — inside the scope, so the
// fence allows it: only the proxy stands between the model and the
// secret. Fails on the code before (the wrapped read returned the
// secret).
func TestRunDotDotAfterASymlink(t *testing.T) {
	python := testenv.RequireCommand(t, "/usr/bin/python3")
	bin := mcpwardenBin(t)
	tr := testenv.NewTree(t, testenv.ReadScope("dotdot-after-symlink"))
	testenv.WriteFiles(t, map[string]string{filepath.Join(tr.WS, ".git", "config"): "TOKEN-IN-GIT-CONFIG", filepath.Join(tr.WS, ".git", "refs", "heads", "main"): "0"})
	if err := os.Symlink(".git/refs", filepath.Join(tr.WS, "refs")); err != nil {
		t.Fatal(err)
	}
	server := mcptest.InstallVenvServer(t, python, filepath.Join(tr.Root, "venv"))
	spelled := tr.WS + "/refs/../config"
	call := func(argv ...string) (string, string, error) {
		t.Helper()
		return callToolOnce(t, tr.Base, argv, "read_text_file", map[string]any{"path": spelled})
	}
	// The premise: the server itself reads the secret through the name.
	if text, _, err := call(server); err != nil || text != "TOKEN-IN-GIT-CONFIG" {
		t.Fatalf("direct: %q %v; the server should read .git/config through refs/..", text, err)
	}
	text, stderr, err := call(bin, "run", "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", server)
	if !errors.Is(err, mcptest.ErrTool) || strings.Contains(text, "TOKEN-IN-GIT-CONFIG") || !strings.Contains(text, "SECRET_PATH") {
		t.Fatalf("wrapped: %q %v, want a SECRET_PATH denial\n%s", text, err, stderr)
	}
}

// TestRunSearchPatternReachingSecret: `mcpwarden run` (real binary, real
// fence) in front of the official filesystem server, whose search_files
// expands its pattern itself. "**/*.pem" lists keys/server.pem direct;
// wrapped it is refused with SECRET_PATH, and a pattern that matches no
// secret still finds its files. Fails on the code before (the wrapped
// search listed the key).
func TestRunSearchPatternReachingSecret(t *testing.T) {
	node := testenv.RequireCommand(t, "node")
	fsServer, _ := filepath.Abs("../../deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	testenv.RequireFile(t, fsServer, "run scripts/test-env.sh install-npm")
	bin := mcpwardenBin(t)
	tr := testenv.NewTree(t, strings.Replace(testenv.ReadScope("search-pattern-secret"), `["read_text_file"]`, `["search_files"]`, 1))
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(tr.WS, "keys", "server.pem"): "KEY",
		filepath.Join(tr.WS, "docs", "a.md"):       "doc",
	})
	search := func(pattern string, argv ...string) (string, string, error) {
		t.Helper()
		return callToolOnce(t, tr.Base, argv, "search_files", map[string]any{"path": tr.WS, "pattern": pattern})
	}
	// The premise: the server lists the key.
	if text, _, err := search("**/*.pem", node, fsServer, tr.WS); err != nil || !strings.Contains(text, "server.pem") {
		t.Fatalf("direct: %q %v; the server should list keys/server.pem", text, err)
	}
	run := []string{bin, "run", "--scope", tr.Scope, "--base", tr.Base, "--state-dir", tr.State, "--", node, fsServer, tr.WS}
	text, stderr, err := search("**/*.pem", run...)
	if !errors.Is(err, mcptest.ErrTool) || strings.Contains(text, "server.pem") || !strings.Contains(text, "SECRET_PATH") {
		t.Fatalf("wrapped: %q %v, want a SECRET_PATH denial\n%s", text, err, stderr)
	}
	if text, stderr, err := search("**/*.md", run...); err != nil || !strings.Contains(text, "a.md") {
		t.Fatalf("wrapped **/*.md: %q %v\n%s", text, err, stderr)
	}
}

// callToolOnce starts argv in dir as an MCP server, initializes it, calls
// tool with args once and returns the text, the server's stderr and the
// call's error.
func callToolOnce(t *testing.T, dir string, argv []string, tool string, args map[string]any) (string, string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	c, err := mcptest.Start(cmd, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(20 * time.Second)
	if _, err := c.Initialize(); err != nil {
		t.Fatalf("initialize: %v\n%s", err, stderr.String())
	}
	text, err := c.CallTool(tool, args)
	return text, stderr.String(), err
}
