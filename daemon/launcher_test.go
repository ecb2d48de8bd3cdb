package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// launcherEnv makes the test binary a launcher of its own: it starts the
// test "server" (childMode) as its child, registers it with the daemon at
// the socket in launcherEnv, prints the registration answer (or the error)
// as one JSON line, lets the server go and exits with its status. Run
// under unshare or as another user, it is the launcher a container or a
// desktop client runs. MCPWARDEN_DAEMON_TEST_REGISTER names what to
// register: "child" (default) or "self" (not a child: refused).
const launcherEnv = "MCPWARDEN_DAEMON_TEST_LAUNCHER"

type launched struct {
	api.Registered
	NSPid int    `json:"ns_pid"` // the server's pid as the launcher sees it
	Error string `json:"error,omitempty"`
}

func launcherMain(socket string) int {
	var scope schema.CanonicalScope
	if err := json.Unmarshal([]byte(os.Getenv("MCPWARDEN_DAEMON_TEST_SCOPE")), &scope); err != nil {
		fmt.Println(`{"error":"scope"}`)
		return 2
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, launcherEnv+"=") {
			cmd.Env = append(cmd.Env, kv) // the server is not a launcher
		}
	}
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		fmt.Printf("{\"error\":%q}\n", err.Error())
		return 2
	}
	root := cmd.Process.Pid
	if os.Getenv("MCPWARDEN_DAEMON_TEST_REGISTER") == "self" {
		root = os.Getpid()
	}
	reg, err := client.New(socket).Register(context.Background(), api.Registration{
		RunID: os.Getenv("MCPWARDEN_DAEMON_TEST_RUN"), Mode: schema.ModeAudit, Scope: &scope, ScopeHash: os.Getenv("MCPWARDEN_DAEMON_TEST_SCOPE_HASH"),
	}, root)
	out := launched{Registered: reg, NSPid: cmd.Process.Pid}
	if err != nil {
		out.Error = err.Error()
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return 0
	}
	io.WriteString(stdin, "g")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return 3
	}
	return 0
}

// launch runs the launcher (prefix: e.g. unshare, or nothing) with attr,
// the server in mode; it returns the launcher's answer and the run id.
func (h *harness) launch(t *testing.T, bin string, prefix []string, attr *syscall.SysProcAttr, mode string, env ...string) (launched, string) {
	t.Helper()
	cs, hash := h.scope()
	scope, _ := json.Marshal(cs)
	runID := schema.NewID()
	argv := append(append([]string{}, prefix...), bin, "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), launcherEnv+"="+h.socket, childMode+"="+mode, childWS+"="+h.ws, childOut+"="+h.out,
		"MCPWARDEN_DAEMON_TEST_SCOPE="+string(scope), "MCPWARDEN_DAEMON_TEST_SCOPE_HASH="+hash, "MCPWARDEN_DAEMON_TEST_RUN="+runID)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = attr
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("launcher: %v\n%s", err, out)
	}
	var l launched
	line, _, _ := strings.Cut(string(out), "\n")
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		t.Fatalf("launcher printed %q", out)
	}
	return l, runID
}

// TestRegistrationInAPidNamespace: a launcher in its own pid namespace
// (a container) names its server by a pidfd; the daemon watches the server
// under its host pid and attributes its reads.
func TestRegistrationInAPidNamespace(t *testing.T) {
	h := startDaemon(t)
	unshare := testenv.RequireCommand(t, "unshare")
	l, runID := h.launch(t, os.Args[0], []string{unshare, "--pid", "--fork", "--mount-proc"}, nil, "inside")
	if l.Error != "" {
		t.Fatalf("registration from a pid namespace refused: %s", l.Error)
	}
	if l.RootPID == l.NSPid || l.NSPid > 10 {
		t.Fatalf("server pid %d in the namespace, %d for the daemon: no namespace?", l.NSPid, l.RootPID)
	}
	e := h.sink.waitFor(t, "read from the pid namespace", h.fileOp(runID, filepath.Join(h.ws, "inside.txt"), "allowed"))
	if e.FileOp.PID != l.RootPID {
		t.Errorf("read attributed to pid %d, the server is %d on the host (%d inside)", e.FileOp.PID, l.RootPID, l.NSPid)
	}

	t.Run("a process that is not the launcher's child is refused", func(t *testing.T) {
		l, _ := h.launch(t, os.Args[0], []string{unshare, "--pid", "--fork", "--mount-proc"}, nil, "inside", "MCPWARDEN_DAEMON_TEST_REGISTER=self")
		if !strings.Contains(l.Error, "not a child of the registering process") {
			t.Fatalf("registering itself: %+v", l)
		}
	})
}

