package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
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
