package query

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

func TestEveryCannedQueryHasItsFile(t *testing.T) {
	names := chschema.QueryNames()
	if len(names) != len(List) {
		t.Fatalf("files %v, list %d", names, len(List))
	}
	for _, c := range List {
		if _, err := chschema.Query(c.Name); err != nil {
			t.Error(err)
		}
	}
}

// migratedStore opens a fresh test database with the schema applied.
func migratedStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

func setup(t *testing.T) (*store.Store, *eventgen.Gen, []schema.Event) {
	t.Helper()
	ctx := context.Background()
	st := migratedStore(t)
	g := eventgen.New("web-1")
	g.T0 = time.Now().Add(-time.Hour)
	evs := g.Mixed(500)
	evs[0].Launch.Mode = schema.ModeAudit
	// What the proxy learned once the server answered initialize.
	id := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Millisecond))
	id.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: schema.ModeAudit, LandlockABI: 7, ServerExe: "node",
		ServerName: "secure-filesystem-server", ServerVersion: "0.2.0", ProtocolEra: "legacy"}
	// Another run, whose proxy never learned the server: its executable names it.
	other := eventgen.New("web-2")
	other.T0 = g.T0
	bare := other.Mixed(1)[0]
	// A Landlock denial the daemon could not tie to a run.
	stray := g.Origin.NewEvent(schema.KindLandlockDenial, "", "", "", g.T0.Add(2*time.Minute))
	stray.LandlockDenial = &schema.LandlockDenial{Domain: "2b", Blockers: []string{"fs.read_file"}, PathHash: g.Hasher.Hash("/home/u/notes"), PID: 0}
	evs = append(evs, id, bare, stray)
	esc := g.FileOp(1)
	esc.FileOp.PathClass, esc.FileOp.Verdict = schema.PathOutside, "escape"
	den := g.Decision(2)
	den.Decision.Decision, den.Decision.ErrorCode, den.Decision.Tool = "deny", string(schema.ErrPathOutsideScope), "read_text_file"
	ll := g.Origin.NewEvent(schema.KindLandlockDenial, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Minute))
	ll.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"}, PathHash: g.Hasher.Hash("/etc/shadow"), PathClass: schema.PathSecret, PID: 1}
	h := g.Origin.NewEvent(schema.KindHealth, "", "", "", g.T0)
	h.Health = &schema.Health{Component: "daemon", Hooks: []string{"tracepoint/syscalls/sys_enter_openat"}, LandlockABI: 7, AuditStream: "on", DropsQueueFull: 2}
	evs = append(evs, esc, den, ll, h)
	evs = append(evs, crosscheck.Check(evs, crosscheck.Config{}, time.Now())...)
	if err := st.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, evs); err != nil { // a full redelivery: queries must not double count
		t.Fatal(err)
	}
	return st, g, evs
}

