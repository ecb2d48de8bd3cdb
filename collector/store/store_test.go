package store

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
)

func openMigrated(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	applied, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) == 0 {
		t.Fatal("no migration applied on an empty database")
	}
	return s
}

func TestMigrateIsIdempotent(t *testing.T) {
	s := openMigrated(t)
	again, err := s.Migrate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("second migrate applied %v", again)
	}
	if err := s.CheckSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A crash between a migration and its record, or two collectors at
	// once: every migration runs again, and must succeed.
	if err := s.conn.Exec(context.Background(), "DROP TABLE schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if again, err = s.Migrate(context.Background()); err != nil || len(again) == 0 {
		t.Fatalf("migrations run again: applied %v, err %v", again, err)
	}
}

func TestOpenRefusesHTTPAndBadNames(t *testing.T) {
	for _, dsn := range []string{"http://127.0.0.1:8123/db", "clickhouse://127.0.0.1:9000/bad-name;DROP"} {
		if _, err := Open(context.Background(), dsn, false, nil); err == nil {
			t.Errorf("%s accepted", dsn)
		}
	}
}

// TestInsertRoundTripAndDuplicatesCollapse: every kind survives the trip
// through ClickHouse unchanged, and inserting the same events again (a
// redelivery) does not make them appear twice.
func TestInsertRoundTripAndDuplicatesCollapse(t *testing.T) {
	s := openMigrated(t)
	ctx := context.Background()
	g := eventgen.New("host-1")
	evs := g.Mixed(50)
	o := g.Origin
	now := g.T0.Add(100 * time.Second)
	d := o.NewEvent(schema.KindLandlockDenial, g.RunID, g.ScopeID, g.ScopeHash, now)
	d.LandlockDenial = &schema.LandlockDenial{Domain: "18ed00109", Blockers: []string{"fs.read_file"}, PathHash: g.Hasher.Hash("/etc/hostname"), PathClass: schema.PathOutside, PID: 7, Comm: "node"}
	f := o.NewEvent(schema.KindFinding, g.RunID, g.ScopeID, g.ScopeHash, now.Add(time.Second))
	f.Finding = &schema.Finding{Type: schema.FindingBlockedAttempt, Severity: schema.SeverityMedium, EvidenceIDs: []string{d.EventID}, Reason: "kernel_denied", PathHash: d.LandlockDenial.PathHash, PathClass: schema.PathOutside}
	h := o.NewEvent(schema.KindHealth, g.RunID, "", "", now.Add(2*time.Second))
	h.Health = &schema.Health{Component: "daemon", Hooks: []string{"tracepoint/syscalls/sys_enter_openat"}, LandlockABI: 7, AuditStream: "on", DropsQueueFull: 3, DropsKernelAudit: 1877}
	ex := o.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, now.Add(3*time.Second))
	ex.Launch = &schema.Launch{Phase: "exit", Mode: schema.ModeAudit, LandlockABI: 7, Degraded: true, DegradedReason: "net_tcp", ExitStatus: 1, ExitReason: "exited", DurationMS: 1234,
		Layers:    []schema.Layer{{Name: schema.LayerLandlock, State: schema.LayerOn}, {Name: schema.LayerNetNS, State: schema.LayerOff, Reason: "scope_grants_network"}},
		ServerUID: 1879048193, FileOwner: "1000:1000", LauncherUID: func() *int { u := 65534; return &u }(), LauncherUIDBy: schema.LauncherUIDByLauncher}
	evs = append(evs, d, f, h, ex)
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, evs[10:30]); err != nil { // redelivered
		t.Fatal(err)
	}
	got, err := s.ReadRun(ctx, RunRef{Host: g.Origin.Host, RunID: g.RunID}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d events, inserted %d distinct", len(got), len(evs))
	}
	byID := map[string]schema.Event{}
	for _, e := range got {
		byID[e.EventID] = e
	}
	for _, e := range evs {
		if !reflect.DeepEqual(byID[e.EventID], e) {
			t.Fatalf("event changed in ClickHouse:\n got %+v\nwant %+v", byID[e.EventID], e)
		}
	}
	var raw, distinct uint64
	if err := s.Conn().QueryRow(ctx, "SELECT count(), uniqExact(event_id) FROM events").Scan(&raw, &distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != uint64(len(evs)) || raw < distinct {
		t.Fatalf("raw %d distinct %d, want distinct %d", raw, distinct, len(evs))
	}
	runs, err := s.RunsInsertedSince(ctx, time.Now().Add(-time.Hour).Unix(), 10)
	if err != nil || len(runs) != 1 || runs[0] != (RunRef{Host: g.Origin.Host, RunID: g.RunID}) {
		t.Fatalf("recent runs %v, %v", runs, err)
	}
}

// RunHosts must name every host a run's events came from, whichever kinds
// they are, and look at file operations only when nothing else is stored.
func TestRunHosts(t *testing.T) {
	s := openMigrated(t)
	ctx := context.Background()
	var evs []schema.Event
	add := func(host, run string, kinds ...schema.Kind) {
		g := eventgen.New(host)
		g.RunID = run
		for i, k := range kinds {
			switch k {
			case schema.KindDecision:
				evs = append(evs, g.Decision(i))
			case schema.KindFileOp:
				evs = append(evs, g.FileOp(i))
			case schema.KindHealth:
				h := g.Origin.NewEvent(schema.KindHealth, run, "", "", g.T0.Add(time.Duration(i)*time.Second))
				h.Health = &schema.Health{Component: "daemon", Hooks: []string{"tracepoint/syscalls/sys_enter_openat"}, LandlockABI: 7, AuditStream: "on"}
				evs = append(evs, h)
			default:
				t.Fatalf("kind %s not made here", k)
			}
		}
	}
	add("host-a", "run-reused", schema.KindDecision, schema.KindFileOp)
	add("host-b", "run-reused", schema.KindDecision)
	add("host-c", "run-fileops", schema.KindFileOp, schema.KindFileOp)
	add("host-d", "run-health", schema.KindHealth)
	add("host-e", "run-health-and-call", schema.KindHealth)
	add("host-f", "run-health-and-call", schema.KindDecision)
	add("host-g", "run-call-and-fileops", schema.KindDecision)
	add("host-h", "run-call-and-fileops", schema.KindFileOp)
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		run  string
		want []string
	}{
		{"run-reused", []string{"host-a", "host-b"}},
		{"run-fileops", []string{"host-c"}},
		{"run-health", []string{"host-d"}},
		{"run-health-and-call", []string{"host-e", "host-f"}},
		// As before runs_rollup was read: the file operations are not
		// looked at when the run has other events.
		{"run-call-and-fileops", []string{"host-g"}},
		{"run-unknown", nil},
		{"run-reused' OR '1'='1", nil},
		{"", nil},
	} {
		t.Run(c.run, func(t *testing.T) {
			got, err := s.RunHosts(ctx, c.run)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("RunHosts(%q) = %q, want %q", c.run, got, c.want)
			}
		})
	}
}
