package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/audit"
	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/daemon/procinfo"
	"github.com/mcpwarden/mcpwarden/daemon/runs"
	"github.com/mcpwarden/mcpwarden/schema"
)

// pendingDenial is a Landlock access record whose domain record has not
// arrived yet (the kernel logs the access before the domain).
type pendingDenial struct {
	rec   audit.LandlockAccess
	since time.Time
}

// maxPending bounds the denials waiting for their domain record, and
// maxForeign the other programs' domains remembered.
const (
	maxPending = 4096
	maxForeign = 4096
)

// processor owns the batch and the pending denials; only the process
// goroutine touches it.
type processor struct {
	d       *Daemon
	batch   []schema.Event
	pending map[string][]pendingDenial
	npend   int
	// foreign holds the Landlock domains other programs created (their
	// domain record named a process no run owns); bounded.
	foreign map[string]bool
	last    schema.Health

	// Paths repeat (a runtime reads the same modules over and over): the
	// keyed hash and each run's location of a path are cached, bounded.
	hashes map[string]schema.PathHash
	locs   map[locKey]classify.Location

	// nsPIDs: a watched process's pid (as the probes see it) → its pid in
	// its own pid namespace, from its records; bounded. unbound: a run's
	// Landlock domain → its creator's pid, until the creator's own pid is
	// known. Both name a domain's records' /proc entries (see denial).
	nsPIDs  map[uint32]uint32
	unbound map[string]uint32

	// lost: the runs whose events the sink refused (NATS down and the spool
	// full), by run id, until each run's OBSERVATION_GAP is published.
	lost map[string]*lostRun

	// audit: the kernel's audit status as last read (auditstatus.go).
	audit auditWatch
}

// lostRun is what a refusing sink lost of one run: the host-level drop
// counter says that events were lost, this says whose.
type lostRun struct {
	scopeID, scopeHash string
	from               int64 // the first lost event's time
	events             int
}

// GapEventsLost is the reason of a run's OBSERVATION_GAP when the sink lost
// some of its events (the same reason as the host-level finding the drop
// counters give).
const GapEventsLost = "events_dropped"

// GapStalled is the reason of a run's OBSERVATION_GAP when the daemon did
// not run for longer than StallLimit while the run was live: stopped
// (SIGSTOP), frozen, or starved. The kernel went on recording into the
// ring (a loss there is counted apart), but nothing read it, the run's
// launcher got no answer for its records (its Sink gives up after 10 s and
// the proxy denies the call) and Landlock's records waited in a socket
// buffer: the run was not observed live, and a stopped daemon is itself
// worth a look.
const GapStalled = "daemon_stalled"

// StallLimit is how long the daemon's one-second tick may come late before
// the lapse is a gap. CLOCK_MONOTONIC, which Go's timers follow, does not
// advance while the machine is suspended, so a suspend is no stall.
const StallLimit = 5 * time.Second

// maxLostRuns bounds the runs remembered as having lost events.
const maxLostRuns = 4096

type locKey struct {
	slot uint32
	path string
}

// maxCached bounds each cache; a full cache is cleared.
const maxCached = 1 << 16

func newProcessor(d *Daemon) *processor {
	return &processor{d: d, pending: map[string][]pendingDenial{}, foreign: map[string]bool{},
		hashes: make(map[string]schema.PathHash), locs: make(map[locKey]classify.Location),
		nsPIDs: map[uint32]uint32{}, unbound: map[string]uint32{}, lost: map[string]*lostRun{}}
}

// markLost counts a loss at (Unix ns) of run id: its gap is dated at its
// first loss. Beyond maxLostRuns runs only the host-level counter tells.
func (p *processor) markLost(id, scopeID, scopeHash string, at int64) {
	l := p.lost[id]
	if l == nil {
		if len(p.lost) >= maxLostRuns {
			return
		}
		l = &lostRun{scopeID: scopeID, scopeHash: scopeHash, from: at}
		p.lost[id] = l
	}
	l.from = min(l.from, at)
	l.events++
}

// noteLost remembers the runs of events the sink refused.
func (p *processor) noteLost(events []schema.Event) {
	for i := range events {
		if e := &events[i]; e.RunID != "" {
			p.markLost(e.RunID, e.ScopeID, e.ScopeHash, e.TimeNS)
		}
	}
}

