package launcher_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Tests of what docs/launcher.md says is left when a run ends: nothing of
// the fence helper when the runtime profile cannot be resolved, no cgroup
// directory of the run, and no server that closed its stdout but lives on.

// runCgroupDirs is every directory of the run's cgroup ("mcpwarden-RUNID",
// docs/launcher.md) that pid is in, one per hierarchy, as paths under
// this host's cgroup mounts. It fails the test when pid is in none: the
// run has a cgroup wherever these tests run as root.
func runCgroupDirs(t *testing.T, pid int, runID string) []string {
	t.Helper()
	mounts := cgroupMounts(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	name := "mcpwarden-" + runID
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "/"+name) {
			continue
		}
		// The run's own directory, not a leaf the init may make below it.
		rel := parts[2][:strings.Index(parts[2], "/"+name)+len(name)+1]
		key := parts[1] // "" on cgroup2, the controllers on v1
		if key != "" {
			key = strings.Split(key, ",")[0]
		}
		mount, ok := mounts[key]
		if !ok {
			t.Fatalf("no mount of the cgroup hierarchy %q (line %q)", parts[1], line)
		}
		dirs = append(dirs, filepath.Join(mount, rel))
	}
	if len(dirs) == 0 {
		t.Fatalf("process %d is in no cgroup of run %s: %s", pid, runID, b)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the run's cgroup directory while it runs: %v", err)
		}
	}
	return dirs
}

// cgroupMounts maps "" to the cgroup2 mount and each v1 controller (or
// name=...) to its hierarchy's mount.
func cgroupMounts(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			out[""] = fields[4]
		case "cgroup":
			for _, o := range strings.Split(tail[2], ",") {
				if o != "rw" && o != "ro" {
					out[o] = fields[4]
				}
			}
		}
	}
	return out
}

// assertCgroupGone fails naming every directory of dirs that still exists.
func assertCgroupGone(t *testing.T, what string, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the run's cgroup directory %s is still there (%v)", what, d, err)
		}
	}
}

// waitCgroupGone waits (generously: the watcher removes it after the
// launcher is gone, not before its exit) until none of dirs exists.
func waitCgroupGone(t *testing.T, what string, dirs []string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := 0
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			assertCgroupGone(t, what, dirs)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCgroupEmpty waits (generously) until no process is a member of any
// of dirs.
func waitCgroupEmpty(t *testing.T, dirs []string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, d := range dirs {
		for {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if errors.Is(err, os.ErrNotExist) || err == nil && len(strings.TrimSpace(string(b))) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run's cgroup %s still has members %q (%v)", d, b, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// serverPID is the host pid of the naive server of s.
func serverPID(t *testing.T, s *fencetest.Session) int {
	t.Helper()
	return s.HostPID(pidOf(t, fencetest.Response{OK: true, Data: strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]}))
}

// startRecordRunID is the run id of the start record in the audit log.
func startRecordRunID(t *testing.T, log string) string {
	t.Helper()
	for _, r := range readRecords(t, log) {
		if r.Launch != nil && r.Launch.Phase == "start" && r.RunID != "" {
			return r.RunID
		}
	}
	t.Fatalf("no start record in %s", log)
	return ""
}

// TestLifeRunCgroupRemoved: the run's cgroup directory (every hierarchy's)
// is gone when `mcpwarden run` has exited: after the client closed stdin,
// after the server was SIGKILLed, and after the scope expired; and shortly
// after the launcher itself was SIGKILLed (its watcher removes it).
func TestLifeRunCgroupRemoved(t *testing.T) {
	fencetest.RequireFence(t)
	testenv.RequireRoot(t)
	b := fencetest.Build(t)
	for _, tc := range []struct {
		name    string
		expires time.Duration
		end     func(t *testing.T, s *fencetest.Session, server int) int // the launcher's exit code, or -1 when it was killed
		want    int
	}{
		{name: "stdin EOF", end: func(t *testing.T, s *fencetest.Session, _ int) int { return s.Close() }, want: 0},
		{name: "server SIGKILLed", end: func(t *testing.T, s *fencetest.Session, server int) int {
			if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return s.Wait()
		}, want: 128 + int(syscall.SIGKILL)},
		{name: "scope expired", expires: 4 * time.Second, end: func(t *testing.T, s *fencetest.Session, _ int) int { return s.Wait() }, want: 77},
		{name: "launcher SIGKILLed", end: func(t *testing.T, s *fencetest.Session, _ int) int {
			if err := s.Cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			s.Wait()
			return -1
		}, want: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fencetest.ForEachLayering(t, func(t *testing.T, noNamespaces bool) {
				w := newWorkspace(t)
				log := filepath.Join(t.TempDir(), "audit.jsonl")
				fields := map[string]any{"allowed_paths": []string{"allowed"}}
				if tc.expires > 0 {
					fields["expires_at"] = time.Now().Add(tc.expires).UTC().Format(time.RFC3339)
				}
				scope := fencetest.WriteScope(t, t.TempDir(), fields)
				s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, NoNamespaces: noNamespaces})
				server := serverPID(t, s)
				dirs := runCgroupDirs(t, server, startRecordRunID(t, log))
				code := tc.end(t, s, server)
				if code != tc.want {
					t.Fatalf("exit %d, want %d: %s", code, tc.want, s.Stderr())
				}
				switch {
				case code == -1 && !noNamespaces:
					// No watcher: the kernel kills the pid namespace with
					// its init. The empty directories stay until a later
					// run's sweep (docs/launcher.md, "What remains").
					waitCgroupEmpty(t, dirs)
				case code == -1:
					waitCgroupGone(t, "after the launcher was SIGKILLed", dirs)
				default:
					assertCgroupGone(t, "once mcpwarden run exited", dirs)
					if strings.Contains(s.Stderr(), "the run's cgroup:") {
						t.Errorf("the cgroup's removal was reported as failed: %s", s.Stderr())
					}
				}
				waitGone(t, tc.name, server)
			})
		})
	}
}

