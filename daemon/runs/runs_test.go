package runs

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestTableLifecycle(t *testing.T) {
	tab := NewTable()
	a := &Run{ID: "a", RootPID: 100}
	slot, err := tab.Add(a)
	if err != nil || slot != 1 {
		t.Fatalf("add: %d %v", slot, err)
	}
	if _, err := tab.Add(&Run{ID: "a", RootPID: 200}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate id: %v", err)
	}
	if _, err := tab.Add(&Run{ID: "b", RootPID: 100}); err == nil {
		t.Error("a live run's pid was given to another run")
	}
	tab.Forked(slot, 100, 101)
	if tab.ByPID(101) != a {
		t.Error("child not attributed")
	}
	if tab.BindDomain("1a2b", 101) != a || tab.ByDomain("1a2b") != a {
		t.Error("domain of a child's run not bound")
	}
	if tab.BindDomain("ffff", 999) != nil || tab.ByDomain("ffff") != nil {
		t.Error("foreign domain bound")
	}
	now := time.Now()
	if tab.Exited(slot, 101, now) {
		t.Error("ended with a process left")
	}
	if tab.Exited(slot, 101, now) || a.Ended() {
		t.Error("the same exit seen twice ended the run")
	}
	if !tab.Exited(slot, 100, now) || !a.Ended() {
		t.Error("not ended after the last exit")
	}
	if tab.ByPID(101) != a {
		t.Error("exited pid forgotten before the grace period")
	}
	// The launcher restarts the server: same run, new root.
	if err := tab.AddRoot(slot, 300, false); err != nil || a.Ended() {
		t.Errorf("restart: %v ended=%v", err, a.Ended())
	}
	tab.End(slot, now)
	if got := tab.Expired(now.Add(time.Second)); len(got) != 1 || got[0] != slot {
		t.Errorf("expired %v", got)
	}
	tab.Remove(slot)
	if tab.BySlot(slot) != nil || tab.ByPID(101) != nil || tab.ByDomain("1a2b") != nil || tab.Len() != 0 {
		t.Error("remove left traces")
	}
	b := &Run{ID: "b", RootPID: 100}
	if s, err := tab.Add(b); err != nil || s == slot {
		t.Errorf("slot reused: %d %v", s, err)
	}
}

func TestSetupPhase(t *testing.T) {
	tab := NewTable()
	slot, _ := tab.Add(&Run{ID: "a", RootPID: 100, ExecPending: true})
	for i := range 2 {
		if !tab.InSetup(100, "mcpwarden") {
			t.Errorf("helper's record %d before exec not in setup", i)
		}
	}
	if tab.InSetup(101, "mcpwarden") {
		t.Error("another pid in setup")
	}
	tab.Execed(100, FileID{})
	if tab.InSetup(100, "mcpwarden") {
		t.Error("setup after exec")
	}
	// A lost exec record: the comm change ends the phase.
	if err := tab.AddRoot(slot, 200, true); err != nil {
		t.Fatal(err)
	}
	tab.InSetup(200, "mcpwarden")
	if tab.InSetup(200, "node") || tab.InSetup(200, "mcpwarden") {
		t.Error("setup outlived a comm change")
	}
	// Without ExecPending (an already running process) there is no setup phase.
	tab.Add(&Run{ID: "b", RootPID: 300})
	if tab.InSetup(300, "x") {
		t.Error("setup phase without exec pending")
	}
}

