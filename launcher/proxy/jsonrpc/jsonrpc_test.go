package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantKind Kind
		wantCode int // 0 = valid
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, KindRequest, 0},
		{"string id", `{"jsonrpc":"2.0","id":"a","method":"ping","params":{}}`, KindRequest, 0},
		{"huge number id kept raw", `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`, KindRequest, 0},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, KindNotification, 0},
		{"response", `{"jsonrpc":"2.0","id":7,"result":{}}`, KindResponse, 0},
		{"error response", `{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"x"}}`, KindResponse, 0},
		{"error response null id", `{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"x"}}`, KindResponse, 0},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 0, CodeInvalidRequest},
		{"not json", `{"jsonrpc":`, 0, CodeParseError},
		{"garbage", `hello`, 0, CodeParseError},
		{"two values", `{"jsonrpc":"2.0","id":1,"method":"ping"}{}`, 0, CodeParseError},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, 0, CodeInvalidRequest},
		{"missing version", `{"id":1,"method":"ping"}`, 0, CodeInvalidRequest},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, 0, CodeInvalidRequest},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, 0, CodeInvalidRequest},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, 0, CodeInvalidRequest},
		{"null id request", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, 0, CodeInvalidRequest},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, 0, CodeInvalidRequest},
		{"case duplicate method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call"}`, 0, CodeInvalidRequest},
		{"kelvin duplicate", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"k":1,"\u212a":2}}`, 0, CodeInvalidRequest},
		{"nested duplicate", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"path":"/a","path":"/b"}}}`, 0, CodeInvalidRequest},
		{"unknown member", `{"jsonrpc":"2.0","id":1,"method":"ping","extra":1}`, 0, CodeInvalidRequest},
		{"case variant member only", `{"jsonrpc":"2.0","id":1,"METHOD":"ping"}`, 0, CodeInvalidRequest},
		{"lone surrogate", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"\ud800"}}`, 0, CodeParseError},
		{"low surrogate first", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"\udc00\ud800"}}`, 0, CodeParseError},
		{"valid pair", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"\ud83d\ude00"}}`, KindRequest, 0},
		{"escaped backslash u", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"\\ud800"}}`, KindRequest, 0},
		{"invalid utf8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\xff\"}", 0, CodeParseError},
		{"params array", `{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}`, 0, CodeInvalidRequest},
		{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}`, 0, CodeInvalidRequest},
		{"response without id", `{"jsonrpc":"2.0","result":{}}`, 0, CodeInvalidRequest},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, 0, CodeInvalidRequest},
		{"too deep", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`, 0, CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.in))
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if m.Kind != tt.wantKind {
					t.Fatalf("kind = %d, want %d", m.Kind, tt.wantKind)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse = %v, want a ParseError with code %d", err, tt.wantCode)
			}
			if pe.Code != tt.wantCode {
				t.Fatalf("code = %d (%s), want %d", pe.Code, pe.Reason, tt.wantCode)
			}
		})
	}
}

func TestHugeIDRoundTrips(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`
	m, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out := Result(m.ID, json.RawMessage(`{}`))
	if !bytes.Contains(out, []byte(`"id":123456789012345678901234567890`)) {
		t.Fatalf("id not kept exactly: %s", out)
	}
}

func TestReader(t *testing.T) {
	in := "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n" + strings.Repeat("x", 300) + "\n{\"c\":3}"
	r := NewReader(strings.NewReader(in), 100)
	var got []string
	var tooLarge int
	for {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, ErrFrameTooLarge) {
			tooLarge++
			if len(r.Head) == 0 || len(r.Tail) == 0 {
				t.Fatal("oversized frame lost its head/tail")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(f))
	}
	want := []string{`{"a":1}`, `{"b":2}`, `{"c":3}`}
	if strings.Join(got, "|") != strings.Join(want, "|") || tooLarge != 1 {
		t.Fatalf("frames = %q, tooLarge = %d", got, tooLarge)
	}
}

func TestReaderLargeFrameAcrossBuffer(t *testing.T) {
	big := `{"x":"` + strings.Repeat("y", 200<<10) + `"}`
	r := NewReader(strings.NewReader(big+"\n"+big+"\n"), 1<<20)
	for i := 0; i < 2; i++ {
		f, err := r.Next()
		if err != nil || len(f) != len(big) {
			t.Fatalf("frame %d: len %d err %v", i, len(f), err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestForwardKeepsParams(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":"client-1","method":"tools/call","params":{"name":"x","arguments":{"b":2,"a":1}}}`
	m, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out := Forward(m, IntID(42))
	want := `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"x","arguments":{"b":2,"a":1}}}`
	if string(out) != want {
		t.Fatalf("got %s\nwant %s", out, want)
	}
	if _, err := Parse(out); err != nil {
		t.Fatalf("forwarded frame does not parse: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":1,"result":{"x":[1,2,{"y":null}]}}`,
		`{"jsonrpc":"2.0","method":"n","params":{"a":"\ud83d\ude00"}}`,
		`[1]`, `{"a":1,"a":2}`, `{"jsonrpc":"2.0","id":1e999,"method":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error is not a ParseError: %v", err)
			}
			return
		}
		// The members the scanner collected are what a strict decoder reads.
		if m.Params != nil {
			checkMembers(t, m.Params, m.ParamMembers)
			if raw, ok := m.Param("_meta"); ok && firstNonSpace(raw) == '{' {
				checkMembers(t, raw, m.MetaMembers)
			} else if len(m.MetaMembers) != 0 {
				t.Fatalf("meta members without an _meta object: %q", data)
			}
		}
		// Anything accepted must re-encode to a frame that parses the same way.
		out := Forward(m, IntID(1))
		m2, err := Parse(out)
		if err != nil {
			t.Fatalf("re-encoded frame refused: %v\nin:  %q\nout: %q", err, data, out)
		}
		if m2.Kind != m.Kind || m2.Method != m.Method || !bytes.Equal(m2.Params, m.Params) {
			t.Fatalf("re-encoding changed the message: %q -> %q", data, out)
		}
	})
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("{}\n{}\r\n\n"), 8)
	f.Add([]byte(strings.Repeat("a", 100)+"\nb"), 10)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max <= 0 || max > 1<<16 {
			max = 64
		}
		r := NewReader(bytes.NewReader(data), max)
		for i := 0; i < len(data)+2; i++ {
			fr, err := r.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if errors.Is(err, ErrFrameTooLarge) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(fr) > max || bytes.IndexByte(fr, '\n') >= 0 || len(bytes.TrimSpace(fr)) == 0 {
				t.Fatalf("bad frame %q (max %d)", fr, max)
			}
		}
		t.Fatal("reader did not reach EOF")
	})
}

