package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
	"golang.org/x/sys/unix"
)

var preparedParents atomic.Int64

// preparedParent is a cgroup parent of this test alone (other tests and
// engineers make mcpwarden-* groups at the same time), removed at the end.
func preparedParent(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := cgroup.Probe(); err != nil {
		testenv.Missing(t, "cgroups: "+err.Error())
	}
	parent := fmt.Sprintf("/mcpwarden-preptest-%d-%d", os.Getpid(), preparedParents.Add(1))
	t.Cleanup(func() {
		for _, d := range hierarchyDirs(t, parent) {
			_ = os.Remove(d)
		}
	})
	return parent
}

// hierarchyDirs are the directories of the cgroup path parent in every
// hierarchy a run's group may use (found through a group made there).
func hierarchyDirs(t *testing.T, parent string) []string {
	t.Helper()
	host, err := cgroup.Probe()
	if err != nil {
		t.Fatal(err)
	}
	g, err := host.New(cgroup.Options{Name: "locate", Parent: parent, Limits: cgroup.Limits{Processes: 1, MemoryBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handle()
	if err := g.Remove(killTimeout); err != nil {
		t.Fatal(err)
	}
	var out []string
	if h.V2 != "" {
		out = append(out, filepath.Dir(h.V2))
	}
	for _, d := range h.V1 {
		out = append(out, filepath.Dir(d))
	}
	return out
}

// groupsUnder lists the mcpwarden-* groups under parent in every hierarchy.
func groupsUnder(t *testing.T, parent string) []string {
	t.Helper()
	var out []string
	for _, d := range hierarchyDirs(t, parent) {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "mcpwarden-") {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	return out
}

// TestPreparedLife: the cgroup PrepareLife makes is handed to the run only
// when it was made from what the run would make it from; otherwise, and
// whenever the run does not take it, it is removed, and an invalid
// configuration makes nothing.
func TestPreparedLife(t *testing.T) {
	scope := &schema.CanonicalScope{}
	base := func(parent string) Config {
		return Config{Scope: scope, Mode: schema.ModeEnforce, RunID: schema.NewID(), CgroupParent: parent,
			Limits: &Limits{MaxProcesses: 64, MaxMemoryMB: 256}}
	}
	cases := []struct {
		name     string
		prepared func(Config) Config // what PrepareLife is given
		taken    bool                // the run takes it over
	}{
		{"same configuration", func(c Config) Config { return c }, true},
		{"empty mode is enforce", func(c Config) Config { c.Mode = ""; return c }, true},
		{"other limits", func(c Config) Config { c.Limits = &Limits{MaxProcesses: 65, MaxMemoryMB: 256}; return c }, false},
		{"other mode", func(c Config) Config { c.Mode = schema.ModeAudit; return c }, false},
		{"other run id", func(c Config) Config { c.RunID = schema.NewID(); return c }, false},
		{"limits required", func(c Config) Config { c.RequireLimits = true; return c }, false},
		{"cgroup off", func(c Config) Config { c.NoCgroup = true; return c }, false},
		{"negative limit", func(c Config) Config { c.Limits = &Limits{MaxProcesses: -1}; return c }, false},
		{"no run id", func(c Config) Config { c.RunID = ""; return c }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := preparedParent(t)
			run := base(parent)
			p := PrepareLife(c.prepared(run))
			l := &Launcher{cfg: run, limits: *run.Limits}
			l.cfg.Life = p
			lf, err := l.newLife()
			if err != nil {
				t.Fatal(err)
			}
			if lf.grp == nil {
				t.Fatal("the run has no cgroup")
			}
			if got := groupsUnder(t, parent); len(got) == 0 || !strings.HasSuffix(got[0], "mcpwarden-"+run.RunID) {
				t.Errorf("groups under the parent %v, want only the run's", got)
			} else {
				for _, g := range got {
					if filepath.Base(g) != "mcpwarden-"+run.RunID {
						t.Errorf("a group other than the run's is left: %s", g)
					}
				}
			}
			if got := lf.report.Processes; got != 64 {
				t.Errorf("process limit %d, want 64", got)
			}
			if p.taken != true {
				t.Error("the prepared life was not settled by the run")
			}
			if c.taken != (p.lf != nil && p.lf == lf) {
				t.Errorf("taken over: %v, want %v", p.lf == lf, c.taken)
			}
			// The run's own group stays until the run closes it: Discard
			// after the run took over (or made its own) removes nothing.
			if err := p.Discard(); err != nil {
				t.Fatal(err)
			}
			if len(groupsUnder(t, parent)) == 0 {
				t.Error("Discard removed the run's group")
			}
			if err := lf.close(); err != nil {
				t.Fatal(err)
			}
			if got := groupsUnder(t, parent); len(got) != 0 {
				t.Errorf("left after the run: %v", got)
			}
		})
	}
	t.Run("discarded", func(t *testing.T) {
		parent := preparedParent(t)
		p := PrepareLife(base(parent))
		<-p.done
		if len(groupsUnder(t, parent)) == 0 {
			t.Fatal("PrepareLife made no group")
		}
		for range 2 {
			if err := p.Discard(); err != nil {
				t.Fatal(err)
			}
		}
		if got := groupsUnder(t, parent); len(got) != 0 {
			t.Errorf("left after Discard: %v", got)
		}
		var none *PreparedLife
		if err := none.Discard(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRefusedRunLeavesNoCgroup: `mcpwarden run` makes the run's cgroup
// while it still reads its configuration; a run refused after that (the
// audit log inside the scope, exit 65; contradicting namespace flags,
// refused by the launcher, exit 69) leaves no group behind, and one that
// runs leaves none either.
func TestRefusedRunLeavesNoCgroup(t *testing.T) {
	bin := testenv.Mcpwarden(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	testenv.WriteFiles(t, map[string]string{filepath.Join(base, "ws", "a.txt"): "a"})
	scope := filepath.Join(dir, "scope.json")
	testenv.WriteFiles(t, map[string]string{scope: `{"scope_id":"prep","resource_refs":[],"access_mode":"read",` +
		`"tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30,"allowed_paths":["ws"]}`})
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"audit log inside the scope", []string{"--audit-log", filepath.Join(base, "ws", "audit.jsonl")}, 65},
		{"namespaces required and refused", []string{"--require-namespaces", "--no-namespaces"}, 69},
		{"a run", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := preparedParent(t)
			args := append([]string{"run", "--scope", scope, "--base", base, "--state-dir", filepath.Join(dir, "state"), "--cgroup-parent", parent}, c.args...)
			cmd := exec.Command(bin, append(args, "--", "/bin/true")...)
			out, err := cmd.CombinedOutput()
			code := 0
			if err != nil {
				code = cmd.ProcessState.ExitCode()
			}
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, out)
			}
			if got := groupsUnder(t, parent); len(got) != 0 {
				t.Errorf("left behind: %v", got)
			}
		})
	}
}

// TestPreparedHelper: the fence helper PrepareLife clones into the
// prepared group is the run's helper only when the run takes the group
// over and would start that same helper (same program, working directory,
// server name, namespaces, stderr); otherwise it is killed before the run
// starts its own, and Discard kills one the run never asked for. It fails
// on the code before it: no helper was prepared.
func TestPreparedHelper(t *testing.T) {
	bin := testenv.Mcpwarden(t)
	helper := filepath.Join(filepath.Dir(bin), testenv.HelperName)
	dir := t.TempDir()
	alog, err := auditlog.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alog.Close() })
	scope := &schema.CanonicalScope{Base: dir}
	base := func(parent string) Config {
		return Config{Scope: scope, Mode: schema.ModeEnforce, RunID: schema.NewID(), CgroupParent: parent,
			Limits: &Limits{MaxProcesses: 64, MaxMemoryMB: 256}, Command: []string{"/bin/true"}, HelperPath: helper, Dir: dir,
			AuditLog: alog, Stdin: strings.NewReader(""), Stdout: io.Discard}
	}
	cases := []struct {
		name     string
		prepared func(Config) Config // what PrepareLife is given
		taken    bool                // the run takes its helper over
	}{
		{"same configuration", func(c Config) Config { return c }, true},
		{"other server name", func(c Config) Config { c.Command = []string{"/bin/false"}; return c }, false},
		{"other working directory", func(c Config) Config { c.Dir = "/"; return c }, false},
		{"no namespaces", func(c Config) Config { c.NoNamespaces = true; return c }, false},
		{"other cgroup", func(c Config) Config { c.Limits = &Limits{MaxProcesses: 65, MaxMemoryMB: 256}; return c }, false},
		{"cgroup off", func(c Config) Config { c.NoCgroup = true; return c }, false},
		{"other stderr", func(c Config) Config { c.Stderr = io.Discard; return c }, false},
		{"no command", func(c Config) Config { c.Command = nil; return c }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := preparedParent(t)
			run := base(parent)
			p := PrepareLife(c.prepared(run))
			l, err := New(run)
			if err != nil {
				t.Fatal(err)
			}
			l.cfg.Life = p
			<-p.helperDone
			prepared := 0
			if p.helper != nil {
				prepared = p.helper.p.cmd.Process.Pid
			}
			if c.taken && prepared == 0 {
				t.Fatal("no helper was prepared")
			}
			lf, err := l.newLife()
			if err != nil {
				t.Fatal(err)
			}
			defer lf.close()
			srv := &server{l: l, life: lf}
			h, err := srv.spawn()
			if err != nil {
				t.Fatal(err)
			}
			defer h.kill()
			got := h.p.cmd.Process.Pid
			if c.taken != (got == prepared) {
				t.Errorf("the run's helper is pid %d, the prepared one %d: taken %v, want %v", got, prepared, got == prepared, c.taken)
			}
			if !c.taken && prepared != 0 {
				// Killed and reaped before the run started its own.
				if err := unix.Kill(prepared, 0); !errors.Is(err, unix.ESRCH) {
					t.Errorf("the prepared helper %d is still there (%v)", prepared, err)
				}
			}
			if err := p.Discard(); err != nil {
				t.Fatal(err)
			}
			if err := unix.Kill(got, 0); err != nil {
				t.Errorf("Discard after the run took over killed the run's helper: %v", err)
			}
		})
	}
	t.Run("discarded", func(t *testing.T) {
		p := PrepareLife(base(preparedParent(t)))
		<-p.helperDone
		if p.helper == nil {
			t.Fatal("no helper was prepared")
		}
		pid := p.helper.p.cmd.Process.Pid
		if err := p.Discard(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			t.Errorf("the prepared helper %d outlived Discard (%v)", pid, err)
		}
	})
}

