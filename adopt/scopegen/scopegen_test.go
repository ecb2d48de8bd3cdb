package scopegen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/schema"
)

func tools(names ...string) []probe.Tool {
	var out []probe.Tool
	for _, n := range names {
		out = append(out, probe.Tool{Name: n})
	}
	return out
}

func TestGenerate(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	ws := filepath.Join(base, "ws")
	os.Mkdir(ws, 0o755)
	yes := true
	res := &probe.Result{Tools: append(tools("write_file", "read_text_file", "read_text_file", "bad name", "echo"),
		probe.Tool{Name: "open_nodes", Annotations: &probe.Annotations{ReadOnlyHint: &yes},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"filePath":{"type":"string"},"count":{"type":"integer"},"where":{"type":"string","description":"the directory to search"}}}`)}),
		Prompts: []string{"p"}}
	out, err := Generate(Input{ID: "wrap-x-1", Base: base, Paths: []string{ws}, Probe: res})
	if err != nil {
		t.Fatal(err)
	}
	s := out.Scope
	if strings.Join(s.AllowedPaths, ",") != "ws" || s.AccessMode != schema.AccessRead || s.Approval != schema.ApprovalRequiredForWrite || s.Network != nil || s.ExpiresAfterMinutes != DefaultExpiresAfterMinutes {
		t.Errorf("scope %+v", s)
	}
	if got := strings.Join(s.ToolAllowlist, ","); got != "echo,open_nodes,read_text_file,write_file" {
		t.Errorf("allowlist %s", got)
	}
	if len(s.ToolClasses) != 2 || s.ToolClasses["read_text_file"] != "read" || s.ToolClasses["write_file"] != "destructive" {
		t.Errorf("classes %v: only the table's tools get one", s.ToolClasses)
	}
	if strings.Join(out.Unknown, ",") != "echo,open_nodes" {
		t.Errorf("unknown %v", out.Unknown)
	}
	for _, n := range out.Tools {
		switch n.Name {
		case "bad name":
			if n.Allowed || n.Problem == "" {
				t.Errorf("invalid name allowed: %+v", n)
			}
		case "open_nodes":
			if n.Hint != "readOnlyHint=true" || strings.Join(n.PathArgs, ",") != "filePath,where" || SuggestedClass(n) != "read" {
				t.Errorf("open_nodes %+v", n)
			}
		}
	}
	again, _ := Generate(Input{ID: "wrap-x-1", Base: base, Paths: []string{ws, ws}, Probe: res})
	if string(again.JSON) != string(out.JSON) {
		t.Error("the same input gives another scope")
	}
	if _, err := schema.ParseScope(out.JSON); err != nil {
		t.Error(err)
	}
	review := Review(ReviewHeader{Server: "x", ScopeFile: "/s.json", Base: base, ProbeMode: "enforce"}, Input{Paths: []string{ws}}, out, []string{"a note"})
	for _, w := range []string{"`echo`: **REVIEW**", "`read_text_file`: read", "`write_file`: destructive (mcpwarden's table): refused", "HIDDEN", `"open_nodes": "read"`, "a note", "prompt_allowlist"} {
		if !strings.Contains(review, w) {
			t.Errorf("review lacks %q:\n%s", w, review)
		}
	}
}

func TestGenerateRefuses(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	if _, err := Generate(Input{ID: "x", Base: base, Paths: []string{base}, Probe: &probe.Result{Tools: tools("bad name")}}); err == nil {
		t.Error("a scope without a tool")
	}
	if _, err := Generate(Input{ID: "x", Base: base, Paths: []string{"/etc"}, Probe: &probe.Result{Tools: tools("a")}}); err == nil {
		t.Error("a path outside the base")
	}
	var many []string
	for i := 0; i < 300; i++ {
		many = append(many, fmt.Sprintf("t%03d", i))
	}
	out, err := Generate(Input{ID: "x", Base: base, Paths: []string{base}, Probe: &probe.Result{Tools: tools(many...)}})
	if err != nil || len(out.Scope.ToolAllowlist) != 256 || out.Tools[299].Allowed {
		t.Errorf("300 tools: %v, %d allowed", err, len(out.Scope.ToolAllowlist))
	}
}

func TestScopeID(t *testing.T) {
	for _, name := range []string{"filesystem", "файлы 📁", "\u202etxt.exe", "../../etc", "", strings.Repeat("a", 300)} {
		id := ScopeID("wrap", name, "/cfg")
		s := &schema.Scope{ScopeID: id, AllowedPaths: []string{"."}, AccessMode: "read", ToolAllowlist: []string{"t"}, Approval: "none", ExpiresAfterMinutes: 1}
		b, _ := json.Marshal(s)
		if _, err := schema.ParseScope(b); err != nil || strings.ContainsAny(id, "/ ") {
			t.Errorf("ScopeID(%q) = %q: %v", name, id, err)
		}
	}
	if ScopeID("wrap", "fs", "/a") == ScopeID("wrap", "fs", "/b") {
		t.Error("two files' servers of one name share a scope id")
	}
}

// TestReviewFlagsWholeHomes: a grant of all of /, of a home under /home or
// /root, or of the user's home wherever it lives is flagged Wide; a
// project directory is not.
func TestReviewFlagsWholeHomes(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(base, "var", "lib", "svc")
	proj := filepath.Join(home, "project")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		base, path string
		wide       bool
	}{
		{"home elsewhere, as the base", home, home, true},
		{"home elsewhere, inside the base", base, home, true},
		{"a project in the home", base, proj, false},
		{"the base, not a home", base, base, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := Generate(Input{ID: "x", Base: c.base, Paths: []string{c.path}, Probe: &probe.Result{Tools: tools("read_text_file")}})
			if err != nil {
				t.Fatal(err)
			}
			review := Review(ReviewHeader{Server: "x", ScopeFile: "/s.json", Base: c.base, ProbeMode: "enforce", Home: home}, Input{Paths: []string{c.path}}, out, nil)
			if got := strings.Contains(review, "**Wide:** the server was given "+c.path+" as a whole"); got != c.wide {
				t.Errorf("Wide note %v, want %v:\n%s", got, c.wide, review)
			}
		})
	}
}
