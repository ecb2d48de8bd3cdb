// Package runs keeps the daemon's table of registered runs: the slot each
// run's processes carry in the kernel, the pids seen in its tree (kept after
// they exit, so late audit records still find their run), the Landlock
// domains that belong to it, and which launcher process owns each run id.
// The table's durable part (State) survives a daemon restart.
package runs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Owner names a launcher process for as long as it lives: its pid in the
// daemon's pid namespace and its start time (clock ticks since boot), so a
// later process that gets the same pid is another owner.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	UID   uint32 `json:"uid"`
}

// Same reports whether o and p are the same process.
func (o Owner) Same(p Owner) bool { return o.PID == p.PID && o.Start == p.Start }

// FileID names a file by device (stat's st_dev) and inode, whatever mount
// namespace it is seen from.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Run is one registered run. Its fields do not change after Add, except
// through Table methods.
type Run struct {
	ID          string          `json:"id"`
	ScopeID     string          `json:"scope_id"`
	ScopeHash   string          `json:"scope_hash"`
	Mode        schema.RunMode  `json:"mode"`
	Slot        uint32          `json:"slot"`
	RootPID     uint32          `json:"root_pid"`
	LandlockABI int             `json:"landlock_abi,omitempty"`
	Policy      classify.Policy `json:"policy"`
	Registered  time.Time       `json:"registered"`
	// Owner is the launcher that registered the run; UID its user.
	Owner Owner `json:"owner"`
	// CgroupID is the cgroup v2 id of the root process at registration (0
	// when cgroup v2 is not mounted).
	CgroupID uint64 `json:"cgroup_id,omitempty"`
	// ExecPending: the root process is the launcher's fence helper, which
	// has yet to exec the server (see InSetup).
	ExecPending bool `json:"-"`
	// Helper is the fence helper's executable: processes of the setup phase
	// that exec it are still the launcher's (zero: any exec ends the phase).
	Helper FileID `json:"helper_exe,omitzero"`

	live  map[uint32]bool // processes of the tree still alive
	ended time.Time       // when the last one exited (zero while running)
}

// Ended reports whether every process of the run has exited.
func (r *Run) Ended() bool { return !r.ended.IsZero() }

// ErrDuplicate is returned when a run id is registered twice.
var ErrDuplicate = errors.New("run already registered")

// ErrNotOwner is returned when a run id is used by another process than
// the launcher that first used it.
var ErrNotOwner = errors.New("the run belongs to another launcher process")

// maxClaims bounds the run ids remembered with their owner.
const maxClaims = 1 << 16

type claim struct {
	owner Owner
	at    time.Time
}

// Table is safe for concurrent use. It has one lock.
type Table struct {
	mu      sync.Mutex
	next    uint32
	bySlot  map[uint32]*Run
	byID    map[string]*Run
	pids    map[uint32]uint32 // pid → slot, including exited pids until the run is forgotten
	domains map[string]uint32 // Landlock domain → slot
	// creatorPIDs: a Landlock domain → its creator's pid in the creator's
	// own pid namespace (the number its /proc gives it, and so the number
	// the domain's records name its /proc entries by); absent when unknown.
	creatorPIDs map[string]uint32
	// ownOf: a run's pid → its pid in its own pid namespace, where
	// registration read it (the root and the processes it adopted).
	ownOf map[uint32]uint32
	// setup holds root pids that have not exec'd the server yet: until then
	// the process is the launcher's own fence helper. The value is the
	// helper's comm once seen.
	setup  map[uint32]string
	claims map[string]claim // run id → the launcher that first used it
	// setupChanged: the setup phase changed since SetupChanged last said
	// so (the durable state must follow it, see SetupChanged).
	setupChanged bool
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{
		bySlot:      map[uint32]*Run{},
		byID:        map[string]*Run{},
		pids:        map[uint32]uint32{},
		domains:     map[string]uint32{},
		creatorPIDs: map[string]uint32{},
		ownOf:       map[uint32]uint32{},
		setup:       map[uint32]string{},
		claims:      map[string]claim{},
	}
}

// Claim binds run id to owner the first time it is used (a launch record
// or a registration); afterwards only that same process may use it.
func (t *Table) Claim(id string, owner Owner, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.claimLocked(id, owner, now)
}

func (t *Table) claimLocked(id string, owner Owner, now time.Time) error {
	if c, ok := t.claims[id]; ok {
		if !c.owner.Same(owner) {
			return fmt.Errorf("%w: run %s", ErrNotOwner, id)
		}
		return nil
	}
	if len(t.claims) >= maxClaims {
		t.evictClaim()
	}
	t.claims[id] = claim{owner: owner, at: now}
	return nil
}

