package proxy

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// URIs a server hands the client (round 9b, docs/proxy.md): a resource's
// uri that runs code in a client that opens it.

// activeURIs run code in a client's page when opened; each is refused
// wherever a server hands one to the client.
var activeURIs = []string{
	"javascript:alert('BADURI')",
	" \x01JaVaScRiPt:alert('BADURI')",
	"java\tscript:alert('BADURI')",
	"vbscript:msgbox('BADURI')",
	"data:text/html,<script>alert('BADURI')</script>",
	"DATA: Image/SVG+XML;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+",
}

// passingURIs are resources' names of other schemes (custom ones
// included: 2025-11-25 lets a resource name any) and inert data: ones.
var passingURIs = []string{
	"test://static/resource/1",
	"https://example.com/doc",
	"git://host/repo/readme",
	"data:text/plain,hello",
	"data:image/png;base64,iVBORw0KGgo=",
}

const uriEnv = "MCPWARDEN_PROXY_TEST_URI_SERVER"

// allURIs is what uriServer hands out: the index "i" (a tool's argument,
// a prompt's argument, a list's cursor) picks one.
// (relativeURIs, round ten, come last.)
var allURIs = append(append(append([]string{}, activeURIs...), passingURIs...), relativeURIs...)

// uriServer is a legacy server whose answers carry the URI allURIs[i]:
// "link" a resource_link, "embed" an embedded resource, "annotated" a
// text item whose annotations name it; the prompt "linked" a message with
// a resource_link; resources/list one resource and
// resources/templates/list one template of it (i is the cursor); the
// tool "notify" sends notifications/resources/updated of it first.
func uriServer(logPath string) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	serveScript(logPath, "", func(line string, send func(string)) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string            `json:"name"`
				Cursor    string            `json:"cursor"`
				Arguments map[string]string `json:"arguments"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		if m.Method == "" || len(m.ID) == 0 {
			return
		}
		result := func(v string) { send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + v + `}`) }
		pick := func(s string) string {
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(allURIs) {
				return "test://none"
			}
			return allURIs[i]
		}
		switch m.Method {
		case "initialize":
			result(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{},"prompts":{}},"serverInfo":{"name":"uris","version":"9"}}`)
		case "resources/list":
			result(`{"resources":[{"uri":` + q(pick(m.Params.Cursor)) + `,"name":"BADURI"},{"uri":"test://kept","name":"kept"}]}`)
		case "resources/templates/list":
			result(`{"resourceTemplates":[{"uriTemplate":` + q(pick(m.Params.Cursor)+"{x}") + `,"name":"BADURI"},{"uriTemplate":"test://kept/{x}","name":"kept"}]}`)
		case "prompts/get":
			result(`{"messages":[{"role":"user","content":{"type":"resource_link","uri":` + q(pick(m.Params.Arguments["i"])) + `,"name":"BADURI"}}]}`)
		case "tools/call":
			u := q(pick(m.Params.Arguments["i"]))
			switch m.Params.Name {
			case "link":
				result(`{"content":[{"type":"resource_link","uri":` + u + `,"name":"BADURI"}]}`)
			case "embed":
				result(`{"content":[{"type":"resource","resource":{"uri":` + u + `,"mimeType":"text/plain","text":"BADURI"}}]}`)
			case "annotated":
				result(`{"content":[{"type":"text","text":"BADURI","annotations":{"audience":["user"],"uri":` + u + `}}]}`)
			case "notify":
				send(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":` + u + `,"title":"BADURI"}}`)
				result(`{"content":[{"type":"text","text":"DONE"}]}`)
			}
		default:
			result(`{}`)
		}
	})
}

