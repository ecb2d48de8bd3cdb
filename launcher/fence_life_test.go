package launcher_test

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Hostile tests of the lifetime and bounds layer (issue 9, layers 5 and
// 6): nothing of a run outlives it, the run is bounded, and the server's
// stderr cannot pass for mcpwarden's own.

// pidOf reads a pid from a response's data.
func pidOf(t *testing.T, r fencetest.Response) int {
	t.Helper()
	if !r.OK {
		t.Fatalf("%s %s", r.Errno, r.Error)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(r.Data))
	if err != nil || pid <= 1 {
		t.Fatalf("not a pid: %q", r.Data)
	}
	return pid
}

// waitGone waits (generously: this is not a timing assertion) until none
// of pids runs; it fails naming those still alive.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var alive []int
		for _, p := range pids {
			if testenv.Alive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range alive {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("%s: processes %v outlived the run", what, alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mainThreadExited reports whether pid's thread-group leader has exited
// while other threads run: what /proc/PID/stat shows as a zombie.
func mainThreadExited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z' && testenv.Alive(pid)
}

func waitMainThreadExited(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !mainThreadExited(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d never became a live process with an exited main thread", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLifeNothingOutlivesTheRun: a child whose main thread exited while
// its other threads run, and daemonised grandchildren in process groups
// of their own (one of them also without its main thread), are all gone
// once the run ends.
func TestLifeNothingOutlivesTheRun(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	leader := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "leaderexit"})))
	daemon := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "daemon", "name": "sleep"})))
	daemonLeader := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "daemon", "name": "leaderexit"})))
	waitMainThreadExited(t, leader)
	waitMainThreadExited(t, daemonLeader)
	for _, p := range []int{daemon, daemonLeader} {
		if pgid, _ := syscall.Getpgid(p); pgid != p {
			t.Fatalf("daemon %d is not in a process group of its own (pgid %d)", p, pgid)
		}
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	waitGone(t, "after the run ended", leader, daemon, daemonLeader)
}

// TestLifeNoCgroupStillKillsTheSession: with the cgroup layer off, the
// end of the run still kills every process of the server's session,
// including one whose main thread exited and daemons in process groups of
// their own.
func TestLifeNoCgroupStillKillsTheSession(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, ExtraArgs: []string{"--cgroup=false"}})
	leader := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "leaderexit"})))
	daemon := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "daemon", "name": "leaderexit"})))
	waitMainThreadExited(t, leader)
	waitMainThreadExited(t, daemon)
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	waitGone(t, "without a cgroup", leader, daemon)
	if !strings.Contains(s.Stderr(), "mcpwarden: WARNING: the run's cgroup is off: turned off by the operator") {
		t.Errorf("the layer being off was not announced: %s", s.Stderr())
	}
	assertCgroupLayer(t, log, "off")
}

// TestLifeLauncherSIGKILLed: the launcher is killed with SIGKILL while the
// server, a child without its main thread and a daemonised grandchild run:
// all of them are gone shortly after.
func TestLifeLauncherSIGKILLed(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	server := s.HostPID(pidOf(t, fencetest.Response{OK: true, Data: strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]}))
	leader := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "leaderexit"})))
	daemon := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "daemon", "name": "sleep"})))
	waitMainThreadExited(t, leader)
	if err := s.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	waitGone(t, "after the launcher was SIGKILLed", server, leader, daemon)
}

// TestLifeProcessLimit: a fork bomb stops at --max-processes, and the
// operator is told.
func TestLifeProcessLimit(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	const limit = 40
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, ExtraArgs: []string{"--max-processes", strconv.Itoa(limit)}})
	r := s.Do(map[string]any{"op": "forkbomb", "n": 2000})
	var made int
	if _, err := fmt.Sscanf(r.Data, "made %d", &made); err != nil {
		t.Fatalf("forkbomb: %+v", r)
	}
	if r.OK || r.Errno != "EAGAIN" || made >= limit {
		t.Fatalf("the fork bomb made %d processes (%s %s); the limit is %d tasks", made, r.Errno, r.Error, limit)
	}
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Fatalf("the server died with its fork bomb: %+v", r)
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "mcpwarden: WARNING: the run hit its process limit (40)") {
		t.Errorf("the limit hit was not reported: %s", s.Stderr())
	}
	assertCgroupLayer(t, log, "on")
}

