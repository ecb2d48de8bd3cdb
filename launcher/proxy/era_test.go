package proxy

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

func modernMeta() map[string]any {
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    ModernVersion,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "modern-test", "version": "1"},
	}
}

func everythingServer(t testing.TB) string {
	t.Helper()
	return testenv.GoTool(t, "everything-server")
}

func resultMap(t testing.TB, m *jsonrpc.Message) map[string]json.RawMessage {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("error %d %s", m.Error.Code, m.Error.Message)
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func toolNames(t testing.TB, m *jsonrpc.Message) []string {
	t.Helper()
	var r struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range r.Tools {
		out = append(out, x.Name)
	}
	return out
}

// checkModernList checks the caching fields of a scope-filtered list.
func checkModernList(t testing.TB, r map[string]json.RawMessage) {
	t.Helper()
	if string(r["resultType"]) != `"complete"` || string(r["cacheScope"]) != `"private"` || r["ttlMs"] == nil {
		t.Fatalf("modern list result lacks resultType/ttlMs/cacheScope private: %v", r)
	}
}

func TestModernClientLegacyUpstream(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	c := f.client
	// server/discover is answered by the proxy: the filesystem server has none.
	d := resultMap(t, c.call("server/discover", map[string]any{"_meta": modernMeta()}))
	if string(d["supportedVersions"]) != `["2026-07-28"]` || string(d["cacheScope"]) != `"private"` || string(d["resultType"]) != `"complete"` {
		t.Fatalf("discover result = %v", d)
	}
	if !strings.Contains(string(d["_meta"]), "secure-filesystem-server") {
		t.Fatalf("discover lacks the upstream's serverInfo: %s", d["_meta"])
	}
	tl := c.call("tools/list", map[string]any{"_meta": modernMeta()})
	checkModernList(t, resultMap(t, tl))
	names := toolNames(t, tl)
	// The allowlist, in the server's order (the filesystem server's own).
	want := []string{"read_text_file", "read_multiple_files", "write_file", "list_directory", "directory_tree", "move_file", "search_files", "list_allowed_directories"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools/list = %v, want the allowlist in the server's order %v", names, want)
	}
	in := filepath.Join(f.base, "allowed", "probe.txt")
	m := c.call("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": in}, "_meta": modernMeta()})
	r := resultMap(t, m)
	if string(r["resultType"]) != `"complete"` || !strings.Contains(string(r["content"]), "MARKER-ALLOWED") {
		t.Fatalf("modern read through a legacy upstream = %v", r)
	}
	// Missing required _meta keys → -32602; unknown version → -32022.
	bad := c.call("tools/list", map[string]any{"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": ModernVersion}})
	if bad.Error == nil || bad.Error.Code != -32602 {
		t.Fatalf("missing clientCapabilities: %+v", bad)
	}
	bad = c.call("tools/list", map[string]any{"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}})
	if bad.Error == nil || bad.Error.Code != -32022 || !strings.Contains(string(bad.Error.Data), `"supported":["2026-07-28"]`) {
		t.Fatalf("unsupported version: %+v", bad)
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool { return d.ErrorCode == string(schema.ErrUnsupportedVersion) })
	a := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Tool == "read_text_file" && d.Decision == "allow" })
	if a.ProtocolEra != "modern" || a.ProtocolVersion != ModernVersion || !strings.HasPrefix(a.ServerOrigin, "secure-filesystem-server") {
		t.Fatalf("modern decision record = %+v", a)
	}
	// A denial is still a denial in the modern era, never a version retry.
	r2 := decodeTool(t, c.call("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": "/etc/shadow"}, "_meta": modernMeta()}))
	if denialCode(r2) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("modern denial = %+v", r2)
	}
}

func everythingFixture(t *testing.T) *fixture {
	bin := everythingServer(t)
	return newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"test_simple_text", "test_error_handling"}
			s.ToolClasses = map[string]string{"test_simple_text": "read", "test_error_handling": "read"}
		},
		upstream: func(t testing.TB) *procUpstream { return startUpstream(t, nil, bin) },
	})
}

func TestModernClientModernUpstream(t *testing.T) {
	f := everythingFixture(t)
	c := f.client
	d := resultMap(t, c.call("server/discover", map[string]any{"_meta": modernMeta()}))
	if string(d["supportedVersions"]) != `["2026-07-28"]` || !strings.Contains(string(d["_meta"]), "mcp-conformance-test-server") {
		t.Fatalf("discover = %v", d)
	}
	tl := c.call("tools/list", map[string]any{"_meta": modernMeta()})
	checkModernList(t, resultMap(t, tl))
	if names := toolNames(t, tl); !slices.Equal(names, []string{"test_error_handling", "test_simple_text"}) {
		t.Fatalf("tools/list = %v", names)
	}
	r := decodeTool(t, c.call("tools/call", map[string]any{"name": "test_simple_text", "arguments": map[string]any{}, "_meta": modernMeta()}))
	if r.IsError || !strings.Contains(r.text(), "simple text") {
		t.Fatalf("modern call = %+v", r)
	}
	r = decodeTool(t, c.call("tools/call", map[string]any{"name": "test_sampling", "arguments": map[string]any{"prompt": "x"}, "_meta": modernMeta()}))
	if denialCode(r) != string(schema.ErrToolNotAllowed) {
		t.Fatalf("non-allowlisted tool = %+v", r)
	}
	a := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Tool == "test_simple_text" })
	if a.Decision != "allow" || a.ProtocolEra != "modern" || !strings.HasPrefix(a.ServerOrigin, "mcp-conformance-test-server") {
		t.Fatalf("record = %+v", a)
	}
}

