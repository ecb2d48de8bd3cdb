package policy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestCheckIconSrc: an icon's src that names a file is held to the path
// rules; other schemes pass.
func TestCheckIconSrc(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	in := "file://" + filepath.Join(base, "allowed", "probe.txt")
	svg := func(s string) string {
		return "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString([]byte(s))
	}
	for _, tc := range []struct {
		src  string
		want schema.ErrorCode
	}{
		{"https://example.com/i.png", ""},
		{"http://example.com/i.png", ""},
		{"data:image/png;base64,iVBORw0KGgo=", ""},
		{"data:image/svg+xml,<svg><image href='https://example.com/x.png'/></svg>", ""},
		{in, ""},
		{"file://" + filepath.Join(base, "allowed", ".env"), schema.ErrSecretPath},
		{"FILE://" + filepath.Join(base, "outside", "probe.txt"), schema.ErrPathOutsideScope},
		{"file:///etc/passwd", schema.ErrPathOutsideScope},
		{"file://host/share/x.png", schema.ErrPathOutsideScope},
		{`file:\\host\share\x.png`, schema.ErrPathOutsideScope},
		{in + "#x", schema.ErrPathOutsideScope},
		{" \x01file:///etc/passwd", schema.ErrPathOutsideScope},
		{"f\ti\nle:///etc/passwd", schema.ErrPathOutsideScope},
		{"/etc/passwd", schema.ErrPathOutsideScope},
		{"../outside/probe.txt", schema.ErrPathOutsideScope},
		{"allowed/.env", schema.ErrSecretPath},
		{"allowed/%2eenv", schema.ErrSecretPath},
		{`allowed\.env`, schema.ErrSecretPath},
		{"//host/share/x.png", schema.ErrPathOutsideScope},
		{`\\host\share\x.png`, schema.ErrPathOutsideScope},
		{svg("<svg><image href='file:///etc/passwd'/></svg>"), schema.ErrPathOutsideScope},
		{svg("<svg><image href='&#x66;ile:///etc/passwd'/></svg>"), schema.ErrPathOutsideScope},
		{svg("<svg><image href='FI&#10;LE:///etc/passwd'/></svg>"), schema.ErrPathOutsideScope},
		{svg("<svg><style>x{background:url(\\66 ile:///etc/passwd)}</style></svg>"), schema.ErrPathOutsideScope},
		{svg("<svg><image href='" + in + "'/></svg>"), ""},
		{"data:text/html,<img src=file:///etc/passwd>", schema.ErrPathOutsideScope},
		{"data:,file%3A%2F%2F%2Fetc%2Fpasswd", schema.ErrPathOutsideScope},
	} {
		_, d := p.CheckIconSrc(tc.src, eff)
		got := schema.ErrorCode("")
		if d != nil {
			got = d.Code
		}
		if got != tc.want {
			t.Errorf("CheckIconSrc(%q) = %v, want %q", tc.src, d, tc.want)
		}
	}
}

// TestFilterIcons: bad icons are dropped at any depth, good ones kept;
// an answer with nothing to drop is returned as the same bytes.
func TestFilterIcons(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	clean := json.RawMessage(`{"tools":[{"name":"a","icons":[{"src":"https://x/i.png"}]}]}`)
	if out, d := p.FilterIcons(clean, eff); !bytes.Equal(out, clean) || d.Dropped != 0 {
		t.Fatalf("clean = %s %+v", out, d)
	}
	raw := json.RawMessage(`{"a":[{"b":{"\u0069cons":[{"src":"file:///etc/passwd"},{"src":"https://x/i.png"}]}}],"icons":[{"src":"/etc/shadow"}],"x":{"icons":"not a list"},"serverInfo":{"websiteUrl":"file:///etc/group"},"y":{"websiteUrl":"https://example.com"}}`)
	out, d := p.FilterIcons(raw, eff)
	if d.Dropped != 3 || !strings.Contains(string(out), "https://example.com") || d.Denial == nil || strings.Contains(string(out), "/etc/") || !strings.Contains(string(out), "https://x/i.png") || !strings.Contains(string(out), "not a list") {
		t.Fatalf("FilterIcons = %s %+v", out, d)
	}
}

