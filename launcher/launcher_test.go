package launcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

func canonicalScope(t *testing.T, base string, fields map[string]any) *schema.CanonicalScope {
	t.Helper()
	p := fencetest.WriteScope(t, t.TempDir(), fields)
	s, err := schema.ReadScopeFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := schema.Canonicalize(s, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type memSink struct {
	mu     sync.Mutex
	events []schema.Event
	err    error
}

func (m *memSink) Publish(_ context.Context, ev []schema.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	m.events = append(m.events, ev...)
	return nil
}

// scripted is a Mediator that drives the naive server through Upstream,
// restarting it narrowed half-way.
type scripted struct {
	t     *testing.T
	steps func(ask func(req map[string]any) fencetest.Response, up launcher.Upstream)
}

func (m *scripted) Mediate(ctx context.Context, _ io.Reader, _ io.Writer, up launcher.Upstream) error {
	ask := func(req map[string]any) fencetest.Response {
		b, _ := json.Marshal(req)
		if _, err := up.Stdin().Write(append(b, '\n')); err != nil {
			m.t.Errorf("write: %v", err)
			return fencetest.Response{}
		}
		line, err := bufio.NewReader(up.Stdout()).ReadString('\n')
		if err != nil {
			m.t.Errorf("read: %v", err)
			return fencetest.Response{}
		}
		var r fencetest.Response
		_ = json.Unmarshal([]byte(line), &r)
		return r
	}
	m.steps(ask, up)
	up.Stdin().(io.Closer).Close()
	<-up.Done()
	return nil
}

func inProcessConfig(t *testing.T, scope *schema.CanonicalScope, command []string) (launcher.Config, *memSink, *auditlog.Log) {
	t.Helper()
	alog, err := auditlog.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alog.Close() })
	sink := &memSink{}
	return launcher.Config{
		Scope:      scope,
		Command:    command,
		AuditLog:   alog,
		Sink:       sink,
		HelperPath: fencetest.Build(t).Fence,
		Stdin:      strings.NewReader(""),
		Stdout:     io.Discard,
		Stderr:     io.Discard,
		StopGrace:  time.Second,
	}, sink, alog
}

// TestBeforeExecAndRestart: BeforeExec sees the helper's pid before the
// fence; Restart narrows the scope of a running server (the contract the
// protocol proxy builds on).
func TestBeforeExecAndRestart(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	cfg, sink, _ := inProcessConfig(t, scope, []string{b.Naive})
	var pids []int
	cfg.BeforeExec = func(ctx context.Context, pid int) error {
		pids = append(pids, pid)
		return nil
	}
	deepDir := filepath.Dir(w.deep10)
	cfg.Mediator = &scripted{t: t, steps: func(ask func(map[string]any) fencetest.Response, up launcher.Upstream) {
		if r := ask(map[string]any{"op": "read", "path": w.deep1}); !r.OK {
			t.Errorf("before restart, read inside: %s", r.Error)
		}
		if err := up.Restart(context.Background(), []schema.CanonicalPath{{Path: deepDir, Kind: schema.KindDir}}); err != nil {
			t.Fatalf("restart: %v", err)
		}
		if r := ask(map[string]any{"op": "read", "path": w.deep1}); r.OK {
			t.Errorf("after narrowing, a.txt is still readable")
		}
		if r := ask(map[string]any{"op": "read", "path": w.deep10}); !r.OK {
			t.Errorf("after narrowing, the narrowed dir is not readable: %s", r.Error)
		}
		if r := ask(map[string]any{"op": "write", "path": filepath.Join(deepDir, "w.txt"), "data": "x"}); !r.OK {
			t.Errorf("after narrowing, write mode was lost: %s", r.Error)
		}
		if err := up.Restart(context.Background(), nil); err != nil {
			t.Fatalf("restart to nothing: %v", err)
		}
		if r := ask(map[string]any{"op": "read", "path": w.deep10}); r.OK {
			t.Errorf("after narrowing to nothing, the workspace is readable")
		}
		if err := up.Restart(context.Background(), []schema.CanonicalPath{{Path: w.sibling, Kind: schema.KindDir}}); err == nil {
			t.Errorf("restart widened the scope to a sibling directory")
		}
	}}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(pids) != 3 {
		t.Errorf("BeforeExec called %d times, want 3 (start and two restarts)", len(pids))
	}
	if len(sink.events) != 2 {
		t.Errorf("sink got %d records, want 2", len(sink.events))
	}
}

