// Package chtest gives tests a fresh database on the local ClickHouse server
// that `scripts/test-env.sh up` starts (native port 9000). Outside CI a
// missing server skips the test; under CI=true it fails it.
package chtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Addr is the server the tests use; MCPWARDEN_CLICKHOUSE_ADDR overrides it.
func Addr() string {
	if a := os.Getenv("MCPWARDEN_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}

// Database creates a uniquely named database, drops it when the test ends,
// and returns a DSN for it.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{Addr()}, DialTimeout: 3 * time.Second})
	if err == nil {
		err = conn.Ping(ctx)
	}
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("ClickHouse is not reachable at %s (%v); start it with 'scripts/test-env.sh up'", Addr(), err))
	}
	name := "mcpw_test_" + strings.ReplaceAll(schema.NewID()[:12], "-", "")
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
		conn.Close()
	})
	return "clickhouse://" + Addr() + "/" + name
}