// evictClaim forgets the oldest claim of a run not in the table.
func (t *Table) evictClaim() {
	var oldest string
	var at time.Time
	for id, c := range t.claims {
		if _, live := t.byID[id]; live {
			continue
		}
		if oldest == "" || c.at.Before(at) {
			oldest, at = id, c.at
		}
	}
	delete(t.claims, oldest)
}

// Add gives r a fresh slot (slots are never reused, so a late kernel record
// can never be attributed to a later run), records its root pid and claims
// its id for r.Owner.
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
	if err := t.claimLocked(r.ID, r.Owner, r.Registered); err != nil {
		return 0, err
	}
	t.next++
	r.Slot = t.next
	r.live = map[uint32]bool{r.RootPID: true}
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
	r.live[pid] = true
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
		t.setupChanged = true
		return true
	case c != comm:
		delete(t.setup, pid)
		t.setupChanged = true
		return false
	}
	return true
}

// SetupChanged reports, once, that the setup phase changed (a process
// left it, or its comm became known) since it last did. The daemon then
// saves the table: a restarted daemon reads the ring on from where the last
// one stopped, so a state that still had a process in the setup phase
// after the record that ended it was read would hide that process for good.
func (t *Table) SetupChanged() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.setupChanged
	t.setupChanged = false
	return c
}

// Execed ends the setup phase of process pid, which now runs exe: the
// server, unless exe is the run's fence helper (the helper starting itself,
// or its init of the server's pid namespace).
func (t *Table) Execed(pid uint32, exe FileID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.setup[pid]; !ok {
		return
	}
	t.setupChanged = true
	if r := t.bySlot[t.pids[pid]]; r != nil && r.Helper != (FileID{}) && r.Helper == exe {
		t.setup[pid] = "" // its comm is the new image's now
		return
	}
	delete(t.setup, pid)
}

