package proxy

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestIDKey(t *testing.T) {
	same := [][]string{
		{`7`, `7.0`, `7e0`, `70e-1`, `0.7e1`, ` 7 `},
		{`0`, `-0`, `0.0`, `0e5`},
		{`-12`, `-12.00`, `-1.2e1`},
		{`"a"`, `"\u0061"`},
		{`"7"`, `"\u0037"`},
		{`123456789012345678901234567890`, `1.23456789012345678901234567890e29`},
	}
	for _, group := range same {
		for _, id := range group[1:] {
			if idKey(json.RawMessage(id)) != idKey(json.RawMessage(group[0])) {
				t.Errorf("idKey(%s) = %q, want the key of %s (%q)", id, idKey(json.RawMessage(id)), group[0], idKey(json.RawMessage(group[0])))
			}
		}
	}
	differ := [][2]string{
		{`7`, `"7"`},
		{`1`, `"1.0"`},
		{`123456789012345678901234567890`, `123456789012345678901234567891`},
		{`0.1`, `0.10000000000000000000000000000000000000000000000000000000000001`},
		{`1e999999999`, `1e999999998`},
		{`"a"`, `"A"`},
	}
	for _, d := range differ {
		if idKey(json.RawMessage(d[0])) == idKey(json.RawMessage(d[1])) {
			t.Errorf("idKey(%s) == idKey(%s) = %q: distinct ids", d[0], d[1], idKey(json.RawMessage(d[0])))
		}
	}
}

// upstreamIDs are the proxy's ids of the tools/call frames of tool name
// in the scripted server's log, in order.
func upstreamIDs(t *testing.T, logPath, name string) []string {
	t.Helper()
	log, _ := os.ReadFile(logPath)
	var ids []string
	for _, line := range strings.Split(string(log), "\n") {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Method == "tools/call" && m.Params.Name == name {
			ids = append(ids, string(m.ID))
		}
	}
	return ids
}

func wantInvalidRequest(t *testing.T, what string, m *jsonrpc.Message) {
	t.Helper()
	if m.Error == nil || m.Error.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(m.Error.Message, "in flight") {
		t.Fatalf("%s = %+v (result %s), want -32600 naming the id in flight", what, m.Error, m.Result)
	}
}

