package proxy

import (
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Round eleven.

// TestListsAndVCSURLsThroughTheProxy: a path a server reads out of a
// list by line or field (no space: not text), or behind a VCS URL's
// prefix (git+file://) is checked as a path. Before, the scripted server
// returned the file outside the scope for each. (A C string's NUL: policy
// TestPathsInsideStrings.)
func TestListsAndVCSURLsThroughTheProxy(t *testing.T) {
	f, _ := scriptedSecretFixture(t, tenthEnv, "tenth.log", []string{"unpack"}, nil)
	c := f.client
	c.initLegacy(false)
	out := f.base + "/outside/probe.txt"
	in := f.base + "/allowed/probe.txt"
	for _, tc := range []struct {
		how, value, allowed string
		want                schema.ErrorCode
	}{
		{"lines", "notes.txt\n" + out, "notes.txt\n" + in, schema.ErrPathOutsideScope},
		{"lines", "name\t" + out + "\r\n", "name\t" + in + "\r\n", schema.ErrPathOutsideScope},
		{"vcs", "git+file://" + out, "git+file://" + in, schema.ErrPathOutsideScope},
	} {
		r := c.tool("unpack", map[string]any{"how": tc.how, "value": tc.value})
		if strings.Contains(r.text(), "MARKER-OUTSIDE") || denialCode(r) != string(tc.want) {
			t.Errorf("%s %q = %+v, want %s", tc.how, tc.value, r, tc.want)
		}
		if r := c.tool("unpack", map[string]any{"how": tc.how, "value": tc.allowed}); r.text() != "MARKER-ALLOWED-7f3a" {
			t.Errorf("%s %q (inside the scope) = %+v", tc.how, tc.allowed, r)
		}
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Tool == "unpack" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrPathOutsideScope) && len(d.PathHashes) > 0
	})
}
