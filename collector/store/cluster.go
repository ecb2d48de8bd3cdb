package store

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// clusterPlan rewrites the migrations for a cluster: every table T becomes
// T_local, created ON CLUSTER with the Replicated variant of its engine
// (one replica set per shard, coordinated through ZooKeeper or ClickHouse
// Keeper at /clickhouse/tables/{shard}/DB/T_local), plus a Distributed
// table named T over it, which is what the collector writes and the
// queries read. Materialized views are created on the local tables, so each
// shard keeps the rollups of the events it holds; a query merges the
// shards' states. The migrations are plain SQL with a few statement shapes
// (create table, create materialized view ... TO, backfill INSERT ...
// SELECT, ALTER TABLE ... ADD COLUMN, MODIFY SETTING, ADD and MATERIALIZE
// PROJECTION, DROP TABLE IF EXISTS of a view named
// *_mv*); anything else is refused rather
// than run on one node only.
type clusterPlan struct {
	cluster, db string
}

// shardKeys says how rows spread over the shards: a run's events (and all
// copies of one event, which must meet in one ReplacingMergeTree) on one
// shard, by host and run; the rollups' rows anywhere, since every query
// merges them across shards.
var shardKeys = map[string]string{
	"events":            "cityHash64(host, run_id)",
	"runs_rollup":       "cityHash64(host, run_id)",
	"denials_rollup":    "rand()",
	"schema_migrations": "rand()",
}

func (s *Store) planCluster(ctx context.Context, cluster string) (*clusterPlan, error) {
	if !dbName().MatchString(cluster) {
		return nil, fmt.Errorf("cluster name %q: use letters, digits and '_'", cluster)
	}
	var hosts, shards uint64
	if err := s.QueryRow(ctx, "SELECT count(), uniqExact(shard_num) FROM system.clusters WHERE cluster = {c:String}", Params{"c": cluster}, &hosts, &shards); err != nil {
		return nil, fmt.Errorf("read cluster %s: %w", cluster, err)
	}
	if hosts == 0 {
		return nil, fmt.Errorf("cluster %s is not in the remote_servers of the ClickHouse server at %s (see deploy/clickhouse/cluster)", cluster, strings.Join(s.opt.Addr, ","))
	}
	var macros uint64
	if err := s.QueryRow(ctx, "SELECT count() FROM system.macros WHERE macro IN ('shard', 'replica')", nil, &macros); err != nil {
		return nil, fmt.Errorf("read the server's macros: %w", err)
	}
	if macros != 2 {
		return nil, fmt.Errorf("the ClickHouse server at %s has no {shard} and {replica} macros: every node of cluster %s needs both (see deploy/clickhouse/cluster)", strings.Join(s.opt.Addr, ","), cluster)
	}
	return &clusterPlan{cluster: cluster, db: s.db}, nil
}

func (p *clusterPlan) onCluster() string { return " ON CLUSTER `" + p.cluster + "`" }

func (p *clusterPlan) qualified(table string) string { return "`" + p.db + "`." + table }

func (p *clusterPlan) createDatabase() string {
	return "CREATE DATABASE IF NOT EXISTS `" + p.db + "`" + p.onCluster()
}

// migrationsTable is schema_migrations on the cluster: replicated, and
// read through a Distributed table, so a migrate from any node sees what
// a migrate from another applied.
func (p *clusterPlan) migrationsTable() []string {
	out, err := p.rewrite([]string{`CREATE TABLE IF NOT EXISTS schema_migrations
(version UInt32, name String, applied_at DateTime DEFAULT now())
ENGINE = ReplacingMergeTree(applied_at) ORDER BY version`})
	if err != nil {
		panic(err) // a fixed statement of the right shape
	}
	return out
}

// EachNode starts a rewritten statement that is run on every node of the
// cluster in turn rather than ON CLUSTER.
const EachNode = "/* each node */ "

