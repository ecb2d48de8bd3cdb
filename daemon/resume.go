package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/daemon/runs"
	"github.com/mcpwarden/mcpwarden/schema"
)

// stateFile is the run table's file in the state directory.
const stateFile = "runs.json"

// gap is a lapse in observation that touched a run.
type gap struct {
	run      *runs.Run
	from     time.Time
	reason   string
	severity schema.Severity
}

// Gap reasons (OBSERVATION_GAP findings a restart produces).
const (
	// GapRestart: the daemon stopped cleanly and came back; the probes
	// recorded on meanwhile, but Landlock's audit records of the lapse are
	// lost (nobody read the audit stream).
	GapRestart = "daemon_restart"
	// GapRestartUnclean: the daemon was killed; besides Landlock's
	// records, the kernel records it had read and not yet published are lost.
	GapRestartUnclean = "daemon_restart_unclean"
	// GapUpgrade: another mcpwarden version's probes were replaced; what
	// they recorded and nobody read is lost.
	GapUpgrade = "daemon_upgrade"
	// GapProbesLost: the run's probes were gone (detached, bpffs
	// unmounted): its processes went unobserved and are no longer followed.
	GapProbesLost = "daemon_restart_probes_lost"
)

// loadState reads the run table of an earlier daemon; nil when there is
// none, or it belongs to an earlier boot (whose processes are all gone).
func (d *Daemon) loadState() (*runs.State, error) {
	if d.cfg.StateDir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(d.cfg.StateDir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the run table: %w", err)
	}
	var st runs.State
	if err := json.Unmarshal(b, &st); err != nil || st.Version != runs.StateVersion {
		// Fail closed on the runs (the lapse is reported below as lost
		// probes would be), not on the daemon: a broken file must not keep
		// the host unobserved.
		d.log.Error("the run table of the earlier daemon is unreadable; its runs cannot be adopted", "err", err, "version", st.Version)
		return nil, nil
	}
	if st.BootID != d.cfg.Origin.BootID {
		return nil, nil
	}
	return &st, nil
}

// saveState writes the run table atomically (a temporary file renamed
// over the old one), readable by root only.
func (d *Daemon) saveState() error {
	if d.cfg.StateDir == "" {
		return nil
	}
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	b, err := json.Marshal(d.table.State(d.cfg.Origin.BootID))
	if err != nil {
		return err
	}
	path := filepath.Join(d.cfg.StateDir, stateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write the run table: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the run table: %w", err)
	}
	return nil
}

// resume adopts the runs of an earlier daemon: the table from the state
// file, the processes the kernel still watches from the pinned probes. Each
// run that was live when observation lapsed gets an OBSERVATION_GAP
// finding; runs whose probes are gone end with one.
func (d *Daemon) resume(now time.Time) error {
	st, err := d.loadState()
	if err != nil {
		return err
	}
	res := d.probes.Resumed()
	if st == nil {
		if res.Watched > 0 {
			d.log.Warn("the kernel still watches processes but no run table was found: they stay unattributed", "watched", res.Watched)
		}
		return d.syncHooks()
	}
	live, err := d.probes.WatchedBySlot()
	if err != nil {
		return err
	}
	from, reason, sev := res.Stopped, GapRestart, schema.SeverityMedium
	switch {
	case !res.Adopted && !res.Replaced:
		// No pinned probes: nothing followed the runs' processes.
		live = nil
		reason, sev = GapProbesLost, schema.SeverityHigh
		if fi, err := os.Stat(filepath.Join(d.cfg.StateDir, stateFile)); err == nil {
			from = fi.ModTime()
		}
	case res.Replaced:
		reason, sev = GapUpgrade, schema.SeverityHigh
	case res.Stopped.IsZero():
		from, reason, sev = res.LastAlive, GapRestartUnclean, schema.SeverityHigh
	}
	if from.IsZero() {
		from = now
	}
	d.table = runs.Restore(*st, live, now)
	for _, rs := range st.Runs {
		// A run that had ended before the lapse lost nothing.
		if !rs.Ended.IsZero() && rs.Ended.Before(from) {
			continue
		}
		if run := d.table.ByID(rs.ID); run != nil {
			d.gaps = append(d.gaps, gap{run: run, from: from, reason: reason, severity: sev})
		}
	}
	d.log.Warn("adopted the runs of the earlier daemon", "runs", len(st.Runs), "live", d.table.Live(), "lapse", reason, "since", from.UTC().Format(time.RFC3339))
	if err := d.syncHooks(); err != nil {
		return err
	}
	return d.saveState()
}

// syncHooks attaches the syscall hooks when a run is live, detaches them
// otherwise.
func (d *Daemon) syncHooks() error {
	d.hooksMu.Lock()
	defer d.hooksMu.Unlock()
	return d.probes.SetSyscallHooks(d.table.Live() > 0)
}

// emitGaps turns the lapses found at start-up into findings.
func (p *processor) emitGaps() {
	for _, g := range p.d.gaps {
		e := p.event(g.run, schema.KindFinding, g.from)
		e.Finding = &schema.Finding{Type: schema.FindingObservationGap, Severity: g.severity, Reason: g.reason, EvidenceIDs: []string{}}
		p.batch = append(p.batch, e)
	}
	p.d.gaps = nil
}

// PinDir is where the daemon of stateDir pins its probes: a directory of
// its own under /sys/fs/bpf/mcpwarden, named by an id kept in the state
// directory (probes.id, written when missing), so daemons with different
// state directories never adopt each other's probes.
func PinDir(stateDir string) (string, error) { return probes.StatePinDir(stateDir, true) }
