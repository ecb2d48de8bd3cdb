package proxy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

// nodeEverythingServer returns the pinned
// @modelcontextprotocol/server-everything (next to the filesystem server).
func nodeEverythingServer(t testing.TB) string {
	t.Helper()
	fs := fsServer(t)
	js := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(fs))), "server-everything", "dist", "index.js")
	testenv.RequireFile(t, js, "run scripts/test-env.sh install-npm")
	return js
}

func promptNames(t *testing.T, m *jsonrpc.Message) []string {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("prompts/list: %+v", m.Error)
	}
	var res struct {
		Prompts []struct {
			Name string `json:"name"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range res.Prompts {
		names = append(names, p.Name)
	}
	return names
}

// TestPromptsAndCompletions runs prompts and completions through the proxy
// against the real server-everything: only allowlisted prompts are listed,
// got and completed; a path in any argument is checked; each is recorded.
func TestPromptsAndCompletions(t *testing.T) {
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.AllowedPaths = []string{"allowed"}
			s.ToolAllowlist = []string{"echo"}
			s.PromptAllowlist = []string{"args-prompt", "completable-prompt"}
		},
		upstream: func(t testing.TB) *procUpstream {
			return startUpstream(t, nil, "node", nodeEverythingServer(t), "stdio")
		},
	})
	c := f.client
	c.initLegacy(false)
	out := filepath.Join(f.base, "outside", "probe.txt")

	if names := promptNames(t, c.call("prompts/list", map[string]any{})); !slices.Equal(names, []string{"args-prompt", "completable-prompt"}) {
		t.Fatalf("prompts/list = %v, want the allowlist only", names)
	}
	m := c.call("prompts/get", map[string]any{"name": "args-prompt", "arguments": map[string]string{"city": "Paris"}})
	if m.Error != nil || !strings.Contains(string(m.Result), "Paris") {
		t.Fatalf("allowed prompt = %+v %s", m.Error, m.Result)
	}
	for _, tc := range []struct {
		name   string
		params map[string]any
		code   schema.ErrorCode
	}{
		{"not allowlisted", map[string]any{"name": "simple-prompt"}, schema.ErrPromptNotAllowed},
		{"case variant", map[string]any{"name": "Args-Prompt", "arguments": map[string]string{"city": "x"}}, schema.ErrPromptNotAllowed},
		{"path argument", map[string]any{"name": "args-prompt", "arguments": map[string]string{"city": out}}, schema.ErrPathOutsideScope},
		{"relative path argument", map[string]any{"name": "args-prompt", "arguments": map[string]string{"city": "../outside/probe.txt"}}, schema.ErrPathOutsideScope},
		{"name of an entry outside", map[string]any{"name": "args-prompt", "arguments": map[string]string{"city": "outside"}}, schema.ErrPathOutsideScope},
	} {
		t.Run("prompts/get "+tc.name, func(t *testing.T) {
			m := c.call("prompts/get", tc.params)
			if rpcErrorCode(m) != string(tc.code) {
				t.Fatalf("= %+v %s, want %s", m.Error, m.Result, tc.code)
			}
		})
	}
	complete := func(ref map[string]any, arg map[string]any, ctx map[string]any) *jsonrpc.Message {
		p := map[string]any{"ref": ref, "argument": arg}
		if ctx != nil {
			p["context"] = ctx
		}
		return c.call("completion/complete", p)
	}
	m = complete(map[string]any{"type": "ref/prompt", "name": "completable-prompt"}, map[string]any{"name": "department", "value": "En"}, nil)
	if m.Error != nil || !strings.Contains(string(m.Result), "Engineering") {
		t.Fatalf("allowed completion = %+v %s", m.Error, m.Result)
	}
	for _, tc := range []struct {
		name           string
		ref, arg, ctxt map[string]any
		code           schema.ErrorCode
	}{
		{"prompt not allowlisted", map[string]any{"type": "ref/prompt", "name": "simple-prompt"}, map[string]any{"name": "x", "value": ""}, nil, schema.ErrPromptNotAllowed},
		{"path being completed", map[string]any{"type": "ref/prompt", "name": "completable-prompt"}, map[string]any{"name": "department", "value": "/etc/pass"}, nil, schema.ErrPathOutsideScope},
		{"path in the context", map[string]any{"type": "ref/prompt", "name": "completable-prompt"}, map[string]any{"name": "name", "value": "A"}, map[string]any{"arguments": map[string]string{"department": "../outside"}}, schema.ErrPathOutsideScope},
		{"resource outside the refs", map[string]any{"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"}, map[string]any{"name": "resourceId", "value": "1"}, nil, schema.ErrPathOutsideScope},
		{"unknown ref type", map[string]any{"type": "ref/tool", "name": "echo"}, map[string]any{"name": "x", "value": ""}, nil, schema.ErrMalformedRequest},
	} {
		t.Run("completion "+tc.name, func(t *testing.T) {
			m := complete(tc.ref, tc.arg, tc.ctxt)
			if tc.code == schema.ErrMalformedRequest {
				if m.Error == nil || m.Error.Code != jsonrpc.CodeInvalidParams {
					t.Fatalf("= %+v %s, want -32602", m.Error, m.Result)
				}
				return
			}
			if rpcErrorCode(m) != string(tc.code) {
				t.Fatalf("= %+v %s, want %s", m.Error, m.Result, tc.code)
			}
		})
	}
	// Each decision is recorded, with the prompt's name as the tool.
	for _, code := range []schema.ErrorCode{schema.ErrPromptNotAllowed, schema.ErrPathOutsideScope} {
		f.sink.waitDecision(t, func(d schema.Decision) bool {
			return d.Method == "prompts/get" && d.ErrorCode == string(code) && d.Decision == "deny"
		})
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "prompts/get" && d.Tool == "args-prompt" && d.Decision == "allow"
	})
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "completion/complete" && d.Tool == "completable-prompt" && d.Decision == "allow"
	})
	if strings.Contains(f.sink.raw(), f.base) {
		t.Fatal("records contain a full path")
	}
}

// TestPromptsDefaultToNone: a scope without prompt_allowlist passes no
// prompt at all.
func TestPromptsDefaultToNone(t *testing.T) {
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) { s.ToolAllowlist = []string{"echo"} },
		upstream: func(t testing.TB) *procUpstream {
			return startUpstream(t, nil, "node", nodeEverythingServer(t), "stdio")
		},
	})
	c := f.client
	c.initLegacy(false)
	if names := promptNames(t, c.call("prompts/list", map[string]any{})); len(names) != 0 {
		t.Fatalf("prompts/list = %v, want none", names)
	}
	if m := c.call("prompts/get", map[string]any{"name": "simple-prompt"}); rpcErrorCode(m) != string(schema.ErrPromptNotAllowed) {
		t.Fatalf("prompts/get = %+v %s", m.Error, m.Result)
	}
}

// TestPromptCannotReadASecret: a prompt whose argument names a file (the
// malicious server embeds it) cannot be pointed at a secret inside the
// scope, nor outside it; an ordinary file still works.
func TestPromptCannotReadASecret(t *testing.T) {
	logPath := t.TempDir() + "/evil.log"
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.AllowedPaths = []string{"allowed"}
			s.ToolAllowlist = []string{"alpha"}
			s.PromptAllowlist = []string{"file-prompt"}
		},
		upstream: func(t testing.TB) *procUpstream {
			return startScripted(t, evilEnv+"="+logPath)
		},
	})
	c := f.client
	c.initLegacy(false)
	secret := filepath.Join(f.base, "allowed", ".env")
	if err := os.WriteFile(secret, []byte("TOKEN=SECRET-VALUE-5e1"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{secret, "allowed/.env", filepath.Join(f.base, "outside", "probe.txt"), "file://" + secret} {
		m := c.call("prompts/get", map[string]any{"name": "file-prompt", "arguments": map[string]string{"path": p}})
		if m.Error == nil || strings.Contains(string(m.Result), "SECRET-VALUE") || strings.Contains(string(m.Result), "MARKER-OUTSIDE") {
			t.Fatalf("prompt with path %q = %+v %s", p, m.Error, m.Result)
		}
	}
	m := c.call("prompts/get", map[string]any{"name": "file-prompt", "arguments": map[string]string{"path": filepath.Join(f.base, "allowed", "probe.txt")}})
	if m.Error != nil || !strings.Contains(string(m.Result), "MARKER-ALLOWED") {
		t.Fatalf("prompt with an allowed path = %+v %s", m.Error, m.Result)
	}
	if log, _ := os.ReadFile(logPath); strings.Contains(string(log), ".env") {
		t.Fatalf("a prompts/get naming the secret reached the server:\n%s", log)
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "prompts/get" && d.ErrorCode == string(schema.ErrSecretPath) && len(d.PathHashes) > 0
	})
}

// TestMoveCannotUncoverASecret: with the real filesystem server, moving a
// directory whose subtree holds a secret is refused (else the secret is
// readable under its new name); a clean directory moves.
func TestMoveCannotUncoverASecret(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.AllowedPaths = []string{"allowed"} }})
	c := f.client
	c.initLegacy(false)
	proj := filepath.Join(f.base, "allowed", "proj")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(proj, "src", "main.go"):              "package main",
		filepath.Join(proj, "config", "prod.env"):          "TOKEN=SECRET-VALUE-77",
		filepath.Join(f.base, "allowed", "clean", "a.txt"): "clean",
	})
	r := c.tool("move_file", map[string]any{"source": proj, "destination": filepath.Join(f.base, "allowed", "notes")})
	if denialCode(r) != string(schema.ErrSecretPath) {
		t.Fatalf("move of a directory holding a secret = %+v", r)
	}
	if _, err := os.Stat(filepath.Join(proj, "config", "prod.env")); err != nil {
		t.Fatalf("the directory moved anyway: %v", err)
	}
	if r := c.read(filepath.Join(f.base, "allowed", "notes", "config", "prod.env")); !r.IsError || strings.Contains(r.text(), "SECRET-VALUE") {
		t.Fatalf("the secret is readable under a new name: %+v", r)
	}
	r = c.tool("move_file", map[string]any{"source": filepath.Join(f.base, "allowed", "clean"), "destination": filepath.Join(f.base, "allowed", "clean2")})
	if r.IsError {
		t.Fatalf("move of a clean directory = %+v", r)
	}
	mustRead(t, c, filepath.Join(f.base, "allowed", "clean2", "a.txt"), "clean")
}
