package launcher

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
	"github.com/mcpwarden/mcpwarden/launcher/serverlog"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Run starts the server, mediates its stdio until it exits, and writes the
// start and exit launch records. It returns nil when the server exited 0,
// an *ExitError with its status otherwise, a *StartError when it could not
// be started, and an error wrapping ErrAudit when a record could not be
// written (then, at start, the server is never started).
func (l *Launcher) Run(ctx context.Context) (err error) {
	cfg := &l.cfg
	start := cfg.Now()
	// Orphans of the server become our children, so that killSession finds
	// them (and they cannot escape to init).
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	srv := &server{l: l, out: &watchWriter{w: cfg.Stdout}}
	defer srv.unpin()
	// The run's cgroup first: the helper is born in it (so nothing of the
	// server ever runs outside it), which is cheaper than moving it in.
	lf, err := l.newLife()
	if err != nil {
		var le *LimitsError
		if errors.As(err, &le) {
			l.lifeLayer = &le.layer
			// The refusal's record names the layers, which need the ruleset.
			_, _ = l.resolve("")
			_ = l.publish(context.WithoutCancel(ctx), l.record(schema.PhaseExit, start, 0, -1, schema.ExitRefusedKernel))
		}
		return err
	}
	srv.life = lf
	ly := lf.layer()
	l.lifeLayer = &ly
	closeLife := sync.OnceFunc(func() {
		if cerr := lf.close(); cerr != nil {
			fmt.Fprintf(cfg.Stderr, "mcpwarden: WARNING: the run's cgroup: %v\n", cerr)
		}
	})
	defer closeLife()
	// With a network grant, the run's group refuses link-local
	// destinations before anything of the server can run in it.
	if err := l.denyLinkLocal(lf); err != nil {
		// The refusal's record names the layers, which need the ruleset.
		_, _ = l.resolve("")
		if perr := l.publish(context.WithoutCancel(ctx), l.record(schema.PhaseExit, start, 0, -1, schema.ExitRefusedKernel)); perr != nil {
			return fmt.Errorf("%w (and: %v)", err, perr)
		}
		return err
	}
	// The helper is started (a clone into the run's namespaces and cgroup,
	// then its exec: the forking thread waits for that) while this
	// goroutine makes the run's private temp dir, resolves the server's
	// runtime profile and derives its ruleset, none of which depends on
	// it. It execs nothing before launch sends it the go-ahead.
	// What the namespaces are as planned: spawn changes l.iso only when the
	// kernel refuses them (iso.degrade, which turns them all off), never
	// this copy, which the plan is encoded from while the helper's clone
	// finishes (below).
	planned := *l.iso
	if !planned.cInit() {
		warmSpecJSON()
	}
	spawned := make(chan spawnResult, 1)
	go func() {
		h, err := srv.spawn()
		spawned <- spawnResult{h, err}
	}()
	// The walk of the scope for secrets to mask runs meanwhile too.
	walked := make(chan *secretMasks, 1)
	go func() {
		if cfg.Mode != schema.ModeEnforce {
			walked <- nil
			return
		}
		walked <- secretWalk(cfg.Scope, l.secretRE, l.unmaskRE, cfg.SecretWalkLimit)
	}()
	walkDone := false
	defer func() {
		if !walkDone {
			<-walked
		}
	}()
	var h *pending
	spawnDone, launched := false, false
	defer func() {
		switch {
		case !spawnDone:
			if r := <-spawned; r.err == nil {
				r.h.kill()
			}
		case h != nil && !launched:
			h.kill()
		}
	}()
	tmp, err := os.MkdirTemp("", "mcpwarden-run-")
	if err != nil {
		return fmt.Errorf("create the run's private temp dir: %w", err)
	}
	// The helper refuses rule paths with symlinks in them; $TMPDIR may have one.
	if real, err := filepath.EvalSymlinks(tmp); err == nil {
		tmp = real
	}
	removeTmp := sync.OnceFunc(func() { _ = os.RemoveAll(tmp) })
	defer removeTmp()
	srv.tmp = tmp
	rs, err := l.resolve(tmp)
	if err != nil {
		_ = l.publish(context.WithoutCancel(ctx), l.record(schema.PhaseExit, start, 0, -1, schema.ExitStartFailed))
		return err
	}
	if lf.grp != nil {
		// The run has its own cgroup: its runtime reads that cgroup's limits
		// (Go's GOMAXPROCS, libuv's constrained memory), not the launcher's.
		h := lf.grp.Handle()
		dirs := []string{h.V2}
		for _, d := range h.V1 {
			dirs = append(dirs, d)
		}
		l.cgroupFiles = runtimeprofile.LimitFilesIn(dirs)
		rs.AddRuntimeFiles(l.cgroupFiles, "the CPU and memory limits of the run's own cgroup")
	}
	m := <-walked
	walkDone = true
	l.setSecrets(m)
	l.launchSecrets = m
	// The run's init gets the binary plan, which does not depend on the
	// helper process: it is encoded while the helper's clone into the
	// namespaces and its exec finish (which the init then waits for
	// instead of the encoding), from the namespaces as planned, and used
	// only when the clone made them as planned (sendSpec).
	var plan []byte
	if planned.cInit() {
		if b, err := sandbox.EncodePlan(l.specWith(&planned, rs, srv.env(), tmp)); err == nil {
			plan = b
		}
	}
	// The helper PrepareLife is cloning gets it at once, in its pipe, when
	// the run takes that helper over: the init reads it right after its
	// exec, not once this goroutine has heard that the clone returned.
	// (From the namespaces as planned: spawn may be turning them off.)
	cfg.Life.sendPlanAhead(l.helperPlanWith(&planned), plan)
	sp := <-spawned
	spawnDone = true
	if sp.err != nil {
		var ie *IsolationError
		if errors.As(sp.err, &ie) {
			if rerr := RecordRefusal(ctx, *cfg, schema.ExitRefusedKernel, l.decision.ABI); rerr != nil {
				return fmt.Errorf("%w (and: %v)", sp.err, rerr)
			}
		}
		return sp.err
	}
	h = sp.h
	if w := secretWarning(l.secretsLayer()); w != "" {
		fmt.Fprintln(cfg.Stderr, w)
	}
	if w := homeWriteWarning(cfg.Scope, os.Getenv("HOME"), "/etc/passwd"); w != "" {
		fmt.Fprintln(cfg.Stderr, w)
	}
	if cfg.Mode == schema.ModeEnforce && cfg.Scope.AllowIOUring {
		fmt.Fprintln(cfg.Stderr, "mcpwarden: WARNING: the scope allows io_uring (allow_io_uring): its operations pass every argument check of the seccomp filter (socket families, vsock to the hypervisor included, extended attributes and ACLs, set-id bits on new files); Landlock, the namespaces and the destination filter still hold")
	}
	// The start record (its layers are known now that the namespaces were
	// made or refused) is written and fsync'd while the helper gets its
	// spec and sets up its namespaces and root; the go-ahead waits for it.
	recorded := make(chan error, 1)
	go func() { recorded <- l.publish(ctx, l.record(schema.PhaseStart, start, 0, 0, "")) }()
	// The watcher starts meanwhile too; the go-ahead waits for it, so that
	// from the server's first instruction on, a SIGKILLed launcher still
	// takes the whole run with it.
	watching := make(chan error, 1)
	go func() { watching <- lf.startWatcher(cfg.HelperPath, cfg.Stderr, l.pidNamespace) }()
	watched := false
	defer func() { // before lf.close, which stops the watcher
		if !watched {
			<-watching
		}
	}()
	if err := srv.sendSpec(h, rs, plan); err != nil {
		if <-recorded == nil {
			_ = l.publish(context.WithoutCancel(ctx), l.record(schema.PhaseExit, start, 0, -1, schema.ExitStartFailed))
		}
		return err
	}
	if err := <-recorded; err != nil {
		return err
	}
	if l.decision.Degraded {
		fmt.Fprintf(cfg.Stderr, "mcpwarden: WARNING: running DEGRADED (--best-effort): %s; the fence does not enforce these\n", l.decision.Reason())
	}
	if cfg.Mode == schema.ModeAudit {
		fmt.Fprintln(cfg.Stderr, "mcpwarden: WARNING: --mode audit: the server runs WITHOUT the fence")
	}
	if len(l.droppedEnv) > 0 {
		fmt.Fprintf(cfg.Stderr, "mcpwarden: not passing %s to the server (credentials or variables that change what its runtime loads); pass one with --env NAME\n", strings.Join(l.droppedEnv, ", "))
	}
	if lf.report.State != cgroup.On {
		fmt.Fprintf(cfg.Stderr, "mcpwarden: WARNING: the run's cgroup is %s: %s\n", lf.report.State, lf.report.Reason)
	}
	watched = true
	if err := <-watching; err != nil {
		_ = l.publish(context.WithoutCancel(ctx), l.record(schema.PhaseExit, start, 0, -1, schema.ExitStartFailed))
		return &StartError{Err: err}
	}

	launched = true
	// The mediator's own set-up starts with the go-ahead (launch), not
	// after the server's start has been reported.
	prep, _ := cfg.Mediator.(Preparer)
	prepare := func() {}
	if prep != nil {
		prepare = prep.Prepare
	}
	// Nothing of the server runs before the go-ahead: what changes in the
	// write scope from now on may be its doing (planted.go). The kernel's
	// coarse clock, as inode times are.
	l.secretsMu.Lock()
	l.plantedSince = plantedClock()
	l.secretsMu.Unlock()
	p, err := srv.launch(ctx, h, rs, prepare)
	if err != nil {
		if prep != nil {
			prep.Abandon()
		}
		_ = l.publish(context.WithoutCancel(ctx), l.record(schema.PhaseExit, start, 0, -1, schema.ExitStartFailed))
		return err
	}
	srv.cur = p
	stopReaping := make(chan struct{})
	reaped := make(chan struct{})
	go func() { defer close(reaped); srv.reapOrphans(stopReaping) }()
	code, reason, auditErr := srv.supervise(ctx)
	close(stopReaping)
	<-reaped
	// The run's processes are gone, so the server's stderr ends: its copier
	// writes what it held and how much it dropped before Run returns (a
	// launcher that exited first lost that line: TestServerStderrFlood
	// failed 1 time in 4). Bounded, as is the wait below, in case the pipe
	// outlives the run.
	srv.mu.Lock()
	cur := srv.cur
	srv.mu.Unlock()
	select {
	case <-cur.stderrDone:
	case <-time.After(2 * time.Second):
	}
	l.reportLimitHits(lf.stats())
	// Nothing of the run is left (supervise killed its cgroup): the temp
	// dir, the cgroup and the watcher go while the exit record is written
	// and synced, and Run returns once both are done.
	cleaned := make(chan struct{})
	go func() {
		defer close(cleaned)
		removeTmp()
		closeLife()
	}()
	defer func() { <-cleaned }()
	// A server that exited with an error before it answered anything, after
	// the fence denied it a path it names on stderr, could not start under
	// the fence: say which path and what grants it, and exit 70.
	var startErr *StartError
	if code != 0 && (reason == schema.ExitExited || reason == schema.ExitSignaled) && !srv.out.wrote.Load() {
		srv.mu.Lock()
		last := srv.cur
		srv.mu.Unlock()
		select {
		case <-last.stderrDone:
		case <-time.After(2 * time.Second):
		}
		if d, ok := diagnoseStart(last.stderrTail.String(), rs, cfg.Scope, envValue(l.env, "PATH")); ok {
			startErr = &StartError{Path: d.Path, Hint: d.Hint, Err: fmt.Errorf("the server exited with status %d before it answered: %s", code, d.What)}
			reason = schema.ExitStartFailed
		}
	}
	// Names the server may have planted in its write scope: no layer
	// refuses them, so they are looked for now that it is gone.
	l.checkPlanted("at the run's end")
	l.identityWritten() // the identified record goes first
	rec := l.record(schema.PhaseExit, start, srv.rootPID(), code, reason)
	if perr := l.publish(context.WithoutCancel(ctx), rec); perr != nil {
		return fmt.Errorf("%w (the server had exited with status %d)", perr, code)
	}
	if startErr != nil {
		return startErr
	}
	switch reason {
	case schema.ExitAuditFailed:
		return fmt.Errorf("%w (the server was stopped; its status was %d)", auditErr, code)
	case schema.ExitScopeExpired:
		return fmt.Errorf("%w: the run was stopped (the server's status was %d)", ErrScopeExpired, code)
	case schema.ExitScopeRevoked:
		return fmt.Errorf("%w: the run was stopped (the server's status was %d)", ErrScopeRevoked, code)
	}
	if code != 0 {
		e := &ExitError{Code: code}
		if reason == schema.ExitSignaled && code > 128 {
			e.Signal = syscall.Signal(code - 128)
		}
		return e
	}
	return nil
}

