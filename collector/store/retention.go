package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Retention is how long ClickHouse keeps each kind of event and each
// rollup (table TTL rules; current layout). A zero field takes
// DefaultRetention's value; Forever keeps rows for good.
type Retention struct {
	// FileOps is how long raw file operations (kind file_op, most rows) are
	// kept.
	FileOps time.Duration
	// Events is how long every other kind is kept: launches, decisions,
	// Landlock denials, findings, health.
	Events time.Duration
	// Rollups is how long runs_rollup and denials_rollup keep their
	// per-minute (and per-hour and per-day) states.
	Rollups time.Duration
}

// Forever is a Retention value that keeps rows for good (no TTL rule).
const Forever time.Duration = -1

// DefaultRetention keeps raw file operations a month and everything
// derived from or deciding about them a year or more: findings and
// decisions are what an investigation comes back to; the file operations
// they rest on are the bulk of the rows (docs/fleet.md).
var DefaultRetention = Retention{FileOps: 30 * 24 * time.Hour, Events: 365 * 24 * time.Hour, Rollups: 400 * 24 * time.Hour}

func (r Retention) withDefaults() Retention {
	if r.FileOps == 0 {
		r.FileOps = DefaultRetention.FileOps
	}
	if r.Events == 0 {
		r.Events = DefaultRetention.Events
	}
	if r.Rollups == 0 {
		r.Rollups = DefaultRetention.Rollups
	}
	return r
}

// String is the spec ParseRetention reads.
func (r Retention) String() string {
	r = r.withDefaults()
	return "file_op=" + formatKeep(r.FileOps) + ",events=" + formatKeep(r.Events) + ",rollups=" + formatKeep(r.Rollups)
}

func formatKeep(d time.Duration) string {
	if d == Forever {
		return "forever"
	}
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// ParseRetention reads "file_op=30d,events=365d,rollups=400d": any of the
// three names, each a number of days ("30d"), a Go duration of at least an
// hour ("720h") or "forever". Names left out keep their defaults.
func ParseRetention(spec string) (Retention, error) {
	var r Retention
	if strings.TrimSpace(spec) == "" {
		return r, nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return r, fmt.Errorf("retention %q: want NAME=DURATION (file_op, events, rollups), e.g. file_op=30d", item)
		}
		if seen[name] {
			return r, fmt.Errorf("retention: %s given twice", name)
		}
		seen[name] = true
		d, err := parseKeep(val)
		if err != nil {
			return r, fmt.Errorf("retention %s: %w", name, err)
		}
		switch name {
		case "file_op":
			r.FileOps = d
		case "events":
			r.Events = d
		case "rollups":
			r.Rollups = d
		default:
			return r, fmt.Errorf("retention: unknown name %q (file_op, events, rollups)", name)
		}
	}
	return r, nil
}

func parseKeep(v string) (time.Duration, error) {
	if v == "forever" {
		return Forever, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil || n <= 0 || n > 36500 {
			return 0, fmt.Errorf("%q: want a number of days from 1 to 36500, a duration such as 720h, or forever", v)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("%q: want a number of days (30d), a duration such as 720h, or forever", v)
		}
	}
	if d < time.Hour {
		return 0, fmt.Errorf("%q: keep rows at least an hour (a shorter TTL deletes events before the cross-check and the queries see them)", v)
	}
	return d, nil
}

// ttlRule is one TTL expression of a table, or "" for none.
func ttlRule(expr string, keep time.Duration, where string) string {
	if keep == Forever {
		return ""
	}
	rule := expr + " + toIntervalSecond(" + strconv.FormatInt(int64(keep/time.Second), 10) + ")"
	if where != "" {
		rule += " WHERE " + where
	}
	return rule
}

// ttls are the TTL clauses of each table for r ("" for none).
func (r Retention) ttls() map[string]string {
	r = r.withDefaults()
	join := func(rules ...string) string {
		var keep []string
		for _, x := range rules {
			if x != "" {
				keep = append(keep, x)
			}
		}
		return strings.Join(keep, ", ")
	}
	return map[string]string{
		"events": join(ttlRule("toDateTime(time)", r.FileOps, "kind = 'file_op'"),
			ttlRule("toDateTime(time)", r.Events, "kind != 'file_op'")),
		"runs_rollup":    ttlRule("toDateTime(minute * 60)", r.Rollups, ""),
		"denials_rollup": ttlRule("toDateTime(bucket * [86400, 3600, 60][level])", r.Rollups, ""),
	}
}

// applyRetention sets each table's TTL. The legacy layout (18.16) has no
// TTL: there retention is dropping old partitions, and asking for one is
// an error. A changed TTL is applied to the rows already stored too
// (MATERIALIZE TTL, a background mutation); an unchanged one costs one
// metadata change.
func (s *Store) applyRetention(ctx context.Context, r Retention, plan *clusterPlan) error {
	if s.layout != LayoutCurrent {
		if r != (Retention{}) {
			return fmt.Errorf("retention by TTL needs the current table layout (ClickHouse %s or later); database %s has the legacy layout: drop old partitions instead (ALTER TABLE events DROP PARTITION 202601)", currentSince, s.db)
		}
		return nil
	}
	for table, ttl := range r.ttls() {
		local, on := table, ""
		if plan != nil {
			local, on = plan.qualified(table+"_local"), plan.onCluster()
		}
		before, err := s.engineFull(ctx, table)
		if err != nil {
			return err
		}
		stmt := "ALTER TABLE " + local + on + " REMOVE TTL"
		if ttl != "" {
			stmt = "ALTER TABLE " + local + on + " MODIFY TTL " + ttl
		} else if !strings.Contains(before, " TTL ") {
			continue
		}
		// The metadata first; the rows already there only if it changed.
		mctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"materialize_ttl_after_modify": 0}))
		if err := s.conn.Exec(mctx, stmt); err != nil {
			return fmt.Errorf("set the retention of %s: %w", table, err)
		}
		after, err := s.engineFull(ctx, table)
		if err != nil {
			return err
		}
		if before != after && ttl != "" {
			if err := s.conn.Exec(ctx, "ALTER TABLE "+local+on+" MATERIALIZE TTL"); err != nil {
				return fmt.Errorf("apply the new retention of %s to its stored rows: %w", table, err)
			}
		}
	}
	return nil
}

// engineFull is the engine clause (with its TTL) of table, or of its local
// table on a cluster.
func (s *Store) engineFull(ctx context.Context, table string) (string, error) {
	var engine string
	err := s.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name IN ({t:String}, {tl:String}) AND engine != 'Distributed'",
		Params{"db": s.db, "t": table, "tl": table + "_local"}, &engine)
	if err != nil {
		return "", fmt.Errorf("read the engine of %s: %w", table, err)
	}
	if engine == "" {
		return "", errors.New("table " + table + " has no engine clause")
	}
	return engine, nil
}
