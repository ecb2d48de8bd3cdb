package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestClickHouseImpostorIsRefused: the native port (9000) is above 1024
// and the default DSN speaks no TLS, so while ClickHouse is down any local
// user may listen there with a server of its own. The collector opened it:
// its inserts went there (and were acknowledged to NATS, so the events left
// the stream for good) and `mcpwarden query` answered from it. A server on
// this host must now be run by root, the client's user or the clickhouse
// account; here it is a real clickhouse-server run by uid 65534. (The
// shared test servers, Debian's run by clickhouse and chdb-listen by root,
// are opened by every other test of this package.)
func TestClickHouseImpostorIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	imp := chtest.StartServerAs(t, 65534)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, create := range []bool{true, false} {
		s, err := Open(ctx, imp.DSN("mcpwarden_impostor"), create, nil)
		if err == nil {
			s.Close()
			t.Fatalf("opened (create %v) a ClickHouse server on this host run by uid 65534", create)
		}
		if !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("the refusal does not name the server's owner: %v", err)
		}
	}
}
