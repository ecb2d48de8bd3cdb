package policy

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestPathsInsideStrings: a path inside a string a server takes apart or
// decodes is checked as a path (round ten: each passed before); strings
// that only look busy (a URL's query, an address, a time, a media type,
// markup, text with white space) pass as before.
func TestPathsInsideStrings(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	out := filepath.Join(base, "outside", "probe.txt")
	in := filepath.Join(base, "allowed", "probe.txt")
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, tc := range []struct {
		s    string
		want schema.ErrorCode // "" = passes, "deny" = refused whatever the code
	}{
		{"--file=" + out, schema.ErrPathOutsideScope},
		{"file=" + out, schema.ErrPathOutsideScope},
		{"path=" + out + ",mode=r", schema.ErrPathOutsideScope},
		{"key=.env", "deny"},                          // under the base, outside the scope's directory
		{"--dir=outside", schema.ErrPathOutsideScope}, // an entry under the base, as the whole string would be probed
		{in + "," + out, schema.ErrPathOutsideScope},
		{in + ":" + out, schema.ErrPathOutsideScope},
		{in + ";" + out, schema.ErrPathOutsideScope},
		{in + "|" + out, schema.ErrPathOutsideScope},
		{"@" + out, schema.ErrPathOutsideScope},
		{"-f" + out, schema.ErrPathOutsideScope},
		{"'" + out + "'", schema.ErrPathOutsideScope},
		{"(" + out + ")", schema.ErrPathOutsideScope},
		{"`" + out + "`", schema.ErrPathOutsideScope},
		{js(map[string]string{"path": out}), schema.ErrPathOutsideScope},
		{js(map[string]any{"opts": map[string]string{"file": "../outside/probe.txt"}}), schema.ErrPathOutsideScope},
		{js([]string{in, out}), "deny"},                                                              // refused before too: its brackets read as a glob's class
		{js(map[string]string{"q": js(map[string]string{"path": out})}), schema.ErrPathOutsideScope}, // JSON in JSON in a string
		{"{path: '" + out + "', /* JSON5 */}", schema.ErrPathOutsideScope},
		{"{ \"path\": \".env\", }", "deny"}, // a trailing comma
		{base64.StdEncoding.EncodeToString([]byte(out)), schema.ErrPathOutsideScope},
		{base64.RawURLEncoding.EncodeToString([]byte(out)), schema.ErrPathOutsideScope},
		{base64.StdEncoding.EncodeToString([]byte("file://" + out)), schema.ErrPathOutsideScope},
		{hex.EncodeToString([]byte(out)), schema.ErrPathOutsideScope},
		{hex.EncodeToString([]byte("~/.ssh/id_rsa")), schema.ErrSecretPath},
		{"\x01file://" + out, schema.ErrPathOutsideScope},
		{"\x1f\x00FiLe://" + out, schema.ErrPathOutsideScope},
		// Inside the scope: passes in every form.
		{"--file=" + in, ""},
		{in + "," + in, ""},
		{js(map[string]string{"path": in}), ""},
		{base64.StdEncoding.EncodeToString([]byte(in)), ""},
		{hex.EncodeToString([]byte(in)), ""},
		{"\x01file://" + in, ""},
		// Not paths.
		{"https://example.com/a?file=/etc/passwd", ""},
		{"user@example.com", ""},
		{"2026-12-07T18:00:00Z", ""},
		{"text/plain;charset=utf-8", ""},
		{"<b>bold</b>", ""},
		{"a,b,c", ""},
		{"key=value", ""},
		{"file", ""}, // base64 of "~)^"
		{"final", ""},
		{"data:text/plain,file:///etc/passwd", ""},
		{`{"a":1,"b":[true,null]}`, ""},
		{"[1,2,3]", ""},
		{"see /etc/passwd for the format", ""}, // text: words are not read (Known limits)
		// A command line's options and assignments are.
		{"grep --file=" + out + " pattern", schema.ErrPathOutsideScope},
		{"tar -f" + out + " -x", schema.ErrPathOutsideScope},
		{"env CONF=" + out + " run", schema.ErrPathOutsideScope},
		{"grep --file=" + in + " pattern", ""},
		{`<a href="/etc/passwd">x</a> and x = 1 and a=b`, ""},
		{"use -v or --verbose=2 for more", ""},
		// Round eleven: a list one per line or field (line breaks and
		// tabs, no space), a C string's NUL, a VCS URL's file: behind
		// its tool's prefix.
		{"a.txt\n" + out, schema.ErrPathOutsideScope},
		{"a.txt\r\n" + out + "\r\n", schema.ErrPathOutsideScope},
		{"name\t" + out, schema.ErrPathOutsideScope},
		{"a.txt\n.env", "deny"},
		{"a.txt\nfile://" + out, schema.ErrPathOutsideScope},
		{".env\x00.txt", "deny"},
		{"notes.txt\x00" + out, "deny"}, // find -print0
		{".env%00.txt", "deny"},
		{"git+file://" + out, schema.ErrPathOutsideScope},
		{"GIT+FILE://localhost" + out, schema.ErrPathOutsideScope},
		{"hg+file://" + out, schema.ErrPathOutsideScope},
		{"git+file://" + filepath.Join(base, "allowed", ".env"), schema.ErrSecretPath},
		{"a.txt\n" + in, ""},
		{"git+file://" + in, ""},
		{"probe.txt\x00", ""},
		{"x=1\ny=2\n", ""},
		{"line\tone\nline\ttwo", ""},
		{"git+https://github.com/a/b.git", ""},
		{"see\n/etc/passwd for the format", ""}, // a space: text (Known limits)
	} {
		args, _ := json.Marshal(map[string]any{"q": tc.s})
		_, d := p.CheckArguments("other_tool", args, eff)
		switch {
		case tc.want == "" && d != nil:
			t.Errorf("%q: denied: %v", tc.s, d)
		case tc.want != "" && (d == nil || tc.want != "deny" && d.Code != tc.want):
			t.Errorf("%q = %v, want %s", tc.s, d, tc.want)
		}
		// The same in a prompt's arguments and a request's other
		// parameters.
		if tc.want != "" && !strings.HasPrefix(tc.s, "--dir") {
			if _, d := p.CheckLooseArguments(args, eff); d == nil {
				t.Errorf("%q as a prompt argument: passed", tc.s)
			}
		}
	}
}

