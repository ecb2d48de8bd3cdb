package proxy

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
	"golang.org/x/sys/unix"
)

// The eighth attack round (docs/proxy.md): what round seven left open.

// TestModernTaskRootsNarrow: a client's roots answer carried by a
// tasks/update (2026-07-28 tasks) narrows the proxy's own checks and the
// fence (the server restarts under the narrower one), as an input
// round's roots answer does; it never widens the scope back (no round
// tells its age); a malformed one means no roots. Before: only what the
// server saw was narrowed, a read outside the answered root still passed
// and the fence stayed the whole scope.
func TestModernTaskRootsNarrow(t *testing.T) {
	logPath := t.TempDir() + "/modern-tasks.log"
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"task_input"}
			s.ToolClasses = map[string]string{"task_input": "read"}
		},
		upstream: func(t testing.TB) *procUpstream {
			return startScripted(t, modernTasksEnv+"="+logPath, redteamSecret+"="+os.DevNull)
		},
	})
	c := f.client
	meta := func() map[string]any {
		m := modernMeta()
		m["io.modelcontextprotocol/clientCapabilities"] = map[string]any{"roots": map[string]any{}, "extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}
		return m
	}
	allowed := filepath.Join(f.base, "allowed")
	update := func(answer any) {
		t.Helper()
		m := c.call("tools/call", map[string]any{"name": "task_input", "arguments": map[string]any{}, "_meta": meta()})
		var r struct {
			TaskID string `json:"taskId"`
		}
		if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.TaskID == "" {
			t.Fatalf("tools/call = %+v %s", m.Error, m.Result)
		}
		if m := c.call("tasks/get", map[string]any{"taskId": r.TaskID, "_meta": meta()}); m.Error != nil || !strings.Contains(string(m.Result), "roots/list") {
			t.Fatalf("tasks/get = %+v %s", m.Error, m.Result)
		}
		if m := c.call("tasks/update", map[string]any{"taskId": r.TaskID, "_meta": meta(), "inputResponses": map[string]any{"r": answer}}); m.Error != nil {
			t.Fatalf("tasks/update = %+v", m.Error)
		}
	}
	denied := func(rel string) bool {
		t.Helper()
		m := c.call("resources/read", map[string]any{"uri": "file://" + filepath.Join(f.base, rel), "_meta": meta()})
		return rpcErrorCode(m) == string(schema.ErrPathOutsideScope)
	}
	if denied("outside/probe.txt") {
		t.Fatal("a read inside the scope was denied before any roots answer")
	}
	// A first empty answer narrows nothing (the client has no roots yet).
	update(map[string]any{"roots": []any{}})
	if denied("outside/probe.txt") || f.up.restartCount() != 0 {
		t.Fatal("an empty first roots answer narrowed the scope")
	}
	// Roots narrow the proxy's checks and the fence; /etc is not added.
	update(rootsAnswer(allowed, "/etc"))
	if !denied("outside/probe.txt") || denied("allowed/probe.txt") || !denied("../../etc/passwd") {
		t.Fatal("a tasks/update roots answer did not narrow the proxy's checks to the root")
	}
	f.up.mu.Lock()
	restarts := f.up.restarts
	f.up.mu.Unlock()
	if len(restarts) == 0 || len(restarts[len(restarts)-1]) != 1 || restarts[len(restarts)-1][0].Path != allowed {
		t.Fatalf("fence restarts = %+v, want the last under %s only", restarts, allowed)
	}
	// A wider answer later never widens the scope back.
	update(rootsAnswer(f.base))
	if !denied("outside/probe.txt") || denied("allowed/probe.txt") {
		t.Fatal("a later, wider tasks/update roots answer widened the scope")
	}
	// A malformed roots answer (a case variant) means no roots.
	update(map[string]any{"Roots": []map[string]string{{"uri": "file://" + allowed}}})
	if !denied("allowed/probe.txt") {
		t.Fatal("a malformed tasks/update roots answer left the scope in effect")
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "resources/read" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrPathOutsideScope)
	})
}

const floodEnv = "MCPWARDEN_PROXY_TEST_FLOOD_SERVER"

// floodFrames progress notifications of floodNote bytes each (about 320
// MB in all): far more than any pipe, reader or writer buffer holds.
const (
	floodFrames = 40000
	floodNote   = 8192
)