func (l *Launcher) record(phase schema.LaunchPhase, start time.Time, pid, code int, reason schema.ExitReason) schema.Event {
	now := l.cfg.Now()
	ev := l.cfg.Origin.NewEvent(schema.KindLaunch, l.cfg.RunID, l.cfg.Scope.ScopeID, l.cfg.Scope.Hash, now)
	ev.Launch = &schema.Launch{
		Phase:          phase,
		Mode:           l.cfg.Mode,
		LandlockABI:    l.decision.ABI,
		Degraded:       l.decision.Degraded,
		DegradedReason: l.decision.Reason(),
		ServerExe:      filepath.Base(l.cfg.Command[0]),
		RootPID:        pid,
		ExitStatus:     code,
		ExitReason:     reason,
		Layers:         l.layers(),
		ServerUID:      l.iso.serverUID,
		FileOwner:      l.iso.fileOwner(),
	}
	if phase == schema.PhaseExit && code == -1 {
		ev.Launch.ServerUID = -1 // it never started
	}
	if phase == schema.PhaseExit {
		ev.Launch.DurationMS = now.Sub(start).Milliseconds()
	}
	l.withIdentity(ev.Launch)
	return ev
}

// layers are the fence's layers as this run gets them, in
// schema.LayerNames order.
func (l *Launcher) layers() []schema.Layer {
	if l.base == nil {
		return nil // refused before a ruleset existed
	}
	out := []schema.Layer{l.landlockLayer(), SeccompLayer(l.cfg.Mode, SeccompOptions(l.cfg.Scope, l.base))}
	out = append(out, l.iso.layers()...)
	if l.netDest != "" {
		netDestLayer(out, l.netDest)
	}
	if l.lifeLayer != nil {
		out = append(out, *l.lifeLayer)
	}
	return append(out, l.secretsLayer())
}

