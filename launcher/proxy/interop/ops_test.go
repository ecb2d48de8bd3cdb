package interop

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// op is one MCP request a client test sends, the same for every client:
// the Go test client dispatches it to go-sdk's typed calls, the Node
// clients (deploy/interop/clients) to the TypeScript SDKs' and the Inspector
// CLI to its --method flags.
type op struct {
	Name   string         `json:"name"`
	Method string         `json:"method"`
	Params map[string]any `json:"params,omitempty"`
	// Denied: the wrapped run's scope refuses this on purpose (a secret, a
	// path or URI outside the scope); the direct server serves it.
	Denied bool `json:"-"`
	// Refused: both refuse it (a path outside the server's directories);
	// wrapped, the proxy refuses it before the server sees it, in its own
	// words.
	Refused bool `json:"-"`
	// Legacy: the operation exists only in the legacy era (2026-07-28
	// removed it); a modern client skips it.
	Legacy bool `json:"legacy,omitempty"`
	// Modern: the operation is compared in the 2026-07-28 era only.
	Modern bool `json:"modern,omitempty"`
	// Only: the one client that runs it ("ts-v1": the only client here
	// with a tasks API); empty: every client.
	Only string `json:"-"`
}

// forClient keeps the ops client runs.
func forClient(ops []op, client string) []op {
	var out []op
	for _, o := range ops {
		if o.Only == "" || o.Only == client {
			out = append(out, o)
		}
	}
	return out
}

func call(name, tool string, args map[string]any) op {
	if args == nil {
		args = map[string]any{}
	}
	return op{Name: name, Method: "tools/call", Params: map[string]any{"name": tool, "arguments": args}}
}

func read(name, uri string) op {
	return op{Name: name, Method: "resources/read", Params: map[string]any{"uri": uri}}
}

// inEra keeps the ops that are run in era (2026-07-28 removed the legacy
// ones; the modern ones are compared there only).
func inEra(ops []op, era string) []op {
	var out []op
	for _, o := range ops {
		if !(o.Legacy && era == eraModern) && !(o.Modern && era != eraModern) {
			out = append(out, o)
		}
	}
	return out
}

func denied(o op) op  { o.Denied = true; return o }
func refused(o op) op { o.Refused = true; return o }
func legacyOnly(o op) op {
	o.Legacy = true
	return o
}

func modernOnly(o op) op {
	o.Modern = true
	return o
}