// TestHasEscapedASCII: the quick test finds \u escapes of the characters
// named, in either case of hex digit.
func TestHasEscapedASCII(t *testing.T) {
	for _, tc := range []struct {
		raw, chars string
		want       bool
	}{
		{`"\u0066ile:"`, "file:", true},
		{`"file\u003A"`, "file:", true},
		{`"\u00e9"`, "file:", false},
		{`"\u0041"`, "file:", false},
		{`"plain"`, "file:", false},
		{`"\u00`, "file:", false},
		{`"all\u0053ervers"`, "allServers", true},
	} {
		if got := HasEscapedASCII([]byte(tc.raw), tc.chars); got != tc.want {
			t.Errorf("HasEscapedASCII(%s, %q) = %v", tc.raw, tc.chars, got)
		}
	}
}

// FuzzFilterIcons: whatever a server sends, what FilterIcons returns is
// valid JSON when its input was, it never keeps an icon CheckIconSrc
// refuses, and it returns the input itself when it dropped nothing.
func FuzzFilterIcons(f *testing.F) {
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	for _, s := range []string{
		`{"icons":[{"src":"file:///etc/passwd"},{"src":"https://x"}]}`,
		`{"tools":[{"icons":[{"src":"data:image/svg+xml,<svg href='file:///x'/>"}]}]}`,
		`[{"icons":[{"src":"../x"}]}]`, `{"\u0069cons":[{"src":"/"}]}`, `{"icons":[1,"x",{"src":2}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, d := p.FilterIcons(raw, eff)
		if d.Dropped == 0 {
			if !bytes.Equal(out, raw) {
				t.Fatalf("nothing dropped, yet %s became %s", raw, out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid output %s", out)
		}
		again, d2 := p.FilterIcons(out, eff)
		if d2.Dropped != 0 || !bytes.Equal(again, out) {
			t.Fatalf("a second pass dropped %d more from %s", d2.Dropped, out)
		}
	})
}

// FuzzCheckIconSrc: no src makes the check panic, and a src that names
// /etc/passwd as a file: URI in the same bytes is never passed.
func FuzzCheckIconSrc(f *testing.F) {
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	for _, s := range []string{"file:///etc/passwd", "data:,x", "data:;base64,ZmlsZTov", "//h/x", "a/b", "https://x", "\x00", "data:image/svg+xml,&#102;ile:/x", "data:image/svg+xml,ȺȺȺȺȺȺȺȺȺȺfile:", "data:,\u212a\u212afile:///etc/passwd", "javascript:alert(1)", " JaVa\tScRiPt:x", "ｊavascript:x", "Ⱥ:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_, d := p.CheckIconSrc(src, eff)
		if d == nil && strings.HasPrefix(src, "file:///etc/") {
			t.Fatalf("%q passed", src)
		}
	})
}

// TestResultURISpellings: a file URI in an answer as a client's URL
// parser reads it — leading spaces and controls stripped, tabs and line
// breaks removed anywhere, in any escape — is checked; before, " file:"
// and "fi\nle:" skipped the check.
func TestResultURISpellings(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	for _, tc := range []struct {
		raw  string
		deny bool
	}{
		{`{"uri":" file:///etc/passwd"}`, true},
		{`{"uri":"\u0020file:///etc/passwd"}`, true},
		{`{"uri":"fi\nle:///etc/passwd"}`, true},
		{`{"uri":"\tFILE:///etc/passwd"}`, true},
		{`{"uri":"file\u000a:///etc/passwd"}`, true},
		{`{"uri":"fil\re:///etc/passwd"}`, true},
		{`{"url":"f\ti\tl\te:///etc/passwd"}`, true},
		{`{"text":"a\nb\tc","uri":"config://x"}`, false},
		{`{"uri":"https://example.com/a\nb"}`, false},
	} {
		_, d := p.CheckResultURIs(json.RawMessage(tc.raw), eff)
		if (d != nil) != tc.deny {
			t.Errorf("CheckResultURIs(%s) = %v, want denied=%v", tc.raw, d, tc.deny)
		}
	}
}

// FuzzHasFileURI: the quick scan that lets an answer skip the walk never
// says "no file URI" for JSON holding a string that a client's URL parser
// reads as one (any escape, any tab or line break inside).
func FuzzHasFileURI(f *testing.F) {
	for _, s := range []string{`{"uri":"file:///x"}`, `{"uri":"\u0066ile:/x"}`, `{"uri":"fi\nle:/x"}`, `{"uri":" \tFILE:/x"}`, `["f\u0069l\u0065\u003a"]`, `{"a":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || hasFileURI(raw) {
			return
		}
		_, _ = walk(raw, func(_ []string, kind byte, s string) *Denial {
			if (kind == '"' || kind == kindName) && hasFileScheme(urlClean(s)) {
				t.Fatalf("%s holds %q, a file URI to a client, but the quick scan saw none", raw, s)
			}
			return nil
		})
	})
}

