package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestServerOriginIsARecordToken: decision records name the server by its
// serverInfo, the server's own strings. They must be a token, as every
// record field: the official everything server calls itself
// "mcp-servers/everything", and with that origin the daemon refused the
// run's decision records, so the proxy stopped the run at its first call
// (collector.TestCleanRunsAreClean, server-everything: exit status 74 on
// the code before); a run publishing itself would have lost them at the
// collector.
func TestServerOriginIsARecordToken(t *testing.T) {
	for _, tc := range []struct{ name, version, want string }{
		{"mcp-servers/everything", "2.0.0", "mcp-servers_everything@2.0.0"},
		{"secure-filesystem-server", "0.2.0", "secure-filesystem-server@0.2.0"},
		{"evil name\n\x1b[31m", "1 0", "evil_name___31m@1_0"},
		{"ünï", "", "__n__"},
		{strings.Repeat("x", 300), "9", strings.Repeat("x", 128)},
		{"../../etc", "", ".._.._etc"},
	} {
		si, _ := json.Marshal(map[string]string{"name": tc.name, "version": tc.version})
		got := serverName(map[string]json.RawMessage{"serverInfo": si})
		if got != tc.want {
			t.Errorf("serverInfo %q %q: origin %q, want %q", tc.name, tc.version, got, tc.want)
		}
		e := schema.Origin{Host: "h1", BootID: "b"}.NewEvent(schema.KindDecision, schema.NewID(), "scope-1", "", time.Now())
		e.Decision = &schema.Decision{OpID: "op-1", Method: "tools/call", ServerOrigin: got, ActionClass: schema.ActionRead, Decision: schema.OutcomeAllow, Approval: schema.ApprovalNotRequired}
		if err := e.Validate(); err != nil {
			t.Errorf("serverInfo %q %q: a decision record naming the server %q is invalid: %v", tc.name, tc.version, got, err)
		}
	}
}
