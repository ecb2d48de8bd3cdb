package proxy

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

const (
	plainEnv      = "MCPWARDEN_PROXY_TEST_PLAIN_SERVER"
	plainDelayEnv = "MCPWARDEN_PROXY_TEST_PLAIN_DELAY" // a duration the server reads nothing for first
)

// slowStart is longer than the 30 s the proxy once gave a server to
// answer its initialize.
const slowStart = 35 * time.Second

// plainServer is a legacy server that starts at once (or after
// plainDelayEnv: a runtime starting on a loaded host), answers initialize
// and tools/list, and every tools/call with "CALLED"; it touches no file.
// Every frame it receives is in its log.
func plainServer(logPath string) {
	if d, err := time.ParseDuration(os.Getenv(plainDelayEnv)); err == nil {
		time.Sleep(d)
	}
	serveScript(logPath, "", func(line string, send func(string)) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		switch {
		case len(m.ID) == 0:
		case m.Method == "initialize":
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"slow","version":"1"}}}`)
		case m.Method == "tools/list":
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[]}}`)
		case m.Method == "tools/call":
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"CALLED"}]}}`)
		default:
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"no"}}`)
		}
	})
}

// TestSlowStartingServerIsWaitedFor: a client's initialize waits for a
// server that takes longer than 30 s to start, as it would direct; the
// proxy once gave up at 30 s and failed the run (the real filesystem server
// at load 50 in ci25). Fails before: "the upstream server could not be
// initialised".
func TestSlowStartingServerIsWaitedFor(t *testing.T) {
	t.Parallel()
	logPath := t.TempDir() + "/slow.log"
	f := newFixture(t, fixtureOpts{
		upstream: func(t testing.TB) *procUpstream {
			return startScripted(t, plainEnv+"="+logPath, plainDelayEnv+"="+slowStart.String())
		},
	})
	c := f.client
	c.initLegacy(false)
	if res := c.call("tools/list", map[string]any{}); res.Error != nil {
		t.Fatalf("tools/list after a slow start: %v", res.Error)
	}
}
