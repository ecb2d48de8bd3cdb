package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// freshCheckout makes a scratch checkout holding what `scripts/test-env.sh
// up` and `down` use (the script, the built chdb-listen): their state
// (build/test-env) is the scratch one, never the shared servers' of the
// checkout under test. chdbListen replaces chdb-listen when not "".
func freshCheckout(t *testing.T, chdbListen string) string {
	t.Helper()
	repo := testenv.RepoRoot()
	listen := os.Getenv("MCPWARDEN_CLICKHOUSE_LISTEN_BIN") // make test-go's
	if listen == "" {
		listen = filepath.Join(repo, "build/clickhouse-current/chdb-listen")
	}
	testenv.RequireFile(t, listen, "run scripts/test-env.sh install")
	root := t.TempDir()
	for _, d := range []string{"scripts", "build/clickhouse-current"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := os.ReadFile(filepath.Join(repo, "scripts/test-env.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scripts/test-env.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, "build/clickhouse-current/chdb-listen")
	if chdbListen != "" {
		err = os.WriteFile(target, []byte(chdbListen), 0o755)
	} else {
		err = os.Symlink(listen, target)
	}
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// freshMachine runs line (sh; $1 is the scratch checkout's test-env.sh) as
// on a machine where no ClickHouse runs yet: in network, mount and pid
// namespaces of its own, with Debian's ClickHouse directories empty
// tmpfs mounts as the package leaves them (/var/lib/clickhouse and
// /var/log/clickhouse-server the clickhouse user's, /run/clickhouse-server
// root's). setup runs
// first, after the mounts. Everything started in there dies with the
// namespace's first process. Exit statuses of 90 and above are the
// test's own setup failing.
func freshMachine(t *testing.T, root, setup, line string) (string, error) {
	t.Helper()
	prefix := `set -u
mount --make-rprivate / && mount -t proc proc /proc && ip link set lo up || exit 90
ch=$(id -u clickhouse):$(id -g clickhouse) || exit 90
for d in /var/lib/clickhouse /var/log/clickhouse-server /run/clickhouse-server; do
	mkdir -p "$d" && mount -t tmpfs -o mode=0755 tmpfs "$d" || exit 90
done
chown "$ch" /var/lib/clickhouse /var/log/clickhouse-server || exit 90
` + setup + "\n"
	cmd := exec.Command("/bin/bash", "-c", prefix+line, "sh", filepath.Join(root, "scripts/test-env.sh"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() >= 90 {
		t.Fatalf("setting up the fresh machine (status %d):\n%s", ee.ExitCode(), out.String())
	}
	return out.String(), err
}

// TestUpDownOnAFreshMachine: `scripts/test-env.sh up` on a machine where
// no ClickHouse runs and Debian's ClickHouse directories are empty (a
// fresh CI machine; here namespaces of the test's own, with build/test-env
// holding .started files of an earlier run whose pids now name unrelated
// processes; no /var/log/clickhouse-server; an empty /var/lib/clickhouse
// of root's) starts both servers, the expected versions answer, and `down`
// stops exactly them: the unrelated processes live on. Before, `down`
// killed whatever process had the recorded pid (both sleeps here), and
// clickhouse-server did not start without its log directory (up waited
// 60 s and failed).
func TestUpDownOnAFreshMachine(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "clickhouse-server")
	testenv.RequireCommand(t, "clickhouse-client")
	testenv.RequireCommand(t, "ss")
	testenv.RequireCommand(t, "runuser")
	root := freshCheckout(t, "")
	// Stale records of an earlier run, in the formats the script wrote
	// before: chdb-listen's pid, and clickhouse-server's pid file; both
	// pids now belong to unrelated processes (sleeps). No log directory,
	// and an empty data directory of root's.
	setup := `mount -t tmpfs -o mode=0755 tmpfs /var/log && chown root: /var/lib/clickhouse || exit 91
sleep 600 & s1=$!
sleep 600 & s2=$!
state=$(dirname "$1")/../build/test-env
mkdir -p "$state" || exit 91
echo "$s1" >"$state/clickhouse-current.started" || exit 91
echo /run/clickhouse-server/mcpwarden-test.pid >"$state/clickhouse.started" || exit 91
echo "$s2" >/run/clickhouse-server/mcpwarden-test.pid || exit 91`
	line := `check() {
	ss -ltnH | grep -E ':(9000|19000) ' && echo "STILL LISTENING"
	# (not a zombie the namespace's first process has yet to reap)
	ps -eo stat=,comm= | grep -v '^Z' | grep -qw clickhouse-serv && echo "CLICKHOUSE-SERVER STILL RUNS"
	ps -eo stat=,comm= | grep -v '^Z' | grep -qw chdb-listen && echo "CHDB-LISTEN STILL RUNS"
	kill -0 $s1 || echo "DOWN KILLED AN UNRELATED PROCESS (s1)"
	kill -0 $s2 || echo "DOWN KILLED AN UNRELATED PROCESS (s2)"
	ls "$state"/*.started 2>/dev/null && echo "RECORDS LEFT"
}
"$1" down || { echo "DOWN FAILED $?"; exit 1; }
check
"$1" up || { echo "UP FAILED $?"; exit 1; }
echo "legacy: $(clickhouse-client --query 'SELECT version()')"
echo "current: $(clickhouse-client --port 19000 --query 'SELECT version()')"
"$1" down || { echo "DOWN FAILED $?"; exit 1; }
check
exit 0`
	out, err := freshMachine(t, root, setup, line)
	if err != nil {
		t.Fatalf("up/down on a fresh machine: %v\n%s", err, out)
	}
	for _, want := range []string{"legacy: 18.", "current: 26."} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q after up:\n%s", want, out)
		}
	}
	for _, bad := range []string{"STILL LISTENING", "STILL RUNS", "KILLED AN UNRELATED", "RECORDS LEFT"} {
		if strings.Contains(out, bad) {
			t.Errorf("after down: %s\n%s", bad, out)
		}
	}
}

// TestUpThatFailsStopsWhatItStarted: an `up` that fails half-way (here
// chdb-listen exits at once, after clickhouse-server started) stops the
// clickhouse-server it started and leaves no record behind, and `down`
// after it does nothing and succeeds. Before, the failed up left
// clickhouse-server running (`make test` never reaches `down` after a
// failed up). A data directory of another owner that holds data is named,
// and nothing is started.
func TestUpThatFailsStopsWhatItStarted(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "clickhouse-server")
	testenv.RequireCommand(t, "clickhouse-client")
	testenv.RequireCommand(t, "ss")
	testenv.RequireCommand(t, "runuser")
	t.Run("chdb-listen fails", func(t *testing.T) {
		root := freshCheckout(t, "#!/bin/sh\necho 'chdb-listen: cannot start' >&2\nexit 3\n")
		line := `"$1" up && { echo "UP PASSED"; exit 1; }
ss -ltnH | grep -E ':(9000|19000) ' && echo "STILL LISTENING"
ps -eo stat=,comm= | grep -v '^Z' | grep -qw clickhouse-serv && echo "CLICKHOUSE-SERVER STILL RUNS"
"$1" down || echo "DOWN FAILED"
ls "$(dirname "$1")"/../build/test-env/*.started 2>/dev/null && echo "RECORDS LEFT"
exit 0`
		out, err := freshMachine(t, root, "", line)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, bad := range []string{"UP PASSED", "STILL LISTENING", "STILL RUNS", "DOWN FAILED", "RECORDS LEFT"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s\n%s", bad, out)
			}
		}
		for _, want := range []string{"starting clickhouse-server", "chdb-listen did not answer", "up failed: stopping the clickhouse it started"} {
			if !strings.Contains(out, want) {
				t.Errorf("up's output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("data of another owner", func(t *testing.T) {
		root := freshCheckout(t, "")
		setup := `echo x >/var/lib/clickhouse/status && chown -R 65534:65534 /var/lib/clickhouse || exit 91`
		line := `"$1" up && { echo "UP PASSED"; exit 1; }
ps -eo stat=,comm= | grep -v '^Z' | grep -qw clickhouse-serv && echo "CLICKHOUSE-SERVER RUNS"
ps -eo stat=,comm= | grep -v '^Z' | grep -qw chdb-listen && echo "CHDB-LISTEN RUNS"
exit 0`
		out, err := freshMachine(t, root, setup, line)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, bad := range []string{"UP PASSED", "RUNS"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s\n%s", bad, out)
			}
		}
		if !strings.Contains(out, "/var/lib/clickhouse belongs to nobody, not to clickhouse") {
			t.Errorf("up does not name the data directory's owner:\n%s", out)
		}
	})
}

// runMake runs make TARGET... in dir with env (added to, or with unset
// names removed from, this process's environment) and returns its output.
func runMake(t *testing.T, dir string, unset []string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "--no-print-directory", "-C", dir}, args...)...)
	// Not the flags and variables of a make this test runs under (make
	// test-go): the jobserver's descriptors, PKGS=... overrides.
	unset = append(unset, "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, u := range unset {
			keep = keep && name != u
		}
		if keep {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestMakeWithoutHOME: a runner that starts .ci/run without HOME (a
// service manager's environment, env -i) still lints and builds: the
// Makefile and scripts/test-env.sh take the user's home from the user
// database. Before, go had no build cache (GOCACHE=off: "build cache is
// required") and test-env.sh looked for the Go tools in /bin.
func TestMakeWithoutHOME(t *testing.T) {
	testenv.RequireCommand(t, "make")
	testenv.RequireCommand(t, "getent")
	repo := testenv.RepoRoot()
	out, err := runMake(t, repo, []string{"HOME", "GOCACHE", "GOPATH", "XDG_CACHE_HOME"}, nil, "lint", "PKGS=./internal/unixsock")
	if err != nil {
		t.Fatalf("make lint without HOME: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(repo, "scripts/test-env.sh"), "gobin")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "/go/bin") || strings.TrimSpace(string(b)) == "/go/bin" {
		t.Fatalf("test-env.sh gobin without HOME = %q, %v; want the user's go/bin", b, err)
	}
}

// TestMakeInACheckoutOfAnotherUser: a runner that checks out as one user
// and tests as root (here a clone owned by nobody) passes generate-check,
// whose git diff git refused ("detected dubious ownership"), so the
// committed generated code was reported stale; the Makefile trusts the
// checkout for its own commands (GIT_CONFIG_COUNT), no git configuration
// file is written.
func TestMakeInACheckoutOfAnotherUser(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "make")
	testenv.RequireCommand(t, "git")
	testenv.RequireCommand(t, "clang")
	clone := filepath.Join(t.TempDir(), "c")
	cmd := exec.Command("git", "clone", "-q", testenv.RepoRoot(), clone)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// The checkout's make and scripts as they are, committed or not.
	for _, f := range []string{"Makefile", "scripts/test-env.sh", "scripts/generate-check.sh"} {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clone, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", clone).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "-C", clone, "status").CombinedOutput(); err == nil || !strings.Contains(string(out), "dubious ownership") {
		t.Fatalf("git in the clone owned by nobody: %v, want a refusal for dubious ownership\n%s", err, out)
	}
	if out, err := runMake(t, clone, []string{"GIT_CONFIG_COUNT"}, nil, "generate-check"); err != nil {
		t.Fatalf("make generate-check in a checkout owned by nobody: %v\n%s", err, out)
	}
}
