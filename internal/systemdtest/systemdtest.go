// Package systemdtest runs real systemd unit files in tests, on machines
// where systemd is not PID 1 (CI runs in a VM whose init is another
// program, and `systemd-run` needs a running manager).
//
// It starts systemd's own service manager as root's user manager
// (`systemd --user`, running as uid 0) and loads the units under test into
// it. The manager applies a unit's sandbox with the same code as PID 1
// (capability bounding set, NoNewPrivileges, ProtectSystem, system call
// filter, address families, RuntimeDirectory, DynamicUser, ...), and the
// services run in the host's pid namespace, so a daemon that watches the
// host's processes works as it would under PID 1. What differs from the
// system manager: the specifiers %t and %S name the manager's runtime and
// state directories (here inside the test's directory) instead of /run and
// /var/lib, and LoadCredential= does not reach another uid (see
// docs in deploy/README.md).
//
// The manager is isolated from the host: it runs in its own mount
// namespace (a private /run/systemd, the marker that says systemd booted,
// its console bound to a log file) and in cgroups of its own in every
// hierarchy, created for the test and removed after it. A manager started
// in the root cgroup would move every process of the machine into its
// init.scope.
package systemdtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// Systemd is the manager binary (Debian's systemd 252).
const Systemd = "/lib/systemd/systemd"

// Manager is one running user manager.
type Manager struct {
	// Dir holds everything: units/, rt/ (%t), cfg/ (%S), logs.
	Dir string
	// RuntimeDir is what %t expands to, StateDir what %S expands to.
	RuntimeDir, StateDir string
	units                string
	cgroups              []string
	cmd                  *exec.Cmd
	exited               chan error
	log                  string
}