// TestLifeServerClosesStdoutAndLivesOn: a server that closes its stdout
// and goes on running (it ignores stdin's EOF and SIGTERM) while the
// client keeps its end open: the proxy ends its session at the server's
// stdout EOF, the launcher stops the server (SIGTERM, then SIGKILL), and
// the run ends by itself with nothing of it left. Were the session to wait
// for the server instead, the run would never end.
func TestLifeServerClosesStdoutAndLivesOn(t *testing.T) {
	fencetest.RequireFence(t)
	testenv.RequireRoot(t)
	b := fencetest.Build(t)
	fencetest.ForEachLayering(t, func(t *testing.T, noNamespaces bool) {
		w := newWorkspace(t)
		log := filepath.Join(t.TempDir(), "audit.jsonl")
		scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
		pidFile, goFile := filepath.Join(w.allowed, "pids"), filepath.Join(w.allowed, "go")
		// The server names itself and a child, waits for the test to have
		// looked them up, then closes its stdout and runs on.
		script := `trap '' TERM; sleep 1000 >/dev/null & echo "$$ $!" > "$1"; ` +
			`while [ ! -e "$2" ]; do sleep 1; done; exec >&-; while :; do sleep 1; done`
		s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, NoNamespaces: noNamespaces,
			ExtraArgs: []string{"--proxy=true", "--allow-runtime", "/usr/bin/sleep"}, Command: []string{"/bin/sh", "-c", script, "sh", pidFile, goFile}})
		var data []byte
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			var err error
			// One write of "PID PID\n": whole once its newline is there.
			if data, err = os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(data), "\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server did not write its pids: %v (%s)", err, s.Stderr())
			}
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("pids %q", data)
			}
			pids = append(pids, s.HostPID(p))
		}
		if len(pids) != 2 {
			t.Fatalf("pids %q", data)
		}
		dirs := runCgroupDirs(t, pids[0], startRecordRunID(t, log))
		if err := os.WriteFile(goFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// The launcher must end by itself while the client's stdin stays open.
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			_ = s.Cmd.Process.Kill()
			<-done
			t.Fatalf("the run did not end after the server closed its stdout: %s", s.Stderr())
		}
		if code := s.Cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want %d (the server ignored SIGTERM and was SIGKILLed): %s", code, 128+int(syscall.SIGKILL), s.Stderr())
		}
		waitGone(t, "after the server closed its stdout", pids...)
		assertCgroupGone(t, "once mcpwarden run exited", dirs)
		assertNoProcessIn(t, w.base)
		recs := readRecords(t, log)
		if last := recs[len(recs)-1]; last.Launch == nil || last.Launch.Phase != "exit" || last.Launch.ExitReason != "signaled" {
			t.Fatalf("exit record %s", last.raw)
		}
	})
}

