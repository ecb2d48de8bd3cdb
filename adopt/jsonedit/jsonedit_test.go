package jsonedit

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// toAny turns a tree into what encoding/json would decode (the last of
// duplicate keys wins, as there).
func toAny(t testing.TB, src []byte, n *Node) any {
	switch n.Kind {
	case Object:
		m := map[string]any{}
		for _, mem := range n.Members {
			m[mem.Key] = toAny(t, src, mem.Value)
		}
		return m
	case Array:
		a := []any{}
		for _, e := range n.Elems {
			a = append(a, toAny(t, src, e))
		}
		return a
	case String:
		return n.Str
	case Number:
		f, err := strconv.ParseFloat(string(src[n.Start:n.End]), 64)
		if err != nil && !math.IsInf(f, 0) {
			t.Fatalf("number %q: %v", src[n.Start:n.End], err)
		}
		return f
	case True:
		return true
	case False:
		return false
	}
	return nil
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, in string
		ok       bool
		comments bool
	}{
		{"object", `{"a": [1, -2.5e3, true, false, null, "x\u00e9\ud83d\ude00"]}`, true, false},
		{"line comment", "{\n  // servers\n  \"a\": 1\n}", true, true},
		{"block comment", `{/* x */"a": 1}`, true, true},
		{"trailing comma", `{"a": [1, 2,], }`, true, true},
		{"bom", "\xef\xbb\xbf{}", true, false},
		{"lone surrogate kept but marked", `{"a": "\ud800"}`, true, false},
		{"invalid utf-8", "{\"a\": \"\xff\"}", false, false},
		{"unterminated", `{"a": 1`, false, false},
		{"unterminated comment", `{"a": 1 /* `, false, false},
		{"missing comma", `{"a": 1 "b": 2}`, false, false},
		{"double comma", `{"a": 1,, "b": 2}`, false, false},
		{"leading comma", `[,1]`, false, false},
		{"trailing data", `{} x`, false, false},
		{"bad number", `[01]`, false, false},
		{"bad escape", `["\x"]`, false, false},
		{"control in string", "[\"a\tb\"]", false, false},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), false, false},
		{"deep enough", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := Parse([]byte(c.in))
			if (err == nil) != c.ok {
				t.Fatalf("Parse(%q): %v", c.in, err)
			}
			if err == nil && d.Comments != c.comments {
				t.Errorf("comments %v, want %v", d.Comments, c.comments)
			}
		})
	}
	d, _ := Parse([]byte(`{"a": "\ud800", "\udc00": 1}`))
	if !d.Root.Members[0].Value.BadString || !d.Root.Members[1].BadKey {
		t.Error("lone surrogates not marked")
	}
}

func TestSpansAndApply(t *testing.T) {
	src := []byte("{\n  \"k\" : [ \"v\" ,1 ],  // c\n  \"o\": {\"x\": null}\n}\n")
	d, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	k := d.Root.Get("k")[0]
	if got := string(src[k.Value.Start:k.Value.End]); got != `[ "v" ,1 ]` {
		t.Errorf("span %q", got)
	}
	if got := string(src[k.KeyStart:k.KeyEnd]); got != `"k"` {
		t.Errorf("key span %q", got)
	}
	out, err := Apply(src, []Edit{{k.Value.Start, k.Value.End, `["w"]`}, {0, 0, "\xef\xbb\xbf"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "\xef\xbb\xbf{\n  \"k\" : [\"w\"],  // c\n  \"o\": {\"x\": null}\n}\n"; string(out) != want {
		t.Errorf("Apply: %q", out)
	}
	if _, err := Apply(src, []Edit{{1, 5, ""}, {3, 6, ""}}); err == nil {
		t.Error("overlapping edits applied")
	}
	if ind, ok := Indent(src, k.KeyStart); !ok || ind != "  " {
		t.Errorf("Indent %q %v", ind, ok)
	}
}

func TestQuote(t *testing.T) {
	for _, s := range []string{"", "a b", `q"uo\te`, "line\nbreak\ttab\x01", "é😀<>&", "\u2028"} {
		var back string
		if err := json.Unmarshal([]byte(Quote(s)), &back); err != nil || back != s {
			t.Errorf("Quote(%q) = %s -> %q %v", s, Quote(s), back, err)
		}
	}
}

// FuzzParse checks Parse against encoding/json: every strict JSON document
// encoding/json accepts parses to the same value, a document Parse accepts
// without comments is one encoding/json accepts, and every span re-parses
// to its own value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"mcpServers":{"a":{"command":"x","args":["-y","p"]}}}`, "{//c\n\"a\":[1,],}", `"\ud83d\ude00"`, `[1e5,-0.1,null]`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if !json.Valid(data) {
			if err == nil && !d.Comments && !d.BOM {
				t.Fatalf("accepted %q, which is not JSON, as plain JSON", data)
			}
			return
		}
		if err != nil {
			// Refused on purpose where encoding/json guesses: invalid
			// UTF-8 (it substitutes U+FFFD), depth past the limit.
			if strings.Contains(err.Error(), "nested deeper") || !utf8.Valid(data) {
				return
			}
			t.Fatalf("refused valid JSON %q: %v", data, err)
		}
		var want any
		if err := json.Unmarshal(data, &want); err != nil {
			return // a number out of float64's range: nothing to compare
		}
		if got := toAny(t, data, d.Root); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %#v want %#v", data, got, want)
		}
		var walk func(n *Node)
		walk = func(n *Node) {
			sub, err := Parse(data[n.Start:n.End])
			if err != nil || sub.Root.Kind != n.Kind {
				t.Fatalf("span %q of a %v does not parse alone: %v", data[n.Start:n.End], n.Kind, err)
			}
			for _, m := range n.Members {
				walk(m.Value)
			}
			for _, e := range n.Elems {
				walk(e)
			}
		}
		walk(d.Root)
	})
}
