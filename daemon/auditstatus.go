package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/audit"
	"github.com/mcpwarden/mcpwarden/schema"
)

// GapKernelAuditLost is the reason of a run's OBSERVATION_GAP when the
// kernel's audit `lost` counter grew while the run was live: the kernel
// dropped audit records (its backlog was full, a reader stalled it, the
// rate limit), and a Landlock denial among them reached no reader. The
// counter is the host's, not the run's: every run live in the window gets
// the gap, whichever program's records were lost.
const GapKernelAuditLost = "kernel_audit_lost"

// DefaultAuditBacklogFloor is the backlog_limit the daemon raises the
// kernel's to at start when it is lower. The kernel's default, 64 records,
// is what auditd's own rules replace at boot (`-b 8192` in Debian's and
// Red Hat's audit.rules); without auditd it stays 64, and one burst of
// denials or of BPF program loads overflows it (measured on this host: a
// burst of 3,000 Landlock denials lost 692 records at 64). 8,192 queued
// records hold at most a few MiB of kernel memory, freed as kauditd sends
// them: the same value auditd deployments use.
const DefaultAuditBacklogFloor = 8192

// auditLossRepeat is how often a run gets another kernel_audit_lost gap
// while the losses go on.
const auditLossRepeat = time.Minute

// auditWatch is the processor's view of the kernel's audit status.
type auditWatch struct {
	ok      bool         // last is a status read by this daemon
	last    audit.Status // the last status read
	at      time.Time    // when it was read
	flagged map[string]time.Time
	readers string // the other readers last reported, to log changes only
	low     bool   // backlog_limit below the floor could not be raised (reported)
}

// setUpAudit reads the kernel's audit status at start: it raises a
// backlog_limit below the floor (unless the operator said to leave it),
// says who else reads the audit log, and keeps the lost counter as the
// baseline of the checks that follow.
func (d *Daemon) setUpAudit() []any {
	st, err := audit.GetStatus()
	if err != nil {
		d.log.Warn("read the kernel's audit status: its lost records cannot be told", "err", err)
		return []any{"audit_status", "unavailable"}
	}
	floor := d.cfg.AuditBacklogFloor
	switch {
	case floor <= 0:
	case st.BacklogLimit == 0:
		// No limit at all: nothing to raise.
	case st.BacklogLimit < uint32(floor):
		if err := audit.SetBacklogLimit(uint32(floor)); err != nil {
			d.log.Warn("raise the kernel's audit backlog_limit: bursts of records will be lost (and reported)", "backlog_limit", st.BacklogLimit, "floor", floor, "err", err)
		} else {
			d.log.Warn("raised the kernel's audit backlog_limit so that bursts of Landlock records are not lost ('mcpwarden daemon --audit-backlog-floor 0' leaves it)", "from", st.BacklogLimit, "to", floor)
			st.BacklogLimit = uint32(floor)
		}
	}
	d.auditStatus, d.auditStatusOK = st, true
	return []any{"audit_backlog_limit", st.BacklogLimit, "audit_lost", st.Lost, "auditd_pid", st.PID}
}

