package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// fixture builds base/{allowed,outside} with files and symlinks and returns
// a policy whose scope allows base/allowed.
func fixture(t testing.TB) (*Policy, string) {
	t.Helper()
	base := t.TempDir()
	base, _ = filepath.EvalSymlinks(base)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(base, "allowed", "sub"), 0o755))
	must(os.MkdirAll(filepath.Join(base, "outside"), 0o755))
	must(os.MkdirAll(filepath.Join(base, "allowed", ".git"), 0o755))
	must(os.WriteFile(filepath.Join(base, "allowed", "probe.txt"), []byte("in"), 0o644))
	must(os.WriteFile(filepath.Join(base, "allowed", ".env"), []byte("SECRET=1"), 0o644))
	must(os.WriteFile(filepath.Join(base, "outside", "probe.txt"), []byte("out"), 0o644))
	must(os.Symlink(filepath.Join(base, "outside"), filepath.Join(base, "allowed", "escape")))
	must(os.Symlink(filepath.Join(base, "outside", "nothing-here"), filepath.Join(base, "allowed", "dangling")))
	must(os.Symlink(filepath.Join(base, "allowed", "probe.txt"), filepath.Join(base, "outside", "link-in")))
	must(os.Symlink("probe.txt", filepath.Join(base, "allowed", "inner-link")))
	sc := &schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"read_text_file"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
		ToolPathArgs: map[string][]string{"custom": {"where"}},
	}
	cs, err := schema.Canonicalize(sc, base, time.Now())
	must(err)
	p, err := New(Config{Scope: cs, Home: filepath.Join(base, "allowed")})
	must(err)
	return p, base
}

func TestCheckPath(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	a := func(rel string) string { return filepath.Join(base, rel) }
	tests := []struct {
		name string
		raw  string
		want schema.ErrorCode // "" = allowed
	}{
		{"file inside", a("allowed/probe.txt"), ""},
		{"the root itself", a("allowed"), ""},
		{"new file inside", a("allowed/new.txt"), ""},
		{"new nested dirs inside", a("allowed/x/y/z.txt"), ""},
		{"relative", "probe.txt", ""},
		{"relative dotdot", "../outside/probe.txt", schema.ErrPathOutsideScope},
		{"tilde is home", "~/probe.txt", ""},
		{"tilde user is relative", "~root/x", ""},
		{"dotdot escape", a("allowed/../outside/probe.txt"), schema.ErrPathOutsideScope},
		{"outside", a("outside/probe.txt"), schema.ErrPathOutsideScope},
		{"sibling prefix", a("allowed2/x"), schema.ErrPathOutsideScope},
		{"symlink dir escape", a("allowed/escape/probe.txt"), schema.ErrPathOutsideScope},
		{"new file through symlink dir", a("allowed/escape/new.txt"), schema.ErrPathOutsideScope},
		{"dangling symlink write target", a("allowed/dangling"), schema.ErrPathOutsideScope},
		{"below dangling symlink", a("allowed/dangling/x"), schema.ErrPathOutsideScope},
		{"symlink from outside to inside", a("outside/link-in"), schema.ErrPathOutsideScope},
		{"inner symlink", a("allowed/inner-link"), ""},
		{"below a file", a("allowed/probe.txt/x"), schema.ErrPathOutsideScope},
		{"secret .env", a("allowed/.env"), schema.ErrSecretPath},
		{"secret .ENV case", a("allowed/.ENV"), schema.ErrSecretPath},
		{"inside .git", a("allowed/.git/config"), schema.ErrSecretPath},
		{"private key name", a("allowed/sub/id_ed25519"), schema.ErrSecretPath},
		{"NUL", a("allowed/probe.txt\x00.png"), schema.ErrPathOutsideScope},
		{"newline", a("allowed/a\nb"), schema.ErrPathOutsideScope},
		{"bidi override", a("allowed/\u202etxt.exe"), schema.ErrPathOutsideScope},
		{"zero width", a("allowed/pro\u200bbe.txt"), schema.ErrPathOutsideScope},
		{"combining mark", a("allowed/cafe\u0301"), schema.ErrPathOutsideScope},
		{"kelvin sign (NFC changes it)", a("allowed/\u212aube"), schema.ErrPathOutsideScope},
		{"angstrom sign", a("allowed/\u212b.txt"), schema.ErrPathOutsideScope},
		{"precomposed is fine", a("allowed/caf\u00e9.txt"), ""},
		{"backslash", a("allowed\\..\\outside"), schema.ErrPathOutsideScope},
		{"fullwidth solidus is just a name", a("allowed/a\uff0f..\uff0fb"), ""},
		{"empty", "", schema.ErrPathOutsideScope},
		{"root", "/", schema.ErrPathOutsideScope},
		{"proc self root", "/proc/self/root" + a("allowed/probe.txt"), schema.ErrPathOutsideScope},
		{"huge", a("allowed/" + strings.Repeat("a", 5000)), schema.ErrPathOutsideScope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			real, d := p.CheckPath(tt.raw, FSRelative(eff), eff)
			if tt.want == "" {
				if d != nil {
					t.Fatalf("denied: %v", d)
				}
				if !Within(eff, real) {
					t.Fatalf("allowed real path %q outside the scope", real)
				}
				return
			}
			if d == nil || d.Code != tt.want {
				t.Fatalf("got %v, want %s", d, tt.want)
			}
		})
	}
}