func TestClaims(t *testing.T) {
	tab := NewTable()
	now := time.Now()
	alice, mallory := Owner{PID: 10, Start: 5, UID: 1000}, Owner{PID: 11, Start: 6, UID: 1001}
	if err := tab.Claim("r1", alice, now); err != nil {
		t.Fatal(err)
	}
	if err := tab.Claim("r1", alice, now); err != nil {
		t.Errorf("owner refused its own run: %v", err)
	}
	if err := tab.Claim("r1", mallory, now); !errors.Is(err, ErrNotOwner) {
		t.Errorf("another process claimed the run: %v", err)
	}
	// The same pid with another start time is another process.
	if err := tab.Claim("r1", Owner{PID: 10, Start: 99}, now); !errors.Is(err, ErrNotOwner) {
		t.Errorf("a reused pid claimed the run: %v", err)
	}
	if _, err := tab.Add(&Run{ID: "r1", RootPID: 50, Owner: mallory}); !errors.Is(err, ErrNotOwner) {
		t.Errorf("another process registered a claimed run: %v", err)
	}
	if _, err := tab.Add(&Run{ID: "r1", RootPID: 50, Owner: alice}); err != nil {
		t.Errorf("owner could not register its run: %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	tab := NewTable()
	now := time.Now().Truncate(time.Second)
	owner := Owner{PID: 10, Start: 5, UID: 1000}
	a := &Run{ID: "a", ScopeID: "s", ScopeHash: "sha256:x", Mode: schema.ModeEnforce, RootPID: 100, Owner: owner, CgroupID: 77,
		Policy: classify.Policy{Workspace: []string{"/w"}, ReadOnly: true, Runtime: []classify.RuntimePath{{Path: "/usr"}}}, Registered: now}
	sa, _ := tab.Add(a)
	tab.Forked(sa, 100, 101)
	tab.BindDomain("1a", 100)
	tab.SetDomainCreator("1a", 2)
	tab.SetDomainCreator("unbound", 3)
	tab.SetOwnPID(101, 2)
	tab.SetOwnPID(999, 3)
	if tab.OwnPID(101) != 2 || tab.OwnPID(999) != 0 {
		t.Errorf("own pids: %d of a run's process, %d of no run's", tab.OwnPID(101), tab.OwnPID(999))
	}
	b := &Run{ID: "b", RootPID: 200, Owner: owner, Registered: now}
	sb, _ := tab.Add(b)
	tab.Exited(sb, 200, now)

	st := tab.State("boot")
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	// The kernel still watches 101 only: the root exited while nobody looked.
	r := Restore(back, map[uint32][]uint32{sa: {101}}, now.Add(time.Minute))
	ra := r.ByID("a")
	if ra == nil || ra.Ended() || ra.Policy.Workspace[0] != "/w" || ra.CgroupID != 77 || !ra.Owner.Same(owner) {
		t.Fatalf("restored run a: %+v", ra)
	}
	if r.ByPID(100) != ra || r.ByDomain("1a") != ra || r.DomainCreator("1a") != 2 {
		t.Error("pids, domains or a domain's creator of a lost")
	}
	if r.DomainCreator("unbound") != 0 {
		t.Error("the creator of a domain of no run was kept")
	}
	if !r.Exited(sa, 101, now) {
		t.Error("the last live process's exit did not end the run")
	}
	if rb := r.ByID("b"); rb == nil || !rb.Ended() {
		t.Errorf("ended run b: %+v", rb)
	}
	if err := r.Claim("a", Owner{PID: 1}, now); !errors.Is(err, ErrNotOwner) {
		t.Errorf("claim of a restored run: %v", err)
	}
	if s, _ := r.Add(&Run{ID: "c", RootPID: 300}); s <= sb {
		t.Errorf("slot %d reused after restore (last %d)", s, sb)
	}
}

// TestSetupFollowsTheHelper: with the fence helper's executable known,
// the root and what it forks stay in the setup phase while they run the
// helper (its own start, its pid-namespace init), and leave it at the exec
// of anything else.
func TestSetupFollowsTheHelper(t *testing.T) {
	tab := NewTable()
	helper := FileID{Dev: 2049, Ino: 77}
	slot, _ := tab.Add(&Run{ID: "a", RootPID: 100, ExecPending: true, Helper: helper})
	tab.Execed(100, helper) // the launcher's fork becomes the helper
	if !tab.InSetup(100, "mcpwarden-fence") {
		t.Fatal("the helper left the setup phase by starting itself")
	}
	tab.Forked(slot, 100, 101) // the helper forks the namespace's init
	if !tab.InSetup(101, "mcpwarden-fence") {
		t.Fatal("the helper's child is not in the setup phase")
	}
	tab.Execed(101, helper) // the init re-executes the helper binary
	// The first record sets the new comm, the second is checked against it.
	for i := range 2 {
		if !tab.InSetup(101, "exe") {
			t.Fatalf("re-executing the helper ended the phase (record %d under its new comm)", i)
		}
	}
	tab.Execed(101, FileID{Dev: 2049, Ino: 99}) // the server
	if tab.InSetup(101, "naive") {
		t.Fatal("the server's exec did not end the phase")
	}
	tab.Forked(slot, 101, 102) // the server's own children are the server's
	if tab.InSetup(102, "naive") {
		t.Fatal("a child of the server is in the setup phase")
	}
	if !tab.InSetup(100, "mcpwarden-fence") {
		t.Fatal("the helper, which never exec'd the server, left the phase")
	}
}

// TestAdoptedChildOfTheHelper: a child the helper had forked before the
// registration (the namespace's exec stage) is in the setup phase under
// the comm of its first record, not its parent's (it re-exec'd the helper
// unseen, and its comm changed with it), and leaves it at the server's exec.
func TestAdoptedChildOfTheHelper(t *testing.T) {
	tab := NewTable()
	helper := FileID{Dev: 2049, Ino: 77}
	slot, _ := tab.Add(&Run{ID: "a", RootPID: 100, ExecPending: true, Helper: helper})
	if !tab.InSetup(100, "mcpwarden-fenc") {
		t.Fatal("the root is not in the setup phase")
	}
	tab.Adopted(slot, 100, 101)
	for i := range 2 {
		if !tab.InSetup(101, "exe") {
			t.Fatalf("the adopted exec stage's record %d is not the launcher's", i)
		}
	}
	tab.Execed(101, FileID{Dev: 2049, Ino: 99})
	if tab.InSetup(101, "naive") {
		t.Fatal("the server's exec did not end the phase")
	}
	if tab.ByPID(101) == nil || tab.Exited(slot, 101, time.Now()) {
		t.Fatal("the adopted child is not a live process of the run")
	}
	// A child adopted below a process outside the setup phase is the run's.
	tab.Adopted(slot, 100, 103)
	tab.Execed(100, FileID{Dev: 2049, Ino: 99})
	tab.Adopted(slot, 100, 104)
	if tab.InSetup(104, "naive") {
		t.Fatal("a child adopted below the server is in the setup phase")
	}
}

// TestSetupSurvivesARestart: the setup phase in the durable state is what
// the records read so far made it: a process that left it is not put back
// in it by a restart (its exec record was read by the earlier daemon, and
// the next one will not see it again), and one still in it keeps its comm,
// so the server's first record under its own comm still ends it.
func TestSetupSurvivesARestart(t *testing.T) {
	tab := NewTable()
	helper := FileID{Dev: 2049, Ino: 77}
	slot, _ := tab.Add(&Run{ID: "a", RootPID: 100, ExecPending: true, Helper: helper, Owner: Owner{PID: 1, Start: 2}})
	tab.SetupChanged()
	tab.Adopted(slot, 100, 101)
	tab.Adopted(slot, 100, 102)
	tab.InSetup(100, "mcpwarden-fenc")
	tab.InSetup(101, "exe")
	tab.InSetup(102, "exe")
	if !tab.SetupChanged() || tab.SetupChanged() {
		t.Fatal("SetupChanged does not report a change exactly once")
	}
	tab.Execed(101, FileID{Dev: 2049, Ino: 99}) // 101 exec'd the server
	if !tab.SetupChanged() {
		t.Fatal("leaving the setup phase is not a change")
	}
	b, err := json.Marshal(tab.State("boot"))
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	r := Restore(st, map[uint32][]uint32{slot: {100, 101, 102}}, time.Now())
	if r.InSetup(101, "naive") {
		t.Error("the server, out of the setup phase before the restart, is back in it")
	}
	if !r.InSetup(100, "mcpwarden-fenc") || !r.InSetup(102, "exe") {
		t.Error("the helper's processes left the setup phase with the restart")
	}
	if r.InSetup(102, "naive") {
		t.Error("a restored helper process's comm was lost: the server's first record did not end its phase")
	}
}