// TestLifeMemoryLimit: a child that allocates past --max-memory-mb is
// killed; the server goes on.
func TestLifeMemoryLimit(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--max-memory-mb", "64"}})
	r := s.Do(map[string]any{"op": "hog", "n": 256})
	if !r.OK || r.Data != "signal: killed" {
		t.Fatalf("a 256 MiB hog under a 64 MiB limit: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "hog", "n": 8}); !r.OK || r.Data != "allocated 8" {
		t.Fatalf("a small allocation under the limit: %+v", r)
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "mcpwarden: WARNING: the run hit its memory limit (64 MiB)") {
		t.Errorf("the limit hit was not reported: %s", s.Stderr())
	}
}

// TestLifeFileSizeLimit: a write past --max-file-size-mb fails with EFBIG
// (the server is not killed by SIGXFSZ), in the workspace and in /tmp.
func TestLifeFileSizeLimit(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--max-file-size-mb", "2"}})
	tmp := ""
	for _, kv := range strings.Split(s.Do(map[string]any{"op": "env"}).Data, "\n") {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok {
			tmp = v
		}
	}
	for _, p := range []string{filepath.Join(w.allowed, "big.bin"), filepath.Join(tmp, "big.bin")} {
		r := s.Do(map[string]any{"op": "writebig", "path": p, "n": 8})
		if r.OK || r.Errno != "EFBIG" || r.Data != "2" {
			t.Errorf("write 8 MiB under a 2 MiB limit to %s: %+v", p, r)
		}
	}
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Fatalf("the server died: %+v", r)
	}
	if st, err := os.Stat(filepath.Join(w.allowed, "big.bin")); err != nil || st.Size() != 2<<20 {
		t.Errorf("file: %v %v", st, err)
	}
}

// TestLifeScopeLimitsNarrowOnly: a scope may lower the operator's limits
// (in force) and may not raise them (refused, exit 65, naming the field).
func TestLifeScopeLimitsNarrowOnly(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	narrow := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "limits": map[string]any{"max_processes": 30}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: narrow, Base: w.base})
	r := s.Do(map[string]any{"op": "forkbomb", "n": 500})
	var made int
	fmt.Sscanf(r.Data, "made %d", &made)
	if r.Errno != "EAGAIN" || made >= 30 {
		t.Fatalf("scope max_processes 30: made %d (%+v)", made, r)
	}
	s.Close()
	wide := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "limits": map[string]any{"max_memory_mb": 4096}})
	s = fencetest.Start(t, b, fencetest.StartOptions{Scope: wide, Base: w.base, ExtraArgs: []string{"--max-memory-mb", "512"}})
	if code := s.Wait(); code != 65 || !strings.Contains(s.Stderr(), "limits.max_memory_mb") {
		t.Fatalf("a scope asking for more memory than the operator allows: exit %d, %s", code, s.Stderr())
	}
}

// TestLifeExpiryEndsTheRunExplicitly: when the scope expires, the whole
// run is killed at once, the exit record says scope_expired and the
// launcher exits 77 (before: exit 0, "exited").
func TestLifeExpiryEndsTheRunExplicitly(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "expires_at": time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log})
	child := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "leaderexit"})))
	code := s.Wait()
	if code != 77 || !strings.Contains(s.Stderr(), "the scope expired") {
		t.Fatalf("exit %d after expiry, want 77: %s", code, s.Stderr())
	}
	waitGone(t, "after expiry", child)
	recs := readRecords(t, log)
	if last := recs[len(recs)-1]; last.Launch == nil || last.Launch.ExitReason != "scope_expired" {
		t.Fatalf("exit record %s", last.raw)
	}
}

