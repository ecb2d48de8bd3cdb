package runs

import (
	"errors"
	"testing"
	"time"
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
	tab.Forked(slot, 101)
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
	if tab.Exited(slot, now) {
		t.Error("ended with a process left")
	}
	if !tab.Exited(slot, now) || !a.Ended() {
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
	tab.Execed(100)
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
