// Package daemon is `mcpwarden daemon`: it loads the eBPF probes, serves the
// local registration API, follows each registered run's process tree in the
// kernel, reads Landlock's own denial records from the audit stream, and
// turns both into sanitized events (keyed path hashes and classes, never
// paths) for the event sink.
//
// The eBPF view (file_op events: what the processes did and what the kernel
// answered) and the Landlock view (landlock_denial events: the kernel's own
// record of each denial) are kept distinct on purpose; the cross-check
// compares them.
package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/audit"
	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/daemon/procinfo"
	"github.com/mcpwarden/mcpwarden/daemon/runs"
	"github.com/mcpwarden/mcpwarden/internal/localsock"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Sink takes batches of events (transport/publish.Publisher is one).
type Sink interface {
	Publish(ctx context.Context, events []schema.Event) error
}

// Config configures a daemon.
type Config struct {
	Socket      string // registration socket (required)
	SocketGroup int    // gid admitted to the socket besides root and the daemon's user; 0 none
	// StateDir keeps the run table (runs.json) so that a restarted daemon
	// adopts the runs its predecessor watched; "" keeps nothing.
	StateDir    string
	Sink        Sink               // where events go (required)
	Hasher      *schema.PathHasher // keyed path hash (required)
	Origin      schema.Origin      // host and boot id of the events
	EnableAudit bool               // turn kernel auditing on when it is off
	// AuditBacklogFloor: a kernel audit backlog_limit below it is raised to
	// it at start (0: DefaultAuditBacklogFloor; negative: leave the host's).
	AuditBacklogFloor int
	Probes            probes.Config
	Logger            *slog.Logger
	// CrossCheck, when set, runs alongside the probes (daemon/xcheck on a
	// single host); its failure stops the daemon.
	CrossCheck interface {
		Run(ctx context.Context) error
	}

	// QueueLen bounds the records waiting between the ring buffer reader
	// and the event builder (default 1<<16).
	QueueLen int
	// BatchSize and FlushInterval bound a batch to the sink (default 512, 50 ms).
	BatchSize     int
	FlushInterval time.Duration
	// HealthInterval is how often a health event is sent (default 60 s); one
	// is also sent within a second of any drop counter moving.
	HealthInterval time.Duration
	// RunGrace is how long an ended run is remembered for late records (default 2 min).
	RunGrace time.Duration
	// WallClock is the wall clock kernel records are dated by (time.Now
	// when nil; tests step it). The offset between it and the probes'
	// CLOCK_MONOTONIC is taken again every second.
	WallClock func() time.Time
	// DomainWait is how long a Landlock denial waits for its domain record
	// before it is sent without a run (default 2 s).
	DomainWait time.Duration
}

// Daemon is one running daemon.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	table *runs.Table

	probes *probes.Probes
	audit  *audit.Stream

	auditState  string
	landlockABI int
	monoOffset  int64 // wall ns - CLOCK_MONOTONIC ns

	records chan kevent.Record
	ll      chan any
	// launcherRecs carries launchers' records to the processor.
	launcherRecs chan launcherBatch

	hooksMu sync.Mutex // orders syscall hook attach/detach with registrations
	stateMu sync.Mutex // serializes writes of the state file
	gaps    []gap      // observation lapses found at start-up, turned into findings

	auditDrops atomic.Uint64
	// foreignDomains mirrors the processor's foreign set for the audit
	// reader: the records of a domain another program created are
	// dropped before the queue, so a flood of them (any Landlock user on
	// the host) cannot fill it and cost the runs' own records.
	foreignDomains sync.Map // domain → struct{}
	// The kernel's audit status read at start (set before the processor
	// runs), and the processor's counters of it for Stats.
	auditStatus     audit.Status
	auditStatusOK   bool
	kernelAuditLost atomic.Uint64 // records the kernel lost while the daemon watched
	auditReaders    atomic.Uint64 // other readers of the audit log (auditd, multicast sockets)
	publishFail     atomic.Uint64
	published       atomic.Uint64
	sinkDown        atomic.Bool // the last batch was refused: new runs are refused too

	registered, restarted, refusedSinkDown, refusedInvalid atomic.Uint64
	srv                                                    *api.Server // set before ready is closed

	readyOnce sync.Once
	ready     chan struct{}
}

