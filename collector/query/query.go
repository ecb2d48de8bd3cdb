// Package query runs the canned fleet queries (schema/clickhouse/queries)
// against ClickHouse and renders their results as a table or JSON.
//
// The SQL files use ClickHouse's {name:Type} parameter syntax, so an analyst
// can run them with clickhouse-client (--param_name=value) and mcpwarden
// sends them as query parameters (store.Query; bound on the client only
// for ClickHouse 18.16, which has none). The same SQL reads either table
// layout and, on a cluster, the Distributed tables.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/store"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

// Canned describes one canned query.
type Canned struct {
	Name, Summary string
}

// List is every canned query, in the order `mcpwarden query` shows them.
var List = []Canned{
	{"runs", "runs in the time range and their verdicts (ESCAPE, ATTENTION, REVIEW, CLEAN)"},
	{"findings", "findings by severity, type, host, scope and tool"},
	{"denials", "denials by scope: the proxy's (by error code) and the kernel's (by path class)"},
	{"timeline", "the per-call timeline of one run (--run RUN_ID)"},
	{"health", "observation health by host: hooks, audit stream, drops, gap findings"},
	{"inventory", "wrapped servers by host, protocol era and version (legacy servers still running)"},
}

// Params are the values a canned query may use.
type Params struct {
	From, To                    time.Time
	Host, Scope, Severity, Tool string
	Run                         string
	Limit                       int
}

func (p Params) values() store.Params {
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	return store.Params{
		"from": strconv.FormatInt(p.From.UnixNano(), 10), "to": strconv.FormatInt(p.To.UnixNano(), 10),
		"host": p.Host, "scope": p.Scope, "severity": p.Severity, "tool": p.Tool, "run": p.Run,
		"limit": strconv.Itoa(limit),
	}
}

// Result is a query's columns and rows.
type Result struct {
	Columns []string
	Rows    [][]any
}

// ErrTimelineNeedsRun: the timeline query is of one run.
var ErrTimelineNeedsRun = errors.New("the timeline query needs --run RUN_ID (find run ids with 'mcpwarden query runs')")

// Text returns canned query name's SQL; the error for an unknown name lists
// the canned queries.
func Text(name string) (string, error) {
	text, err := chschema.Query(name)
	if err != nil {
		names := make([]string, len(List))
		for i, c := range List {
			names[i] = c.Name
		}
		return "", fmt.Errorf("%w; canned queries: %s", err, strings.Join(names, ", "))
	}
	return text, nil
}

// Run runs canned query name with p.
func Run(ctx context.Context, st *store.Store, name string, p Params) (*Result, error) {
	if name == "timeline" && p.Run == "" {
		return nil, ErrTimelineNeedsRun
	}
	text, err := Text(name)
	if err != nil {
		return nil, err
	}
	if name == "timeline" && p.Host == "" {
		return timelineAllHosts(ctx, st, p)
	}
	return runSQL(ctx, st, name, text, p.values())
}

func runSQL(ctx context.Context, st *store.Store, name, sql string, params store.Params) (*Result, error) {
	rows, err := st.Query(ctx, sql, params)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", name, err)
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns()}
	types := rows.ColumnTypes()
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("query %s: %w", name, err)
		}
		row := make([]any, len(dest))
		for i, d := range dest {
			row[i] = reflect.ValueOf(d).Elem().Interface()
		}
		res.Rows = append(res.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query %s: %w", name, err)
	}
	return res, nil
}

// timelineAllHosts finds the run's host(s) first: with the host the
// primary key narrows the scan to the run's ranges.
func timelineAllHosts(ctx context.Context, st *store.Store, p Params) (*Result, error) {
	hosts, err := st.RunHosts(ctx, p.Run)
	if err != nil {
		return nil, fmt.Errorf("query timeline: %w", err)
	}
	var out *Result
	for _, h := range hosts {
		q := p
		q.Host = h
		r, err := Run(ctx, st, "timeline", q)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = r
		} else {
			out.Rows = append(out.Rows, r.Rows...)
		}
	}
	if out == nil {
		// No such run: the query's columns and no rows.
		text, _ := chschema.Query("timeline")
		q := p
		q.Host = "\x00none"
		return runSQL(ctx, st, "timeline", text, q.values())
	}
	return out, nil
}

// WriteJSON writes the rows as a JSON array of objects keyed by column.
func (r *Result) WriteJSON(w io.Writer) error {
	out := make([]map[string]any, 0, len(r.Rows))
	for _, row := range r.Rows {
		m := make(map[string]any, len(row))
		for i, c := range r.Columns {
			m[c] = row[i]
		}
		out = append(out, m)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteTable writes an aligned text table; *_ns columns are shown as UTC
// times.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		head[i] = strings.TrimSuffix(c, "_ns")
		if c == "call_ns" {
			head[i] = "call_ms"
		}
	}
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(head, "\t")))
	for _, row := range r.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = cell(r.Columns[i], v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(tw, "(no rows)")
	}
	return tw.Flush()
}

func cell(col string, v any) string {
	if col == "call_ns" {
		if n, ok := v.(int64); ok {
			return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64)
		}
	}
	if strings.HasSuffix(col, "_ns") {
		if n, ok := v.(int64); ok {
			if n == 0 {
				return "-"
			}
			return time.Unix(0, n).UTC().Format("2006-01-02T15:04:05.000Z")
		}
	}
	switch x := v.(type) {
	case string:
		if x == "" {
			return "-"
		}
		return x
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case uint8: // ClickHouse booleans of 18.16 are UInt8
		return strconv.Itoa(int(x))
	}
	return fmt.Sprint(v)
}
