package proxy

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Round ten: paths inside strings that are not paths by themselves.

const tenthEnv = "MCPWARDEN_PROXY_TEST_TENTH_SERVER"

// tenthServer is a legacy server whose tool "unpack" takes its "value"
// argument apart as the argument "how" says — the ways real tools read a
// path out of a string — and returns the file it names.
func tenthServer(logPath string) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	serveScript(logPath, "", func(line string, send func(string)) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string            `json:"name"`
				Arguments map[string]string `json:"arguments"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		if m.Method == "" || len(m.ID) == 0 {
			return
		}
		result := func(v string) { send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + v + `}`) }
		switch m.Method {
		case "initialize":
			result(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"tenth","version":"10"}}`)
		case "tools/call":
			v, path := m.Params.Arguments["value"], ""
			switch m.Params.Arguments["how"] {
			case "option": // --file=PATH
				_, path, _ = strings.Cut(v, "=")
			case "cmdline": // a command line's --file=PATH
				for _, w := range strings.Fields(v) {
					if p, ok := strings.CutPrefix(w, "--file="); ok {
						path = p
					}
				}
			case "short": // -fPATH
				path = strings.TrimPrefix(v, "-f")
			case "list": // the last of a comma-separated list
				path = v[strings.LastIndexByte(v, ',')+1:]
			case "pathlist": // the last of a PATH-like list
				path = v[strings.LastIndexByte(v, ':')+1:]
			case "at": // curl's @file
				path = strings.TrimPrefix(v, "@")
			case "json": // a JSON document in a string
				var doc struct{ Path string }
				_ = json.Unmarshal([]byte(v), &doc)
				path = doc.Path
			case "base64":
				b, _ := base64.StdEncoding.DecodeString(v)
				path = string(b)
			case "hex":
				b, _ := hex.DecodeString(v)
				path = string(b)
			case "lines": // the last of a list, one per line (round eleven)
				lines := strings.Fields(v)
				path = lines[len(lines)-1]
			case "vcs": // pip's git+file:// (round eleven)
				path = strings.TrimPrefix(v, "git+file://")
			case "url": // a WHATWG parser strips leading C0 controls
				path = strings.TrimPrefix(strings.TrimLeft(v, "\x00\x01\x02\x03 "), "file://")
			}
			b, err := os.ReadFile(path)
			if err != nil {
				result(`{"content":[{"type":"text","text":"ERR"}],"isError":true}`)
				return
			}
			result(`{"content":[{"type":"text","text":` + q(string(b)) + `}]}`)
		default:
			result(`{}`)
		}
	})
}

// TestPathsInsideStrings: a path a server finds inside a string — an
// option's value, a list's element, a JSON document, base64 or hex, a
// file: URL behind control characters — is checked as a path. Before,
// the scripted server returned the file outside the scope for each (a
// string that does not start like a path was not one).
func TestPathsInsideStrings(t *testing.T) {
	f, _ := scriptedSecretFixture(t, tenthEnv, "tenth.log", []string{"unpack"}, nil)
	c := f.client
	c.initLegacy(false)
	out := f.base + "/outside/probe.txt"
	in := f.base + "/allowed/probe.txt"
	js := func(p string) string { b, _ := json.Marshal(map[string]string{"path": p}); return string(b) }
	for _, tc := range []struct{ how, value, allowed string }{
		{"option", "--file=" + out, "--file=" + in},
		{"short", "-f" + out, "-f" + in},
		{"cmdline", "grep -n --file=" + out + " x", "grep -n --file=" + in + " x"},
		{"list", in + "," + out, in + "," + in},
		{"pathlist", in + ":" + out, in + ":" + in},
		{"at", "@" + out, "@" + in},
		{"json", js(out), js(in)},
		{"base64", base64.StdEncoding.EncodeToString([]byte(out)), base64.StdEncoding.EncodeToString([]byte(in))},
		{"hex", hex.EncodeToString([]byte(out)), hex.EncodeToString([]byte(in))},
		{"url", "\x01file://" + out, "\x01file://" + in},
	} {
		r := c.tool("unpack", map[string]any{"how": tc.how, "value": tc.value})
		if strings.Contains(r.text(), "MARKER-OUTSIDE") || denialCode(r) != string(schema.ErrPathOutsideScope) {
			t.Errorf("%s %q = %+v, want %s", tc.how, tc.value, r, schema.ErrPathOutsideScope)
		}
		if r := c.tool("unpack", map[string]any{"how": tc.how, "value": tc.allowed}); r.text() != "MARKER-ALLOWED-7f3a" {
			t.Errorf("%s %q (inside the scope) = %+v", tc.how, tc.allowed, r)
		}
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Tool == "unpack" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrPathOutsideScope) && len(d.PathHashes) > 0
	})
}

// relativeURIs are resource URIs with no scheme: a client resolves each
// against its own page — a file: URL in a desktop client — so each names
// a file of the client's host (uriServer hands them out after allURIs'
// others).
var relativeURIs = []string{
	"/etc/passwd",
	"../../../../etc/passwd",
	"//fileserver/share/secret.txt",
	" \x01/etc/passwd",
	"",
}

// TestRelativeURIsToTheClient: a resource's uri with no scheme (what the
// schema's "format": "uri" does not allow) never reaches the client, in
// either era: a tool's resource_link, an embedded resource, a text
// item's annotations, a prompt's message (denied, MALFORMED_REQUEST), a
// notifications/resources/updated (dropped and recorded). Before: each
// reached the client (round 9b's Left open).
func TestRelativeURIsToTheClient(t *testing.T) {
	for _, era := range []string{"legacy", "modern"} {
		t.Run(era, func(t *testing.T) {
			f, _ := scriptedSecretFixture(t, uriEnv, "uris.log", []string{"link", "embed", "annotated", "notify"}, func(s *schema.Scope) {
				s.PromptAllowlist = []string{"linked"}
			})
			c := f.client
			params := func(p map[string]any) map[string]any {
				if era == "modern" {
					p["_meta"] = modernMeta()
				}
				return p
			}
			if era == "legacy" {
				c.initLegacy(false)
			}
			first := len(activeURIs) + len(passingURIs)
			for i, u := range relativeURIs {
				idx := strconv.Itoa(first + i)
				for _, tool := range []string{"link", "embed", "annotated"} {
					m := c.call("tools/call", params(map[string]any{"name": tool, "arguments": map[string]string{"i": idx}}))
					if got := decodeTool(t, m); strings.Contains(string(m.Result), "BADURI") || denialCode(got) != string(schema.ErrMalformedRequest) {
						t.Errorf("%s with %q reached the client: %s", tool, u, m.Result)
					}
				}
				if m := c.call("prompts/get", params(map[string]any{"name": "linked", "arguments": map[string]string{"i": idx}})); m.Error == nil || strings.Contains(string(m.Result), "BADURI") {
					t.Errorf("prompts/get with %q reached the client: %+v %s", u, m.Error, m.Result)
				}
			}
			// An absolute URI still passes.
			if m := c.call("tools/call", params(map[string]any{"name": "link", "arguments": map[string]string{"i": strconv.Itoa(len(activeURIs))}})); !strings.Contains(string(m.Result), "BADURI") {
				t.Errorf("a test:// link = %s, want it passed", m.Result)
			}
			if era == "modern" {
				return // a notification outside a call's stream: the legacy era's
			}
			for i := range relativeURIs {
				if r := c.tool("notify", map[string]any{"i": strconv.Itoa(first + i)}); r.text() != "DONE" {
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
				return n == len(relativeURIs)
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
		})
	}
}