// FuzzScanAgreesWithStrictDecoder checks the one-pass scanner against the
// one strict decoder (schema/strictjson, itself fuzzed against
// encoding/json): on valid UTF-8 they accept exactly the same documents —
// one JSON value, no duplicate (case-folded) keys at any depth, no lone
// surrogate escapes, at most 64 levels deep.
func FuzzScanAgreesWithStrictDecoder(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"A":2}`, `[1,2,{"x":"\u00e9"}]`, `"\ud800"`, `{"\u0061":1,"a":2}`, `1e5`, `-0.5e-3`, `01`, `{"a":[}`, `{} {}`, "\"\x01\"", `{"k":1,"\u212a":2}`, strings.Repeat("[", 65) + strings.Repeat("]", 65), strings.Repeat("[", 64) + strings.Repeat("]", 64)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // the caller of the scanner refuses invalid UTF-8 first
		}
		_, scanErr := scanFrame(data)
		strictErr := strictjson.Check(data)
		if (scanErr == nil) != (strictErr == nil) {
			t.Fatalf("scanner %v, strict decoder %v, on %q", scanErr, strictErr, data)
		}
		if scanErr == nil && !json.Valid(data) {
			t.Fatalf("both accepted invalid JSON %q", data)
		}
	})
}

func TestParseDoesNotAliasFrame(t *testing.T) {
	frame := []byte(`{"jsonrpc":"2.0","id":12,"method":"m","params":{"a":1}}`)
	m, err := Parse(frame)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frame {
		frame[i] = 'x'
	}
	if string(m.ID) != "12" || string(m.Params) != `{"a":1}` {
		t.Fatalf("message changed with the frame: id %s params %s", m.ID, m.Params)
	}
}

// checkMembers compares members with the strict decoder's reading of obj.
func checkMembers(t *testing.T, obj json.RawMessage, members []Member) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := strictjson.Unmarshal(obj, &want); err != nil {
		t.Fatalf("accepted object %q refused by the strict decoder: %v", obj, err)
	}
	if len(want) != len(members) {
		t.Fatalf("%d members, the strict decoder reads %d, in %q", len(members), len(want), obj)
	}
	for _, mb := range members {
		v, ok := want[string(mb.Key)]
		if !ok || !bytes.Equal(bytes.TrimSpace(v), mb.Value) {
			t.Fatalf("member %q = %q, the strict decoder reads %q", mb.Key, mb.Value, v)
		}
	}
}

func TestMembers(t *testing.T) {
	m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r\u0065ad","arguments":{"_meta":{"x":1}},"\u005fmeta":{"traceparent":"t","k":{"a":[1]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Param("name"); !ok || string(v) != `"r\u0065ad"` {
		t.Fatalf("name = %s", v)
	}
	if s, ok := String(m.ParamMembers[0].Value); !ok || s != "read" {
		t.Fatalf("String(name) = %q %v", s, ok)
	}
	if v, ok := m.Meta("traceparent"); !ok || string(v) != `"t"` {
		t.Fatalf("escaped _meta not collected: %s", v)
	}
	if _, ok := m.Meta("x"); ok {
		t.Fatal("arguments._meta was taken for params._meta")
	}
	if len(m.MetaMembers) != 2 {
		t.Fatalf("meta members = %d", len(m.MetaMembers))
	}
}

// TestReaderSplitAtEveryByte: a stream cut at any byte — inside a
// multi-byte character, between '\r' and '\n', inside an escape — reads
// as the same frames, also one byte per read.
func TestReaderSplitAtEveryByte(t *testing.T) {
	in := "{\"a\":\"é€😀\\u00e9\"}\r\n\n{\"id\":1,\"method\":\"x\"}\n  {\"b\":[1,2]}"
	want := []string{"{\"a\":\"é€😀\\u00e9\"}", `{"id":1,"method":"x"}`, `{"b":[1,2]}`}
	read := func(r io.Reader) []string {
		fr := NewReader(r, 1024)
		var got []string
		for {
			f, err := fr.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				return got
			}
			got = append(got, string(f))
		}
	}
	for i := 0; i <= len(in); i++ {
		got := read(io.MultiReader(strings.NewReader(in[:i]), strings.NewReader(in[i:])))
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("split at %d: frames %q", i, got)
		}
	}
	if got := read(iotest.OneByteReader(strings.NewReader(in))); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("one byte per read: frames %q", got)
	}
}