// Remove forgets a run (a failed registration or a run long ended). Its
// id stays claimed by its owner.
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
			delete(t.ownOf, pid)
		}
	}
	for d, s := range t.domains {
		if s == slot {
			delete(t.domains, d)
			delete(t.creatorPIDs, d)
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

// Forked records a child of a run's tree, forked by parent. A child of
// the launcher's helper before it exec'd the server is the launcher's too.
func (t *Table) Forked(slot, parent, child uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil {
		return
	}
	if comm, ok := t.setup[parent]; ok {
		t.setup[child] = comm
		t.setupChanged = true
	}
	t.pids[child] = slot
	r.live[child] = true
	r.ended = time.Time{}
}

// Adopted records a child that parent had already forked when the run was
// registered (the kernel follows only the forks after it): a child of the
// helper in its setup phase is the launcher's too, under whatever comm its
// first record shows (it may have exec'd since the fork, unseen).
func (t *Table) Adopted(slot, parent, child uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil {
		return
	}
	if _, ok := t.setup[parent]; ok {
		t.setup[child] = ""
		t.setupChanged = true
	}
	t.pids[child] = slot
	r.live[child] = true
	r.ended = time.Time{}
}

// Exited records that process tgid of a run's tree exited and reports
// whether the run has ended with it. A pid the run does not hold as live
// changes nothing, so a record seen twice (a restarted daemon reads the
// ring from where the last one stopped) does not end a run early.
func (t *Table) Exited(slot, tgid uint32, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySlot[slot]
	if r == nil || !r.live[tgid] {
		return false
	}
	delete(r.live, tgid)
	delete(t.setup, tgid)
	if len(r.live) == 0 && r.ended.IsZero() {
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
		clear(r.live)
		r.ended = now
	}
}

// Live reports how many runs have a process alive.
func (t *Table) Live() int {
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

// SetDomainCreator records the pid that the creator of a bound Landlock
// domain has in its own pid namespace (ownPID, the number its /proc gives
// it): the domain's records name the creator's /proc entries by it.
func (t *Table) SetDomainCreator(domain string, ownPID uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.domains[domain]; ok && ownPID != 0 {
		t.creatorPIDs[domain] = ownPID
	}
}

// SetOwnPID records the pid that process pid of a run has in its own pid
// namespace (read while it lived, at registration).
func (t *Table) SetOwnPID(pid, own uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.pids[pid]; ok && own != 0 {
		t.ownOf[pid] = own
	}
}

// OwnPID is the pid SetOwnPID recorded for pid, 0 if none.
func (t *Table) OwnPID(pid uint32) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ownOf[pid]
}

// DomainCreator is the pid SetDomainCreator recorded for domain, 0 if
// none.
func (t *Table) DomainCreator(domain string) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.creatorPIDs[domain]
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

// ObservedSince lists the runs in the table still running, or that ended
// at or after since: those whose records a loss since then may have hit.
func (t *Table) ObservedSince(since time.Time) []*Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Run
	for _, r := range t.bySlot {
		if r.ended.IsZero() || !r.ended.Before(since) {
			out = append(out, r)
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

// State is the durable part of the table: enough for a restarted daemon to
// attribute the kernel's records and Landlock's to the runs it finds.
type State struct {
	Version  int        `json:"version"`
	BootID   string     `json:"boot_id"` // a state of another boot is stale
	NextSlot uint32     `json:"next_slot"`
	Runs     []RunState `json:"runs"`
}

// StateVersion is the version of State.
const StateVersion = 1

// RunState is one run in State.
type RunState struct {
	Run
	Pids  []uint32 `json:"pids"`  // every pid seen in the tree
	Setup []uint32 `json:"setup"` // its processes still in the setup phase
	// SetupComms: the comm of each of them, once known (a record under
	// another comm ends the phase, as before the restart).
	SetupComms map[uint32]string `json:"setup_comms,omitempty"`
	Domains    []string          `json:"domains"` // its Landlock domains
	// DomainCreators: each domain's creator's pid in its own pid
	// namespace, where known (Table.SetDomainCreator).
	DomainCreators map[string]uint32 `json:"domain_creators,omitempty"`
	Ended          time.Time         `json:"ended,omitzero"`
}

// State returns the durable part of the table.
func (t *Table) State(bootID string) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := State{Version: StateVersion, BootID: bootID, NextSlot: t.next, Runs: []RunState{}}
	for _, slot := range slices.Sorted(maps.Keys(t.bySlot)) {
		r := t.bySlot[slot]
		rs := RunState{Run: *r, Ended: r.ended, Pids: []uint32{}, Setup: []uint32{}, Domains: []string{}}
		rs.live = nil
		for pid, s := range t.pids {
			if s == slot {
				rs.Pids = append(rs.Pids, pid)
				if comm, ok := t.setup[pid]; ok {
					rs.Setup = append(rs.Setup, pid)
					if comm != "" {
						if rs.SetupComms == nil {
							rs.SetupComms = map[uint32]string{}
						}
						rs.SetupComms[pid] = comm
					}
				}
			}
		}
		slices.Sort(rs.Pids)
		slices.Sort(rs.Setup)
		for d, s := range t.domains {
			if s == slot {
				rs.Domains = append(rs.Domains, d)
				if own, ok := t.creatorPIDs[d]; ok {
					if rs.DomainCreators == nil {
						rs.DomainCreators = map[string]uint32{}
					}
					rs.DomainCreators[d] = own
				}
			}
		}
		slices.Sort(rs.Domains)
		st.Runs = append(st.Runs, rs)
	}
	return st
}

// Restore rebuilds a table from a State. live lists, per slot, the
// processes the kernel still watches; a run with none that had not ended
// ends at now.
func Restore(st State, live map[uint32][]uint32, now time.Time) *Table {
	t := NewTable()
	t.next = st.NextSlot
	for _, rs := range st.Runs {
		r := rs.Run
		r.ended = rs.Ended
		r.live = map[uint32]bool{}
		for _, pid := range live[r.Slot] {
			r.live[pid] = true
		}
		if len(r.live) > 0 {
			r.ended = time.Time{}
		} else if r.ended.IsZero() {
			r.ended = now
		}
		run := &r
		t.bySlot[r.Slot] = run
		t.byID[r.ID] = run
		t.claims[r.ID] = claim{owner: r.Owner, at: r.Registered}
		for _, pid := range rs.Pids {
			t.pids[pid] = r.Slot
		}
		for pid := range r.live {
			t.pids[pid] = r.Slot
		}
		for _, d := range rs.Domains {
			t.domains[d] = r.Slot
			if own := rs.DomainCreators[d]; own != 0 {
				t.creatorPIDs[d] = own
			}
		}
		for _, pid := range rs.Setup {
			t.setup[pid] = rs.SetupComms[pid]
		}
		t.next = max(t.next, r.Slot)
	}
	return t
}
