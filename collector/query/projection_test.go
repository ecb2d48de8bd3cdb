package query

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunsRollupProjection: on ClickHouse 24.8 and later, migration 0005
// gives runs_rollup the projection by_scope and the parts inserted carry
// it; on older servers (18.16 in the legacy run) the table has no
// projection at all. That `runs --scope` reads it is not asserted: the
// plan EXPLAIN shows leaves out the GLOBAL IN subquery that filters by
// scope, and clickhouse-local has no system.query_log.
func TestRunsRollupProjection(t *testing.T) {
	ctx := context.Background()
	st := migratedStore(t)
	var major, minor uint16
	if err := st.Conn().QueryRow(ctx, "SELECT toUInt16(splitByChar('.', version())[1]), toUInt16(splitByChar('.', version())[2])").Scan(&major, &minor); err != nil {
		t.Fatal(err)
	}
	var create string
	if err := st.Conn().QueryRow(ctx, "SHOW CREATE TABLE runs_rollup").Scan(&create); err != nil {
		t.Fatal(err)
	}
	if major < 24 || major == 24 && minor < 8 {
		if strings.Contains(create, "PROJECTION") {
			t.Fatalf("ClickHouse %d.%d: runs_rollup has a projection: %s", major, minor, create)
		}
		return
	}
	if !strings.Contains(create, "PROJECTION by_scope") {
		t.Fatalf("ClickHouse %d.%d: runs_rollup has no projection by_scope: %s", major, minor, create)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).Add(17 * time.Second)
	if err := st.Insert(ctx, rollupScenario(t0)); err != nil {
		t.Fatal(err)
	}
	var parts uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM system.projection_parts WHERE database = currentDatabase() AND table = 'runs_rollup' AND name = 'by_scope' AND active").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts == 0 {
		t.Fatal("no active part of runs_rollup carries by_scope")
	}
}