// kernelLossWindow is how long before a kernel-side loss was seen a run
// may have ended and still have lost records: the ring buffer and the
// queue are read behind the kernel.
const kernelLossWindow = 10 * time.Second

// kernelLoss marks the runs a kernel-side loss (ring buffer or queue
// full) may have hit: the records lost name no run, so each run observed
// meanwhile gets an OBSERVATION_GAP, as with a lost batch (reportLost).
func (p *processor) kernelLoss(now time.Time) {
	for _, r := range p.d.table.ObservedSince(now.Add(-kernelLossWindow)) {
		p.markLost(r.ID, r.ScopeID, r.ScopeHash, now.UnixNano())
	}
	if !p.d.sinkDown.Load() {
		p.reportLost()
	}
}

// reportLost queues, once the sink takes events again, an OBSERVATION_GAP
// finding for each run that lost events, dated at its first lost event: a
// run's queries then say it was not fully observed, instead of showing
// whatever got through as the whole run. A finding lost in turn marks its
// run again.
func (p *processor) reportLost() {
	for id, l := range p.lost {
		e := p.d.cfg.Origin.NewEvent(schema.KindFinding, id, l.scopeID, l.scopeHash, time.Unix(0, l.from))
		e.Finding = &schema.Finding{Type: schema.FindingObservationGap, Severity: schema.SeverityHigh, Reason: GapEventsLost, EvidenceIDs: []string{}}
		p.batch = append(p.batch, e)
		p.d.log.Warn("a run lost events to the refusing sink: reported as an observation gap", "run_id", id, "events", l.events)
	}
	clear(p.lost)
}

func (p *processor) hash(path string) schema.PathHash {
	if h, ok := p.hashes[path]; ok {
		return h
	}
	if len(p.hashes) >= maxCached {
		clear(p.hashes)
	}
	h := p.d.cfg.Hasher.Hash(path)
	p.hashes[path] = h
	return h
}

func (p *processor) locate(run *runs.Run, path string, known bool) classify.Location {
	if !known || !strings.HasPrefix(path, "/") {
		return classify.Location{Class: schema.PathUnknown}
	}
	k := locKey{run.Slot, path}
	if l, ok := p.locs[k]; ok {
		return l
	}
	if len(p.locs) >= maxCached {
		clear(p.locs)
	}
	l := run.Policy.Locate(path)
	p.locs[k] = l
	return l
}

// process turns kernel records and Landlock records into events and sends
// them to the sink in batches, until ctx ends; then, once readersDone is
// closed (the readers put nothing more in the queues), it takes what is
// queued and flushes what it has.
func (d *Daemon) process(ctx context.Context, readersDone <-chan struct{}) {
	p := newProcessor(d)
	flush := time.NewTicker(d.cfg.FlushInterval)
	defer flush.Stop()
	second := time.NewTicker(time.Second)
	defer second.Stop()
	healthEvery := time.NewTicker(d.cfg.HealthInterval)
	defer healthEvery.Stop()

	p.emitHealth(time.Now()) // the start-up health event
	p.emitGaps()
	lastTick := time.Now()
	p.audit = auditWatch{ok: d.auditStatusOK, last: d.auditStatus, at: lastTick, flagged: map[string]time.Time{}}
	for {
		select {
		case <-ctx.Done():
			// Records the readers take until they stop were taken from
			// the ring and the audit socket for good: wait for them.
			// Meanwhile the queues are not read, so a flood may fill
			// them: that is counted as queue drops, never silent.
			<-readersDone
			p.drain()
			p.expirePending(time.Now().Add(time.Hour))
			p.emitHealth(time.Now())
			p.flush(context.WithoutCancel(ctx))
			return
		case r := <-d.records:
			p.record(&r)
		case rec := <-d.ll:
			p.landlock(rec, time.Now())
		case lb := <-d.launcherRecs:
			lb.done <- p.launcherRecords(ctx, lb.events)
		case <-flush.C:
			p.flush(ctx)
		case <-second.C:
			// The tick's own time is when it was due, which a stopped
			// process passes: the lapse is measured from the clock.
			now := time.Now()
			if lapse := now.Sub(lastTick); lapse > StallLimit {
				p.stalled(lastTick, lapse)
			}
			lastTick = now
			// The wall clock may have been stepped (NTP, an operator, a
			// resumed VM) since the last tick: the probes' monotonic
			// stamps are turned into wall time with the offset of now.
			d.monoOffset = monoOffset(d.cfg.WallClock)
			if err := d.probes.Alive(now); err != nil {
				d.log.Warn("record that the daemon is alive", "err", err)
			}
			p.checkAudit(now)
			p.expirePending(now)
			if expired := d.table.Expired(now.Add(-d.cfg.RunGrace)); len(expired) > 0 {
				for _, slot := range expired {
					d.table.Remove(slot)
				}
				if err := d.saveState(); err != nil {
					d.log.Error("save the run table", "err", err)
				}
			}
			if h := d.health(); h.DropsBPFReserve != p.last.DropsBPFReserve ||
				h.DropsQueueFull != p.last.DropsQueueFull || h.DropsPublishFail != p.last.DropsPublishFail ||
				h.DropsKernelAudit != p.last.DropsKernelAudit {
				p.d.log.Warn("events lost", "drops_bpf_reserve", h.DropsBPFReserve, "drops_queue_full", h.DropsQueueFull, "drops_publish_fail", h.DropsPublishFail, "drops_kernel_audit", h.DropsKernelAudit)
				if h.DropsBPFReserve > p.last.DropsBPFReserve || h.DropsQueueFull > p.last.DropsQueueFull {
					p.kernelLoss(now)
				}
				p.emitHealth(now)
			}
		case now := <-healthEvery.C:
			p.emitHealth(now)
		}
		if len(p.batch) >= d.cfg.BatchSize {
			p.flush(ctx)
		}
	}
}