func TestCheckPathNoEffectiveDeniesAll(t *testing.T) {
	p, base := fixture(t)
	for _, raw := range []string{filepath.Join(base, "allowed", "probe.txt"), "probe.txt", "~/probe.txt"} {
		if _, d := p.CheckPath(raw, FSRelative(nil), nil); d == nil {
			t.Fatalf("%q allowed with an empty effective scope", raw)
		}
	}
}

func TestCheckArguments(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	in := filepath.Join(base, "allowed", "probe.txt")
	out := filepath.Join(base, "outside", "probe.txt")
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	tests := []struct {
		name, tool string
		args       json.RawMessage
		want       schema.ErrorCode
		nPaths     int
	}{
		{"read in", "read_text_file", j(map[string]any{"path": in}), "", 1},
		{"read out", "read_text_file", j(map[string]any{"path": out}), schema.ErrPathOutsideScope, 0},
		{"path not string", "read_text_file", j(map[string]any{"path": []string{in}}), schema.ErrMalformedRequest, 0},
		{"multiple one bad", "read_multiple_files", j(map[string]any{"paths": []string{in, out}}), schema.ErrPathOutsideScope, 0},
		{"multiple ok", "read_multiple_files", j(map[string]any{"paths": []string{in, in}}), "", 2},
		{"move out", "move_file", j(map[string]any{"source": in, "destination": out}), schema.ErrPathOutsideScope, 0},
		{"search dotdot glob", "search_files", j(map[string]any{"path": eff[0], "pattern": "../outside/*"}), schema.ErrPathOutsideScope, 0},
		{"search abs glob", "search_files", j(map[string]any{"path": eff[0], "pattern": "/etc/*"}), schema.ErrPathOutsideScope, 0},
		{"search brace dotdot", "search_files", j(map[string]any{"path": eff[0], "pattern": "{..,x}/*"}), schema.ErrPathOutsideScope, 0},
		{"search ok", "search_files", j(map[string]any{"path": eff[0], "pattern": "**/*.txt", "excludePatterns": []string{"node_modules"}}), "", 1},
		{"tree exclude dotdot", "directory_tree", j(map[string]any{"path": eff[0], "excludePatterns": []string{"../x"}}), schema.ErrPathOutsideScope, 0},
		{"declared arg", "custom", j(map[string]any{"where": out}), schema.ErrPathOutsideScope, 0},
		{"declared arg list", "custom", j(map[string]any{"where": []string{in, out}}), schema.ErrPathOutsideScope, 0},
		{"guessed arg of unknown tool", "other", j(map[string]any{"file_path": out}), schema.ErrPathOutsideScope, 0},
		{"guessed arg case", "other", j(map[string]any{"Path": out}), schema.ErrPathOutsideScope, 0},
		{"no args", "list_allowed_directories", nil, "", 0},
		{"args not object", "read_text_file", json.RawMessage(`[1]`), schema.ErrMalformedRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths, d := p.CheckArguments(tt.tool, tt.args, eff)
			if tt.want == "" {
				if d != nil {
					t.Fatalf("denied: %v", d)
				}
				if len(paths) != tt.nPaths {
					t.Fatalf("checked %d paths, want %d", len(paths), tt.nPaths)
				}
				return
			}
			if d == nil || d.Code != tt.want {
				t.Fatalf("got %v, want %s", d, tt.want)
			}
		})
	}
}

