package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// The test binary doubles as the watched "server": with childMode set it
// waits for one byte on stdin (sent once the run is registered), does what
// the mode says, and exits.
const (
	childMode = "MCPWARDEN_DAEMON_TEST_MODE"
	childWS   = "MCPWARDEN_DAEMON_TEST_WS"
	childOut  = "MCPWARDEN_DAEMON_TEST_OUT"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(openCloseChild); spec != "" {
		os.Exit(openCloseLoop(spec))
	}
	if socket := os.Getenv(launcherEnv); socket != "" {
		os.Exit(launcherMain(socket))
	}
	if socket := os.Getenv(recordsEnv); socket != "" {
		os.Exit(recordsMain(socket))
	}
	if mode := os.Getenv(childMode); mode != "" {
		os.Exit(child(mode, os.Getenv(childWS), os.Getenv(childOut)))
	}
	os.Exit(pintest.Main(m))
}

// cloneParentExec starts path with arg in a process made by
// clone(CLONE_PARENT), which execs at once (nothing but raw system calls
// between the clone and the exec, as syscall.forkExec does).
func cloneParentExec(path, arg string) error {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	argv, err := syscall.SlicePtrFromStrings([]string{path, arg})
	if err != nil {
		return err
	}
	envv, err := syscall.SlicePtrFromStrings(nil)
	if err != nil {
		return err
	}
	syscall.ForkLock.Lock()
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.CLONE_PARENT|syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno == 0 && pid == 0 {
		syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 127, 0, 0)
	}
	syscall.ForkLock.Unlock()
	if errno != 0 {
		return errno
	}
	return nil
}

func child(mode, ws, out string) int {
	if mode == "prefork" {
		return prefork(ws, out)
	}
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		return 10
	}
	read := func(p string) error {
		_, err := os.ReadFile(p)
		return err
	}
	switch mode {
	case "inside":
		if read(filepath.Join(ws, "inside.txt")) != nil {
			return 11
		}
	case "unwatched":
		if read(filepath.Join(ws, "unwatched.txt")) != nil {
			return 11
		}
	case "landlock":
		if err := landlock.V7.RestrictPaths(landlock.RODirs(ws)); err != nil {
			fmt.Fprintln(os.Stderr, "restrict:", err)
			return 12
		}
		if read(filepath.Join(ws, "inside.txt")) != nil {
			return 13
		}
		if read(out) == nil {
			return 14 // the fence must hold
		}
	case "symlink":
		if read(filepath.Join(ws, "link")) != nil {
			return 15
		}
	case "outside":
		if read(out) != nil {
			return 16
		}
	case "fork":
		if err := exec.Command("/bin/cat", filepath.Join(ws, "child.txt")).Run(); err != nil {
			return 17
		}
	case "writes":
		// Relative paths against the cwd, as servers use them.
		if os.Chdir(ws) != nil || os.Mkdir("d1", 0o755) != nil || os.WriteFile("w.txt", []byte("w"), 0o644) != nil ||
			os.Rename("w.txt", "d1/w2.txt") != nil || os.Remove("d1/w2.txt") != nil ||
			os.Rename("x.txt", filepath.Join(filepath.Dir(out), "x-moved.txt")) != nil {
			return 20
		}
	case "flood":
		for range 5000 {
			if read(filepath.Join(ws, "inside.txt")) != nil {
				return 18
			}
		}
	case "flood-until-eof":
		// Reads until stdin ends.
		var stop atomic.Bool
		go func() {
			io.Copy(io.Discard, os.Stdin)
			stop.Store(true)
		}()
		for !stop.Load() {
			if read(filepath.Join(ws, "inside.txt")) != nil {
				return 18
			}
		}
	case "execcat":
		// The fence helper's exec stage: its own operation, then the
		// server (cat) in its place.
		if read(filepath.Join(ws, "inside.txt")) != nil {
			return 21
		}
		err := syscall.Exec("/bin/cat", []string{"cat", filepath.Join(ws, "child.txt")}, os.Environ())
		fmt.Fprintln(os.Stderr, "exec cat:", err)
		return 22
	case "setsid":
		// A new session and a double fork: the reader is reparented away
		// from the run's tree before it reads.
		script := `( sleep 0.2; exec /bin/cat "$1" ) & exit 0`
		if err := exec.Command("/usr/bin/setsid", "/bin/sh", "-c", script, "sh", filepath.Join(ws, "child.txt")).Run(); err != nil {
			return 23
		}
	case "cloneparent":
		// clone(CLONE_PARENT): the reader is born the root's sibling, a
		// child of the (unwatched) process that started the root.
		if err := cloneParentExec("/bin/cat", filepath.Join(ws, "child.txt")); err != nil {
			fmt.Fprintln(os.Stderr, "clone:", err)
			return 24
		}
	case "iouring":
		var params [120]byte
		fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		if errno == 0 {
			unix.Close(int(fd))
		}
	default:
		return 19
	}
	return 0
}

