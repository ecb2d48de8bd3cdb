package scripts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// runCheck runs `scripts/test-env.sh check` behind prefix (a shell line
// that sets up the condition, then exec "$@") in a process started with
// attr; it returns the output and the exit error.
func runCheck(t *testing.T, prefix string, attr *syscall.SysProcAttr, env ...string) (string, error) {
	t.Helper()
	script := filepath.Join(testenv.RepoRoot(), "scripts/test-env.sh")
	cmd := exec.Command("/bin/sh", "-c", prefix+`exec "$@"`, "sh", script, "check")
	cmd.SysProcAttr = attr
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestCheckNamesWhatTheMachineLacks: `make test` starts with
// `scripts/test-env.sh check`, which fails, naming what is missing and how
// to fix it, on a machine where tests would fail for the machine's sake
// (docs/pipeline.md, "What the CI machine must have"). Each case makes the
// condition for real (a UTS, network or user namespace, a small tmpfs) and
// wants the check to fail with its message; this machine, as it is,
// passes. Before, there was no check: the run failed an hour later in the
// tests (a host named ci_runner_01: every daemon test; no ::1: the embedded
// NATS and local-server tests; restricted user namespaces: the non-root
// launcher tests; a long TMPDIR: approval sockets over 107 bytes in the
// launcher and collector tests; a TMPDIR of mode 0755: the non-root
// launchers' temporary directories).
func TestCheckNamesWhatTheMachineLacks(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "setpriv")
	testenv.RequireCommand(t, "unshare")
	if out, err := runCheck(t, "", nil); err != nil {
		t.Fatalf("the check fails on this machine: %v\n%s", err, out)
	}
	// A short path of mode 1777 (the check wants TMPDIR like /tmp), small.
	small, err := os.MkdirTemp("/tmp", "ck")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(small) })
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=64m,mode=1777"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(small, syscall.MNT_DETACH) })
	private, err := os.MkdirTemp("/tmp", "ck")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(private) })
	const nobody = 65534
	cases := []struct {
		name   string
		prefix string
		attr   *syscall.SysProcAttr
		env    []string
		want   []string
	}{
		{"host name with an underscore", "echo ci_runner_01 >/proc/sys/kernel/hostname && ",
			&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS}, nil,
			[]string{`"ci_runner_01"`, "schema.CheckHost", "hostnamectl set-hostname ci-runner-01"}},
		{"no IPv6 on loopback", "ip link set lo up && sysctl -q -w net.ipv6.conf.lo.disable_ipv6=1 && ",
			&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}, nil,
			[]string{"no IPv6 loopback", "disable_ipv6=0"}},
		{"a small TMPDIR", "", nil, []string{"TMPDIR=" + small},
			[]string{"TMPDIR (" + small + ") has 0 GiB free", "point TMPDIR at a larger file system"}},
		{"a long TMPDIR", "", nil, []string{"TMPDIR=/tmp/a-long-temp-dir"},
			[]string{"TMPDIR (/tmp/a-long-temp-dir) is 20 bytes long", "at most 9 bytes"}},
		{"a TMPDIR others cannot write", "", nil, []string{"TMPDIR=" + private},
			[]string{"TMPDIR (" + private + ") has mode 700, not 1777"}},
		// As on Ubuntu 24.04 (AppArmor) or with kernel.unprivileged_userns_clone=0:
		// no user namespace can be made below this one (its own limit, not the host's).
		{"unprivileged user namespaces restricted", "echo 0 >/proc/sys/user/max_user_namespaces && ",
			&syscall.SysProcAttr{
				Cloneflags:                 syscall.CLONE_NEWUSER,
				UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: nobody, HostID: nobody, Size: 1}},
				GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: nobody, HostID: nobody, Size: 1}},
				GidMappingsEnableSetgroups: true,
			}, nil,
			[]string{"unprivileged user namespaces are restricted", "apparmor_restrict_unprivileged_userns=0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runCheck(t, c.prefix, c.attr, c.env...)
			if err == nil {
				t.Fatalf("the check passed:\n%s", out)
			}
			for _, w := range append(c.want, "What the CI machine must have") {
				if !strings.Contains(out, w) {
					t.Errorf("the check's output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestUpNamesWhatHoldsTheClickHousePorts: `scripts/test-env.sh up` finds
// the tests' ClickHouse ports (9000, 19000) held by something that is not
// the server the tests expect (here a web server on each, in a network
// namespace of the test's own) and fails, naming the holder, before it
// starts anything. Before, it took any listener on 19000 for chdb-listen
// (every ClickHouse test then failed on its version), and on 9000 started
// a clickhouse-server that could not bind and waited 60 s for it.
func TestUpNamesWhatHoldsTheClickHousePorts(t *testing.T) {
	testenv.RequireRoot(t)
	out, err := withPortsHeld(t, "up", 9000, 19000)
	if err == nil {
		t.Fatalf("up passed with both ports held by a web server:\n%s", out)
	}
	for _, w := range []string{
		"port 9000, where the tests expect Debian's clickhouse-server 18.16, is held by python3",
		"port 19000, where the tests expect chdb-listen (ClickHouse 26.7), is held by python3",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("up's output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "starting") {
		t.Errorf("up started a server on a held port:\n%s", out)
	}
}

// TestCheckPortsPassesWithThePortsFree: on a machine where nothing holds
// the tests' ClickHouse ports yet (a fresh CI machine; here a network
// namespace of the test's own, then with only one port held), the ports
// check passes without a word, so `up` goes on to start the servers.
// Before, finding no listener ended `up` with status 1 and no message
// (pipefail: grep matched nothing), and the official CI of 3badea1 failed
// 50 s in; every run here had the shared servers up.
func TestCheckPortsPassesWithThePortsFree(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []struct {
		name string
		hold []int
	}{
		{"both free", nil},
		{"only 9000 held, by a web server", []int{9000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := withPortsHeld(t, "check-ports", c.hold...)
			if c.hold == nil {
				if err != nil || out != "" {
					t.Fatalf("check-ports with both ports free: %v, want success without output:\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(out, "port 9000, where the tests expect Debian's clickhouse-server 18.16, is held by python3") {
				t.Fatalf("check-ports with 9000 held: %v, want a failure naming python3:\n%s", err, out)
			}
			if strings.Contains(out, "19000") {
				t.Errorf("check-ports names the free port 19000:\n%s", out)
			}
		})
	}
}

// withPortsHeld runs `scripts/test-env.sh SUB` in a network namespace of
// its own where a web server holds each of ports (none: nothing listens),
// and returns its output and exit error.
func withPortsHeld(t *testing.T, sub string, ports ...int) (string, error) {
	t.Helper()
	testenv.RequireCommand(t, "ss")
	if len(ports) > 0 {
		testenv.RequireCommand(t, "python3")
	}
	line := "ip link set lo up || exit 90\npids=\n"
	for _, p := range ports {
		line += fmt.Sprintf("python3 -m http.server --bind 127.0.0.1 %d >/dev/null 2>&1 & pids=\"$pids $!\"\n", p)
		line += fmt.Sprintf("until ss -ltnH 'sport = :%d' | grep -q .; do kill -0 $pids || exit 91; sleep 0.1; done\n", p)
	}
	line += `"$1" "$2"; rc=$?
[ -z "$pids" ] || { kill $pids; wait; }
exit $rc`
	cmd := exec.Command("/bin/sh", "-c", line, "sh", filepath.Join(testenv.RepoRoot(), "scripts/test-env.sh"), sub)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() >= 90 {
		t.Fatalf("holding ports %v: %v\n%s", ports, err, out.String())
	}
	return out.String(), err
}