// secretsLayer is the run's secrets layer (secretmask.go), of its last
// walk; once a check found names planted in the write scope (or could not
// look everywhere), degraded and saying so (planted.go).
func (l *Launcher) secretsLayer() schema.Layer {
	l.secretsMu.Lock()
	defer l.secretsMu.Unlock()
	ly := secretsLayer(l.cfg.Mode, l.secrets, l.iso.flags != 0)
	if l.planted != nil {
		if note := l.planted.layerNote(); note != "" {
			if ly.State == schema.LayerOn {
				ly.State = schema.LayerDegraded
			}
			ly.Reason = note + "," + ly.Reason
		}
	}
	return ly
}

// checkPlanted looks for names planted in the write scope since the last
// check (planted.go), warns on stderr and keeps the count for the exit
// record's secrets layer. when says at which point of the run.
func (l *Launcher) checkPlanted(when string) {
	if l.cfg.Scope == nil || l.cfg.Scope.AccessMode != schema.AccessWrite || l.secretRE == nil {
		return
	}
	l.secretsMu.Lock()
	since := l.plantedSince
	l.plantedSince = plantedClock()
	l.secretsMu.Unlock()
	if since.IsZero() {
		return // the server never got its go-ahead
	}
	p := plantedCheck(l.cfg.Scope, l.secretRE, l.unmaskRE, since, l.cfg.SecretWalkLimit)
	p.warn(l.cfg.Stderr, when)
	l.secretsMu.Lock()
	defer l.secretsMu.Unlock()
	if l.planted == nil {
		l.planted = &planted{}
	}
	l.planted.add(p)
}

func (l *Launcher) setSecrets(m *secretMasks) {
	l.secretsMu.Lock()
	defer l.secretsMu.Unlock()
	l.secrets = m
}

// rewalkSecrets walks the scope for secrets again, for a restart of the
// server: its new root masks what matches now (a .env the user created
// since launch, a file renamed to a secret's name), with the launch's
// bounds, and everything the launch masked. A layer that becomes
// degraded warns again.
func (l *Launcher) rewalkSecrets() {
	if l.cfg.Mode != schema.ModeEnforce {
		return
	}
	before := l.secretsLayer()
	m := secretWalk(l.cfg.Scope, l.secretRE, l.unmaskRE, l.cfg.SecretWalkLimit)
	m.keepMasks(l.launchSecrets)
	l.setSecrets(m)
	if after := l.secretsLayer(); after != before {
		if w := secretWarning(after); w != "" {
			fmt.Fprintln(l.cfg.Stderr, w)
		}
	}
}

// landlockLayer: on at the fence's full ABI; degraded with --best-effort
// on an older kernel (the reason lists what is missing); off in audit mode
// or without Landlock.
func (l *Launcher) landlockLayer() schema.Layer {
	ly := schema.Layer{Name: schema.LayerLandlock, State: schema.LayerOn, Reason: "abi" + strconv.Itoa(l.decision.ABI)}
	switch {
	case l.cfg.Mode != schema.ModeEnforce:
		ly.State, ly.Reason = schema.LayerOff, "audit_mode"
	case l.decision.ABI == 0:
		ly.State, ly.Reason = schema.LayerOff, "kernel_without_landlock"
	case l.decision.Degraded:
		ly.State, ly.Reason = schema.LayerDegraded, l.decision.Reason()
	}
	return ly
}

// publish writes events to the audit log, then to the sink; either failing
// is ErrAudit.
func (l *Launcher) publish(ctx context.Context, ev schema.Event) error {
	events := []schema.Event{ev}
	if err := l.cfg.AuditLog.Publish(ctx, events); err != nil {
		return fmt.Errorf("%w: %v; the run is refused rather than unrecorded: fix the log or pass --audit-log FILE", ErrAudit, err)
	}
	if l.cfg.Sink != nil {
		if err := l.cfg.Sink.Publish(ctx, events); err != nil {
			return fmt.Errorf("%w: sink: %v", ErrAudit, err)
		}
	}
	return nil
}

// SeccompOptions are the seccomp filter's options that follow from the
// scope and its ruleset. The fields saying which other layers are in force
// (namespaces, identity) stay false here: the layers that create them set
// them.
func SeccompOptions(scope *schema.CanonicalScope, rs *ruleset.Ruleset) seccomp.Options {
	return seccomp.Options{
		WriteScope:   scope.AccessMode == schema.AccessWrite,
		AllowIOUring: !rs.BlockIOUring,
		AllowUDP:     len(rs.ConnectTCP) > 0 || len(rs.BindTCP) > 0,
		AllowListen:  len(rs.BindTCP) > 0,
	}
}

