package proxy

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

const (
	modernOnlyEnv    = "MCPWARDEN_PROXY_TEST_MODERN_ONLY_SERVER"
	modernOnlyCode   = "MCPWARDEN_PROXY_TEST_MODERN_ONLY_CODE"   // how it refuses initialize
	modernOnlySecret = "MCPWARDEN_PROXY_TEST_MODERN_ONLY_SECRET" // a secret file its ask_secret round embeds
)

// modernOnlyServer speaks only 2026-07-28: initialize is refused (with
// -32601, or -32022 naming the version it supports), every request must
// carry the modern _meta, and server/discover is its handshake. Each frame
// it receives is logged with its pid, so the test can tell processes apart.
func modernOnlyServer(logPath string) {
	serveScript(logPath, fmt.Sprintf("%d ", os.Getpid()), func(line string, send func(string)) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name           string                     `json:"name"`
				Arguments      json.RawMessage            `json:"arguments"`
				Meta           map[string]json.RawMessage `json:"_meta"`
				InputResponses json.RawMessage            `json:"inputResponses"`
				RequestState   json.RawMessage            `json:"requestState"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		if len(m.ID) == 0 || m.Method == "" {
			return
		}
		id := string(m.ID)
		if _, modern := m.Params.Meta[metaVersion]; !modern {
			if m.Method == "initialize" && os.Getenv(modernOnlyCode) == "-32601" {
				send(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32601,"message":"Method not found"}}`)
			} else {
				send(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"]}}}`)
			}
			return
		}
		switch m.Method {
		case "server/discover":
			send(`{"jsonrpc":"2.0","id":` + id + `,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"instructions":"modern only","resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"modern-only","version":"1.0"}}}}`)
		case "tools/list":
			send(`{"jsonrpc":"2.0","id":` + id + `,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}],"resultType":"complete"}}`)
		case "tools/call":
			// needs_input asks for roots and an elicitation (ask_sample: a
			// sampling; ask_secret: an elicitation embedding a secret;
			// ask_forever: roots, every time) in an input round, and answers
			// the retry with what it got.
			round := map[string]string{
				"needs_input":     `{"r":{"method":"roots/list"},"e":{"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}}`,
				"ask_sample":      `{"s":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}}`,
				"ask_all_servers": `{"s":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5,"includeContext":"allServers"}}}`,
				"ask_secret":      `{"e":{"method":"elicitation/create","params":{"message":"see","requestedSchema":{"type":"object","properties":{}},"_meta":{"x":{"type":"resource","resource":{"uri":"file://` + os.Getenv(modernOnlySecret) + `","text":"s"}}}}}}`,
				"ask_forever":     `{"r":{"method":"roots/list"}}`,
			}[m.Params.Name]
			if round != "" && (m.Params.InputResponses == nil || m.Params.Name == "ask_forever") {
				send(`{"jsonrpc":"2.0","id":` + id + `,"result":{"resultType":"input_required","inputRequests":` + round + `,"requestState":"st-` + m.Params.Name + `"}}`)
				return
			}
			text, _ := json.Marshal("MODERN " + string(m.Params.Arguments) + " state=" + string(m.Params.RequestState) + " inputs=" + string(m.Params.InputResponses))
			send(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":` + string(text) + `}],"resultType":"complete"}}`)
		default:
			send(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32601,"message":"Method not found"}}`)
		}
	})
}

// TestLegacyClientModernOnlyServer: a legacy client in front of a server
// that speaks only 2026-07-28. Its initialize is refused; the proxy
// replaces that process by a fresh one (eras never mix on one process),
// probes it as modern and translates the legacy client's requests. The
// checks hold as ever.
func TestLegacyClientModernOnlyServer(t *testing.T) {
	for _, code := range []string{"-32022", "-32601"} {
		t.Run(code, func(t *testing.T) {
			logPath := t.TempDir() + "/modern.log"
			f := newFixture(t, fixtureOpts{
				scope: func(s *schema.Scope) {
					s.AllowedPaths = []string{"allowed"}
					s.ToolAllowlist = []string{"echo"}
					s.ToolClasses = map[string]string{"echo": "read"}
				},
				upstream: func(t testing.TB) *procUpstream {
					return startScripted(t, modernOnlyEnv+"="+logPath, modernOnlyCode+"="+code)
				},
			})
			c := f.client
			res := resultMap(t, c.initLegacy(false))
			var info struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(res["serverInfo"], &info)
			if string(res["protocolVersion"]) != `"2025-06-18"` || info.Name != "modern-only" {
				t.Fatalf("initialize = %s", mustJSON(res))
			}
			if names := toolNames(t, c.call("tools/list", map[string]any{})); strings.Join(names, ",") != "echo" {
				t.Fatalf("tools/list = %v", names)
			}
			in := f.base + "/allowed/probe.txt"
			if r := c.tool("echo", map[string]any{"path": in}); r.IsError || !strings.HasPrefix(r.text(), "MODERN ") {
				t.Fatalf("echo = %+v", r)
			}
			if r := c.tool("echo", map[string]any{"path": f.base + "/outside/probe.txt"}); denialCode(r) != string(schema.ErrPathOutsideScope) {
				t.Fatalf("echo outside = %+v", r)
			}
			if m := c.call("ping", nil); m.Error != nil {
				t.Fatalf("ping = %+v", m.Error)
			}
			// Two processes: one saw initialize only, the other the modern
			// handshake and the calls, never initialize.
			log, _ := os.ReadFile(logPath)
			seen := map[string][]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
				pid, frame, _ := strings.Cut(line, " ")
				var m struct {
					Method string `json:"method"`
				}
				_ = json.Unmarshal([]byte(frame), &m)
				seen[pid] = append(seen[pid], m.Method)
			}
			if len(seen) != 2 {
				t.Fatalf("server processes: %v, want 2", seen)
			}
			for pid, methods := range seen {
				joined := "," + strings.Join(methods, ",") + ","
				if strings.Contains(joined, ",initialize,") && (strings.Contains(joined, "server/discover") || strings.Contains(joined, "tools/")) {
					t.Fatalf("process %s saw both eras: %v", pid, methods)
				}
			}
			if f.up.restartCount() != 1 {
				t.Fatalf("restarts = %d, want 1", f.up.restartCount())
			}
		})
	}
}

// TestLegacyClientModernInputRounds: a modern-only server answers a legacy
// client's call with an input_required round. The legacy client knows no
// such result: the proxy answers roots/list with the effective scope,
// turns elicitation and sampling into the legacy era's server requests
// (only those the client declared, and none embedding a secret), sends the
// call again with the answers and the server's requestState, and the
// client gets the final answer. One decision record per call; rounds are
// bounded.
func TestLegacyClientModernInputRounds(t *testing.T) {
	logPath := t.TempDir() + "/modern.log"
	var secret string
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.AllowedPaths = []string{"allowed"}
			s.ToolAllowlist = []string{"needs_input", "ask_sample", "ask_secret", "ask_forever"}
			s.ToolClasses = map[string]string{"needs_input": "read", "ask_sample": "read", "ask_secret": "read", "ask_forever": "read"}
		},
		base: func(base string) {
			secret = base + "/allowed/.env"
			if err := os.WriteFile(secret, []byte("TOKEN=x"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		upstream: func(t testing.TB) *procUpstream {
			return startScripted(t, modernOnlyEnv+"="+logPath, modernOnlyCode+"=-32022", modernOnlySecret+"="+secret)
		},
	})
	c := f.client
	res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"elicitation": map[string]any{}},
		"clientInfo": map[string]string{"name": "test", "version": "1"}})
	if res.Error != nil {
		t.Fatalf("initialize: %v", res.Error)
	}
	c.notify("notifications/initialized", nil)

	answer := c.start("tools/call", map[string]any{"name": "needs_input", "arguments": map[string]any{"n": 1}})
	el := c.nextRequest("elicitation/create")
	c.reply(el, map[string]any{"action": "accept", "content": map[string]any{"ok": true}})
	r := decodeTool(t, c.wait(answer))
	allowed := "file://" + f.base + "/allowed"
	if r.IsError || !strings.Contains(r.text(), `state="st-needs_input"`) || !strings.Contains(r.text(), `"action":"accept"`) || !strings.Contains(r.text(), allowed) {
		t.Fatalf("needs_input = %+v, want the retry's answer with the server's state, the elicitation and the effective scope as roots", r)
	}
	d := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Tool == "needs_input" })
	if d.Decision != schema.OutcomeAllow {
		t.Fatalf("needs_input record = %+v", d)
	}

	// An elicitation embedding a secret: the answer is refused as any
	// answer naming a secret is (before any round is played).
	if r := c.tool("ask_secret", map[string]any{}); denialCode(r) != string(schema.ErrSecretPath) {
		t.Fatalf("ask_secret = %+v", r)
	}
	// Sampling was not declared; a server that asks forever is stopped.
	for tool, want := range map[string]string{"ask_sample": "did not declare", "ask_forever": "more than"} {
		m := c.call("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}})
		if m.Error == nil || !strings.Contains(m.Error.Message, want) {
			t.Fatalf("%s = %+v %s, want an error naming %q", tool, m.Error, m.Result, want)
		}
	}
	log, _ := os.ReadFile(logPath)
	if n := strings.Count(string(log), `"name":"ask_forever"`); n != maxAsksPerCall+1 {
		t.Fatalf("ask_forever reached the server %d times, want %d", n, maxAsksPerCall+1)
	}
	n := 0
	for _, d := range f.sink.decisions() {
		if d.Tool == "needs_input" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("needs_input has %d decision records, want 1", n)
	}

	// The client cancels the call while its round waits for the client:
	// the round ends, the call is not sent again and gets no answer, and
	// it is recorded.
	cancelled := c.start("tools/call", map[string]any{"name": "needs_input", "arguments": map[string]any{"n": 2}})
	el = c.nextRequest("elicitation/create")
	var id int
	c.mu.Lock()
	id = c.nextID
	c.mu.Unlock()
	c.notify("notifications/cancelled", map[string]any{"requestId": id})
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		n := 0
		for _, d := range f.sink.decisions() {
			if d.Tool == "needs_input" {
				n++
			}
		}
		return n == 2
	})
	c.reply(el, map[string]any{"action": "accept", "content": map[string]any{}})
	if m := c.call("ping", nil); m.Error != nil {
		t.Fatalf("ping: %v", m.Error)
	}
	select {
	case m := <-cancelled:
		t.Fatalf("the cancelled call was answered: %+v %s", m.Error, m.Result)
	default:
	}
	log, _ = os.ReadFile(logPath)
	if n := strings.Count(string(log), `"name":"needs_input"`); n != 3 {
		t.Fatalf("needs_input reached the server %d times, want 3 (the cancelled call never sent again)", n)
	}
}
