package main

import (
	"context"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/cli"
)

// TestQueryAndCollectUsage: bad invocations are refused with the usage exit
// code before anything is contacted.
func TestQueryAndCollectUsage(t *testing.T) {
	for _, args := range [][]string{
		{"query"},
		{"query", "nope"},
		{"query", "timeline"},
		{"query", "findings", "--severity", "bogus", "--clickhouse", "clickhouse://127.0.0.1:1/x"},
		{"query", "runs", "--from", "yesterday"},
		{"query", "runs", "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"},
		{"collect", "extra-arg"},
		{"collect", "--batch-wait", "soon"},
		// The schema's shape is given with a migration only, and a
		// retention must parse.
		{"collect", "--retention", "file_op=7d", "--clickhouse", "clickhouse://127.0.0.1:1/x"},
		{"collect", "--cluster", "mcpwarden", "--clickhouse", "clickhouse://127.0.0.1:1/x"},
		{"collect", "--migrate-only", "--retention", "file_op=30m", "--clickhouse", "clickhouse://127.0.0.1:1/x"},
		{"collect", "--migrate-only", "--retention", "findings=7d", "--clickhouse", "clickhouse://127.0.0.1:1/x"},
	} {
		if code := dispatch(context.Background(), args); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
	if code := dispatch(context.Background(), []string{"query", "runs", "--sql"}); code != cli.ExitOK {
		t.Errorf("query runs --sql: exit %d", code)
	}
}
