package launcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Limits bound one run. Zero in a field means no limit.
type Limits struct {
	MaxProcesses  int64 // tasks at once, threads included (pids.max)
	MaxMemoryMB   int64 // MiB for the whole run, swap included
	MaxFileSizeMB int64 // MiB, the largest file it may write (RLIMIT_FSIZE); also the size of its private /tmp
}

// DefaultLimits are the operator's bounds when none are configured: room
// for a node, Python or Go server with its worker threads and children,
// and a stop to a fork bomb, a runaway allocation or a disk-filling write.
var DefaultLimits = Limits{MaxProcesses: 512, MaxMemoryMB: 1024, MaxFileSizeMB: 1024}

// killTimeout bounds how long killing the run's cgroup may take.
const killTimeout = 10 * time.Second

// LimitsError says the host cannot enforce limits the run requires.
type LimitsError struct {
	Reason string
	layer  schema.Layer // the cgroup layer as found, for the refusal's record
}

func (e *LimitsError) Error() string {
	return "the run's limits cannot be enforced here: " + e.Reason + "; run as root, pass --cgroup-parent a cgroup this user may write, or drop the explicit limits to run without them (degraded)"
}

// effectiveLimits narrows the operator's bounds op by the scope's: a scope
// may only ask for less. Asking for more than the operator allows refuses
// the scope, naming the field; where the operator set no bound (0), the
// scope's applies.
func effectiveLimits(op Limits, sc *schema.Limits) (Limits, error) {
	if sc == nil {
		return op, nil
	}
	out := op
	for _, f := range []struct {
		field, flag string
		scope       int64
		eff         *int64
	}{
		{"limits.max_processes", "--max-processes", sc.MaxProcesses, &out.MaxProcesses},
		{"limits.max_memory_mb", "--max-memory-mb", sc.MaxMemoryMB, &out.MaxMemoryMB},
		{"limits.max_file_size_mb", "--max-file-size-mb", sc.MaxFileSizeMB, &out.MaxFileSizeMB},
	} {
		if f.scope == 0 {
			continue
		}
		if *f.eff > 0 && f.scope > *f.eff {
			return Limits{}, &schema.ScopeError{Field: f.field, Reason: fmt.Sprintf("asks for %d, more than the operator allows (%s %d); a scope may only narrow the operator's bounds", f.scope, f.flag, *f.eff)}
		}
		*f.eff = f.scope
	}
	return out, nil
}

// life is the run's lifetime: its cgroup and the watcher that kills the
// cgroup if the launcher dies.
type life struct {
	grp    *cgroup.Group // nil without any cgroup
	report cgroup.Report

	lifeline *os.File // our end of the watcher's pipe; our death closes it
	watcher  *exec.Cmd
	watchErr chan error
}

// lifePlan is everything the run's cgroup is made from, taken from the
// launcher's configuration: comparable, so that a group made ahead of the
// run (PrepareLife) is used only when it was made from exactly what Run
// would make it from.
type lifePlan struct {
	off                         bool // --cgroup=false
	opts                        cgroup.Options
	requireProcs, requireMemory bool
}

// planLife is the lifePlan of cfg, checked as New checks it.
func planLife(cfg *Config) (lifePlan, error) {
	op := DefaultLimits
	if cfg.Limits != nil {
		op = *cfg.Limits
	}
	if op.MaxProcesses < 0 || op.MaxMemoryMB < 0 || op.MaxFileSizeMB < 0 {
		return lifePlan{}, errors.New("limits must not be negative (0 means no limit)")
	}
	limits, err := effectiveLimits(op, cfg.Scope.Limits)
	if err != nil {
		return lifePlan{}, err
	}
	lim := cgroup.Limits{}
	if cfg.Mode == schema.ModeEnforce || cfg.Mode == "" {
		lim = cgroup.Limits{Processes: limits.MaxProcesses, MemoryBytes: limits.MaxMemoryMB << 20}
	}
	return lifePlan{
		off:           cfg.NoCgroup,
		opts:          cgroup.Options{Name: "mcpwarden-" + cfg.RunID, Limits: lim, Parent: cfg.CgroupParent, Stale: "mcpwarden-"},
		requireProcs:  cfg.RequireLimits || (cfg.Scope.Limits != nil && cfg.Scope.Limits.MaxProcesses > 0),
		requireMemory: cfg.RequireLimits || (cfg.Scope.Limits != nil && cfg.Scope.Limits.MaxMemoryMB > 0),
	}, nil
}