// FuzzEmbeddedPaths: a string the check refuses is refused too as an
// option's value, a list's element, a JSON document's member, and (when
// it is a plain path) in base64 and hex; and no string makes the check
// loop or panic.
func FuzzEmbeddedPaths(f *testing.F) {
	for _, s := range []string{"/etc/passwd", "../outside/probe.txt", ".env", "~/.ssh/id_rsa", "file:///etc/shadow", "outside", "-f/x", "a:b:/c", "{\"p\":\"/x\"}", "{p:'/x',}", "L2V0Yy9wYXNzd2Q=", "2f6574632f706173737764", "\x01file:///x", "((((((", "@@@@", "-C~", "x=y=z=/", "／etc／passwd", "%2e%2e%2f"} {
		f.Add(s)
	}
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	refused := func(s string) bool {
		args, _ := json.Marshal(map[string]any{"q": s})
		_, d := p.CheckArguments("other_tool", args, eff)
		return d != nil
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 512 {
			return
		}
		r := refused(s)
		if !r || strings.IndexFunc(s, unicode.IsSpace) >= 0 || strings.ContainsAny(s, separators+":") {
			return
		}
		// s is one token without separators: wrapped, it stays refused.
		for _, w := range []string{"--opt=" + s, "k=" + s + ",m=r", "a," + s, "@" + s, "cmd --opt=" + s + " x",
			"a.txt\n" + s, "a.txt\t" + s + "\r\n"} { // (round eleven: lists by line and field)
			if !refused(w) {
				t.Fatalf("%q is refused but %q passes", s, w)
			}
		}
		if strings.IndexByte(s, 0) < 0 {
			// A list by NUL, and a C string's end (round eleven).
			for _, w := range []string{"a.txt\x00" + s, s + "\x00.txt"} {
				if !refused(w) {
					t.Fatalf("%q is refused but %q passes", s, w)
				}
			}
		}
		if doc, _ := json.Marshal(map[string]string{"path": s}); !refused(string(doc)) {
			t.Fatalf("%q is refused but the JSON document %s passes", s, doc)
		}
		if plausiblePath([]byte(s)) {
			if e := base64.StdEncoding.EncodeToString([]byte(s)); !refused(e) {
				t.Fatalf("%q is refused but its base64 %q passes", s, e)
			}
			if e := hex.EncodeToString([]byte(s)); !refused(e) {
				t.Fatalf("%q is refused but its hex %q passes", s, e)
			}
		}
	})
}

// FuzzMayHoldPath: the quick scan that lets a request's other members
// skip the check never skips a string the check refuses — plain, as
// base64 (both alphabets, padded or not) or as hex (either case; round
// eleven: before, base64 of a path skipped it).
func FuzzMayHoldPath(f *testing.F) {
	for _, s := range []string{"/etc/passwd", "a/../../etc/passwd", "~/.ssh/id_rsa", "file:///etc/shadow", "$HOME/x", ".", "..", "x/..", "../x", "{\"p\":\"/x\"}", "-f/x"} {
		f.Add(s)
	}
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 256 {
			return
		}
		for _, v := range []string{s, base64.StdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)),
			hex.EncodeToString([]byte(s)), strings.ToUpper(hex.EncodeToString([]byte(s)))} {
			raw, _ := json.Marshal(map[string]string{"k": v})
			if _, d := p.checkLoose(raw, eff, false, true, "parameter"); d != nil && !MayHoldPath(raw) && !MayNameSecret(raw) { // (CheckValues without its quick scan)
				t.Fatalf("CheckValues refuses %s (%v) but MayHoldPath skips it", raw, d)
			}
		}
	})
}
