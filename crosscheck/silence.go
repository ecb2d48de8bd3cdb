package crosscheck

import (
	"sort"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// ReasonDaemonSilent is the reason of a run's OBSERVATION_GAP when its
// host's daemon sent no health report for longer than Config.DaemonSilence
// while the run was live: killed and not restarted (SIGKILL, OOM, a crash),
// or stopped and not started again. The daemon publishes the kernel view
// and, through its socket, the launcher's records: a run it did not see end
// was not observed, whether or not its exit record reached the stream by
// the launcher's own spool.
const ReasonDaemonSilent = "daemon_silent"

// ReasonNoDaemon is the reason of a run's OBSERVATION_GAP when its host's
// daemon had sent no health report for DaemonSilence before the run
// started and sent none until that silence was final: a host where no
// daemon runs (the launcher's records reach NATS through its own spool,
// `run --nats --daemon-socket off`, or a daemon that never started), or
// where it started only later. Nothing watched the run's processes in the
// kernel or read Landlock's records, whether or not the run ever exits.
const ReasonNoDaemon = "no_daemon"

// DefaultDaemonSilence is how long a host's daemon may go without a health
// report before the silence is a gap: three of the daemon's default report
// intervals (60 s). The daemon reports at start, every interval and when it
// stops; a report lost in transit is spooled and redelivered, so only a
// daemon that is not running leaves a hole this long.
const DefaultDaemonSilence = 3 * time.Minute

// CheckSilence returns the OBSERVATION_GAP daemon_silent findings of one
// run (its events: run) from the health reports of its host's daemon
// (health: other kinds, hosts and components are ignored), final as of
// asOf. A silence is a span between two consecutive daemon reports (or from
// the last report to asOf) longer than DaemonSilence that overlaps the run:
// from its first event to its exit record (asOf when there is none). The
// span is measured on event time. health must hold the host's reports from
// DaemonSilence before the run's first event on. A silence that began
// before the run (no report in the DaemonSilence before it started: a host
// without a daemon, or none in health at all) is ReasonNoDaemon, one that
// began after a report ReasonDaemonSilent. The finding is dated when the silence
// reached DaemonSilence, so it is final only once a report had the whole
// late-event window to arrive; its evidence is the run's first event and
// the last report before the silence, so the finding is the same row
// whether the daemon later came back or not.
func CheckSilence(run, health []schema.Event, cfg Config, asOf time.Time) []schema.Event {
	return CheckSilenceArrived(run, nil, health, cfg, asOf)
}

// CheckSilenceArrived is CheckSilence for a run whose events' arrivals are
// known (arrived: Unix ns by event id, the judge's clock). The reports are
// dated by the host's clock and asOf is the judge's: the silence that is
// still going on (since the last report) is measured up to asOf read on
// the host's clock, by the offset the run's arrivals show (ClockOffset).
// Before, a host whose clock was behind the collector's by more than
// DaemonSilence and the window had its daemon look silent, and every clean
// run live there got daemon_silent; one ahead had a dead daemon found that
// much later.
func CheckSilenceArrived(run []schema.Event, arrived map[string]int64, health []schema.Event, cfg Config, asOf time.Time) []schema.Event {
	if off, ok := ClockOffset(run, arrived); ok {
		asOf = asOf.Add(-time.Duration(off))
	}
	cfg = cfg.withDefaults()
	if len(run) == 0 {
		return nil
	}
	var first, exit *schema.Event
	for i := range run {
		e := &run[i]
		if e.Kind == schema.KindFinding || e.RunID == "" {
			continue
		}
		if first == nil || e.TimeNS < first.TimeNS || e.TimeNS == first.TimeNS && e.EventID < first.EventID {
			first = e
		}
		if e.Kind == schema.KindLaunch && e.Launch != nil && e.Launch.Phase == schema.PhaseExit && (exit == nil || e.TimeNS < exit.TimeNS) {
			exit = e
		}
	}
	if first == nil {
		return nil
	}
	var reports []*schema.Event
	for i := range health {
		e := &health[i]
		if e.Kind == schema.KindHealth && e.Health != nil && e.Health.Component == "daemon" && e.Host == first.Host {
			reports = append(reports, e)
		}
	}
	sortPtrs(reports)
	start, end := first.TimeNS, asOf.UnixNano()
	if exit != nil {
		end = exit.TimeNS
	}
	limit := cfg.DaemonSilence.Nanoseconds()
	cutoff := asOf.Add(-cfg.Window).UnixNano()
	// prev: the last report at or before the run's start.
	i := sort.Search(len(reports), func(i int) bool { return reports[i].TimeNS > start })
	var prev *schema.Event
	if i > 0 {
		prev = reports[i-1]
	}
	for {
		var from int64
		evidence := []string{first.EventID}
		reason := ReasonDaemonSilent
		if prev != nil {
			from = prev.TimeNS
			evidence = append(evidence, prev.EventID)
		} else {
			reason = ReasonNoDaemon
			// No report before the run in what was read: silent since
			// at least DaemonSilence before it started.
			from = start - limit - 1
		}
		to := asOf.UnixNano()
		if i < len(reports) {
			to = reports[i].TimeNS
		}
		if from >= end {
			return nil
		}
		if to-from > limit && to > start {
			at := from + limit
			if at > cutoff {
				return nil // the silence is not final yet
			}
			f := finding(first, at, schema.FindingObservationGap, schema.SeverityMedium, reason, evidence, nil, "", "")
			return []schema.Event{f}
		}
		if i >= len(reports) {
			return nil
		}
		prev = reports[i]
		i++
	}
}