func TestClasses(t *testing.T) {
	p, _ := fixture(t)
	for tool, want := range map[string]Class{
		"read_text_file": ClassRead, "write_file": ClassDestructive, "edit_file": ClassDestructive,
		"move_file": ClassDestructive, "create_directory": ClassWrite, "unknown_tool": ClassDestructive,
		"READ_TEXT_FILE": ClassDestructive,
	} {
		if got := p.ClassOf(tool); got != want {
			t.Errorf("ClassOf(%q) = %s, want %s", tool, got, want)
		}
	}
	if p.Allowed("READ_TEXT_FILE") || p.Allowed("read_text_file ") || p.Allowed("read_text_fil\u0435") || !p.Allowed("read_text_file") {
		t.Error("allowlist must match tool names byte for byte")
	}
}

func TestFileURI(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	in := "file://" + filepath.Join(base, "allowed", "probe.txt")
	tests := []struct {
		uri  string
		want schema.ErrorCode
	}{
		{in, ""},
		{"file://localhost" + filepath.Join(base, "allowed", "probe.txt"), ""},
		{"file://" + filepath.Join(base, "allowed") + "/%2e%2e/outside/probe.txt", schema.ErrPathOutsideScope},
		{"file://" + filepath.Join(base, "allowed") + "/..%2foutside/probe.txt", schema.ErrPathOutsideScope},
		{"file://" + filepath.Join(base, "allowed") + "/probe.txt%00", schema.ErrPathOutsideScope},
		{"file://evil.example" + filepath.Join(base, "allowed", "probe.txt"), schema.ErrPathOutsideScope},
		{in + "?x=1", schema.ErrPathOutsideScope},
		{"file:relative", schema.ErrPathOutsideScope},
		{"https://example.com/", schema.ErrPathOutsideScope},
		{"file://" + filepath.Join(base, "allowed", ".env"), schema.ErrSecretPath},
	}
	for _, tt := range tests {
		t.Run(tt.uri, func(t *testing.T) {
			_, d := p.CheckURI(tt.uri, eff)
			if tt.want == "" && d != nil {
				t.Fatalf("denied: %v", d)
			}
			if tt.want != "" && (d == nil || d.Code != tt.want) {
				t.Fatalf("got %v, want %s", d, tt.want)
			}
		})
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"probe.txt", "../outside/probe.txt", "~/x", "/etc/passwd", "a/../../b", "escape/probe.txt", ".env", "dangling/x", "a\x00b", "\u202e"} {
		f.Add(s)
	}
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, in := range []string{raw, filepath.Join(eff[0], raw)} {
			real, d := p.CheckPath(in, FSRelative(eff), eff)
			if d != nil {
				continue
			}
			if !Within(eff, real) {
				t.Fatalf("%q allowed but resolves outside: %q", in, real)
			}
			if p.IsSecret(real) {
				t.Fatalf("%q allowed but is secret: %q", in, real)
			}
			// Whatever exists at the allowed path must really be inside.
			if r, err := filepath.EvalSymlinks(real); err == nil && !Within(eff, r) {
				t.Fatalf("%q allowed but the filesystem resolves it outside: %q", in, r)
			}
		}
	})
}

