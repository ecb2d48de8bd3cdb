package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/runcmd"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// configEnv is cleanEnv with a configuration file holding content (0600).
func configEnv(t *testing.T, content string) ([]string, string) {
	env := cleanEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, e := range env {
		if strings.HasPrefix(e, "MCPWARDEN_CONFIG=") {
			env[i] = "MCPWARDEN_CONFIG=" + p
		}
	}
	return env, p
}

// TestConfigShow: the file, the environment and the defaults each show up
// with their source; a DSN's password never does.
func TestConfigShow(t *testing.T) {
	env, file := configEnv(t, `{"clickhouse_dsn":"clickhouse://u:hunter2@127.0.0.1:1/db","path_key":"/keys/k","daemon_socket":"off"}`)
	env = append(env, "MCPWARDEN_PATH_KEY=/env/key", "MCPWARDEN_NATS_URL=nats://alice:pw0rd@127.0.0.1:4333")
	out, errOut, code := runBin(t, env, "config", "show", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "pw0rd") {
		t.Fatalf("a password is shown:\n%s", out)
	}
	var rep configReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.File != file || !rep.Found || rep.Daemon.Use != "off" {
		t.Errorf("file %q found %v daemon %q", rep.File, rep.Found, rep.Daemon.Use)
	}
	want := map[string][2]string{
		"clickhouse_dsn": {"clickhouse://u:REDACTED@127.0.0.1:1/db", "file"},
		"path_key":       {"/env/key", "env"},
		"nats.url":       {"nats://alice:REDACTED@127.0.0.1:4333", "env"},
		"daemon_socket":  {"off", "file"},
		"nats.creds":     {"", "default"},
	}
	for _, s := range rep.Settings {
		if w, ok := want[s.Name]; ok && (s.Value != w[0] || s.Source != w[1]) {
			t.Errorf("%s = %q from %s, want %q from %s", s.Name, s.Value, s.Source, w[0], w[1])
		}
	}
	text, _, _ := runBin(t, env, "config", "show")
	if !strings.Contains(text, "daemon for 'mcpwarden run': off") || strings.Contains(text, "hunter2") {
		t.Errorf("text output:\n%s", text)
	}
}

// TestConfigReachesCommands: query takes its DSN from the file and a flag
// overrides it; a configuration that cannot be used stops every command
// with exit 78 and says why.
func TestConfigReachesCommands(t *testing.T) {
	env, file := configEnv(t, `{"clickhouse_dsn":"clickhouse://127.0.0.1:1/fromfile"}`)
	_, errOut, code := runBin(t, env, "query", "runs")
	if code != cli.ExitInternal || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("query with the file's DSN: exit %d, %s", code, errOut)
	}
	_, errOut, code = runBin(t, env, "query", "runs", "--clickhouse", "clickhouse://127.0.0.1:2/fromflag")
	if code != cli.ExitInternal || !strings.Contains(errOut, "127.0.0.1:2") || strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("query with --clickhouse: exit %d, %s", code, errOut)
	}
	os.Chmod(file, 0o666)
	for _, args := range [][]string{{"query", "runs"}, {"config", "show"}, {"approve", "--list", "x"}, {"run", "--scope", "s.json", "--", "true"}} {
		_, errOut, code := runBin(t, env, args...)
		if code != cli.ExitConfig || !strings.Contains(errOut, "writable by group or others") {
			t.Errorf("%v with a world-writable configuration: exit %d, %s", args, code, errOut)
		}
	}
	os.WriteFile(file, []byte(`{"clickhouse":"x"}`), 0o600)
	os.Chmod(file, 0o600)
	if _, errOut, code := runBin(t, env, "config", "show"); code != cli.ExitConfig || !strings.Contains(errOut, "clickhouse: unknown setting") {
		t.Errorf("unknown setting: exit %d, %s", code, errOut)
	}
}

// TestDiscoverDaemon: a socket at the path is a daemon to use, no socket
// none.
func TestDiscoverDaemon(t *testing.T) {
	dir := t.TempDir()
	if found, err := runcmd.DiscoverDaemon(filepath.Join(dir, "none", "daemon.sock")); found || err != nil {
		t.Errorf("missing socket: found %v, %v", found, err)
	}
	p := filepath.Join(dir, "daemon.sock")
	testenv.WriteFiles(t, map[string]string{p: ""})
	if found, err := runcmd.DiscoverDaemon(p); !found || err != nil {
		t.Errorf("present socket: found %v, %v", found, err)
	}
}
