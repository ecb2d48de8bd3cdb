package policy

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckOpenURL: a URL a client is asked to open passes only when it
// is http or https (file: is left to the path rules), in every spelling
// a client's URL parser reads: leading spaces and controls stripped,
// tabs and line breaks removed, any case.
func TestCheckOpenURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		pass bool
	}{
		{"https://example.com/authorize?state=1", true},
		{"HTTP://localhost:8080/cb", true},
		{" \thttps://example.com", true},
		{"file:///etc/passwd", true}, // the path rules decide
		{"javascript:alert(1)", false},
		{" JaVaScRiPt:alert(1)", false},
		{"java\tscript:alert(1)", false},
		{"java\nscript:alert(1)", false},
		{"\x01javascript:alert(1)", false},
		{"vbscript:msgbox(1)", false},
		{"data:text/html,<script>alert(1)</script>", false},
		{"ms-msdt:/id PCWDiagnostic", false},
		{"vscode://ext/install", false},
		{"ftp://example.com/x", false},
		{"ws://example.com/x", false},
		{"//example.com/x", false},
		{"example.com/x", false},
		{"", false},
		{"ｊavascript:alert(1)", false}, // fullwidth: no scheme a parser knows; not http either
		{"httpѕ://example.com", false}, // a Cyrillic ѕ
		{"https\u200b://example.com", false},
	} {
		if d := CheckOpenURL(tc.url); (d == nil) != tc.pass {
			t.Errorf("CheckOpenURL(%q) = %v, want pass=%v", tc.url, d, tc.pass)
		}
	}
}

// TestCheckOpenURLs: a URL-mode elicitation is found wherever a server
// puts one — a request's params, a -32042 error's data, a modern round's
// or task's inputRequests — in any escape; a member named "url" of an
// object that is not a URL-mode elicitation (a tool's structured
// content) is the server's data.
func TestCheckOpenURLs(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	for _, tc := range []struct {
		raw  string
		deny bool
	}{
		{`{"mode":"url","url":"javascript:alert(1)","message":"m","elicitationId":"e"}`, true},
		{`{"url":"javascript:alert(1)","mode":"url"}`, true},
		{`{"elicitations":[{"mode":"url","url":"https://ok"},{"mode":"url","url":"vbscript:x"}]}`, true},
		{`{"resultType":"input_required","inputRequests":{"e":{"method":"elicitation/create","params":{"mode":"url","url":"data:text/html,x"}}}}`, true},
		{`{"taskId":"t","status":"input_required","inputRequests":{"e":{"method":"elicitation/create","params":{"mode":"url","url":"ms-msdt:x"}}}}`, true},
		{`{"\u006dode":"\u0075rl","\u0075rl":"javascript:alert(1)"}`, true},
		{`{"mode":"url","url":"\u006aavascript:alert(1)"}`, true},
		{`{"mode":"url","url":"https://example.com/authorize"}`, false},
		{`{"mode":"form","url":"javascript:alert(1)"}`, false},
		{`{"structuredContent":{"url":"mailto:a@example.com"}}`, false},
		{`{"content":[{"type":"text","text":"{\"mode\":\"url\",\"url\":\"javascript:x\"}"}]}`, false},
		// An object whose url is another's: member names with NUL cannot
		// make two objects one.
		{`{"a":{"b":{"mode":"url","url":"javascript:x"}},"a\u0000b":{"url":"https://ok"}}`, true},
		{`{"a\u0000b":{"mode":"url","url":"javascript:x"},"a":{"b":{"url":"https://ok"}}}`, true},
	} {
		if d := CheckOpenURLs([]byte(tc.raw)); (d != nil) != tc.deny {
			t.Errorf("CheckOpenURLs(%s) = %v, want denied=%v", tc.raw, d, tc.deny)
		}
		if _, d := p.CheckResultURIs(json.RawMessage(tc.raw), eff); (d != nil) != tc.deny {
			t.Errorf("CheckResultURIs(%s) = %v, want denied=%v", tc.raw, d, tc.deny)
		}
	}
}

// FuzzCheckOpenURLs: no JSON makes it panic, and an object with "mode":
// "url" (as encoding/json reads it) whose url a client must not open is
// never passed (the quick scan never skips one).
func FuzzCheckOpenURLs(f *testing.F) {
	for _, s := range []string{
		`{"mode":"url","url":"javascript:x"}`, `{"\u006dode":"\u0075rl","\u0075rl":"x:y"}`,
		`{"a":[{"mode":"url","url":"https://ok"}]}`, `{"mode":"url","url":"ȺȺȺȺ:x"}`,
		`{"mode":"url","url":"\u212aavascript:x"}`, `{"mode":"url","url":"ｈｔｔｐｓ://x"}`, `[{"mode":"url"}]`, `{"url":"java\nscript:x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d := CheckOpenURLs(raw)
		var v any
		if !json.Valid(raw) || json.Unmarshal(raw, &v) != nil || d != nil {
			return
		}
		var visit func(any)
		visit = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if v["mode"] == "url" {
					if u, ok := v["url"].(string); ok {
						l := strings.ToLower(urlClean(u))
						if !strings.HasPrefix(l, "http:") && !strings.HasPrefix(l, "https:") && !strings.HasPrefix(l, "file:") {
							t.Fatalf("%s: url %q passed", raw, u)
						}
					}
				}
				for _, e := range v {
					visit(e)
				}
			case []any:
				for _, e := range v {
					visit(e)
				}
			}
		}
		visit(v)
	})
}
