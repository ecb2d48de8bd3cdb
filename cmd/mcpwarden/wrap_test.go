package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/cli"
)

// TestWrapCommand: the command's exits and reports, on files that need no
// server to start (the servers themselves are adopt/wrap's tests).
func TestWrapCommand(t *testing.T) {
	env := cleanEnv(t)
	dir := t.TempDir()
	remote := filepath.Join(dir, ".mcp.json")
	os.WriteFile(remote, []byte(`{"mcpServers": {"r": {"type": "http", "url": "https://u:p@h/mcp"}}}`), 0o600)
	out, errOut, code := runBin(t, env, "wrap", remote, "--scope-dir", filepath.Join(dir, "scopes"), "--state-dir", filepath.Join(dir, "state"))
	if code != 0 || !strings.Contains(out, "left alone: a remote server (https://h/mcp)") || !strings.Contains(out, "unchanged") {
		t.Errorf("remote-only file: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runBin(t, env, "wrap", remote, "--json", "--dry-run", "--state-dir", filepath.Join(dir, "state"))
	var rep struct {
		Format  string `json:"format"`
		Servers []struct {
			Name, Status string
		} `json:"servers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Format != "claude-code" || len(rep.Servers) != 1 || rep.Servers[0].Status != "remote" {
		t.Errorf("--json: exit %d %s", code, out)
	}
	dup := filepath.Join(dir, "claude_desktop_config.json")
	os.WriteFile(dup, []byte(`{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}`), 0o600)
	if _, errOut, code := runBin(t, env, "wrap", dup, "--state-dir", filepath.Join(dir, "state")); code != cli.ExitBadScope || !strings.Contains(errOut, `server "a" is defined twice`) {
		t.Errorf("duplicate server: exit %d %s", code, errOut)
	}
	for _, args := range [][]string{{"wrap"}, {"wrap", "a", "b"}, {"wrap", remote, "--format", "nope"}, {"wrap", remote, "--expires-after-minutes", "0"}, {"unwrap"}} {
		if _, _, code := runBin(t, env, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
	unknown := filepath.Join(dir, "servers.json")
	os.WriteFile(unknown, []byte(`{"mcpServers": {}}`), 0o600)
	if _, errOut, code := runBin(t, env, "wrap", unknown); code != cli.ExitBadScope || !strings.Contains(errOut, "--format") {
		t.Errorf("undetectable format: exit %d %s", code, errOut)
	}
}
