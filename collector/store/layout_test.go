package store

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    serverVersion
		current bool
		bad     bool
	}{
		{"26.7.2.1", serverVersion{26, 7}, true, false},
		{"18.16.1", serverVersion{18, 16}, false, false},
		{"22.8.1.1", serverVersion{22, 8}, true, false},
		{"22.7.9", serverVersion{22, 7}, false, false},
		{"", serverVersion{}, false, true},
		{"26", serverVersion{}, false, true},
		{"x.y", serverVersion{}, false, true},
		{"-1.2", serverVersion{}, false, true},
	} {
		got, err := parseVersion(tc.in)
		if tc.bad != (err != nil) || got != tc.want || (err == nil && got.atLeast(currentSince) != tc.current) {
			t.Errorf("parseVersion(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestParseRetention(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		spec string
		want Retention
		bad  bool
	}{
		{"", Retention{}, false},
		{"file_op=7d", Retention{FileOps: 7 * day}, false},
		{"file_op=720h,events=forever,rollups=2d", Retention{FileOps: 720 * time.Hour, Events: Forever, Rollups: 2 * day}, false},
		{"file_op=0d", Retention{}, true},
		{"file_op=30m", Retention{}, true},
		{"file_op=-5d", Retention{}, true},
		{"file_op=36501d", Retention{}, true},
		{"file_op=7d,file_op=8d", Retention{}, true},
		{"findings=7d", Retention{}, true},
		{"file_op", Retention{}, true},
		{"file_op=7", Retention{}, true},
	} {
		got, err := ParseRetention(tc.spec)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("ParseRetention(%q) = %+v, %v", tc.spec, got, err)
		}
	}
	back, err := ParseRetention(DefaultRetention.String())
	if err != nil || back != DefaultRetention {
		t.Fatalf("DefaultRetention %s does not parse back: %+v %v", DefaultRetention, back, err)
	}
	ttl := Retention{Events: Forever}.ttls()
	if ttl["events"] != "toDateTime(time) + toIntervalSecond(2592000) WHERE kind = 'file_op'" {
		t.Fatalf("events kept forever, file operations 30 days: %q", ttl["events"])
	}
}

// TestClusterRewrite: every migration of both layouts has a cluster form
// in which each table is a replicated _local table plus a Distributed
// table of its own name, every statement runs ON CLUSTER or reads and
// writes the Distributed tables, and views read the local tables.
func TestClusterRewrite(t *testing.T) {
	p := &clusterPlan{cluster: "fleet", db: "mcpwarden"}
	for _, layout := range chschema.Layouts {
		ms, err := chschema.Migrations(layout)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			stmts, err := forRelease(m.Statements, serverVersion{26, 7})
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.rewrite(stmts)
			if err != nil {
				t.Fatalf("%s %04d: %v", layout, m.Version, err)
			}
			for _, st := range out {
				switch {
				case strings.HasPrefix(st, "CREATE TABLE"), strings.HasPrefix(st, "ALTER TABLE"), strings.HasPrefix(st, "CREATE MATERIALIZED VIEW"),
					strings.HasPrefix(st, EachNode+"ALTER TABLE `mcpwarden`.events ADD COLUMN"),
					strings.HasPrefix(st, EachNode+"ALTER TABLE `mcpwarden`.runs_rollup ADD COLUMN"),
					st == EachNode+"DROP TABLE IF EXISTS `mcpwarden`.runs_rollup_mv":
					if strings.HasPrefix(st, EachNode) {
						continue
					}
					if !strings.Contains(st, " ON CLUSTER `fleet`") {
						t.Errorf("%s %04d: not on the cluster: %s", layout, m.Version, st)
					}
				case strings.HasPrefix(st, "INSERT INTO `mcpwarden`."):
				default:
					t.Errorf("%s %04d: unexpected statement %s", layout, m.Version, st)
				}
				if strings.HasPrefix(st, "CREATE TABLE") && strings.Contains(st, "_local ON CLUSTER") &&
					!strings.Contains(st, "ENGINE = Replicated") {
					t.Errorf("%s %04d: a local table that is not replicated: %s", layout, m.Version, st)
				}
				if strings.HasPrefix(st, "CREATE MATERIALIZED VIEW") && !strings.Contains(st, "FROM `mcpwarden`.events_local") {
					t.Errorf("%s %04d: a view that does not read the local events: %s", layout, m.Version, st)
				}
				for _, bare := range []string{"FROM events\n", "FROM events ", "INTO events ", "TO runs_rollup", "TO denials_rollup"} {
					if strings.Contains(st, bare) {
						t.Errorf("%s %04d: unqualified table (%q): %s", layout, m.Version, bare, st)
					}
				}
			}
		}
	}
	// Refused: statements of shapes the cluster form does not know.
	for _, st := range []string{
		"DROP TABLE events",
		"DROP TABLE IF EXISTS events",
		"DROP TABLE IF EXISTS runs_rollup_mv; DROP TABLE events",
		"CREATE TABLE IF NOT EXISTS other\n(a UInt8)\nENGINE = MergeTree() ORDER BY a",
		"CREATE TABLE IF NOT EXISTS events\n(a UInt8)\nENGINE = Log",
		"INSERT INTO runs_rollup\nSELECT * FROM system.numbers",
		"ALTER TABLE other ADD COLUMN x UInt8",
		"ALTER TABLE other ADD PROJECTION p (SELECT * ORDER BY a)",
		"ALTER TABLE runs_rollup DROP PROJECTION by_scope",
	} {
		if _, err := p.rewrite([]string{st}); err == nil {
			t.Errorf("accepted on a cluster: %q", st)
		}
	}
}