// TestBeforeExecErrorAborts: an error from BeforeExec means the server never runs.
func TestBeforeExecErrorAborts(t *testing.T) {
	fencetest.RequireFence(t)
	w := newWorkspace(t)
	marker := filepath.Join(t.TempDir(), "started")
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, sink, _ := inProcessConfig(t, scope, []string{"/bin/sh", "-c", "echo > " + marker})
	cfg.Mode = schema.ModeAudit
	boom := errors.New("daemon unreachable")
	cfg.BeforeExec = func(context.Context, int) error { return boom }
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("run: %v, want the BeforeExec error", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("server ran although BeforeExec failed")
	}
	if n := len(sink.events); n != 2 || sink.events[1].Launch.ExitReason != "start_failed" {
		t.Errorf("records: %+v", sink.events)
	}
}

// TestAuditSinkFailureRefusesRun: fail closed when records cannot be kept.
func TestAuditSinkFailureRefusesRun(t *testing.T) {
	w := newWorkspace(t)
	marker := filepath.Join(t.TempDir(), "started")
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, sink, _ := inProcessConfig(t, scope, []string{"/bin/sh", "-c", "echo > " + marker})
	cfg.Mode = schema.ModeAudit
	sink.err = errors.New("nats down and spool full")
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); !errors.Is(err, launcher.ErrAudit) {
		t.Fatalf("run: %v, want ErrAudit", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("server ran although its launch record was lost")
	}
}

