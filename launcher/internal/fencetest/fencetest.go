// Package fencetest builds the binaries the launcher's integration tests and
// benchmarks run (mcpwarden itself and the naive test server) and drives a
// naive server through `mcpwarden run`.
package fencetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	bins      Binaries
)

// Binaries are the built programs.
type Binaries struct {
	Mcpwarden string
	Fence     string // the fence helper, next to Mcpwarden
	ExecStage string // its exec stage, next to it
	Naive     string
	Floor     string // landlockfloor: raw landlock_restrict_self, then exec
}

// Build builds mcpwarden and its fence helper (or uses $MCPWARDEN_BIN, see
// testenv.Mcpwarden) and the naive server once per test binary.
func Build(tb testing.TB) Binaries {
	tb.Helper()
	mcpwarden := testenv.Mcpwarden(tb)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "mcpwarden-fencetest-")
		if buildErr != nil {
			return
		}
		bins.Mcpwarden = mcpwarden
		bins.Fence = filepath.Join(filepath.Dir(mcpwarden), testenv.HelperName)
		bins.ExecStage = filepath.Join(filepath.Dir(mcpwarden), testenv.ExecStageName)
		bins.Naive = filepath.Join(buildDir, "naiveserver")
		if buildErr = testenv.GoBuild(bins.Naive, "./internal/naiveserver", "CGO_ENABLED=0"); buildErr != nil {
			return
		}
		bins.Floor = filepath.Join(buildDir, "landlockfloor")
		buildErr = testenv.GoBuild(bins.Floor, "./internal/landlockfloor", "CGO_ENABLED=0")
	})
	if buildErr != nil {
		tb.Fatalf("build test binaries: %v", buildErr)
	}
	return bins
}

// Run runs a package's tests (call it from TestMain) and then removes the
// directory Build built the test programs into, which outlives any one test.
func Run(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	return code
}

// RequireFence demands a kernel with Landlock ABI 7 (the strict fence) and
// root, so that what is refused is refused by the fence and not by file
// permissions.
func RequireFence(tb testing.TB) {
	tb.Helper()
	testenv.RequireRoot(tb)
	if abi := launcher.KernelABI(); abi < 7 {
		testenv.Missing(tb, fmt.Sprintf("the kernel's Landlock ABI is %d, the fence needs 7", abi))
	}
}

// WriteScope writes a scope JSON file into dir and returns its path.
func WriteScope(tb testing.TB, dir string, scope map[string]any) string {
	tb.Helper()
	full := map[string]any{
		"scope_id": "test-scope", "resource_refs": []string{}, "access_mode": "read",
		"tool_allowlist": []string{"read_text_file"}, "approval": "none", "expires_after_minutes": 30,
	}
	for k, v := range scope {
		full[k] = v
	}
	b, err := json.Marshal(full)
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("scope-%d.json", time.Now().UnixNano()))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Response is the naive server's answer.
type Response struct {
	OK    bool   `json:"ok"`
	Errno string `json:"errno"`
	Error string `json:"error"`
	Data  string `json:"data"`
}

// Session is a naive server running under `mcpwarden run`.
type Session struct {
	// Namespaces: the run was started with its namespaces (the default;
	// not with StartOptions.NoNamespaces). Denials then come from the layer
	// that says no first: a path outside the minimal root does not exist
	// (ENOENT), a read-only mount refuses writes (EROFS), a process outside
	// the run's pid namespace does not exist (ESRCH).
	Namespaces bool

	tb     testing.TB
	Cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *testenv.LockedBuffer

	waitOnce sync.Once
	waitCh   chan struct{}
}

// StartOptions configure a session.
type StartOptions struct {
	Scope      string
	Base       string
	AuditLog   string
	ExtraArgs  []string // flags before "--"
	Command    []string // default: the naive server
	ExtraFiles []*os.File
	Dir        string
	// NoNamespaces runs with --no-namespaces: Landlock and seccomp alone,
	// so that what they deny is denied with their own errno.
	NoNamespaces bool
	// Wrapper runs the launcher under a program (setpriv to another user,
	// a shell in a user namespace): Wrapper + [mcpwarden, args...].
	Wrapper []string
	// SysProcAttr is given to the (wrapped) launcher's process.
	SysProcAttr *syscall.SysProcAttr
	// Env is added to the launcher's environment.
	Env []string
}

