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
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/schema"
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
	{"health", "observation health by host: hooks, audit stream, drops, kernel audit loss, gap findings"},
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
	// Name is the canned query's.
	Name    string
	Columns []string
	Rows    [][]any
}

// MaxString bounds every string a result carries, in both outputs: valid
// records hold tokens of at most 128 bytes, so anything longer came from
// elsewhere (a row written around the collector) and is cut at a rune
// boundary, marked with "…".
const MaxString = 256

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
		return timelineAllHosts(ctx, st, text, p)
	}
	res, err := runSQL(ctx, st, name, text, p.values())
	if err == nil && name == "runs" {
		err = addLauncherUIDs(ctx, st, res)
	}
	return res, err
}

// launcherUIDChunk bounds the runs of one launcher_uid query.
const launcherUIDChunk = 500

// addLauncherUIDs appends the runs query's launcher_uid and
// launcher_uid_by columns: who launched each run, and who says so, from
// its launch records: "daemon" (its socket's peer credentials; every
// schema_version 2 uid) or "launcher" (a `run --nats` publishing itself
// states its own uid); -1 and "" when no record says (a record of
// schema_version 1). When records of both kinds name one run, the
// daemon's word is shown. It reads the launch records of the result's
// runs by their primary key (kind, host, run_id), whenever they were made:
// the rollup does not hold them.
func addLauncherUIDs(ctx context.Context, st *store.Store, res *Result) error {
	hostAt, runAt := slices.Index(res.Columns, "host"), slices.Index(res.Columns, "run_id")
	if hostAt < 0 || runAt < 0 {
		return fmt.Errorf("query runs: no host and run_id columns to find the launcher by")
	}
	type ref struct{ host, run string }
	type said struct {
		uid int64
		by  string
	}
	uids := map[ref]said{}
	for lo := 0; lo < len(res.Rows); lo += launcherUIDChunk {
		chunk := res.Rows[lo:min(lo+launcherUIDChunk, len(res.Rows))]
		params := store.Params{}
		tuples := make([]string, len(chunk))
		for i, row := range chunk {
			h, r := "host_"+letters(i), "run_"+letters(i) // placeholder names are [a-z_]
			params[h], params[r] = fmt.Sprint(row[hostAt]), fmt.Sprint(row[runAt])
			tuples[i] = "({" + h + ":String}, {" + r + ":String})"
		}
		sql := "SELECT host, run_id, toString(launcher_uid_by) AS by, max(launcher_uid) FROM events WHERE kind = 'launch' AND launcher_uid >= 0 AND (host, run_id) IN (" +
			strings.Join(tuples, ", ") + ") GROUP BY host, run_id, by"
		rows, err := st.Query(ctx, sql, params)
		if err != nil {
			return fmt.Errorf("query runs: launcher uids: %w", err)
		}
		for rows.Next() {
			var k ref
			var s said
			if err := rows.Scan(&k.host, &k.run, &s.by, &s.uid); err != nil {
				rows.Close()
				return fmt.Errorf("query runs: launcher uids: %w", err)
			}
			if s.by == "" {
				s.by = string(schema.LauncherUIDByDaemon) // schema_version 2: only the daemon set it
			}
			if prev, ok := uids[k]; !ok || prev.by != string(schema.LauncherUIDByDaemon) {
				uids[k] = s
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("query runs: launcher uids: %w", err)
		}
	}
	res.Columns = append(res.Columns, "launcher_uid", "launcher_uid_by")
	for i, row := range res.Rows {
		s, ok := uids[ref{fmt.Sprint(row[hostAt]), fmt.Sprint(row[runAt])}]
		if !ok {
			s = said{uid: -1}
		}
		res.Rows[i] = append(row, s.uid, s.by)
	}
	return nil
}

// letters writes n in base 26 with the digits a-z.
func letters(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('a' + n%26)}, b...)
		if n /= 26; n == 0 {
			return string(b)
		}
	}
}

func runSQL(ctx context.Context, st *store.Store, name, sql string, params store.Params) (*Result, error) {
	rows, err := st.Query(ctx, sql, params)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", name, err)
	}
	defer rows.Close()
	res := &Result{Name: name, Columns: rows.Columns()}
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
			row[i] = bounded(reflect.ValueOf(d).Elem().Interface())
		}
		res.Rows = append(res.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query %s: %w", name, err)
	}
	return res, nil
}