var (
	createTableRE = regexp.MustCompile(`^CREATE TABLE IF NOT EXISTS (\w+)\s*\n?\(`)
	createViewRE  = regexp.MustCompile(`^CREATE MATERIALIZED VIEW IF NOT EXISTS (\w+) TO (\w+) AS\s`)
	insertRE      = regexp.MustCompile(`^INSERT INTO (\w+)(\s*\([\w,\s]+\))?\s*\n?SELECT\s`)
	dropViewRE    = regexp.MustCompile(`^DROP TABLE IF EXISTS (\w+_mv\d*)$`)
	alterRE       = regexp.MustCompile(`^ALTER TABLE (\w+) (ADD COLUMN .*)$`)
	alterLocalRE  = regexp.MustCompile(`^ALTER TABLE (\w+) ((?:MODIFY SETTING|ADD PROJECTION|MATERIALIZE PROJECTION) .*)$`)
	fromRE        = regexp.MustCompile(`\bFROM (\w+)\b`)
	engineRE      = regexp.MustCompile(`\nENGINE = (\w+)\(`)
)

// rewrite turns one migration's statements into their cluster form.
func (p *clusterPlan) rewrite(stmts []string) ([]string, error) {
	var out []string
	for _, st := range stmts {
		st = strings.TrimSpace(st)
		switch {
		case createTableRE.MatchString(st):
			local, dist, err := p.table(st)
			if err != nil {
				return nil, err
			}
			out = append(out, local, dist)
		case createViewRE.MatchString(st):
			m := createViewRE.FindStringSubmatch(st)
			body, err := p.from(st[len(m[0]):], "_local")
			if err != nil {
				return nil, err
			}
			out = append(out, "CREATE MATERIALIZED VIEW IF NOT EXISTS "+p.qualified(m[1])+p.onCluster()+
				" TO "+p.qualified(m[2]+"_local")+" AS\n"+body)
		case insertRE.MatchString(st):
			// A backfill: from the Distributed source into the Distributed
			// target, so every shard's rows are read and each lands on its
			// shard.
			m := insertRE.FindStringSubmatch(st)
			if err := p.known(m[1]); err != nil {
				return nil, err
			}
			body, err := p.from(st[len(m[0]):], "")
			if err != nil {
				return nil, err
			}
			out = append(out, "INSERT INTO "+p.qualified(m[1])+m[2]+"\nSELECT "+body)
		case dropViewRE.MatchString(st):
			// A materialized view another replaced: it exists on every
			// node (created ON CLUSTER), and is dropped on each in turn.
			m := dropViewRE.FindStringSubmatch(st)
			out = append(out, EachNode+"DROP TABLE IF EXISTS "+p.qualified(m[1]))
		case alterRE.MatchString(st):
			m := alterRE.FindStringSubmatch(st)
			if err := p.known(m[1]); err != nil {
				return nil, err
			}
			// The replicated table changes on the cluster (one replica
			// per shard; the others follow through replication), the
			// Distributed table on each node: ClickHouse 18.16 refuses any
			// DDL ON CLUSTER but CREATE for a table that is not replicated
			// when the shards are.
			out = append(out, "ALTER TABLE "+p.qualified(m[1]+"_local")+p.onCluster()+" "+m[2],
				EachNode+"ALTER TABLE "+p.qualified(m[1])+" "+m[2])
		case alterLocalRE.MatchString(st):
			// A table setting or a projection: the replicated tables'
			// alone (a Distributed table has neither).
			m := alterLocalRE.FindStringSubmatch(st)
			if err := p.known(m[1]); err != nil {
				return nil, err
			}
			out = append(out, "ALTER TABLE "+p.qualified(m[1]+"_local")+p.onCluster()+" "+m[2])
		default:
			return nil, fmt.Errorf("a statement this migration runs cannot be run on a cluster: %.80q", st)
		}
	}
	return out, nil
}

func (p *clusterPlan) known(table string) error {
	if _, ok := shardKeys[table]; !ok {
		return fmt.Errorf("table %s has no sharding key for a cluster", table)
	}
	return nil
}