// SeccompLayer is the seccomp layer's entry in a launch record: on; or
// degraded when the scope lets io_uring, whose operations bypass the
// filter's argument checks, through; off when the run is not enforced.
func SeccompLayer(mode schema.RunMode, o seccomp.Options) schema.Layer {
	switch {
	case mode != schema.ModeEnforce:
		return schema.Layer{Name: schema.LayerSeccomp, State: schema.LayerOff, Reason: "audit_mode"}
	case o.AllowIOUring:
		return schema.Layer{Name: schema.LayerSeccomp, State: schema.LayerDegraded, Reason: "io_uring_allowed"}
	}
	return schema.Layer{Name: schema.LayerSeccomp, State: schema.LayerOn}
}

// spec turns a ruleset into what the helper applies; tmp is the run's
// private temp dir (the staging directory of its new root).
func (l *Launcher) spec(rs *ruleset.Ruleset, env []string, tmp string) *sandbox.Spec {
	return l.specWith(l.iso, rs, env, tmp)
}

// specWith is spec for the namespaces iso.
func (l *Launcher) specWith(iso *isolation, rs *ruleset.Ruleset, env []string, tmp string) *sandbox.Spec {
	argv := l.cfg.Command
	if l.profile.Argv != nil {
		argv = l.profile.Argv // npx/uvx: the installed package they would run
	}
	s := &sandbox.Spec{
		Exe:  l.profile.Exe,
		Argv: argv,
		Env:  env,
		Dir:  l.cfg.Dir,
	}
	if l.cfg.Mode != schema.ModeEnforce {
		return s
	}
	s.Enforce = true
	s.DropCaps = true
	s.Seccomp = true
	s.Filter = SeccompOptions(l.cfg.Scope, rs)
	if mb := l.limits.MaxFileSizeMB; mb > 0 {
		s.Limits = sandbox.Limits{FileSizeBytes: uint64(mb) << 20, TmpSizeBytes: uint64(mb) << 20}
	}
	s.Limits.OpenFiles = l.openFiles
	s.NS = iso.namespaces(rs, l.profile, tmp, l.cfg.Dir, int64(s.Limits.TmpSizeBytes))
	l.secretsMu.Lock()
	if s.NS != nil && l.secrets != nil {
		s.NS.Root.Mounts = append(s.NS.Root.Mounts, l.secrets.masks...)
	}
	l.secretsMu.Unlock()
	s.Identity = iso.identity
	// The filter leaves to the namespaces what they already close. With
	// the minimal root, every mount but the write scope's and TMPDIR's is
	// read-only, so metadata changes through a descriptor reach nothing
	// else, whoever owns the files (DedicatedUID's concern).
	s.Filter.IPCNamespace = s.NS != nil
	s.Filter.MountNamespace = s.NS != nil
	s.Filter.DedicatedUID = s.NS != nil
	s.Filter.PIDNamespace = s.NS != nil
	// Only the server's own user namespace, owned by the dedicated uid,
	// keeps the run's per-user counters off every other process's.
	s.Filter.OwnUserCounters = s.NS != nil && s.NS.Server != nil
	s.ABI = l.decision.ABI
	fs, net, scoped := ruleset.Handled(s.ABI)
	s.HandledFS, s.HandledNet, s.Scoped = uint64(fs), uint64(net), uint64(scoped)
	if s.ABI >= 7 {
		// Denials after execve are logged only when asked; the daemon reads them.
		s.RestrictFlag = ll.FlagRestrictSelfLogNewExecOn
	}
	for _, r := range rs.Rules {
		if a := uint64(r.Access) & s.HandledFS; a != 0 {
			s.Paths = append(s.Paths, sandbox.PathRule{Path: r.Path, Access: a})
		}
	}
	if s.HandledNet != 0 {
		for _, p := range rs.ConnectTCP {
			s.Ports = append(s.Ports, sandbox.PortRule{Port: p, Access: ll.AccessNetConnectTCP})
		}
		for _, p := range rs.BindTCP {
			s.Ports = append(s.Ports, sandbox.PortRule{Port: p, Access: ll.AccessNetBindTCP})
		}
	}
	return s
}

// server is the Upstream: the current server process, replaced on Restart.
// Lock order: server.mu only.
type server struct {
	l    *Launcher
	tmp  string
	life *life

	mu         sync.Mutex
	cur        *proc
	restarting bool
	firstPID   int
	pins       []*os.File   // /proc/PID of each server process, held for the run
	out        *watchWriter // the client's stdout; says whether the server answered
}

// unpin closes the /proc/PID descriptors held for the run.
func (s *server) unpin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.pins {
		f.Close()
	}
	s.pins = nil
}

type proc struct {
	cmd        *exec.Cmd
	stdin      *os.File
	stdout     *os.File
	done       chan struct{} // closed once cmd.Wait returned and the helper's last status was read
	stderrTail *tailBuffer   // the last lines of the server's stderr, to explain a failed start
	stderrDone chan struct{} // closed when the server's stderr is drained
	// exit is the server's status as the run's init reported it (the
	// helper's own status then says nothing about a signal); closed
	// exitRead means it was read, or there is none to read.
	exit     *sandbox.Status
	exitRead chan struct{}
	exitOnce sync.Once
	// ended is closed when the server's end is known: the run's init
	// reported its status (the init and the rest of the run may still be
	// going down), or done closed.
	ended     chan struct{}
	endedOnce sync.Once
}

// exitDone says there is no (more) status to read from the helper.
func (p *proc) exitDone() { p.exitOnce.Do(func() { close(p.exitRead) }) }

func (p *proc) markEnded() { p.endedOnce.Do(func() { close(p.ended) }) }

// exited is what supervise waits for: with a cgroup, the server's reported
// status, after which the cgroup's kill takes down whatever is left and
// waits until nothing of the run runs (the init's reaping, which includes
// tearing down its pid namespace, is not waited for); without a cgroup,
// nothing tells that the run is gone but the helper's own exit.
func (s *server) exited(p *proc) <-chan struct{} {
	if s.life == nil || s.life.grp == nil {
		return p.done
	}
	return p.ended
}