// TestKernelDecisionInNew: strict refuses an old kernel; best-effort runs
// degraded and says so in its records and on stderr.
func TestKernelDecisionInNew(t *testing.T) {
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, sink, _ := inProcessConfig(t, scope, []string{"/bin/true"})
	cfg.KernelABI = func() int { return 3 }
	_, err := launcher.New(cfg)
	var ke *ruleset.KernelError
	if !errors.As(err, &ke) || ke.ABI != 3 || !strings.Contains(err.Error(), "net.tcp") {
		t.Fatalf("strict on ABI 3: %v", err)
	}
	if testing.Short() || launcher.KernelABI() < 3 {
		return
	}
	cfg.BestEffort = true
	var stderr strings.Builder
	cfg.Stderr = &syncWriter{w: &stderr}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := l.Decision(); !d.Degraded || d.ABI != 3 {
		t.Fatalf("decision %+v", d)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("degraded run: %v", err)
	}
	if !strings.Contains(stderr.String(), "DEGRADED") {
		t.Errorf("degraded run not announced: %q", stderr.String())
	}
	for _, ev := range sink.events {
		if !ev.Launch.Degraded || !strings.Contains(ev.Launch.DegradedReason, "net.tcp") || ev.Launch.LandlockABI != 3 {
			t.Errorf("record not marked degraded: %+v", ev.Launch)
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestScopeSwapBeforeFenceRefused: if an allowed directory is swapped for a
// symlink between the scope check and the fence, the helper refuses
// instead of granting the symlink's target: when it opens the rule
// (without namespaces) or the bind (with them); both happen as soon as the
// helper has its spec, so the swap before Run is refused. A swap in
// BeforeExec races with them: it is refused, or it comes after them and
// then cannot reach the target either: the rule or the bind holds the
// directory that was checked.
func TestScopeSwapBeforeFenceRefused(t *testing.T) {
	fencetest.RequireFence(t)
	for _, c := range []struct {
		name               string
		noNS, inBeforeExec bool
		refused            bool
	}{
		{"landlock rule, swap before Run", true, false, true},
		{"landlock rule, swap in BeforeExec", true, true, false},
		{"bind, swap before Run", false, false, true},
		{"bind, swap in BeforeExec", false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkspace(t)
			marker := filepath.Join(t.TempDir(), "started")
			scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
			// The server succeeds only if it sees the symlink's target.
			cfg, _, _ := inProcessConfig(t, scope, []string{"/bin/sh", "-c", "test -e " + filepath.Join(w.allowed, "secret.txt") + " && echo > " + marker})
			cfg.NoNamespaces = c.noNS
			swap := func() error {
				if err := os.Rename(w.allowed, w.allowed+".old"); err != nil {
					return err
				}
				return os.Symlink(w.outside, w.allowed)
			}
			if c.inBeforeExec {
				cfg.BeforeExec = func(context.Context, int) error { return swap() }
			}
			l, err := launcher.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !c.inBeforeExec {
				if err := swap(); err != nil {
					t.Fatal(err)
				}
			}
			err = l.Run(context.Background())
			var se *launcher.StartError
			var ee *launcher.ExitError
			switch {
			case c.refused && (!errors.As(err, &se) || !strings.Contains(err.Error(), "symlink")):
				t.Fatalf("run: %v, want a StartError about the symlink", err)
			case !c.refused && !errors.As(err, &ee) && !(errors.As(err, &se) && swapRefused(err)):
				// The swap races with the helper's rule or bind: refused
				// (the symlink, or the directory gone between the rename
				// and the symlink), or the server sees the checked
				// directory; never the target.
				t.Fatalf("run: %v, want a refusal or the server's own failure", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the server saw the symlink's target")
			}
		})
	}
}

// swapRefused reports whether err is the fence refusing a swapped allowed
// directory: found a symlink, or found nothing (opened between the rename
// and the symlink).
func swapRefused(err error) bool {
	m := err.Error()
	return strings.Contains(m, "symlink") || strings.Contains(m, "no such file or directory") || strings.Contains(m, "No such file or directory")
}

// TestStartErrorNamesDeniedPath: a server whose interpreter the fence does
// not grant fails to start with an error naming that file and the flag that
// grants it. (BeforeExec turns the static server into a "#!" script after
// the runtime profile was resolved.)
func TestStartErrorNamesDeniedPath(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	exe := filepath.Join(t.TempDir(), "server")
	data, err := os.ReadFile(b.Naive)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, _, _ := inProcessConfig(t, scope, []string{exe})
	cfg.BeforeExec = func(context.Context, int) error {
		return os.WriteFile(exe, []byte("#!"+sh+"\necho started\n"), 0o755)
	}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Run(context.Background())
	var se *launcher.StartError
	if !errors.As(err, &se) || se.Path != sh || !strings.Contains(err.Error(), "--allow-runtime "+sh) {
		t.Fatalf("run: %v (path %q), want a StartError naming %s", err, pathOf(se), sh)
	}
}

func pathOf(se *launcher.StartError) string {
	if se == nil {
		return ""
	}
	return se.Path
}

// TestScopeExpiryStopsServer: a run ends when its scope expires.
func TestScopeExpiryStopsServer(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	issued := time.Now().Add(-58 * time.Second).UTC().Format(time.RFC3339)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}, "expires_after_minutes": 1, "issued_at": issued})
	cfg, sink, _ := inProcessConfig(t, scope, []string{b.Naive})
	pr, pw := io.Pipe() // a client that stays connected and silent
	defer pw.Close()
	cfg.Stdin = pr
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the server kept running after its scope expired")
	}
	last := sink.events[len(sink.events)-1]
	if last.Launch.Phase != "exit" || last.Launch.ExitReason != "scope_expired" {
		t.Fatalf("exit record %+v", last.Launch)
	}
}