// floodServer is a legacy server whose tool "flood" answers its call
// with floodFrames progress notifications, written one by one with
// blocking writes; a watcher reports once, in logPath+".flood", either
// "FULL <n>" — its stdout pipe holds nearly its capacity and no frame was
// written for 200 looks 5 ms apart (nobody drains it), n frames written
// whole — or "ALL" once every frame was taken.
func floodServer(logPath string) {
	var written atomic.Int64
	var once sync.Once
	mark := func(s string) {
		once.Do(func() {
			f, _ := os.OpenFile(logPath+".flood", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			fmt.Fprintln(f, s)
			f.Close()
		})
	}
	serveScript(logPath, "", func(line string, send func(string)) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Meta struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		if len(m.ID) == 0 {
			return
		}
		switch m.Method {
		case "initialize":
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"flood","version":"1"}}}`)
		case "tools/call":
			note := strings.Repeat("x", floodNote)
			frame := func(i int) []byte {
				return []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + string(m.Params.Meta.ProgressToken) + `,"progress":` + strconv.Itoa(i) + `,"message":"` + note + `"}}` + "\n")
			}
			capacity, err := unix.FcntlInt(1, unix.F_GETPIPE_SZ, 0)
			if err != nil {
				mark("ERROR " + err.Error())
				return
			}
			full := capacity - 2*len(frame(floodFrames))
			done := make(chan struct{})
			go func() {
				// Stuck: the pipe nearly full and no frame written for
				// 200 looks in a row (a proxy that reads slower than this
				// server writes fills the pipe too, but the count moves).
				last, still := int64(-1), 0
				for {
					select {
					case <-done:
						return
					case <-time.After(5 * time.Millisecond):
					}
					n, err := unix.IoctlGetInt(1, unix.TIOCINQ)
					w := written.Load()
					if err != nil || n < full || w != last {
						last, still = w, 0
						continue
					}
					if still++; still >= 200 {
						mark("FULL " + strconv.FormatInt(w, 10))
						return
					}
				}
			}()
			for i := 0; i < floodFrames; i++ {
				if _, err := os.Stdout.Write(frame(i)); err != nil {
					return
				}
				written.Add(1)
			}
			close(done)
			mark("ALL")
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"done"}]}}`)
		default:
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`)
		}
	})
}

// gatedReader passes reads through until paused; a paused read waits
// until it is released.
type gatedReader struct {
	r      io.Reader
	mu     sync.Mutex
	paused bool
	open   chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	paused, open := g.paused, g.open
	g.mu.Unlock()
	if paused {
		<-open
	}
	return g.r.Read(p)
}

func (g *gatedReader) pause() {
	g.mu.Lock()
	g.paused, g.open = true, make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedReader) release() {
	g.mu.Lock()
	if g.paused {
		g.paused = false
		close(g.open)
	}
	g.mu.Unlock()
}

// TestClientThatNeverReads: a client that stops reading while its call
// makes the server write without end. The proxy has no queue towards the
// client: its write waits, its reading of the server waits behind it, and
// the server's stdout pipe fills and stays full — the server blocks after
// a bounded number of frames, never absorbed by the proxy's memory
// (which an unbounded queue would do: all ~320 MB taken, "ALL"). The harness does not drop anything
// here: the client's reads are paused, not its buffer bounded. Guard
// (held before: blocking writes by design).
func TestClientThatNeverReads(t *testing.T) {
	logPath := t.TempDir() + "/flood.log"
	gate := &gatedReader{}
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"flood"}
			s.ToolClasses = map[string]string{"flood": "read"}
		},
		config:       func(c *Config) { c.MaxResponseBytes = 1 << 20 },
		upstream:     func(t testing.TB) *procUpstream { return startScripted(t, floodEnv+"="+logPath) },
		clientReader: func(r io.Reader) io.Reader { gate.r = r; return gate },
	})
	t.Cleanup(gate.release) // runs before the fixture's cleanup: the client drains, the proxy and server end
	c := f.client
	c.initLegacy(false)
	gate.pause()
	c.start("tools/call", map[string]any{"name": "flood", "arguments": map[string]any{}, "_meta": map[string]any{"progressToken": "p1"}})
	// Wait for the exact outcome: the server reports either that a write
	// could not complete, or that every frame was taken.
	var got string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(logPath + ".flood")
		if got = strings.TrimSpace(string(b)); got != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server reported nothing: no flood began (the call never reached it?)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(got, "FULL "))
	if !strings.HasPrefix(got, "FULL ") || err != nil {
		t.Fatalf("the server's pipe never filled behind a client that does not read: %q", got)
	}
	// What the proxy holds is what it read and could not write: at most
	// its reader's and writer's buffers and one frame, besides the pipe
	// (the kernel's). 128 frames is 1 MiB; an unbounded queue takes all
	// 40000 (~320 MB) and the pipe never stays full.
	if n > 128 {
		t.Fatalf("the server wrote %d frames (%d KiB) before its pipe filled: the proxy holds more than its buffers", n, n*floodNote/1024)
	}
	t.Logf("the server's pipe filled after %d frames of %d bytes", n, floodNote)
}

const appEnv = "MCPWARDEN_PROXY_TEST_APP_SERVER"

// appCases are the MCP App resources appServer serves: the HTML (or, for
// "blob", its base64), the content's _meta, and whether the read must
// be refused. SECRET, OUTSIDE and ALLOWED stand for the fixture's paths.
var appCases = []struct {
	name, html, meta string
	refused          bool
}{
	{"clean", `<html><img src="https://example.com/a.png"><a href="#x">x</a></html>`, "", false},
	{"inside", `<img src="file://ALLOWED/probe.txt">`, "", false},
	{"secret", `<img src="file://SECRET">`, "", true},
	{"entity", `<img src="&#102;ile://OUTSIDE">`, "", true},
	{"upper", `<link rel=stylesheet href='FILE://OUTSIDE'>`, "", true},
	{"broken", "<img src=\"fi\nle://SECRET\">", "", true},
	{"kelvin", strings.Repeat("\u212a", 8) + `<img src="file://SECRET">`, "", true},
	{"blob", `<script src="file://SECRET"></script>`, "", true},
	{"csp", `<p>hi</p>`, `{"ui":{"csp":{"resourceDomains":["file:///etc"]}}}`, true},
}

// appServer is a legacy server serving appCases as ui://app/<name>.
func appServer(logPath string) {
	secret, outside, allowed := os.Getenv(redteamSecret), os.Getenv(redteamOutside), os.Getenv(redteamAllowed)
	serveScript(logPath, "", func(line string, send func(string)) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				URI string `json:"uri"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		if len(m.ID) == 0 {
			return
		}
		result := func(v string) { send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + v + `}`) }
		switch m.Method {
		case "initialize":
			result(`{"protocolVersion":"2025-06-18","capabilities":{"resources":{}},"serverInfo":{"name":"apps","version":"1"}}`)
		case "tools/call":
			// MCP-UI: an app embedded in a tool's result.
			var p struct {
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			_ = json.Unmarshal([]byte(line), &p)
			doc := `<img src="https://example.com/a.png">`
			if p.Params.Name == "embed_bad" {
				doc = `<img src="FiLe://` + secret + `">`
			}
			b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "resource", "resource": map[string]any{"uri": "UI://app/embedded", "mimeType": "text/html", "text": doc}}}})
			result(string(b))
		case "resources/read":
			for _, c := range appCases {
				if m.Params.URI != "ui://app/"+c.name {
					continue
				}
				doc := strings.NewReplacer("SECRET", secret, "OUTSIDE", outside, "ALLOWED", allowed).Replace(c.html)
				content := map[string]any{"uri": m.Params.URI, "mimeType": "text/html;profile=mcp-app"}
				if c.name == "blob" {
					content["blob"] = base64.StdEncoding.EncodeToString([]byte(doc))
				} else {
					content["text"] = doc
				}
				if c.meta != "" {
					content["_meta"] = json.RawMessage(c.meta)
				}
				b, _ := json.Marshal(map[string]any{"contents": []any{content}})
				result(string(b))
				return
			}
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32002,"message":"Resource not found"}}`)
		default:
			send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`)
		}
	})
}