// TestActiveURIsToTheClient: a resource's uri that runs code in a client
// that opens it (javascript:, vbscript:, data:text/html, data:image/svg+xml,
// in the spellings a URL parser reads) never reaches the client, wherever
// a server puts it: a tool's resource_link, an embedded resource, a
// text item's annotations, a prompt's message (the answer is denied,
// MALFORMED_REQUEST), resources/list and resources/templates/list (the
// entry is dropped, the rest kept), notifications/resources/updated
// (dropped and recorded). Custom schemes and inert data: URIs pass
// unchanged. Before: every one reached the client.
func TestActiveURIsToTheClient(t *testing.T) {
	f, _ := scriptedSecretFixture(t, uriEnv, "uris.log", []string{"link", "embed", "annotated", "notify"}, func(s *schema.Scope) {
		s.PromptAllowlist = []string{"linked"}
	})
	c := f.client
	c.initLegacy(false)
	for i, u := range allURIs[:len(activeURIs)+len(passingURIs)] {
		active := i < len(activeURIs)
		idx := strconv.Itoa(i)
		for _, tool := range []string{"link", "embed", "annotated"} {
			m := c.call("tools/call", map[string]any{"name": tool, "arguments": map[string]string{"i": idx}})
			got := decodeTool(t, m)
			switch {
			case active && (strings.Contains(string(m.Result), "BADURI") || denialCode(got) != string(schema.ErrMalformedRequest)):
				t.Errorf("%s with %q reached the client: %s", tool, u, m.Result)
			case !active && (got.IsError || !strings.Contains(string(m.Result), "BADURI")):
				t.Errorf("%s with %q = %s, want it passed", tool, u, m.Result)
			}
		}
		m := c.call("prompts/get", map[string]any{"name": "linked", "arguments": map[string]string{"i": idx}})
		switch {
		case active && (m.Error == nil || strings.Contains(string(m.Result), "BADURI")):
			t.Errorf("prompts/get with %q reached the client: %+v %s", u, m.Error, m.Result)
		case !active && (m.Error != nil || !strings.Contains(string(m.Result), "BADURI")):
			t.Errorf("prompts/get with %q = %+v %s, want it passed", u, m.Error, m.Result)
		}
		m = c.call("resources/templates/list", map[string]any{"cursor": idx})
		switch {
		case m.Error != nil || !strings.Contains(string(m.Result), "test://kept/{x}"):
			t.Errorf("resources/templates/list with %q = %+v %s, want the other template kept", u, m.Error, m.Result)
		case active == strings.Contains(string(m.Result), "BADURI"):
			t.Errorf("resources/templates/list with %q = %s (dropped: %v)", u, m.Result, active)
		}
		// resources/list keeps only the scope's resource_refs: no entry
		// of another scheme reaches the client anyway.
		if m := c.call("resources/list", map[string]any{"cursor": idx}); m.Error != nil || strings.Contains(string(m.Result), "BADURI") {
			t.Errorf("resources/list with %q = %+v %s", u, m.Error, m.Result)
		}
	}
	// A notification: the active ones are dropped and recorded; the next
	// passing one reaches the client, so none of the others was held back.
	for i := range activeURIs {
		if r := c.tool("notify", map[string]any{"i": strconv.Itoa(i)}); r.text() != "DONE" {
			t.Fatalf("notify = %+v", r)
		}
	}
	if r := c.tool("notify", map[string]any{"i": strconv.Itoa(len(activeURIs))}); r.text() != "DONE" {
		t.Fatalf("notify = %+v", r)
	}
	f.sink.waitDecision(t, func(schema.Decision) bool {
		n := 0
		for _, d := range f.sink.decisions() {
			if d.Method == "notifications/resources/updated" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrMalformedRequest) {
				n++
			}
		}
		return n == len(activeURIs)
	})
	for {
		select {
		case n := <-c.notes:
			if n.Method != "notifications/resources/updated" {
				continue
			}
			if !strings.Contains(string(n.Params), passingURIs[0]) {
				t.Fatalf("the first notification to reach the client = %s", n.Params)
			}
			return
		case <-time.After(2 * time.Minute):
			t.Fatal("the passing notifications/resources/updated never reached the client")
		}
	}
}
