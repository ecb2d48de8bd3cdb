package proxy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestOnServerInfoNamesTheServer: once the upstream is probed and
// initialised, the proxy reports the server's serverInfo and era once (the
// launcher writes them into a launch record), for a legacy and a modern
// upstream.
func TestOnServerInfoNamesTheServer(t *testing.T) {
	type seen struct{ name, version, era string }
	for _, tc := range []struct {
		name     string
		upstream func(t testing.TB) *procUpstream
		scope    func(*schema.Scope)
		drive    func(c *testClient)
		wantName string
		wantEra  string
	}{
		{"legacy client, the filesystem server", nil, nil, func(c *testClient) {
			c.initLegacy(false)
			c.call("tools/list", map[string]any{})
		}, "secure-filesystem-server", eraLegacy},
		{"modern client, go-sdk's everything-server", func(t testing.TB) *procUpstream { return startUpstream(t, nil, everythingServer(t)) },
			func(s *schema.Scope) { s.ToolAllowlist = []string{"test_simple_text"} }, func(c *testClient) {
				c.call("server/discover", map[string]any{"_meta": modernMeta()})
				c.call("tools/list", map[string]any{"_meta": modernMeta()})
			}, "mcp-conformance-test-server", eraModern},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []seen
			f := newFixture(t, fixtureOpts{upstream: tc.upstream, scope: tc.scope, config: func(c *Config) {
				c.OnServerInfo = func(name, version, era string) {
					mu.Lock()
					calls = append(calls, seen{name, version, era})
					mu.Unlock()
				}
			}})
			tc.drive(f.client)
			tc.drive(f.client) // a second session's worth of requests: still one report
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(calls)
				mu.Unlock()
				if n > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(calls) != 1 {
				t.Fatalf("OnServerInfo called %d times: %+v", len(calls), calls)
			}
			c := calls[0]
			if c.name != tc.wantName || c.version == "" || c.era != tc.wantEra || strings.Contains(c.name, "@") {
				t.Fatalf("OnServerInfo(%q, %q, %q), want %q, a version, %q", c.name, c.version, c.era, tc.wantName, tc.wantEra)
			}
		})
	}
}