// TestDuplicateInFlightIDs: a legacy client sends a request with the id of
// one still in flight, in every spelling of that id. JSON-RPC forbids it:
// the second is refused (-32600) and recorded, never forwarded, and the
// first is untouched — its answer arrives, a cancellation names it, and
// the id is free again once it is answered.
func TestDuplicateInFlightIDs(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	c := f.client
	if res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"sampling": map[string]any{}},
		"clientInfo": map[string]string{"name": "test", "version": "1"}}); res.Error != nil {
		t.Fatalf("initialize: %v", res.Error)
	}
	c.notify("notifications/initialized", nil)

	first := c.expect("7")
	c.sendRaw(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ask","arguments":{}}}`)
	ask := c.nextRequest("sampling/createMessage") // the call is in flight, waiting for the client

	// The same id again: the answer is the refusal (the first call's waiter
	// gets it: the client cannot tell them apart, which is why it is refused).
	c.sendRaw(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"plain","arguments":{}}}`)
	wantInvalidRequest(t, "a second tools/call with id 7", c.wait(first))
	for _, dup := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":7,"method":"no/such/method"}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"plain","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
	} {
		ch := c.expect("7")
		c.sendRaw(dup)
		wantInvalidRequest(t, dup, c.wait(ch))
	}
	for _, id := range []string{`7.0`, `7e0`, `70e-1`} {
		ch := c.expect(id)
		c.sendRaw(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"plain","arguments":{}}}`)
		wantInvalidRequest(t, "id "+id, c.wait(ch))
	}
	// "7" is another id (a string), and passes.
	str := c.expect(`"7"`)
	c.sendRaw(`{"jsonrpc":"2.0","id":"7","method":"tools/call","params":{"name":"plain","arguments":{}}}`)
	if r := decodeTool(t, c.wait(str)); r.text() != "PLAIN" {
		t.Fatalf(`call with id "7" = %q`, r.text())
	}
	if n := len(upstreamIDs(t, logPath, "plain")); n != 1 {
		t.Fatalf("the server saw %d plain calls, want 1 (only the one with a free id)", n)
	}

	// A cancellation of 7 names the first call, the only one in flight.
	asks := upstreamIDs(t, logPath, "ask")
	if len(asks) != 1 {
		t.Fatalf("ask calls upstream = %v", asks)
	}
	real := c.expect("7")
	// (Its reason is no string: a member the schema does not have is
	// never forwarded — round eleven; before, the object reached the
	// server unchecked.)
	c.notify("notifications/cancelled", map[string]any{"requestId": 7, "reason": map[string]any{"path": "/etc/passwd"}, "path": "/etc/shadow"})
	if cancelled := waitLog(t, logPath, `"notifications/cancelled"`); !regexp.MustCompile(`"requestId":` + asks[0] + `[,}]`).MatchString(cancelled) {
		t.Fatalf("the cancellation of 7 reached the server as %s, want the first call's id %s", cancelled, asks[0])
	} else if strings.Contains(cancelled, "/etc/") {
		t.Fatalf("the cancellation reached the server as %s: a reason that is no string, or another member, was forwarded", cancelled)
	}
	c.reply(ask, map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "SAMPLED"}})
	if r := decodeTool(t, c.wait(real)); !strings.Contains(r.text(), "SAMPLED") {
		t.Fatalf("the first call's answer = %q", r.text())
	}
	// Answered: 7 may be used again.
	again := c.expect("7")
	c.sendRaw(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"plain","arguments":{}}}`)
	if r := decodeTool(t, c.wait(again)); r.text() != "PLAIN" {
		t.Fatalf("id 7 reused after its answer = %q", r.text())
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "tools/call" && d.ErrorCode == string(schema.ErrMalformedRequest) && d.Decision == schema.OutcomeDeny
	})
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "ping" && d.ErrorCode == string(schema.ErrMalformedRequest)
	})
}

// TestDuplicateIDsTranslatedRounds: a modern client's translated call
// (mrtr.go) is answered once per round, so its id is free once a round is
// out: a retry under the same id, and a new call under an answered
// round's id, pass; a cancellation of that id names the new call, not the
// translated one still running upstream; a third request under the id of
// the new call, still in flight, is refused.
func TestDuplicateIDsTranslatedRounds(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	c := f.client
	meta := metaWith("sampling")
	sampled := map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "ANSWER-R"}}
	send := func(id, name string, extra map[string]any) chan *jsonrpc.Message {
		p := map[string]any{"name": name, "arguments": map[string]any{}, "_meta": meta}
		for k, v := range extra {
			p[k] = v
		}
		ch := c.expect(id)
		c.sendRaw(string(jsonrpc.Request(json.RawMessage(id), "tools/call", p)))
		return ch
	}

	// Round 1 answers request 5: 5 is free, and the retry may reuse it.
	round := decodeRound(t, c.wait(send("5", "ask", nil)))
	key := round.onlyKey(t, "sampling/createMessage")
	if r := decodeTool(t, c.wait(send("5", "ask", map[string]any{"requestState": round.RequestState, "inputResponses": map[string]any{key: sampled}}))); !strings.Contains(r.text(), "ANSWER-R") {
		t.Fatalf("retry under the round's id = %q", r.text())
	}

	// A translated call waits upstream for its round's retry (request 8 was
	// answered by the round); a new call reuses 8 and stays in flight (its
	// server request waits behind the older call's round).
	held := decodeRound(t, c.wait(send("8", "ask", nil)))
	heldKey := held.onlyKey(t, "sampling/createMessage")
	_ = send("8", "ask", nil) // its waiter is taken by the refusal below
	var asks []string
	for deadline := time.Now().Add(2 * time.Minute); len(asks) < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		asks = upstreamIDs(t, logPath, "ask")
	}
	if len(asks) != 3 {
		t.Fatalf("ask calls upstream = %v", asks)
	}
	dup := send("8", "plain", nil)
	wantInvalidRequest(t, "a call under the id of one in flight", c.wait(dup))
	second := c.expect("8") // the new call's answer
	c.notify("notifications/cancelled", map[string]any{"requestId": 8})
	cancelled := waitLog(t, logPath, `"notifications/cancelled"`)
	if want := regexp.MustCompile(`"requestId":` + asks[2] + `[,}]`); !want.MatchString(cancelled) {
		t.Fatalf("the cancellation of 8 reached the server as %s, want the new call's id %s (not the translated call's %s)", cancelled, asks[2], asks[1])
	}
	// Both calls end. The new call's server request is a round of the
	// older call when it arrives while that one runs, else of its own:
	// either way every round is retried under the id it was answered with.
	settle := func(id string, m *jsonrpc.Message) string {
		for i := 0; i < 4; i++ {
			var r inputRound
			if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.ResultType != "input_required" {
				return decodeTool(t, m).text()
			}
			k := r.onlyKey(t, "sampling/createMessage")
			m = c.wait(send(id, "ask", map[string]any{"requestState": r.RequestState, "inputResponses": map[string]any{k: sampled}}))
		}
		t.Fatalf("call %s: too many rounds", id)
		return ""
	}
	if got := settle("9", c.wait(send("9", "ask", map[string]any{"requestState": held.RequestState, "inputResponses": map[string]any{heldKey: sampled}}))); !strings.Contains(got, "ANSWER-R") {
		t.Fatalf("translated call = %q", got)
	}
	if got := settle("8", c.wait(second)); !strings.Contains(got, "ANSWER-R") {
		t.Fatalf("the new call under 8 = %q", got)
	}
	if n := len(upstreamIDs(t, logPath, "plain")); n != 0 {
		t.Fatalf("the refused call reached the server (%d plain calls)", n)
	}
}

// TestServerRequestFlood: a server that floods a legacy client with
// requests (sampling here) gets at most maxRelayed relayed while none is
// answered; the rest are refused to the server and recorded, and the
// client's answers still reach it.
func TestServerRequestFlood(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	c := f.client
	if res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"sampling": map[string]any{}},
		"clientInfo": map[string]string{"name": "test", "version": "1"}}); res.Error != nil {
		t.Fatalf("initialize: %v", res.Error)
	}
	c.notify("notifications/initialized", nil)
	_ = c.start("tools/call", map[string]any{"name": "deluge", "arguments": map[string]any{}})
	var asks []*jsonrpc.Message
	for i := 0; i < maxRelayed; i++ {
		asks = append(asks, c.nextRequest("sampling/createMessage"))
	}
	for i := 0; i < 10; i++ {
		waitLog(t, logPath, `"id":"s-`+strconv.Itoa(maxRelayed+1+i)+`"`, "unanswered")
	}
	select {
	case m := <-c.requests:
		t.Fatalf("a request beyond the bound reached the client: %s", m.Method)
	default:
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "sampling/createMessage" && d.ErrorCode == string(schema.ErrMalformedRequest)
	})
	// Answers free the table.
	c.reply(asks[0], map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "A"}})
	waitLog(t, logPath, `"id":"s-1"`, `"result"`)
}

// TestFramesInPieces: the proxy reads a client's frames however the pipe
// cuts them — one byte per write, two frames in one write, a frame cut
// inside a multi-byte character — and decides each as a whole (the
// out-of-scope path in the last one is refused, not read in part).
func TestFramesInPieces(t *testing.T) {
	f, _ := redteamFixture(t)
	c := f.client
	c.initLegacy(false)
	one := c.expect("101")
	frame := `{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"echo","arguments":{"note":"é€😀"}}}` + "\n"
	for i := 0; i < len(frame); i++ {
		if _, err := c.raw.Write([]byte{frame[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if r := decodeTool(t, c.wait(one)); r.text() != "ECHO" {
		t.Fatalf("byte by byte: %q", r.text())
	}
	a, b := c.expect("102"), c.expect("103")
	two := `{"jsonrpc":"2.0","id":102,"method":"ping"}` + "\r\n" + `{"jsonrpc":"2.0","id":103,"method":"tools/call","params":{"name":"echo","arguments":{"p":"` + f.base + `/outside/probe.txt","s":"€"}}}` + "\n"
	cut := strings.Index(two, "€") + 1 // inside the character
	for _, piece := range []string{two[:cut], two[cut:]} {
		if _, err := c.raw.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if m := c.wait(a); m.Error != nil {
		t.Fatalf("ping: %v", m.Error)
	}
	if r := decodeTool(t, c.wait(b)); denialCode(r) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("a path outside the scope in a frame cut in two = %+v", r)
	}
}

// TestRestartRacesACallInFlight: the client narrows its roots while a call
// is in flight on the server. The server is restarted under the narrowed
// fence; the call in flight is answered with an error and never sent to
// the new process (it may not be idempotent), and the old process's late
// request answer is not relayed to the new one; calls after the restart
// are decided against the narrowed scope.
func TestRestartRacesACallInFlight(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	c := f.client
	if res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18",
		"capabilities": map[string]any{"sampling": map[string]any{}, "roots": map[string]any{"listChanged": true}},
		"clientInfo":   map[string]string{"name": "test", "version": "1"}}); res.Error != nil {
		t.Fatalf("initialize: %v", res.Error)
	}
	c.notify("notifications/initialized", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(f.base))

	inFlight := c.start("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}})
	ask := c.nextRequest("sampling/createMessage")
	c.notify("notifications/roots/list_changed", nil)
	c.reply(c.nextRequest("roots/list"), rootsAnswer(f.base+"/allowed"))
	m := c.wait(inFlight)
	if m.Error == nil || !strings.Contains(m.Error.Message, "not retried") {
		t.Fatalf("the call in flight during the restart = %+v %s, want an error saying it was not retried", m.Error, m.Result)
	}
	// The old process's question is answered late: it goes nowhere.
	c.reply(ask, map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "LATE"}})
	if r := c.tool("plain", map[string]any{"p": f.base + "/outside/probe.txt"}); denialCode(r) != string(schema.ErrPathOutsideScope) {
		t.Fatalf("a call outside the narrowed scope = %+v", r)
	}
	if r := c.tool("plain", map[string]any{"p": f.base + "/allowed/probe.txt"}); r.IsError || r.text() != "PLAIN" {
		t.Fatalf("a call inside the narrowed scope = %+v", r)
	}
	if f.up.restartCount() != 1 {
		t.Fatalf("restarts = %d, want 1", f.up.restartCount())
	}
	if n := len(upstreamIDs(t, logPath, "ask")); n != 1 {
		t.Fatalf("the call reached the server %d times, want once (never retried)", n)
	}
	if log, _ := os.ReadFile(logPath); strings.Contains(string(log), "LATE") {
		t.Fatalf("the late answer for the old process reached a server:\n%s", log)
	}
}