// TestAppDocumentsReferringToFiles: an MCP App's HTML (a ui:// resource a
// host renders in an iframe) that refers to a secret or a file outside
// the scope — in any spelling a browser reads, base64 in a blob, or as a
// CSP domain in its _meta — is refused (the host would load the file);
// an app referring to https or a file inside the scope is read; an app
// embedded in a tool's result (MCP-UI) is held to the same rule. Before:
// every one reached the client.
func TestAppDocumentsReferringToFiles(t *testing.T) {
	var refs []string
	for _, c := range appCases {
		refs = append(refs, "ui://app/"+c.name)
	}
	f, _ := scriptedSecretFixture(t, appEnv, "apps.log", []string{"embed_bad", "embed_ok"}, func(s *schema.Scope) { s.ResourceRefs = refs })
	c := f.client
	c.initLegacy(false)
	for _, tc := range appCases {
		m := c.call("resources/read", map[string]any{"uri": "ui://app/" + tc.name})
		code := rpcErrorCode(m)
		if tc.refused {
			if code != string(schema.ErrSecretPath) && code != string(schema.ErrPathOutsideScope) {
				t.Errorf("%s: a document referring to a file reached the client: %+v %.200s", tc.name, m.Error, m.Result)
			}
			continue
		}
		if m.Error != nil || !strings.Contains(string(m.Result), "ui://app/"+tc.name) {
			t.Errorf("%s: a clean app was refused: %+v", tc.name, m.Error)
		}
	}
	// MCP-UI: a ui: resource embedded in a tool's result.
	if r := c.tool("embed_bad", map[string]any{}); denialCode(r) != string(schema.ErrSecretPath) || strings.Contains(r.text(), ".env") && strings.Contains(r.text(), "FiLe:") {
		t.Errorf("an embedded app referring to a secret = %+v", r)
	}
	if r := c.tool("embed_ok", map[string]any{}); r.IsError {
		t.Errorf("a clean embedded app = %+v", r)
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "resources/read" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrSecretPath) && len(d.PathHashes) > 0
	})
}