func FuzzFilePath(f *testing.F) {
	for _, s := range []string{"file:///a/b", "file:///a/%2e%2e/b", "file://h/x", "file:///a%2fb", "file:///%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		p, err := FilePath(uri)
		if err != nil {
			return
		}
		if !filepath.IsAbs(p) || strings.Contains(p, "\x00") {
			t.Fatalf("FilePath(%q) = %q", uri, p)
		}
	})
}

// TestPathsAnywhere: paths nested at any depth, under any key, in any of
// the forms a server might read them as, are found and checked.
func TestPathsAnywhere(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	in := filepath.Join(base, "allowed", "probe.txt")
	out := filepath.Join(base, "outside", "probe.txt")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(base, "allowed", "proj", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(base, "allowed", "proj", "deep", ".env"), []byte("K=V"), 0o600))
	must(os.MkdirAll(filepath.Join(base, "allowed", "clean", "a"), 0o755))
	must(os.WriteFile(filepath.Join(base, "allowed", "clean", "a", "f.txt"), []byte("x"), 0o644))
	sc := *p.scope
	sc.ToolPathArgs = map[string][]string{"nested": {"/options/target"}, "wild": {"/files/*/path"}, "plain": {"where"}}
	pp, err := New(Config{Scope: &sc, Home: filepath.Join(base, "allowed")})
	must(err)
	j := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	tests := []struct {
		name, tool string
		args       json.RawMessage
		want       schema.ErrorCode
	}{
		{"nested in object", "other", j(map[string]any{"options": map[string]any{"target": out}}), schema.ErrPathOutsideScope},
		{"nested in array in object", "other", j(map[string]any{"files": []any{map[string]any{"path": in}, map[string]any{"path": out}}}), schema.ErrPathOutsideScope},
		{"deep", "other", j(map[string]any{"a": []any{[]any{map[string]any{"b": map[string]any{"c": out}}}}}), schema.ErrPathOutsideScope},
		{"nested inside ok", "other", j(map[string]any{"options": map[string]any{"target": in}, "n": 3, "b": true, "z": nil}), ""},
		{"second path of a filesystem tool", "read_text_file", j(map[string]any{"path": in, "fallback": out}), schema.ErrPathOutsideScope},
		{"second path of move_file", "move_file", j(map[string]any{"source": in, "destination": in + ".2", "backup": out}), schema.ErrPathOutsideScope},
		{"content of write_file is text", "write_file", j(map[string]any{"path": in, "content": out}), ""},
		{"edits of edit_file are text", "edit_file", j(map[string]any{"path": in, "edits": []any{map[string]any{"oldText": out, "newText": "/etc/passwd"}}}), ""},
		{"relative escape", "other", j(map[string]any{"q": "../outside/probe.txt"}), schema.ErrPathOutsideScope},
		{"dotdot inside a relative name", "other", j(map[string]any{"q": "allowed/../outside/probe.txt"}), schema.ErrPathOutsideScope},
		{"dot", "other", j(map[string]any{"q": "."}), schema.ErrPathOutsideScope},
		{"tilde", "other", j(map[string]any{"q": "~/../outside/probe.txt"}), schema.ErrPathOutsideScope},
		{"tilde inside", "other", j(map[string]any{"q": "~/probe.txt"}), ""},
		{"percent-encoded", "other", j(map[string]any{"q": "%2e%2e%2foutside%2fprobe.txt"}), schema.ErrPathOutsideScope},
		{"percent-encoded absolute", "other", j(map[string]any{"q": "%2Fetc%2Fpasswd"}), schema.ErrPathOutsideScope},
		{"percent NUL", "other", j(map[string]any{"q": in + "%00.png"}), schema.ErrPathOutsideScope},
		{"url is not a path", "other", j(map[string]any{"url": "https://example.com/a%20b/../c"}), ""},
		{"fullwidth solidus (NFKC)", "other", j(map[string]any{"q": "\uff0fetc\uff0fpasswd"}), schema.ErrPathOutsideScope},
		{"fullwidth dots (NFKC)", "other", j(map[string]any{"q": "\uff0e\uff0e/outside/probe.txt"}), schema.ErrPathOutsideScope},
		{"backslash", "other", j(map[string]any{"q": `..\outside\probe.txt`}), schema.ErrPathOutsideScope},
		{"backslash absolute", "other", j(map[string]any{"q": `\etc\passwd`}), schema.ErrPathOutsideScope},
		{"NUL", "other", j(map[string]any{"q": in + "\x00/../../x"}), schema.ErrPathOutsideScope},
		{"very long", "other", j(map[string]any{"q": "/" + strings.Repeat("a/", 3000)}), schema.ErrPathOutsideScope},
		{"very long text is not a path", "other", j(map[string]any{"q": strings.Repeat("lorem ipsum ", 1000)}), ""},
		{"file uri", "other", j(map[string]any{"uri": "file:///etc/passwd"}), schema.ErrPathOutsideScope},
		{"file uri upper case", "other", j(map[string]any{"uri": "FILE:///etc/passwd"}), schema.ErrPathOutsideScope},
		{"file uri inside", "other", j(map[string]any{"uri": "file://" + in}), ""},
		{"file uri encoded escape", "other", j(map[string]any{"uri": "file://" + filepath.Join(base, "allowed") + "/%2e%2e/outside/probe.txt"}), schema.ErrPathOutsideScope},
		{"existing entry under the base", "other", j(map[string]any{"name": "outside"}), schema.ErrPathOutsideScope},
		{"existing entry inside", "other", j(map[string]any{"name": "allowed/probe.txt"}), ""},
		{"a word is not a path", "other", j(map[string]any{"name": "hello", "list": []string{"a", "b"}}), ""},
		{"member name that is a path", "other", j(map[string]any{"map": map[string]any{out: "x"}}), schema.ErrPathOutsideScope},
		{"argument name that exists is not probed", "other", j(map[string]any{"outside": "hello"}), ""},
		{"secret nested", "other", j(map[string]any{"o": map[string]any{"p": filepath.Join(base, "allowed", ".env")}}), schema.ErrSecretPath},
		{"declared pointer, new relative name outside", "nested", j(map[string]any{"options": map[string]any{"target": "new.txt"}}), schema.ErrPathOutsideScope},
		{"declared pointer, new name inside", "nested", j(map[string]any{"options": map[string]any{"target": "allowed/new.txt"}}), ""},
		{"declared pointer, list", "nested", j(map[string]any{"options": map[string]any{"target": []string{"allowed/a", "b"}}}), schema.ErrPathOutsideScope},
		{"declared wildcard", "wild", j(map[string]any{"files": []any{map[string]any{"path": "allowed/x"}, map[string]any{"path": "y"}}}), schema.ErrPathOutsideScope},
		{"declared wildcard ok", "wild", j(map[string]any{"files": []any{map[string]any{"path": "allowed/x"}}}), ""},
		{"declared plain name", "plain", j(map[string]any{"where": "z"}), schema.ErrPathOutsideScope},
		{"move a directory holding a secret", "move_file", j(map[string]any{"source": filepath.Join(base, "allowed", "proj"), "destination": filepath.Join(base, "allowed", "renamed")}), schema.ErrSecretPath},
		{"move a clean directory", "move_file", j(map[string]any{"source": filepath.Join(base, "allowed", "clean"), "destination": filepath.Join(base, "allowed", "renamed")}), ""},
		{"move into a directory holding a secret", "move_file", j(map[string]any{"source": in, "destination": filepath.Join(base, "allowed", "proj")}), schema.ErrSecretPath},
		{"rename by name", "renameFolder", j(map[string]any{"from": filepath.Join(base, "allowed", "proj"), "to": filepath.Join(base, "allowed", "x")}), schema.ErrSecretPath},
		{"copy by name", "copy-tree", j(map[string]any{"spec": map[string]any{"src": filepath.Join(base, "allowed", "proj")}, "dst": filepath.Join(base, "allowed", "y")}), schema.ErrSecretPath},
		{"mv", "mv", j(map[string]any{"args": []string{filepath.Join(base, "allowed", "proj"), filepath.Join(base, "allowed", "z")}}), schema.ErrSecretPath},
		{"move the parent of a secret by relative name", "move_file", j(map[string]any{"source": "proj", "destination": "other"}), schema.ErrSecretPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, d := pp.CheckArguments(tt.tool, tt.args, eff)
			if tt.want == "" {
				if d != nil {
					t.Fatalf("denied: %v", d)
				}
				return
			}
			if d == nil || d.Code != tt.want {
				t.Fatalf("got %v, want %s", d, tt.want)
			}
		})
	}
}