// TestFenceHelperChecked: a missing, non-executable or group-writable fence
// helper refuses the run with a message naming the path and the fix; the
// helper itself refuses to run without the launcher's descriptors.
func TestFenceHelperChecked(t *testing.T) {
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	writable := filepath.Join(dir, "writable")
	for p, mode := range map[string]os.FileMode{plain: 0o644, writable: 0o775} {
		if err := os.WriteFile(p, []byte("#!/bin/true\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "make build"},
		{plain, "not an executable"},
		{writable, "chmod go-w"},
	} {
		cfg, _, _ := inProcessConfig(t, scope, []string{"/bin/true"})
		cfg.HelperPath = c.path
		_, err := launcher.New(cfg)
		if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("helper %s: err %v, want the path and %q", filepath.Base(c.path), err, c.want)
		}
	}
	out, err := exec.Command(fencetest.Build(t).Fence).CombinedOutput()
	if code := exitCodeOf(err); code != 2 || !strings.Contains(string(out), "not run by hand") {
		t.Errorf("mcpwarden-fence run by hand: exit %d, %q", code, out)
	}
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// slowIdentified is a sink that takes its time over the identified record,
// the way a fsync on a busy disk or a slow NATS does.
type slowIdentified struct{ memSink }

func (s *slowIdentified) Publish(ctx context.Context, ev []schema.Event) error {
	if len(ev) > 0 && ev[0].Launch != nil && ev[0].Launch.Phase == schema.PhaseIdentified {
		time.Sleep(300 * time.Millisecond)
	}
	return s.memSink.Publish(ctx, ev)
}

// identifyThenStop is a Mediator that reports the server's identity at once
// (as the proxy does after initialize) and ends the run.
type identifyThenStop struct{ l **launcher.Launcher }

func (m identifyThenStop) Mediate(ctx context.Context, _ io.Reader, _ io.Writer, _ launcher.Upstream) error {
	(*m.l).Identified(ctx, "naive", "1.0", "legacy")
	return nil
}

// TestIdentifiedRecordComesBeforeExit: the identified record is written in
// the background (the client's first answer does not wait for it), yet a
// run that ends at once still records start, identified and exit, in that
// order, with the exit record naming the server; a later call records
// nothing.
func TestIdentifiedRecordComesBeforeExit(t *testing.T) {
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	cfg, _, _ := inProcessConfig(t, scope, []string{"/bin/true"})
	cfg.Mode = schema.ModeAudit
	sink := &slowIdentified{}
	cfg.Sink = sink
	var l *launcher.Launcher
	cfg.Mediator = identifyThenStop{&l}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	l.Identified(context.Background(), "other", "2", "modern")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var phases []schema.LaunchPhase
	for _, ev := range sink.events {
		phases = append(phases, ev.Launch.Phase)
	}
	want := []schema.LaunchPhase{schema.PhaseStart, schema.PhaseIdentified, schema.PhaseExit}
	if !slices.Equal(phases, want) {
		t.Fatalf("records %v, want %v", phases, want)
	}
	if exit := sink.events[2].Launch; exit.ServerName != "naive" || exit.ProtocolEra != "legacy" {
		t.Errorf("the exit record does not name the server: %+v", exit)
	}
}

// TestExecStageChecked: the exec stage next to the fence helper is checked
// as the helper is (docs/launcher.md): missing, not executable or
// group-writable refuses the run with a message naming its path and the fix.
func TestExecStageChecked(t *testing.T) {
	w := newWorkspace(t)
	scope := canonicalScope(t, w.base, map[string]any{"allowed_paths": []string{"allowed"}})
	for _, c := range []struct {
		mode os.FileMode // 0: no exec stage
		want string
	}{
		{0, "make build"},
		{0o644, "not an executable"},
		{0o775, "chmod go-w"},
	} {
		dir := t.TempDir()
		helper := filepath.Join(dir, sandbox.HelperName)
		stage := filepath.Join(dir, sandbox.ExecStageName)
		files := map[string]os.FileMode{helper: 0o755}
		if c.mode != 0 {
			files[stage] = c.mode
		}
		for p, mode := range files {
			if err := os.WriteFile(p, []byte("#!/bin/true\n"), mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		cfg, _, _ := inProcessConfig(t, scope, []string{"/bin/true"})
		cfg.HelperPath = helper
		_, err := launcher.New(cfg)
		if err == nil || !strings.Contains(err.Error(), "exec stage "+stage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("exec stage of mode %v: err %v, want its path and %q", c.mode, err, c.want)
		}
	}
}
