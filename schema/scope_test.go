package schema

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const validScope = `{
  "scope_id": "scope-20260827-demo",
  "allowed_paths": ["workspace/src", "workspace/tests"],
  "resource_refs": ["resource:repo-readme"],
  "access_mode": "read",
  "tool_allowlist": ["list_directory", "read_text_file"],
  "approval": "required_for_write",
  "expires_after_minutes": 30
}`

func TestParseScopeAcceptsSeedExample(t *testing.T) {
	s, err := ParseScope([]byte(validScope))
	if err != nil {
		t.Fatalf("ParseScope: %v", err)
	}
	if s.ScopeID != "scope-20260827-demo" || s.AccessMode != AccessRead || s.ExpiresAfterMinutes != 30 {
		t.Fatalf("unexpected parse: %+v", s)
	}
}

func TestParseScopeRefuses(t *testing.T) {
	tests := []struct {
		name, input, field, reason string
	}{
		{"empty", "", "", "empty"},
		{"whitespace", "  \n ", "", "empty"},
		{"not object", `[]`, "", "wrong type"},
		{"unknown field", strings.Replace(validScope, `"approval"`, `"approvl": "none", "approval"`, 1), "approvl", "unknown field"},
		{"duplicate key", strings.Replace(validScope, `"access_mode": "read"`, `"access_mode": "read", "access_mode": "write"`, 1), "access_mode", "more than once"},
		{"nested duplicate", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "network": {"connect_tcp": [1], "connect_tcp": [2]}`, 1), "network.connect_tcp", "more than once"},
		{"case-variant duplicate", strings.Replace(validScope, `"access_mode": "read"`, `"access_mode": "read", "ACCESS_MODE": "write"`, 1), "ACCESS_MODE", "more than once"},
		{"case-variant duplicate first", strings.Replace(validScope, `"access_mode": "read"`, `"ACCESS_MODE": "write", "access_mode": "read"`, 1), "access_mode", "more than once"},
		{"case variant alone", strings.Replace(validScope, `"access_mode": "read"`, `"Access_Mode": "write"`, 1), "Access_Mode", "unknown field"},
		{"case variant of a nested field", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "network": {"Connect_TCP": [443]}`, 1), "network.Connect_TCP", "unknown field"},
		{"case-variant map keys", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_classes": {"write_file": "read", "WRITE_FILE": "write"}`, 1), "tool_classes.WRITE_FILE", "more than once"},
		{"kelvin-sign key", strings.Replace(validScope, `"tool_allowlist"`, `"tool_allowlist": [], "tool_allowlis\u212a"`, 1), "", ""},
		{"escaped duplicate", strings.Replace(validScope, `"access_mode": "read"`, `"access_mode": "read", "\u0061ccess_mode": "write"`, 1), "access_mode", "more than once"},
		{"wrong type", strings.Replace(validScope, `30`, `"30"`, 1), "expires_after_minutes", "wrong type"},
		{"float minutes", strings.Replace(validScope, `30`, `30.5`, 1), "expires_after_minutes", "wrong type"},
		{"trailing data", validScope + `{}`, "", "trailing"},
		{"trailing garbage", validScope + `x`, "", ""},
		{"missing id", strings.Replace(validScope, `"scope-20260827-demo"`, `""`, 1), "scope_id", "missing"},
		{"bad id", strings.Replace(validScope, `"scope-20260827-demo"`, `"a b"`, 1), "scope_id", ""},
		{"empty paths", strings.Replace(validScope, `["workspace/src", "workspace/tests"]`, `[]`, 1), "allowed_paths", "empty"},
		{"null paths", strings.Replace(validScope, `["workspace/src", "workspace/tests"]`, `null`, 1), "allowed_paths", "empty"},
		{"absolute path", strings.Replace(validScope, `"workspace/src"`, `"/etc"`, 1), "allowed_paths[0]", "absolute"},
		{"dotdot", strings.Replace(validScope, `"workspace/src"`, `"workspace/../.."`, 1), "allowed_paths[0]", ".."},
		{"dotdot only", strings.Replace(validScope, `"workspace/src"`, `".."`, 1), "allowed_paths[0]", ".."},
		{"tilde", strings.Replace(validScope, `"workspace/src"`, `"~/x"`, 1), "allowed_paths[0]", "~"},
		{"empty path", strings.Replace(validScope, `"workspace/src"`, `""`, 1), "allowed_paths[0]", "empty"},
		{"nul in path", strings.Replace(validScope, `"workspace/src"`, `"a\u0000b"`, 1), "allowed_paths[0]", "control"},
		{"backslash", strings.Replace(validScope, `"workspace/src"`, `"a\\..\\b"`, 1), "allowed_paths[0]", "backslash"},
		{"unknown mode", strings.Replace(validScope, `"read"`, `"admin"`, 1), "access_mode", "unknown"},
		{"mode case", strings.Replace(validScope, `"read"`, `"READ"`, 1), "access_mode", "unknown"},
		{"missing mode", strings.Replace(validScope, `"access_mode": "read",`, ``, 1), "access_mode", "missing"},
		{"empty tools", strings.Replace(validScope, `["list_directory", "read_text_file"]`, `[]`, 1), "tool_allowlist", "empty"},
		{"bad tool", strings.Replace(validScope, `"list_directory"`, `"list directory"`, 1), "tool_allowlist[0]", ""},
		{"unknown approval", strings.Replace(validScope, `"required_for_write"`, `"sometimes"`, 1), "approval", "unknown"},
		{"zero expiry", strings.Replace(validScope, `30`, `0`, 1), "expires_after_minutes", "between"},
		{"negative expiry", strings.Replace(validScope, `30`, `-5`, 1), "expires_after_minutes", "between"},
		{"huge expiry", strings.Replace(validScope, `30`, `99999999999999999999`, 1), "expires_after_minutes", ""},
		{"bad time", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "issued_at": "yesterday"`, 1), "", ""},
		{"bad port", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "network": {"connect_tcp": [70000]}`, 1), "network.connect_tcp", "outside"},
		{"negative limit", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "limits": {"max_processes": -1}`, 1), "limits.max_processes", "between"},
		{"huge memory limit", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "limits": {"max_memory_mb": 9999999999}`, 1), "limits.max_memory_mb", "between"},
		{"empty limits", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "limits": {}`, 1), "limits", "names no limit"},
		{"unknown limit", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "limits": {"max_cpu": 1}`, 1), "limits.max_cpu", "unknown field"},
		{"bad tool class", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_classes": {"x": "harmless"}`, 1), "tool_classes.x", "unknown class"},
		{"bad prompt name", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "prompt_allowlist": ["a b"]`, 1), "prompt_allowlist[0]", "prompt name"},
		{"pointer with empty token", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_path_args": {"t": ["/a//b"]}`, 1), "tool_path_args.t", "empty token"},
		{"pointer with bad escape", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_path_args": {"t": ["/a~2"]}`, 1), "tool_path_args.t", "'~'"},
		{"bad plain argument", strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_path_args": {"t": ["a b"]}`, 1), "tool_path_args.t", "argument"},
		{"invalid utf8", "{\"scope_id\": \"\xff\"}", "", "UTF-8"},
		{"oversized", `{"scope_id":"` + strings.Repeat("a", MaxScopeFileSize) + `"}`, "", "larger"},
		{"deep nesting", strings.Repeat("[", 100) + strings.Repeat("]", 100), "", "nested"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseScope([]byte(tt.input))
			if err == nil {
				t.Fatal("accepted, want refusal")
			}
			var se *ScopeError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *ScopeError", err)
			}
			if tt.field != "" && se.Field != tt.field {
				t.Errorf("field = %q, want %q (err: %v)", se.Field, tt.field, err)
			}
			if tt.reason != "" && !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q does not mention %q", err, tt.reason)
			}
		})
	}
}

