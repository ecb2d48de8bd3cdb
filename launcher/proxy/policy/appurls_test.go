package policy

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// appURLCases are editors' and applications' URLs wrapping a file's path
// (round twelve), as a request's argument or a result's uri: outside the
// scope or secret they are refused, inside it they pass; URLs of the
// network and an application's own names pass. Before, every one passed
// as "a URL of another scheme".
func appURLCases(base string) []struct {
	s    string
	want schema.ErrorCode // "" = passes, "deny" = refused whatever the code
} {
	out := filepath.Join(base, "outside", "probe.txt")
	in := filepath.Join(base, "allowed", "probe.txt")
	secret := filepath.Join(base, "allowed", ".env")
	return []struct {
		s    string
		want schema.ErrorCode
	}{
		{"vscode-file://vscode-app" + out, schema.ErrPathOutsideScope},
		{"VSCODE-FILE://vscode-app" + secret, schema.ErrSecretPath},
		{"vscode-file://vscode-app/" + strings.ReplaceAll(out[1:], "/", "%2F"), schema.ErrPathOutsideScope},
		{"vscode-file://vscode-app" + strings.ReplaceAll(out, "/", "%2F"), "deny"}, // no path: refused
		{"vscode://file" + out, schema.ErrPathOutsideScope},
		{"vscode://file" + out + ":12:3", schema.ErrPathOutsideScope},
		{"vscode-insiders://file" + secret, schema.ErrSecretPath},
		{"cursor://file" + out, schema.ErrPathOutsideScope},
		{"windsurf://file/" + out, schema.ErrPathOutsideScope},
		{"vscode-remote://ssh-remote+localhost" + out, schema.ErrPathOutsideScope},
		{"vscode-remote://wsl+Ubuntu" + secret, schema.ErrSecretPath},
		{"idea://open?file=" + out + "&line=3", schema.ErrPathOutsideScope},
		{"jetbrains://idea/navigate/reference?project=x&path=" + url.QueryEscape(out), schema.ErrPathOutsideScope},
		{"pycharm://open?file=" + secret, schema.ErrSecretPath},
		{"subl://open?url=file://" + out, schema.ErrPathOutsideScope},
		{"txmt://open/?url=file://" + url.QueryEscape(out), schema.ErrPathOutsideScope},
		{"x-github-client://openLocalRepo" + out, schema.ErrPathOutsideScope},
		{"obsidian://open?path=" + url.QueryEscape(secret), "deny"},
		{"atom://core/open/file?filename=" + out, schema.ErrPathOutsideScope},
		{"vscode-file://vscode-app/%zz", "deny"}, // does not parse: refused
		// Inside the scope, and not file names at all.
		{"vscode-file://vscode-app" + in, ""},
		{"vscode://file" + in + ":1", ""},
		{"idea://open?file=" + in, ""},
		{"x-github-client://openRepo/https://github.com/a/b", ""},
		{"vscode://ms-python.python/run?x=1", ""},
		{"test://static/resource/1", ""},
		{"ui://widget/app.html", ""},
		{"https://example.com/open?file=/etc/passwd", ""},
	}
}

func TestAppURLsInArguments(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	for _, tc := range appURLCases(base) {
		forms := []string{tc.s}
		if tc.want != "" {
			forms = append(forms, "a.txt,"+tc.s) // (a list's URL of the network is taken apart as before)
		}
		for _, s := range forms {
			args, _ := json.Marshal(map[string]any{"q": s})
			_, d := p.CheckArguments("other_tool", args, eff)
			switch {
			case tc.want == "" && d != nil:
				t.Errorf("%q: denied: %v", s, d)
			case tc.want != "" && (d == nil || tc.want != "deny" && d.Code != tc.want):
				t.Errorf("%q = %v, want %s", s, d, tc.want)
			}
		}
		// A request's other members, a prompt's arguments.
		raw, _ := json.Marshal(map[string]any{"x": tc.s})
		if _, d := p.CheckValues(raw, eff); (d != nil) != (tc.want != "") {
			t.Errorf("%q in another member = %v, want %q", tc.s, d, tc.want)
		}
	}
}