// table is a CREATE TABLE's local and Distributed forms.
func (p *clusterPlan) table(st string) (local, dist string, err error) {
	m := createTableRE.FindStringSubmatch(st)
	name := m[1]
	if _, ok := shardKeys[name]; !ok {
		return "", "", fmt.Errorf("table %s has no sharding key for a cluster", name)
	}
	e := engineRE.FindStringSubmatchIndex(st)
	if e == nil {
		return "", "", fmt.Errorf("table %s: no ENGINE = Name(...) on a line of its own", name)
	}
	engine := st[e[2]:e[3]]
	if !strings.HasSuffix(engine, "MergeTree") || strings.HasPrefix(engine, "Replicated") {
		return "", "", fmt.Errorf("table %s: engine %s has no Replicated variant here", name, engine)
	}
	argsStart := e[1] // just past "("
	depth, argsEnd := 1, -1
	for i := argsStart; i < len(st) && argsEnd < 0; i++ {
		switch st[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				argsEnd = i
			}
		}
	}
	if argsEnd < 0 {
		return "", "", fmt.Errorf("table %s: unbalanced ENGINE arguments", name)
	}
	args := "'/clickhouse/tables/{shard}/" + p.db + "/" + name + "_local', '{replica}'"
	if a := strings.TrimSpace(st[argsStart:argsEnd]); a != "" {
		args += ", " + a
	}
	head := "CREATE TABLE IF NOT EXISTS " + p.qualified(name+"_local") + p.onCluster() + "\n("
	local = head + st[len(m[0]):e[0]] + "\nENGINE = Replicated" + engine + "(" + args + ")" + st[argsEnd+1:]
	return local, p.distributed(name), nil
}

// distributed is the Distributed table name over name_local.
func (p *clusterPlan) distributed(name string) string {
	return "CREATE TABLE IF NOT EXISTS " + p.qualified(name) + p.onCluster() + " AS " + p.qualified(name+"_local") +
		"\nENGINE = Distributed(`" + p.cluster + "`, `" + p.db + "`, " + name + "_local, " + shardKeys[name] + ")"
}

// from qualifies every table a SELECT reads, adding suffix.
func (p *clusterPlan) from(sql, suffix string) (string, error) {
	var bad error
	out := fromRE.ReplaceAllStringFunc(sql, func(m string) string {
		t := fromRE.FindStringSubmatch(m)[1]
		if err := p.known(t); err != nil {
			bad = err
			return m
		}
		return "FROM " + p.qualified(t+suffix)
	})
	return out, bad
}

// nodes are the cluster's hosts as its remote_servers name them.
func (s *Store) clusterNodes(ctx context.Context, cluster string) ([]string, error) {
	rows, err := s.Query(ctx, "SELECT host_name, port FROM system.clusters WHERE cluster = {c:String} ORDER BY shard_num, replica_num", Params{"c": cluster})
	if err != nil {
		return nil, fmt.Errorf("list the nodes of cluster %s: %w", cluster, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var host string
		var port uint16
		if err := rows.Scan(&host, &port); err != nil {
			return nil, err
		}
		out = append(out, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	return out, rows.Err()
}

// execEachNode runs stmt on every node of the cluster, as this store's
// user; a column that a node has already is no error (a second migrate).
func (s *Store) execEachNode(ctx context.Context, cluster, stmt string) error {
	nodes, err := s.clusterNodes(ctx, cluster)
	if err != nil {
		return err
	}
	for _, addr := range nodes {
		opt := *s.opt
		opt.Addr = []string{addr}
		conn, err := clickhouse.Open(&opt)
		if err != nil {
			return fmt.Errorf("connect to cluster node %s: %w", addr, err)
		}
		err = conn.Exec(ctx, stmt)
		conn.Close()
		if err != nil && !columnExists(stmt, err) {
			return fmt.Errorf("on cluster node %s: %w", addr, err)
		}
	}
	return nil
}