// TestPreparedProfile: the runtime profile PrepareLife resolves meanwhile
// is the run's only when the run would resolve it from the same command,
// PATH, working directory, network grant, --allow-exec and cache; the run
// resolves its own otherwise, and a command that cannot be resolved fails
// the run with the same error either way. It fails on the code before (no
// profile was prepared).
func TestPreparedProfile(t *testing.T) {
	dir := t.TempDir()
	alog, err := auditlog.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alog.Close() })
	scope := &schema.CanonicalScope{Base: dir}
	base := func() Config {
		return Config{Scope: scope, Mode: schema.ModeEnforce, RunID: schema.NewID(), NoCgroup: true,
			Command: []string{"/bin/true"}, HelperPath: filepath.Join(filepath.Dir(testenv.Mcpwarden(t)), testenv.HelperName), Dir: dir,
			AuditLog: alog, Stdin: strings.NewReader(""), Stdout: io.Discard, CacheDir: filepath.Join(dir, "cache")}
	}
	cases := []struct {
		name     string
		prepared func(Config) Config
		taken    bool
	}{
		{"same configuration", func(c Config) Config { return c }, true},
		{"other command", func(c Config) Config { c.Command = []string{"/bin/false"}; return c }, false},
		{"other argument", func(c Config) Config { c.Command = []string{"/bin/true", "x"}; return c }, false},
		{"other directory", func(c Config) Config { c.Dir = "/"; return c }, false},
		{"other PATH", func(c Config) Config { c.Env = []string{"PATH=/nowhere"}; return c }, false},
		{"clean environment", func(c Config) Config { c.CleanEnv = true; c.Env = []string{"PATH=/nowhere"}; return c }, false},
		{"other helper programs", func(c Config) Config { c.AllowExec = []string{"sh"}; return c }, false},
		{"other cache", func(c Config) Config { c.CacheDir = ""; return c }, false},
		{"other network grant", func(c Config) Config {
			s := *scope
			s.Network.ConnectTCP = []int{443}
			c.Scope = &s
			return c
		}, false},
		{"no command", func(c Config) Config { c.Command = nil; return c }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := base()
			p := PrepareLife(c.prepared(run))
			defer p.Discard()
			<-p.profDone
			prepared := p.profile
			if c.taken && prepared == nil {
				t.Fatalf("no profile was prepared (%v)", p.profErr)
			}
			run.Life = p
			l, err := New(run)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.resolve(dir); err != nil {
				t.Fatal(err)
			}
			if got := l.profile == prepared; got != c.taken {
				t.Errorf("the run's profile is the prepared one: %v, want %v", got, c.taken)
			}
			if l.profile == nil || l.profile.Exe != "/bin/true" && l.profile.Exe != "/usr/bin/true" {
				t.Errorf("the run's profile is for %+v, want /bin/true", l.profile)
			}
		})
	}
	t.Run("unresolvable command", func(t *testing.T) {
		run := base()
		run.Command = []string{filepath.Join(dir, "no-such-server")}
		own, err := New(run)
		if err != nil {
			t.Fatal(err)
		}
		_, want := own.resolve(dir)
		p := PrepareLife(run)
		defer p.Discard()
		run.Life = p
		l, err := New(run)
		if err != nil {
			t.Fatal(err)
		}
		<-p.profDone
		if p.profErr == nil {
			t.Fatal("the prepared resolution did not fail")
		}
		_, got := l.resolve(dir)
		var se *StartError
		if want == nil || got == nil || got.Error() != want.Error() || !errors.As(got, &se) {
			t.Errorf("error %v, want %v (a StartError)", got, want)
		}
	})
}