// opsFor are the operations every client runs against s (in w's workspace).
func opsFor(w *world, s server) []op {
	common := []op{{Name: "list tools", Method: "tools/list"}}
	switch s.name {
	case "go-sdk-everything":
		return append(common,
			call("simple text", "test_simple_text", nil),
			call("image", "test_image_content", nil),
			call("embedded resource", "test_embedded_resource", nil),
			call("mixed content", "test_multiple_content_types", nil),
			call("tool error", "test_error_handling", nil),
			call("tool with logging", "test_tool_with_logging", nil),
			call("tool with progress", "test_tool_with_progress", nil),
			call("sampling", "test_sampling", map[string]any{"prompt": "say hi"}),
			call("elicitation", "test_elicitation", map[string]any{"message": "your name?"}),
			// Input rounds (2026-07-28; in the legacy era the server asks
			// the client with requests of its own instead).
			call("input round: sampling", "test_input_required_result_sampling", nil),
			call("input round: elicitation", "test_input_required_result_elicitation", nil),
			call("input rounds: two", "test_input_required_result_multi_round", nil),
			// Legacy, the proxy answers the server's roots/list from the
			// scope even for a client that has none (docs/proxy.md, "Roots
			// adapter"); modern, the server sees the client's answer
			// narrowed by the scope: none, as direct.
			modernOnly(call("input round: roots", "test_input_required_result_list_roots", nil)),
			op{Name: "list resources", Method: "resources/list"},
			op{Name: "list templates", Method: "resources/templates/list"},
			read("read text", "test://static-text"),
			read("read binary", "test://static-binary"),
			read("read template", "test://template/123/data"),
			denied(read("read outside resource_refs", "test://template/7/data")),
			op{Name: "list prompts", Method: "prompts/list"},
			op{Name: "simple prompt", Method: "prompts/get", Params: map[string]any{"name": "test_simple_prompt"}},
			op{Name: "prompt with arguments", Method: "prompts/get", Params: map[string]any{"name": "test_prompt_with_arguments", "arguments": map[string]any{"arg1": "a", "arg2": "b"}}},
			op{Name: "completion", Method: "completion/complete", Params: map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": map[string]any{"name": "arg1", "value": "a"}}},
			legacyOnly(op{Name: "set log level", Method: "logging/setLevel", Params: map[string]any{"level": "info"}}),
			legacyOnly(op{Name: "subscribe", Method: "resources/subscribe", Params: map[string]any{"uri": "test://watched-resource"}}),
			legacyOnly(op{Name: "unsubscribe", Method: "resources/unsubscribe", Params: map[string]any{"uri": "test://watched-resource"}}),
		)
	case "server-everything":
		return append(common,
			call("echo", "echo", map[string]any{"message": "hello"}),
			call("sum", "get-sum", map[string]any{"a": 2, "b": 3}),
			call("tiny image", "get-tiny-image", nil),
			call("annotated message", "get-annotated-message", map[string]any{"messageType": "error", "includeImage": false}),
			call("structured content", "get-structured-content", map[string]any{"location": "New York"}),
			call("resource links", "get-resource-links", map[string]any{"count": 2}),
			call("sampling", "trigger-sampling-request", map[string]any{"prompt": "say hi", "maxTokens": 20}),
			call("elicitation", "trigger-elicitation-request", nil),
			call("roots the server sees", "get-roots-list", nil),
			op{Name: "list resources", Method: "resources/list"},
			op{Name: "list templates", Method: "resources/templates/list"},
			read("read document", "demo://resource/static/document/architecture.md"),
			read("read dynamic text", "demo://resource/dynamic/text/1"),
			denied(read("read outside resource_refs", "demo://resource/dynamic/text/2")),
			op{Name: "list prompts", Method: "prompts/list"},
			op{Name: "simple prompt", Method: "prompts/get", Params: map[string]any{"name": "simple-prompt"}},
			op{Name: "prompt with arguments", Method: "prompts/get", Params: map[string]any{"name": "args-prompt", "arguments": map[string]any{"city": "Paris", "state": "TX"}}},
			op{Name: "completion", Method: "completion/complete", Params: map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "completable-prompt"}, "argument": map[string]any{"name": "department", "value": "E"}}},
			legacyOnly(op{Name: "set log level", Method: "logging/setLevel", Params: map[string]any{"level": "error"}}),
			legacyOnly(op{Name: "subscribe", Method: "resources/subscribe", Params: map[string]any{"uri": "demo://resource/static/document/architecture.md"}}),
			// A tool that runs only as a task (2025-11-25): tools/call with
			// a task, tasks/get, and its result by tasks/result.
			legacyOnly(op{Name: "tool as a task", Method: "x-task", Only: "ts-v1", Params: map[string]any{"name": "simulate-research-query", "arguments": map[string]any{"topic": "interop"}}}),
		)
	default: // the filesystem server
		hello := filepath.Join(w.work, "hello.txt")
		return append(common,
			call("allowed directories", "list_allowed_directories", nil),
			call("read a file", "read_text_file", map[string]any{"path": hello}),
			call("read head", "read_text_file", map[string]any{"path": hello, "head": 1}),
			call("read several", "read_multiple_files", map[string]any{"paths": []string{hello, filepath.Join(w.work, "notes", "todo.md")}}),
			call("list a directory", "list_directory", map[string]any{"path": filepath.Join(w.work, "notes")}),
			call("directory tree", "directory_tree", map[string]any{"path": filepath.Join(w.work, "notes")}),
			call("search", "search_files", map[string]any{"path": w.work, "pattern": "*.md"}),
			call("read a missing file", "read_text_file", map[string]any{"path": filepath.Join(w.work, "missing.txt")}),
			denied(call("read a secret", "read_text_file", map[string]any{"path": filepath.Join(w.work, ".env")})),
			refused(call("read outside", "read_text_file", map[string]any{"path": "/etc/hostname"})),
			op{Name: "list resources", Method: "resources/list"},
			op{Name: "list prompts", Method: "prompts/list"},
		)
	}
}

