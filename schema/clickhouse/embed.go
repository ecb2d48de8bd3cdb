// Package clickhouse holds the ClickHouse side of the event schema: the
// versioned migrations of each table layout (migrations/current/ for
// current releases, migrations/legacy/ for ClickHouse 18.16, each
// NNNN_name.sql) and the canned queries (queries/*.sql) that `mcpwarden
// query` runs on either, embedded so the binary and an analyst at
// clickhouse-client use the same SQL.
package clickhouse

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/current/*.sql migrations/legacy/*.sql
var migrationFS embed.FS

// Layouts are the table layouts that have migrations.
var Layouts = []string{"current", "legacy"}

//go:embed queries/*.sql
var queryFS embed.FS

// Migration is one versioned schema change.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Migrations returns every migration of layout in version order.
func Migrations(layout string) ([]Migration, error) {
	dir := "migrations/" + layout
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("no migrations for table layout %q (layouts: %s)", layout, strings.Join(Layouts, ", "))
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", e.Name())
		}
		b, err := migrationFS.ReadFile(dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: rest, Statements: SplitStatements(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations with version %d", out[i].Version)
		}
	}
	return out, nil
}

// SplitStatements splits SQL text on semicolons that end a line, dropping
// comment-only and empty statements.
func SplitStatements(sql string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		var code []string
		for _, l := range strings.Split(s, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				code = append(code, l)
			}
		}
		if len(code) > 0 {
			out = append(out, strings.Join(code, "\n"))
		}
	}
	for _, line := range strings.SplitAfter(sql, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasSuffix(t, ";") && !strings.HasPrefix(t, "--") {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " \t\r\n"), ";"))
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}

// Query returns the text of the canned query name (queries/<name>.sql).
func Query(name string) (string, error) {
	b, err := queryFS.ReadFile("queries/" + name + ".sql")
	if err != nil {
		return "", fmt.Errorf("no canned query %q", name)
	}
	return string(b), nil
}

// QueryNames lists the canned queries.
func QueryNames() []string {
	entries, _ := fs.ReadDir(queryFS, "queries")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".sql"))
	}
	return out
}
