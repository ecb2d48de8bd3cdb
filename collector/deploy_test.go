package collector

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/query"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestDeployClickHouseUsers runs clickhouse-server with deploy/clickhouse's
// config.d and users.d (password hashes filled in) and walks the documented
// fleet flow: the collector user migrates and inserts; the analyst user
// runs every canned query and cannot write; a wrong password gets nothing.
func TestDeployClickHouseUsers(t *testing.T) {
	deploy := filepath.Join(testenv.RepoRoot(), "deploy", "clickhouse")
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(deploy, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	collectorPW, analystPW := randomPassword(t), randomPassword(t)
	users := read("users.d/mcpwarden.xml")
	if strings.Count(users, "REPLACE_WITH_SHA256_HEX") != 2 {
		t.Fatal("deploy/clickhouse/users.d/mcpwarden.xml no longer has the two password placeholders this test fills in")
	}
	users = strings.Replace(users, "REPLACE_WITH_SHA256_HEX", sha256Hex(collectorPW), 1)
	users = strings.Replace(users, "REPLACE_WITH_SHA256_HEX", sha256Hex(analystPW), 1)
	srv := chtest.StartServerWithConfig(t, map[string]string{
		"config.d/mcpwarden.xml": read("config.d/mcpwarden.xml"),
		"users.d/mcpwarden.xml":  users,
	})
	dsn := func(user, pw string) string {
		return "clickhouse://" + user + ":" + pw + "@" + srv.Addr() + "/mcpwarden"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The collector: `mcpwarden collect --migrate` creates the database and
	// the schema, then inserts.
	w, err := store.Open(ctx, dsn("mcpwarden_collector", collectorPW), true, nil)
	if err != nil {
		t.Fatalf("collector user cannot open the store: %v", err)
	}
	defer w.Close()
	if _, err := w.Migrate(ctx); err != nil {
		t.Fatalf("collector user cannot migrate: %v", err)
	}
	g := eventgen.New("host-deploy")
	g.T0 = time.Now().Add(-time.Hour)
	evs := g.Mixed(2000)
	if err := w.Insert(ctx, evs); err != nil {
		t.Fatalf("collector user cannot insert: %v", err)
	}

	// The analyst: every canned query, as `mcpwarden query` runs it.
	r, err := store.Open(ctx, dsn("mcpwarden_analyst", analystPW), false, nil)
	if err != nil {
		t.Fatalf("analyst user cannot open the store: %v", err)
	}
	defer r.Close()
	if err := r.CheckSchema(ctx); err != nil {
		t.Fatalf("analyst user: %v", err)
	}
	p := query.Params{From: g.T0.Add(-time.Hour), To: time.Now().Add(time.Hour), Run: evs[0].RunID}
	for _, c := range query.List {
		res, err := query.Run(ctx, r, c.Name, p)
		if err != nil {
			t.Errorf("analyst user: query %s: %v", c.Name, err)
			continue
		}
		if c.Name == "runs" || c.Name == "timeline" || c.Name == "inventory" {
			if len(res.Rows) == 0 {
				t.Errorf("analyst user: query %s returned no rows", c.Name)
			}
		}
	}
	if err := r.Insert(ctx, g.Mixed(10)); err == nil {
		t.Error("the analyst user could insert into events")
	}
	if err := r.Conn().Exec(ctx, "DROP TABLE events"); err == nil {
		t.Error("the analyst user could drop the events table")
	}

	if bad, err := store.Open(ctx, dsn("mcpwarden_analyst", "wrong"+analystPW), false, nil); err == nil {
		if bad.CheckSchema(ctx) == nil {
			t.Error("a wrong password could read the schema")
		}
		bad.Close()
	}
}

// randomPassword is a password as deploy/README tells operators to make
// one: a letter, then hex. nats-server (Debian's 2.9.10) parses a
// variable's value as a configuration value, so one that starts with a
// digit ("3f0c...") is read as a malformed number and the server refuses
// to start.
func randomPassword(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "p" + hex.EncodeToString(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