// TestIconDocumentCaseFolding: an SVG data: icon whose document holds
// characters that change length when lowered ("Ⱥ" is 2 bytes, "ⱥ" 3; the
// Kelvin sign "K" is 3 bytes, "k" 1) before a file reference. Before: the
// indexes of the lowered document were used in the document itself, and
// ten "Ⱥ" before "file:" made the proxy panic (one tools/list answer of
// a server ended the run); a reference after them was checked at the
// wrong place.
func TestIconDocumentCaseFolding(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	for _, src := range []string{
		"data:image/svg+xml," + strings.Repeat("Ⱥ", 10) + "file:",
		"data:image/svg+xml," + strings.Repeat("Ⱥ", 10) + "<image href='file:///etc/passwd'/>",
		"data:image/svg+xml," + strings.Repeat("\u212a", 10) + "<image href='file:///etc/passwd'/>",
		"data:image/svg+xml," + strings.Repeat("Ⱥ", 3) + "<image href='FILE:///etc/passwd'/>",
	} {
		if _, d := p.CheckIconSrc(src, eff); d == nil {
			t.Errorf("%q passed", src)
		}
	}
	raw := json.RawMessage(`{"tools":[{"name":"t","icons":[{"src":"data:image/svg+xml,` + strings.Repeat("Ⱥ", 10) + `file:"}]}]}`)
	if out, drop := p.FilterIcons(raw, eff); drop.Dropped != 1 || strings.Contains(string(out), "data:") {
		t.Fatalf("FilterIcons = %s, %+v", out, drop)
	}
	if _, d := p.CheckIconSrc("data:image/svg+xml,"+strings.Repeat("Ⱥ", 10)+"<svg/>", eff); d != nil {
		t.Fatalf("a document with no file reference: %v", d)
	}
}

// FuzzCheckAppResource: any answer to an MCP App's read is decided
// without a panic, and a document that names /etc/passwd as a file:
// URL is never passed.
func FuzzCheckAppResource(f *testing.F) {
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	for _, s := range []string{
		`{"contents":[{"uri":"ui://a","text":"<img src=\"file:///etc/passwd\">"}]}`,
		`{"contents":[{"uri":"ui://a","blob":"PGltZyBzcmM9ZmlsZTovLy9ldGMvcGFzc3dkPg=="}]}`,
		`{"contents":[{"uri":"ui://a","text":"ȺȺȺ","_meta":{"ui":{"csp":{"resourceDomains":["file:///etc"]}}}}]}`,
		`{"contents":[]}`, `[]`, `{"contents":[{"text":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, d := p.CheckAppResource(raw, eff)
		var res struct {
			Contents []struct {
				Text string `json:"text"`
			} `json:"contents"`
		}
		if d == nil && json.Unmarshal(raw, &res) == nil {
			for _, c := range res.Contents {
				if strings.Contains(c.Text, `"file:///etc/passwd"`) {
					t.Fatalf("%q passed", raw)
				}
			}
		}
	})
}

// FuzzEmbeddedApps: the quick test never skips an answer the walk
// refuses (an embedded ui: app referring to a file), whatever its
// spelling of the scheme.
func FuzzEmbeddedApps(f *testing.F) {
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	for _, s := range []string{
		`{"content":[{"type":"resource","resource":{"uri":"ui://a","text":"<img src=file:///etc/passwd>"}}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"\u0055I://a","text":"<img src=file:///etc/passwd>"}}]}`,
		`{"x":{"uri":" Ui:x","blob":"ZmlsZTovLy9ldGMvcGFzc3dk"}}`,
		`{"x":{"uri":"u\ti:x","text":"file:///etc/passwd"}}`,
		`{"x":{"uri":"u\u0009i:x","text":"file:///etc/passwd"}}`,
		`{"content":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, d := p.CheckEmbeddedApps(raw, eff); d != nil && !MayHoldAppURI(raw) {
			t.Fatalf("%q refused by the walk, skipped by the quick test", raw)
		}
	})
}