func (s *server) Stdin() io.Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.stdin
}

func (s *server) Stdout() io.Reader {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.stdout
}

func (s *server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.done
}

func (s *server) rootPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstPID
}

// Restart stops the current server and starts a new one whose scope rules
// are narrowed to paths.
func (s *server) Restart(ctx context.Context, paths []schema.CanonicalPath) error {
	rs, err := ruleset.Derive(s.l.cfg.Scope, ruleset.Input{Profile: s.l.profile, TmpDir: s.tmp, AllowRuntime: s.l.cfg.AllowRuntime})
	if err != nil {
		return err
	}
	rs.AddRuntimeFiles(s.l.cgroupFiles, "the CPU and memory limits of the run's own cgroup")
	narrowed, err := rs.Narrow(paths)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.cur
	s.restarting = true
	s.mu.Unlock()
	// The new root masks the secrets as they are now, not at launch.
	s.l.rewalkSecrets()
	// The old, wider tree is gone, all of it, before the narrower one starts.
	if err := s.stop(old); err != nil {
		s.mu.Lock()
		s.restarting = false
		s.mu.Unlock()
		return fmt.Errorf("restart: %w; the narrower server was not started", err)
	}
	// What the old tree planted in the write scope, reported now (the
	// narrower tree may not reach it any more).
	s.l.checkPlanted("before the server's restart")
	p, err := s.start(ctx, narrowed)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.restarting = false
		return err
	}
	s.cur = p
	s.restarting = false
	return nil
}

// stop ends p: stdin EOF, then SIGTERM, then SIGKILL, each after StopGrace.
// Then every process of the run is killed (the whole cgroup), and stop
// returns once they are gone, or an error if some would not die.
func (s *server) stop(p *proc) error {
	pid := p.cmd.Process.Pid
	p.stdin.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-p.done:
			return s.life.kill(pid, pid)
		case <-time.After(s.l.cfg.StopGrace):
		}
		_ = p.cmd.Process.Signal(sig)
	}
	<-p.done
	return s.life.kill(pid, pid)
}

// end kills the whole run at once (the scope expired or was revoked: no
// grace), and waits for the server process.
func (s *server) end(p *proc) {
	pid := p.cmd.Process.Pid
	if err := s.life.kill(pid, pid); err != nil {
		s.l.cfg.Logger.Warn("processes of the run did not die", "run_id", s.l.cfg.RunID, "err", err)
	}
	<-p.done
}

// pending is a helper process that is starting up and waits for its spec.
type pending struct {
	p          *proc
	specW      *os.File
	ahead      *specPipe // its spec pipe, when made before its clone (PrepareLife)
	statusR    *os.File
	status     *bufio.Reader
	errR       *os.File
	stderrDone chan struct{}
}

// kill ends a helper that will not get the go-ahead: it never execs anything.
func (h *pending) kill() {
	h.specW.Close()
	h.statusR.Close()
	h.p.exitDone()
	_ = h.p.cmd.Process.Kill()
	<-h.p.done
	h.p.stdin.Close()
	h.p.stdout.Close()
}

// spawnResult is what spawn returned, from the goroutine that ran it.
type spawnResult struct {
	h   *pending
	err error
}

// spawn starts the fence helper, in the run's namespaces. It boots (a Go
// runtime start-up) while the launcher derives the ruleset and writes the
// start record; it does nothing until it gets its spec, and execs nothing
// before launch sends the go-ahead. When the kernel refuses the namespaces
// the run goes on without them and says so, unless they are required.
func (s *server) spawn() (*pending, error) {
	cfg, iso := &s.l.cfg, s.l.iso
	// The helper PrepareLife cloned into this run's group while the
	// configuration was read, when it is the helper this would start.
	if h := cfg.Life.takeHelper(s.l.helperPlan()); h != nil && cfg.Stderr == io.Writer(os.Stderr) {
		return s.spawned(h), nil
	} else if h != nil {
		h.kill()
	}
	// The exec stage goes to the helper opened: the file checked is the
	// file the run's init execs.
	stage, err := openExecStage(cfg.HelperPath)
	if err != nil {
		return nil, err
	}
	defer stage.Close()
	h, err := spawnHelper(cfg.HelperPath, stage, cfg.Dir, cfg.Stderr, filepath.Base(cfg.Command[0]), s.life.grp, iso, nil)
	if err != nil && iso.flags != 0 {
		if derr := iso.degrade(err, cfg.Scope); derr != nil {
			return nil, derr
		}
		fmt.Fprintf(cfg.Stderr, "mcpwarden: WARNING: no namespaces (%s: %v); the server runs with Landlock and seccomp only, and sees the host's mounts, processes and network; --require-namespaces refuses instead\n", iso.nsReason, errors.Unwrap(err))
		h, err = spawnHelper(cfg.HelperPath, stage, cfg.Dir, cfg.Stderr, filepath.Base(cfg.Command[0]), s.life.grp, iso, nil)
	}
	if err != nil {
		return nil, err
	}
	return s.spawned(h), nil
}

// spawned notes the helper h of this run.
func (s *server) spawned(h *pending) *pending {
	// Under the init of its own pid namespace, which dies with the
	// launcher, the run needs no watcher to end with a SIGKILLed launcher.
	s.l.pidNamespace = s.l.iso.flags&unix.CLONE_NEWPID != 0
	s.mu.Lock()
	if s.firstPID == 0 {
		s.firstPID = h.p.cmd.Process.Pid
	}
	s.mu.Unlock()
	return h
}

// specPipe is the spec pipe of the helper PrepareLife clones, made before
// the clone, so that Run can write the run's plan into it while the clone
// and the init's exec are still under way (PreparedLife.sendPlanAhead):
// the pipe holds it until the init reads it, and the init no longer waits
// for this process to hear that the clone returned.
type specPipe struct {
	r, w *os.File
	sent atomic.Bool // the whole plan is in the pipe
}

func newSpecPipe() (*specPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("spec pipe: %w", err)
	}
	return &specPipe{r: r, w: w}, nil
}

// close closes both ends (a helper that was not cloned).
func (sp *specPipe) close() {
	sp.r.Close()
	sp.w.Close()
}

