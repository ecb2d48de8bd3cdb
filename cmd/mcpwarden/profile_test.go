package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestProfileLearnCommand: the command writes the proposal and its
// summary, prints the summary, and changes nothing else.
func TestProfileLearnCommand(t *testing.T) {
	node := testenv.RequireCommand(t, "node")
	needy, _ := filepath.Abs("../../adopt/learn/testdata/needy.js")
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	out := filepath.Join(dir, "proposal.json")
	env := append(cleanEnv(t), "MCPWARDEN_STATE_DIR="+filepath.Join(dir, "state"))
	stdout, stderr, code := runBin(t, env, "profile", "learn", "--base", dir, "--daemon-socket", "off", "--out", out, "--", node, needy, ws)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var p struct {
		Runtime []struct{ Flag string } `json:"runtime_additions"`
		Started bool                    `json:"started_under_the_fence"`
	}
	b, err := os.ReadFile(out)
	if err != nil || json.Unmarshal(b, &p) != nil {
		t.Fatalf("proposal: %v\n%s", err, b)
	}
	if !p.Started || len(p.Runtime) != 1 || p.Runtime[0].Flag != "--allow-runtime /etc/passwd" {
		t.Errorf("proposal %+v", p)
	}
	summary, _ := os.ReadFile(out + ".txt")
	if string(summary) != stdout || !strings.Contains(stdout, "--allow-runtime /etc/passwd") {
		t.Errorf("summary file and stdout differ, or lack the grant:\n%s", stdout)
	}
	if _, _, code := runBin(t, env, "profile", "learn", "--base", dir); code != cli.ExitUsage {
		t.Errorf("no command: exit %d", code)
	}
	if _, _, code := runBin(t, env, "profile", "learn", "--path", "/etc", "--base", dir, "--", node); code != cli.ExitUsage {
		t.Errorf("--path outside the base: exit %d", code)
	}
}
