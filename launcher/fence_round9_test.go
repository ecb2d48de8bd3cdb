package launcher_test

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// Session 9's attacks on the fence: what leaked (each fails on the code
// before) and the guards that held.

// TestFenceHostDevices: the devices the runtime profile grants
// (/dev/null, /dev/zero) are the host's device nodes, bound into the
// minimal root. Their mounts were read-write, so a server with a
// dedicated uid set the host's /dev/null and /dev/zero times to now
// (utimensat with a NULL times pointer needs only the right to write the
// file, which a 0666 device gives everyone; the filter lets times through
// with the mount namespace). Now the binds are read-only (EROFS) and
// noexec; reading and writing the devices still works (the kernel does not
// ask a mount's permission to write a device). Under --no-namespaces the
// filter refuses times by path and, without a dedicated uid, by
// descriptor (EPERM).
func TestFenceHostDevices(t *testing.T) { fencetest.ForEachLayering(t, testFenceHostDevices) }

func testFenceHostDevices(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	refused := []string{"EROFS"}
	if noNS {
		refused = []string{"EPERM"}
	}
	var cases []fenceCase
	for _, dev := range []string{"/dev/null", "/dev/zero"} {
		cases = append(cases,
			fenceCase{name: "write " + dev, req: map[string]any{"op": "append", "path": dev, "data": "x"}, wantOK: true},
			fenceCase{name: "times of " + dev + " set to now by path", req: map[string]any{"op": "touch_now", "path": dev}, errno: refused, exact: true},
			fenceCase{name: "times of " + dev + " set to now through a descriptor open for writing", req: map[string]any{"op": "touch_now", "path": dev, "n": 1}, errno: refused, exact: true},
			fenceCase{name: "times of " + dev + " set by path", req: map[string]any{"op": "utimes_path", "path": dev}, errno: append([]string{"EPERM"}, refused...), exact: true},
			fenceCase{name: "chmod " + dev + " 0600", req: map[string]any{"op": "chmod_mode", "path": dev, "mode": 0o600}, errno: append([]string{"EPERM"}, refused...), exact: true},
		)
	}
	cases = append(cases, fenceCase{name: "read /dev/null", req: map[string]any{"op": "read", "path": "/dev/null"}, wantOK: true})
	runCases(t, s, cases)
	if !noNS {
		for _, dev := range []string{"/dev/null", "/dev/zero"} {
			r := s.Do(map[string]any{"op": "statfs", "path": dev})
			var typ, fl uint64
			if _, err := fmt.Sscanf(r.Data, "type=%x flags=%x", &typ, &fl); !r.OK || err != nil {
				t.Fatalf("statfs %s: %+v", dev, r)
			}
			if want := uint64(unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NOEXEC); fl&want != want || fl&unix.ST_NODEV != 0 {
				t.Errorf("statfs %s: flags %#x, want read-only, nosuid, noexec, not nodev", dev, fl)
			}
		}
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceEnvPasswordVariables: variables named *_PWD hold passwords
// (MYSQL_PWD is the mysql client's, read by every libmysqlclient tool;
// DB_PWD, REDIS_PWD ... by convention): they reached the server, which read
// them from its environment. Now they are held back like *_PASS; the
// working directory's PWD and OLDPWD still pass.
func TestFenceEnvPasswordVariables(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base,
		Env: []string{"MYSQL_PWD=MYSQL-SECRET-42", "DB_PWD=DB-SECRET-42", "OLDPWD=/srv/previous"}})
	env := s.Do(map[string]any{"op": "env"}).Data
	for _, leak := range []string{"MYSQL-SECRET-42", "DB-SECRET-42"} {
		if strings.Contains(env, leak) {
			t.Errorf("ESCAPE: the server's environment holds %s", leak)
		}
	}
	if !strings.Contains(env, "OLDPWD=/srv/previous") {
		t.Errorf("OLDPWD was held back: %q", env)
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "MYSQL_PWD") || !strings.Contains(s.Stderr(), "DB_PWD") {
		t.Errorf("the names held back were not reported: %s", s.Stderr())
	}
}