// spawnHelper starts helperPath as the fence helper, with the exec stage
// stage, in dir, inside the
// run's cgroup grp when there is one, in the namespaces iso asks for,
// copying its stderr (later: the server's) to stderr as lines marked with
// name and its pid (package serverlog).
//
// ahead, when not nil, is the spec pipe to use (made by PrepareLife before
// the clone); spawnHelper closes it on failure, as its own pipes.
func spawnHelper(helperPath string, stage *os.File, dir string, stderr io.Writer, name string, grp *cgroup.Group, iso *isolation, ahead *specPipe) (_ *pending, err error) {
	var files []*os.File
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	pipe := func(what string) (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("%s pipe: %w", what, err)
		}
		files = append(files, r, w)
		return r, w, nil
	}
	var specR, specW *os.File
	if ahead != nil {
		specR, specW = ahead.r, ahead.w
		files = append(files, specR, specW)
	} else if specR, specW, err = pipe("spec"); err != nil {
		return nil, err
	}
	statusR, statusW, err := pipe("status")
	if err != nil {
		return nil, err
	}
	inR, inW, err := pipe("stdin")
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe("stdout")
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe("stderr")
	if err != nil {
		return nil, err
	}
	// Its own session: no controlling terminal to inject input into, and
	// terminal signals reach only the launcher, which forwards them.
	sys := &syscall.SysProcAttr{Setsid: true, Cloneflags: iso.flags}
	if iso.userNS {
		// Unprivileged: the helper is uid 0 of a user namespace of its own,
		// which is this user on the host, and owns the other namespaces.
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd := &exec.Cmd{
		Path: helperPath,
		Args: []string{sandbox.HelperName},
		// GOGC=off: the helper lives for a millisecond; collecting garbage
		// during its start-up only delays the server.
		Env:         []string{"GOGC=off", "GOMAXPROCS=1"},
		Dir:         dir,
		Stdin:       inR,
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  []*os.File{specR, statusW, stage}, // fds 3, 4 and 5 (sandbox.ExecStageFD)
		SysProcAttr: sys,
	}
	if iso.cInit() {
		// With the run's own pid namespace, its init is the C program,
		// exec'd from the descriptor that was checked (the child's fd 5,
		// which the init closes first) and fed the binary plan.
		cmd.Path = "/proc/self/fd/" + strconv.Itoa(sandbox.ExecStageFD)
		cmd.Args = []string{sandbox.InitName, sandbox.InitArg}
		cmd.Env = []string{}
	}
	p := &proc{cmd: cmd, stdin: inW, stdout: outR, done: make(chan struct{}), exitRead: make(chan struct{}), ended: make(chan struct{})}
	if err := startLocked(cmd, grp, p); err != nil {
		return nil, &StartError{Err: fmt.Errorf("start the fence helper: %w", err)}
	}
	// The child's ends now live in the child only.
	for _, f := range []*os.File{specR, statusW, inR, outW, errW} {
		f.Close()
	}
	files = nil
	tail := &tailBuffer{max: stderrTailSize}
	p.stderrTail = tail
	h := &pending{
		p:          p,
		specW:      specW,
		ahead:      ahead,
		statusR:    statusR,
		status:     bufio.NewReaderSize(statusR, 64<<10),
		errR:       errR,
		stderrDone: make(chan struct{}),
	}
	h.p.stderrDone = h.stderrDone
	prefix := serverlog.Prefix(name, cmd.Process.Pid)
	tail.prefix = prefix
	go func() {
		_ = serverlog.Copy(io.MultiWriter(stderr, tail), errR, prefix)
		errR.Close()
		close(h.stderrDone)
	}()
	return h, nil
}

// startLocked starts cmd (inside grp, when not nil) from a goroutine
// locked to its OS thread, which then waits for cmd (closing p.done once
// cmd.ProcessState is set and the helper's last status line was read):
// the helper's parent-death signal fires when the thread that forked it
// exits, not the process, so that thread must live as long as the helper
// and the server it becomes.
func startLocked(cmd *exec.Cmd, grp *cgroup.Group, p *proc) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := cmd.Start
		if grp != nil {
			start = func() error { return grp.Start(cmd) }
		}
		if err := start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		// The init's last word (the server's status) is in the pipe before
		// it exits.
		<-p.exitRead
		close(p.done)
		p.markEnded()
	}()
	return <-started
}

// env is the server's environment for a run whose private temp dir is tmp.
func (s *server) env() []string {
	env := append(append([]string(nil), s.l.env...), "HOME="+s.tmp, "TMPDIR="+s.tmp)
	for _, e := range s.l.profile.Env {
		if name, _, _ := strings.Cut(e, "="); envValue(env, name) == "" {
			env = append(env, e)
		}
	}
	return env
}

// pinProc, without the run's own pid namespace, pins the helper's /proc/PID
// entry for the run: the fence's rule on the server's own /proc entry
// binds to the inode of that directory, and procfs makes a new inode when
// an unused /proc/PID dentry has been evicted (memory pressure,
// drop_caches) and is looked up again. An open descriptor here, outside
// the fence, keeps the dentry and so the inode the rule names. It runs
// before the helper gets its spec: the helper builds its ruleset before
// the go-ahead. (With its own pid namespace, the run's init holds the
// server's entry in the run's /proc.)
func (s *server) pinProc(h *pending, rs *ruleset.Ruleset) {
	if s.l.iso.flags != 0 {
		return
	}
	pinned := []string{"/proc/" + strconv.Itoa(h.p.cmd.Process.Pid)}
	for _, r := range rs.Rules {
		// The same holds for every procfs entry a rule names.
		if hasPathPrefix(r.Path, "/proc") && !hasPathPrefix(r.Path, runtimeprofile.ProcSelf) {
			pinned = append(pinned, r.Path)
		}
	}
	for _, p := range pinned {
		if pin, err := os.OpenFile(p, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
			s.mu.Lock()
			s.pins = append(s.pins, pin)
			s.mu.Unlock()
		}
	}
}

