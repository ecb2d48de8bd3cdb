package policy

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestCheckToken: a string token the server did not issue is checked as a
// path (round twelve: before, every string cursor, requestState and
// progressToken passed unread), but for the shapes genuine tokens have.
func TestCheckToken(t *testing.T) {
	p, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	out := filepath.Join(base, "outside", "probe.txt")
	for _, tc := range []struct {
		tok  string
		want schema.ErrorCode // "" = passes, "deny" = refused whatever the code
	}{
		{out, schema.ErrPathOutsideScope},
		{"/etc/passwd", schema.ErrPathOutsideScope},
		{filepath.Join(base, "allowed", ".env"), schema.ErrSecretPath},
		{"file://" + out, schema.ErrPathOutsideScope},
		{"../outside/probe.txt", schema.ErrPathOutsideScope},
		{"~/.ssh/id_rsa", "deny"},
		{"$HOME/.aws/credentials", "deny"},
		{"keys/id_rsa", "deny"},
		{base64.StdEncoding.EncodeToString([]byte(out)), schema.ErrPathOutsideScope},
		{"/x/id_rsa", "deny"},
		{"vscode-file://vscode-app" + out, schema.ErrPathOutsideScope},
		// Genuine tokens.
		{"MTA=", ""},
		{"/abc+/=", ""},
		{"/t", ""},
		{"/etc", ""}, // a directory at the root: no file a server reads
		{"tok-1", ""},
		{"3f1c2a4e-8b7d-4e1a-9c3b-2d5e6f7a8b9c", ""},
		{"Cv-BAwEBCXBhZ2VUb2tlbgH_ggABAQEHTGFzdFVJRAEMAAAAB_-CAQJ4AA==", ""},
		{"eyJvZmZzZXQiOjEwfQ==", ""},
		{"page:2", ""},
		{filepath.Join(base, "allowed", "probe.txt"), ""},
	} {
		_, d := p.CheckToken("cursor", tc.tok, eff)
		switch {
		case tc.want == "" && d != nil:
			t.Errorf("%q: denied: %v", tc.tok, d)
		case tc.want != "" && (d == nil || tc.want != "deny" && d.Code != tc.want):
			t.Errorf("%q = %v, want %s", tc.tok, d, tc.want)
		}
	}
}

// FuzzTokenMayHoldPath: the quick test never skips a token CheckToken
// refuses.
func FuzzTokenMayHoldPath(f *testing.F) {
	for _, s := range []string{"/t", "/etc/passwd", "MTA=", "tok-1", ".env", "a/.env", "/x/id_rsa", "L2V0Yy9wYXNzd2Q=", "~", "..", "file:x"} {
		f.Add(s)
	}
	p, base := fixture(f)
	eff := []string{filepath.Join(base, "allowed")}
	f.Fuzz(func(t *testing.T, s string) {
		raw, _ := json.Marshal(s)
		if TokenMayHoldPath(raw) {
			return
		}
		if _, d := p.CheckToken("progressToken", s, eff); d != nil {
			t.Fatalf("%q skipped by the quick test, refused by the check: %v", s, d)
		}
	})
}