// RelayFlag makes `mcpwarden run` relay bytes unchanged instead of running
// the protocol proxy (which is on by default): these tests speak the naive
// server's own line protocol and must see the fence, not the proxy, deny.
const RelayFlag = "--proxy=false"

// Start runs the session's server (with the byte-transparent relay).
func Start(tb testing.TB, b Binaries, o StartOptions) *Session {
	tb.Helper()
	if o.AuditLog == "" {
		o.AuditLog = filepath.Join(tb.TempDir(), "audit.jsonl")
	}
	args := []string{"run", RelayFlag, "--scope", o.Scope, "--base", o.Base, "--audit-log", o.AuditLog}
	if o.NoNamespaces {
		args = append(args, "--no-namespaces")
	}
	args = append(args, o.ExtraArgs...)
	if o.Command == nil {
		o.Command = []string{b.Naive}
	}
	args = append(append(args, "--"), o.Command...)
	argv := append(append(append([]string(nil), o.Wrapper...), b.Mcpwarden), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = o.SysProcAttr
	if o.Env != nil {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.Dir = o.Dir
	if cmd.Dir == "" {
		cmd.Dir = o.Base
	}
	cmd.ExtraFiles = o.ExtraFiles
	s := &Session{tb: tb, Cmd: cmd, lines: make(chan string, 16), stderr: &testenv.LockedBuffer{}, Namespaces: !o.NoNamespaces}
	for _, a := range o.ExtraArgs {
		if a == "--no-namespaces" || a == "--mode=audit" || a == "audit" {
			s.Namespaces = false
		}
	}
	cmd.Stderr = s.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	s.in = in
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	tb.Cleanup(func() { s.Close() })
	return s
}

// Do sends one request and waits for its response.
func (s *Session) Do(req map[string]any) Response {
	s.tb.Helper()
	b, _ := json.Marshal(req)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		s.tb.Fatalf("write request: %v (stderr: %s)", err, s.stderr.String())
	}
	line, ok := s.ReadLine(2 * time.Minute) // generous: a busy CI host stalls a request for long
	if !ok {
		s.tb.Fatalf("no response to %s (stderr: %s)", b, s.stderr.String())
	}
	var r Response
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		s.tb.Fatalf("bad response %q: %v", line, err)
	}
	return r
}

// ReadLine waits up to d for the next stdout line.
func (s *Session) ReadLine(d time.Duration) (string, bool) {
	select {
	case l, ok := <-s.lines:
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// Send writes raw bytes to the server's stdin.
func (s *Session) Send(b []byte) error {
	_, err := s.in.Write(b)
	return err
}

// Stderr is what mcpwarden and the server wrote to stderr so far.
func (s *Session) Stderr() string { return s.stderr.String() }

// Close ends stdin and waits for mcpwarden; it returns the exit code.
func (s *Session) Close() int {
	s.in.Close()
	return s.Wait()
}

// Wait waits (up to 30 s, then kills) for mcpwarden to exit without closing
// its stdin; it returns the exit code.
func (s *Session) Wait() int {
	s.waitOnce.Do(func() { s.waitCh = make(chan struct{}); go func() { _ = s.Cmd.Wait(); close(s.waitCh) }() })
	done := s.waitCh
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-done
	}
	if s.Cmd.ProcessState == nil {
		return -1
	}
	return s.Cmd.ProcessState.ExitCode()
}

// FilesystemServer is the pinned npm filesystem server's entry point.
func FilesystemServer(tb testing.TB) string {
	tb.Helper()
	return PinnedServer(tb, "server-filesystem")
}

// PinnedServer is the entry point (dist/index.js) of one of the npm MCP
// servers pinned in deploy/mcp-servers ("server-filesystem",
// "server-everything", "server-memory").
func PinnedServer(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(testenv.RepoRoot(), "deploy", "mcp-servers", "node_modules", "@modelcontextprotocol", name, "dist", "index.js")
	testenv.RequireFile(tb, p, "run scripts/test-env.sh install-npm")
	testenv.RequireCommand(tb, "node")
	return p
}

// GoSDKEverythingServer is go-sdk's conformance everything-server,
// installed where go install puts it by scripts/test-env.sh install.
func GoSDKEverythingServer(tb testing.TB) string {
	tb.Helper()
	return testenv.GoTool(tb, "everything-server")
}

// ContainsAll reports whether s contains every part.
func ContainsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// NamespaceDenials are the errnos with which the namespace layers deny
// what Landlock and seccomp would deny with EACCES or EPERM.
var NamespaceDenials = []string{"ENOENT", "EROFS", "ESRCH", "EXDEV"}

// ForEachLayering runs f twice: with the run's namespaces (the default)
// and with Landlock and seccomp alone (--no-namespaces), so that a test of
// what the fence denies shows each layer holding on its own.
func ForEachLayering(t *testing.T, f func(t *testing.T, noNamespaces bool)) {
	t.Run("namespaces", func(t *testing.T) { f(t, false) })
	t.Run("landlock-seccomp", func(t *testing.T) { f(t, true) })
}

// RunPIDNamespace is the pid namespace (the /proc/PID/ns/pid link) of the
// run whose launcher is launcherPID: its helper's, a child of the launcher
// in another pid namespace than this process.
func RunPIDNamespace(tb testing.TB, launcherPID int) string {
	tb.Helper()
	ns := runPIDNamespace(launcherPID)
	if ns == "" {
		tb.Fatalf("the launcher %d has no child in a pid namespace of its own", launcherPID)
	}
	return ns
}

func runPIDNamespace(launcherPID int) string {
	self, _ := os.Readlink("/proc/self/ns/pid")
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", launcherPID))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", launcherPID, task.Name()))
		for _, c := range strings.Fields(string(b)) {
			if ns, err := os.Readlink("/proc/" + c + "/ns/pid"); err == nil && ns != self {
				return ns
			}
		}
	}
	return ""
}

