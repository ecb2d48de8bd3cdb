package launcher_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestOwnProcEntryOnly: under the fence the server reads its own /proc
// entry (what the Go, Node and Python runtimes read at start-up) and the
// host files of its runtime profile, and no other process's /proc entry:
// not the launcher's, not init's, not its own child's, and not through the
// /proc/self/root or /proc/self/cwd magic links.
func TestOwnProcEntryOnly(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFiles(t, map[string]string{filepath.Join(base, "secret.txt"): "OUTSIDE"})
	cat := testenv.RequireCommand(t, "cat")
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"ws"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: base, ExtraArgs: []string{"--allow-exec", "cat"}})
	pid := s.Do(map[string]any{"op": "pid"})
	fields := strings.Fields(pid.Data)
	if !pid.OK || len(fields) != 2 {
		t.Fatalf("pid: %+v", pid)
	}
	self, launcher := fields[0], fields[1]
	switch {
	case s.Namespaces && launcher != "1":
		t.Fatalf("the server's parent is %s, not the run's init (pid 1 of its pid namespace)", launcher)
	case !s.Namespaces && launcher != strconv.Itoa(s.Cmd.Process.Pid):
		t.Fatalf("the server's parent is %s, not the launcher %d", launcher, s.Cmd.Process.Pid)
	case s.Namespaces:
		launcher = strconv.Itoa(s.Cmd.Process.Pid) // the launcher's host pid: no process of the run's
	}
	allowed := []string{"/proc/self/status", "/proc/self/maps", "/proc/self/statm", "/proc/self/cgroup", "/proc/self/mountinfo",
		"/proc/thread-self/stat", "/proc/" + self + "/environ", "/proc/meminfo", "/proc/sys/vm/overcommit_memory"}
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"); err == nil {
		allowed = append(allowed, "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
	}
	for _, p := range allowed {
		if r := s.Do(map[string]any{"op": "read", "path": p}); !r.OK {
			t.Errorf("read %s: %+v (stderr: %s)", p, r, s.Stderr())
		}
	}
	// procfs makes a new inode for /proc/PID when its dentry was evicted and
	// is looked up again; the launcher pins it, so the rule still holds
	// after the kernel drops its dentry cache.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Fatalf("drop the dentry cache: %v", err)
	}
	if r := s.Do(map[string]any{"op": "read", "path": "/proc/self/statm"}); !r.OK {
		t.Errorf("read /proc/self/statm after the dentry cache was dropped: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "readdir", "path": "/proc/self/task"}); !r.OK {
		t.Errorf("readdir /proc/self/task: %+v", r)
	}
	denied := []string{"/proc/" + launcher + "/status", "/proc/" + launcher + "/environ", "/proc/1/status", "/proc/1/cmdline",
		"/proc/self/root" + filepath.Join(base, "secret.txt"), "/proc/self/cwd/secret.txt", "/proc/sys/kernel/hostname", "/proc/kallsyms"}
	for _, p := range denied {
		if r := s.Do(map[string]any{"op": "read", "path": p}); r.OK || r.Errno != "EACCES" && !(s.Namespaces && r.Errno == "ENOENT") {
			t.Errorf("read %s under the fence: %+v", p, r)
		}
	}
	if r := s.Do(map[string]any{"op": "readdir", "path": "/proc"}); r.OK {
		t.Errorf("readdir /proc: %+v", r)
	}
	// A child is another process: /proc/self is its own /proc/PID, which the
	// rule on the server's entry does not cover.
	if r := s.Do(map[string]any{"op": "exec", "path": cat, "args": []string{"/proc/self/status"}}); r.OK || !strings.Contains(r.Data, "Permission denied") {
		t.Errorf("a child read its own /proc entry: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "exec", "path": cat, "args": []string{"/proc/meminfo"}}); !r.OK {
		t.Errorf("a child could not read a host file of the profile: %+v", r)
	}
}