// checkAudit reads the kernel's audit status and the other readers of the
// audit log; called every second. A growth of the lost counter since the
// last read is a gap on every run live since then.
func (p *processor) checkAudit(now time.Time) {
	if p.d.audit == nil {
		return
	}
	w := &p.audit
	st, err := audit.GetStatus()
	if err != nil {
		p.d.log.Warn("read the kernel's audit status", "err", err)
		return
	}
	if w.ok {
		switch {
		case st.Lost > w.last.Lost:
			p.auditLost(w.at, now, uint64(st.Lost-w.last.Lost))
		case st.Lost < w.last.Lost:
			// Reset (auditctl --reset-lost) or wrapped: what was lost
			// between the two reads cannot be told, so it counts.
			p.d.log.Warn("the kernel's audit lost counter went back (auditctl --reset-lost?): records lost meanwhile cannot be counted", "was", w.last.Lost, "now", st.Lost)
			p.auditLost(w.at, now, 0)
		}
	}
	// A limit lowered below the floor while the daemon runs is raised
	// again: the floor holds for as long as the daemon watches.
	if floor := p.d.cfg.AuditBacklogFloor; floor > 0 && st.BacklogLimit != 0 && st.BacklogLimit < uint32(floor) {
		if err := audit.SetBacklogLimit(uint32(floor)); err != nil {
			if !w.low {
				p.d.log.Warn("the kernel's audit backlog_limit was lowered below the daemon's floor and cannot be raised again: bursts of records will be lost (and reported)", "backlog_limit", st.BacklogLimit, "floor", floor, "err", err)
			}
			w.low = true
		} else {
			p.d.log.Warn("the kernel's audit backlog_limit was lowered below the daemon's floor: raised again ('mcpwarden daemon --audit-backlog-floor 0' leaves it)", "from", st.BacklogLimit, "to", floor)
			st.BacklogLimit, w.low = uint32(floor), false
		}
	} else {
		w.low = false
	}
	w.last, w.ok, w.at = st, true, now
	p.otherReaders(st.PID)
}

// auditLost puts a kernel_audit_lost gap, dated at from, on every run live
// since from (once a minute per run), and says so.
func (p *processor) auditLost(from, now time.Time, n uint64) {
	live := p.d.table.ObservedSince(from.Add(-time.Second))
	p.d.log.Warn("the kernel lost audit records: an observation gap on each live run", "lost", n, "since", now.Sub(from).Round(time.Millisecond).String(), "runs", len(live), "backlog_limit", p.audit.last.BacklogLimit)
	for id, at := range p.audit.flagged {
		if now.Sub(at) >= auditLossRepeat {
			delete(p.audit.flagged, id)
		}
	}
	for _, r := range live {
		if _, ok := p.audit.flagged[r.ID]; ok || len(p.audit.flagged) >= maxLostRuns {
			continue
		}
		p.audit.flagged[r.ID] = now
		e := p.event(r, schema.KindFinding, from)
		e.Finding = &schema.Finding{Type: schema.FindingObservationGap, Severity: schema.SeverityHigh, Reason: GapKernelAuditLost, EvidenceIDs: []string{}}
		p.batch = append(p.batch, e)
	}
	p.d.kernelAuditLost.Add(max(n, 1))
}

// otherReaders logs, when they change, the other readers of the audit log:
// the registered audit daemon (auditd: the kernel waits for it, so a
// stopped one stalls every reader and records are lost) and the other
// sockets of the multicast group (another mcpwarden daemon, a second
// monitor: each copy is work for kauditd).
func (p *processor) otherReaders(auditdPID uint32) {
	own, err := p.d.audit.Inode()
	if err != nil {
		return
	}
	readers, err := audit.MulticastReaders()
	if err != nil {
		p.d.log.Warn("list the readers of the audit log", "err", err)
		return
	}
	var others []string
	for _, r := range readers {
		if r.Inode != own {
			others = append(others, strconv.FormatUint(uint64(r.PortID), 10))
		}
	}
	slices.Sort(others)
	key := fmt.Sprintf("%d|%s", auditdPID, strings.Join(others, ","))
	p.d.auditReaders.Store(uint64(len(others)) + uint64(min(auditdPID, 1)))
	if key == p.audit.readers {
		return
	}
	p.audit.readers = key
	if auditdPID == 0 && len(others) == 0 {
		p.d.log.Info("the daemon is the only reader of the kernel's audit log")
		return
	}
	p.d.log.Warn("another reader of the kernel's audit log: when one stalls or falls behind, the kernel's backlog fills and records are lost (reported as kernel_audit_lost gaps)",
		"auditd_pid", auditdPID, "other_multicast_readers", len(others), "their_netlink_ports", strings.Join(others, ","))
}
