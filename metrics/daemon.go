package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/daemon/audit"
)

// DaemonSource is what the daemon's series are read from (*daemon.Daemon).
type DaemonSource interface {
	Stats() daemon.Stats
}

// Drop stages of mcpwarden_daemon_drops_total: where an event was lost.
const (
	DropBPFRingFull     = "bpf_ring_full"     // the kernel found the ring buffer full
	DropBPFInflightFull = "bpf_inflight_full" // no room to keep a syscall's arguments
	DropBPFWatchFull    = "bpf_watch_full"    // a forked child could not be followed
	DropReaderQueueFull = "reader_queue_full" // the reader's queue to the event builder was full
	DropAuditQueueFull  = "audit_queue_full"  // the audit reader's queue was full
	DropAuditSocket     = "audit_socket"      // the audit netlink socket overflowed (ENOBUFS)
	DropKernelAudit     = "kernel_audit"      // the kernel lost audit records (its `lost` counter grew)
	DropPublishFailed   = "publish_failed"    // the event sink refused the batch
)

// Refusal reasons of mcpwarden_daemon_registrations_refused_total.
const (
	RefusedSinkDown = "sink_down" // the event sink refuses events: the run would go unrecorded
	RefusedInvalid  = "invalid"   // malformed or invalid (scope hash, root pid, protocol)
	RefusedPeer     = "peer"      // the connecting process is not root nor the daemon's user
)

type daemonCollector struct {
	src DaemonSource

	ready, runsActive, runsRegistered, runsRestarted, refused *prometheus.Desc
	kernelRecords, drops, truncated, decodeErrors, published  *prometheus.Desc
	sinkRefusing, auditStream, landlockABI, hooks             *prometheus.Desc
	auditReaders                                              *prometheus.Desc
}

// Daemon returns the collector of mcpwarden_daemon_* series (besides those
// of the sink and the publisher, see CountEvents and Publisher).
func Daemon(src DaemonSource) prometheus.Collector {
	const sub = "daemon"
	return &daemonCollector{
		src:            src,
		ready:          desc(sub, "ready", "1 once the probes, the audit stream and the registration socket are up."),
		runsActive:     desc(sub, "runs_active", "Registered runs whose processes have not all exited."),
		runsRegistered: desc(sub, "runs_registered_total", "Runs registered."),
		runsRestarted:  desc(sub, "runs_restarted_total", "Roots added to a registered run (a server restarted under a narrower fence)."),
		refused:        desc(sub, "registrations_refused_total", "Registrations refused, by reason: sink_down (the event sink refuses events), invalid, peer (not root).", "reason"),
		kernelRecords:  desc(sub, "kernel_records_total", "Records the kernel probes submitted to the ring buffer."),
		drops:          desc(sub, "drops_total", "Events lost, by the stage that lost them.", "stage"),
		truncated:      desc(sub, "paths_truncated_total", "Paths longer or deeper than the probes read (reported as unknown)."),
		decodeErrors:   desc(sub, "decode_errors_total", "Ring buffer records that did not decode."),
		published:      desc(sub, "events_published_total", "Events the event sink accepted."),
		sinkRefusing:   desc(sub, "sink_refusing", "1 while the event sink refuses events (new runs are refused)."),
		auditStream:    desc(sub, "audit_stream", "1 for the state of the Landlock audit stream: on, off, unavailable.", "state"),
		landlockABI:    desc(sub, "landlock_abi", "The kernel's Landlock ABI version."),
		hooks:          desc(sub, "hooks", "Kernel hooks by state: attached, or unavailable (did not load).", "state"),
		auditReaders:   desc(sub, "audit_other_readers", "Other readers of the kernel's audit log last seen: a registered auditd and other multicast sockets (a stalled one makes the kernel lose records)."),
	}
}

func (c *daemonCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.runsActive, c.runsRegistered, c.runsRestarted, c.refused,
		c.kernelRecords, c.drops, c.truncated, c.decodeErrors, c.published, c.sinkRefusing, c.auditStream, c.landlockABI, c.hooks, c.auditReaders} {
		ch <- d
	}
}

func (c *daemonCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	ch <- gauge(c.ready, boolValue(s.Ready))
	if !s.Ready {
		return
	}
	ch <- gauge(c.runsActive, float64(s.RunsActive))
	ch <- counter(c.runsRegistered, s.RunsRegistered)
	ch <- counter(c.runsRestarted, s.RunsRestarted)
	ch <- counter(c.refused, s.RefusedSinkDown, RefusedSinkDown)
	ch <- counter(c.refused, s.RefusedInvalid, RefusedInvalid)
	ch <- counter(c.refused, s.RefusedPeer, RefusedPeer)
	ch <- counter(c.kernelRecords, s.Probes.Events)
	for _, d := range []struct {
		stage string
		n     uint64
	}{
		{DropBPFRingFull, s.Probes.RingDrops},
		{DropBPFInflightFull, s.Probes.InflightFull},
		{DropBPFWatchFull, s.Probes.WatchFull},
		{DropReaderQueueFull, s.Probes.QueueDrops},
		{DropAuditQueueFull, s.AuditQueueDrops},
		{DropAuditSocket, s.AuditLost},
		{DropKernelAudit, s.KernelAuditLost},
		{DropPublishFailed, s.PublishFailed},
	} {
		ch <- counter(c.drops, d.n, d.stage)
	}
	ch <- counter(c.truncated, s.Probes.Truncated)
	ch <- counter(c.decodeErrors, s.Probes.DecodeErrors)
	ch <- counter(c.published, s.Published)
	ch <- gauge(c.sinkRefusing, boolValue(s.SinkDown))
	for _, st := range []string{audit.StateOn, audit.StateOff, audit.StateUnavailable} {
		ch <- gauge(c.auditStream, boolValue(s.AuditStream == st), st)
	}
	ch <- gauge(c.landlockABI, float64(s.LandlockABI))
	ch <- gauge(c.hooks, float64(s.Hooks), "attached")
	ch <- gauge(c.hooks, float64(s.Unavailable), "unavailable")
	ch <- gauge(c.auditReaders, float64(s.AuditOtherReaders))
}