// stalled reports a lapse of the daemon that began at from (wall time) and
// lasted lapse: an OBSERVATION_GAP on every run live at its start or
// since, dated at its start.
func (p *processor) stalled(from time.Time, lapse time.Duration) {
	live := p.d.table.ObservedSince(from)
	p.d.log.Warn("the daemon did not run: reported as an observation gap of each live run", "lapse", lapse.Round(time.Millisecond).String(), "runs", len(live))
	for _, r := range live {
		e := p.event(r, schema.KindFinding, from)
		e.Finding = &schema.Finding{Type: schema.FindingObservationGap, Severity: schema.SeverityMedium, Reason: GapStalled, EvidenceIDs: []string{}}
		p.batch = append(p.batch, e)
	}
}

// launcherRecords publishes a launcher's records after the kernel records
// already queued, in one synchronous flush: nil means they are taken.
func (p *processor) launcherRecords(ctx context.Context, events []schema.Event) error {
	p.drainRecords()
	p.flush(ctx)
	if p.d.sinkDown.Load() {
		return errors.New("the daemon's event sink is refusing events (NATS down and spool full?): the records could not be kept")
	}
	if err := p.d.cfg.Sink.Publish(ctx, events); err != nil {
		p.d.publishFail.Add(uint64(len(events)))
		p.noteLost(events)
		return fmt.Errorf("publish: %w", err)
	}
	p.d.published.Add(uint64(len(events)))
	return nil
}

// drainRecords handles the kernel records already queued.
func (p *processor) drainRecords() {
	for {
		select {
		case r := <-p.d.records:
			p.record(&r)
		default:
			return
		}
	}
}

// drain takes what is already queued at shutdown.
func (p *processor) drain() {
	for {
		select {
		case r := <-p.d.records:
			p.record(&r)
		case rec := <-p.d.ll:
			p.landlock(rec, time.Now())
		default:
			return
		}
	}
}

func (p *processor) flush(ctx context.Context) {
	if len(p.batch) == 0 {
		return
	}
	if err := p.d.cfg.Sink.Publish(ctx, p.batch); err != nil {
		p.d.publishFail.Add(uint64(len(p.batch)))
		p.d.sinkDown.Store(true)
		p.d.log.Error("event sink refused a batch; events lost", "events", len(p.batch), "err", err)
		p.noteLost(p.batch)
		p.batch = p.batch[:0:0]
		return
	}
	p.d.published.Add(uint64(len(p.batch)))
	p.d.sinkDown.Store(false)
	p.batch = p.batch[:0:0]
	// Queued now, published by the next flush.
	p.reportLost()
}

func (p *processor) emitHealth(now time.Time) {
	h := p.d.health()
	p.last = h
	e := p.d.cfg.Origin.NewEvent(schema.KindHealth, "", "", "", now)
	e.Health = &h
	p.batch = append(p.batch, e)
}