// TestParametersCannotChangeTheQuery: hostile values reach the server as
// values (query parameters on current releases, checked literals on
// 18.16), never as SQL.
func TestParametersCannotChangeTheQuery(t *testing.T) {
	s := openMigrated(t)
	ctx := context.Background()
	g := eventgen.New("host-1")
	if err := s.Insert(ctx, g.Mixed(20)); err != nil {
		t.Fatal(err)
	}
	count := func(host string) uint64 {
		t.Helper()
		var n uint64
		if err := s.QueryRow(ctx, "SELECT count() FROM events WHERE host = {host:String}", Params{"host": host}, &n); err != nil {
			t.Fatalf("host %q: %v", host, err)
		}
		return n
	}
	if n := count("host-1"); n != 20 {
		t.Fatalf("host-1 has %d events, want 20", n)
	}
	for _, exact := range []string{"host-1\n", "a\tb", `back\slash`, "quote'd", "nul\x00", "\r\n", `\N`, "ünï"} {
		g := eventgen.New(exact)
		if err := s.Insert(ctx, g.Mixed(3)); err != nil {
			t.Fatal(err)
		}
		if n := count(exact); n != 3 {
			t.Errorf("host %q: %d events, want its own 3", exact, n)
		}
	}
	for _, evil := range []string{"x' OR 1=1 --", `host-1\' OR \'1\'=\'1`, "host-1'; DROP TABLE events; --", "host-1\x00", "{host:String}", "host-1\r"} {
		if n := count(evil); n != 0 {
			t.Errorf("host %q matched %d events", evil, n)
		}
	}
	for _, evil := range []string{"1 OR 1=1", "0) OR (1", "9223372036854775808", ""} {
		var n uint64
		if err := s.QueryRow(ctx, "SELECT count() FROM events WHERE time_ns >= {from:Int64}", Params{"from": evil}, &n); err == nil {
			t.Errorf("from %q accepted (%d rows)", evil, n)
		}
	}
	if err := s.QueryRow(ctx, "SELECT count() FROM events WHERE host = {missing:String}", Params{}, new(uint64)); err == nil {
		t.Error("a parameter without a value was accepted")
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLayoutOfANewDatabase: a new database gets the current layout on a
// current release and the legacy one on 18.16; a reopened one keeps it.
func TestLayoutOfANewDatabase(t *testing.T) {
	s := openMigrated(t)
	want := LayoutLegacy
	if s.version.atLeast(currentSince) {
		want = LayoutCurrent
	}
	if s.Layout() != want || s.Distributed() {
		t.Fatalf("ClickHouse %s: layout %s distributed %v, want %s", s.version, s.Layout(), s.Distributed(), want)
	}
	var timeType string
	if err := s.QueryRow(context.Background(), "SELECT type FROM system.columns WHERE database = {db:String} AND table = 'events' AND name = 'time_ns'", Params{"db": s.db}, &timeType); err != nil {
		t.Fatal(err)
	}
	if timeType != "Int64" {
		t.Fatalf("time_ns is %s", timeType)
	}
	if want == LayoutCurrent {
		var ttl string
		if err := s.QueryRow(context.Background(), "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = 'events'", Params{"db": s.db}, &ttl); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ttl, "toIntervalSecond(2592000) WHERE kind = 'file_op'") || !strings.Contains(ttl, "toIntervalSecond(31536000) WHERE kind != 'file_op'") {
			t.Fatalf("events has not the default retention: %s", ttl)
		}
	}
	again, err := Open(context.Background(), "clickhouse://"+chtest.Addr()+"/"+s.db, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Layout() != want {
		t.Fatalf("reopened: layout %s, want %s", again.Layout(), want)
	}
}

// TestRetentionKeepsFileOperationsShorter: with the default retention a
// 40-day-old file operation is gone while a decision and a finding of the
// same age stay; a changed retention is set on the table; the legacy layout
// refuses a retention (it has no TTL).
func TestRetentionKeepsFileOperationsShorter(t *testing.T) {
	s := openMigrated(t)
	ctx := context.Background()
	if s.Layout() != LayoutCurrent {
		if _, err := s.MigrateWith(ctx, MigrateOptions{Retention: Retention{FileOps: 48 * time.Hour}}); err == nil || !strings.Contains(err.Error(), "DROP PARTITION") {
			t.Fatalf("the legacy layout took a retention: %v", err)
		}
		return
	}
	g := eventgen.New("host-1")
	g.T0 = time.Now().Add(-40 * 24 * time.Hour)
	evs := g.Mixed(30) // a launch, 2 decisions, 27 file operations
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	// Expired rows usually go at insert, but ClickHouse promises only that
	// they go by the next merge (under load one insert kept them): force it.
	if err := s.Exec(ctx, "OPTIMIZE TABLE events FINAL", nil); err != nil {
		t.Fatal(err)
	}
	var fileOps, others uint64
	if err := s.QueryRow(ctx, "SELECT countIf(kind = 'file_op'), countIf(kind != 'file_op') FROM events", nil, &fileOps, &others); err != nil {
		t.Fatal(err)
	}
	if fileOps != 0 || others != 3 {
		t.Fatalf("40 days old: %d file operations and %d other events stored, want 0 and 3", fileOps, others)
	}
	if _, err := s.MigrateWith(ctx, MigrateOptions{Retention: Retention{FileOps: 48 * time.Hour, Events: Forever, Rollups: 90 * 24 * time.Hour}}); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]string{
		"events":         "toIntervalSecond(172800) WHERE kind = 'file_op'",
		"runs_rollup":    "toIntervalSecond(7776000)",
		"denials_rollup": "toIntervalSecond(7776000)",
	} {
		got, err := s.engineFull(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, want) || (table == "events" && strings.Contains(got, "kind != 'file_op'")) {
			t.Errorf("%s: %s, want %s", table, got, want)
		}
	}
}

// TestForRelease: a statement marked "since X.Y" runs on X.Y and later
// only; a malformed mark is refused, not run.
func TestForRelease(t *testing.T) {
	stmts := []string{"CREATE TABLE a", "/* since 24.8 */ ALTER TABLE a MODIFY SETTING x = 1", "/* since 26.10 */ ALTER TABLE a ADD PROJECTION p"}
	for _, c := range []struct {
		v    serverVersion
		want []string
	}{
		{serverVersion{22, 8}, []string{"CREATE TABLE a"}},
		{serverVersion{24, 3}, []string{"CREATE TABLE a"}},
		{serverVersion{24, 8}, []string{"CREATE TABLE a", "ALTER TABLE a MODIFY SETTING x = 1"}},
		{serverVersion{26, 7}, []string{"CREATE TABLE a", "ALTER TABLE a MODIFY SETTING x = 1"}},
		{serverVersion{26, 10}, []string{"CREATE TABLE a", "ALTER TABLE a MODIFY SETTING x = 1", "ALTER TABLE a ADD PROJECTION p"}},
		{serverVersion{27, 1}, []string{"CREATE TABLE a", "ALTER TABLE a MODIFY SETTING x = 1", "ALTER TABLE a ADD PROJECTION p"}},
	} {
		got, err := forRelease(stmts, c.v)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v: %q, %v; want %q", c.v, got, err, c.want)
		}
	}
	for _, bad := range []string{"/* since 24 */ ALTER TABLE a", "/* since 24.8*/ ALTER TABLE a", "/* since x.y */ ALTER TABLE a"} {
		if got, err := forRelease([]string{bad}, serverVersion{26, 7}); err == nil {
			t.Errorf("%q accepted: %q", bad, got)
		}
	}
}