// assertNoProcessIn fails naming any process whose working directory is
// dir (every process of these runs starts there; a unique t.TempDir()).
func assertNoProcessIn(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && cwd == dir {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d (%s) of the run is left", pid, strings.TrimSpace(string(comm)))
		}
	}
}

// helperChildren is every fence helper (argv[0] mcpwarden-fence, not its
// watcher) that is a child of this test process.
func helperChildren(t *testing.T) []int {
	t.Helper()
	var out []int
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, c := range strings.Fields(string(b)) {
			argv, _ := os.ReadFile("/proc/" + c + "/cmdline")
			if a0, _, _ := strings.Cut(string(argv), "\x00"); a0 == sandbox.HelperName {
				pid, _ := strconv.Atoi(c)
				out = append(out, pid)
			}
		}
	}
	return out
}

// TestRuntimeProfileFailureKillsTheHelper: a server command that cannot
// be resolved (its interpreter is missing) ends the run as start_failed,
// exit status -1, and the fence helper, cloned meanwhile, is gone by the
// time Run returns: with and without namespaces and the cgroup (which
// would otherwise kill it too). The helper is this process's child, so one
// left running would still be listed here. Through `mcpwarden run` the
// same run exits 70 and leaves no process behind.
func TestRuntimeProfileFailureKillsTheHelper(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	server := filepath.Join(w.allowed, "server.sh")
	if err := os.WriteFile(server, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	for _, noCgroup := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroup=%v", !noCgroup), func(t *testing.T) {
			fencetest.ForEachLayering(t, func(t *testing.T, noNamespaces bool) {
				if left := helperChildren(t); len(left) > 0 {
					t.Fatalf("fence helpers %v before the run", left)
				}
				cfg, sink, _ := inProcessConfig(t, scope, []string{server})
				cfg.NoCgroup, cfg.NoNamespaces, cfg.Dir = noCgroup, noNamespaces, w.base
				l, err := launcher.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				err = l.Run(context.Background())
				var se *launcher.StartError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), "interpreter") {
					t.Fatalf("Run: %v, want a start error naming the interpreter", err)
				}
				if left := helperChildren(t); len(left) > 0 {
					for _, p := range left {
						_ = syscall.Kill(p, syscall.SIGKILL)
					}
					t.Fatalf("fence helper(s) %v still running after Run returned", left)
				}
				sink.mu.Lock()
				defer sink.mu.Unlock()
				if n := len(sink.events); n == 0 || sink.events[n-1].Launch == nil ||
					sink.events[n-1].Launch.ExitReason != schema.ExitStartFailed || sink.events[n-1].Launch.ExitStatus != -1 {
					t.Fatalf("records %+v, want one exit record start_failed -1", sink.events)
				}
			})
		})
	}
	t.Run("mcpwarden run", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "audit.jsonl")
		scopeFile := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
		s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scopeFile, Base: w.base, AuditLog: log, Command: []string{server}})
		if code := s.Wait(); code != 70 {
			t.Fatalf("exit %d, want 70: %s", code, s.Stderr())
		}
		assertNoProcessIn(t, w.base)
		recs := readRecords(t, log)
		if last := recs[len(recs)-1]; last.Launch == nil || last.Launch.ExitReason != "start_failed" || last.Launch.ExitStatus != -1 {
			t.Fatalf("exit record %s", last.raw)
		}
	})
}
