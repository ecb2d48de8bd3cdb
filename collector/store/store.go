// Package store writes events to ClickHouse and reads them back, over
// clickhouse-go/v2's native protocol (its HTTP protocol does not work with
// ClickHouse 18.16). Every INSERT names its columns, which 18.16 requires.
//
// Two table layouts exist (Layout): the current one (DateTime64
// timestamps, LowCardinality strings, TTL retention per kind and table) for
// current ClickHouse releases, and the legacy one that ClickHouse 18.16 can
// hold. A database keeps the layout it was created with; a new one gets the
// current layout unless the server is too old for it. Queries take their
// parameters server-side ({name:Type}) wherever the server supports it,
// and bound on the client (Bind) only for 18.16. On a cluster (Migrate
// with a cluster name) the tables are replicated per shard and read and
// written through Distributed tables of the same names.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpwarden/mcpwarden/internal/localpeer"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

// Store is a connection pool to one ClickHouse database.
type Store struct {
	conn driver.Conn
	opt  *clickhouse.Options
	db   string
	log  *slog.Logger

	version      serverVersion
	layout       Layout
	ncols        int  // the events columns the table has: columns, or the first ncols of them before the migrations of lateColumns
	serverParams bool // the server takes query parameters ({name:Type})
	distributed  bool // events is a Distributed table (a cluster)
}

