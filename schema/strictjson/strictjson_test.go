package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type target struct {
	Mode    string            `json:"access_mode"`
	N       int               `json:"n"`
	List    []string          `json:"list"`
	Nested  *inner            `json:"nested"`
	Map     map[string]string `json:"map"`
	When    *time.Time        `json:"when"`
	Raw     json.RawMessage   `json:"raw"`
	Omitted string            `json:"omitted,omitempty"`
}

type inner struct {
	Ports []int `json:"ports"`
}

func TestUnmarshal(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		kind    Kind // 0: accepted
		pointer string
		opts    []Option
	}{
		{"plain", `{"access_mode":"read","n":3,"list":["a"],"nested":{"ports":[1]},"map":{"a":"b"},"when":"2026-01-02T03:04:05Z","raw":{"x":[1,{"y":2}]}}`, 0, "", nil},
		{"exact duplicate", `{"access_mode":"read","access_mode":"write"}`, KindDuplicate, "", nil},
		{"case-variant duplicate", `{"access_mode":"read","ACCESS_MODE":"write"}`, KindDuplicate, "", nil},
		{"case variant alone", `{"Access_Mode":"write"}`, KindUnknownMember, "/Access_Mode", nil},
		{"case variant alone, unknown allowed", `{"Access_Mode":"write"}`, 0, "", []Option{AllowUnknownMembers()}},
		{"kelvin sign duplicate", `{"map":{"k":"1","\u212a":"2"}}`, KindDuplicate, "", nil},
		{"long s duplicate", `{"map":{"s":"1","\u017f":"2"}}`, KindDuplicate, "", nil},
		{"duplicate deep in raw", `{"raw":{"a":[{"b":1,"B":2}]}}`, KindDuplicate, "", nil},
		{"duplicate in map", `{"map":{"x":"1","x":"2"}}`, KindDuplicate, "", nil},
		{"escaped duplicate", `{"map":{"x":"1","\u0078":"2"}}`, KindDuplicate, "", nil},
		{"unknown member", `{"access_mode":"read","bogus":1}`, KindUnknownMember, "/bogus", nil},
		{"unknown nested member", `{"nested":{"ports":[1],"Ports":[2]}}`, KindDuplicate, "", nil},
		{"unknown nested member alone", `{"nested":{"port":[2]}}`, KindUnknownMember, "/nested/port", nil},
		{"unknown allowed", `{"access_mode":"read","bogus":1}`, 0, "", []Option{AllowUnknownMembers()}},
		{"wrong type", `{"n":"3"}`, KindType, "/n", nil},
		{"float for int", `{"n":1.5}`, KindType, "/n", nil},
		{"exponent for int", `{"n":1e2}`, KindType, "/n", nil},
		{"wrong nested type", `{"nested":{"ports":["80"]}}`, KindType, "/nested/ports/0", nil},
		{"trailing data", `{"n":1} {"n":2}`, KindSyntax, "", nil},
		{"trailing garbage", `{"n":1}x`, KindSyntax, "", nil},
		{"truncated", `{"n":1`, KindSyntax, "", nil},
		{"empty", ``, KindSyntax, "", nil},
		{"blank", " \n\t", KindSyntax, "", nil},
		{"lone high surrogate", `{"access_mode":"\ud800"}`, KindSyntax, "", nil},
		{"lone low surrogate", `{"access_mode":"\udc00x"}`, KindSyntax, "", nil},
		{"paired surrogates", `{"access_mode":"\ud83d\ude00"}`, 0, "", nil},
		{"invalid utf-8", "{\"access_mode\":\"\xff\"}", KindSyntax, "", nil},
		{"control character", "{\"access_mode\":\"a\x01\"}", KindSyntax, "", nil},
		{"too deep", `{"raw":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, KindDepth, "", nil},
		{"deep within limit", `{"raw":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`, 0, "", nil},
		{"custom depth", `{"raw":[[1]]}`, KindDepth, "", []Option{MaxDepth(2)}},
		{"bad time", `{"when":"yesterday"}`, KindType, "/when", nil},
		{"null fields", `{"n":null,"list":null,"nested":null}`, 0, "", nil},
		{"not an object", `[1,2]`, KindType, "", nil},
		{"comment", `{"n":1 /* x */}`, KindSyntax, "", nil},
		{"single quotes", `{'n':1}`, KindSyntax, "", nil},
		{"trailing comma", `{"n":1,}`, KindSyntax, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v target
			err := Unmarshal([]byte(c.in), &v, c.opts...)
			if c.kind == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (%T), want *Error of kind %v", err, err, c.kind)
			}
			if se.Kind != c.kind {
				t.Fatalf("kind = %v (%v), want %v", se.Kind, err, c.kind)
			}
			if c.pointer != "" && se.Pointer != c.pointer {
				t.Fatalf("pointer = %q, want %q (%v)", se.Pointer, c.pointer, err)
			}
		})
	}
}

func TestDecodedValues(t *testing.T) {
	var v target
	in := `{"access_mode":"write","n":-7,"list":["a","b"],"map":{"K":"1","x":"2"},"raw":{"keep":"as is"}}`
	if err := Unmarshal([]byte(in), &v); err != nil {
		t.Fatal(err)
	}
	if v.Mode != "write" || v.N != -7 || len(v.List) != 2 || v.Map["K"] != "1" || string(v.Raw) != `{"keep":"as is"}` {
		t.Fatalf("decoded %+v", v)
	}
	var m map[string]json.RawMessage
	if err := Unmarshal([]byte(`{"a":1,"b":{"c":"d"}}`), &m); err != nil || string(m["b"]) != `{"c":"d"}` {
		t.Fatalf("map = %v, %v", m, err)
	}
}

func TestPointerField(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "",
		"/access_mode":            "access_mode",
		"/network/connect_tcp/0":  "network.connect_tcp[0]",
		"/tool_classes/a~1b":      "tool_classes.a/b",
		"/tool_classes/x~0y":      "tool_classes.x~y",
		"/0":                      "0",
		"/allowed_paths/12/extra": "allowed_paths[12].extra",
	} {
		if got := PointerField(in); got != want {
			t.Errorf("PointerField(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFoldName(t *testing.T) {
	same := [][2]string{{"path", "PATH"}, {"Path", "pAtH"}, {"k", "\u212a"}, {"s", "\u017f"}, {"ß", "ß"}}
	for _, p := range same {
		if FoldName(p[0]) != FoldName(p[1]) {
			t.Errorf("%q and %q fold apart", p[0], p[1])
		}
	}
	if FoldName("path") == FoldName("paths") {
		t.Error("path and paths fold together")
	}
}

// FuzzCheck holds Check to encoding/json's idea of valid JSON: whatever
// Check accepts, encoding/json accepts; valid JSON is refused only as a
// duplicate (after folding), too deep, a lone surrogate or invalid UTF-8.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"A":2}`, `[1,{"x":"\ud800"}]`, `"x"`, `1e5`, `{"a":{"b":[1,2,{"c":null}]}}`, "\"\xff\"", `{"a":1}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Check(data)
		valid := json.Valid(data)
		if err == nil && !valid {
			t.Fatalf("Check accepted what encoding/json refuses: %q", data)
		}
		if err != nil {
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not an *Error", err)
			}
			// Valid JSON is refused only for what this package adds.
			if valid && se.Kind == KindSyntax && !bytes.Contains(data, []byte(`\u`)) && utf8.Valid(data) {
				t.Fatalf("valid JSON %q refused: %v", data, err)
			}
		}
		var v any
		uerr := Unmarshal(data, &v)
		var ue *Error
		if err != nil && uerr == nil || err == nil && uerr != nil && !(errors.As(uerr, &ue) && ue.Kind == KindType) {
			t.Fatalf("Check %v but Unmarshal into any %v: %q", err, uerr, data)
		}
	})
}