func nsOf(pid string) string {
	l, _ := os.Readlink("/proc/" + pid + "/ns/pid")
	return l
}

// HostPIDIn is the host pid of the process that a server run by the
// launcher launcherPID knows as pid: pid itself when the run has no pid
// namespace of its own.
func HostPIDIn(tb testing.TB, launcherPID, pid int) int {
	tb.Helper()
	ns := runPIDNamespace(launcherPID)
	if ns == "" {
		return pid
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(strings.TrimPrefix(line, "NSpid:")); strings.HasPrefix(line, "NSpid:") && len(f) > 0 && f[len(f)-1] == strconv.Itoa(pid) {
				host, _ := strconv.Atoi(e.Name())
				return host
			}
		}
	}
	tb.Fatalf("no process of the run is pid %d in its pid namespace", pid)
	return 0
}

// ProcessesIn lists the live (not zombie) processes in pid namespace ns.
func ProcessesIn(ns string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(b), ')'); err == nil && i > 0 && i+2 < len(b) && b[i+2] != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// HostPID is the host pid of the run's process that the server knows as
// pid. With the run's own pid namespace the server's pids are the
// namespace's; without, they are the host's.
func (s *Session) HostPID(pid int) int {
	s.tb.Helper()
	if !s.Namespaces {
		return pid
	}
	RunPIDNamespace(s.tb, s.Cmd.Process.Pid) // fails the test when there is none
	return HostPIDIn(s.tb, s.Cmd.Process.Pid, pid)
}

// HelperPID is the host pid of the run's fence helper (its init with
// namespaces; the server itself without): the launch record's root_pid.
func (s *Session) HelperPID() int {
	s.tb.Helper()
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.Cmd.Process.Pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", s.Cmd.Process.Pid, task.Name()))
		for _, c := range strings.Fields(string(b)) {
			// Without namespaces the helper became the server; with them it
			// is the child in a pid namespace of its own (the launcher's
			// other children, such as the cgroup watcher, are not).
			if comm, _ := os.ReadFile("/proc/" + c + "/comm"); strings.TrimSpace(string(comm)) != testenv.HelperName && !s.Namespaces ||
				s.Namespaces && runPIDNamespace(s.Cmd.Process.Pid) != "" && nsOf(c) == runPIDNamespace(s.Cmd.Process.Pid) {
				pid, _ := strconv.Atoi(c)
				return pid
			}
		}
	}
	s.tb.Fatalf("the launcher %d has no fence helper", s.Cmd.Process.Pid)
	return 0
}