func TestMoveSubtreeBounds(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	big := filepath.Join(base, "allowed", "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= maxSubtree; i++ {
		if err := os.WriteFile(filepath.Join(big, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args, _ := json.Marshal(map[string]any{"source": big, "destination": big + "2"})
	if _, d := p.CheckArguments("move_file", args, eff); d == nil || d.Code != schema.ErrPathOutsideScope || !strings.Contains(d.Reason, "too large") {
		t.Fatalf("a subtree beyond the bound = %v, want a refusal", d)
	}
}

func TestProbeBound(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	words := make([]string, maxProbes+1)
	for i := range words {
		words[i] = "w" + strconv.Itoa(i)
	}
	args, _ := json.Marshal(map[string]any{"words": words})
	if _, d := p.CheckArguments("other", args, eff); d == nil || d.Code != schema.ErrMalformedRequest {
		t.Fatalf("more strings than the probe bound = %v, want a refusal", d)
	}
}

func TestMovesByName(t *testing.T) {
	for name, want := range map[string]bool{
		"move_file": true, "renameFolder": true, "copy-tree": true, "mv": true, "fs.cp": true, "duplicateNote": true,
		"remove_file": false, "movie_search": false, "copyright_notice": false, "read_text_file": false, "scp": false,
	} {
		if got := MovesByName(name); got != want {
			t.Errorf("MovesByName(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzMovesByNameAgrees: the in-place split of an ASCII name says what the
// split into words says, for any name.
func FuzzMovesByNameAgrees(f *testing.F) {
	for _, s := range []string{"move_file", "renameFolder", "copy-tree", "mv", "fs.cp", "duplicateNote", "remove_file",
		"movie_search", "MOVE", "Move2Trash", "x9Move", "a/cp b", "verylongwordthatislongerthansixteen_move", "moveverylongwordthatislongerthansixteen",
		"rename\x00", "cópia", "mové", "MoveÉ", "_", "", "ABCMove", "abcMOVE", "abc9Rename"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := MovesByName(name), movesByWords(name); got != want {
			t.Fatalf("MovesByName(%q) = %v, the split into words says %v", name, got, want)
		}
	})
}

// TestWithinIsAPrefixAtASeparator: Within's in-place test reads as a
// prefix up to a '/' of the string, and only that.
func TestWithinIsAPrefixAtASeparator(t *testing.T) {
	for _, c := range []struct {
		dirs []string
		p    string
		want bool
	}{
		{[]string{"/a/b"}, "/a/b", true},
		{[]string{"/a/b"}, "/a/b/c", true},
		{[]string{"/a/b"}, "/a/bc", false},
		{[]string{"/a/b"}, "/a/", false},
		{[]string{"/a/b"}, "/a", false},
		{[]string{"/x", "/a/b"}, "/a/b/", true},
		{[]string{"/"}, "/etc", true},
		{[]string{"/a/b"}, "", false},
		{nil, "/a", false},
	} {
		if got := Within(c.dirs, c.p); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.dirs, c.p, got, c.want)
		}
	}
}

// TestPolicyHelpersAllocateNothing: what every call's check runs for a
// tool's name and an ASCII string allocates nothing (MovesByName made the
// name's words, Within a string per directory, the normal-form checks a
// buffer; TestPolicyHelpersAllocateNothing fails on the code before).
func TestPolicyHelpersAllocateNothing(t *testing.T) {
	// (Directories longer than the 32 bytes a concatenation may take on the stack.)
	dirs := []string{"/srv/another-directory-of-the-scope", "/srv/the-base-directory-of-a-run/allowed"}
	for name, f := range map[string]func(){
		"MovesByName": func() { _ = MovesByName("read_text_file") || MovesByName("renameFolder") },
		"Within":      func() { _ = Within(dirs, "/srv/the-base-directory-of-a-run/allowed/probe.txt") },
		"CheckForm":   func() { _ = CheckForm("/srv/the-base-directory-of-a-run/allowed/probe.txt") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times, want 0", name, n)
		}
	}
}

// FuzzCheckArguments puts a fuzzed string at several depths of an unknown
// tool's arguments: when the call is allowed, every form of the string that
// looks like a path resolves inside the scope and is not secret.
func FuzzCheckArguments(f *testing.F) {
	for _, s := range []string{"/etc/passwd", "../outside/probe.txt", "%2e%2e/x", "\uff0fetc", `..\x`, "file:///etc", "outside", "probe.txt", "~/x", "a\x00b",
		"ȺȺȺ/../../outside", "\u212a/..", "ｅｔｃ/passwd", "outside/ⱥ", "~root/.profile", "~ȺȺ/x"} {
		f.Add(s)
	}
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	f.Fuzz(func(t *testing.T, s string) {
		for _, args := range []any{
			map[string]any{"q": s},
			map[string]any{"a": map[string]any{"b": []any{s}}},
			map[string]any{"m": map[string]any{s: 1}},
		} {
			raw, err := json.Marshal(args)
			if err != nil {
				return
			}
			// A tool the proxy does not know, and one of the table's
			// names with members the table does not name (read as an
			// unknown tool's since the ninth round).
			_, d := p.CheckArguments("other_tool", raw, eff)
			if _, d2 := p.CheckArguments("read_text_file", raw, eff); d == nil || d2 == nil {
				d = nil
			}
			if d != nil {
				continue
			}
			for _, form := range []string{s, strings.ReplaceAll(s, `\`, "/")} {
				if !looksLikePath(form) || hasFileScheme(form) {
					continue
				}
				real, d := p.CheckPath(form, BaseRelative(base), eff)
				if d != nil || !Within(eff, real) {
					t.Fatalf("args %s allowed, but %q is %v (%q)", raw, form, d, real)
				}
			}
		}
	})
}

func TestProposeClass(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		name string
		h    Hints
		want Class
	}{
		{"read_text_file", Hints{Destructive: &yes}, ClassRead}, // the table wins over hints
		{"write_file", Hints{ReadOnly: &yes}, ClassDestructive},
		{"search", Hints{ReadOnly: &yes}, ClassRead},
		{"append_note", Hints{Destructive: &no}, ClassWrite},
		{"drop_table", Hints{}, ClassDestructive},
		{"x", Hints{ReadOnly: &no, Destructive: &yes}, ClassDestructive},
	} {
		if got := ProposeClass(c.name, c.h); got != c.want {
			t.Errorf("ProposeClass(%q) = %s, want %s", c.name, got, c.want)
		}
	}
}