func TestLegacyClientModernUpstream(t *testing.T) {
	f := everythingFixture(t)
	c := f.client
	init := resultMap(t, c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]string{"name": "legacy", "version": "1"}}))
	if string(init["protocolVersion"]) != `"2025-06-18"` || !strings.Contains(string(init["serverInfo"]), "mcp-conformance-test-server") {
		t.Fatalf("initialize from a modern upstream = %v", init)
	}
	c.notify("notifications/initialized", nil)
	tl := c.call("tools/list", map[string]any{})
	if names := toolNames(t, tl); !slices.Equal(names, []string{"test_error_handling", "test_simple_text"}) {
		t.Fatalf("tools/list = %v", names)
	}
	r := c.tool("test_simple_text", map[string]any{})
	if r.IsError || !strings.Contains(r.text(), "simple text") {
		t.Fatalf("legacy call through a modern upstream = %+v", r)
	}
	a := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Tool == "test_simple_text" })
	if a.ProtocolEra != "legacy" || a.ProtocolVersion != "2025-06-18" {
		t.Fatalf("record = %+v", a)
	}
}

func TestLegacyClientLegacyUpstreamNoRoots(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	c := f.client
	init := resultMap(t, c.initLegacy(false))
	if !strings.Contains(string(init["serverInfo"]), "secure-filesystem-server") {
		t.Fatalf("initialize = %v", init)
	}
	// Without client roots the effective scope is the scope: the base.
	if got := allowedDirs(c); len(got) != 1 || got[0] != f.base {
		t.Fatalf("allowed directories = %v, want the scope's base", got)
	}
	mustRead(t, c, filepath.Join(f.base, "outside", "probe.txt"), "MARKER-OUTSIDE")
	if f.up.restartCount() != 0 {
		t.Fatal("restarted without a change of scope")
	}
}

func TestResourcesLimitedToRefs(t *testing.T) {
	bin := everythingServer(t)
	f := newFixture(t, fixtureOpts{
		scope:    func(s *schema.Scope) { s.ResourceRefs = []string{"test://static-text"} },
		upstream: func(t testing.TB) *procUpstream { return startUpstream(t, nil, bin) },
	})
	c := f.client
	lst := c.call("resources/list", map[string]any{"_meta": modernMeta()})
	r := resultMap(t, lst)
	checkModernList(t, r)
	var res []struct {
		URI string `json:"uri"`
	}
	json.Unmarshal(r["resources"], &res)
	if len(res) != 1 || res[0].URI != "test://static-text" {
		t.Fatalf("resources/list = %s", r["resources"])
	}
	ok := resultMap(t, c.call("resources/read", map[string]any{"uri": "test://static-text", "_meta": modernMeta()}))
	if !strings.Contains(string(ok["contents"]), "test://static-text") {
		t.Fatalf("resources/read of a ref = %v", ok)
	}
	for _, uri := range []string{"test://static-binary", "test://template/1/data", "TEST://static-text"} {
		m := c.call("resources/read", map[string]any{"uri": uri, "_meta": modernMeta()})
		if m.Error == nil || m.Error.Code != jsonrpc.CodeDenied || !strings.Contains(string(m.Error.Data), "PATH_OUTSIDE_SCOPE") {
			t.Fatalf("resources/read %s = %+v", uri, m)
		}
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Method == "resources/read" && d.Decision == "allow" })
}

// TestModernInputRootsNeverForwarded: a modern server asks for the client's
// roots inside a tool result (MRTR); the client's answer is replaced by the
// effective scope narrowed by it, so its roots never reach the server.
func TestModernInputRootsNeverForwarded(t *testing.T) {
	bin := everythingServer(t)
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"test_input_required_result_list_roots"}
			s.ToolClasses = map[string]string{"test_input_required_result_list_roots": "read"}
		},
		upstream: func(t testing.TB) *procUpstream { return startUpstream(t, nil, bin) },
	})
	c := f.client
	first := resultMap(t, c.call("tools/call", map[string]any{"name": "test_input_required_result_list_roots", "arguments": map[string]any{}, "_meta": modernMeta()}))
	if string(first["resultType"]) != `"input_required"` || !strings.Contains(string(first["inputRequests"]), "roots/list") {
		t.Fatalf("first round = %v", first)
	}
	allowed := filepath.Join(f.base, "allowed")
	answer := map[string]any{"client_roots": rootsAnswer("/etc", allowed, "/")}
	r := decodeTool(t, c.call("tools/call", map[string]any{"name": "test_input_required_result_list_roots", "arguments": map[string]any{}, "inputResponses": answer, "_meta": modernMeta()}))
	text := r.text()
	if strings.Contains(text, "file:///etc") || strings.Contains(text, "file:///,") || !strings.Contains(text, "file://"+f.base) {
		t.Fatalf("server saw roots %q; want only the scope narrowed by the client", text)
	}
}