// outcome is what a client saw for one op.
type outcome struct {
	Op     string          `json:"op"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *opError        `json:"error,omitempty"`
}

type opError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// tally counts matched cases per client, server and era for the summary.
type tally struct {
	mu    sync.Mutex
	lines []string
	m, d  int // matched, denied on purpose
	n     int
}

func (ta *tally) add(what string, matched, deniedOnPurpose, total int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.m += matched
	ta.d += deniedOnPurpose
	ta.n += total
	ta.lines = append(ta.lines, fmt.Sprintf("%s: %d of %d matched, %d denied on purpose", what, matched, total, deniedOnPurpose))
}

func (ta *tally) report(t *testing.T, client string) {
	slices.Sort(ta.lines)
	for _, l := range ta.lines {
		t.Log(l)
	}
	t.Logf("%s: %d of %d cases matched, %d denied on purpose by the scope, %d differ", client, ta.m, ta.n, ta.d, ta.n-ta.m-ta.d)
}

// clientDiffs are the cases that end differently wrapped than direct, by
// "client/server/era/op", and why. An entry whose case matches fails the
// test: the list stays true.
var clientDiffs = map[string]string{}

// compareOutcomes requires every op to end the same direct and wrapped
// (after normalising ids and timestamps), except ops the scope denies on
// purpose, which must be served direct and refused wrapped. translated: a
// modern client talks to a legacy-only server, which direct makes the
// client fall back to the legacy era, while wrapped the proxy translates;
// then the modern envelope fields are not compared. It returns the matched
// and denied counts.
func compareOutcomes(t *testing.T, prefix string, ops []op, direct, wrapped []outcome, translated bool) (int, int) {
	t.Helper()
	byName := func(list []outcome) map[string]outcome {
		m := map[string]outcome{}
		for _, o := range list {
			m[o.Op] = o
		}
		return m
	}
	dm, wm := byName(direct), byName(wrapped)
	matched, deniedOK := 0, 0
	for _, o := range ops {
		d, okD := dm[o.Name]
		wr, okW := wm[o.Name]
		if !okD || !okW {
			t.Errorf("%s: no outcome (direct %v, wrapped %v)", o.Name, okD, okW)
			continue
		}
		switch {
		case o.Denied:
			if isDenial(wr) && !isDenial(d) && !isErrorOutcome(d) {
				deniedOK++
			} else {
				t.Errorf("%s: the scope should refuse it wrapped and the server serve it direct:\ndirect:  %s\nwrapped: %s", o.Name, show(d), show(wr))
			}
			continue
		case o.Refused:
			if isDenial(wr) && isErrorOutcome(d) {
				matched++
			} else {
				t.Errorf("%s: both should refuse it, the proxy first:\ndirect:  %s\nwrapped: %s", o.Name, show(d), show(wr))
			}
			continue
		}
		nd, nw := normalise(d, o, translated), normalise(wr, o, translated)
		why, known := clientDiffs[prefix+"/"+o.Name]
		switch {
		case nd == nw && known:
			matched++
			t.Errorf("%s: now matches; remove it from clientDiffs (%s)", o.Name, why)
		case nd == nw:
			matched++
		case known:
			t.Logf("%s differs, known: %s", o.Name, why)
		default:
			t.Errorf("%s differs:\n%s", o.Name, firstDifference(nd, nw))
		}
	}
	return matched, deniedOK
}

// firstDifference shows where two normalised outcomes part.
func firstDifference(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-120)
	cut := func(s string) string {
		return s[from:min(len(s), i+240)]
	}
	return fmt.Sprintf("direct:  …%s…\nwrapped: …%s…", cut(a), cut(b))
}

// isDenial reports an mcpwarden denial: an isError tool result naming its
// error code, or the proxy's JSON-RPC denial (-31403; a client that shows
// no JSON-RPC code, the Inspector CLI, shows its "mcpwarden: CODE: " message).
func isDenial(o outcome) bool {
	if o.Error != nil {
		return o.Error.Code == -31403 || o.Error.Code == 0 && denialMessage.MatchString(o.Error.Message)
	}
	return strings.Contains(string(o.Result), "io.mcpwarden/error_code")
}

func isErrorOutcome(o outcome) bool {
	return o.Error != nil || strings.Contains(string(o.Result), `"isError":true`)
}

func show(o outcome) string {
	b, _ := json.Marshal(o)
	if len(b) > 600 {
		b = append(b[:600], "…"...)
	}
	return string(b)
}

// timestamps and the ids an SDK or server makes up per run.
var (
	denialMessage = regexp.MustCompile(`mcpwarden: [A-Z_]+: `)
	isoTime       = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	uuid          = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	clock         = regexp.MustCompile(`\b\d{1,2}:\d{2}:\d{2}( ?[AP]M)?\b`)
)

// normalise is an outcome as compared: JSON with sorted keys, timestamps
// and uuids replaced. A list filtered by the run's scope is private to the
// run (cacheScope "private", on purpose; MCP.md), so a list's cacheScope is
// not compared. For a translated session the modern envelope (resultType,
// ttlMs, cacheScope, _meta serverInfo, the negotiated version) is dropped:
// direct the client fell back to the legacy era, which has none of it; so
// are the legacy members a modern client drops (the tasks capability,
// tools' execution).
func normalise(o outcome, which op, translated bool) string {
	var v any
	if len(o.Result) > 0 {
		if err := json.Unmarshal(o.Result, &v); err != nil {
			v = string(o.Result)
		}
	}
	if m, ok := v.(map[string]any); ok {
		if which.Method == "tools/list" || which.Method == "resources/list" || which.Method == "resources/templates/list" || which.Method == "prompts/list" {
			delete(m, "cacheScope")
		}
		if translated {
			for _, k := range []string{"resultType", "ttlMs", "cacheScope", "protocolVersion"} {
				delete(m, k)
			}
			// Legacy vocabulary a 2026-07-28 session has not: the
			// TypeScript SDK v2 drops the tasks capability and the tools'
			// execution member on a modern connection.
			if caps, ok := m["capabilities"].(map[string]any); ok {
				delete(caps, "tasks")
			}
			if tools, ok := m["tools"].([]any); ok {
				for _, tool := range tools {
					if tm, ok := tool.(map[string]any); ok {
						delete(tm, "execution")
					}
				}
			}
			if meta, ok := m["_meta"].(map[string]any); ok {
				delete(meta, "io.modelcontextprotocol/serverInfo")
				if len(meta) == 0 {
					delete(m, "_meta")
				}
			}
		}
	}
	b, _ := json.Marshal(map[string]any{"result": v, "error": o.Error})
	s := isoTime.ReplaceAllString(string(b), "<time>")
	s = clock.ReplaceAllString(s, "<time>")
	return uuid.ReplaceAllString(s, "<uuid>")
}
