package probe

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func node(t *testing.T) string { return testenv.RequireCommand(t, "node") }

func TestHostileServer(t *testing.T) {
	n := node(t)
	res, err := Run(context.Background(), Config{
		Argv:    []string{n, "testdata/hostile.js", "noise"},
		Roots:   []string{"/srv/ws one"},
		Timeout: 2 * time.Minute,
		Script: []Request{{Method: "tools/call", Params: []byte(`{"name":"echo","arguments":{}}`)},
			{Method: "tools/call", Params: []byte(`{"name":"read_text_file","arguments":{}}`)},
			{Method: "nope/nope"},
			{Method: "notifications/cancelled", Params: []byte(`{"requestId":1}`), Notification: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ServerName != "hostile" || res.ServerVersion != "6.6.6" || len(res.Tools) != 3 {
		t.Fatalf("result %+v", res)
	}
	if res.Tools[2].Name != "echo" || !strings.Contains(res.Tools[2].Description, "file:///srv/ws%20one") {
		t.Errorf("second page %+v: the server's roots/list was not answered with the roots", res.Tools[2])
	}
	if p := res.Tools[0].Properties(); len(p) != 1 || p[0].Name != "path" || p[0].Type != "string" {
		t.Errorf("properties %+v", p)
	}
	if len(res.Prompts) != 1 || res.Prompts[0] != "greet" {
		t.Errorf("prompts %v", res.Prompts)
	}
	want := []bool{true, false, false, true}
	for i, s := range res.Script {
		if s.OK != want[i] {
			t.Errorf("script %d %s: ok %v (%s), want %v", i, s.Method, s.OK, s.Error, want[i])
		}
	}
	if res.ExitCode != 0 {
		t.Errorf("exit %d", res.ExitCode)
	}
}

func TestFailures(t *testing.T) {
	n := node(t)
	for _, c := range []struct {
		mode, step, msg string
	}{
		{"exit", "initialize", "EACCES: permission denied, open '/etc/secret'"},
		{"silent", "initialize", "no answer to initialize"},
		{"huge", "tools/list", "longer than"},
		{"loop", "tools/list", "did not end"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			_, err := Run(context.Background(), Config{Argv: []string{n, "testdata/hostile.js", c.mode}, Timeout: 20 * time.Second})
			var pe *Error
			if !errors.As(err, &pe) || pe.Step != c.step || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want a %s error naming %q", err, c.step, c.msg)
			}
			if c.mode == "exit" && pe.ExitCode != 70 {
				t.Errorf("exit code %d", pe.ExitCode)
			}
		})
	}
	if _, err := Run(context.Background(), Config{Argv: []string{"/nonexistent/server"}}); err == nil {
		t.Error("a missing program probed")
	}
}

// TestRealServer probes the official filesystem server directly.
func TestRealServer(t *testing.T) {
	n := node(t)
	fs, _ := filepath.Abs("../../deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	testenv.RequireFile(t, fs, "run scripts/test-env.sh install-npm")
	dir := t.TempDir()
	res, err := Run(context.Background(), Config{Argv: []string{n, fs, dir}, Timeout: 3 * time.Minute,
		Script: []Request{{Method: "tools/call", Params: []byte(`{"name":"list_allowed_directories","arguments":{}}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range res.Tools {
		names[tl.Name] = true
	}
	if !names["read_text_file"] || !names["write_file"] || res.ServerName == "" || !res.Script[0].OK {
		t.Fatalf("result %+v", res)
	}
}

func TestParseScript(t *testing.T) {
	reqs, err := ParseScript([]byte("# a session\n{\"method\":\"tools/call\",\"params\":{\"name\":\"x\"}}\n\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n"))
	if err != nil || len(reqs) != 3 || reqs[0].Method != "tools/call" || !reqs[1].Notification || reqs[2].Notification {
		t.Fatalf("%+v %v", reqs, err)
	}
	for _, bad := range []string{`{"params":{}}`, `{"method":"x","extra":1}`, `{"method":"x"} {}`, `{"method":"x","params":3}`, `not json`} {
		if _, err := ParseScript([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}

}

// FuzzUntrusted: nothing a server or a script file holds panics the probe's
// readers.
func FuzzUntrusted(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"path":{"type":"string","description":"a path"},"n":{"type":["integer","null"]}}}`))
	f.Add([]byte(`{"method":"tools/call","params":{"name":"x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = Tool{Name: "t", InputSchema: data}.Properties()
		_, _ = ParseScript(data)
	})
}