// newBase builds a base directory with a workspace, an outside directory and
// a few symlinks, and returns the base path.
func newBase(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "base")
	for _, d := range []string{"base/workspace/src", "base/workspace/tests", "base/other", "outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"base/workspace/src/main.go", "outside/secret"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"base/escape-dir":        "../outside",
		"base/escape-file":       "../outside/secret",
		"base/inside-link":       "workspace/src",
		"base/abs-escape":        "/etc",
		"base/workspace/src/up":  "../../../outside",
		"base/dangling":          "nowhere",
		"base/loop":              "loop",
		"base/workspace/devnull": "/dev/null",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func mustParse(t *testing.T, paths ...string) *Scope {
	t.Helper()
	s, err := ParseScope([]byte(validScope))
	if err != nil {
		t.Fatal(err)
	}
	s.AllowedPaths = paths
	return s
}

func TestCanonicalizePaths(t *testing.T) {
	base := newBase(t)
	realBase, _ := filepath.EvalSymlinks(base)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		paths   []string
		want    []CanonicalPath
		wantErr string
	}{
		{"plain", []string{"workspace/src"}, []CanonicalPath{{realBase + "/workspace/src", KindDir}}, ""},
		{"file", []string{"workspace/src/main.go"}, []CanonicalPath{{realBase + "/workspace/src/main.go", KindFile}}, ""},
		{"whole base", []string{"."}, []CanonicalPath{{realBase, KindDir}}, ""},
		{"dot segments and slashes", []string{"./workspace//src/"}, []CanonicalPath{{realBase + "/workspace/src", KindDir}}, ""},
		{"dedupe and sort", []string{"workspace/tests", "inside-link", "workspace/src"}, []CanonicalPath{{realBase + "/workspace/src", KindDir}, {realBase + "/workspace/tests", KindDir}}, ""},
		{"symlink dir escape", []string{"escape-dir"}, nil, "outside the base"},
		{"symlink file escape", []string{"escape-file"}, nil, "outside the base"},
		{"absolute symlink escape", []string{"abs-escape"}, nil, "outside the base"},
		{"nested symlink escape", []string{"workspace/src/up"}, nil, "outside the base"},
		{"escape through link then down", []string{"escape-dir/secret"}, nil, "outside the base"},
		{"dangling", []string{"dangling"}, nil, "does not exist"},
		{"missing", []string{"nope"}, nil, "does not exist"},
		{"loop", []string{"loop"}, nil, "resolve"},
		{"device", []string{"workspace/devnull"}, nil, "outside the base"},
		{"unicode lookalike", []string{"workspace/ѕrc"}, nil, "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Canonicalize(mustParse(t, tt.paths...), base, now)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("accepted %v, want error containing %q", c.AllowedPaths, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if len(c.AllowedPaths) != len(tt.want) {
				t.Fatalf("paths = %v, want %v", c.AllowedPaths, tt.want)
			}
			for i := range tt.want {
				if c.AllowedPaths[i] != tt.want[i] {
					t.Errorf("path[%d] = %v, want %v", i, c.AllowedPaths[i], tt.want[i])
				}
			}
		})
	}
}

