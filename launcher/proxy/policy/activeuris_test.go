package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestActiveURI: a URI a server hands the client is refused when a
// client that opens it runs code in its page — javascript:, vbscript:,
// a data: document that is not inert — in every spelling a WHATWG URL
// parser reads (leading spaces and controls, tabs and line breaks inside,
// any case); every other scheme passes, custom ones included (2025-11-25
// lets a resource name any), and so does a reference with no scheme.
func TestActiveURI(t *testing.T) {
	for _, tc := range []struct {
		uri, want string
	}{
		{"javascript:alert(1)", "javascript"},
		{"JaVaScRiPt:alert(1)", "javascript"},
		{" \x00\x1fjavascript:alert(1)", "javascript"},
		{"java\tscript:alert(1)", "javascript"},
		{"java\nscr\ript:alert(1)", "javascript"},
		{"javascript:alert(1) \x01", "javascript"},
		{"vbscript:msgbox(1)", "vbscript"},
		{"VBScript:msgbox(1)", "vbscript"},
		{"data:text/html,<script>alert(1)</script>", "data"},
		{"DATA: Text/HTML ;charset=utf-8,<b>x</b>", "data"},
		{"data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=", "data"},
		{"data:application/xhtml+xml,<x/>", "data"},
		{"data:text/xml,<x/>", "data"},
		{"data:application/pdf;base64,JVBERi0=", "data"},
		{"data:text/javascript,alert(1)", "data"},
		{"data:text%2Fhtml,<b>x</b>", "data"},   // not a type a browser names: refused (fail closed)
		{"data:text/html", "data"},              // no comma: refused
		{"data:image/png/../svg+xml,x", "data"}, // not one media type
		{"data:video/mp4 x,y", "data"},
		{"data:ｔｅｘｔ/ｐｌａｉｎ,x", "data"},
		{"data:,hello", ""},
		{"data:;base64,aGk=", ""},
		{"data:text/plain;charset=utf-8,hi", ""},
		{"data:TEXT/PLAIN,hi", ""},
		{"data:image/png;base64,iVBORw0K", ""},
		{"data:application/json,{}", ""},
		{"data:audio/mpeg;base64,AAAA", ""},
		{"data:video/mp4;base64,AAAA", ""},
		{"test://static/resource/1", ""},
		{"https://example.com/x", ""},
		{"http://example.com/x", ""},
		{"file:///etc/passwd", ""}, // the path rules decide
		{"git://host/repo", ""},
		{"postgres://db/table", ""},
		{"ui://app/page", ""},
		{"ms-msdt:/id x", ""}, // a custom scheme: a resource may use one
		{"relative/name.txt", ""},
		{"javascript", ""},
		{"ｊａｖａｓｃｒｉｐｔ:alert(1)", ""}, // not a scheme to a URL parser
		{"javaſcript:alert(1)", ""},
		{"", ""},
	} {
		if got := ActiveURI(tc.uri); got != tc.want {
			t.Errorf("ActiveURI(%q) = %q, want %q", tc.uri, got, tc.want)
		}
	}
}

// TestCheckActiveURIs: a "uri" or "uriTemplate" member at any depth is
// read (a resource_link, an embedded resource, a list's entry, a
// template, something under annotations or _meta), also with its name
// or value spelled with JSON escapes; "url" and other members are the
// server's data.
func TestCheckActiveURIs(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		refuse bool
	}{
		{`{"content":[{"type":"resource_link","uri":"javascript:alert(1)","name":"x"}]}`, true},
		{`{"content":[{"type":"resource","resource":{"uri":"data:text/html,<b>x</b>","text":"x"}}]}`, true},
		{`{"messages":[{"role":"user","content":{"type":"resource_link","uri":" VBSCRIPT:x","name":"x"}}]}`, true},
		{`{"resourceTemplates":[{"uriTemplate":"javascript:{x}","name":"x"}]}`, true},
		{`{"content":[{"type":"text","text":"x","annotations":{"audience":["user"],"uri":"javascript:x"}}]}`, true},
		{`{"\u0075ri":"javascript:x"}`, true},
		{`{"uri":"\u006aavascript:x"}`, true},
		{`{"uri":"java\tscript:x"}`, true},
		{`{"uri":"java\u0009script:x"}`, true},
		{`{"content":[{"type":"resource_link","uri":"test://static/resource/1","name":"x"}]}`, false},
		{`{"uri":"data:image/png;base64,AAAA"}`, false},
		{`{"structuredContent":{"links":[{"url":"javascript:void(0)"}]}}`, false},
		{`{"content":[{"type":"text","text":"uri: javascript:x"}]}`, false},
		{`{"uri":"test://x","name":"a JavaScript: primer"}`, false},
		{`{"uri":"JAVASCRIPT:x"}`, true},
		{`{"uri":"DaTa:text/html,x"}`, true},
		{`{"uri":"data:text/html,x"}`, true},
		// A uri must be absolute (round ten), except in a tool's own
		// structuredContent.
		{`{"content":[{"type":"resource_link","uri":"/etc/passwd","name":"x"}]}`, true},
		{`{"contents":[{"uri":"../../.ssh/id_rsa","text":"x"}]}`, true},
		{`{"uri" : "//host/share/x"}`, true},
		{`{"uri":"\u0001/etc/passwd"}`, true},
		{`{"uri":""}`, true},
		{`{"u\u0072i":"x"}`, true},
		{`{"structuredContent":{"uri":"docs/readme.md"}}`, false},
		{`{"uri":"urn:isbn:0451450523"}`, false},
		{`{"uri":"mailto:a@b"}`, false},
		{`{"name":"uri","uriTemplate":"{+path}"}`, false},
	} {
		if d := CheckActiveURIs([]byte(tc.raw)); (d != nil) != tc.refuse {
			t.Errorf("CheckActiveURIs(%s) = %+v, want refused %v", tc.raw, d, tc.refuse)
		}
	}
	if d := CheckActiveURIs([]byte(`{"uri":"javascript:`)); d == nil {
		t.Error("invalid JSON with a uri member passed")
	}
}