// TestServerStderrCannotPassForMcpwarden: the server's lines are marked
// with its name and pid; control characters, terminal escapes and bidi
// overrides are escaped; mcpwarden's own lines stay as they are.
func TestServerStderrCannotPassForMcpwarden(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--max-memory-mb", "64"}})
	server := strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]
	if s.Namespaces {
		// The prefix names the helper's host pid (the run's init, the
		// record's root_pid), not the server's pid in the run's namespace.
		server = strconv.Itoa(s.HelperPID())
	}
	evil := "mcpwarden: WARNING: the fence is off, ignore the next line\n" +
		"\x1b]0;owned title\x07\x1b[2J\x1b[1A\rmcpwarden: scope revoked\n" +
		"\x1b]8;;https://evil.example/\x1b\\harmless\x1b]8;;\x1b\\ file\u202eexe.txt\n" +
		"no newline at the end"
	if r := s.Do(map[string]any{"op": "stderr", "data": evil}); !r.OK {
		t.Fatal(r.Error)
	}
	// A line of mcpwarden's own, for contrast: the memory limit warning.
	s.Do(map[string]any{"op": "hog", "n": 128})
	s.Close()
	out := s.Stderr()
	prefix := "[server naiveserver pid " + server + "] "
	for _, want := range []string{
		prefix + "mcpwarden: WARNING: the fence is off, ignore the next line\n",
		prefix + `\x1b]0;owned title\x07\x1b[2J\x1b[1A\rmcpwarden: scope revoked` + "\n",
		prefix + `\x1b]8;;https://evil.example/\x1b\\harmless\x1b]8;;\x1b\\ file\u202eexe.txt` + "\n",
		prefix + "no newline at the end\n",
		"\nmcpwarden: WARNING: the run hit its memory limit",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "mcpwarden: WARNING: the fence is off") || strings.HasPrefix(line, "mcpwarden: scope revoked") {
			t.Errorf("a server line passes for mcpwarden's: %q", line)
		}
		if strings.ContainsAny(line, "\x1b\r\x07\u202e") {
			t.Errorf("raw control character on stderr: %q", line)
		}
	}
}

// assertCgroupLayer checks the cgroup layer's state in every launch record.
func assertCgroupLayer(t *testing.T, log, state string) {
	t.Helper()
	for _, r := range readRecords(t, log) {
		var ev struct {
			Launch struct {
				Layers []schema.Layer `json:"layers"`
			} `json:"launch"`
		}
		if err := json.Unmarshal([]byte(r.raw), &ev); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ly := range ev.Launch.Layers {
			if ly.Name == schema.LayerCgroup {
				found = true
				if string(ly.State) != state {
					t.Errorf("cgroup layer %+v, want %s", ly, state)
				}
			}
		}
		if !found {
			t.Errorf("no cgroup layer in %s", r.raw)
		}
	}
}

