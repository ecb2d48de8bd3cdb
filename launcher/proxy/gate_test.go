package proxy

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestCancelWhileWaitingInGate: a call waiting in the admission gate (here
// for the client's first roots answer) that the client cancels is never
// sent to the server, gets no answer, is recorded CANCELLED and frees its
// id: a new call with the same id is served.
func TestCancelWhileWaitingInGate(t *testing.T) {
	f, logPath := askingFixture(t, nil)
	c := f.client
	if res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18",
		"capabilities": map[string]any{"roots": map[string]any{"listChanged": true}},
		"clientInfo":   map[string]string{"name": "test", "version": "1"}}); res.Error != nil {
		t.Fatalf("initialize: %v", res.Error)
	}
	c.notify("notifications/initialized", nil)
	rootsReq := c.nextRequest("roots/list") // not answered yet: calls wait in the gate

	first := c.expect("5")
	c.sendRaw(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"plain","arguments":{"tag":"CANCELLED-ONE"}}}`)
	c.notify("notifications/cancelled", map[string]any{"requestId": 5, "reason": "user"})
	c.reply(rootsReq, rootsAnswer(f.base))

	// Messages are handled in order: once a later call is answered, the
	// cancellation has been seen.
	if r := c.tool("plain", map[string]any{"tag": "AFTER"}); r.text() != "PLAIN" {
		t.Fatalf("a call after the cancellation = %q", r.text())
	}
	d := f.sink.waitDecision(t, func(d schema.Decision) bool { return d.ErrorCode == string(schema.ErrCancelled) })
	if d.Tool != "plain" || d.Decision != schema.OutcomeDeny {
		t.Fatalf("cancelled call's record = %+v", d)
	}
	// Its id is free again.
	second := c.expect("5")
	c.sendRaw(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"plain","arguments":{"tag":"SECOND"}}}`)
	m := c.wait(second)
	if m.Error != nil || !strings.Contains(string(m.Result), "PLAIN") {
		t.Fatalf("a new call reusing the cancelled id = %+v %s", m.Error, m.Result)
	}
	waitLog(t, logPath, `"SECOND"`)
	select {
	case m := <-first:
		t.Fatalf("the cancelled call was answered: %+v %s", m.Error, m.Result)
	case m := <-c.stray:
		t.Fatalf("a stray answer: %s %+v %s", m.ID, m.Error, m.Result)
	default:
	}
	if log, _ := os.ReadFile(logPath); strings.Contains(string(log), "CANCELLED-ONE") {
		t.Fatalf("the cancelled call reached the server:\n%s", log)
	}
}

// TestRefusalFloodBounded: a server that floods the proxy with requests it
// refuses (an unknown method, sampling the client never declared, forty
// distinct made-up methods) leaves a bounded number of decision records,
// and every refusal is counted: the records written one by one plus the
// summaries' retry_count add up to the refusals sent.
func TestRefusalFloodBounded(t *testing.T) {
	f, _ := askingFixture(t, nil)
	c := f.client
	c.initLegacy(false)
	if r := c.tool("refusals", map[string]any{}); r.text() != "REFUSED-ALL" {
		t.Fatalf("the call = %q", r.text())
	}
	// The server's frames are read in order: every refusal was decided
	// before the call's answer. Ending the session writes the summaries.
	c.raw.(io.Closer).Close()
	select {
	case err := <-f.errc:
		f.errc <- err
	case <-time.After(2 * time.Minute):
		t.Fatal("the session did not end after the client left")
	}
	const sent = 200 + 100 + 40
	counted, records := 0, 0
	summaries := map[string]int{}
	for _, d := range f.sink.decisions() {
		if d.Method != "evil/flood" && d.Method != "sampling/createMessage" && d.Method != "other" && !strings.HasPrefix(d.Method, "evil/m-") {
			continue
		}
		if d.Decision != schema.OutcomeDeny || d.ErrorCode != string(schema.ErrMethodNotAllowed) {
			t.Fatalf("a refusal's record = %+v", d)
		}
		records++
		if d.RetryCount == 0 {
			counted++
			continue
		}
		counted += d.RetryCount
		summaries[d.Method] += d.RetryCount
		if d.EndNS < d.StartNS {
			t.Fatalf("summary spans backwards: %+v", d)
		}
	}
	if counted != sent {
		t.Fatalf("records count %d refusals, the server sent %d (%d records, summaries %v)", counted, sent, records, summaries)
	}
	// One window holds the whole flood unless the test took minutes; two
	// windows' worth is the bound asserted.
	if limit := 2 * (refusalBurst + maxFoldedKeys + 1); records > limit {
		t.Fatalf("%d records for %d refusals, want at most %d", records, sent, limit)
	}
	if summaries["evil/flood"] == 0 {
		t.Fatalf("no summary for the flooded method: %v", summaries)
	}
}