// New checks cfg and returns a daemon; Run starts it.
func New(cfg Config) (*Daemon, error) {
	switch {
	case cfg.Socket == "":
		return nil, errors.New("daemon: no socket path: pass --socket PATH")
	case cfg.Sink == nil:
		return nil, errors.New("daemon: no event sink configured")
	case cfg.Hasher == nil:
		return nil, errors.New("daemon: no path hash key configured")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Probes == (probes.Config{}) {
		cfg.Probes = probes.DefaultConfig()
	}
	cfg.Probes.Logger = cfg.Logger
	cfg.Probes.LazySyscalls = true
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.QueueLen, 1<<16)
	def(&cfg.BatchSize, 512)
	defDur(&cfg.FlushInterval, 50*time.Millisecond)
	defDur(&cfg.HealthInterval, time.Minute)
	defDur(&cfg.RunGrace, 2*time.Minute)
	defDur(&cfg.DomainWait, 2*time.Second)
	if cfg.AuditBacklogFloor == 0 {
		cfg.AuditBacklogFloor = DefaultAuditBacklogFloor
	}
	return &Daemon{
		cfg:          cfg,
		log:          cfg.Logger,
		table:        runs.NewTable(),
		records:      make(chan kevent.Record, cfg.QueueLen),
		ll:           make(chan any, 4096),
		launcherRecs: make(chan launcherBatch),
		ready:        make(chan struct{}),
	}, nil
}

// Ready is closed once the daemon accepts registrations.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Run loads the probes, serves the socket and processes events until ctx
// ends. Any component failing to start is an error: the daemon does not run
// half-blind.
func (d *Daemon) Run(ctx context.Context) error {
	// The probes see pids as the initial pid namespace does; a daemon in
	// another one would watch the wrong processes.
	if init, err := procinfo.InInitPidNS(); err != nil || !init {
		return fmt.Errorf("daemon: it must run in the host's pid namespace, where its probes see pids (in Kubernetes: hostPID: true): %v", errOr(err, "it runs in another one"))
	}
	// The probes stamp records with the host's CLOCK_MONOTONIC; in a time
	// namespace of its own the daemon's would be offset from it, and every
	// kernel event dated that far from the launcher's records of the same
	// moment (a call's evidence before the call, outside the collector's
	// accepted range).
	if off, err := procinfo.MonotonicOffset(); err != nil || off != 0 {
		return fmt.Errorf("daemon: it must run with the host's monotonic clock, which its probes stamp records with (unshare --time and containers with a time namespace offset it): %v", errOr(err, fmt.Sprintf("its clock is offset by %s (a time namespace)", off)))
	}
	p, err := probes.Load(d.cfg.Probes)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	d.probes = p
	keep := false
	defer func() {
		if keep {
			if err := p.Keep(); err != nil {
				d.log.Warn("keep probes", "err", err)
			}
			return
		}
		p.Close()
	}()
	if err := d.resume(time.Now()); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}

	d.landlockABI, _ = ll.LandlockGetABIVersion()
	d.monoOffset = monoOffset(d.cfg.WallClock)
	d.auditState, err = d.openAudit()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	var auditLog []any
	if d.audit != nil {
		defer d.audit.Close()
		auditLog = d.setUpAudit()
	}

	srv, err := api.Listen(api.Config{Path: d.cfg.Socket, Group: d.cfg.SocketGroup, Logger: d.log}, handler{d})
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	srv.PathKeyID = d.cfg.Hasher.KeyID()
	d.srv = srv

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	start := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An error once the daemon is stopping is the stop's doing (a
			// cross-check cut off while it still set up its consumer).
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	// The processor's last drain waits for the readers to stop: a record
	// the ring reader takes after the stop began is gone from the ring (the
	// next daemon reads on after it), so it must be processed, not left in
	// the queue.
	var readers sync.WaitGroup
	reader := func(name string, fn func(context.Context) error) {
		readers.Add(1)
		start(name, func(ctx context.Context) error {
			defer readers.Done()
			return fn(ctx)
		})
	}
	reader("ring buffer reader", func(ctx context.Context) error { return p.Run(ctx, d.records) })
	if d.audit != nil {
		reader("audit reader", func(ctx context.Context) error {
			return d.audit.Run(ctx, d.offerAudit)
		})
	}
	readersDone := make(chan struct{})
	go func() {
		readers.Wait()
		close(readersDone)
	}()
	procDone := make(chan struct{})
	go func() {
		defer close(procDone)
		d.process(ctx, readersDone)
	}()
	start("registration socket", srv.Serve)
	if d.cfg.CrossCheck != nil {
		start("cross-check", d.cfg.CrossCheck.Run)
	}

	h := d.health()
	d.log.Info("daemon started", "socket", d.cfg.Socket, "hooks", compactHooks(p.Hooks()),
		"unavailable", strings.Join(p.Unavailable(), "; "), "landlock_abi", d.landlockABI, "audit_stream", d.auditState,
		"drops_bpf_reserve", h.DropsBPFReserve, "drops_queue_full", h.DropsQueueFull, "drops_publish_fail", h.DropsPublishFail,
		"crosscheck", d.cfg.CrossCheck != nil)
	if len(auditLog) > 0 {
		d.log.Info("kernel audit", auditLog...)
	}
	d.readyOnce.Do(func() { close(d.ready) })

	<-ctx.Done()
	wg.Wait()
	<-procDone
	if err := d.saveState(); err != nil {
		d.log.Error("save the run table", "err", err)
	}
	// Runs still live keep their probes attached for the next daemon.
	if n := d.table.Live(); n > 0 && d.cfg.Probes.PinDir != "" {
		keep = true
		d.log.Warn("runs still live: their probes stay attached for the next daemon ('mcpwarden daemon --unload' detaches them)", "runs", n)
	}
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// openAudit joins the audit stream and reports its state. With
// EnableAudit, a kernel with auditing off is switched on; failing that is
// an error because the operator asked for it.
func (d *Daemon) openAudit() (string, error) {
	on, err := audit.Enabled()
	if err != nil {
		d.log.Warn("audit stream unavailable", "err", err)
		if d.cfg.EnableAudit {
			return "", fmt.Errorf("--enable-audit: cannot query kernel audit status: %w", err)
		}
		return audit.StateUnavailable, nil
	}
	if !on && d.cfg.EnableAudit {
		if err := audit.Enable(); err != nil {
			return "", fmt.Errorf("--enable-audit: turn kernel auditing on: %w (needs CAP_AUDIT_CONTROL)", err)
		}
		on = true
	}
	s, err := audit.Open()
	if err != nil {
		if d.cfg.EnableAudit {
			return "", fmt.Errorf("--enable-audit: %w", err)
		}
		d.log.Warn("audit stream unavailable", "err", err)
		return audit.StateUnavailable, nil
	}
	d.audit = s
	if !on {
		d.log.Warn("kernel auditing is off: Landlock denial records will not arrive; pass --enable-audit or run 'auditctl -e 1'")
		return audit.StateOff, nil
	}
	return audit.StateOn, nil
}