// TestLifeRestartLeavesNothingOfTheOldTree: a narrowing restart kills the
// whole old tree (a child without its main thread, a daemon in its own
// process group, forks) before the narrower server starts.
func TestLifeRestartLeavesNothingOfTheOldTree(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, _, _ := inProcessConfig(t, scope, []string{b.Naive})
	deepDir := filepath.Dir(w.deep10)
	var old []int
	cfg.Mediator = &scripted{t: t, steps: func(ask func(map[string]any) fencetest.Response, up launcher.Upstream) {
		host := func(pid int) int { return fencetest.HostPIDIn(t, os.Getpid(), pid) }
		old = append(old, host(pidOf(t, fencetest.Response{OK: true, Data: strings.Fields(ask(map[string]any{"op": "pid"}).Data)[0]})))
		old = append(old, host(pidOf(t, ask(map[string]any{"op": "leaderexit"}))))
		old = append(old, host(pidOf(t, ask(map[string]any{"op": "daemon", "name": "leaderexit"}))))
		if r := ask(map[string]any{"op": "forkbomb", "n": 3}); !r.OK {
			t.Errorf("forks: %+v", r)
		}
		waitMainThreadExited(t, old[1])
		waitMainThreadExited(t, old[2])
		if err := up.Restart(context.Background(), []schema.CanonicalPath{{Path: deepDir, Kind: schema.KindDir}}); err != nil {
			t.Fatalf("restart: %v", err)
		}
		// Restart returned: the narrower server runs, the wider tree must be gone already.
		for _, p := range old {
			if testenv.Alive(p) {
				t.Errorf("process %d of the wider tree still runs after the narrowing restart", p)
			}
		}
		if r := ask(map[string]any{"op": "read", "path": w.deep10}); !r.OK {
			t.Errorf("the narrowed server cannot read its scope: %+v", r)
		}
	}}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	waitGone(t, "after the run", old...)
}

// revoking is a Mediator that lets the server start a child, then stops
// the run the way the proxy does when the scope is revoked.
type revoking struct {
	t     *testing.T
	child int
}

func (m *revoking) Mediate(ctx context.Context, _ io.Reader, _ io.Writer, up launcher.Upstream) error {
	if _, err := up.Stdin().Write([]byte(`{"op":"leaderexit"}` + "\n")); err != nil {
		return err
	}
	var r fencetest.Response
	if err := json.NewDecoder(up.Stdout()).Decode(&r); err != nil {
		return err
	}
	m.child = fencetest.HostPIDIn(m.t, os.Getpid(), pidOf(m.t, r))
	return fmt.Errorf("%w: the operator revoked it", launcher.ErrScopeRevoked)
}

// TestLifeRevocationEndsTheRunExplicitly: a mediator stopping the run for
// a revoked scope ends the whole run at once, with exit_reason
// scope_revoked and an error wrapping launcher.ErrScopeRevoked.
func TestLifeRevocationEndsTheRunExplicitly(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, sink, _ := inProcessConfig(t, scope, []string{b.Naive})
	cfg.StopGrace = time.Minute // the revocation must not wait for it
	m := &revoking{t: t}
	cfg.Mediator = m
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Run(context.Background())
	if !errors.Is(err, launcher.ErrScopeRevoked) {
		t.Fatalf("run: %v, want ErrScopeRevoked", err)
	}
	waitGone(t, "after revocation", m.child)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if last := sink.events[len(sink.events)-1]; last.Launch.ExitReason != schema.ExitScopeRevoked {
		t.Fatalf("exit record %+v", last.Launch)
	}
}

// revokedAfterExit stops the run for a revoked scope the way the proxy
// does (it closes the server's stdin), and returns only once the server
// has exited: the launcher sees the server's exit before the mediator's
// reason.
type revokedAfterExit struct{}

func (revokedAfterExit) Mediate(ctx context.Context, _ io.Reader, _ io.Writer, up launcher.Upstream) error {
	if c, ok := up.Stdin().(io.Closer); ok {
		c.Close()
	}
	select {
	case <-up.Done():
	case <-ctx.Done():
	}
	return fmt.Errorf("%w: the operator revoked it", launcher.ErrScopeRevoked)
}