// TestPlanAhead: Run writes the run's plan into the pipe of the helper
// PrepareLife clones, while its clone may still be under way, only when
// the run takes that helper over; that helper starts the server from it
// with the go-ahead, and sendSpec does not send it again (a second copy
// in the pipe would be read as the go-ahead, and the stage would refuse).
// A helper planned otherwise gets nothing ahead; a helper gone before the
// plan reached it gets nothing either, and the run fails as before, on
// sending its spec. (New with the plan ahead: it does not build on the
// code before.)
func TestPlanAhead(t *testing.T) {
	bin := testenv.Mcpwarden(t)
	helper := filepath.Join(filepath.Dir(bin), testenv.HelperName)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	alog, err := auditlog.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alog.Close() })
	scope := &schema.CanonicalScope{Base: dir}
	cfgOf := func(parent, cmd string) Config {
		return Config{Scope: scope, Mode: schema.ModeEnforce, RunID: schema.NewID(), CgroupParent: parent,
			Command: []string{cmd}, HelperPath: helper, Dir: dir, AuditLog: alog, Stdin: strings.NewReader(""), Stdout: io.Discard}
	}
	// setup prepares the run's life from prepared, builds the run's
	// launcher from run and its plan, as Run does up to sendPlanAhead.
	setup := func(t *testing.T, prepared, run Config) (*Launcher, *server, *ruleset.Ruleset, []byte) {
		t.Helper()
		p := PrepareLife(prepared)
		t.Cleanup(func() { _ = p.Discard() })
		l, err := New(run)
		if err != nil {
			t.Fatal(err)
		}
		l.cfg.Life = p
		lf, err := l.newLife()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lf.close() })
		srv := &server{l: l, life: lf, out: &watchWriter{w: io.Discard}}
		tmp, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		srv.tmp = tmp
		rs, err := l.resolve(tmp)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := sandbox.EncodePlan(l.spec(rs, srv.env(), tmp))
		if err != nil {
			t.Fatal(err)
		}
		return l, srv, rs, plan
	}
	// runs launches the server of h and waits for its status.
	runs := func(t *testing.T, srv *server, h *pending, rs *ruleset.Ruleset) {
		t.Helper()
		p, err := srv.launch(context.Background(), h, rs, nil)
		if err != nil {
			t.Fatalf("the helper did not start the server: %v", err)
		}
		<-p.done
		if p.exit == nil || p.exit.Stage != sandbox.StageExit || p.exit.Code != 0 || p.exit.Signal != 0 {
			t.Fatalf("the server's status %+v, want exit 0", p.exit)
		}
	}
	t.Run("taken", func(t *testing.T) {
		run := cfgOf(preparedParent(t), "/bin/true")
		l, srv, rs, plan := setup(t, run, run)
		if !l.cfg.Life.sendPlanAhead(l.helperPlan(), plan) {
			t.Fatal("the plan was not sent ahead to the helper the run takes over")
		}
		h, err := srv.spawn()
		if err != nil {
			t.Fatal(err)
		}
		if h.ahead == nil || !h.ahead.sent.Load() {
			t.Fatal("the run's helper is not the one the plan was sent ahead to")
		}
		if err := srv.sendSpec(h, rs, plan); err != nil {
			t.Fatal(err)
		}
		runs(t, srv, h, rs)
	})
	t.Run("planned otherwise", func(t *testing.T) {
		parent := preparedParent(t)
		run := cfgOf(parent, "/bin/true")
		prepared := run
		prepared.Command = []string{"/bin/false"}
		l, srv, rs, plan := setup(t, prepared, run)
		if l.cfg.Life.sendPlanAhead(l.helperPlan(), plan) {
			t.Fatal("the plan was sent ahead to a helper the run does not take over")
		}
		h, err := srv.spawn()
		if err != nil {
			t.Fatal(err)
		}
		if h.ahead != nil {
			t.Fatal("the run's own helper has the prepared one's spec pipe")
		}
		if err := srv.sendSpec(h, rs, plan); err != nil {
			t.Fatal(err)
		}
		runs(t, srv, h, rs)
	})
	t.Run("gone", func(t *testing.T) {
		run := cfgOf(preparedParent(t), "/bin/true")
		l, srv, rs, plan := setup(t, run, run)
		p := l.cfg.Life
		<-p.helperDone
		if p.helper == nil {
			t.Fatal("no helper was prepared")
		}
		pid := p.helper.p.cmd.Process.Pid
		if err := p.helper.p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		// Reaped (its end of the pipe closed) once kill(pid, 0) says so.
		deadline := time.Now().Add(2 * time.Minute)
		for unix.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the killed helper %d is still there", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if p.sendPlanAhead(l.helperPlan(), plan) {
			t.Fatal("the plan was sent ahead to a helper that is gone")
		}
		h, err := srv.spawn()
		if err != nil {
			t.Fatal(err)
		}
		var se *StartError
		if err := srv.sendSpec(h, rs, plan); !errors.As(err, &se) || !strings.Contains(err.Error(), "send the fence helper its spec") {
			t.Fatalf("sendSpec to a helper that is gone: %v, want the StartError of a spec that could not be sent", err)
		}
	})
}