func (p *processor) event(run *runs.Run, kind schema.Kind, t time.Time) schema.Event {
	if run == nil {
		return p.d.cfg.Origin.NewEvent(kind, "", "", "", t)
	}
	return p.d.cfg.Origin.NewEvent(kind, run.ID, run.ScopeID, run.ScopeHash, t)
}

// record handles one kernel record, and saves the run table when the
// record changed a setup phase.
func (p *processor) record(r *kevent.Record) {
	p.handle(r)
	if p.d.table.SetupChanged() {
		if err := p.d.saveState(); err != nil {
			p.d.log.Error("save the run table", "err", err)
		}
	}
}

func (p *processor) handle(r *kevent.Record) {
	run := p.d.table.BySlot(r.Slot)
	if run == nil {
		return // the run was forgotten long ago; its slot is never reused
	}
	t := time.Unix(0, int64(r.KtimeNS)+p.d.monoOffset)
	if r.NSTGID != 0 && p.nsPIDs[r.TGID] != r.NSTGID {
		if len(p.nsPIDs) >= maxCached {
			clear(p.nsPIDs)
		}
		p.nsPIDs[r.TGID] = r.NSTGID
	}
	switch r.Op {
	case kevent.OpFork:
		p.d.table.Forked(r.Slot, r.TGID, uint32(r.Ret))
		return
	case kevent.OpExit:
		if p.d.table.Exited(r.Slot, r.TGID, time.Now()) {
			p.d.log.Info("run ended", "run_id", run.ID, "slot", run.Slot)
			p.d.runEnded()
		}
		return
	case kevent.OpExec:
		dev, ino := r.ExecFile()
		p.d.table.Execed(r.TGID, runs.FileID{Dev: dev, Ino: ino})
		return
	case kevent.OpIOUringSetup:
		// io_uring's operations bypass the syscall probes: the setup
		// itself is an observation gap, high when it succeeded.
		sev, reason := schema.SeverityMedium, "io_uring_setup_refused"
		if r.Ret >= 0 {
			sev, reason = schema.SeverityHigh, "io_uring_setup"
		}
		e := p.event(run, schema.KindFinding, t)
		e.Finding = &schema.Finding{Type: schema.FindingObservationGap, Severity: sev, Reason: reason, EvidenceIDs: []string{}}
		p.batch = append(p.batch, e)
		return
	}
	if p.d.table.InSetup(r.TGID, r.Comm) {
		return // the launcher's fence helper before it exec'd the server
	}
	p.fileOp(run, r, t, r.Path1, r.Path1OK, classify.Access(r.Access1()))
	if r.Path2 != "" || (r.Op == kevent.OpRename || r.Op == kevent.OpRenameat || r.Op == kevent.OpRenameat2 || r.Op == kevent.OpLink || r.Op == kevent.OpLinkat) {
		p.fileOp(run, r, t, r.Path2, r.Path2OK, classify.Access(r.Access2()))
	}
}

func (p *processor) fileOp(run *runs.Run, r *kevent.Record, t time.Time, path string, known bool, access classify.Access) {
	// The process's own /proc entry, by whatever number its /proc gives it,
	// is classified as its /proc/self.
	loc := p.locate(run, classify.SelfProc(path, r.NSTGID, r.NSPID), known)
	class, verdict := loc.Class, classify.Judge(loc, access, r.Ret)
	result := 0
	if r.Ret < 0 {
		result = int(r.Ret)
	}
	var h schema.PathHash
	if path != "" {
		// Hashed as the Landlock record names it (/proc/self by pid), so
		// the two views of one denial pair up; classified as asked (a
		// process's own /proc/self is the runtime's).
		h = p.hash(classify.CanonicalProc(path, r.NSTGID, r.NSPID))
	}
	e := p.event(run, schema.KindFileOp, t)
	e.FileOp = &schema.FileOp{
		Syscall:    r.Op.String(),
		FlagsClass: access,
		Result:     result,
		PathHash:   h,
		PathClass:  class,
		Verdict:    verdict,
		PID:        int(r.TGID),
		Comm:       schema.SanitizeComm(r.Comm),
	}
	p.batch = append(p.batch, e)
}