func TestCanonicalizeBase(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct{ name, base, want string }{
		{"empty", "", "empty"},
		{"missing", "/nonexistent/base", "does not resolve"},
		{"root", "/", "root directory"},
		{"file", "/etc/hostname", "not a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Canonicalize(mustParse(t, "."), tt.base, now)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCanonicalizeExpiry(t *testing.T) {
	base := newBase(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := []struct {
		name          string
		issued, until *time.Time
		notAfter      time.Time
		wantErr       string
	}{
		{"relative to load", nil, nil, now.Add(30 * time.Minute), ""},
		{"relative to issue", at(-10 * time.Minute), nil, now.Add(20 * time.Minute), ""},
		{"explicit earlier", nil, at(5 * time.Minute), now.Add(5 * time.Minute), ""},
		{"explicit later is capped", at(-10 * time.Minute), at(time.Hour), now.Add(20 * time.Minute), ""},
		{"expired by minutes", at(-31 * time.Minute), nil, time.Time{}, "expired"},
		{"expired exactly", at(-30 * time.Minute), nil, time.Time{}, "expired"},
		{"expired explicit", nil, at(-time.Second), time.Time{}, "expired"},
		{"not yet valid", at(10 * time.Minute), nil, time.Time{}, "not yet valid"},
		{"small skew tolerated", at(30 * time.Second), nil, now.Add(30*time.Second + 30*time.Minute), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, "workspace")
			s.IssuedAt, s.ExpiresAt = tt.issued, tt.until
			c, err := Canonicalize(s, base, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.NotAfter.Equal(tt.notAfter) {
				t.Fatalf("NotAfter = %v, want %v", c.NotAfter, tt.notAfter)
			}
			if c.Expired(tt.notAfter.Add(-time.Nanosecond)) || !c.Expired(tt.notAfter) {
				t.Fatal("Expired disagrees with NotAfter")
			}
		})
	}
}

func TestScopeHashIsStableAndSensitive(t *testing.T) {
	base := newBase(t)
	now := time.Now()
	a, err := Canonicalize(mustParse(t, "workspace/src", "workspace/tests"), base, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Canonicalize(mustParse(t, "workspace/tests/", "./workspace/src", "inside-link"), base, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash {
		t.Fatalf("equivalent scopes hash differently: %s vs %s", a.Hash, b.Hash)
	}
	if !strings.HasPrefix(a.Hash, "sha256:") || len(a.Hash) != len("sha256:")+64 {
		t.Fatalf("hash format %q", a.Hash)
	}
	w := mustParse(t, "workspace/src", "workspace/tests")
	w.AccessMode = AccessWrite
	c, err := Canonicalize(w, base, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash == a.Hash {
		t.Fatal("changing access_mode did not change the hash")
	}
}

func TestContains(t *testing.T) {
	c := &CanonicalScope{AllowedPaths: []CanonicalPath{{"/b/ws", KindDir}, {"/b/file.txt", KindFile}}}
	for p, want := range map[string]bool{
		"/b/ws": true, "/b/ws/x": true, "/b/ws/x/y": true, "/b/wsx": false, "/b/ws-other/x": false,
		"/b/file.txt": true, "/b/file.txt/x": true, "/b/file.txt2": false, "/b": false, "/": false,
	} {
		if got := c.Contains(p); got != want {
			t.Errorf("Contains(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestReadScopeFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "scope.json")
	if err := os.WriteFile(f, []byte(validScope), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScopeFile(f); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScopeFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("missing file accepted")
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(strings.Repeat(" ", MaxScopeFileSize+10)+validScope), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScopeFile(big); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Fatalf("oversized file: %v", err)
	}
}

func FuzzParseScope(f *testing.F) {
	f.Add([]byte(validScope))
	f.Add([]byte(`{"scope_id":"a","allowed_paths":["."],"access_mode":"write","tool_allowlist":["x"],"approval":"none","expires_after_minutes":1,"network":{"connect_tcp":[443]}}`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Add([]byte(`[[[[{}]]]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScope(data)
		if err != nil {
			var se *ScopeError
			if !errors.As(err, &se) {
				t.Fatalf("non-ScopeError %T: %v", err, err)
			}
			return
		}
		// Anything accepted must satisfy the invariants the launcher relies on.
		if len(s.AllowedPaths) == 0 || len(s.ToolAllowlist) == 0 || s.ExpiresAfterMinutes <= 0 {
			t.Fatalf("accepted scope violates invariants: %+v", s)
		}
		for _, p := range s.AllowedPaths {
			if strings.HasPrefix(p, "/") || strings.Contains(p, "\x00") {
				t.Fatalf("accepted unsafe path %q", p)
			}
			for _, seg := range strings.Split(p, "/") {
				if seg == ".." {
					t.Fatalf("accepted traversal %q", p)
				}
			}
		}
	})
}

func FuzzCanonicalizePath(f *testing.F) {
	for _, s := range []string{"workspace/src", ".", "escape-dir", "workspace/src/up/secret", "a/./b", "workspace//src", "inside-link/../escape-dir", "%2e%2e", "workspace/src/\u202e"} {
		f.Add(s)
	}
	base := newBase(f)
	realBase, _ := filepath.EvalSymlinks(base)
	now := time.Now()
	f.Fuzz(func(t *testing.T, p string) {
		s := mustParseF(p)
		if s == nil {
			return
		}
		c, err := Canonicalize(s, base, now)
		if err != nil {
			return
		}
		for _, cp := range c.AllowedPaths {
			if !IsWithin(realBase, cp.Path) {
				t.Fatalf("%q canonicalised to %q outside base %q", p, cp.Path, realBase)
			}
		}
	})
}

func mustParseF(p string) *Scope {
	s, err := ParseScope([]byte(validScope))
	if err != nil {
		return nil
	}
	s.AllowedPaths = []string{p}
	if s.validateFields() != nil {
		return nil
	}
	return s
}

func TestParseScopePointersAndPrompts(t *testing.T) {
	in := strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_path_args": {"t": ["where", "/options/target", "/files/*/path", "/a~1b/~0c"]}, "prompt_allowlist": ["b-prompt", "a-prompt", "a-prompt"]`, 1)
	s, err := ParseScope([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	base := newBase(t)
	s.AllowedPaths = []string{"workspace/src"}
	cs, err := Canonicalize(s, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cs.PromptAllowlist, ",") != "a-prompt,b-prompt" {
		t.Fatalf("prompt_allowlist = %v, want sorted and unique", cs.PromptAllowlist)
	}
}