// sendSpec sends the helper its spec for rs. plan, when not nil, is the
// binary plan for rs encoded ahead from the namespaces as planned: it is
// sent when the helper is the run's init (the namespaces were made as
// planned: spawn only ever turns them all off).
//
// A plan PrepareLife's helper already has in its pipe (Run wrote it ahead,
// PreparedLife.sendPlanAhead) is not sent again; it was the same plan,
// for the same namespaces, or the run is refused.
func (s *server) sendSpec(h *pending, rs *ruleset.Ruleset, plan []byte) error {
	s.pinProc(h, rs)
	if h.ahead != nil && h.ahead.sent.Load() {
		if !s.l.iso.cInit() || plan == nil {
			h.kill()
			return &StartError{Err: errors.New("the fence helper was sent a plan ahead that is not the run's")}
		}
		return nil
	}
	var spec []byte
	var err error
	if s.l.iso.cInit() && plan != nil {
		spec = plan
	} else if s.l.iso.cInit() {
		spec, err = sandbox.EncodePlan(s.l.spec(rs, s.env(), s.tmp))
	} else {
		spec, err = json.Marshal(s.l.spec(rs, s.env(), s.tmp))
		spec = append(spec, '\n')
	}
	if err != nil {
		h.kill()
		return fmt.Errorf("encode the fence helper's spec: %w", err)
	}
	if _, err := h.specW.Write(spec); err != nil {
		h.kill()
		return &StartError{Err: fmt.Errorf("send the fence helper its spec: %w", err)}
	}
	return nil
}

// launch runs BeforeExec, sends the go-ahead, calls afterGo (when the
// go-ahead was sent), waits for the helper to be ready and for the server
// to start (or for the helper to report why it could not).
func (s *server) launch(ctx context.Context, h *pending, rs *ruleset.Ruleset, afterGo func()) (*proc, error) {
	cfg := &s.l.cfg
	if cfg.BeforeExec != nil {
		if err := cfg.BeforeExec(withFence(ctx, rs), h.p.cmd.Process.Pid); err != nil {
			h.kill()
			return nil, fmt.Errorf("before exec: %w", err)
		}
	}
	// The go-ahead goes out before the helper says it is ready: it execs
	// nothing before it is ready itself and has the byte (a helper that
	// fails reports why instead of "ready"), and the byte waiting in its
	// pipe saves the launch one wake-up of this process between the
	// helper's "ready" and the server's exec.
	_, werr := h.specW.Write([]byte{sandbox.GoByte})
	h.specW.Close()
	if werr == nil && afterGo != nil {
		afterGo()
	}
	st, err := sandbox.ReadStatus(h.status)
	if err != nil || st.Stage != sandbox.StageReady {
		return nil, s.failed(h, st, err)
	}
	if werr != nil {
		h.kill()
		return nil, &StartError{Err: fmt.Errorf("start the fence helper: %w", werr)}
	}
	st, err = sandbox.ReadStatus(h.status)
	switch {
	case errors.Is(err, io.EOF):
		// A plain helper: the status pipe closed on exec.
		h.statusR.Close()
		h.p.exitDone()
		return h.p, nil
	case err == nil && st.Stage == sandbox.StageStarted:
		// The run's init: its last line will be the server's status.
		go func() {
			defer h.p.exitDone()
			defer h.statusR.Close()
			for {
				st, err := sandbox.ReadStatus(h.status)
				if err != nil {
					return
				}
				if st.Stage == sandbox.StageExit && h.p.exit == nil {
					h.p.exit = st
					h.p.markEnded()
				}
			}
		}()
		return h.p, nil
	}
	return nil, s.failed(h, st, err)
}

// failed collects a helper that reported st (or failed to report, err)
// instead of starting the server, and says why.
func (s *server) failed(h *pending, st *sandbox.Status, err error) error {
	h.specW.Close()
	if st == nil || !st.Failed() {
		msg := "the fence helper exited without saying why (its stderr is above)"
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			msg = err.Error()
		case st != nil:
			msg = fmt.Sprintf("the fence helper reported %q out of turn", st.Stage)
		}
		h.kill()
		return &StartError{Err: errors.New(msg)}
	}
	h.statusR.Close()
	h.p.exitDone()
	<-h.p.done
	<-h.stderrDone
	h.p.stdin.Close()
	h.p.stdout.Close()
	path := ""
	if st.Stage == sandbox.StageExec && (st.Errno == int(syscall.EACCES) || st.Errno == int(syscall.ENOENT)) {
		path = st.Path
	}
	if st.Stage == sandbox.StageLandlock && st.Path != "" {
		path = st.Path
	}
	if st.Stage == sandbox.StageRoot || st.Stage == sandbox.StageNamespaces {
		return &StartError{Path: path, Err: fmt.Errorf("%w (setting up the run's namespaces failed; --no-namespaces runs without them)", st)}
	}
	return &StartError{Path: path, Err: st}
}

// start is spawn, the spec, then launch, for Restart.
func (s *server) start(ctx context.Context, rs *ruleset.Ruleset) (*proc, error) {
	h, err := s.spawn()
	if err != nil {
		return nil, err
	}
	if err := s.sendSpec(h, rs, nil); err != nil {
		return nil, err
	}
	return s.launch(ctx, h, rs, nil)
}

