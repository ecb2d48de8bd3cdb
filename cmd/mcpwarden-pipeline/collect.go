package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/mcpwarden/mcpwarden/collector"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/cli/natsconn"
	"github.com/mcpwarden/mcpwarden/metrics"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const collectUsage = `usage: mcpwarden collect [--nats URL] [--clickhouse DSN] [--migrate] [--metrics-listen HOST:PORT] [flags]

Moves events from NATS JetStream into ClickHouse and runs the cross-check.
Any number of collectors may share the stream; see docs/pipeline.md.
`

func cmdCollect(ctx context.Context, args []string) int {
	fs := cli.NewFlags("collect", collectUsage)
	nf := cli.AddNATSFlags(fs.FlagSet, cli.DefaultNATS, "NATS `URL` (comma-separated for a cluster; default the daemon's embedded server on this host)")
	stateDir := fs.String("state-dir", cli.DaemonStateDir, "the daemon's state `DIR`, where the embedded NATS server's credentials are (used when no NATS credential flag is given)")
	dsn := fs.String("clickhouse", store.DefaultDSN, "ClickHouse DSN, native protocol: clickhouse://USER:PASSWORD@HOST:9000/DATABASE")
	migrate := fs.Bool("migrate", false, "create the database and apply schema migrations (idempotent) before collecting")
	migrateOnly := fs.Bool("migrate-only", false, "apply migrations and exit")
	cluster := fs.String("cluster", "", "with --migrate or --migrate-only: create the schema ON CLUSTER `NAME` (a cluster of the server's remote_servers): replicated tables per shard, Distributed tables over them (docs/fleet.md)")
	retention := fs.String("retention", "", "with --migrate or --migrate-only: how long ClickHouse keeps rows, `SPEC` file_op=DAYS,events=DAYS,rollups=DAYS (each NNd, a duration, or forever; default "+store.DefaultRetention.String()+"; current ClickHouse only)")
	durable := fs.String("durable", stream.CollectorDurable, "durable consumer name shared by collectors")
	batchEvents := fs.Int("batch-events", 50_000, "events per ClickHouse insert (at most)")
	batchWait := fs.Duration("batch-wait", time.Second, "longest wait before a partial batch is inserted")
	ackWait := fs.Duration("ack-wait", 60*time.Second, "JetStream ack wait before a message is redelivered")
	manageStream := fs.Bool("manage-stream", true, "create or update the JetStream stream at start-up")
	replicas := fs.Int("stream-replicas", 0, "stream replicas when --manage-stream (0: 3 when the NATS server is part of a cluster, 1 on a single server)")
	maxAge := fs.Duration("stream-max-age", 7*24*time.Hour, "how long the stream keeps events")
	maxBytes := fs.Int64("stream-max-bytes", 0, "the stream's cap in bytes when --manage-stream; when full it refuses new messages (hosts spool) (0: keep an existing stream's cap, 10 GiB for a new one; the NATS server's JetStream store, max_file_store, must hold it)")
	perSubject := fs.Int64("stream-max-msgs-per-subject", stream.DefaultMaxMsgsPerSubject, "messages the stream keeps of one kind from one host; at the cap that host's new messages of the kind are refused (it spools), so one host cannot fill the stream for all")
	noXcheck := fs.Bool("no-crosscheck", false, "do not run the cross-check")
	window := fs.Duration("crosscheck-window", 2*time.Minute, "late-event window of the cross-check")
	silence := fs.Duration("daemon-silence", crosscheck.DefaultDaemonSilence, "a host's daemon sending no health report this long while a run is live is an OBSERVATION_GAP daemon_silent on the run (keep it above the daemon's report interval, 60s)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics on `HOST:PORT` at /metrics (default off; 127.0.0.1:9475 for this host only)")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return fs.Exit(err)
	}
	if err := cli.ApplyConfig(fs.FlagSet, cli.WithKeys(cli.DaemonStateKeys(map[string]string{"clickhouse_dsn": "clickhouse"}))); err != nil {
		return cli.ConfigFail(err)
	}
	if fs.NArg() > 0 {
		return fs.UsageError("takes no arguments, got %q", fs.Args())
	}
	if *metricsListen != "" {
		if *migrateOnly {
			return fs.UsageError("--metrics-listen has nothing to serve with --migrate-only")
		}
		if err := metrics.CheckAddr(*metricsListen); err != nil {
			return fs.UsageError("%v", err)
		}
	}
	keep, err := store.ParseRetention(*retention)
	if err != nil {
		return fs.UsageError("--retention: %v", err)
	}
	if !*migrate && !*migrateOnly && (*cluster != "" || *retention != "") {
		return fs.UsageError("--cluster and --retention shape the schema: give them with --migrate or --migrate-only")
	}
	mopts := store.MigrateOptions{Cluster: *cluster, Retention: keep}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *migrateOnly {
		st, err := store.Open(ctx, *dsn, true, logger)
		if err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		defer st.Close()
		applied, err := st.MigrateWith(ctx, mopts)
		if err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		where := ""
		if *cluster != "" {
			where = " on cluster " + *cluster
		}
		fmt.Printf("ClickHouse database %s%s is current (%s layout, %d migrations applied now)\n", st.Database(), where, st.Layout(), len(applied))
		return cli.ExitOK
	}
	natsOpts, err := natsconn.Options(nf, stream.RoleCollector, schema.LocalOrigin().Host, "mcpwarden-collect", *stateDir)
	if err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	cfg := collector.Config{
		NATS:          natsOpts,
		ClickHouseDSN: *dsn,
		Migrate:       *migrate,
		MigrateWith:   mopts,
		Durable:       *durable,
		BatchEvents:   *batchEvents,
		BatchWait:     *batchWait,
		AckWait:       *ackWait,
		CrossCheck:    !*noXcheck,
		CrossCheckCfg: crosscheck.Config{Window: *window, DaemonSilence: *silence},
		Logger:        logger,
	}
	if *perSubject < 1 {
		return fs.UsageError("--stream-max-msgs-per-subject %d: give at least 1", *perSubject)
	}
	if *maxBytes < 0 {
		return fs.UsageError("--stream-max-bytes %d: give a size in bytes, or 0 for the default", *maxBytes)
	}
	if *manageStream {
		cfg.Stream = &stream.Config{Replicas: *replicas, MaxAge: *maxAge, MaxBytes: *maxBytes, MaxMsgsPerSubject: *perSubject}
	}
	c, err := collector.New(cfg)
	if err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	if *metricsListen != "" {
		reg := metrics.NewRegistry("collector", cli.BuildVersion(version))
		reg.MustRegister(metrics.Collector(c))
		stop, err := serveMetrics(ctx, *metricsListen, reg, logger)
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		defer stop()
	}
	if err := c.Run(ctx); err != nil {
		return cli.Fail(cli.ExitInternal, cli.AuthHint(err, nf))
	}
	return cli.ExitOK
}