// newLife makes the run's cgroup with the run's limits, or takes the one
// PrepareLife made from the same plan. It refuses (a *LimitsError) when
// the run requires its limits and the host cannot enforce them all.
func (l *Launcher) newLife() (*life, error) {
	plan := lifePlan{off: l.cfg.NoCgroup, requireProcs: l.requireProcs, requireMemory: l.requireMemory}
	plan.opts = cgroup.Options{Name: "mcpwarden-" + l.cfg.RunID, Parent: l.cfg.CgroupParent, Stale: "mcpwarden-"}
	if l.cfg.Mode == schema.ModeEnforce {
		plan.opts.Limits = cgroup.Limits{Processes: l.limits.MaxProcesses, MemoryBytes: l.limits.MaxMemoryMB << 20}
	}
	if p := l.cfg.Life; p != nil {
		if lf, ok, err := p.take(plan); ok {
			return lf, err
		}
	}
	return makeLife(plan)
}

// makeLife makes the cgroup of plan; see newLife.
func makeLife(plan lifePlan) (*life, error) {
	lf := &life{}
	lim := plan.opts.Limits
	host, err := cgroup.Probe()
	switch {
	case plan.off:
		lf.report = cgroup.Report{State: cgroup.Off, Reason: "turned off by the operator (--cgroup=false)", Token: "turned_off"}
	case err != nil:
		lf.report = cgroup.Report{State: cgroup.Off, Reason: err.Error(), Token: "no_cgroups"}
	default:
		grp, err := host.New(plan.opts)
		if err != nil {
			return nil, err
		}
		lf.report = grp.Report()
		if grp.Exists() {
			lf.grp = grp
		}
	}
	if r := lf.report; (plan.requireProcs && lim.Processes > 0 && r.Processes != lim.Processes) ||
		(plan.requireMemory && lim.MemoryBytes > 0 && r.Memory != lim.MemoryBytes) {
		reason := r.Reason
		if reason == "" {
			reason = "no cgroup"
		}
		ly := lf.layer()
		_ = lf.close()
		return nil, &LimitsError{Reason: reason, layer: ly}
	}
	return lf, nil
}

// PreparedLife is a run's cgroup made ahead of its launch, while the
// command still reads its flags, configuration and scope (PrepareLife).
// Run takes it over when it was made from exactly the configuration Run
// would make it from, and makes its own otherwise; nothing is ever
// started in it before Run. Whatever Run does not take over, Discard
// removes.
type PreparedLife struct {
	plan  lifePlan
	ok    bool // plan is set: cfg was complete and valid
	done  chan struct{}
	lf    *life
	err   error
	mu    sync.Mutex
	taken bool
	// lifeTaken: Run took lf over (the prepared helper lives in its group).
	lifeTaken bool

	// The fence helper cloned into the prepared group once it exists
	// (prehelper.go): hplan is what it was started from, helper nil when
	// none was (hok false: cfg did not say enough, or New would refuse it).
	hplan      helperPlan
	hok        bool
	helperDone chan struct{}
	// spec is the helper's spec pipe, made before its clone (nil: none
	// will be cloned); specMade is closed once it is set.
	spec        *specPipe
	specMade    chan struct{}
	helper      *pending
	helperTaken bool

	// The server's runtime profile, resolved meanwhile on a goroutine of
	// its own (prehelper.go): pplan is what it was resolved from.
	pplan     profilePlan
	pok       bool
	profDone  chan struct{}
	profile   *runtimeprofile.Profile
	profErr   error
	profTaken bool
}

// PrepareLife starts making the cgroup of the run cfg describes (its run
// id, scope, mode, limits, cgroup parent) on another goroutine, and
// returns at once. Give the result to the run as Config.Life, and Discard
// it on every path that does not reach Run. A cfg that New would refuse
// makes nothing: Run then fails as it would have.
func PrepareLife(cfg Config) *PreparedLife {
	p := &PreparedLife{done: make(chan struct{}), helperDone: make(chan struct{}), specMade: make(chan struct{}), profDone: make(chan struct{})}
	if cfg.Scope == nil || cfg.RunID == "" {
		close(p.done)
		close(p.helperDone)
		close(p.specMade)
		close(p.profDone)
		return p
	}
	plan, err := planLife(&cfg)
	if err != nil {
		close(p.done)
		close(p.helperDone)
		close(p.specMade)
		close(p.profDone)
		return p
	}
	// The runtime profile (about 1 ms for a static server, 5-15 for a node
	// one with its cache) is resolved meanwhile too: Run needs it before
	// the helper's spec can go out.
	if p.pplan, p.pok = planProfile(cfg); p.pok {
		go func() {
			defer close(p.profDone)
			prof, err := p.pplan.resolve()
			p.mu.Lock()
			p.profile, p.profErr = prof, err
			p.mu.Unlock()
		}()
	} else {
		close(p.profDone)
	}
	p.plan, p.ok = plan, true
	p.hplan, p.hok = planHelper(cfg)
	go func() {
		defer close(p.helperDone)
		lf, err := makeLife(plan)
		p.mu.Lock()
		p.lf, p.err = lf, err
		p.mu.Unlock()
		close(p.done)
		if err != nil || !p.hok {
			close(p.specMade)
			return
		}
		// Its spec pipe first, for Run to write the plan into while the
		// clone is under way (sendPlanAhead).
		spec, err := newSpecPipe()
		if err != nil {
			close(p.specMade)
			return
		}
		p.mu.Lock()
		p.spec = spec
		p.mu.Unlock()
		close(p.specMade)
		// The helper is born in the group: Run takes both or neither.
		var grp *cgroup.Group
		if lf != nil {
			grp = lf.grp
		}
		if h, err := startHelper(p.hplan, grp, spec); err == nil {
			p.mu.Lock()
			p.helper = h
			p.mu.Unlock()
		}
	}()
	return p
}