// TestRegistrationInACgroup: a launcher in a cgroup of its own (as a
// container runtime starts it) registers; the run carries that cgroup's id.
func TestRegistrationInACgroup(t *testing.T) {
	h := startDaemon(t)
	unshare := testenv.RequireCommand(t, "unshare")
	mnt := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err != nil {
		mnt = "/sys/fs/cgroup"
	}
	cg := filepath.Join(mnt, "mcpwarden-daemon-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		testenv.Missing(t, "a cgroup v2 directory cannot be created ("+err.Error()+")")
	}
	defer os.Remove(cg)
	dir, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(dir.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	l, runID := h.launch(t, os.Args[0], []string{unshare, "--pid", "--fork", "--mount-proc"},
		&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}, "inside")
	if l.Error != "" {
		t.Fatalf("registration from a cgroup refused: %s", l.Error)
	}
	if l.CgroupID != st.Ino {
		t.Errorf("run's cgroup id %d, the container's cgroup is %d", l.CgroupID, st.Ino)
	}
	h.sink.waitFor(t, "read from the cgroup", h.fileOp(runID, filepath.Join(h.ws, "inside.txt"), "allowed"))
}

// TestNonRootLaunchers: a launcher running as an ordinary user registers
// through the socket's group; the daemon records its uid. Without the
// group it cannot reach the socket.
func TestNonRootLaunchers(t *testing.T) {
	testenv.RequireRoot(t)
	const group = 4245
	h := startDaemonWith(t, &memSink{}, func(c *Config) { c.SocketGroup = group })
	// The user must reach the socket, the test binary and the workspace.
	bin := filepath.Join(filepath.Dir(filepath.Dir(h.socket)), "launcher")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(bin); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := h.ws; strings.HasPrefix(d, filepath.Dir(filepath.Dir(h.socket))); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	user := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: group}}
	l, runID := h.launch(t, bin, nil, user, "inside")
	if l.Error != "" {
		t.Fatalf("a member of the socket group was refused: %s", l.Error)
	}
	if l.UID != 65534 {
		t.Errorf("registration recorded uid %d, the launcher runs as 65534", l.UID)
	}
	h.sink.waitFor(t, "the user's server's read", h.fileOp(runID, filepath.Join(h.ws, "inside.txt"), "allowed"))

	// Its launch records carry its uid, the socket's word (SO_PEERCRED),
	// whatever they say: here they claim root.
	cs, hash := h.scope()
	scope, _ := json.Marshal(cs)
	recRun := schema.NewID()
	rc := exec.Command(bin, "-test.run=^$")
	rc.Env = append(os.Environ(), recordsEnv+"="+h.socket, "MCPWARDEN_DAEMON_TEST_RUN="+recRun,
		"MCPWARDEN_DAEMON_TEST_SCOPE="+string(scope), "MCPWARDEN_DAEMON_TEST_SCOPE_HASH="+hash, forgeUIDEnv+"=0")
	rc.SysProcAttr = user
	if out, err := rc.Output(); err != nil || !strings.Contains(string(out), "taken") {
		t.Fatalf("the user's launch record: %v %s", err, out)
	}
	rec := h.sink.waitFor(t, "the user's launch record", func(e *schema.Event) bool { return e.RunID == recRun && e.Launch != nil })
	if rec.Launch.LauncherUID == nil || *rec.Launch.LauncherUID != 65534 || rec.SchemaVersion < 3 || rec.Launch.LauncherUIDBy != schema.LauncherUIDByDaemon {
		t.Errorf("the launch record of a launcher run as 65534 says launcher_uid %v by %q (schema_version %d), want 65534 by the daemon", rec.Launch.LauncherUID, rec.Launch.LauncherUIDBy, rec.SchemaVersion)
	}

	outsider := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	l, _ = h.launch(t, bin, nil, outsider, "inside")
	if !strings.Contains(l.Error, "permission denied") && !strings.Contains(l.Error, "not open to this user") {
		t.Errorf("a user outside the group registered: %+v", l)
	}
}

