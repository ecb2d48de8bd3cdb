package proxy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// metaWith is modern _meta declaring the given client capabilities.
func metaWith(caps ...string) map[string]any {
	m := modernMeta()
	c := map[string]any{}
	for _, k := range caps {
		c[k] = map[string]any{}
	}
	m["io.modelcontextprotocol/clientCapabilities"] = c
	return m
}

// inputRound is an input_required result.
type inputRound struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"inputRequests"`
	RequestState string `json:"requestState"`
}

func decodeRound(t testing.TB, m *jsonrpc.Message) inputRound {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("expected an input_required result, got error %d %s", m.Error.Code, m.Error.Message)
	}
	var r inputRound
	if err := json.Unmarshal(m.Result, &r); err != nil || r.ResultType != "input_required" {
		t.Fatalf("expected an input_required result, got %s", m.Result)
	}
	return r
}

// onlyKey is the one input request of a round, which must be method.
func (r inputRound) onlyKey(t testing.TB, method string) string {
	t.Helper()
	if len(r.InputRequests) != 1 {
		t.Fatalf("round asks %d inputs, want 1: %+v", len(r.InputRequests), r.InputRequests)
	}
	for k, v := range r.InputRequests {
		if v.Method != method {
			t.Fatalf("round asks %s, want %s", v.Method, method)
		}
		return k
	}
	return ""
}

func everythingJSFixture(t *testing.T, tools ...string) *fixture {
	js := fencetest.PinnedServer(t, "server-everything")
	return newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) { s.ToolAllowlist = tools },
		upstream: func(t testing.TB) *procUpstream {
			return startUpstream(t, nil, "node", js, "stdio")
		},
	})
}

// TestModernClientLegacyServerSampling: server-everything (legacy only)
// asks the client for sampling in the middle of a call; the modern client
// gets it as an input_required round and its answer reaches the server.
func TestModernClientLegacyServerSampling(t *testing.T) {
	f := everythingJSFixture(t, "trigger-sampling-request", "trigger-elicitation-request", "echo")
	c := f.client
	meta := metaWith("sampling", "elicitation")
	args := map[string]any{"prompt": "say hi", "maxTokens": 20}
	first := c.call("tools/call", map[string]any{"name": "trigger-sampling-request", "arguments": args, "_meta": meta})
	round := decodeRound(t, first)
	key := round.onlyKey(t, "sampling/createMessage")
	if !strings.HasPrefix(round.RequestState, translatedStatePrefix) || !strings.Contains(string(round.InputRequests[key].Params), "say hi") {
		t.Fatalf("round = %+v", round)
	}
	answer := map[string]any{key: map[string]any{"role": "assistant", "model": "test-model", "content": map[string]any{"type": "text", "text": "HELLO-FROM-CLIENT"}}}
	final := decodeTool(t, c.call("tools/call", map[string]any{"name": "trigger-sampling-request", "arguments": args, "_meta": meta, "inputResponses": answer, "requestState": round.RequestState}))
	if final.IsError || !strings.Contains(final.text(), "HELLO-FROM-CLIENT") {
		t.Fatalf("final answer = %+v", final)
	}
	var env map[string]json.RawMessage
	_ = json.Unmarshal(c.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"message": "x"}, "_meta": meta}).Result, &env)
	if string(env["resultType"]) != `"complete"` {
		t.Fatalf("a plain call after the round = %v", env)
	}
	// A round is used once.
	again := c.call("tools/call", map[string]any{"name": "trigger-sampling-request", "arguments": args, "_meta": meta, "inputResponses": answer, "requestState": round.RequestState})
	if again.Error == nil || again.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a replayed requestState = %+v, want -32602", again)
	}
	// One decision record for the call, for all its rounds.
	time.Sleep(50 * time.Millisecond)
	n := 0
	for _, d := range f.sink.decisions() {
		if d.Tool == "trigger-sampling-request" {
			n++
			if d.Decision != "allow" || d.ProtocolEra != "modern" {
				t.Fatalf("record = %+v", d)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d decision records for the call, want 1", n)
	}

	// Elicitation: declined by the client, as the server sees it.
	first = c.call("tools/call", map[string]any{"name": "trigger-elicitation-request", "arguments": map[string]any{}, "_meta": meta})
	round = decodeRound(t, first)
	key = round.onlyKey(t, "elicitation/create")
	final = decodeTool(t, c.call("tools/call", map[string]any{"name": "trigger-elicitation-request", "arguments": map[string]any{}, "_meta": meta,
		"inputResponses": map[string]any{key: map[string]any{"action": "decline"}}, "requestState": round.RequestState}))
	if !strings.Contains(final.text(), "declined") {
		t.Fatalf("elicitation answer = %+v", final)
	}
}

const (
	askingEnv       = "MCPWARDEN_PROXY_TEST_ASKING_SERVER"
	askingModernEnv = "MCPWARDEN_PROXY_TEST_ASKING_MODERN" // the asking server answers server/discover
)

// askingServer is a legacy server whose tools ask the client for input:
// "ask" sends one sampling request and answers with what it got; "ask2"
// sends a sampling and an elicitation at once; "flood" sends 20; "quick"
// sends one and answers the call at once without waiting. During
// tools/list it sends an elicitation that belongs to no call. Every line
// it receives is appended to the log file.
func askingServer(logPath string) {
	type waiting struct {
		id      string
		pending map[string]bool
		got     []string
	}
	var calls []*waiting
	n := 0
	serveScript(logPath, "", func(line string, sendFrame func(string)) {
		send := func(format string, a ...any) { sendFrame(fmt.Sprintf(format, a...)) }
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		id := string(m.ID)
		ask := func(w *waiting, method string) {
			n++
			sid := fmt.Sprintf(`"s-%d"`, n)
			w.pending[sid] = true
			send(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":{"message":"q%d","messages":[],"maxTokens":5,"requestedSchema":{"type":"object","properties":{}}}}`, sid, method, n)
		}
		switch {
		case m.Method == "server/discover" && os.Getenv(askingModernEnv) != "":
			send(`{"jsonrpc":"2.0","id":%s,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"asking","version":"1"}}}}`, id)
		case m.Method == "tools/call" && m.Params.Name == "rootsround":
			// A modern server's roots round whose own state looks like the
			// proxy's tag (a round number it never issued); the retry is
			// answered with the state and the roots it carries.
			var p struct {
				Params struct {
					InputResponses json.RawMessage `json:"inputResponses"`
					RequestState   json.RawMessage `json:"requestState"`
				} `json:"params"`
			}
			_ = json.Unmarshal([]byte(line), &p)
			if p.Params.InputResponses == nil {
				send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"input_required","inputRequests":{"r":{"method":"roots/list"}},"requestState":"mcpwarden.r1.forged.999.W10"}}`, id)
				return
			}
			text, _ := json.Marshal("state=" + string(p.Params.RequestState) + " roots=" + string(p.Params.InputResponses))
			send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[{"type":"text","text":%s}]}}`, id, text)
		case m.Method == "initialize":
			send(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"asking","version":"1"}}}`, id)
		case m.Method == "tools/list":
			send(`{"jsonrpc":"2.0","id":"unsolicited","method":"elicitation/create","params":{"message":"no call","requestedSchema":{"type":"object","properties":{}}}}`)
			send(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"ask","inputSchema":{"type":"object"}}]}}`, id)
		case m.Method == "tools/call":
			w := &waiting{id: id, pending: map[string]bool{}}
			switch m.Params.Name {
			case "ask":
				ask(w, "sampling/createMessage")
			case "ask2":
				ask(w, "sampling/createMessage")
				ask(w, "elicitation/create")
			case "flood":
				for i := 0; i < 20; i++ {
					ask(w, "sampling/createMessage")
				}
			case "deluge":
				for i := 0; i < maxRelayed+10; i++ {
					ask(w, "sampling/createMessage")
				}
			case "refusals":
				// Requests the proxy refuses, as fast as the pipe takes them
				// (TestRefusalFloodBounded); the call's answer comes last.
				for i := 0; i < 200; i++ {
					send(`{"jsonrpc":"2.0","id":"r-%d","method":"evil/flood","params":{}}`, i)
				}
				for i := 0; i < 100; i++ {
					send(`{"jsonrpc":"2.0","id":"q-%d","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}`, i)
				}
				for i := 0; i < 40; i++ {
					send(`{"jsonrpc":"2.0","id":"m-%d","method":"evil/m-%d","params":{}}`, i, i)
				}
				send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"REFUSED-ALL"}]}}`, id)
				return
			case "big":
				n++
				w.pending[`"s-big"`] = true
				send(`{"jsonrpc":"2.0","id":"s-big","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5,"systemPrompt":%q}}`, strings.Repeat("x", 5000))
			case "quick":
				ask(w, "sampling/createMessage")
				send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"QUICK"}]}}`, id)
				return
			default:
				send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"PLAIN"}]}}`, id)
				return
			}
			calls = append(calls, w)
		case m.Method == "" && id != "":
			for i, w := range calls {
				if !w.pending[id] {
					continue
				}
				delete(w.pending, id)
				w.got = append(w.got, line)
				if len(w.pending) == 0 {
					text, _ := json.Marshal(strings.Join(w.got, "\n"))
					send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}`, w.id, text)
					calls = append(calls[:i], calls[i+1:]...)
				}
				break
			}
		case id != "" && m.Method != "":
			send(`{"jsonrpc":"2.0","id":%s,"result":{}}`, id)
		}
	})
}

func askingFixture(t *testing.T, config func(*Config), env ...string) (*fixture, string) {
	logPath := filepath.Join(t.TempDir(), "asking.log")
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"ask", "ask2", "flood", "deluge", "quick", "big", "plain", "rootsround", "refusals"}
		},
		config: config,
		upstream: func(t testing.TB) *procUpstream {
			return startScripted(t, append([]string{askingEnv + "=" + logPath}, env...)...)
		},
	})
	return f, logPath
}

// waitLog waits until the server's log holds a line containing all of want.
func waitLog(t *testing.T, logPath string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		log, _ := os.ReadFile(logPath)
		for _, line := range strings.Split(string(log), "\n") {
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			if all {
				return line
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	log, _ := os.ReadFile(logPath)
	t.Fatalf("the server never received a line with %q:\n%s", want, log)
	return ""
}

// TestTranslatedInputAttacks: a client or a server that tries to use the
// translated rounds for more than answering the server's own questions.
func TestTranslatedInputAttacks(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	c := f.client
	meta := metaWith("sampling", "elicitation")
	call := func(name string, extra map[string]any) *jsonrpc.Message {
		p := map[string]any{"name": name, "arguments": map[string]any{"n": 1}, "_meta": meta}
		for k, v := range extra {
			p[k] = v
		}
		return c.call("tools/call", p)
	}
	sampled := map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "ANSWER-1"}}
	answers := func(r inputRound) map[string]any {
		out := map[string]any{}
		for k, req := range r.InputRequests {
			if req.Method == "elicitation/create" {
				out[k] = map[string]any{"action": "accept", "content": map[string]any{}}
			} else {
				out[k] = sampled
			}
		}
		return out
	}

	// The server's request that belongs to no call is refused: the modern
	// client declared nothing in a handshake and has no call in flight.
	if tl := c.call("tools/list", map[string]any{"_meta": meta}); tl.Error != nil {
		t.Fatalf("tools/list: %v", tl.Error)
	}
	waitLog(t, logPath, `"id":"unsolicited"`, "-32601")

	// Another call's arguments with a valid requestState: refused, and the
	// round stays valid for its own call.
	round := decodeRound(t, call("ask", nil))
	key := round.onlyKey(t, "sampling/createMessage")
	wrong := c.call("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{"n": 2}, "_meta": meta,
		"inputResponses": map[string]any{key: sampled}, "requestState": round.RequestState})
	if wrong.Error == nil || wrong.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a retry with other arguments = %+v, want -32602", wrong)
	}
	other := c.call("tools/call", map[string]any{"name": "ask2", "arguments": map[string]any{"n": 1}, "_meta": meta,
		"inputResponses": map[string]any{key: sampled}, "requestState": round.RequestState})
	if other.Error == nil || other.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a retry of another tool = %+v, want -32602", other)
	}
	// A retry that answers nothing, or answers keys that were never asked,
	// or answers with a non-object, is asked again under a new state.
	again := decodeRound(t, call("ask", map[string]any{"requestState": round.RequestState,
		"inputResponses": map[string]any{"input-99": sampled, key: "not an object"}}))
	if again.onlyKey(t, "sampling/createMessage") != key || again.RequestState == round.RequestState {
		t.Fatalf("re-asked round = %+v", again)
	}
	final := decodeTool(t, call("ask", map[string]any{"requestState": again.RequestState, "inputResponses": map[string]any{key: sampled}}))
	if !strings.Contains(final.text(), "ANSWER-1") || strings.Contains(final.text(), "input-99") {
		t.Fatalf("final = %q", final.text())
	}
	// A forged state of the proxy's form is refused; the server never sees it.
	forged := call("ask", map[string]any{"requestState": translatedStatePrefix + schema.NewID(), "inputResponses": map[string]any{key: sampled}})
	if forged.Error == nil || forged.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("forged requestState = %+v", forged)
	}
	log, _ := os.ReadFile(logPath)
	if strings.Contains(string(log), "inputResponses") || strings.Contains(string(log), "requestState") {
		t.Fatalf("a translated retry reached the server:\n%s", log)
	}

	// Two requests at once: each reaches the client (the second in the
	// next round when it came after the first round was sent), each answer
	// goes to its own request.
	state := ""
	asked := map[string]bool{}
	var last toolResult
	for i := 0; i < 3; i++ {
		extra := map[string]any{}
		if state != "" {
			extra["requestState"] = state
			extra["inputResponses"] = answers(round)
		}
		m := call("ask2", extra)
		var probe struct {
			ResultType string `json:"resultType"`
		}
		_ = json.Unmarshal(m.Result, &probe)
		if probe.ResultType != "input_required" {
			last = decodeTool(t, m)
			break
		}
		round = decodeRound(t, m)
		for _, r := range round.InputRequests {
			asked[r.Method] = true
		}
		state = round.RequestState
	}
	if !asked["sampling/createMessage"] || !asked["elicitation/create"] ||
		!strings.Contains(last.text(), "ANSWER-1") || !strings.Contains(last.text(), `"action":"accept"`) {
		t.Fatalf("ask2: asked %v, final %q", asked, last.text())
	}

	// The server answers the call before the client retries: the answer
	// waits for the retry and goes to it.
	round = decodeRound(t, call("quick", nil))
	key = round.onlyKey(t, "sampling/createMessage")
	final = decodeTool(t, call("quick", map[string]any{"requestState": round.RequestState, "inputResponses": map[string]any{key: sampled}}))
	if final.text() != "QUICK" {
		t.Fatalf("quick final = %q", final.text())
	}
	// A flood: at most 16 requests per call reach the client. (Last: the
	// call stays in flight, and a server request on stdio names no call,
	// so later requests would be taken as the oldest call's.)
	round = decodeRound(t, call("flood", nil))
	if len(round.InputRequests) == 0 || len(round.InputRequests) > maxAsksPerCall {
		t.Fatalf("flood round has %d requests", len(round.InputRequests))
	}
	waitLog(t, logPath, "too many requests to the client")

	select {
	case m := <-c.stray:
		t.Fatalf("a stray answer reached the client: %s", m.ID)
	default:
	}
}

// TestTranslatedInputNeedsCapability: a modern client that did not declare
// sampling never sees the server's sampling request; the server gets -32601.
func TestTranslatedInputNeedsCapability(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	r := decodeTool(t, f.client.call("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}, "_meta": metaWith("elicitation")}))
	if !strings.Contains(r.text(), "-32601") {
		t.Fatalf("call = %q, want the server to have got -32601", r.text())
	}
	waitLog(t, logPath, `"id":"s-1"`, "-32601")
}

// TestTranslatedInputCapped: a server request larger than the response cap
// never reaches the client; the server gets an error.
func TestTranslatedInputCapped(t *testing.T) {
	f, logPath := askingFixture(t, func(c *Config) { c.MaxResponseBytes = 4096 })
	r := decodeTool(t, f.client.call("tools/call", map[string]any{"name": "big", "arguments": map[string]any{}, "_meta": metaWith("sampling")}))
	if !strings.Contains(r.text(), "response cap") {
		t.Fatalf("call = %q, want the server to have got the cap error", r.text())
	}
	waitLog(t, logPath, `"id":"s-big"`, "response cap")
}

// TestTranslatedInputExpires: a round the client never answers ends; the
// server's request gets an error and the call is recorded.
func TestTranslatedInputExpires(t *testing.T) {
	f, logPath := askingFixture(t, func(c *Config) { c.InputTimeout = 200 * time.Millisecond })
	round := decodeRound(t, f.client.call("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}, "_meta": metaWith("sampling")}))
	waitLog(t, logPath, `"id":"s-1"`, "the client did not answer")
	f.sink.waitDecision(t, func(d schema.Decision) bool { return d.Tool == "ask" && d.Decision == "allow" })
	late := f.client.call("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}, "_meta": metaWith("sampling"), "requestState": round.RequestState})
	if late.Error == nil || late.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a retry after expiry = %+v", late)
	}
}

// rootsFixture is go-sdk's everything-server (modern) behind the proxy,
// with the whole base as the scope.
func rootsFixture(t *testing.T) *fixture {
	bin := everythingServer(t)
	return newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"test_input_required_result_list_roots", "test_input_required_result_multiple_inputs"}
			s.ToolClasses = map[string]string{"test_input_required_result_list_roots": "read", "test_input_required_result_multiple_inputs": "read"}
		},
		upstream: func(t testing.TB) *procUpstream { return startUpstream(t, nil, bin) },
	})
}

const listRoots = "test_input_required_result_list_roots"

// rootsRound asks the server for a roots round.
func rootsRound(t *testing.T, f *fixture) inputRound {
	t.Helper()
	r := decodeRound(t, f.client.call("tools/call", map[string]any{"name": listRoots, "arguments": map[string]any{}, "_meta": metaWith("roots")}))
	if r.onlyKey(t, "roots/list") != "client_roots" || !strings.HasPrefix(r.RequestState, rootsStatePrefix) {
		t.Fatalf("roots round = %+v", r)
	}
	return r
}

// answerRoots retries the round with answer as client_roots and returns
// the roots the server saw.
func answerRoots(t *testing.T, f *fixture, r inputRound, answer any) string {
	t.Helper()
	res := decodeTool(t, f.client.call("tools/call", map[string]any{"name": listRoots, "arguments": map[string]any{}, "_meta": metaWith("roots"),
		"inputResponses": map[string]any{"client_roots": answer}, "requestState": r.RequestState}))
	if !strings.HasPrefix(res.text(), "Client exposed") {
		t.Fatalf("retry = %q", res.text())
	}
	return res.text()
}

// readDenied reports whether the proxy refuses resources/read of a file
// under the base as outside the effective scope (an allowed read reaches
// the server, which answers as it does).
func readDenied(t *testing.T, f *fixture, rel string) bool {
	t.Helper()
	m := f.client.call("resources/read", map[string]any{"uri": "file://" + filepath.Join(f.base, rel), "_meta": metaWith("roots")})
	return rpcErrorCode(m) == string(schema.ErrPathOutsideScope)
}

// TestModernRootsNarrowProxyChecks: a modern client's roots, answered in
// inputResponses to a modern server's roots round, narrow the proxy's own
// checks with the legacy rules.
func TestModernRootsNarrowProxyChecks(t *testing.T) {
	f := rootsFixture(t)
	allowed := filepath.Join(f.base, "allowed")
	if readDenied(t, f, "outside/probe.txt") {
		t.Fatal("a read inside the scope was denied before any roots answer")
	}
	// A first answer that is empty narrows nothing (the client declares
	// roots but has none); the server sees no roots, as direct.
	if seen := answerRoots(t, f, rootsRound(t, f), map[string]any{"roots": []any{}}); !strings.Contains(seen, "0 root(s)") {
		t.Fatalf("server saw %q", seen)
	}
	if readDenied(t, f, "outside/probe.txt") || f.up.restartCount() != 0 {
		t.Fatal("an empty first roots answer narrowed the scope")
	}
	// Roots narrow: only the root inside the scope counts; the server sees
	// the effective scope, never /etc; the fence is narrowed too.
	seen := answerRoots(t, f, rootsRound(t, f), rootsAnswer(allowed, "/etc"))
	if !strings.Contains(seen, "1 root(s)") || !strings.Contains(seen, "file://"+allowed) || strings.Contains(seen, "/etc") {
		t.Fatalf("server saw %q", seen)
	}
	if !readDenied(t, f, "outside/probe.txt") || readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("the roots answer did not narrow the proxy's checks to the root")
	}
	f.up.mu.Lock()
	restarts := f.up.restarts
	f.up.mu.Unlock()
	if len(restarts) == 0 || len(restarts[len(restarts)-1]) != 1 || restarts[len(restarts)-1][0].Path != allowed {
		t.Fatalf("fence restarts = %+v, want the last under %s only", restarts, allowed)
	}
	// Some roots → none revokes everything; an answer to an older round
	// that arrives later never restores access.
	older, newer := rootsRound(t, f), rootsRound(t, f)
	answerRoots(t, f, newer, map[string]any{"roots": []any{}})
	if !readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("an empty answer after roots did not revoke")
	}
	if seen := answerRoots(t, f, older, rootsAnswer(allowed)); !strings.Contains(seen, "0 root(s)") {
		t.Fatalf("a stale answer reached the server as %q", seen)
	}
	if !readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("a stale roots answer restored access")
	}
	// A replay of the newer round's state with roots: not newer than the
	// answer in effect, so it does not restore either.
	answerRoots(t, f, newer, rootsAnswer(allowed))
	if !readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("a replayed round restored access")
	}
	// A forged round number of this session: never issued, never applied.
	parts := strings.Split(strings.TrimPrefix(newer.RequestState, rootsStatePrefix), ".")
	forged := newer
	forged.RequestState = rootsStatePrefix + parts[0] + ".999." + parts[2]
	answerRoots(t, f, forged, rootsAnswer(allowed))
	if !readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("a forged round restored access")
	}
	// A newer round may name roots again (as a legacy client may after
	// notifications/roots/list_changed).
	answerRoots(t, f, rootsRound(t, f), rootsAnswer(allowed))
	if readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("a newer answer did not restore the root")
	}
}

// TestModernRootsNeverWiden: answers shaped to slip the client's roots to
// the server (a case variant of "roots", a roots answer under another
// key) reach it only as the effective scope narrowed by them.
func TestModernRootsNeverWiden(t *testing.T) {
	f := rootsFixture(t)
	// go-sdk reads {"Roots": …} as roots (encoding/json folds case).
	seen := answerRoots(t, f, rootsRound(t, f), map[string]any{"Roots": []map[string]string{{"uri": "file:///etc", "name": "etc"}}})
	if strings.Contains(seen, "/etc") {
		t.Fatalf("a case-variant roots answer reached the server: %q", seen)
	}
	// It named a root outside the scope: nothing is left.
	if !readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("a roots answer naming only a root outside the scope did not revoke")
	}
	// A round that also asks other inputs: those pass as they are, the
	// roots answer is narrowed to the scope.
	m := f.client.call("tools/call", map[string]any{"name": "test_input_required_result_multiple_inputs", "arguments": map[string]any{}, "_meta": metaWith("roots", "sampling", "elicitation")})
	r := decodeRound(t, m)
	if !strings.HasPrefix(r.RequestState, rootsStatePrefix) || len(r.InputRequests) != 3 {
		t.Fatalf("multiple-inputs round = %+v", r)
	}
	answers := map[string]any{
		"user_name":    map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}},
		"greeting":     map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "Hello"}},
		"client_roots": rootsAnswer("/", "/etc"),
	}
	res := decodeTool(t, f.client.call("tools/call", map[string]any{"name": "test_input_required_result_multiple_inputs", "arguments": map[string]any{},
		"_meta": metaWith("roots", "sampling", "elicitation"), "inputResponses": answers, "requestState": r.RequestState}))
	// "/" covers the scope: the server sees the scope, one root.
	if res.text() != "Hello Ada — 1 root(s) visible" {
		t.Fatalf("multiple inputs = %q", res.text())
	}
}

// FuzzRootsState: a tagged requestState round-trips, and whatever a client
// sends in its place never parses to a server state that is not valid JSON.
func FuzzRootsState(f *testing.F) {
	f.Add("0123abcd", uint64(7), []byte(`"multiple_inputs"`), "mcpwarden.r1.x.1.IiI")
	f.Add("n", uint64(0), []byte(nil), "mcpwarden.r1.n.1.bXVsdGlwbGVfaW5wdXRz-TAMPERED")
	f.Add("n", uint64(1), []byte(`{"a":[1,2]}`), "mcpwarden.r1...")
	f.Fuzz(func(t *testing.T, nonce string, gen uint64, own []byte, sent string) {
		if !strings.Contains(nonce, ".") && (len(own) == 0 || strictjson.Unmarshal(own, new(any)) == nil) {
			n, g, o, ok := parseRootsState(rootsState(nonce, gen, own))
			if !ok || n != nonce || g != gen || string(o) != string(own) {
				t.Fatalf("round trip: got (%q, %d, %q, %v), want (%q, %d, %q)", n, g, o, ok, nonce, gen, own)
			}
		}
		if _, _, o, ok := parseRootsState(sent); ok && len(o) > 0 && !json.Valid(o) {
			t.Fatalf("parsed %q to a server state that is not JSON: %q", sent, o)
		}
	})
}

// TestLegacyInputResponsesRewritten: a legacy-era call that carries
// inputResponses of its own (go-sdk's client does, on a legacy connection)
// reaches the server, its roots answers replaced by the effective scope.
func TestLegacyInputResponsesRewritten(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	f.client.initLegacy(false)
	allowed := filepath.Join(f.base, "allowed")
	r := f.client.tool("plain", map[string]any{})
	if r.text() != "PLAIN" {
		t.Fatalf("plain = %q", r.text())
	}
	m := f.client.call("tools/call", map[string]any{"name": "plain", "arguments": map[string]any{},
		"inputResponses": map[string]any{
			"j": map[string]any{"roots": []map[string]string{{"uri": "file:///etc"}, {"uri": "file://" + allowed}}},
			// A case variant is a roots answer to a case-folding server
			// (go-sdk), and to the proxy's strict reader an answer with no
			// roots: the server gets none.
			"k": map[string]any{"ROOTS": []map[string]string{{"uri": "file:///etc"}, {"uri": "file://" + allowed}}}},
		"requestState": "round=2"})
	if decodeTool(t, m).text() != "PLAIN" {
		t.Fatalf("call = %s", m.Result)
	}
	line := waitLog(t, logPath, `"inputResponses"`)
	if strings.Contains(line, "/etc") || !strings.Contains(line, `"j":{"roots":[{"uri":"file://`+allowed) || !strings.Contains(line, `"k":{"roots":[]}`) ||
		!strings.Contains(line, `"requestState":"round=2"`) {
		t.Fatalf("the server received %s", line)
	}
}

// TestModernRootsServerCannotSteer: a modern server whose own state looks
// like the proxy's tag (another session, a round never issued) does not
// choose the round: the proxy tags the round itself, the client's answer
// narrows the proxy's checks, and the server gets its own state back
// byte for byte and the client's roots only as the effective scope.
func TestModernRootsServerCannotSteer(t *testing.T) {
	f, _ := askingFixture(t, nil, askingModernEnv+"=1")
	c := f.client
	meta := metaWith("roots")
	r := decodeRound(t, c.call("tools/call", map[string]any{"name": "rootsround", "arguments": map[string]any{}, "_meta": meta}))
	nonce, gen, own, ok := parseRootsState(r.RequestState)
	if r.onlyKey(t, "roots/list") != "r" || !ok || nonce == "forged" || gen == 999 || string(own) != `"mcpwarden.r1.forged.999.W10"` {
		t.Fatalf("round = %+v: want the proxy's own tag around the server's state", r)
	}
	allowed := filepath.Join(f.base, "allowed")
	res := decodeTool(t, c.call("tools/call", map[string]any{"name": "rootsround", "arguments": map[string]any{}, "_meta": meta,
		"inputResponses": map[string]any{"r": rootsAnswer(allowed, "/etc")}, "requestState": r.RequestState}))
	want := `state="mcpwarden.r1.forged.999.W10" roots={"r":{"roots":[{"uri":"file://` + allowed
	if !strings.HasPrefix(res.text(), want) || strings.Contains(res.text(), "/etc") {
		t.Fatalf("the server saw %q, want its own state and the scope-narrowed roots", res.text())
	}
	if !readDenied(t, f, "outside/probe.txt") || readDenied(t, f, "allowed/probe.txt") {
		t.Fatal("the client's answer to the proxy's round did not narrow the proxy's checks")
	}
}
