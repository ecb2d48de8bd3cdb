// Package runs keeps the daemon's table of registered runs: the slot each
// run's processes carry in the kernel, the pids seen in its tree (kept after
// they exit, so late audit records still find their run), and the Landlock
// domains that belong to it.
package runs

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Run is one registered run. Its fields do not change after Add, except
// through Table methods.
type Run struct {
	ID          string
	ScopeID     string
	ScopeHash   string
	Mode        schema.RunMode
	Slot        uint32
	RootPID     uint32
	LandlockABI int
	// ExecPending: the root process is the launcher's fence helper, which
	// has yet to exec the server (see InSetup).
	ExecPending bool
	Policy      classify.Policy
	Registered  time.Time

	live  int       // processes of the tree still alive
	ended time.Time // when the last one exited (zero while running)
}

// Ended reports whether every process of the run has exited.
func (r *Run) Ended() bool { return !r.ended.IsZero() }

// ErrDuplicate is returned when a run id is registered twice.
var ErrDuplicate = errors.New("run already registered")

// Table is safe for concurrent use. It has one lock.
type Table struct {
	mu      sync.Mutex
	next    uint32
	bySlot  map[uint32]*Run
	byID    map[string]*Run
	pids    map[uint32]uint32 // pid → slot, including exited pids until the run is forgotten
	domains map[string]uint32 // Landlock domain → slot
	// setup holds root pids that have not exec'd the server yet: until then
	// the process is the launcher's own fence helper. The value is the
	// helper's comm once seen.
	setup map[uint32]string
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{
		bySlot:  map[uint32]*Run{},
		byID:    map[string]*Run{},
		pids:    map[uint32]uint32{},
		domains: map[string]uint32{},
		setup:   map[uint32]string{},
	}
}

// Add gives r a fresh slot (slots are never reused, so a late kernel record
// can never be attributed to a later run) and records its root pid.
func (t *Table) Add(r *Run) (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[r.ID]; ok {
		return 0, fmt.Errorf("%w: %s", ErrDuplicate, r.ID)
	}
	if s, ok := t.pids[r.RootPID]; ok {
		if old := t.bySlot[s]; old != nil && !old.Ended() {
			return 0, fmt.Errorf("pid %d already belongs to run %s", r.RootPID, old.ID)
		}
	}
	t.next++
	r.Slot = t.next
	r.live = 1
	t.bySlot[r.Slot] = r
	t.byID[r.ID] = r
	t.pids[r.RootPID] = r.Slot
	if r.ExecPending {
		t.setup[r.RootPID] = ""
	}
	return r.Slot, nil
}

// AddRoot adds another root process to a running run: the launcher starts
// a fresh helper when it narrows the fence and restarts the server.
func (t *Table) AddRoot(slot, pid uint32, execPending bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil {
		return fmt.Errorf("run slot %d is not registered", slot)
	}
	if s, ok := t.pids[pid]; ok && s != slot {
		if old := t.bySlot[s]; old != nil && !old.Ended() {
			return fmt.Errorf("pid %d already belongs to run %s", pid, old.ID)
		}
	}
	t.pids[pid] = slot
	if execPending {
		t.setup[pid] = ""
	}
	r.live++
	r.ended = time.Time{}
	return nil
}

// InSetup reports whether a record of process pid with comm comes from the
// launcher's fence helper before it exec'd the server: the helper's own
// file operations (opening the rule paths, closing inherited descriptors)
// are not the server's. The phase ends at the root's exec (Execed) or, should
// that record have been lost, at the first record with another comm.
func (t *Table) InSetup(pid uint32, comm string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.setup[pid]
	switch {
	case !ok:
		return false
	case c == "":
		t.setup[pid] = comm
		return true
	case c != comm:
		delete(t.setup, pid)
		return false
	}
	return true
}

// Execed ends the setup phase of a root pid: the server now runs.
func (t *Table) Execed(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.setup, pid)
}

// Remove forgets a run (a failed registration or a run long ended).
func (t *Table) Remove(slot uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil {
		return
	}
	delete(t.bySlot, slot)
	delete(t.byID, r.ID)
	for pid, s := range t.pids {
		if s == slot {
			delete(t.pids, pid)
			delete(t.setup, pid)
		}
	}
	for d, s := range t.domains {
		if s == slot {
			delete(t.domains, d)
		}
	}
}

// BySlot returns the run of a kernel slot.
func (t *Table) BySlot(slot uint32) *Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySlot[slot]
}

// ByID returns a run by id.
func (t *Table) ByID(id string) *Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// ByPID returns the run a pid belongs (or belonged) to.
func (t *Table) ByPID(pid uint32) *Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySlot[t.pids[pid]]
}

// Forked records a child of a run's tree.
func (t *Table) Forked(slot, child uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil {
		return
	}
	t.pids[child] = slot
	r.live++
	r.ended = time.Time{}
}

// Exited records that a process of a run's tree exited and reports whether
// it was the run's last.
func (t *Table) Exited(slot uint32, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil || r.live == 0 {
		return false
	}
	r.live--
	if r.live == 0 {
		r.ended = now
		return true
	}
	return false
}

// End marks a run ended now (explicit unregister).
func (t *Table) End(slot uint32, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.bySlot[slot]; r != nil && r.ended.IsZero() {
		r.live = 0
		r.ended = now
	}
}

// BindDomain maps a Landlock domain to the run of the pid that created it.
// It returns nil when that pid is in no run.
func (t *Table) BindDomain(domain string, creator uint32) *Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[t.pids[creator]]
	if r != nil {
		t.domains[domain] = r.Slot
	}
	return r
}

// ByDomain returns the run of a Landlock domain, if known.
func (t *Table) ByDomain(domain string) *Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.domains[domain]
	if !ok {
		return nil
	}
	return t.bySlot[s]
}

// Expired returns the slots of runs that ended before cutoff.
func (t *Table) Expired(cutoff time.Time) []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint32
	for s, r := range t.bySlot {
		if !r.ended.IsZero() && r.ended.Before(cutoff) {
			out = append(out, s)
		}
	}
	return out
}

// Active is the number of runs in the table that have not ended.
func (t *Table) Active() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.bySlot {
		if r.ended.IsZero() {
			n++
		}
	}
	return n
}

// Len is the number of runs in the table (running or recently ended).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.bySlot)
}