// landlock handles one Landlock audit record.
func (p *processor) landlock(rec any, now time.Time) {
	switch v := rec.(type) {
	case audit.LandlockDomain:
		if v.Status != "allocated" {
			return
		}
		run := p.d.table.BindDomain(v.Domain, uint32(v.PID))
		waiting := p.pending[v.Domain]
		delete(p.pending, v.Domain)
		p.npend -= len(waiting)
		if run == nil {
			// A Landlock domain of some other program on this host: its
			// denials are none of our runs' business, now or later.
			if len(p.foreign) >= maxForeign {
				clear(p.foreign)
				p.d.foreignDomains.Clear()
			}
			p.foreign[v.Domain] = true
			p.d.foreignDomains.Store(v.Domain, struct{}{})
			return
		}
		// The domain's records name its creator's own /proc entries by
		// the creator's pid in its own pid namespace (a namespaced run's
		// server is pid 2 or so there): known, they are classified like
		// the probes' events of the same paths (the creator's /proc/self).
		// The creator is the server itself: the fence helper's exec stage
		// restricts itself, then execs the server. Its own pid comes from
		// its records, else from /proc while it lives, else (its records
		// not yet read) at the domain's next denial.
		p.bindCreator(v.Domain, uint32(v.PID))
		if err := p.d.saveState(); err != nil {
			p.d.log.Error("save the run table", "err", err)
		}
		for _, w := range waiting {
			p.denial(run, w.rec)
		}
	case audit.LandlockAccess:
		if run := p.d.table.ByDomain(v.Domain); run != nil {
			p.denial(run, v)
			return
		}
		if p.foreign[v.Domain] {
			return
		}
		if p.npend >= maxPending {
			p.d.auditDrops.Add(1)
			return
		}
		p.pending[v.Domain] = append(p.pending[v.Domain], pendingDenial{rec: v, since: now})
		p.npend++
	}
}

// bindCreator records the own pid of the creator (pid, as the probes see
// it) of a run's Landlock domain and returns it, or remembers to look for
// it again and returns 0.
func (p *processor) bindCreator(domain string, pid uint32) uint32 {
	own := p.nsPIDs[pid]
	if own == 0 {
		own = p.d.table.OwnPID(pid) // read at registration
	}
	if own == 0 {
		if proc, err := procinfo.Of(int(pid), nil); err == nil {
			own = uint32(proc.OwnPID)
		}
	}
	if own != 0 {
		p.d.table.SetDomainCreator(domain, own)
		delete(p.unbound, domain)
		return own
	}
	if len(p.unbound) >= maxCached {
		clear(p.unbound)
	}
	p.unbound[domain] = pid
	return 0
}

// expirePending sends, without a run, denials whose domain record never
// came (their domain was created before the daemon started).
func (p *processor) expirePending(now time.Time) {
	for dom, list := range p.pending {
		if len(list) > 0 && now.Sub(list[0].since) < p.d.cfg.DomainWait {
			continue
		}
		for _, w := range list {
			p.denial(nil, w.rec)
		}
		delete(p.pending, dom)
		p.npend -= len(list)
	}
}

func (p *processor) denial(run *runs.Run, a audit.LandlockAccess) {
	t := time.UnixMilli(a.TimeMS)
	e := p.event(run, schema.KindLandlockDenial, t)
	ld := &schema.LandlockDenial{Domain: a.Domain, PID: a.PID, Comm: schema.SanitizeComm(a.Comm)}
	for _, b := range a.Blockers {
		if schema.IsToken(b) {
			ld.Blockers = append(ld.Blockers, b)
		}
	}
	if ld.Blockers == nil {
		ld.Blockers = []string{}
	}
	if a.Path != "" {
		ld.PathHash = p.hash(a.Path)
		if run != nil {
			// The creator's own /proc entries are its /proc/self, as in
			// fileOp; the hash stays the path as the record names it.
			path := a.Path
			own := p.d.table.DomainCreator(a.Domain)
			if pid, ok := p.unbound[a.Domain]; ok && own == 0 {
				own = p.bindCreator(a.Domain, pid)
			}
			if own != 0 {
				path = classify.SelfProc(path, own, own)
			}
			ld.PathClass, _ = run.Policy.Classify(path, true, classify.Read, -13)
		}
	}
	p.batch = append(p.batch, e)
	p.batch[len(p.batch)-1].LandlockDenial = ld
}