// AmbiguousRunError is returned for a run id that events of more than one
// host carry, when no host was named (store.RunHost).
type AmbiguousRunError = store.AmbiguousRunError

// timelineAllHosts finds the run's host first: with the host the primary
// key narrows the scan to the run's ranges. A run id of several hosts is
// refused: the timeline has no host column to tell their events apart.
func timelineAllHosts(ctx context.Context, st *store.Store, text string, p Params) (*Result, error) {
	host, err := st.RunHost(ctx, p.Run)
	if err != nil {
		return nil, fmt.Errorf("query timeline: %w", err)
	}
	p.Host = host
	if host == "" {
		// No such run: the query's columns and no rows.
		p.Host = "\x00none"
	}
	return runSQL(ctx, st, "timeline", text, p.values())
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
// times, the runs query's server columns as one SERVER column (serverView),
// and every string is escaped for a terminal (Escape): names and versions
// are the servers' own, untrusted strings.
func (r *Result) WriteTable(w io.Writer) error {
	cols, rows := r.Columns, r.Rows
	if r.Name == "runs" {
		cols, rows = serverView(cols, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = strings.TrimSuffix(c, "_ns")
		if c == "call_ns" {
			head[i] = "call_ms"
		}
	}
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(head, "\t")))
	for _, row := range rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = Escape(cell(cols[i], v))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no rows)")
	}
	return tw.Flush()
}

func cell(col string, v any) string {
	if col == "launcher_uid" && v == any(int64(-1)) || col == "launcher_uid_by" && v == any("") {
		return "-"
	}
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

// serverColumns are the runs query's columns that say which server ran,
// folded into its server column in the table.
var serverColumns = []string{"server", "server_version", "protocol_era", "server_exe", "identified"}

// serverView replaces the runs query's server columns by one: "NAME
// VERSION, ERA era" for a server that identified itself ("(no name)" or
// "(no version)" where it left one out), "not identified (executable
// EXE)" for one that never did. Columns or rows of another shape are
// returned as they are.
func serverView(cols []string, rows [][]any) ([]string, [][]any) {
	at := map[string]int{}
	for i, c := range cols {
		at[c] = i
	}
	for _, c := range serverColumns {
		if _, ok := at[c]; !ok {
			return cols, rows
		}
	}
	drop := map[int]bool{}
	for _, c := range serverColumns[1:] {
		drop[at[c]] = true
	}
	var out []string
	for i, c := range cols {
		if !drop[i] {
			out = append(out, c)
		}
	}
	str := func(row []any, c string) string { s, _ := row[at[c]].(string); return s }
	outRows := make([][]any, len(rows))
	for n, row := range rows {
		var desc string
		if identified(row[at["identified"]]) {
			name, version := str(row, "server"), str(row, "server_version")
			if name == "" {
				name = "(no name)"
			}
			if version == "" {
				version = "(no version)"
			}
			desc = name + " " + version + ", " + str(row, "protocol_era") + " era"
		} else {
			desc = "not identified"
			if exe := str(row, "server_exe"); exe != "" {
				desc += " (executable " + exe + ")"
			}
		}
		var o []any
		for i, v := range row {
			switch {
			case i == at["server"]:
				o = append(o, desc)
			case !drop[i]:
				o = append(o, v)
			}
		}
		outRows[n] = o
	}
	return out, outRows
}

func identified(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case uint8:
		return x != 0
	}
	return false
}

// bounded cuts a string longer than MaxString bytes (at a rune boundary,
// invalid UTF-8 replaced) and marks the cut; other values are returned as
// they are.
func bounded(v any) any {
	s, ok := v.(string)
	if !ok || len(s) <= MaxString && utf8.ValidString(s) {
		return v
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxString {
		return s
	}
	cut := MaxString
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Escape makes s safe to print on a terminal, one table cell: a backslash
// is doubled, and every rune that is not printable (control characters
// such as tab, newline and escape; format characters such as the bidi
// overrides and isolates and zero-width joiners; spaces other than U+0020)
// becomes \uXXXX (\UXXXXXXXX beyond the BMP), an invalid byte \xXX.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r > 0xFFFF:
			fmt.Fprintf(&b, `\U%08X`, r)
		default:
			fmt.Fprintf(&b, `\u%04X`, r)
		}
		i += size
	}
	return b.String()
}
