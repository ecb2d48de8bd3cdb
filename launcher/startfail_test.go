package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestDiagnoseStart(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "notes.txt")
	prog := filepath.Join(t.TempDir(), "tool")
	for p, mode := range map[string]os.FileMode{outside: 0o644, prog: 0o755} {
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "id_rsa")
	if err := os.WriteFile(secret, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	hostname := "/etc/hostname"
	if _, err := os.Stat(hostname); err != nil {
		hostname = "/etc/shadow"
	}
	scope := &schema.CanonicalScope{Base: base, AllowedPaths: []schema.CanonicalPath{{Path: ws, Kind: schema.KindDir}}}
	rs := &ruleset.Ruleset{Rules: []ruleset.Rule{{Path: ws, Kind: schema.KindDir, Access: 3 << 2}}}
	tests := []struct {
		name, stderr, path, hint string
	}{
		{"node", "node:fs:573\n  return binding.open(\nError: EACCES: permission denied, open '" + hostname + "'\n    at Object.openSync (node:fs:573:18)", hostname, "--allow-runtime " + hostname},
		{"go", "server: open " + hostname + ": permission denied", hostname, "--allow-runtime " + hostname},
		{"python", "Traceback (most recent call last):\nPermissionError: [Errno 13] Permission denied: '" + hostname + "'", hostname, "--allow-runtime " + hostname},
		{"sh exec by path", "/tmp/s.sh: 2: " + prog + ": Permission denied", prog, "--allow-exec tool"},
		{"bash", "bash: line 1: " + prog + ": Permission denied", prog, "--allow-exec tool"},
		{"workspace sibling", "Error: EACCES: permission denied, open '" + outside + "'", outside, "allowed_paths"},
		{"another process", "cat: /proc/1/status: Permission denied", "/proc/1/status", "never granted"},
		{"a secret the server names", "Error: EACCES: permission denied, open '" + secret + "'", secret, "suggests no grant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := diagnoseStart(tt.stderr, rs, scope, "/usr/bin:/bin")
			if !ok || d.Path != tt.path || !strings.Contains(d.Hint, tt.hint) {
				t.Fatalf("diagnoseStart = %+v, %v; want %s with %q", d, ok, tt.path, tt.hint)
			}
		})
	}
	for _, quiet := range []string{"", "Error: Cannot find module 'x'", "open " + filepath.Join(ws, "a") + ": permission denied", "EACCES /no/such/file"} {
		if d, ok := diagnoseStart(quiet, rs, scope, "/usr/bin:/bin"); ok {
			t.Errorf("diagnoseStart(%q) = %+v", quiet, d)
		}
	}
}

// FuzzDiagnoseStart: any stderr is handled; a diagnosis names an existing
// absolute path that the ruleset does not grant.
func FuzzDiagnoseStart(f *testing.F) {
	f.Add("Error: EACCES: permission denied, open '/etc/hostname'")
	f.Add("spawn git EACCES")
	f.Add("sh: 1: /bin/true: Permission denied")
	rs := &ruleset.Ruleset{}
	f.Fuzz(func(t *testing.T, stderr string) {
		d, ok := diagnoseStart(stderr, rs, nil, "/usr/bin:/bin")
		if !ok {
			return
		}
		if !filepath.IsAbs(d.Path) || d.Hint == "" {
			t.Fatalf("diagnosis %+v", d)
		}
		if _, err := os.Stat(d.Path); err != nil {
			t.Fatalf("diagnosed a path that does not exist: %+v", d)
		}
	})
}
