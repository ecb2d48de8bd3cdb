package systemdtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestManagerAppliesTheSandbox: a unit's sandbox is really applied (the
// capability bounding set, no_new_privs, a read-only /usr, a dynamic
// user, the runtime directory), and the manager leaves the host's
// processes where they were.
func TestManagerAppliesTheSandbox(t *testing.T) {
	before, err := os.ReadFile("/proc/1/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("unit", func(t *testing.T) {
		m := Start(t)
		out := filepath.Join(m.Dir, "out")
		if err := os.Mkdir(out, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(out, 0o777); err != nil {
			t.Fatal(err)
		}
		m.Install(t, "probe.service", `[Service]
Type=oneshot
DynamicUser=yes
CapabilityBoundingSet=CAP_BPF CAP_PERFMON
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=`+out+`
RuntimeDirectory=probe
RuntimeDirectoryMode=0700
ExecStart=/bin/sh -c 'grep -E "^(CapBnd|NoNewPrivs|Uid)" /proc/self/status > `+out+`/status; touch /usr/mcpwarden-probe 2> `+out+`/usr || true; stat -c %%a:%%U %t/probe > `+out+`/rt'
`)
		m.StartUnit(t, "probe.service")
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatalf("the unit did not write %s: %v\n%s", name, err, m.Log())
			}
			return string(b)
		}
		status := read("status")
		// CAP_PERFMON is 38, CAP_BPF 39: bits 38 and 39.
		if !strings.Contains(status, "CapBnd:\t000000c000000000") {
			t.Errorf("bounding set not applied:\n%s", status)
		}
		if !strings.Contains(status, "NoNewPrivs:\t1") {
			t.Errorf("no_new_privs not set:\n%s", status)
		}
		if strings.Contains(status, "Uid:\t0\t") {
			t.Errorf("DynamicUser ran the unit as root:\n%s", status)
		}
		if u := read("usr"); !strings.Contains(u, "Read-only file system") && !strings.Contains(u, "Permission denied") {
			t.Errorf("/usr was writable: %q", u)
		}
		if _, err := os.Stat("/usr/mcpwarden-probe"); err == nil {
			os.Remove("/usr/mcpwarden-probe")
			t.Error("the unit wrote to /usr")
		}
		if rt := strings.TrimSpace(read("rt")); !strings.HasPrefix(rt, "700:") || strings.HasSuffix(rt, ":root") {
			t.Errorf("RuntimeDirectory %s: %q, want 0700 owned by the dynamic user", filepath.Join(m.RuntimeDir, "probe"), rt)
		}
	})
	after, err := os.ReadFile("/proc/1/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("the manager moved the host's PID 1 to another cgroup:\nbefore %s\nafter %s", before, after)
	}
	// Its cgroups are gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left, _ := filepath.Glob("/sys/fs/cgroup/*/mcpwarden-systemdtest-*")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroups left behind: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