func TestAppURLsInResults(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	for _, tc := range appURLCases(base) {
		// (Also with every slash escaped, as some encoders write it:
		// "cursor:\/\/file\/…" is read as "cursor://file/…".)
		escaped := strings.ReplaceAll(jsonString(tc.s), "/", `\/`)
		for _, raw := range []string{
			`{"content":[{"type":"resource_link","name":"x","uri":` + jsonString(tc.s) + `}]}`,
			`{"contents":[{"uri":` + jsonString(tc.s) + `,"text":"x"}]}`,
			`{"content":[{"type":"resource","resource":{"uri":` + jsonString(tc.s) + `,"text":"x"}}]}`,
			`{"content":[{"type":"resource_link","name":"x","uri":` + escaped + `}]}`,
		} {
			_, d := p.CheckResultURIs(json.RawMessage(raw), eff)
			switch {
			case tc.want == "" && d != nil:
				t.Errorf("%s: denied: %v", raw, d)
			case tc.want != "" && (d == nil || tc.want != "deny" && d.Code != tc.want):
				t.Errorf("%s = %v, want %s", raw, d, tc.want)
			}
		}
	}
	// In a text it is text.
	if _, d := p.CheckResultURIs(json.RawMessage(`{"content":[{"type":"text","text":"vscode-file://vscode-app/etc/passwd"}]}`), eff); d != nil {
		t.Errorf("a text: %v", d)
	}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// FuzzAppFileRefs: no string makes the reading of an application URL
// panic; and a result whose uri wraps a name the path rules refuse is
// refused whatever the application scheme (cursor://file/…).
func FuzzAppFileRefs(f *testing.F) {
	for _, s := range []string{"vscode-file://vscode-app/etc/passwd", "vscode://file/x:1:2", "idea://open?file=/x", "a://file", "x-github-client://openLocalRepo/%2F", "subl://open?url=file:///x", "vscode-remote://a/b", "::::", "a://b?path=&path=/"} {
		f.Add(s, "cursor")
	}
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	out := filepath.Join(base, "outside", "probe.txt")
	f.Fuzz(func(t *testing.T, s, scheme string) {
		appFileRefs(s)
		_, _ = p.CheckResultURIs(json.RawMessage(`{"uri":`+jsonString(s)+`}`), eff)
		if _, _, ok := urlScheme(scheme + ":"); !ok || netSchemes[strings.ToLower(scheme)] {
			return
		}
		raw := `{"uri":` + jsonString(scheme+"://file"+out) + `}`
		if _, d := p.CheckResultURIs(json.RawMessage(raw), eff); d == nil {
			t.Fatalf("%s passed", raw)
		}
	})
}

// FuzzContainsFold: ContainsFold finds lit in any ASCII case exactly
// when a lower-casing search does (the quick scans of member names a
// case-folding client reads: "URL", "IncludeContext").
func FuzzContainsFold(f *testing.F) {
	for _, s := range []string{`{"URL":"x"}`, `{"url":1}`, `"uRl"`, `"ur"l"`, `ALLSERVERS`, `"`, ``} {
		f.Add(s, `"url"`)
		f.Add(s, "allServers")
	}
	f.Fuzz(func(t *testing.T, raw, lit string) {
		if lit == "" || len(lit) > 16 {
			return
		}
		lower := func(s string) string {
			b := []byte(s)
			for i, c := range b {
				if c >= 'A' && c <= 'Z' {
					b[i] = c + 32
				}
			}
			return string(b)
		}
		if got, want := ContainsFold([]byte(raw), lit), strings.Contains(lower(raw), lower(lit)); got != want {
			t.Fatalf("ContainsFold(%q, %q) = %v, want %v", raw, lit, got, want)
		}
	})
}