// handler adapts the daemon to api.Handler.
type handler struct{ d *Daemon }

func (h handler) Register(ctx context.Context, peer *localsock.Peer, r *api.Registration, root *os.File) (api.Registered, error) {
	reg, err := h.d.register(peer, r, root)
	switch {
	case errors.Is(err, errSinkDown):
		h.d.refusedSinkDown.Add(1)
	case err != nil:
		h.d.refusedInvalid.Add(1)
	}
	return reg, err
}

func (h handler) Unregister(ctx context.Context, peer *localsock.Peer, runID string) error {
	d := h.d
	owner, err := d.owner(peer)
	if err != nil {
		return err
	}
	r := d.table.ByID(runID)
	if r == nil {
		return fmt.Errorf("no run %q is registered", runID)
	}
	if !r.Owner.Same(owner) {
		return fmt.Errorf("%w: run %s", runs.ErrNotOwner, runID)
	}
	if _, err := d.probes.Unwatch(r.Slot); err != nil {
		return err
	}
	d.table.End(r.Slot, time.Now())
	d.runEnded()
	return nil
}

func (h handler) Records(ctx context.Context, peer *localsock.Peer, events []schema.Event) error {
	return h.d.takeRecords(ctx, peer, events)
}

func (h handler) Status(ctx context.Context) schema.Health { return h.d.health() }