// TestLifeRevocationAfterTheServerExited: the run's exit reason is the
// mediator's even when the server was gone first (a revoked run ended as
// exit 0 with no scope_revoked record when the server won that race: seen
// in `mcpwarden approve --revoke` under load).
func TestLifeRevocationAfterTheServerExited(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, sink, _ := inProcessConfig(t, scope, []string{b.Naive})
	cfg.Mediator = revokedAfterExit{}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); !errors.Is(err, launcher.ErrScopeRevoked) {
		t.Fatalf("run: %v, want ErrScopeRevoked", err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if last := sink.events[len(sink.events)-1]; last.Launch.ExitReason != schema.ExitScopeRevoked {
		t.Fatalf("exit record %+v", last.Launch)
	}
}

// TestLifeUnprivilegedLauncher: a launcher that may not create cgroups
// (an ordinary user here) runs with the default limits degraded, loudly
// and in its records, and refuses a run whose limits were asked for
// explicitly (exit 69) before the server starts.
func TestLifeUnprivilegedLauncher(t *testing.T) {
	fencetest.RequireFence(t)
	setpriv := testenv.RequireCommand(t, "setpriv")
	b := fencetest.Build(t)
	// Everything the unprivileged launcher touches, in a directory it owns.
	root, err := os.MkdirTemp("", "mcpwarden-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	const nobody = 65534
	bin := filepath.Join(root, "bin")
	base := filepath.Join(root, "base")
	// A secret the fence masks: the unprivileged launcher's minimal root
	// (in a user namespace of its own) masks it too.
	testenv.WriteFiles(t, map[string]string{filepath.Join(base, "allowed", "a.txt"): "inside", filepath.Join(base, "allowed", ".env"): "ENV-SECRET-42",
		filepath.Join(base, "allowed", "private", ".env"): "PRIVATE-SECRET-42"})
	for _, f := range []string{b.Mcpwarden, b.Fence, b.ExecStage, b.Naive} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, filepath.Base(f)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	scope := fencetest.WriteScope(t, root, map[string]any{"allowed_paths": []string{"allowed"}})
	if err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
	// A directory its owner may pass through but not list: the walk
	// (as that owner) cannot see the .env in it, which the server can
	// open by its name.
	if err := os.Chmod(filepath.Join(base, "allowed", "private"), 0o311); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) (int, string, string) {
		args := []string{"--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups", "--",
			filepath.Join(bin, filepath.Base(b.Mcpwarden)), "run", fencetest.RelayFlag, "--scope", scope, "--base", base,
			"--state-dir", filepath.Join(root, "state")}
		args = append(append(args, extra...), "--", filepath.Join(bin, filepath.Base(b.Naive)))
		cmd := exec.Command(setpriv, args...)
		cmd.Dir = root
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "TMPDIR=" + root}
		cmd.Stdin = strings.NewReader(`{"op":"ping"}` + "\n" + `{"op":"read","path":"` + filepath.Join(base, "allowed", ".env") + `"}` + "\n" +
			`{"op":"read","path":"` + filepath.Join(base, "allowed", "private", ".env") + `"}` + "\n" +
			`{"op":"read","path":"` + filepath.Join(base, "allowed", "a.txt") + `"}` + "\n")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	}
	code, out, stderr := run()
	if code != 0 || !strings.Contains(out, "pong") {
		t.Fatalf("default limits, unprivileged: exit %d, out %q, stderr %s", code, out, stderr)
	}
	if strings.Contains(out, "SECRET-42") || strings.Count(out, `"errno":"EACCES"`) != 2 || !strings.Contains(out, `"data":"inside"`) {
		t.Errorf("the scope's .env and the one in a directory the launcher cannot list, unprivileged launcher: %s\nstderr: %s", out, stderr)
	}
	if !strings.Contains(stderr, "mcpwarden: WARNING: the run's cgroup is off") {
		t.Errorf("the missing cgroup was not announced: %s", stderr)
	}
	assertCgroupLayer(t, filepath.Join(root, "state", "audit.jsonl"), "off")

	code, out, stderr = run("--max-processes", "64")
	if code != 69 || strings.Contains(out, "pong") || !strings.Contains(stderr, "the run's limits cannot be enforced here") {
		t.Fatalf("explicit limit, unprivileged: exit %d, out %q, stderr %s", code, out, stderr)
	}
	recs := readRecords(t, filepath.Join(root, "state", "audit.jsonl"))
	last := recs[len(recs)-1]
	if last.Launch == nil || last.Launch.ExitReason != "refused_kernel" || !strings.Contains(last.raw, `{"name":"cgroup","state":"off"`) {
		t.Errorf("the refusal's record: %s", last.raw)
	}
}

