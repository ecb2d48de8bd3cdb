package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestTableToolsOtherMembers: the members of a table tool's call that the
// table does not read as the filesystem server does (members it does not
// name, and its counts, flags and words) are checked as an unknown tool's
// strings, the server's working directory included; the table's own path
// members keep the filesystem server's rule, and its free text stays
// unchecked. Before: they were resolved under the scope's directories
// only, so a name under the working directory (outside the scope) passed.
func TestTableToolsOtherMembers(t *testing.T) {
	_, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	work := filepath.Join(base, "outside")
	for _, n := range []string{"notes.txt", "name", "size"} {
		if err := os.WriteFile(filepath.Join(work, n), []byte("out"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := schema.Canonicalize(&schema.Scope{ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"read_text_file"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5}, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Scope: sc, Home: filepath.Join(base, "allowed"), WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(base, "allowed", "probe.txt")
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	for _, tc := range []struct {
		tool string
		args json.RawMessage
		want schema.ErrorCode
	}{
		{"read_text_file", j(map[string]any{"path": in, "target": "notes.txt"}), schema.ErrPathOutsideScope},
		{"read_text_file", j(map[string]any{"path": in, "opts": map[string]any{"file": "notes.txt"}}), schema.ErrPathOutsideScope},
		{"read_text_file", j(map[string]any{"path": in, "head": "notes.txt"}), schema.ErrPathOutsideScope},
		{"list_directory_with_sizes", j(map[string]any{"path": eff[0], "sortBy": "notes.txt"}), schema.ErrPathOutsideScope},
		{"search_files", j(map[string]any{"path": eff[0], "pattern": "*.md", "root": "notes.txt"}), schema.ErrPathOutsideScope},
		{"move_file", j(map[string]any{"source": in, "destination": filepath.Join(eff[0], "p2.txt"), "via": "notes.txt"}), schema.ErrPathOutsideScope},
		{"read_text_file", j(map[string]any{"path": in, "head": 5}), ""},
		// The real server's own words, though files of those names are
		// under the working directory.
		{"list_directory_with_sizes", j(map[string]any{"path": eff[0], "sortBy": "name"}), ""},
		{"list_directory_with_sizes", j(map[string]any{"path": eff[0], "sortBy": "size"}), ""},
		{"read_text_file", j(map[string]any{"path": in, "head": "size"}), schema.ErrPathOutsideScope},
		{"read_text_file", j(map[string]any{"path": "probe.txt"}), ""}, // the server's own rule: under its directory
		{"write_file", j(map[string]any{"path": in, "content": "notes.txt"}), ""},
	} {
		_, d := p.CheckArguments(tc.tool, tc.args, eff)
		if tc.want == "" && d != nil {
			t.Errorf("%s %s: denied: %v", tc.tool, tc.args, d)
		}
		if tc.want != "" && (d == nil || d.Code != tc.want) {
			t.Errorf("%s %s: got %v, want %s", tc.tool, tc.args, d, tc.want)
		}
	}
}

// TestTildeUserPaths: "~user/…" of a user of this host is checked also as
// that user's home (a server may expand it), for a table tool's path as
// for any string; "~" names no user here, and a name no user has stays a
// relative name. Before: only the relative name was checked, inside the
// scope's directories.
func TestTildeUserPaths(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	for _, tc := range []struct {
		tool, path string
		want       schema.ErrorCode
	}{
		{"read_text_file", "~root/.profile", schema.ErrPathOutsideScope},
		{"read_text_file", "~root", schema.ErrPathOutsideScope},
		{"other", "~root/.profile", schema.ErrPathOutsideScope},
		{"read_text_file", "~no-such-user-rt9/x", ""},
		{"read_text_file", "~ȺȺ/x", ""},
	} {
		_, d := p.CheckArguments(tc.tool, j(map[string]any{"path": tc.path}), eff)
		if tc.want == "" && d != nil {
			t.Errorf("%s %q: denied: %v", tc.tool, tc.path, d)
		}
		if tc.want != "" && (d == nil || d.Code != tc.want) {
			t.Errorf("%s %q: got %v, want %s", tc.tool, tc.path, d, tc.want)
		}
	}
	for _, s := range []string{"~", "~/x", "x~", "~\x00/x"} {
		if _, _, ok := tildeUser(s); ok {
			t.Errorf("tildeUser(%q) names a user", s)
		}
	}
}