// take hands the prepared group to Run when it was made from plan; ok is
// false (and the group is removed) otherwise.
func (p *PreparedLife) take(plan lifePlan) (*life, bool, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taken {
		return nil, false, nil
	}
	p.taken = true
	if !p.ok || p.plan != plan {
		p.mu.Unlock()
		p.dropHelper()
		p.mu.Lock()
		if p.lf != nil {
			_ = p.lf.close()
		}
		return nil, false, nil
	}
	p.lifeTaken = p.err == nil
	return p.lf, true, p.err
}

// Discard removes the prepared cgroup unless Run took it over; it waits
// for PrepareLife's work to end. Safe to call more than once, and on nil.
func (p *PreparedLife) Discard() error {
	if p == nil {
		return nil
	}
	// A helper Run did not take execs nothing: it dies before its group goes.
	p.dropHelper()
	<-p.profDone
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taken {
		return nil
	}
	p.taken = true
	if p.lf != nil {
		return p.lf.close()
	}
	return nil
}

// layer is the cgroup layer's state for the launch records.
func (lf *life) layer() schema.Layer {
	ly := schema.Layer{Name: schema.LayerCgroup, State: schema.LayerOn}
	switch lf.report.State {
	case cgroup.Degraded:
		ly.State = schema.LayerDegraded
	case cgroup.Off:
		ly.State = schema.LayerOff
	}
	ly.Reason = lf.report.Token
	if len(ly.Reason) > 128 {
		ly.Reason = ly.Reason[:128]
	}
	return ly
}

