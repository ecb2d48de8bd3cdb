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
	modernOnlyEnv  = "MCPWARDEN_PROXY_TEST_MODERN_ONLY_SERVER"
	modernOnlyCode = "MCPWARDEN_PROXY_TEST_MODERN_ONLY_CODE" // how it refuses initialize
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
				Arguments json.RawMessage            `json:"arguments"`
				Meta      map[string]json.RawMessage `json:"_meta"`
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
			text, _ := json.Marshal("MODERN " + string(m.Params.Arguments))
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