// TestSearchExtglobsReachingSecrets: the real filesystem server matches
// search_files' pattern with minimatch, whose extglob groups, POSIX
// classes and leading '!' need no '*' or '?'. A pattern that reaches a
// secret in any of them is refused; a clean one is served. Before: each
// passed and the server listed keys/server.pem.
func TestSearchExtglobsReachingSecrets(t *testing.T) {
	f := newFixture(t, fixtureOpts{scope: func(s *schema.Scope) { s.AllowedPaths = []string{"allowed"} }})
	c := f.client
	c.initLegacy(false)
	allowed := filepath.Join(f.base, "allowed")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(allowed, "keys", "server.pem"): "KEY-SECRET-VALUE",
		filepath.Join(allowed, "docs", "a.md"):       "doc",
	})
	for _, args := range []map[string]any{
		{"path": allowed, "pattern": "keys/server.@(pem)"},
		{"path": allowed, "pattern": "keys/!(x)"},
		{"path": allowed, "pattern": "keys/server.[[:alpha:]]em"},
		{"path": filepath.Join(allowed, "keys"), "pattern": "!x"},
		{"path": allowed, "pattern": "keys/+(s)erver.pem"},
		{"path": allowed, "pattern": "@(keys|docs)/@(server.pem|a.md)"},
	} {
		if r := c.tool("search_files", args); denialCode(r) != string(schema.ErrSecretPath) || strings.Contains(r.text(), "server.pem") {
			t.Errorf("search_files %v = %+v", args, r)
		}
	}
	if r := c.tool("search_files", map[string]any{"path": allowed, "pattern": "docs/@(a).md"}); r.IsError || !strings.Contains(r.text(), "a.md") {
		t.Fatalf("search_files docs/@(a).md = %+v", r)
	}
}