// recordsEnv makes the test binary a process that sends one launch record
// of run MCPWARDEN_DAEMON_TEST_RUN to the daemon and prints the error, if any.
const recordsEnv = "MCPWARDEN_DAEMON_TEST_RECORDS"

// forgeUIDEnv makes that record claim a launcher_uid of its own.
const forgeUIDEnv = "MCPWARDEN_DAEMON_TEST_FORGE_UID"

func launchRecord(runID string, cs *schema.CanonicalScope) schema.Event {
	e := schema.LocalOrigin().NewEvent(schema.KindLaunch, runID, cs.ScopeID, cs.Hash, time.Now())
	e.Launch = &schema.Launch{Phase: schema.PhaseStart, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "naive"}
	return e
}

func recordsMain(socket string) int {
	var cs schema.CanonicalScope
	_ = json.Unmarshal([]byte(os.Getenv("MCPWARDEN_DAEMON_TEST_SCOPE")), &cs)
	cs.Hash = os.Getenv("MCPWARDEN_DAEMON_TEST_SCOPE_HASH")
	sink := client.New(socket).NewSink()
	sink.RetryFor = time.Second
	rec := launchRecord(os.Getenv("MCPWARDEN_DAEMON_TEST_RUN"), &cs)
	if v := os.Getenv(forgeUIDEnv); v != "" {
		uid, _ := strconv.Atoi(v)
		rec.Launch.LauncherUID, rec.Launch.LauncherUIDBy = &uid, schema.LauncherUIDByLauncher
	}
	if err := sink.Publish(context.Background(), []schema.Event{rec}); err != nil {
		fmt.Println(err)
		return 0
	}
	fmt.Println("taken")
	return 0
}

// TestLauncherRecords: a launcher's records reach the sink through the
// daemon, stamped with the daemon's host; another process cannot send
// records in a run it does not own.
func TestLauncherRecords(t *testing.T) {
	h := startDaemon(t)
	cs, hash := h.scope()
	runID := schema.NewID()
	sink := client.New(h.socket).NewSink()
	defer sink.Close()
	rec := launchRecord(runID, cs)
	rec.Host = "somewhere-else"
	forged := 4242
	rec.Launch.LauncherUID, rec.Launch.LauncherUIDBy = &forged, schema.LauncherUIDByLauncher
	if err := sink.Publish(context.Background(), []schema.Event{rec}); err != nil {
		t.Fatalf("the run's own launcher could not send a record: %v", err)
	}
	got := h.sink.waitFor(t, "the launch record", func(e *schema.Event) bool { return e.EventID == rec.EventID })
	if got.Host != schema.LocalOrigin().Host {
		t.Errorf("record published under host %q, the daemon's is %q", got.Host, schema.LocalOrigin().Host)
	}
	if got.Launch.LauncherUID == nil || *got.Launch.LauncherUID != os.Geteuid() || got.Launch.LauncherUIDBy != schema.LauncherUIDByDaemon {
		t.Errorf("record published with launcher_uid %v by %q, the launcher's uid is %d, by the daemon (it claimed 4242, by itself)", got.Launch.LauncherUID, got.Launch.LauncherUIDBy, os.Geteuid())
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the daemon published an invalid launch record: %v", err)
	}

	scope, _ := json.Marshal(cs)
	other := exec.Command(os.Args[0], "-test.run=^$")
	other.Env = append(os.Environ(), recordsEnv+"="+h.socket, "MCPWARDEN_DAEMON_TEST_RUN="+runID,
		"MCPWARDEN_DAEMON_TEST_SCOPE="+string(scope), "MCPWARDEN_DAEMON_TEST_SCOPE_HASH="+hash)
	out, err := other.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "belongs to another launcher") {
		t.Errorf("another process sent a record in the run: %s", out)
	}
}
