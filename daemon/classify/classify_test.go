package classify

import (
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

func TestClassify(t *testing.T) {
	p := &Policy{
		Workspace: []string{"/work/proj/src", "/work/proj/README.md"},
		ReadOnly:  true,
		Runtime:   []RuntimePath{{Path: "/usr/lib"}, {Path: "/tmp/run-1", Write: true}, {Path: "/etc/ssl/openssl.cnf"}},
	}
	rw := *p
	rw.ReadOnly = false
	tests := []struct {
		name    string
		pol     *Policy
		path    string
		known   bool
		access  Access
		ret     int64
		class   schema.PathClass
		verdict Verdict
	}{
		{"read inside", p, "/work/proj/src/a.go", true, Read, 3, schema.PathWorkspace, Allowed},
		{"read the scope dir itself", p, "/work/proj/src", true, Read, 3, schema.PathWorkspace, Allowed},
		{"read allowed file", p, "/work/proj/README.md", true, Read, 3, schema.PathWorkspace, Allowed},
		{"sibling prefix is outside", p, "/work/proj/src2/a.go", true, Read, 3, schema.PathOutside, Escape},
		{"read outside succeeded", p, "/etc/hostname", true, Read, 3, schema.PathOutside, Escape},
		{"read outside denied", p, "/etc/hostname", true, Read, -13, schema.PathOutside, BlockedByKernel},
		{"EPERM is the kernel too", p, "/etc/hostname", true, Write, -1, schema.PathOutside, BlockedByKernel},
		{"outside missing", p, "/etc/nope", true, Read, -2, schema.PathOutside, Failed},
		{"runtime read", p, "/usr/lib/x86_64-linux-gnu/libc.so.6", true, Read, 3, schema.PathRuntime, Allowed},
		{"runtime write refused by profile", p, "/usr/lib/evil.so", true, Write, 0, schema.PathRuntime, Escape},
		{"runtime temp dir write", p, "/tmp/run-1/x", true, Create, 0, schema.PathRuntime, Allowed},
		{"write in read scope is escape", p, "/work/proj/src/a.go", true, Write, 3, schema.PathWorkspace, Escape},
		{"write in write scope", &rw, "/work/proj/src/a.go", true, Create, 3, schema.PathWorkspace, Allowed},
		{"secret in scope read", p, "/work/proj/src/.env", true, Read, 3, schema.PathSecret, Allowed},
		{"secret outside read", p, "/root/.ssh/id_ed25519", true, Read, 3, schema.PathSecret, Escape},
		{"shadow denied", p, "/etc/shadow", true, Read, -13, schema.PathSecret, BlockedByKernel},
		{"unknown path success is escape", p, "/work/proj/src/deep", false, Read, 3, schema.PathUnknown, Escape},
		{"unknown path denied", p, "", false, Read, -13, schema.PathUnknown, BlockedByKernel},
		{"relative path is unknown", p, "src/a.go", true, Read, 3, schema.PathUnknown, Escape},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			class, v := tc.pol.Classify(tc.path, tc.known, tc.access, tc.ret)
			if class != tc.class || v != tc.verdict {
				t.Errorf("Classify(%q) = %s, %s; want %s, %s", tc.path, class, v, tc.class, tc.verdict)
			}
		})
	}
}

func TestIsSecret(t *testing.T) {
	for p, want := range map[string]bool{
		"/home/u/.ssh/config":        true,
		"/home/u/.aws/credentials":   true,
		"/srv/app/.env.production":   true,
		"/srv/app/tls/server.key":    true,
		"/srv/app/main.go":           false,
		"/srv/app/keys.go":           false,
		"/srv/app/environment.md":    false,
		"/etc/ssl/private/site.crt":  true,
		"/etc/ssl/certs/ca.crt":      false,
		"/home/u/.ssh":               true,
		"/home/u/project/.gnupg/x":   true,
		"/home/u/project/id_rsa.pub": true,
	} {
		if got := IsSecret(p); got != want {
			t.Errorf("IsSecret(%q) = %v, want %v", p, got, want)
		}
	}
}