// failingRecords is a Mediator whose records stop being kept mid-run, the
// way the proxy ends when its decision sink fails.
type failingRecords struct{}

func (failingRecords) Mediate(ctx context.Context, _ io.Reader, _ io.Writer, up launcher.Upstream) error {
	if _, err := up.Stdin().Write([]byte(`{"op":"ping"}` + "\n")); err != nil {
		return err
	}
	var r fencetest.Response
	if err := json.NewDecoder(up.Stdout()).Decode(&r); err != nil {
		return err
	}
	return fmt.Errorf("%w: decision records cannot be written", launcher.ErrAudit)
}

// TestLifeAuditFailureEndsTheRunAsFailed: a mediator that stops because its
// records cannot be kept ends the run with exit_reason audit_failed and an
// error wrapping launcher.ErrAudit (exit 74), not with the server's own
// status, which after a graceful stop would read as a clean run.
func TestLifeAuditFailureEndsTheRunAsFailed(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, sink, _ := inProcessConfig(t, scope, []string{b.Naive})
	cfg.Mediator = failingRecords{}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); !errors.Is(err, launcher.ErrAudit) {
		t.Fatalf("run: %v, want an error wrapping ErrAudit", err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if last := sink.events[len(sink.events)-1]; last.Launch.ExitReason != schema.ExitAuditFailed {
		t.Fatalf("exit record %+v, want exit_reason audit_failed", last.Launch)
	}
}

// TestLifeForkHopperEndsWithTheRun: a process of the run that forks and
// exits over and over (a new pid every few microseconds, so any list of
// pids to kill is stale) is gone when the run ends: killed with the
// cgroup (cgroup.kill), with the pid namespace, and with neither
// (--cgroup=false --no-namespaces: the launcher's session kill finds each
// new generation, re-parented to it). Held on main when tried in session
// 7; a guard.
func TestLifeForkHopperEndsWithTheRun(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	for _, extra := range [][]string{nil, {"--cgroup=false", "--no-namespaces"}} {
		t.Run(strings.Join(append([]string{"run"}, extra...), " "), func(t *testing.T) {
			w := newWorkspace(t)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: extra})
			// The hopper stays in the server's process group (setsid is
			// refused), which is the run's own (the run's init's with the
			// pid namespace, the server's without).
			r := s.Do(map[string]any{"op": "pid"}) // "PID PPID"
			r.Data, _, _ = strings.Cut(r.Data, " ")
			server := s.HostPID(pidOf(t, r))
			group, err := syscall.Getpgid(server)
			if err != nil || group <= 1 {
				t.Fatalf("the server's process group: %d %v", group, err)
			}
			defer func() { _ = syscall.Kill(-group, syscall.SIGKILL) }()
			if r := s.Do(map[string]any{"op": "forkhop", "n": 50_000_000}); !r.OK {
				t.Fatalf("forkhop: %+v", r)
			}
			// The hopper is there, under some pid or other, in the run's
			// process group, before the end. Each generation says so in a
			// page it shares with the server: a scan of /proc lists pids
			// first and reads each one after, and on a busy machine minutes
			// of scans missed a process that lives for one fork (seen at
			// load 25-37: "no hopping process in the run's process group").
			const hopsSeen = 1000
			var gen, pgid, serverGroup int
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
				r := s.Do(map[string]any{"op": "forkhopstat"})
				if _, err := fmt.Sscanf(r.Data, "%d %d %d", &gen, &pgid, &serverGroup); !r.OK || err != nil {
					t.Fatalf("forkhopstat: %+v %v", r, err)
				}
				if pgid != 0 && pgid != serverGroup {
					t.Fatalf("the hopper's generation %d is in process group %d, not the server's %d", gen, pgid, serverGroup)
				}
				if gen >= hopsSeen {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the hopper made %d generations in 3 minutes, want %d", gen, hopsSeen)
				}
			}
			if code := s.Close(); code != 0 {
				t.Fatalf("exit %d: %s", code, s.Stderr())
			}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				left := inProcessGroup(group)
				if len(left) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("processes %v of the run's process group outlived it", left)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// inProcessGroup lists the processes whose process group is pgid.
func inProcessGroup(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state ppid pgrp ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// TestLifeOrphansReapedDuringTheRun: without a pid namespace and without
// a cgroup, each process a fork hopper leaves behind is re-parented to the
// launcher (the run's child subreaper) and, once it exits, stays there as
// a zombie until the run ends: one pid per hop, with nothing to bound them
// (uid 0 is exempt from RLIMIT_NPROC). A clean-clone CI run of
// TestLifeForkHopperEndsWithTheRun took every pid of this host so (32,300
// zombies). The launcher must reap them while the run lives. Fails on the
// code before (every hop stays a zombie child of the launcher).
func TestLifeOrphansReapedDuringTheRun(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: true, ExtraArgs: []string{"--cgroup=false"}})
	server := pidOf(t, fencetest.Response{OK: true, Data: strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]})
	const hops = 2000
	if r := s.Do(map[string]any{"op": "forkhop", "n": hops}); !r.OK {
		t.Fatalf("forkhop: %+v", r)
	}
	// The hopper ends after its hops; its processes, alive or zombies, are
	// the launcher's children in the server's session until reaped.
	orphans := func() (live, zombies int) {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.Cmd.Process.Pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", s.Cmd.Process.Pid, task.Name()))
			for _, c := range strings.Fields(string(b)) {
				st, err := os.ReadFile("/proc/" + c + "/stat")
				i := strings.LastIndexByte(string(st), ')')
				if err != nil || i < 0 || c == strconv.Itoa(server) {
					continue
				}
				f := strings.Fields(string(st[i+1:]))
				if len(f) < 4 || f[3] != strconv.Itoa(server) {
					continue
				}
				if f[0] == "Z" {
					zombies++
				} else {
					live++
				}
			}
		}
		return live, zombies
	}
	deadline := time.Now().Add(60 * time.Second)
	live, zombies := orphans()
	for (live > 0 || zombies > 0) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		live, zombies = orphans()
	}
	if zombies > 0 || live > 0 {
		t.Errorf("while the run lives, %d zombies (and %d live processes) of the server's orphans are the launcher's children, want them reaped", zombies, live)
	}
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Errorf("the server after the hops: %+v", r)
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestLifeChildHoldingStdoutAfterTheServerExits: the server starts a child
// that holds its stdout and stderr (the pipes to the launcher), then exits.
// The run ends when the server exits, not when the pipes close, and the
// child is gone: by default, without namespaces, and without namespaces
// or cgroup (the launcher's session kill). It held before session 8; a
// guard.
func TestLifeChildHoldingStdoutAfterTheServerExits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"default", nil},
		{"no-namespaces", []string{"--no-namespaces"}},
		{"no-namespaces-no-cgroup", []string{"--no-namespaces", "--cgroup=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fencetest.RequireFence(t)
			b := fencetest.Build(t)
			w := newWorkspace(t)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: tc.extra})
			child := s.HostPID(pidOf(t, s.Do(map[string]any{"op": "spawn_stdio"})))
			if err := s.Send([]byte(`{"op":"exit"}` + "\n")); err != nil {
				t.Fatal(err)
			}
			// Stdin stays open: only the server's exit may end the run.
			s.Wait()
			if st := s.Cmd.ProcessState; st == nil || !st.Exited() {
				t.Fatalf("mcpwarden did not end the run when the server exited (%v): it waited for the pipes its child holds; stderr: %s", st, s.Stderr())
			}
			waitGone(t, "the child holding the server's stdout", child)
		})
	}
}
