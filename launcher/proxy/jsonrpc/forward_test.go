package jsonrpc

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"
)

// forwardGeneral is Forward through the general encoders, as it was before
// the one-allocation path: the two must agree byte for byte.
func forwardGeneral(m *Message, id json.RawMessage) []byte {
	if m.Kind == KindResponse {
		if m.Error != nil {
			b := []byte(`{"jsonrpc":"2.0","id":`)
			b = append(b, idOrNull(id)...)
			b = append(b, `,"error":`...)
			b = appendJSON(b, m.Error)
			return append(b, '}')
		}
		return Result(id, m.Result)
	}
	var params any
	if m.Params != nil {
		params = m.Params
	}
	if m.Kind == KindNotification {
		id = nil
	}
	return Request(id, m.Method, params)
}

var forwardFrames = []struct {
	name, frame string
}{
	{"call", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`},
	{"call with spaces kept", `{ "jsonrpc" : "2.0" , "id" : "a\"b" , "method" : "tools/call" , "params" : { "name" : "echo" , "arguments" : { } } }`},
	{"no params", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
	{"escaped method", `{"jsonrpc":"2.0","id":1,"method":"a\u003cb\"c","params":{}}`},
	{"unicode method", `{"jsonrpc":"2.0","id":1,"method":"tools/call\u00e9","params":{}}`},
	{"notification", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`},
	{"result", `{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"ok"}]}}`},
	{"result string id", `{"jsonrpc":"2.0","id":"x","result":{}}`},
	{"error", `{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"no <such> method","data":{"a":1}}}`},
}

func TestForwardMatchesTheGeneralEncoder(t *testing.T) {
	for _, tc := range forwardFrames {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse([]byte(tc.frame))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			for _, id := range []json.RawMessage{IntID(5), json.RawMessage(`"s-1"`), nil} {
				got, want := Forward(m, id), forwardGeneral(m, id)
				if !bytes.Equal(got, want) {
					t.Fatalf("id %s:\n got %s\nwant %s", id, got, want)
				}
				back, err := Parse(got)
				if err != nil {
					t.Fatalf("the forwarded frame does not parse: %v\n%s", err, got)
				}
				kind := m.Kind
				if kind == KindRequest && id == nil {
					kind = KindNotification // a request without an id is a notification
				}
				if back.Kind != kind || back.Method != m.Method || !bytes.Equal(back.Params, m.Params) || !bytes.Equal(back.Result, m.Result) {
					t.Fatalf("the forwarded frame says something else: %s", got)
				}
			}
		})
	}
}

// Allocation budgets of the per-message path: a forwarded request or
// result is one allocation (the frame), and the strict scan of a
// tools/call frame stays at what it takes today.
func TestForwardAndParseAllocationBudgets(t *testing.T) {
	id := IntID(5)
	for _, tc := range []struct {
		name          string
		frame         string
		parse, encode float64
	}{
		{"tools/call", forwardFrames[0].frame, 4, 1},
		{"tools/call with a path", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"path":"/srv/base/allowed/probe.txt"}}}`, 4, 1},
		{"result", forwardFrames[6].frame, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.frame)
			if n := testing.AllocsPerRun(200, func() { _, _ = Parse(b) }); n > tc.parse {
				t.Errorf("Parse: %v allocations, budget %v", n, tc.parse)
			}
			m, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(200, func() { _ = Forward(m, id) }); n > tc.encode {
				t.Errorf("Forward: %v allocations, budget %v", n, tc.encode)
			}
		})
	}
}

// TestParseBytesBudget: the frame scanner is pooled and a Message keeps
// only a right-sized copy of its member lists, so parsing a call or a
// result allocates a few hundred bytes (it was over 1.4 KiB for the
// scanner alone, twice per call).
func TestParseBytesBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled scanners at random")
	}
	for _, tc := range []struct {
		name   string
		frame  string
		budget uint64 // bytes per Parse
	}{
		{"tools/call", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`, 512},
		{"result", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}}`, 384},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.frame)
			_, _ = Parse(b) // fill the pool
			const runs = 500
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < runs; i++ {
				if _, err := Parse(b); err != nil {
					t.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > tc.budget {
				t.Errorf("Parse allocates %d bytes per frame, budget %d", per, tc.budget)
			}
		})
	}
}

// TestParsedMembersOutliveTheScanner: a Message's member lists are its
// own; parsing further frames (which reuse the pooled scanner) changes
// nothing in them.
func TestParsedMembersOutliveTheScanner(t *testing.T) {
	first, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"p":1},"_meta":{"k":"v"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := Parse([]byte(`{"jsonrpc":"2.0","id":2,"method":"x","params":{"other":2,"more":3,"_meta":{"z":"w","y":1}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := first.Param("name"); !ok || string(v) != `"a"` {
		t.Errorf("params.name = %s, %v", v, ok)
	}
	if v, ok := first.Param("arguments"); !ok || string(v) != `{"p":1}` {
		t.Errorf("params.arguments = %s, %v", v, ok)
	}
	if len(first.ParamMembers) != 3 || len(first.MetaMembers) != 1 {
		t.Fatalf("members: %d params, %d meta", len(first.ParamMembers), len(first.MetaMembers))
	}
	if v, ok := first.Meta("k"); !ok || string(v) != `"v"` {
		t.Errorf("_meta.k = %s, %v", v, ok)
	}
	if _, ok := first.Param("other"); ok {
		t.Error("a later frame's member shows in an earlier message")
	}
}
