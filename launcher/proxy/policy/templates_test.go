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