func runJSON(t *testing.T, st *store.Store, name string, p Params) []map[string]any {
	t.Helper()
	if p.To.IsZero() {
		p.From, p.To = time.Now().Add(-24*time.Hour), time.Now()
	}
	res, err := Run(context.Background(), st, name, p)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), strings.ToUpper(strings.TrimSuffix(res.Columns[0], "_ns"))) {
		t.Fatalf("table has no header:\n%s", table.String())
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

func num(v any) float64 { f, _ := v.(float64); return f }

func TestCannedQueries(t *testing.T) {
	st, g, evs := setup(t)
	var findings, runFindings int
	for _, e := range evs {
		if e.Kind == schema.KindFinding {
			findings++
			if e.RunID == g.RunID {
				runFindings++
			}
		}
	}
	t.Run("runs", func(t *testing.T) {
		rows := runJSON(t, st, "runs", Params{})
		if len(rows) != 2 {
			t.Fatalf("%d runs, want 2: %v", len(rows), rows)
		}
		if rows[1]["run_id"] == g.RunID {
			rows[0], rows[1] = rows[1], rows[0]
		}
		if rows[0]["run_id"] != g.RunID || rows[0]["verdict"] != "ESCAPE" || rows[0]["mode"] != "audit" || rows[0]["server"] != "secure-filesystem-server" {
			t.Fatalf("%v", rows[0])
		}
		if rows[1]["host"] != "web-2" || rows[1]["verdict"] != "CLEAN" || rows[1]["server"] != "" {
			t.Fatalf("%v", rows[1])
		}
		if num(rows[0]["calls_denied"]) != 1 || num(rows[0]["findings"]) != float64(runFindings) || num(rows[0]["kernel_denials"]) != 1 {
			t.Fatalf("counts: %v (want %d findings)", rows[0], runFindings)
		}
	})
	t.Run("findings", func(t *testing.T) {
		rows := runJSON(t, st, "findings", Params{})
		var total float64
		for _, r := range rows {
			total += num(r["findings"])
		}
		if total != float64(findings) || rows[0]["severity"] != "high" {
			t.Fatalf("%v", rows)
		}
		for _, r := range rows {
			if r["run_id"] != g.RunID && r["run_id"] != "" {
				t.Fatalf("a finding of run %v, want %s or none (the host's own)", r["run_id"], g.RunID)
			}
		}
		of := runJSON(t, st, "findings", Params{Run: g.RunID, From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		var ofRun float64
		for _, r := range of {
			if r["run_id"] != g.RunID {
				t.Fatalf("--run leaked %v", r)
			}
			ofRun += num(r["findings"])
		}
		if ofRun != float64(runFindings) {
			t.Fatalf("--run: %v findings, want %d", ofRun, runFindings)
		}
		only := runJSON(t, st, "findings", Params{Severity: "low", From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		for _, r := range only {
			if r["severity"] != "low" {
				t.Fatalf("severity filter leaked %v", r)
			}
		}
		none := runJSON(t, st, "findings", Params{Host: "other' OR '1'='1", From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		if len(none) != 0 {
			t.Fatalf("host filter with quotes matched %v", none)
		}
	})
	t.Run("denials", func(t *testing.T) {
		rows := runJSON(t, st, "denials", Params{Scope: g.ScopeID, From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		layers := map[string]float64{}
		for _, r := range rows {
			layers[r["layer"].(string)+":"+r["reason"].(string)] += num(r["denials"])
		}
		if layers["proxy:PATH_OUTSIDE_SCOPE"] != 1 || layers["kernel:secret"] != 1 {
			t.Fatalf("%v", rows)
		}
		// Without filters (the rollup), the denial outside any run is not
		// listed as a scope of its own.
		for _, r := range runJSON(t, st, "denials", Params{}) {
			if r["scope_id"] == "" {
				t.Fatalf("a denial outside any run listed as a scope: %v", r)
			}
		}
		for _, r := range runJSON(t, st, "denials", Params{Host: "web-1", From: time.Now().Add(-24 * time.Hour), To: time.Now()}) {
			if r["scope_id"] == "" {
				t.Fatalf("--host: a denial outside any run listed as a scope: %v", r)
			}
		}
	})
	t.Run("timeline", func(t *testing.T) {
		rows := runJSON(t, st, "timeline", Params{Run: g.RunID, From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		want := 0
		for _, e := range evs {
			if e.RunID == g.RunID {
				want++
			}
		}
		if len(rows) != want {
			t.Fatalf("%d rows, want %d (one per distinct event)", len(rows), want)
		}
		for i := 1; i < len(rows); i++ {
			if num(rows[i]["time_ns"]) < num(rows[i-1]["time_ns"]) {
				t.Fatal("timeline out of order")
			}
		}
		if _, err := Run(context.Background(), st, "timeline", Params{}); err == nil {
			t.Fatal("timeline without --run accepted")
		}
	})
	t.Run("health", func(t *testing.T) {
		rows := runJSON(t, st, "health", Params{})
		if len(rows) != 1 || rows[0]["host"] != "web-1" || num(rows[0]["drops_queue"]) != 2 || num(rows[0]["gap_findings"]) < 1 || rows[0]["audit_stream"] != "on" ||
			num(rows[0]["unattributed_denials"]) != 1 {
			t.Fatalf("%v", rows)
		}
	})
	t.Run("inventory", func(t *testing.T) {
		rows := runJSON(t, st, "inventory", Params{})
		if len(rows) != 2 {
			t.Fatalf("%v", rows)
		}
		named, bare := rows[0], rows[1]
		if named["host"] != "web-1" {
			named, bare = bare, named
		}
		if named["server"] != "secure-filesystem-server" || named["server_version"] != "0.2.0" || named["protocol_era"] != "legacy" || num(named["runs"]) != 1 || num(named["audit_mode_seen"]) != 1 {
			t.Fatalf("one run, three launch records, one row: %v", named)
		}
		if bare["server"] != "node" || num(bare["runs"]) != 1 {
			t.Fatalf("a run without serverInfo is named by its executable: %v", bare)
		}
	})
	if _, err := Run(context.Background(), st, "nope", Params{}); err == nil || !strings.Contains(err.Error(), "runs") {
		t.Fatalf("unknown query: %v", err)
	}
}