// Start starts a manager for t and stops it, with everything it started,
// when t ends. It needs root, systemd, unshare and the cgroup hierarchies.
func Start(t *testing.T) *Manager {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireFile(t, Systemd, "apt-get install systemd")
	unshare := testenv.RequireCommand(t, "unshare")

	// Not under /tmp or /var/tmp, which PrivateTmp= (implied by
	// DynamicUser=) hides from a service, nor under /home or /root, which
	// ProtectHome= hides, nor under t.TempDir(), which other uids cannot
	// enter: DynamicUser services must reach the runtime directory. The
	// checkout itself may be under any of them (a CI clone in /tmp), so
	// the manager's tree lives in /var/lib, where a packaged service's
	// files would.
	dir, err := os.MkdirTemp("/var/lib", "mcpwarden-systemdtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &Manager{
		Dir:        dir,
		RuntimeDir: filepath.Join(dir, "rt"),
		StateDir:   filepath.Join(dir, "cfg"), // systemd 252 maps %S to $XDG_CONFIG_HOME in user mode
		units:      filepath.Join(dir, "units"),
		log:        filepath.Join(dir, "manager.log"),
		exited:     make(chan error, 1),
	}
	for _, d := range []string{m.units, m.StateDir, m.RuntimeDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The targets a service's default dependencies name.
	for _, target := range []string{"default", "basic", "sockets", "paths", "timers", "shutdown", "exit", "network", "network-online", "multi-user"} {
		m.write(t, target+".target", "[Unit]\nDescription="+target+"\n")
	}
	if err := os.WriteFile(m.log, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	m.cgroups = makeCgroups(t)
	var enter strings.Builder
	for _, cg := range m.cgroups {
		fmt.Fprintf(&enter, "echo $$ > %s/cgroup.procs\n", cg)
	}
	script := `set -e
` + enter.String() + `
mount -t tmpfs -o mode=0755 tmpfs /run/systemd
mkdir -p /run/systemd/system /run/systemd/inaccessible
cd /run/systemd/inaccessible
mkdir -m 0000 dir
install -m 0000 /dev/null reg
mkfifo -m 0000 fifo
mknod -m 0000 chr c 0 0
mknod -m 0000 blk b 0 0
cd /
mount --bind "$MANAGER_LOG" /dev/console
exec ` + Systemd + ` --user --log-target=console --log-level=info
`
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", script)
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + dir,
		"MANAGER_LOG=" + m.log,
		"XDG_RUNTIME_DIR=" + m.RuntimeDir,
		"XDG_CONFIG_HOME=" + m.StateDir,
		"XDG_STATE_HOME=" + m.StateDir,
		"SYSTEMD_UNIT_PATH=" + m.units,
	}
	logf, err := os.OpenFile(m.log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start the systemd user manager: %v", err)
	}
	logf.Close()
	m.cmd = cmd
	go func() { m.exited <- cmd.Wait() }()
	t.Cleanup(func() { m.stop(t) })

	deadline := time.Now().Add(30 * time.Second)
	for {
		// is-system-running asks over D-Bus, which this manager has none
		// of; show talks to its private socket.
		out, err := m.Systemctl("show", "-p", "SystemState", "--value")
		state := strings.TrimSpace(out)
		if err == nil && (state == "running" || state == "degraded") {
			break
		}
		select {
		case err := <-m.exited:
			m.exited <- err
			t.Fatalf("the systemd user manager exited: %v\n%s", err, m.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the systemd user manager is not up after 30 s (%q, %v)\n%s", state, err, m.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m
}

// managerEnv are variables a user manager hands every unit from its own
// environment and environment.d, which the system manager does not: a unit
// must not find, say, XDG_CONFIG_HOME here that it would not have under
// PID 1. Install unsets them in every service it installs.
const managerEnv = "MANAGER_LOG OLDPWD PWD SYSTEMD_UNIT_PATH XDG_CONFIG_HOME XDG_RUNTIME_DIR XDG_STATE_HOME QT_ACCESSIBILITY"

// Log is what the manager wrote.
func (m *Manager) Log() string {
	b, _ := os.ReadFile(m.log)
	return string(b)
}

// Install writes a unit (or, for a name like "x.service.d/y.conf", a
// drop-in) and reloads the manager.
func (m *Manager) Install(t *testing.T, name, content string) {
	t.Helper()
	m.write(t, name, content)
	if strings.HasSuffix(name, ".service") {
		m.write(t, name+".d/00-systemdtest-env.conf", "[Service]\nUnsetEnvironment="+managerEnv+"\n")
	}
	if out, err := m.Systemctl("daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v\n%s", err, out)
	}
}

func (m *Manager) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(m.units, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Systemctl runs systemctl --user against this manager.
func (m *Manager) Systemctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "systemctl", append([]string{"--user", "--no-pager", "--no-ask-password"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_RUNTIME_DIR=" + m.RuntimeDir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Show returns a unit's properties (systemctl show -p ...).
func (m *Manager) Show(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out, err := m.Systemctl("show", unit, "-p", strings.Join(props, ","))
	if err != nil {
		t.Fatalf("systemctl show %s: %v\n%s", unit, err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			got[k] = v
		}
	}
	return got
}

// StartUnit starts unit and waits until the start job finished; it fails
// t with the unit's state and the manager's log if the unit did not start.
func (m *Manager) StartUnit(t *testing.T, unit string) {
	t.Helper()
	if out, err := m.Systemctl("start", unit); err != nil {
		st := m.Show(t, unit, "ActiveState", "SubState", "Result", "ExecMainStatus")
		t.Fatalf("systemctl start %s: %v\n%s\nstate %v\nmanager log:\n%s", unit, err, out, st, tail(m.Log(), 40))
	}
}

// StopUnit stops unit.
func (m *Manager) StopUnit(t *testing.T, unit string) {
	t.Helper()
	if out, err := m.Systemctl("stop", unit); err != nil {
		t.Errorf("systemctl stop %s: %v\n%s", unit, err, out)
	}
}

// MainPID is the unit's main process (0 when it has none).
func (m *Manager) MainPID(t *testing.T, unit string) int {
	t.Helper()
	var pid int
	fmt.Sscan(m.Show(t, unit, "MainPID")["MainPID"], &pid)
	return pid
}

func (m *Manager) stop(t *testing.T) {
	if m.cmd == nil {
		return
	}
	// Every process the manager started is in its cgroups: kill them all,
	// then the manager, then remove the cgroups.
	_, _ = m.Systemctl("stop", "--all", "*.service")
	_ = m.cmd.Process.Kill()
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the systemd user manager (pid %d) did not exit", m.cmd.Process.Pid)
	}
	removeCgroups(t, m.cgroups)
}

// makeCgroups creates one cgroup for the manager in every mounted
// hierarchy. A cpuset cgroup takes its parent's cpus and memory nodes
// (cgroup v1 refuses tasks in an empty cpuset).
func makeCgroups(t *testing.T) []string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "mcpwarden-systemdtest-" + hex.EncodeToString(b[:])
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(mounts), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fields, pf := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(pf) < 1 || (pf[0] != "cgroup" && pf[0] != "cgroup2") {
			continue
		}
		root := fields[4]
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			removeCgroups(t, out)
			t.Fatalf("create the manager's cgroup: %v", err)
		}
		out = append(out, dir)
		if strings.HasSuffix(root, "/cpuset") || strings.Contains(line, ",cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if v, err := os.ReadFile(filepath.Join(root, f)); err == nil {
					_ = os.WriteFile(filepath.Join(dir, f), bytes.TrimSpace(v), 0)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no cgroup hierarchy is mounted")
	}
	return out
}

// removeCgroups kills what is left in the manager's cgroups and removes
// them, deepest first.
func removeCgroups(t *testing.T, cgroups []string) {
	for _, cg := range cgroups {
		if _, err := os.Stat(filepath.Join(cg, "cgroup.kill")); err == nil {
			_ = os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0)
		}
	}
	for _, cg := range cgroups {
		var dirs []string
		_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := os.Remove(dirs[i])
				if err == nil || os.IsNotExist(err) {
					break
				}
				// Processes in v1 hierarchies without cgroup.kill: kill them.
				if procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs")); len(procs) > 0 {
					for _, f := range strings.Fields(string(procs)) {
						var pid int
						if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				if time.Now().After(deadline) {
					t.Errorf("remove cgroup %s: %v", dirs[i], err)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