// owner identifies the peer process for the run ids it uses (cached for
// the connection).
func (d *Daemon) owner(peer *localsock.Peer) (runs.Owner, error) {
	if o, ok := peer.State.(runs.Owner); ok {
		return o, nil
	}
	start, err := procinfo.StartOf(peer.PID, peer.PIDFD)
	if err != nil {
		return runs.Owner{}, fmt.Errorf("identify the connecting process %d: %w", peer.PID, err)
	}
	o := runs.Owner{PID: peer.PID, Start: start, UID: peer.UID}
	peer.State = o
	return o, nil
}

// takeRecords publishes a launcher's launch and decision records (checked
// by api.CheckRecords) as the host's only publisher. They are taken only
// from the launcher that first used their run id, stamped with this
// host's identity, and must match the run's scope once it is registered.
func (d *Daemon) takeRecords(ctx context.Context, peer *localsock.Peer, events []schema.Event) error {
	if d.sinkDown.Load() {
		return errors.New("the daemon's event sink is refusing events (NATS down and spool full?): the records could not be kept")
	}
	owner, err := d.owner(peer)
	if err != nil {
		return err
	}
	runID := events[0].RunID
	if err := d.table.Claim(runID, owner, time.Now()); err != nil {
		d.log.Warn("records refused", "run_id", runID, "peer_pid", peer.PID, "peer_uid", peer.UID, "err", err)
		return err
	}
	run := d.table.ByID(runID)
	for i := range events {
		e := &events[i]
		if run != nil && (e.ScopeHash != run.ScopeHash || e.ScopeID != run.ScopeID) {
			return fmt.Errorf("record %d names another scope than run %s was registered with", i, runID)
		}
		e.Host, e.BootID = d.cfg.Origin.Host, d.cfg.Origin.BootID
		if e.Launch != nil {
			// Who launched the run is the socket's word (SO_PEERCRED),
			// never the launcher's: whatever it said is replaced.
			uid := int(peer.UID)
			l := *e.Launch
			l.LauncherUID, l.LauncherUIDBy = &uid, schema.LauncherUIDByDaemon
			e.Launch = &l
			e.SchemaVersion = max(e.SchemaVersion, 3)
		}
	}
	// Through the processor: the kernel's records of the run read so far
	// are published first, so a launcher's exit record does not overtake
	// the run's own file operations.
	lb := launcherBatch{events: events, done: make(chan error, 1)}
	select {
	case d.launcherRecs <- lb:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-lb.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// launcherBatch is a launcher's records on their way to the sink.
type launcherBatch struct {
	events []schema.Event
	done   chan error
}

// ScopeHash is how the launcher's CanonicalScope.Hash is computed; the
// daemon recomputes it so a registration cannot pair a scope with another
// scope's hash.
func ScopeHash(s *schema.CanonicalScope) (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// errSinkDown refuses a registration while the event sink refuses events.
var errSinkDown = errors.New("the daemon's event sink is refusing events (NATS down and spool full?), so a new run would go unrecorded; check 'mcpwarden daemon' logs and free the spool")

func (d *Daemon) register(peer *localsock.Peer, reg *api.Registration, root *os.File) (out api.Registered, err error) {
	if d.sinkDown.Load() {
		// Fail closed: a run started now would go unrecorded.
		return out, errSinkDown
	}
	h, err := ScopeHash(reg.Scope)
	if err != nil {
		return out, fmt.Errorf("encode scope: %w", err)
	}
	if h != reg.ScopeHash {
		return out, errors.New("scope_hash does not match the scope sent: launcher and daemon disagree on the scope; upgrade both to the same version")
	}
	owner, err := d.owner(peer)
	if err != nil {
		return out, err
	}
	proc, err := procinfo.FromPidfd(root)
	switch {
	case errors.Is(err, procinfo.ErrInvisible):
		return out, errors.New("the root process has no pid in the daemon's pid namespace: run the daemon in the host's pid namespace")
	case err != nil:
		return out, fmt.Errorf("root process: %w", err)
	case proc.PPID != peer.PID:
		// Only a launcher's own child can be made a run: anything else
		// would let a user have another user's process reported as theirs.
		return out, fmt.Errorf("the root process %d is not a child of the registering process %d", proc.PID, peer.PID)
	case proc.PID <= 1:
		return out, fmt.Errorf("pid %d is not a process the daemon can watch", proc.PID)
	}
	out = api.Registered{RootPID: proc.PID, UID: peer.UID, CgroupID: proc.CgroupID}
	d.hooksMu.Lock()
	defer d.hooksMu.Unlock()
	// The syscall hooks are attached before the root is watched, so its
	// first operation is seen.
	if err := d.probes.SetSyscallHooks(true); err != nil {
		return out, err
	}
	defer func() {
		if err != nil && d.table.Live() == 0 {
			_ = d.probes.SetSyscallHooks(false)
		}
	}()
	pid := uint32(proc.PID)
	if old := d.table.ByID(reg.RunID); old != nil {
		// The launcher restarts the server under a narrower fence: same
		// run, a new root process.
		if !old.Owner.Same(owner) {
			return out, fmt.Errorf("%w: run %s", runs.ErrNotOwner, reg.RunID)
		}
		if old.ScopeHash != reg.ScopeHash {
			return out, fmt.Errorf("run %s is registered with another scope", reg.RunID)
		}
		if err := d.table.AddRoot(old.Slot, pid, reg.ExecPending); err != nil {
			return out, err
		}
		if err := d.watchRoot(pid, old.Slot, root); err != nil {
			return out, err
		}
		if err := d.adoptTree(old.Slot, pid); err != nil {
			return out, err
		}
		d.restarted.Add(1)
		d.log.Info("run restarted", "run_id", old.ID, "slot", old.Slot, "root_pid", pid)
		out.Slot = old.Slot
		return out, d.saveState()
	}
	pol := classify.Policy{ReadOnly: reg.Scope.AccessMode != schema.AccessWrite, Runtime: reg.Runtime}
	for _, p := range reg.Scope.AllowedPaths {
		pol.Workspace = append(pol.Workspace, p.Path)
	}
	run := &runs.Run{
		ID: reg.RunID, ScopeID: reg.Scope.ScopeID, ScopeHash: reg.ScopeHash, Mode: reg.Mode,
		RootPID: pid, LandlockABI: reg.LandlockABI, ExecPending: reg.ExecPending, Policy: pol, Registered: time.Now(),
		Owner: owner, CgroupID: proc.CgroupID,
	}
	if reg.HelperExe != nil {
		run.Helper = runs.FileID(*reg.HelperExe)
	}
	slot, err := d.table.Add(run)
	if err != nil {
		return out, err
	}
	d.table.SetOwnPID(pid, uint32(proc.OwnPID))
	if err := d.watchRoot(pid, slot, root); err != nil {
		d.table.Remove(slot)
		return out, err
	}
	if err := d.adoptTree(slot, pid); err != nil {
		d.probes.Unwatch(slot)
		d.table.Remove(slot)
		return out, err
	}
	if err := d.saveState(); err != nil {
		d.probes.Unwatch(slot)
		d.table.Remove(slot)
		return out, err
	}
	d.registered.Add(1)
	d.log.Info("run registered", "run_id", run.ID, "scope_id", run.ScopeID, "slot", slot, "root_pid", pid, "uid", peer.UID, "cgroup_id", proc.CgroupID, "mode", reg.Mode)
	out.Slot = slot
	return out, nil
}

// watchRoot watches pid for slot, then confirms through its pidfd that pid
// was still that process when the kernel started watching it.
func (d *Daemon) watchRoot(pid, slot uint32, root *os.File) error {
	if err := d.probes.Watch(pid, slot); err != nil {
		return err
	}
	if err := procinfo.Alive(root); err != nil {
		d.probes.Unwatch(slot)
		return fmt.Errorf("root process: %w", err)
	}
	return nil
}

// maxAdopted bounds the processes a root may already have below it when it
// is registered.
const maxAdopted = 4096

// adoptTree watches the processes the root had already forked when it was
// registered: the kernel follows only the forks after its watch began. The
// run's init with namespaces starts its exec stage (the process that
// becomes the server) as soon as it has its spec, which may well be before
// the launcher's registration reaches the daemon; unadopted, the server
// and everything it does would be unseen. Each process is watched before
// its own children are listed, so a child forked meanwhile is either
// followed by the kernel or listed; each is named by a pidfd and confirmed
// to be that parent's child, so a reused pid is never adopted.
func (d *Daemon) adoptTree(slot, root uint32) error {
	seen := map[uint32]bool{root: true}
	queue := []uint32{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		kids, err := procinfo.Children(int(parent))
		if errors.Is(err, procinfo.ErrGone) {
			continue // it exited; the kernel's exit record says so
		}
		if err != nil {
			return fmt.Errorf("register: the root's processes: %w", err)
		}
		for _, k := range kids {
			child := uint32(k)
			if seen[child] {
				continue
			}
			if len(seen) >= maxAdopted {
				return fmt.Errorf("register: the root process already has more than %d processes below it", maxAdopted)
			}
			ok, err := d.adoptChild(slot, parent, child)
			if err != nil {
				return err
			}
			if ok {
				seen[child] = true
				queue = append(queue, child)
				d.log.Debug("adopted a process the root had already started", "slot", slot, "pid", child, "parent", parent)
			}
		}
	}
	return nil
}

// adoptChild watches child for slot if it is still parent's child and
// alive; false when it is not (it exited, or the pid is another process's).
func (d *Daemon) adoptChild(slot, parent, child uint32) (bool, error) {
	f, err := procinfo.Open(int(child))
	if errors.Is(err, procinfo.ErrGone) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("register: %w", err)
	}
	defer f.Close()
	p, err := procinfo.FromPidfd(f)
	switch {
	case errors.Is(err, procinfo.ErrGone):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("register: process %d below the root: %w", child, err)
	case p.PPID != int(parent):
		return false, nil // reparented or reused: not the root's any more
	}
	// In the table first, so that its exit, once watched, ends it there.
	d.table.Adopted(slot, parent, child)
	d.table.SetOwnPID(child, uint32(p.OwnPID))
	if err := d.probes.Watch(child, slot); err != nil {
		d.table.Exited(slot, child, time.Now())
		return false, err
	}
	if procinfo.Alive(f) != nil || procinfo.Exiting(int(child)) {
		// It exited before the watch took: no exit record will come.
		d.table.Exited(slot, child, time.Now())
		return false, d.probes.UnwatchPID(child)
	}
	return true, nil
}

// runEnded detaches the syscall hooks once no run is live and saves the
// table.
func (d *Daemon) runEnded() {
	d.hooksMu.Lock()
	if d.table.Live() == 0 {
		if err := d.probes.SetSyscallHooks(false); err != nil {
			d.log.Warn("detach syscall hooks", "err", err)
		}
	}
	d.hooksMu.Unlock()
	if err := d.saveState(); err != nil {
		d.log.Error("save the run table", "err", err)
	}
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// Stats are the daemon's counters and state, for metrics. Every counter
// only grows while the daemon runs.
type Stats struct {
	// Ready: the probes, the audit stream and the socket are up. Until
	// then every other field is zero.
	Ready bool
	// RunsActive is the registered runs whose processes have not all
	// exited; RunsRegistered counts registrations, RunsRestarted the roots
	// added to a registered run (a server restarted under a narrower fence).
	RunsActive                    int
	RunsRegistered, RunsRestarted uint64
	// Refused registrations: while the event sink refused events
	// (RefusedSinkDown), invalid ones (scope hash, root pid, malformed,
	// RefusedInvalid), and connections from a user other than root
	// (RefusedPeer).
	RefusedSinkDown, RefusedInvalid, RefusedPeer uint64
	// Probes are the kernel side's and the ring reader's counters.
	Probes probes.Counters
	// AuditQueueDrops: Landlock records dropped because the daemon's queue
	// was full; AuditLost: records the audit socket lost (ENOBUFS);
	// KernelAuditLost: records the kernel itself lost (its audit `lost`
	// counter's growth) while the daemon watched; AuditOtherReaders: the
	// other readers of the audit log last seen (auditd, multicast sockets).
	AuditQueueDrops, AuditLost, KernelAuditLost, AuditOtherReaders uint64
	// Published counts events the sink accepted, PublishFailed events lost
	// because the sink refused their batch; SinkDown says the last batch
	// was refused (new runs are refused until one goes through).
	Published, PublishFailed uint64
	SinkDown                 bool
	AuditStream              string
	LandlockABI              int
	// Hooks are the attached programs, Unavailable those that did not load.
	Hooks, Unavailable int
}

// offerAudit queues one record of the audit stream for the processor, or
// counts it dropped when the queue is full. A denial in a domain the
// processor has found to be another program's is none of the runs'
// business (the processor would drop it): it is dropped here, without
// taking a place in the queue.
func (d *Daemon) offerAudit(rec any) {
	if a, ok := rec.(audit.LandlockAccess); ok {
		if _, foreign := d.foreignDomains.Load(a.Domain); foreign {
			return
		}
	}
	select {
	case d.ll <- rec:
	default:
		d.auditDrops.Add(1)
	}
}

// Stats returns the daemon's counters. It is safe to call at any time,
// from any goroutine.
func (d *Daemon) Stats() Stats {
	select {
	case <-d.ready:
	default:
		return Stats{}
	}
	c, err := d.probes.Counters()
	if err != nil {
		d.log.Warn("read probe counters", "err", err)
	}
	s := Stats{
		Ready:             true,
		RunsActive:        d.table.Active(),
		RunsRegistered:    d.registered.Load(),
		RunsRestarted:     d.restarted.Load(),
		RefusedSinkDown:   d.refusedSinkDown.Load(),
		RefusedInvalid:    d.refusedInvalid.Load(),
		Probes:            c,
		AuditQueueDrops:   d.auditDrops.Load(),
		KernelAuditLost:   d.kernelAuditLost.Load(),
		AuditOtherReaders: d.auditReaders.Load(),
		Published:         d.published.Load(),
		PublishFailed:     d.publishFail.Load(),
		SinkDown:          d.sinkDown.Load(),
		AuditStream:       d.auditState,
		LandlockABI:       d.landlockABI,
		Hooks:             len(d.probes.Hooks()),
		Unavailable:       len(d.probes.Unavailable()),
	}
	if d.audit != nil {
		s.AuditLost = d.audit.Lost()
	}
	refusedPeer, refusedRequest := d.srv.Refused()
	s.RefusedPeer = refusedPeer
	s.RefusedInvalid += refusedRequest
	return s
}

func (d *Daemon) health() schema.Health {
	c, err := d.probes.Counters()
	if err != nil {
		d.log.Warn("read probe counters", "err", err)
	}
	hooks := d.probes.Hooks()
	for _, u := range d.probes.Unavailable() {
		hooks = append(hooks, "unavailable/"+healthLabel(u))
	}
	var auditLost uint64
	if d.audit != nil {
		auditLost = d.audit.Lost()
	}
	return schema.Health{
		Component:        "daemon",
		Hooks:            hooks,
		LandlockABI:      d.landlockABI,
		AuditStream:      d.auditState,
		DropsBPFReserve:  c.RingDrops + c.InflightFull + c.WatchFull,
		DropsQueueFull:   c.QueueDrops + d.auditDrops.Load() + auditLost,
		DropsPublishFail: d.publishFail.Load(),
		DropsKernelAudit: d.kernelAuditLost.Load(),
	}
}

// healthLabel turns "lsm/file_open: unavailable (EPERM)" into "lsm/file_open:EPERM".
func healthLabel(s string) string {
	name, reason, _ := strings.Cut(s, ": ")
	if i, j := strings.IndexByte(reason, '('), strings.IndexByte(reason, ')'); i >= 0 && j > i {
		reason = reason[i+1 : j]
	}
	out := []byte(name + ":" + reason)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == ':' || c == '.' || c == '-') {
			out[i] = '_'
		}
	}
	if len(out) > 120 {
		out = out[:120]
	}
	return string(out)
}

// compactHooks groups "tracepoint/syscalls/openat"-style names by prefix:
// "tracepoint/syscalls:open,openat,... raw_tracepoint:sched_process_fork,...".
func compactHooks(hooks []string) string {
	var order []string
	groups := map[string][]string{}
	for _, h := range hooks {
		i := strings.LastIndexByte(h, '/')
		prefix, name := h[:max(i, 0)], h[i+1:]
		if _, ok := groups[prefix]; !ok {
			order = append(order, prefix)
		}
		groups[prefix] = append(groups[prefix], name)
	}
	parts := make([]string, 0, len(order))
	for _, p := range order {
		parts = append(parts, p+":"+strings.Join(groups[p], ","))
	}
	return strings.Join(parts, " ")
}

// monoOffset is wall time minus CLOCK_MONOTONIC now, by the wall clock
// now (time.Now when nil).
func monoOffset(now func() time.Time) int64 {
	if now == nil {
		now = time.Now
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return now().UnixNano() - ts.Nano()
}