// TestClientAnswersCarryingPaths: the client's answers to a server's
// sampling and elicitation requests — a model's resource link to a file
// outside the scope, a form value naming one or a secret — are what the
// server reads next, and are refused to the server (an error naming the
// code, recorded), in the legacy era (relayed requests) and for a modern
// client answering a legacy server's translated round; clean answers
// pass. Before: every answer reached the server as the client wrote it.
func TestClientAnswersCarryingPaths(t *testing.T) {
	outsideLink := func(f *fixture) map[string]any {
		return map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "resource_link", "uri": "file:///etc/passwd", "name": "p"}}
	}
	badForm := func(f *fixture) map[string]any {
		return map[string]any{"action": "accept", "content": map[string]any{"file": "/etc/passwd"}}
	}
	secretForm := map[string]any{"action": "accept", "content": map[string]any{"file": ".env"}}
	cleanSample := map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "CLEAN-ANSWER"}}
	cleanForm := map[string]any{"action": "accept", "content": map[string]any{"name": "Alice", "count": 3}}

	t.Run("legacy", func(t *testing.T) {
		f, _ := askingFixture(t, func(c *Config) {})
		c := f.client
		if m := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{}}, "clientInfo": map[string]string{"name": "t", "version": "1"}}); m.Error != nil {
			t.Fatal(m.Error)
		}
		c.notify("notifications/initialized", nil)
		round := func(sample, form any) string {
			t.Helper()
			ch := c.start("tools/call", map[string]any{"name": "ask2", "arguments": map[string]any{}})
			for i := 0; i < 2; i++ {
				select {
				case req := <-c.requests:
					if req.Method == "sampling/createMessage" {
						c.reply(req, sample)
					} else {
						c.reply(req, form)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the server's requests never reached the client")
				}
			}
			return decodeTool(t, c.wait(ch)).text()
		}
		got := round(outsideLink(f), badForm(f))
		if strings.Contains(got, "/etc/passwd") || strings.Count(got, "error_code") != 2 || !strings.Contains(got, string(schema.ErrPathOutsideScope)) {
			t.Fatalf("the server got %q", got)
		}
		got = round(cleanSample, secretForm)
		if !strings.Contains(got, "CLEAN-ANSWER") || strings.Contains(got, `\"file\":\".env\"`) || !strings.Contains(got, string(schema.ErrSecretPath)) {
			t.Fatalf("the server got %q", got)
		}
		if got = round(cleanSample, cleanForm); !strings.Contains(got, "CLEAN-ANSWER") || !strings.Contains(got, "Alice") || strings.Contains(got, "error_code") {
			t.Fatalf("clean answers: the server got %q", got)
		}
		f.sink.waitDecision(t, func(d schema.Decision) bool {
			return d.Method == "elicitation/create" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrPathOutsideScope) && len(d.PathHashes) > 0
		})
	})

	t.Run("modern client, translated round", func(t *testing.T) {
		f, _ := askingFixture(t, nil)
		c := f.client
		meta := metaWith("sampling", "elicitation")
		call := func(extra map[string]any) *jsonrpc.Message {
			p := map[string]any{"name": "ask2", "arguments": map[string]any{}, "_meta": meta}
			for k, v := range extra {
				p[k] = v
			}
			return c.call("tools/call", p)
		}
		play := func(sample, form any) string {
			t.Helper()
			var state string
			for i := 0; i < 4; i++ {
				extra := map[string]any{}
				m := call(extra)
				if state != "" {
					break
				}
				r := decodeRound(t, m)
				answers := map[string]any{}
				for k, req := range r.InputRequests {
					if req.Method == "sampling/createMessage" {
						answers[k] = sample
					} else {
						answers[k] = form
					}
				}
				state = r.RequestState
				for j := 0; j < 4; j++ {
					m = call(map[string]any{"requestState": state, "inputResponses": answers})
					var probe struct {
						ResultType string `json:"resultType"`
					}
					_ = json.Unmarshal(m.Result, &probe)
					if probe.ResultType != "input_required" {
						return decodeTool(t, m).text()
					}
					r = decodeRound(t, m)
					answers = map[string]any{}
					for k, req := range r.InputRequests {
						if req.Method == "sampling/createMessage" {
							answers[k] = sample
						} else {
							answers[k] = form
						}
					}
					state = r.RequestState
				}
			}
			t.Fatal("the translated call never ended")
			return ""
		}
		got := play(outsideLink(f), badForm(f))
		if strings.Contains(got, "/etc/passwd") || strings.Count(got, "error_code") != 2 || !strings.Contains(got, string(schema.ErrPathOutsideScope)) {
			t.Fatalf("the server got %q", got)
		}
		if got = play(cleanSample, cleanForm); !strings.Contains(got, "CLEAN-ANSWER") || !strings.Contains(got, "Alice") || strings.Contains(got, "error_code") {
			t.Fatalf("clean answers: the server got %q", got)
		}
	})
}

// TestModernInputAnswersCarryingPaths: a modern client's answers in a
// modern server's own input round (the real go-sdk everything-server) are
// checked before the retry is forwarded: an elicitation form value naming
// /etc/passwd or a sampling answer linking it denies the retry; the roots
// answer beside them is rewritten, not refused; clean answers pass.
// Before: the retry reached the server with the paths.
func TestModernInputAnswersCarryingPaths(t *testing.T) {
	f := rootsFixture(t)
	const tool = "test_input_required_result_multiple_inputs"
	meta := metaWith("roots", "sampling", "elicitation")
	try := func(form, sample any) *jsonrpc.Message {
		t.Helper()
		r := decodeRound(t, f.client.call("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}, "_meta": meta}))
		return f.client.call("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}, "_meta": meta, "requestState": r.RequestState,
			"inputResponses": map[string]any{"user_name": form, "greeting": sample, "client_roots": rootsAnswer("/")}})
	}
	hello := map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "Hello"}}
	if m := try(map[string]any{"action": "accept", "content": map[string]any{"name": "/etc/passwd"}}, hello); rpcErrorCode(m) != string(schema.ErrPathOutsideScope) && denialCode(decodeTool(t, m)) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("a form value naming /etc/passwd = %+v %s", m.Error, m.Result)
	}
	link := map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "resource_link", "uri": "file:///etc/passwd", "name": "p"}}
	if m := try(map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}, link); rpcErrorCode(m) != string(schema.ErrPathOutsideScope) && denialCode(decodeTool(t, m)) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("a sampling answer linking /etc/passwd = %+v %s", m.Error, m.Result)
	}
	if res := decodeTool(t, try(map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}, hello)); res.text() != "Hello Ada — 1 root(s) visible" {
		t.Fatalf("clean answers = %q", res.text())
	}
}
