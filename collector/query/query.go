// Package query runs the canned fleet queries (schema/clickhouse/queries)
// against ClickHouse and renders their results as a table or JSON.
//
// The SQL files use ClickHouse's {name:Type} parameter syntax so an analyst
// can run them with a current clickhouse-client (--param_name=value).
// ClickHouse 18.16 has no server-side parameters, so Bind substitutes them
// on the client, quoting every value by its declared type.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
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

func (p Params) values() map[string]string {
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	return map[string]string{
		"from": strconv.FormatInt(p.From.UnixNano(), 10), "to": strconv.FormatInt(p.To.UnixNano(), 10),
		"host": p.Host, "scope": p.Scope, "severity": p.Severity, "tool": p.Tool, "run": p.Run,
		"limit": strconv.Itoa(limit),
	}
}

var placeholder = regexp.MustCompile(`\{([a-z_]+):([A-Za-z0-9]+)\}`)

// Bind replaces every {name:Type} in sql with values[name] as a literal of
// Type. Only String, integer types and Float64 are allowed; strings are
// quoted with every backslash and quote escaped, so no value can end the
// literal.
func Bind(sql string, values map[string]string) (string, error) {
	var bindErr error
	out := placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		sub := placeholder.FindStringSubmatch(m)
		name, typ := sub[1], sub[2]
		v, ok := values[name]
		if !ok {
			bindErr = fmt.Errorf("query parameter %q has no value", name)
			return m
		}
		switch {
		case typ == "String":
			return quote(v)
		case strings.HasPrefix(typ, "Int") || strings.HasPrefix(typ, "UInt"):
			bits, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(typ, "U"), "Int"))
			var err error
			if strings.HasPrefix(typ, "U") {
				_, err = strconv.ParseUint(v, 10, bits)
			} else {
				_, err = strconv.ParseInt(v, 10, bits)
			}
			if err != nil || bits == 0 {
				bindErr = fmt.Errorf("query parameter %q: %q is not a %s", name, v, typ)
				return m
			}
			return v
		case typ == "Float64":
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				bindErr = fmt.Errorf("query parameter %q: %q is not a Float64", name, v)
				return m
			}
			return v
		default:
			bindErr = fmt.Errorf("query parameter %q: type %s is not supported", name, typ)
			return m
		}
	})
	return out, bindErr
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
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
func Run(ctx context.Context, conn driver.Conn, name string, p Params) (*Result, error) {
	if name == "timeline" && p.Run == "" {
		return nil, ErrTimelineNeedsRun
	}
	text, err := Text(name)
	if err != nil {
		return nil, err
	}
	if name == "timeline" && p.Host == "" {
		return timelineAllHosts(ctx, conn, p)
	}
	sql, err := Bind(text, p.values())
	if err != nil {
		return nil, err
	}
	return runSQL(ctx, conn, name, sql)
}

func runSQL(ctx context.Context, conn driver.Conn, name, sql string) (*Result, error) {
	rows, err := conn.Query(ctx, sql)
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
func timelineAllHosts(ctx context.Context, conn driver.Conn, p Params) (*Result, error) {
	// The small kinds first (launch, decision, ...: a tenth of the rows);
	// only a run with nothing but file operations needs the full scan.
	var hosts []string
	for _, where := range []string{"kind != 'file_op' AND run_id = ?", "run_id = ?"} {
		rows, err := conn.Query(ctx, "SELECT DISTINCT host FROM events WHERE "+where+" ORDER BY host", p.Run)
		if err != nil {
			return nil, fmt.Errorf("query timeline: find the run's host: %w", err)
		}
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				rows.Close()
				return nil, fmt.Errorf("query timeline: %w", err)
			}
			hosts = append(hosts, h)
		}
		rows.Close()
		if len(hosts) > 0 {
			break
		}
	}
	var out *Result
	for _, h := range hosts {
		q := p
		q.Host = h
		r, err := Run(ctx, conn, "timeline", q)
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
		text, _ := chschema.Query("timeline")
		q := p
		q.Host = "\x00none"
		sql, err := Bind(text, q.values())
		if err != nil {
			return nil, err
		}
		return runSQL(ctx, conn, "timeline", sql)
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
