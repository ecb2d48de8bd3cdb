package store

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Layout is a mcpwarden database's table layout.
type Layout string

const (
	// LayoutCurrent is for current ClickHouse releases: DateTime64(9)
	// timestamps, LowCardinality strings, TTL retention per kind and table
	// (schema/clickhouse/migrations/current).
	LayoutCurrent Layout = "current"
	// LayoutLegacy is what ClickHouse 18.16 can hold: Int64 ns timestamps,
	// plain strings, no TTL (schema/clickhouse/migrations/legacy).
	LayoutLegacy Layout = "legacy"
)

// currentSince is the oldest release the current layout is for: it needs
// DateTime64, TTL rules with WHERE, LowCardinality and query parameters
// over the native protocol, all of which ClickHouse has had since 22.8.
// Only 26.7 (and 18.16 for the legacy layout) is tested.
var currentSince = serverVersion{22, 8}

// serverVersion is a ClickHouse release's major and minor number.
type serverVersion struct{ major, minor int }

func (v serverVersion) atLeast(o serverVersion) bool {
	return v.major > o.major || v.major == o.major && v.minor >= o.minor
}

func (v serverVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// parseVersion reads "26.7.2.1" or "18.16.1".
func parseVersion(s string) (serverVersion, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return serverVersion{}, fmt.Errorf("ClickHouse reports version %q, which is not MAJOR.MINOR", s)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major <= 0 || minor < 0 {
		return serverVersion{}, fmt.Errorf("ClickHouse reports version %q, which is not MAJOR.MINOR", s)
	}
	return serverVersion{major, minor}, nil
}

// Layout is the database's table layout.
func (s *Store) Layout() Layout { return s.layout }

// Distributed reports whether the events table is a Distributed table (the
// schema was created on a cluster).
func (s *Store) Distributed() bool { return s.distributed }

// detect learns the server's version, and the layout and engine of the
// events table: an existing table keeps its layout whatever the server (a
// database created on 18.16 and moved to a current release stays legacy);
// a database without one gets the current layout unless the server is
// older than currentSince.
func (s *Store) detect(ctx context.Context) error {
	var v string
	if err := s.conn.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		return fmt.Errorf("read the ClickHouse version: %w", err)
	}
	ver, err := parseVersion(v)
	if err != nil {
		return err
	}
	s.version = ver
	s.serverParams = ver.atLeast(currentSince)
	s.layout = LayoutLegacy
	if s.serverParams {
		s.layout = LayoutCurrent
	}
	// The server's own tables say what is there: these two lookups run
	// before parameters are known to work, so they use the database name,
	// which Open checked against dbName, as a literal.
	db := quote(s.db)
	var engine string
	var tables uint64
	if err := s.conn.QueryRow(ctx, "SELECT count(), any(engine) FROM system.tables WHERE database = "+db+" AND name = 'events'").Scan(&tables, &engine); err != nil {
		return fmt.Errorf("read the events table's engine: %w", err)
	}
	s.distributed = tables > 0 && engine == "Distributed"
	if tables == 0 {
		return nil
	}
	var timeNS, timeCol uint64
	if err := s.conn.QueryRow(ctx, "SELECT countIf(name = 'time_ns' AND default_kind = ''), countIf(name = 'time') FROM system.columns WHERE database = "+db+" AND table = 'events'").Scan(&timeNS, &timeCol); err != nil {
		return fmt.Errorf("read the events table's columns: %w", err)
	}
	// A database not migrated to the late columns yet (a query, or a test
	// migrating step by step) is read and written without them: the
	// columns up to the first one it lacks.
	late := make([]string, len(lateColumns))
	for i, c := range lateColumns {
		late[i] = quote(c)
	}
	var have []string
	if err := s.conn.QueryRow(ctx, "SELECT groupArray(name) FROM system.columns WHERE database = "+db+" AND table = 'events' AND name IN ("+strings.Join(late, ", ")+")").Scan(&have); err != nil {
		return fmt.Errorf("read the events table's columns: %w", err)
	}
	s.ncols = len(columns) - len(lateColumns)
	for _, c := range lateColumns {
		if !slices.Contains(have, c) {
			break
		}
		s.ncols++
	}
	switch {
	case timeNS > 0:
		s.layout = LayoutLegacy
	case timeCol > 0:
		if !s.serverParams {
			return fmt.Errorf("database %s holds the current table layout, which ClickHouse %s cannot read: use ClickHouse %s or later", s.db, ver, currentSince)
		}
		s.layout = LayoutCurrent
	default:
		return fmt.Errorf("database %s has an events table that is not mcpwarden's (no time or time_ns column)", s.db)
	}
	return nil
}

// sinceRE marks a migration statement that needs ClickHouse X.Y or later.
var sinceRE = regexp.MustCompile(`^/\* since (\d+)\.(\d+) \*/ `)

// forRelease is a migration's statements as the server of version v runs
// them: a statement marked "/* since X.Y */ " is kept (without the mark)
// on X.Y or later and left out on older releases. Only accelerators (a
// projection) are marked: a query's result never depends on one.
func forRelease(stmts []string, v serverVersion) ([]string, error) {
	out := make([]string, 0, len(stmts))
	for _, st := range stmts {
		m := sinceRE.FindStringSubmatch(st)
		if m == nil {
			if strings.HasPrefix(st, "/* since") {
				return nil, fmt.Errorf("a statement marked %.30q: write the mark as /* since X.Y */ and a space", st)
			}
			out = append(out, st)
			continue
		}
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if v.atLeast(serverVersion{major, minor}) {
			out = append(out, st[len(m[0]):])
		}
	}
	return out, nil
}
