package collector_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/deploy/grafana"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestDashboardSQL runs every ClickHouse query of the Grafana dashboard
// (deploy/grafana), its macros expanded as the ClickHouse data source
// expands them, on the migrated schema holding one run of each shape: an
// enforce run with an allowed and a denied call and a kernel denial, an
// audit run with an ESCAPE finding, a health record. Each query runs (on
// the ClickHouse under test: 18.16, and 26.7 in make
// test-clickhouse-current), time series start with their time column, and
// each returns the rows those events make.
func TestDashboardSQL(t *testing.T) {
	d, err := grafana.Load(filepath.Join(testenv.RepoRoot(), "deploy", "grafana"))
	if err != nil {
		t.Fatal(err)
	}
	qs := d.Queries(grafana.ClickHouseUID)
	if len(qs) < 6 {
		t.Fatalf("the dashboard has %d ClickHouse queries", len(qs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	o := schema.Origin{Host: "web-1", BootID: "c47e1661-5435-4079-9bd3-5d42872b3c2d"}
	var evs []schema.Event
	add := func(kind schema.Kind, run, scope string, fill func(*schema.Event)) {
		e := o.NewEvent(kind, run, scope, "sha256:"+strings.Repeat("0", 64), now.Add(-time.Duration(len(evs))*time.Second))
		fill(&e)
		evs = append(evs, e)
	}
	enforce, audit := schema.NewID(), schema.NewID()
	add(schema.KindLaunch, enforce, "docs", func(e *schema.Event) {
		e.Launch = &schema.Launch{Phase: "start", Mode: "enforce", LandlockABI: 7, ServerExe: "node"}
	})
	add(schema.KindDecision, enforce, "docs", func(e *schema.Event) {
		e.Decision = &schema.Decision{OpID: schema.NewID(), Method: "tools/call", Tool: "read_text_file", ActionClass: "read", Decision: "allow", Approval: "not_required"}
	})
	add(schema.KindDecision, enforce, "docs", func(e *schema.Event) {
		e.Decision = &schema.Decision{OpID: schema.NewID(), Method: "tools/call", Tool: "read_text_file", ActionClass: "read", Decision: "deny", Approval: "not_required", ErrorCode: "PATH_OUTSIDE_SCOPE"}
	})
	add(schema.KindLandlockDenial, enforce, "docs", func(e *schema.Event) {
		e.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"}, PathHash: schema.PathHash(strings.Repeat("ab", 32)), PathClass: "secret", PID: 10, Comm: "node"}
	})
	add(schema.KindLaunch, audit, "docs", func(e *schema.Event) {
		e.Launch = &schema.Launch{Phase: "start", Mode: "audit", LandlockABI: 7, ServerExe: "node"}
	})
	add(schema.KindFinding, audit, "docs", func(e *schema.Event) {
		e.Finding = &schema.Finding{Type: schema.FindingEscape, Severity: schema.SeverityHigh, Status: schema.StatusFinal, Reason: "succeeded_outside_scope", EvidenceIDs: []string{schema.NewID()}}
	})
	add(schema.KindHealth, "", "", func(e *schema.Event) {
		e.Health = &schema.Health{Component: "daemon", Hooks: []string{"tp_btf:sys_enter"}, AuditStream: "on", DropsKernelAudit: 1877}
	})
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			t.Fatalf("fixture event %d (%s): %v", i, evs[i].Kind, err)
		}
	}
	if err := st.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}

	from, to := now.Add(-time.Hour).Unix(), now.Add(time.Minute).Unix()
	for _, q := range qs {
		t.Run(q.Panel, func(t *testing.T) {
			sql := grafana.ClickHouseSQL(q.RawSQL, from, to, 60)
			rows, err := st.Conn().Query(ctx, sql)
			if err != nil {
				t.Fatalf("%v\n%s", err, sql)
			}
			defer rows.Close()
			cols := rows.Columns()
			if q.QueryType == "timeseries" && (len(cols) < 2 || cols[0] != "time") {
				t.Errorf("a time series query's first column is %v, want time", cols)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Errorf("no rows from the fixture's events:\n%s", sql)
			}
			// The host table shows the kernel's audit loss (schema_version 3).
			if q.Panel == "Observation health by host" && !slices.Contains(cols, "kernel_audit_lost") {
				t.Errorf("the host health table has no kernel_audit_lost column: %v", cols)
			}
			if slices.Contains(cols, "path_hash") || slices.Contains(cols, "path_hashes") {
				t.Errorf("the panel shows path hashes: %v", cols)
			}
		})
	}
}