// prefork is a root process that starts its child (the exec stage, in
// mode execcat) before it is registered, as the run's init does, prints the
// child's pid, then passes the go-ahead on and waits for it.
func prefork(ws, out string) int {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childMode+"=execcat", childWS+"="+ws, childOut+"="+out)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 30
	}
	if err := cmd.Start(); err != nil {
		return 31
	}
	fmt.Println(cmd.Process.Pid)
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		return 10
	}
	if _, err := stdin.Write(b[:]); err != nil {
		return 32
	}
	if cmd.Wait() != nil {
		return 33
	}
	return 0
}

// memSink keeps what the daemon publishes and checks every event against
// the schema, as the real publisher's consumers do.
type memSink struct {
	refuse  bool           // refuse every batch, like a publisher whose spool is full
	refused []schema.Event // events refused
	mu      sync.Mutex
	events  []schema.Event
	invalid []error
}

func (s *memSink) Publish(_ context.Context, events []schema.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse {
		s.refused = append(s.refused, events...)
		return errors.New("audit sink cannot take events")
	}
	for i := range events {
		if err := events[i].Validate(); err != nil {
			s.invalid = append(s.invalid, err)
		}
	}
	s.events = append(s.events, events...)
	return nil
}

// setRefuse makes the sink refuse (or take) every batch from now on.
func (s *memSink) setRefuse(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// wasRefused reports whether the sink refused an event that match accepts.
func (s *memSink) wasRefused(match func(*schema.Event) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.refused {
		if match(&s.refused[i]) {
			return true
		}
	}
	return false
}

func (s *memSink) snapshot() []schema.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// waitFor polls the sink until match returns true for some event.
func (s *memSink) waitFor(t *testing.T, what string, match func(*schema.Event) bool) *schema.Event {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, e := range s.snapshot() {
			if match(&e) {
				return &e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event within 2 minutes; got:\n%s", what, dump(s.snapshot()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dump(events []schema.Event) string {
	var b strings.Builder
	for _, e := range events {
		switch {
		case e.FileOp != nil:
			fmt.Fprintf(&b, "  %s run=%s %+v\n", e.Kind, short(e.RunID), *e.FileOp)
		case e.LandlockDenial != nil:
			fmt.Fprintf(&b, "  %s run=%s %+v\n", e.Kind, short(e.RunID), *e.LandlockDenial)
		case e.Finding != nil:
			fmt.Fprintf(&b, "  %s run=%s %+v\n", e.Kind, short(e.RunID), *e.Finding)
		default:
			fmt.Fprintf(&b, "  %s\n", e.Kind)
		}
	}
	return b.String()
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

type harness struct {
	access schema.AccessMode // of the scope registered runs get (default read)
	t      *testing.T
	sink   *memSink
	hasher *schema.PathHasher
	socket string
	ws     string // workspace (the scope's allowed dir)
	out    string // a file outside the scope
	base   string
	d      *Daemon
	// stop stops the daemon and returns what its Run returned; the
	// test's cleanup calls it too (once is enough).
	stop func() error
}

func startDaemon(t *testing.T) *harness { return startDaemonWith(t, &memSink{}) }

func startDaemonWith(t *testing.T, sink *memSink, tune ...func(*Config)) *harness {
	t.Helper()
	testenv.RequireRoot(t)
	// The daemon reads the kernel's audit log: no test may flood it meanwhile.
	testenv.AuditUser(t)
	key := make([]byte, schema.PathKeySize)
	_, _ = rand.Read(key)
	hasher, _ := schema.NewPathHasher(key)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{access: schema.AccessRead, t: t, sink: sink, hasher: hasher, socket: filepath.Join(root, "sock", "daemon.sock"),
		base: filepath.Join(root, "base"), out: filepath.Join(root, "outside", "secret-notes.txt")}
	h.ws = filepath.Join(h.base, "ws")
	for _, d := range []string{h.ws, filepath.Dir(h.out)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"inside.txt", "child.txt", "unwatched.txt", "x.txt"} {
		if err := os.WriteFile(filepath.Join(h.ws, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.out, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.out, filepath.Join(h.ws, "link")); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Socket: h.socket, Sink: h.sink, Hasher: hasher, Origin: schema.LocalOrigin(), EnableAudit: true, FlushInterval: 10 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	h.d = d
	h.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("daemon Run: %v", err)
		}
		h.sink.mu.Lock()
		defer h.sink.mu.Unlock()
		for _, err := range h.sink.invalid {
			t.Errorf("daemon published an invalid event: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		done <- err // for h.stop
		if testenv.InCI() {
			t.Fatalf("daemon did not start: %v", err)
		}
		t.Skipf("skipping: daemon did not start: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("daemon not ready within 3 minutes")
	}
	return h
}

func (h *harness) scope() (*schema.CanonicalScope, string) {
	h.t.Helper()
	s := &schema.Scope{ScopeID: "daemon-test", AllowedPaths: []string{"ws"}, AccessMode: h.access,
		ToolAllowlist: []string{"read_file"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 10}
	cs, err := schema.Canonicalize(s, h.base, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return cs, cs.Hash
}

// run starts the test binary in mode, registers it (unless register is
// false), lets it go and waits for it. It returns the child's pid and run id.
func (h *harness) run(mode string, runMode schema.RunMode, register bool) (int, string) {
	h.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childMode+"="+mode, childWS+"="+h.ws, childOut+"="+h.out)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	runID := schema.NewID()
	if register {
		cs, hash := h.scope()
		_, err := client.New(h.socket).Register(context.Background(), api.Registration{
			RunID: runID, Mode: runMode, Scope: cs, ScopeHash: hash,
			Runtime: []classify.RuntimePath{{Path: "/usr/lib"}, {Path: "/lib"}, {Path: "/etc/ld.so.cache"}, {Path: "/bin/cat"}, {Path: "/usr/bin/cat"}},
		}, cmd.Process.Pid)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			h.t.Fatalf("register: %v", err)
		}
	}
	if _, err := io.WriteString(stdin, "g"); err != nil {
		h.t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		h.t.Fatalf("child %s: %v", mode, err)
	}
	return cmd.Process.Pid, runID
}

func (h *harness) fileOp(runID string, path string, verdict classify.Verdict) func(*schema.Event) bool {
	hash := h.hasher.Hash(path)
	return func(e *schema.Event) bool {
		return e.RunID == runID && e.FileOp != nil && e.FileOp.PathHash == hash && e.FileOp.Verdict == verdict
	}
}

func TestDaemonObservesRuns(t *testing.T) {
	h := startDaemon(t)

	t.Run("health at start", func(t *testing.T) {
		e := h.sink.waitFor(t, "health", func(e *schema.Event) bool { return e.Health != nil })
		// No run yet: the syscall hooks wait for one.
		if !slices.Contains(e.Health.Hooks, "tp_btf/sched_process_fork") || slices.Contains(e.Health.Hooks, "tp_btf/sys_enter") ||
			e.Health.AuditStream != "on" || e.Health.LandlockABI < 1 {
			t.Errorf("health %+v", *e.Health)
		}
	})

	t.Run("read inside", func(t *testing.T) {
		pid, runID := h.run("inside", schema.ModeEnforce, true)
		e := h.sink.waitFor(t, "inside read", h.fileOp(runID, filepath.Join(h.ws, "inside.txt"), classify.Allowed))
		if f := e.FileOp; f.PathClass != schema.PathWorkspace || f.PID != pid || f.FlagsClass != "read" || f.Result != 0 || !strings.HasPrefix(f.Syscall, "open") {
			t.Errorf("file_op %+v (child pid %d)", *f, pid)
		}
		if e.ScopeID != "daemon-test" || e.ScopeHash == "" {
			t.Errorf("envelope scope %q %q", e.ScopeID, e.ScopeHash)
		}
	})

	t.Run("read outside denied by Landlock", func(t *testing.T) {
		_, runID := h.run("landlock", schema.ModeEnforce, true)
		e := h.sink.waitFor(t, "denied read", h.fileOp(runID, h.out, classify.BlockedByKernel))
		if f := e.FileOp; f.Result != -13 || f.PathClass != schema.PathOutside {
			t.Errorf("file_op %+v", *f)
		}
		hash := h.hasher.Hash(h.out)
		d := h.sink.waitFor(t, "Landlock denial record", func(e *schema.Event) bool {
			return e.LandlockDenial != nil && e.LandlockDenial.PathHash == hash
		})
		if d.RunID != runID || !slices.Contains(d.LandlockDenial.Blockers, "fs.read_file") || d.LandlockDenial.PathClass != schema.PathOutside {
			t.Errorf("landlock_denial run=%s (want %s) %+v", d.RunID, runID, *d.LandlockDenial)
		}
	})

	t.Run("symlink out reports the target", func(t *testing.T) {
		_, runID := h.run("symlink", schema.ModeAudit, true)
		e := h.sink.waitFor(t, "symlink escape", h.fileOp(runID, h.out, classify.Escape))
		if e.FileOp.PathClass != schema.PathOutside {
			t.Errorf("file_op %+v", *e.FileOp)
		}
		linkHash := h.hasher.Hash(filepath.Join(h.ws, "link"))
		for _, e := range h.sink.snapshot() {
			if e.FileOp != nil && e.FileOp.PathHash == linkHash && e.FileOp.Result == 0 {
				t.Errorf("successful open reported under the link's name, not its target: %+v", *e.FileOp)
			}
		}
	})

	t.Run("audit mode read outside is an escape", func(t *testing.T) {
		_, runID := h.run("outside", schema.ModeAudit, true)
		h.sink.waitFor(t, "escape", h.fileOp(runID, h.out, classify.Escape))
	})

	t.Run("forked child is tracked", func(t *testing.T) {
		pid, runID := h.run("fork", schema.ModeEnforce, true)
		e := h.sink.waitFor(t, "child read", h.fileOp(runID, filepath.Join(h.ws, "child.txt"), classify.Allowed))
		if e.FileOp.PID == pid || e.FileOp.Comm != "cat" {
			t.Errorf("child's open attributed to pid %d comm %q (root %d)", e.FileOp.PID, e.FileOp.Comm, pid)
		}
	})

	// A process that leaves the run's tree (a new session after a double
	// fork; clone with CLONE_PARENT, which makes it a child of the root's
	// unwatched parent) is still the run's: the probes watch the child of
	// every fork made by a watched task, whoever becomes its parent.
	for _, mode := range []string{"setsid", "cloneparent"} {
		t.Run("a reader that leaves the tree: "+mode, func(t *testing.T) {
			pid, runID := h.run(mode, schema.ModeEnforce, true)
			e := h.sink.waitFor(t, mode+" read", h.fileOp(runID, filepath.Join(h.ws, "child.txt"), classify.Allowed))
			if e.FileOp.PID == pid || e.FileOp.Comm != "cat" {
				t.Errorf("the reader's open attributed to pid %d comm %q (root %d)", e.FileOp.PID, e.FileOp.Comm, pid)
			}
		})
	}

	t.Run("io_uring_setup is a finding", func(t *testing.T) {
		_, runID := h.run("iouring", schema.ModeEnforce, true)
		e := h.sink.waitFor(t, "io_uring finding", func(e *schema.Event) bool { return e.RunID == runID && e.Finding != nil })
		if e.Finding.Type != schema.FindingObservationGap || !strings.HasPrefix(e.Finding.Reason, "io_uring_setup") {
			t.Errorf("finding %+v", *e.Finding)
		}
	})

	t.Run("write operations resolved against the cwd", func(t *testing.T) {
		h.access = schema.AccessWrite
		defer func() { h.access = schema.AccessRead }()
		_, runID := h.run("writes", schema.ModeAudit, true)
		for _, c := range []struct {
			path    string
			syscall string
			access  schema.OpAccess
			verdict classify.Verdict
		}{
			{filepath.Join(h.ws, "d1"), "mkdir", "create", classify.Allowed},
			{filepath.Join(h.ws, "w.txt"), "open", "create", classify.Allowed},
			{filepath.Join(h.ws, "w.txt"), "rename", "write", classify.Allowed},
			{filepath.Join(h.ws, "d1", "w2.txt"), "rename", "create", classify.Allowed},
			{filepath.Join(h.ws, "d1", "w2.txt"), "unlink", "write", classify.Allowed},
			{filepath.Join(h.ws, "x.txt"), "rename", "write", classify.Allowed},
			{filepath.Join(filepath.Dir(h.out), "x-moved.txt"), "rename", "create", classify.Escape},
		} {
			hash := h.hasher.Hash(c.path)
			h.sink.waitFor(t, c.syscall+" "+filepath.Base(c.path), func(e *schema.Event) bool {
				f := e.FileOp
				return e.RunID == runID && f != nil && f.PathHash == hash && strings.HasPrefix(f.Syscall, c.syscall) &&
					f.FlagsClass == c.access && f.Verdict == c.verdict
			})
		}
	})

	t.Run("unwatched process yields nothing", func(t *testing.T) {
		h.run("unwatched", schema.ModeEnforce, false)
		// A watched run afterwards is the barrier: once its event is in,
		// the unwatched one would have been too.
		_, runID := h.run("inside", schema.ModeEnforce, true)
		h.sink.waitFor(t, "barrier", h.fileOp(runID, filepath.Join(h.ws, "inside.txt"), classify.Allowed))
		hash := h.hasher.Hash(filepath.Join(h.ws, "unwatched.txt"))
		for _, e := range h.sink.snapshot() {
			if e.FileOp != nil && e.FileOp.PathHash == hash {
				t.Fatalf("event for an unwatched process: %+v", *e.FileOp)
			}
		}
	})
}

// TestRefusesRunsWhenSinkRefuses: a daemon whose events cannot be recorded
// refuses new runs, so `run --daemon-socket` does not start them unrecorded.
func TestRefusesRunsWhenSinkRefuses(t *testing.T) {
	h := startDaemonWith(t, &memSink{refuse: true})
	cs, hash := h.scope()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := client.New(h.socket).Register(context.Background(), api.Registration{
			RunID: schema.NewID(), Mode: schema.ModeEnforce, Scope: cs, ScopeHash: hash}, child.Process.Pid)
		if err != nil && strings.Contains(err.Error(), "unrecorded") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("registration not refused with a refusing sink: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRegistrationWithAnotherScopesHashIsRefused: the daemon computes the
// hash of the scope it is sent and refuses a registration whose scope_hash
// is not that (docs/architecture.md, docs/daemon.md: a scope cannot be
// paired with another's hash), so a run's events cannot carry a reviewed
// scope's hash over a wider scope. The refused registrations claim
// nothing: the same run id then registers with its scope's own hash.
func TestRegistrationWithAnotherScopesHashIsRefused(t *testing.T) {
	h := startDaemonWith(t, &memSink{})
	cs, hash := h.scope()
	wider := *cs
	wider.AccessMode = schema.AccessWrite
	other := *cs
	other.ScopeID = "another-scope"
	otherHash, err := ScopeHash(&other)
	if err != nil {
		t.Fatal(err)
	}
	if otherHash == hash {
		t.Fatal("two scopes hash the same")
	}
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	runID := schema.NewID()
	c := client.New(h.socket)
	for _, tc := range []struct {
		name  string
		scope *schema.CanonicalScope
		hash  string
	}{
		{"a wider scope with the reviewed scope's hash", &wider, hash},
		{"the scope with another scope's hash", cs, otherHash},
	} {
		_, err := c.Register(context.Background(), api.Registration{RunID: runID, Mode: schema.ModeEnforce, Scope: tc.scope, ScopeHash: tc.hash}, child.Process.Pid)
		if err == nil || !strings.Contains(err.Error(), "scope_hash does not match the scope") {
			t.Errorf("%s: registration %v, want it refused for its scope_hash", tc.name, err)
		}
	}
	if _, err := c.Register(context.Background(), api.Registration{RunID: runID, Mode: schema.ModeEnforce, Scope: cs, ScopeHash: hash}, child.Process.Pid); err != nil {
		t.Fatalf("the scope with its own hash, same run id: %v", err)
	}
}

// TestDropsReachAHealthEvent: records lost in the kernel (a one-page ring
// that a flooding run overflows) are reported in a health event within
// seconds, never silently, and as an OBSERVATION_GAP of the run.
func TestDropsReachAHealthEvent(t *testing.T) {
	h := startDaemonWith(t, &memSink{}, func(c *Config) {
		c.Probes = probes.DefaultConfig()
		c.Probes.RingBytes = 4096
	})
	_, runID := h.run("flood", schema.ModeEnforce, true)
	e := h.sink.waitFor(t, "health with drops", func(e *schema.Event) bool {
		return e.Health != nil && e.Health.DropsBPFReserve > 0
	})
	t.Logf("health after the flood: %+v", *e.Health)
	// The lost records name no run: the run observed meanwhile has a gap
	// of its own, so its queries do not show what got through as the whole run.
	h.sink.waitFor(t, "the flooding run's OBSERVATION_GAP", func(e *schema.Event) bool {
		return e.RunID == runID && e.Finding != nil && e.Finding.Type == schema.FindingObservationGap && e.Finding.Reason == GapEventsLost
	})
}

// TestStopProcessesEveryRecordRead: a daemon stopped while a run floods its
// ring buffer processes every record its readers took before Run returns.
// A record read and then left in the queue is lost for good: the next
// daemon reads the ring on after it, and a clean restart must lose only
// the audit records of the lapse (docs/daemon.md, "Restarts"). Before, the
// processor took what was queued as soon as the stop began while the ring
// reader went on reading until its ring was closed: what it read meanwhile
// was neither published nor left in the ring (TestDaemonRestartAdoptsRuns,
// at load 28, saw 8 of the 25 reads made just before a clean stop).
func TestStopProcessesEveryRecordRead(t *testing.T) {
	h := startDaemon(t)
	cs, hash := h.scope()
	// The flooding roots are registered as the launcher's fence helper
	// (this test binary) before its exec: their records are the helper's,
	// which the processor skips at once, so it keeps the queue short
	// while the reader, woken for every 64 KiB of records, takes them in
	// bursts; a stop in the middle of a burst is what lost records.
	var st unix.Stat_t
	if err := unix.Stat(os.Args[0], &st); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childMode+"=flood-until-eof", childWS+"="+h.ws, childOut+"="+h.out)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stdin.Close()
			cmd.Wait()
		}()
		if _, err := client.New(h.socket).Register(context.Background(), api.Registration{
			RunID: schema.NewID(), Mode: schema.ModeEnforce, Scope: cs, ScopeHash: hash,
			ExecPending: true, HelperExe: &api.FileID{Dev: st.Dev, Ino: st.Ino}}, cmd.Process.Pid); err != nil {
			t.Fatalf("register: %v", err)
		}
		if _, err := io.WriteString(stdin, "g"); err != nil {
			t.Fatal(err)
		}
	}
	// Stop while the flood's records flow: once the reader has taken a
	// few thousand of them.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if c, err := h.d.probes.Counters(); err == nil && c.ReadRecords >= 2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flood's records did not reach the reader within 3 minutes")
		}
	}
	if err := h.stop(); err != nil {
		t.Fatalf("daemon Run: %v", err)
	}
	if n := len(h.d.records); n > 0 {
		t.Errorf("%d records read from the ring were left in the queue at the stop: never published, and gone from the ring", n)
	}
	if n := len(h.d.ll); n > 0 {
		t.Errorf("%d audit records read were left in the queue at the stop", n)
	}
}

// TestChildrenForkedBeforeRegistration: a root registered after it had
// already started a child (the run's init starts the exec stage as soon as
// it has its spec, before the launcher's registration reaches the daemon)
// has that child watched too. The child is the fence helper's exec stage:
// its own operation before it execs the server is the launcher's (setup),
// the server's are the run's, under the child's pid.
func TestChildrenForkedBeforeRegistration(t *testing.T) {
	h := startDaemon(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childMode+"=prefork", childWS+"="+h.ws, childOut+"="+h.out)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var childPID int
	if _, err := fmt.Fscan(stdout, &childPID); err != nil {
		t.Fatalf("the root did not name its child: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(os.Args[0], &st); err != nil {
		t.Fatal(err)
	}
	cs, hash := h.scope()
	runID := schema.NewID()
	reg, err := client.New(h.socket).Register(context.Background(), api.Registration{
		RunID: runID, Mode: schema.ModeEnforce, Scope: cs, ScopeHash: hash,
		Runtime:     []classify.RuntimePath{{Path: "/usr/lib"}, {Path: "/lib"}, {Path: "/etc/ld.so.cache"}, {Path: "/bin/cat"}, {Path: "/usr/bin/cat"}},
		ExecPending: true, HelperExe: &api.FileID{Dev: st.Dev, Ino: st.Ino},
	}, cmd.Process.Pid)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := io.WriteString(stdin, "g"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("root: %v", err)
	}
	e := h.sink.waitFor(t, "the server's read in the child started before the registration", h.fileOp(runID, filepath.Join(h.ws, "child.txt"), classify.Allowed))
	if e.FileOp.PID != childPID || e.FileOp.Comm != "cat" {
		t.Errorf("read attributed to pid %d comm %q; the child is %d (the root %d)", e.FileOp.PID, e.FileOp.Comm, childPID, reg.RootPID)
	}
	insideHash := h.hasher.Hash(filepath.Join(h.ws, "inside.txt"))
	for _, e := range h.sink.snapshot() {
		if e.RunID == runID && e.FileOp != nil && e.FileOp.PathHash == insideHash {
			t.Errorf("the exec stage's own read before it exec'd the server was reported as the run's: %+v", *e.FileOp)
		}
	}
}

// TestEventsLostToTheSinkAreARunsGap: while the sink refuses events (NATS
// down and the spool full) a run escapes its scope; those events are lost.
// Once the sink takes events again the daemon publishes an OBSERVATION_GAP
// (events_dropped) in that run's name, so the run's own queries say it was
// not fully observed rather than showing what got through as the whole run.
func TestEventsLostToTheSinkAreARunsGap(t *testing.T) {
	h := startDaemon(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childMode+"=outside", childWS+"="+h.ws, childOut+"="+h.out)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	runID := schema.NewID()
	cs, hash := h.scope()
	if _, err := client.New(h.socket).Register(context.Background(), api.Registration{
		RunID: runID, Mode: schema.ModeEnforce, Scope: cs, ScopeHash: hash,
		Runtime: []classify.RuntimePath{{Path: "/usr/lib"}, {Path: "/lib"}, {Path: "/etc/ld.so.cache"}},
	}, cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("register: %v", err)
	}
	h.sink.setRefuse(true)
	if _, err := io.WriteString(stdin, "g"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	// Until the daemon has tried to publish the run's escape (and lost it).
	escape := func(e *schema.Event) bool {
		return e.RunID == runID && e.FileOp != nil && e.FileOp.PathHash == h.hasher.Hash(h.out)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !h.sink.wasRefused(escape) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not try to publish the run's escape for 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.sink.setRefuse(false)
	gap := h.sink.waitFor(t, "the run's OBSERVATION_GAP", func(e *schema.Event) bool {
		return e.RunID == runID && e.Finding != nil && e.Finding.Type == schema.FindingObservationGap && e.Finding.Reason == GapEventsLost
	})
	if gap.ScopeHash != hash || gap.Finding.Severity != schema.SeverityHigh {
		t.Fatalf("gap finding: %+v", gap)
	}
	for _, e := range h.sink.snapshot() {
		if escape(&e) {
			t.Fatalf("the escape was published after all, so this test lost nothing: %+v", e)
		}
	}
}

// TestKernelEventsFollowAClockStep: the probes stamp records with
// CLOCK_MONOTONIC and the daemon dates them by the offset to the wall
// clock. It took that offset once, at start-up: after the wall clock was
// stepped (NTP's first sync after a boot, an operator, a VM resumed or
// restored), every kernel event was dated by the old clock while the
// launcher's records of the same moments followed the new one, so the
// cross-check put a call's file operations outside the call (an hour's
// step: the run's evidence an hour before its calls). The offset is now
// taken again every second; here the daemon's wall clock is stepped an hour
// ahead after it started, and a read made after the step is dated by it.
func TestKernelEventsFollowAClockStep(t *testing.T) {
	var step atomic.Int64
	h := startDaemonWith(t, &memSink{}, func(c *Config) {
		c.WallClock = func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
	})
	inside := filepath.Join(h.ws, "inside.txt")
	near := func(e *schema.Event, want time.Time) bool {
		d := time.Unix(0, e.TimeNS).Sub(want)
		return d > -10*time.Minute && d < 10*time.Minute
	}
	_, runID := h.run("inside", schema.ModeEnforce, true)
	if e := h.sink.waitFor(t, "the read before the step", h.fileOp(runID, inside, classify.Allowed)); !near(e, time.Now()) {
		t.Fatalf("the read before the step is dated %s", time.Unix(0, e.TimeNS).UTC())
	}
	step.Store(int64(time.Hour))
	// The new offset is taken at the daemon's next tick: read again until a
	// read is dated by the stepped clock (each read is a new run).
	deadline := time.Now().Add(time.Minute)
	for {
		_, runID := h.run("inside", schema.ModeEnforce, true)
		e := h.sink.waitFor(t, "a read after the step", h.fileOp(runID, inside, classify.Allowed))
		if near(e, time.Now().Add(time.Hour)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the wall clock was stepped an hour ahead, a read is still dated %s (now by the stepped clock: %s)",
				time.Unix(0, e.TimeNS).UTC(), time.Now().Add(time.Hour).UTC())
		}
	}
}
