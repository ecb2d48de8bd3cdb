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
	"strconv"
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
	"github.com/mcpwarden/mcpwarden/daemon/runs"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Sink takes batches of events (transport/publish.Publisher is one).
type Sink interface {
	Publish(ctx context.Context, events []schema.Event) error
}

// Config configures a daemon.
type Config struct {
	Socket      string             // registration socket (required)
	Sink        Sink               // where events go (required)
	Hasher      *schema.PathHasher // keyed path hash (required)
	Origin      schema.Origin      // host and boot id of the events
	EnableAudit bool               // turn kernel auditing on when it is off
	Probes      probes.Config
	Logger      *slog.Logger
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

	auditDrops  atomic.Uint64
	publishFail atomic.Uint64
	published   atomic.Uint64
	sinkDown    atomic.Bool // the last batch was refused: new runs are refused too

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
	return &Daemon{
		cfg:     cfg,
		log:     cfg.Logger,
		table:   runs.NewTable(),
		records: make(chan kevent.Record, cfg.QueueLen),
		ll:      make(chan any, 4096),
		ready:   make(chan struct{}),
	}, nil
}

// Ready is closed once the daemon accepts registrations.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Run loads the probes, serves the socket and processes events until ctx
// ends. Any component failing to start is an error: the daemon does not run
// half-blind.
func (d *Daemon) Run(ctx context.Context) error {
	p, err := probes.Load(d.cfg.Probes)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	d.probes = p
	defer p.Close()

	d.landlockABI, _ = ll.LandlockGetABIVersion()
	d.monoOffset = monoOffset()
	d.auditState, err = d.openAudit()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	if d.audit != nil {
		defer d.audit.Close()
	}

	srv, err := api.Listen(d.cfg.Socket, handler{d}, d.log)
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
			if err := fn(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	start("ring buffer reader", func(ctx context.Context) error { return p.Run(ctx, d.records) })
	if d.audit != nil {
		start("audit reader", func(ctx context.Context) error {
			return d.audit.Run(ctx, func(rec any) {
				select {
				case d.ll <- rec:
				default:
					d.auditDrops.Add(1)
				}
			})
		})
	}
	procDone := make(chan struct{})
	go func() {
		defer close(procDone)
		d.process(ctx)
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
	d.readyOnce.Do(func() { close(d.ready) })

	<-ctx.Done()
	wg.Wait()
	<-procDone
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

func (h handler) Register(ctx context.Context, r *api.Registration) (uint32, error) {
	slot, err := h.d.register(r)
	switch {
	case errors.Is(err, errSinkDown):
		h.d.refusedSinkDown.Add(1)
	case err != nil:
		h.d.refusedInvalid.Add(1)
	}
	return slot, err
}

func (h handler) Unregister(ctx context.Context, runID string) error {
	r := h.d.table.ByID(runID)
	if r == nil {
		return fmt.Errorf("no run %q is registered", runID)
	}
	if _, err := h.d.probes.Unwatch(r.Slot); err != nil {
		return err
	}
	h.d.table.End(r.Slot, time.Now())
	return nil
}

func (h handler) Status(ctx context.Context) schema.Health { return h.d.health() }

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

func (d *Daemon) register(reg *api.Registration) (uint32, error) {
	if d.sinkDown.Load() {
		// Fail closed: a run started now would go unrecorded.
		return 0, errSinkDown
	}
	h, err := ScopeHash(reg.Scope)
	if err != nil {
		return 0, fmt.Errorf("encode scope: %w", err)
	}
	if h != reg.ScopeHash {
		return 0, errors.New("scope_hash does not match the scope sent: launcher and daemon disagree on the scope; upgrade both to the same version")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(reg.RootPID)); err != nil {
		return 0, fmt.Errorf("root pid %d does not exist", reg.RootPID)
	}
	if old := d.table.ByID(reg.RunID); old != nil {
		// The launcher restarts the server under a narrower fence: same
		// run, a new root process.
		if old.ScopeHash != reg.ScopeHash {
			return 0, fmt.Errorf("run %s is registered with another scope", reg.RunID)
		}
		if err := d.table.AddRoot(old.Slot, uint32(reg.RootPID), reg.ExecPending); err != nil {
			return 0, err
		}
		if err := d.probes.Watch(uint32(reg.RootPID), old.Slot); err != nil {
			return 0, err
		}
		d.restarted.Add(1)
		d.log.Info("run restarted", "run_id", old.ID, "slot", old.Slot, "root_pid", reg.RootPID)
		return old.Slot, nil
	}
	pol := classify.Policy{ReadOnly: reg.Scope.AccessMode != schema.AccessWrite, Runtime: reg.Runtime}
	for _, p := range reg.Scope.AllowedPaths {
		pol.Workspace = append(pol.Workspace, p.Path)
	}
	run := &runs.Run{
		ID: reg.RunID, ScopeID: reg.Scope.ScopeID, ScopeHash: reg.ScopeHash, Mode: reg.Mode,
		RootPID: uint32(reg.RootPID), LandlockABI: reg.LandlockABI, ExecPending: reg.ExecPending, Policy: pol, Registered: time.Now(),
	}
	slot, err := d.table.Add(run)
	if err != nil {
		return 0, err
	}
	if err := d.probes.Watch(uint32(reg.RootPID), slot); err != nil {
		d.table.Remove(slot)
		return 0, err
	}
	d.registered.Add(1)
	d.log.Info("run registered", "run_id", run.ID, "scope_id", run.ScopeID, "slot", slot, "root_pid", reg.RootPID, "mode", reg.Mode)
	return slot, nil
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
	// was full; AuditLost: records the audit socket lost (ENOBUFS).
	AuditQueueDrops, AuditLost uint64
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
		Ready:           true,
		RunsActive:      d.table.Active(),
		RunsRegistered:  d.registered.Load(),
		RunsRestarted:   d.restarted.Load(),
		RefusedSinkDown: d.refusedSinkDown.Load(),
		RefusedInvalid:  d.refusedInvalid.Load(),
		Probes:          c,
		AuditQueueDrops: d.auditDrops.Load(),
		Published:       d.published.Load(),
		PublishFailed:   d.publishFail.Load(),
		SinkDown:        d.sinkDown.Load(),
		AuditStream:     d.auditState,
		LandlockABI:     d.landlockABI,
		Hooks:           len(d.probes.Hooks()),
		Unavailable:     len(d.probes.Unavailable()),
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

func monoOffset() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Now().UnixNano() - ts.Nano()
}
