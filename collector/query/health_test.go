package query

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestSchemaVersion3MigratesForward: a database an earlier release left
// (every migration before drops_kernel_audit, holding schema_version 2
// health reports and launch records) is refused by the queries until
// migrated, migrates forward (drops_kernel_audit, launcher_uid_by), keeps
// its rows (their kernel audit drops read 0, their launcher uids are the
// daemon's word), and then `query health` shows the kernel's audit loss
// and `query runs` who asserts each launcher uid, as schema_version 3
// records carry them. On whichever release the test server is (26.7 in
// test-go, 18.16 in test-clickhouse-legacy).
func TestSchemaVersion3MigratesForward(t *testing.T) {
	ctx := context.Background()
	st, ms, version := storeBefore(t, "drops_kernel_audit")

	// What a schema_version 2 daemon and collector stored.
	g := eventgen.New("web-1")
	g.T0 = time.Now().Add(-time.Hour).Truncate(time.Second)
	v2 := func(e schema.Event) schema.Event {
		e.SchemaVersion = 2
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		return e
	}
	launch := g.Mixed(1)[0]
	uid := 1000
	launch.Launch.LauncherUID = &uid
	oldHealth := g.Origin.NewEvent(schema.KindHealth, "", "", "", g.T0)
	oldHealth.Health = &schema.Health{Component: "daemon", LandlockABI: 7, AuditStream: "on", DropsQueueFull: 2}
	old := []schema.Event{v2(launch), v2(oldHealth)}
	if err := st.Insert(ctx, old); err != nil {
		t.Fatal(err)
	}
	// A schema_version 3 report on the database not migrated yet: stored
	// without the column (what a collector that has not migrated does).
	early := g.Origin.NewEvent(schema.KindHealth, "", "", "", g.T0.Add(time.Second))
	early.Health = &schema.Health{Component: "daemon", LandlockABI: 7, AuditStream: "on", DropsQueueFull: 2}
	if err := st.Insert(ctx, []schema.Event{early}); err != nil {
		t.Fatal(err)
	}

	var want []int
	for _, m := range ms {
		if m.Version >= version {
			want = append(want, m.Version)
		}
	}
	applied, err := st.Migrate(ctx)
	if err != nil || !reflect.DeepEqual(applied, want) || len(want) != 2 {
		t.Fatalf("migrated forward: applied %v, %v; want %v (drops_kernel_audit, launcher_uid_by)", applied, err, want)
	}
	if err := st.CheckMigrated(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := st.Migrate(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a second migrate applied %v, %v", again, err)
	}

	// The daemon's reports after the upgrade: cumulative, like every drop counter.
	var lost []schema.Event
	for i, n := range []uint64{40, 1877} {
		h := g.Origin.NewEvent(schema.KindHealth, "", "", "", g.T0.Add(time.Duration(2+i)*time.Second))
		h.Health = &schema.Health{Component: "daemon", LandlockABI: 7, AuditStream: "on", DropsQueueFull: 2, DropsKernelAudit: n}
		if err := h.Validate(); err != nil {
			t.Fatal(err)
		}
		lost = append(lost, h)
	}
	other := eventgen.New("web-2")
	quiet := other.Origin.NewEvent(schema.KindHealth, "", "", "", g.T0.Add(2*time.Second))
	quiet.Health = &schema.Health{Component: "daemon", LandlockABI: 7, AuditStream: "on"}
	// A run that published itself (`run --nats`), and one whose records
	// say both (a forgery: the daemon's word is shown).
	self := other.Mixed(1)[0]
	selfUID, daemonUID := 1001, 0
	self.Launch.LauncherUID, self.Launch.LauncherUIDBy = &selfUID, schema.LauncherUIDByLauncher
	third := eventgen.New("web-3")
	both := third.Mixed(2)[0]
	both.Launch.LauncherUID, both.Launch.LauncherUIDBy = &daemonUID, schema.LauncherUIDByDaemon
	claim := third.Origin.NewEvent(schema.KindLaunch, third.RunID, third.ScopeID, third.ScopeHash, third.T0.Add(time.Second))
	claim.Launch = &schema.Launch{Phase: schema.PhaseExit, Mode: schema.ModeEnforce, LauncherUID: &selfUID, LauncherUIDBy: schema.LauncherUIDByLauncher}
	for _, e := range []schema.Event{self, both, claim} {
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Insert(ctx, append(lost, quiet, self, both, claim)); err != nil {
		t.Fatal(err)
	}

	read, err := st.ReadHealthSince(ctx, g.T0.Add(-time.Second).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, e := range read {
		got[e.EventID] = e.Health.DropsKernelAudit
	}
	wantDrops := map[string]uint64{oldHealth.EventID: 0, early.EventID: 0, lost[0].EventID: 40, lost[1].EventID: 1877, quiet.EventID: 0}
	if !reflect.DeepEqual(got, wantDrops) {
		t.Fatalf("health reports read back (kernel audit drops by event id): %v, want %v", got, wantDrops)
	}

	rows := runJSON(t, st, "health", Params{})
	byHost := map[string]map[string]any{}
	for _, r := range rows {
		byHost[r["host"].(string)] = r
	}
	if r := byHost["web-1"]; r == nil || num(r["drops_kernel_audit"]) != 1877 || num(r["drops_queue"]) != 2 {
		t.Fatalf("query health does not show web-1's kernel audit loss: %v", rows)
	}
	if r := byHost["web-2"]; r == nil || num(r["drops_kernel_audit"]) != 0 {
		t.Fatalf("query health shows a kernel audit loss on a host without one: %v", rows)
	}
	// The launch record of schema_version 2 still says who launched its
	// run (the daemon's word: version 2 had no other source); a run that
	// published itself says it is the launcher's own word.
	runs := runJSON(t, st, "runs", Params{})
	byRun := map[string]map[string]any{}
	for _, r := range runs {
		byRun[r["run_id"].(string)] = r
	}
	for _, c := range []struct {
		run string
		uid float64
		by  string
	}{{g.RunID, 1000, "daemon"}, {other.RunID, 1001, "launcher"}, {third.RunID, 0, "daemon"}} {
		if r := byRun[c.run]; r == nil || num(r["launcher_uid"]) != c.uid || r["launcher_uid_by"] != c.by {
			t.Errorf("run %s: launcher_uid %v by %v, want %v by %s (%v)", c.run, r["launcher_uid"], r["launcher_uid_by"], c.uid, c.by, runs)
		}
	}
}
