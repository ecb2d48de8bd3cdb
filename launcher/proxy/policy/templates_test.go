package policy

import (
	"path/filepath"
	"testing"
)

// TestTemplateAllowed: resources/templates/list shows no template whose
// file: expansions all lie outside the scope or name a secret (the fifth
// attack round: templates were passed unfiltered).
func TestTemplateAllowed(t *testing.T) {
	p, base := fixture(t)
	allowed := filepath.Join(base, "allowed")
	eff := []string{allowed}
	tests := []struct {
		tmpl string
		want bool
	}{
		{"file://" + allowed + "/{name}", true},
		{"file://" + allowed + "/sub/{+rest}", true},
		{"file://" + allowed + "/notes-{n}.txt", true},
		{"file:///{+path}", true},         // above the scope: some expansions reach it
		{"file://{+path}", false},         // the host part is an expression: refused, as a remote host
		{"file://" + base + "/{x}", true}, // the base is above the scope
		{"test://static/resource/{id}", true},
		{"config://{name}", true},
		{"file:///etc/{name}", false},
		{"FILE:///etc/{name}", false},
		{"file://localhost/etc/{name}", false},
		{"file://" + base + "/outside/{name}", false},
		{"file://" + allowed + "/escape/{name}", false}, // a symlink out of the scope
		{"file://" + allowed + "/../outside/{name}", false},
		{"file://" + allowed + "/%2e%2e/outside/{name}", false},
		{"file://" + allowed + "/.git/{name}", false},
		{"file://" + allowed + "/.git./{name}", false},
		{"file://" + allowed + "/{dir}/.env", false},
		{"file:///{+dir}/.ssh/{key}", false},
		{"file://" + allowed + "/.env", false}, // no expression: the URI itself
		{"file://" + allowed + "/probe.txt", true},
		{"file://" + allowed + "/{unclosed", false},
		{"file://evil.example/{x}", false},
		{"file://{host}/x", false}, // the host is an expression: not local
		{"file://" + allowed + "/{x}?q={y}", false},
		// Round eleven: a template with no scheme, or whose scheme is
		// (or holds) an expression, expands to a reference a client
		// resolves against its own page, or to a URI of any scheme.
		{"/etc/{name}", false},
		{"../../{+path}", false},
		{"//fileserver/share/{x}", false},
		{"{name}", false},
		{"{+uri}", false},
		{"{scheme}:///etc/passwd", false},
		{"fi{x}le:///etc/passwd", false},
		{"java{x}script:alert(1)", false},
		{"", false},
		{"\uff46ile:///etc/{x}", false}, // a fullwidth f: no scheme to a URL parser
		// ... and the scheme is read as a URL parser reads it.
		{" file:///etc/{name}", false},
		{"\x01file:///etc/{name}", false},
		{"fi\tle:///etc/{name}", false},
		{"\nfile:///{dir}/.env", false},
		{" file://" + allowed + "/{name}", true},
		{"\ttest://static/resource/{id}", true},
		{"urn:isbn:{n}", true},
		{"http://example.com/~{resource_name}/", true}, // go-sdk's everything-server
		// Round twelve: an editor's URL wrapping a file's path is the
		// file: template of that path (appurls.go).
		{"vscode-file://vscode-app/etc/{name}", false},
		{"vscode-file://vscode-app" + allowed + "/{dir}/.env", false},
		{"vscode://file" + base + "/outside/{name}:{line}", false},
		{"cursor://file/{+path}", true}, // as file:///{+path}
		{"vscode-file://vscode-app" + allowed + "/{name}", true},
		{"idea://open?file={f}", false}, // its path in its query: dropped
		{"vscode://ms-python.python/{x}", true},
	}
	for _, tt := range tests {
		if got := p.TemplateAllowed(tt.tmpl, eff); got != tt.want {
			t.Errorf("TemplateAllowed(%q) = %v, want %v", tt.tmpl, got, tt.want)
		}
	}
	// Revoked roots: no file template is shown.
	if p.TemplateAllowed("file:///{+path}", nil) || p.TemplateAllowed("file://"+allowed+"/{x}", nil) {
		t.Error("file templates shown with no effective paths")
	}
}

// FuzzTemplateAllowed: a template shown to the client has a scheme
// written out (no expression before its first ':', read as a URL parser
// reads it), and what a URL parser strips around or inside it (spaces and
// C0 controls at its ends, tabs and line breaks anywhere) never changes
// the decision.
func FuzzTemplateAllowed(f *testing.F) {
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	for _, s := range []string{
		"file://" + eff[0] + "/{name}", "file:///{+path}", "test://static/resource/{id}", "/etc/{name}",
		"{+uri}", "{s}:///etc/passwd", " file:///etc/{x}", "fi\tle:///{dir}/.env", "urn:x:{y}", "",
		"http://example.com/~{resource_name}/", "file://{host}/x", "java{x}script:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		ok := p.TemplateAllowed(tmpl, eff)
		if ok {
			if _, _, has := urlScheme(urlClean(tmpl)); !has {
				t.Fatalf("TemplateAllowed(%q) with no scheme written out", tmpl)
			}
		}
		if wrapped := " \x01" + tmpl + "\n\t"; p.TemplateAllowed(wrapped, eff) != ok {
			t.Fatalf("TemplateAllowed(%q) = %v but %v for %q", tmpl, ok, !ok, wrapped)
		}
		if i := len(tmpl) / 2; p.TemplateAllowed(tmpl[:i]+"\t"+tmpl[i:], eff) != ok {
			t.Fatalf("TemplateAllowed(%q) = %v, another answer with a tab inside", tmpl, ok)
		}
	})
}
