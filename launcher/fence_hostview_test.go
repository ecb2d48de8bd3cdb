package launcher_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestFenceReadScopeAndHostView guards what held when tried in session 7:
// a read scope's files cannot be changed through the calls that skip
// open() (truncate by path, fallocate punching or collapsing on a
// read-only descriptor) nor leased (F_SETLEASE stalls a host writer for
// lease-break-time, on the scope or the runtime); /proc/pressure and the
// cgroup tree (another run's group included) are not readable; and with
// the mount namespace /proc/self/mountinfo names no host path beyond the
// minimal root's. What stays readable (host-wide load, memory, uptime;
// the launcher's cgroup path) is a Known limit.
func TestFenceReadScopeAndHostView(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceReadScopeAndHostView)
}

func testFenceReadScopeAndHostView(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, AuditLog: log})
	const (
		fSetlease      = 1024 // F_SETLEASE
		fRdlck         = 0
		punchHole      = 0x02 | 0x01 // FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
		collapseRange  = 0x08        // FALLOC_FL_COLLAPSE_RANGE
		zeroRange      = 0x10        // FALLOC_FL_ZERO_RANGE
		forWriting     = 1
		onReadOnlyDesc = 0
	)
	// Another run's cgroup beside this run's (cgroup v2).
	var other string
	if r := s.Do(map[string]any{"op": "cgroup_dirs"}); r.OK {
		for _, d := range strings.Split(r.Data, "\n") {
			if strings.Contains(d, "/unified/") || (!strings.Contains(d, "/memory/") && !strings.Contains(d, "/pids/")) {
				other = filepath.Join(filepath.Dir(d), "mcpwarden-other-run-test")
				break
			}
		}
	}
	cases := []fenceCase{
		{name: "truncate a read-scope file by path", req: map[string]any{"op": "truncate", "path": w.deep1}, errno: denied},
		{name: "fallocate PUNCH_HOLE on a read-only descriptor", req: map[string]any{"op": "fallocate", "path": w.deep1, "n": punchHole, "flags": onReadOnlyDesc}, errno: []string{"EBADF"}, exact: true},
		{name: "fallocate COLLAPSE_RANGE on a read-only descriptor", req: map[string]any{"op": "fallocate", "path": w.deep1, "n": collapseRange, "flags": onReadOnlyDesc}, errno: []string{"EBADF"}, exact: true},
		{name: "fallocate ZERO_RANGE, opened for writing", req: map[string]any{"op": "fallocate", "path": w.deep1, "n": zeroRange, "flags": forWriting}, errno: denied},
		{name: "F_SETLEASE on a read-scope file", req: map[string]any{"op": "fcntl", "path": w.deep1, "n": fSetlease, "flags": fRdlck}, errno: []string{"EPERM"}, exact: true},
		{name: "F_SETLEASE on the runtime's executable", req: map[string]any{"op": "fcntl", "path": b.Naive, "n": fSetlease, "flags": fRdlck}, errno: []string{"EPERM"}, exact: true},
		// dnotify: on a directory the server may read, the signal goes to
		// itself; allowed (the same as inotify on its scope).
		{name: "F_NOTIFY on the scope's directory (allowed)", req: map[string]any{"op": "fcntl", "path": w.allowed, "n": 1026 /* F_NOTIFY */, "flags": 4 /* DN_CREATE */}, wantOK: true},
		{name: "F_NOTIFY on a directory outside the scope", req: map[string]any{"op": "fcntl", "path": w.outside, "n": 1026, "flags": 4}, errno: denied},
		{name: "/proc/pressure", req: map[string]any{"op": "read", "path": "/proc/pressure/cpu"}, errno: denied},
		{name: "the cgroup tree", req: map[string]any{"op": "readdir", "path": "/sys/fs/cgroup"}, errno: denied},
		// Session 8 guards: what lists other processes' objects.
		{name: "/proc/sysvipc/shm (the host's SysV segments)", req: map[string]any{"op": "read", "path": "/proc/sysvipc/shm"}, errno: denied},
		{name: "/proc/sysvipc/msg", req: map[string]any{"op": "read", "path": "/proc/sysvipc/msg"}, errno: denied},
		{name: "/proc/locks (every lock, its pid and inode)", req: map[string]any{"op": "read", "path": "/proc/locks"}, errno: denied},
		{name: "/proc/keys", req: map[string]any{"op": "read", "path": "/proc/keys"}, errno: denied},
		{name: "/proc/key-users", req: map[string]any{"op": "read", "path": "/proc/key-users"}, errno: denied},
		{name: "the BPF file system", req: map[string]any{"op": "readdir", "path": "/sys/fs/bpf"}, errno: denied},
		{name: "/dev/shm", req: map[string]any{"op": "readdir", "path": "/dev/shm"}, errno: denied},
		{name: "/run (the host's service sockets)", req: map[string]any{"op": "readdir", "path": "/run"}, errno: denied},
	}
	if other != "" {
		if err := os.Mkdir(other, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(other)
		cases = append(cases, fenceCase{name: "another run's cgroup", req: map[string]any{"op": "read", "path": filepath.Join(other, "cgroup.procs")}, errno: denied})
	} else {
		t.Error("the run has no cgroup v2 group to put another beside")
	}
	runCases(t, s, cases)
	if !noNS {
		r := s.Do(map[string]any{"op": "read", "path": "/proc/self/mountinfo"})
		if !r.OK {
			t.Fatalf("mountinfo: %+v", r)
		}
		for _, p := range []string{w.outside, w.sibling, filepath.Dir(log), "/sys/fs/cgroup/unified ", "/home "} {
			if strings.Contains(r.Data, p) {
				t.Errorf("/proc/self/mountinfo names %s, outside the minimal root:\n%s", p, r.Data)
			}
		}
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if data, err := os.ReadFile(w.deep1); err != nil || string(data) != "inside" {
		t.Errorf("the read-scope file after the run: %q %v", data, err)
	}
}