// dbName is compiled on first use: every mcpwarden command links this
// package, and only collect and query check a database name.
var dbName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`) })

// DefaultDSN is the single-host default.
const DefaultDSN = "clickhouse://127.0.0.1:9000/mcpwarden"

// ErrForeignLocalServer is the refusal of a ClickHouse server on this host
// run by an account that is not root, this user or clickhouse.
var ErrForeignLocalServer = errors.New("ClickHouse server on this host run by another user")

// checkOwner refuses a connection whose server is on this host and run by
// neither root, this process's user nor the `clickhouse` account (Debian's
// package runs the server as that user). The native port is above 1024 and
// the default DSN speaks no TLS: a local user who listens on it while the
// server is down would take the collector's inserts (acknowledged to NATS,
// so lost) and answer `mcpwarden query` with rows of its choosing. A server
// on another host, or reached over TLS (secure=true in the DSN), is not
// checked here.
func checkOwner(c net.Conn) error {
	owner, local, err := localpeer.Owner(c)
	if err != nil {
		return fmt.Errorf("ClickHouse at %s: cannot tell who runs the server on this host: %w (use TLS, secure=true in the DSN, to authenticate it by certificate)", c.RemoteAddr(), err)
	}
	if !local || owner == 0 || owner == os.Geteuid() {
		return nil
	}
	if u, err := user.Lookup("clickhouse"); err == nil && u.Uid == strconv.Itoa(owner) {
		return nil
	}
	return fmt.Errorf("%w: the server at %s is run by uid %d, not root, this user (uid %d) or the clickhouse account: another local user may have taken the port while ClickHouse was down; stop it, or use TLS (secure=true) for a server run by a user of its own", ErrForeignLocalServer, c.RemoteAddr(), owner, os.Geteuid())
}

// Open connects to the database named in dsn
// (clickhouse://user:password@host:9000/database?dial_timeout=5s). With
// create set, the database is created first when missing (for --migrate).
func Open(ctx context.Context, dsn string, create bool, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opt, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse ClickHouse DSN: %w (want clickhouse://USER:PASSWORD@HOST:9000/DATABASE)", err)
	}
	if opt.Protocol != clickhouse.Native {
		return nil, errors.New("ClickHouse DSN must use the native protocol (clickhouse://HOST:9000/DB); the HTTP protocol does not work with ClickHouse 18.16")
	}
	db := opt.Auth.Database
	if db == "" {
		db = "mcpwarden"
		opt.Auth.Database = db
	}
	if !dbName().MatchString(db) {
		return nil, fmt.Errorf("ClickHouse database name %q: use letters, digits and '_'", db)
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = 5 * time.Second
	}
	if opt.TLS == nil && opt.DialContext == nil {
		// No certificate to tell the server by: one on this host must be
		// run by root, this user or the clickhouse account (checkOwner).
		d := &net.Dialer{Timeout: opt.DialTimeout}
		opt.DialContext = func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			if err := checkOwner(c); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
	}
	if opt.MaxOpenConns == 0 {
		opt.MaxOpenConns = 8
	}
	if create {
		boot := *opt
		// The database does not exist yet, so connect to one that always
		// does and that a user limited to its own database may still use
		// (allow_databases in deploy/clickhouse: "default" is refused).
		boot.Auth.Database = "system"
		c, err := clickhouse.Open(&boot)
		if err != nil {
			return nil, fmt.Errorf("connect to ClickHouse: %w", err)
		}
		err = c.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+db+"`")
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("create ClickHouse database %s: %w", db, err)
		}
	}
	conn, err := clickhouse.Open(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to ClickHouse: %w", err)
	}
	s := &Store{conn: conn, opt: opt, db: db, log: log}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("reach ClickHouse database %s at %s: %w (is clickhouse-server running? run 'mcpwarden collect --migrate' once to create the schema)", db, strings.Join(opt.Addr, ","), err)
	}
	if err := s.detect(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// Conn is the underlying connection pool.
func (s *Store) Conn() driver.Conn { return s.conn }

// Database is the database name.
func (s *Store) Database() string { return s.db }

// Close closes the pool.
func (s *Store) Close() error { return s.conn.Close() }

// Migrate applies the migrations with the default retention on a single
// server (MigrateWith).
func (s *Store) Migrate(ctx context.Context) (applied []int, err error) {
	return s.MigrateWith(ctx, MigrateOptions{})
}

// MigrateOptions says how to migrate.
type MigrateOptions struct {
	// Cluster names a cluster of the server's remote_servers: the schema is
	// created ON CLUSTER, each table replicated per shard (its _local
	// table, Replicated*MergeTree) and read and written through a
	// Distributed table of the table's own name. "" is one server.
	Cluster string
	// Retention is the TTL of each kind and table (current layout only;
	// zero values take DefaultRetention's).
	Retention Retention
	// Through, when positive, applies only the migrations up to that
	// version: a staged upgrade, and how tests build the database an
	// earlier release left behind.
	Through int
}

// MigrateWith applies the migrations of the database's layout not yet
// recorded in schema_migrations, in version order, then sets the retention
// (current layout). Every migration is idempotent on its own (IF NOT
// EXISTS), so two collectors migrating at once, or a crash between a
// migration and its record, are harmless.
func (s *Store) MigrateWith(ctx context.Context, o MigrateOptions) (applied []int, err error) {
	ms, err := chschema.Migrations(string(s.layout))
	if err != nil {
		return nil, err
	}
	var plan *clusterPlan
	if o.Cluster != "" {
		if plan, err = s.planCluster(ctx, o.Cluster); err != nil {
			return nil, err
		}
		if err := s.conn.Exec(ctx, plan.createDatabase()); err != nil {
			return nil, fmt.Errorf("create database %s on cluster %s: %w", s.db, o.Cluster, err)
		}
	}
	create := []string{`CREATE TABLE IF NOT EXISTS schema_migrations
(version UInt32, name String, applied_at DateTime DEFAULT now())
ENGINE = ReplacingMergeTree(applied_at) ORDER BY version`}
	if plan != nil {
		create = plan.migrationsTable()
		// Backfills and the migration records go through Distributed
		// tables: each returns once every shard holds its rows.
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	}
	for _, c := range create {
		if err := s.conn.Exec(ctx, c); err != nil {
			return nil, fmt.Errorf("create schema_migrations: %w", err)
		}
	}
	done, err := s.appliedMigrations(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if done[m.Version] || o.Through > 0 && m.Version > o.Through {
			continue
		}
		stmts, err := forRelease(m.Statements, s.version)
		if err != nil {
			return applied, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if plan != nil {
			if stmts, err = plan.rewrite(stmts); err != nil {
				return applied, fmt.Errorf("migration %04d_%s on cluster %s: %w", m.Version, m.Name, o.Cluster, err)
			}
		}
		for _, stmt := range stmts {
			if each, ok := strings.CutPrefix(stmt, EachNode); ok && plan != nil {
				if err := s.execEachNode(ctx, plan.cluster, each); err != nil {
					return applied, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
				}
				continue
			}
			if err := s.conn.Exec(ctx, stmt); err != nil && !columnExists(stmt, err) && !clusterColumnExists(stmt, err) {
				return applied, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		// An INSERT with inline VALUES hangs on 18.16's native protocol;
		// a one-row block does not.
		b, err := s.conn.PrepareBatch(ctx, "INSERT INTO schema_migrations (version, name)")
		if err == nil {
			if err = b.Append(uint32(m.Version), m.Name); err == nil {
				err = b.Send()
			}
		}
		if err != nil {
			return applied, fmt.Errorf("record migration %04d: %w", m.Version, err)
		}
		s.log.Info("applied ClickHouse migration", "version", m.Version, "name", m.Name, "layout", s.layout)
		applied = append(applied, m.Version)
	}
	if err := s.detect(ctx); err != nil {
		return applied, err
	}
	if err := s.applyRetention(ctx, o.Retention, plan); err != nil {
		return applied, err
	}
	return applied, nil
}

// CheckSchema reports a clear error when the events table is missing.
func (s *Store) CheckSchema(ctx context.Context) error {
	var n uint64
	if err := s.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = {db:String} AND name = 'events'", Params{"db": s.db}, &n); err != nil {
		return fmt.Errorf("check ClickHouse schema: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("ClickHouse database %s has no events table: run 'mcpwarden collect --migrate' once", s.db)
	}
	return nil
}

// CheckMigrated reports a clear error when the database lacks a migration
// of this release's layout (the canned queries read what the latest
// migrations add: a database migrated by an older release must be migrated
// again before it is queried).
func (s *Store) CheckMigrated(ctx context.Context) error {
	ms, err := chschema.Migrations(string(s.layout))
	if err != nil {
		return err
	}
	var n uint64
	if err := s.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = {db:String} AND name = 'schema_migrations'", Params{"db": s.db}, &n); err != nil {
		return fmt.Errorf("check ClickHouse schema: %w", err)
	}
	done := map[int]bool{}
	if n > 0 {
		if done, err = s.appliedMigrations(ctx); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if !done[m.Version] {
			return fmt.Errorf("ClickHouse database %s lacks migration %04d_%s of the %s table layout: run 'mcpwarden collect --migrate' (or --migrate-only) once with this release", s.db, m.Version, m.Name, s.layout)
		}
	}
	return nil
}

// appliedMigrations reads the versions schema_migrations records.
func (s *Store) appliedMigrations(ctx context.Context) (map[int]bool, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
		done[int(v)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return done, nil
}

// columnExists reports whether err says that the column stmt adds exists
// already: ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so a column
// migration run twice (two collectors at once, a crash before its record)
// fails that way, and that is success. 18.16 reports it as code 44
// (ILLEGAL_COLUMN), current releases as 15 (DUPLICATE_COLUMN).
func columnExists(stmt string, err error) bool {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || (ex.Code != 15 && ex.Code != 44) {
		return false
	}
	up := strings.ToUpper(stmt)
	return strings.HasPrefix(strings.TrimSpace(up), "ALTER TABLE") && strings.Contains(up, "ADD COLUMN") && strings.Contains(ex.Message, "already exists")
}

// clusterColumnExists is columnExists for an ALTER ... ON CLUSTER, whose
// error is the distributed DDL's and quotes each host's: a column that one
// host had already (a second migrate after a crash) is still added on the
// others, since every host runs the task.
func clusterColumnExists(stmt string, err error) bool {
	up := strings.ToUpper(stmt)
	return strings.Contains(up, " ON CLUSTER ") && strings.Contains(up, "ADD COLUMN") && strings.Contains(err.Error(), "already exists")
}