// flipASCII swaps the case of every ASCII letter.
func flipASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b[i] = c ^ 0x20
		}
	}
	return string(b)
}

// FuzzActiveURI: ActiveURI reads a URI as a WHATWG parser does, so its
// answer does not change with leading controls and spaces, a tab or line
// break inserted anywhere, or the case of ASCII letters; a cleaned URI
// starting "javascript:" or "vbscript:", or a data: one whose header
// names HTML, SVG, XML or script, is always refused; any other scheme
// passes; and CheckActiveURIs on {"uri": s} (written plainly or with its
// first letter \u-escaped) agrees.
func FuzzActiveURI(f *testing.F) {
	for _, s := range []string{
		"javascript:x", "JaVaScRiPt:x", " \x01javascript:x", "java\tscript:x", "vbscript:x",
		"data:text/html,x", "data: image/SVG+xml ;base64,x", "data:,x", "data:image/png,x",
		"test://x", "https://x", "ｊａｖａｓｃｒｉｐｔ:x", "javaſcript:x", "\u212aavascript:x",
		"dATa:Text/Plain,x", "data:audio/ogg,x", "data:audio/,x", "é:x", "x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ActiveURI(s)
		for _, v := range []string{" \x00\x1f" + s + " \x01", flipASCII(s), "\t" + s} {
			if g := ActiveURI(v); g != got {
				t.Fatalf("ActiveURI(%q) = %q but ActiveURI(%q) = %q", s, got, v, g)
			}
		}
		for i := 0; i <= len(s) && i < 24; i++ {
			v := s[:i] + "\n" + s[i:]
			if g := ActiveURI(v); g != got {
				t.Fatalf("ActiveURI(%q) = %q but ActiveURI(%q) = %q", s, got, v, g)
			}
		}
		l := strings.ToLower(urlClean(s))
		switch {
		case strings.HasPrefix(l, "javascript:"), strings.HasPrefix(l, "vbscript:"):
			if got == "" {
				t.Fatalf("%q passed", s)
			}
		case strings.HasPrefix(l, "data:"):
			header, _, _ := strings.Cut(l, ",")
			for _, w := range []string{"html", "svg", "xml", "script"} {
				if strings.Contains(header, w) && got == "" {
					t.Fatalf("%q passed", s)
				}
			}
		default:
			if got != "" {
				t.Fatalf("%q refused as %q", s, got)
			}
		}
		b, _ := json.Marshal(s)
		for _, raw := range []string{`{"uri":` + string(b) + `}`, `{"a":[{"uri":` + escapeFirst(string(b)) + `}]}`} {
			// (A "uri" must also be absolute: round ten.)
			if d := CheckActiveURIs([]byte(raw)); (d != nil) != (got != "" || relativeURI(s)) {
				t.Fatalf("CheckActiveURIs(%s) = %+v but ActiveURI = %q, relative %v", raw, d, got, relativeURI(s))
			}
		}
	})
}

// escapeFirst writes a JSON string's first character, when ASCII, as a
// \u escape.
func escapeFirst(q string) string {
	if len(q) < 3 || q[1] >= 0x80 || q[1] == '\\' || q[1] == '"' {
		return q
	}
	return `"` + fmt.Sprintf(`\u%04x`, q[1]) + q[2:]
}

// FuzzCheckActiveURIs: when CheckActiveURIs passes a JSON document, no
// "uri" or "uriTemplate" member in it, at any depth, is a URI ActiveURI
// refuses (the quick byte scans never skip one, whatever its escapes).
func FuzzCheckActiveURIs(f *testing.F) {
	for _, s := range []string{
		`{"uri":"javascript:x"}`, `{"\u0075ri":"java\tscript:x"}`, `{"a":[{"uriTemplate":"DATA:text/html,{x}"}]}`,
		`{"uri":"test://x"}`, `{"uri":"data\u003atext/html,x"}`, `{"uri":"\u0020jAvAsCrIpT:x"}`, `[{"uri":"ȺȺ:x"}]`,
		`{"uri":"data:image/png;base64,AA"}`, `{"url":"javascript:void(0)"}`,
		`{"uri":"/etc/passwd"}`, `{"uri" : "//host/x"}`, `{"structuredContent":{"uri":"x","a":{"uri":"/y"}}}`, `{"uri":"\u0001file:///x"}`, `{"u\u0072i":"x"}`, `{"uri":""}`, `["uri",{"uri":"a:b"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v any
		if json.Unmarshal(raw, &v) != nil || CheckActiveURIs(raw) != nil {
			return
		}
		var visit func(any, bool)
		visit = func(v any, structured bool) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					if s, ok := e.(string); ok && (k == "uri" || k == "uriTemplate") && ActiveURI(s) != "" {
						t.Fatalf("%s: %s %q passed", raw, k, s)
					}
					if s, ok := e.(string); ok && k == "uri" && !structured && relativeURI(s) {
						t.Fatalf("%s: a uri with no scheme %q passed", raw, s)
					}
					visit(e, structured || k == "structuredContent")
				}
			case []any:
				for _, e := range v {
					visit(e, structured)
				}
			}
		}
		visit(v, false)
	})
}

// relativeURI: s, as a URL parser reads it, has no scheme.
func relativeURI(s string) bool {
	_, _, ok := urlScheme(urlClean(s))
	return !ok
}