// startWatcher starts the watcher (the fence helper binary under another
// name), which kills the run's cgroup when the launcher dies. Without a
// cgroup there is nothing for it to hold; with a pid namespace whose init
// dies with the launcher (its parent-death signal), the kernel kills the
// whole namespace and the watcher is not needed.
func (lf *life) startWatcher(helperPath string, stderr io.Writer, pidNamespace bool) error {
	if lf.grp == nil || pidNamespace {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("watcher pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:       helperPath,
		Args:       []string{cgroup.WatcherName, lf.grp.Handle().String()},
		Env:        []string{"GOMAXPROCS=1"},
		Stderr:     stderr,
		ExtraFiles: []*os.File{r}, // fd 3, cgroup.LifelineFD
		// Out of the terminal's process group: a ^C reaches the launcher only.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("start the run's watcher: %w", err)
	}
	r.Close()
	lf.lifeline, lf.watcher = w, cmd
	lf.watchErr = make(chan error, 1)
	go func() { lf.watchErr <- cmd.Wait() }()
	return nil
}

// kill ends every process of the run: the whole cgroup, or, without one,
// every process in the server's session (sid) below the launcher. The
// helper process itself (tracked, reaped by its exec.Cmd) is not reaped
// here; orphans that came back to the launcher are.
func (lf *life) kill(sid, tracked int) error {
	if lf.grp == nil {
		killSession(sid)
		return nil
	}
	pids, _ := lf.grp.Procs()
	err := lf.grp.Kill(killTimeout)
	for _, pid := range pids {
		if pid != tracked {
			_, _ = syscall.Wait4(pid, nil, syscall.WNOHANG, nil)
		}
	}
	return err
}

// stats reads the limit hits of the run so far.
func (lf *life) stats() cgroup.Stats {
	if lf.grp == nil {
		return cgroup.Stats{}
	}
	return lf.grp.Stats()
}

// close kills and removes the cgroup, then lets the watcher go.
func (lf *life) close() error {
	var err error
	if lf.grp != nil {
		err = lf.grp.Remove(killTimeout)
	}
	if lf.lifeline != nil {
		lf.lifeline.Close()
		select {
		case werr := <-lf.watchErr:
			var ee *exec.ExitError
			if werr != nil && !errors.As(werr, &ee) {
				err = errors.Join(err, fmt.Errorf("the run's watcher: %w", werr))
			}
		case <-time.After(killTimeout):
			_ = lf.watcher.Process.Kill()
		}
	}
	return err
}

// The scope's authority ended. A Mediator that stops the run for one of
// these returns an error wrapping it (the protocol proxy does); the
// launcher then kills the whole run at once, records exit_reason
// scope_expired or scope_revoked, and Run returns an error wrapping the
// same sentinel (`mcpwarden run` exits 77).
var (
	ErrScopeExpired = errors.New("the scope expired")
	ErrScopeRevoked = errors.New("the scope was revoked")
)

// scopeEnd is the exit reason a mediator's error stands for, or "".
func scopeEnd(err error) schema.ExitReason {
	switch {
	case errors.Is(err, ErrScopeRevoked):
		return schema.ExitScopeRevoked
	case errors.Is(err, ErrScopeExpired):
		return schema.ExitScopeExpired
	}
	return ""
}

// reportLimitHits tells the operator, once at the end, that the run ran
// into its limits: a server that failed or died for it otherwise looks
// like a server bug.
func (l *Launcher) reportLimitHits(st cgroup.Stats) {
	if st.ProcessLimitHits > 0 {
		fmt.Fprintf(l.cfg.Stderr, "mcpwarden: WARNING: the run hit its process limit (%d): %d fork(s) refused; raise it with --max-processes\n", l.limits.MaxProcesses, st.ProcessLimitHits)
	}
	if st.OOMKills > 0 {
		fmt.Fprintf(l.cfg.Stderr, "mcpwarden: WARNING: the run hit its memory limit (%d MiB): %d process(es) killed; raise it with --max-memory-mb\n", l.limits.MaxMemoryMB, st.OOMKills)
	}
}

// EffectiveLimits are the limits a run gets: the operator's op (nil:
// DefaultLimits) narrowed by the scope's. A scope asking for more than the
// operator allows is a *schema.ScopeError.
func EffectiveLimits(op *Limits, scope *schema.CanonicalScope) (Limits, error) {
	l := DefaultLimits
	if op != nil {
		l = *op
	}
	return effectiveLimits(l, scope.Limits)
}

// ProbeCgroup says what a run's cgroup with lim would be here: it makes
// one under parent (default: this process's own cgroup), reads its report
// and removes it again.
func ProbeCgroup(lim Limits, parent string) cgroup.Report {
	host, err := cgroup.Probe()
	if err != nil {
		return cgroup.Report{State: cgroup.Off, Reason: err.Error(), Token: "no_cgroups"}
	}
	g, err := host.New(cgroup.Options{
		Name:   fmt.Sprintf("mcpwarden-probe-%d", os.Getpid()),
		Limits: cgroup.Limits{Processes: lim.MaxProcesses, MemoryBytes: lim.MaxMemoryMB << 20},
		Parent: parent,
	})
	if err != nil {
		return cgroup.Report{State: cgroup.Off, Reason: err.Error(), Token: "bad_cgroup_parent"}
	}
	_ = g.Remove(killTimeout)
	return g.Report()
}

// minOpenFiles is the least RLIMIT_NOFILE a run's processes get: enough
// for any MCP server seen (node raises its soft limit to the hard one).
const minOpenFiles = 1024

// openFilesCeiling is the run's RLIMIT_NOFILE ceiling. The host's file
// table (fs.file-max) is one budget for every process of the host: once
// it is used up, every process without CAP_SYS_ADMIN gets ENFILE. A run
// holds at most maxProcs times the ceiling, which is an eighth of the
// table shared by its processes, and never below minOpenFiles (a run
// without a process limit, or a table that could not be read, gets that).
func openFilesCeiling(fileMax uint64, maxProcs int64) uint64 {
	if fileMax == 0 || maxProcs <= 0 {
		return minOpenFiles
	}
	return max(minOpenFiles, fileMax/8/uint64(maxProcs))
}

// OpenFilesCeiling is the RLIMIT_NOFILE ceiling of a run with a limit of
// maxProcs processes on this host (openFilesCeiling of fs.file-max).
func OpenFilesCeiling(maxProcs int64) uint64 { return openFilesCeiling(hostFileMax(), maxProcs) }

// hostFileMax is fs.file-max, or 0 if it cannot be read.
func hostFileMax() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/file-max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