// supervise forwards signals, runs the mediator and waits for the server to
// exit. It returns the exit code (128+signal when signaled), a reason class,
// and the error of a mediator that stopped because its records could not be
// kept (reason audit_failed).
func (s *server) supervise(ctx context.Context) (int, schema.ExitReason, error) {
	cfg := &s.l.cfg
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clientEOF := make(chan struct{})
	in := &eofReader{r: cfg.Stdin, eof: clientEOF}
	mdone := make(chan error, 1)
	go func() { mdone <- cfg.Mediator.Mediate(mctx, in, s.out, s) }()
	// The scope's validity ends the run: the server is stopped at NotAfter.
	expiry := time.NewTimer(time.Until(cfg.Scope.NotAfter))
	defer expiry.Stop()
	var reason schema.ExitReason
	var auditErr error // the mediator stopped because its records could not be kept

	for {
		s.mu.Lock()
		p := s.cur
		s.mu.Unlock()
		select {
		case <-s.exited(p):
		case sig := <-cfg.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = p.cmd.Process.Signal(ss)
			}
			continue
		case <-clientEOF:
			clientEOF = nil // wait for the server to follow the EOF, then escalate
			go s.escalate(p)
			continue
		case err := <-mdone:
			// The mediator is done: the client went away (a closed stdout
			// ends the relay with EPIPE), the server closed its output, or
			// the mediator failed. The server must not run on unattended.
			mdone = nil // ended: the drain below has nothing to wait for
			reason, auditErr = mediatorEnd(err)
			if reason == schema.ExitScopeExpired || reason == schema.ExitScopeRevoked {
				// The mediator stopped the run because the scope ended:
				// nothing of it may run on, not even for a grace period.
				s.end(p)
				break
			}
			if err != nil && reason == "" && !errors.Is(err, context.Canceled) {
				cfg.Logger.Warn("mediator ended with an error; stopping the server", "run_id", cfg.RunID, "err", err)
			}
			p.stdin.Close()
			go s.escalate(p)
			continue
		case <-ctx.Done():
			go func() { _ = s.stop(p) }()
			<-p.done
		case <-expiry.C:
			cfg.Logger.Warn("the scope expired; stopping the server", "run_id", cfg.RunID, "scope_id", cfg.Scope.ScopeID)
			reason = schema.ExitScopeExpired
			s.end(p)
		}
		s.mu.Lock()
		restarting := s.restarting || s.cur != p
		s.mu.Unlock()
		if restarting {
			s.waitRestart(p)
			continue
		}
		// What is left of the run goes first: the mediator's last records
		// are written meanwhile, and a leftover holding the server's stdout
		// open cannot delay its end.
		if err := s.life.kill(p.cmd.Process.Pid, p.cmd.Process.Pid); err != nil {
			cfg.Logger.Warn("processes of the run did not die", "run_id", cfg.RunID, "err", err)
		}
		// Let the mediator drain what the server wrote before it exited.
		// Why it stopped counts even when the server's exit was seen first
		// (a mediator that stops the run for a revoked scope closes the
		// server's stdin, and the server may be gone before it returns).
		if mdone != nil {
			select {
			case err := <-mdone:
				if reason == "" {
					reason, auditErr = mediatorEnd(err)
				}
			case <-time.After(2 * time.Second):
			}
		}
		cancel()
		p.stdout.Close()
		p.stdin.Close()
		code, why := exitCode(p) // the init's report (set before ended closed), else Wait's (before done)
		if reason != "" {
			why = reason
		}
		return code, why, auditErr
	}
}

// mediatorEnd is the exit reason a mediator's ending error stands for —
// the scope ended, or its records could not be kept (and it denied every
// call since: the run ends as failed, whatever the server's own status,
// never as a clean exit) — with the audit error for the latter.
func mediatorEnd(err error) (schema.ExitReason, error) {
	if r := scopeEnd(err); r != "" {
		return r, nil
	}
	if errors.Is(err, ErrAudit) {
		return schema.ExitAuditFailed, err
	}
	return "", nil
}

// waitRestart waits until Restart replaced p (or gave up).
func (s *server) waitRestart(p *proc) {
	for {
		s.mu.Lock()
		done := !s.restarting || s.cur != p
		s.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// escalate gives a server whose client went away StopGrace to exit on its
// own, then SIGTERM, then SIGKILL (the MCP stdio shutdown sequence).
func (s *server) escalate(p *proc) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-p.done:
			return
		case <-time.After(s.l.cfg.StopGrace):
		}
		_ = p.cmd.Process.Signal(sig)
	}
}

func exitCode(p *proc) (int, schema.ExitReason) {
	if e := p.exit; e != nil {
		if e.Signal > 0 {
			return 128 + e.Signal, schema.ExitSignaled
		}
		return e.Code, schema.ExitExited
	}
	st := p.cmd.ProcessState
	if st == nil {
		return -1, schema.ExitUnknown
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), schema.ExitSignaled
	}
	return st.ExitCode(), schema.ExitExited
}

// killSession kills what the server left behind: every process still in
// its session (the helper made the server a session leader, and the seccomp
// filter stops descendants from starting a session of their own), so no
// fenced process outlives the run or its scope. The launcher is a child
// subreaper (see Run), so the server's orphans are the launcher's children:
// the walk starts there instead of scanning all of /proc.
func killSession(sid int) {
	for round := 0; round < 5; round++ {
		var victims []int
		for _, child := range childrenOf("self") {
			if s, ok := sessionOf(child); ok && s == sid {
				victims = append(victims, descendants(child)...)
			}
		}
		if len(victims) == 0 {
			return
		}
		for _, pid := range victims {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range victims {
			// Reap those that were re-parented to us; others are reaped by
			// their own parents, which are being killed too.
			_, _ = syscall.Wait4(pid, nil, syscall.WNOHANG, nil)
		}
		time.Sleep(time.Millisecond)
	}
}

// reapOrphans reaps, while the run lives, the server's orphans that
// exited: the launcher is their subreaper (see Run), and without a pid
// namespace of the run each one stays the launcher's zombie until the run
// ends, one per fork-and-exit. Without a cgroup nothing bounds them (uid 0
// is exempt from RLIMIT_NPROC), and a server that forks and exits over and
// over would take every pid of the host. On each SIGCHLD, the launcher's
// zombie children in the current server's session are reaped; the session
// leader (the helper, reaped by its exec.Cmd) never is here.
func (s *server) reapOrphans(stop <-chan struct{}) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	for {
		select {
		case <-stop:
			return
		case <-ch:
		}
		s.mu.Lock()
		leader := s.cur.cmd.Process.Pid
		s.mu.Unlock()
		for _, child := range childrenOf("self") {
			if child == leader {
				continue
			}
			if sid, zombie, ok := sessionStateOf(child); ok && zombie && sid == leader {
				_, _ = syscall.Wait4(child, nil, syscall.WNOHANG, nil)
			}
		}
	}
}

// childrenOf lists the children of a process (all its threads').
func childrenOf(pid string) []int {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// descendants is pid and everything below it.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out) && len(out) < 4096; i++ {
		out = append(out, childrenOf(strconv.Itoa(out[i]))...)
	}
	return out
}

// sessionOf reads the session id from /proc/PID/stat.
func sessionOf(pid int) (int, bool) {
	sid, _, ok := sessionStateOf(pid)
	return sid, ok
}

// sessionStateOf reads the session id and whether the process is a zombie
// from /proc/PID/stat.
func sessionStateOf(pid int) (int, bool, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, false
	}
	// The command name (field 2) may contain spaces and parentheses; the
	// fields after its last ')' are: state ppid pgrp session ...
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0, false, false
	}
	// A "Z" leader may be a process whose main thread exited while its
	// other threads run on: it is a victim like any other (a SIGKILL to a
	// real zombie does nothing), and a wait for it returns nothing yet.
	sid, err := strconv.Atoi(f[3])
	return sid, f[0] == "Z", err == nil
}

// eofReader closes eof when r reports io.EOF (the client went away).
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

var _ Upstream = (*server)(nil)
