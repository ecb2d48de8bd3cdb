package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/daemon/xcheck"
	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/cli/natsconn"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/metrics"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const daemonUsage = `usage: mcpwarden daemon [--socket PATH] [--socket-group GROUP] [--state-dir DIR] [--path-key FILE] [--enable-audit]
                        [--nats-listen HOST:PORT | --nats URL [NATS flags]] [--metrics-listen HOST:PORT]
       mcpwarden daemon --unload [--state-dir DIR]

Loads the eBPF probes, serves the socket launchers register their runs on
and send their records to (root, the daemon's user and --socket-group), and
publishes sanitized file_op, landlock_denial, finding and health events and
the launchers' records to NATS JetStream. Without --nats it runs an embedded NATS server with JetStream on
--nats-listen (127.0.0.1:4222), storing under STATE_DIR/nats, so one host
needs nothing else. The embedded server takes only the users whose keys it
generates at first start in STATE_DIR/nats-auth (root-only): the daemon
publishes, collectors consume, readers ('mcpwarden events') read.
Must run as root, in the host's pid namespace. Probes stay attached for the
next daemon while runs are live; --unload detaches them.
`

func cmdDaemon(ctx context.Context, args []string) int {
	fs := cli.NewFlags("daemon", daemonUsage)
	socket := fs.String("socket", client.DefaultSocket, "the daemon's socket `PATH` (created 0600 in a 0700 directory)")
	socketGroup := fs.String("socket-group", "", "also admit the members of `GROUP` (name or gid) to the socket, e.g. for launchers of desktop clients run as the user (socket 0660, directory 0710)")
	unload := fs.Bool("unload", false, "detach the probes a stopped daemon left attached for its runs, and exit")
	nf := cli.AddNATSFlags(fs.FlagSet, "", "external NATS `URL` (comma-separated for a cluster; default: run the embedded NATS server)")
	listen := fs.String("nats-listen", "127.0.0.1:4222", "`HOST:PORT` the embedded NATS server listens on (a loopback address: it speaks no TLS)")
	stateDir := fs.String("state-dir", "", "state `DIR`: path hash key, spool, embedded NATS store (default /var/lib/mcpwarden)")
	pathKey := fs.String("path-key", "", "key `FILE` for path hashes (default STATE_DIR/path.key, created if missing; share it with 'run' so hashes match)")
	enableAudit := fs.Bool("enable-audit", false, "turn kernel auditing on so Landlock denial records arrive (like 'auditctl -e 1')")
	backlogFloor := fs.Int("audit-backlog-floor", daemon.DefaultAuditBacklogFloor, "raise the kernel's audit backlog_limit to `N` records at start when it is lower (the kernel's default of 64 loses records in any burst); 0 leaves the host's setting")
	healthEvery := fs.Duration("health-interval", time.Minute, "how often a health report is sent; a collector takes a host whose reports stop for its --daemon-silence (3m) as a daemon gone, so keep this well below it")
	xwindow := fs.Duration("crosscheck-window", 2*time.Minute, "late-event window of the on-host cross-check: findings are final this long after their evidence")
	noXcheck := fs.Bool("no-crosscheck", false, "do not run the cross-check in the daemon (a collector runs it)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics on `HOST:PORT` at /metrics (default off; 127.0.0.1:9474 for this host only)")
	verbose := fs.Bool("v", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return fs.Exit(err)
	}
	if err := cli.ApplyConfig(fs.FlagSet, cli.WithKeys(map[string]string{"state_dir": "state-dir", "daemon_socket": "socket", "path_key": "path-key"})); err != nil {
		return cli.ConfigFail(err)
	}
	if *socket == hostconfig.Off {
		return cli.ConfigFail(errors.New("daemon_socket is \"off\": the daemon needs a socket path to serve"))
	}
	if fs.NArg() > 0 {
		return fs.UsageError("unexpected argument %q", fs.Arg(0))
	}
	if *metricsListen != "" {
		if err := metrics.CheckAddr(*metricsListen); err != nil {
			return fs.UsageError("%v", err)
		}
	}
	if os.Geteuid() != 0 {
		return cli.Fail(cli.ExitInternal, errors.New("daemon: must run as root (it loads eBPF programs and reads the audit netlink): run it with sudo or as a systemd service"))
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var err error
	if *stateDir == "" {
		if *stateDir, err = auditlog.DefaultStateDir(); err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
	}
	if err := daemon.PrepareStateDir(*stateDir); err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	pinDir, err := daemon.PinDir(*stateDir)
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	if *unload {
		n, err := probes.Unload(pinDir)
		if err != nil {
			return cli.Fail(cli.ExitInternal, fmt.Errorf("unload probes: %w", err))
		}
		fmt.Fprintf(os.Stderr, "mcpwarden daemon: detached %d pinned probe set(s)\n", n)
		return cli.ExitOK
	}
	gid, err := groupID(*socketGroup)
	if err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	if *pathKey == "" {
		*pathKey = filepath.Join(*stateDir, "path.key")
	}
	key, err := schema.LoadOrCreatePathKey(*pathKey)
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	hasher, err := schema.NewPathHasher(key)
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}

	origin := schema.LocalOrigin()
	if err := schema.CheckHost(origin.Host); err != nil {
		// Every event would be refused by the collectors; and a name with
		// '_' would share its subjects with another host's.
		return cli.Fail(cli.ExitUsage, fmt.Errorf("daemon: %w", err))
	}
	name := "daemon@" + origin.Host
	var natsOpts stream.ConnOptions
	var streamBytes int64
	if nf.URL == "" {
		if nf.Given() {
			return cli.Fail(cli.ExitUsage, errors.New("daemon: NATS credentials are for an external server (--nats URL); the embedded server uses the keys it generates in STATE_DIR/nats-auth"))
		}
		host, port, err := splitListen(*listen)
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		creds, err := natsserver.LoadOrCreateCredentials(stream.CredentialsDir(*stateDir))
		if err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		srv, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(*stateDir, "nats"), Host: host, Port: port, Auth: creds, EventHost: origin.Host, Logger: logger})
		if err != nil {
			return cli.Fail(cli.ExitInternal, fmt.Errorf("start embedded NATS: %w (is another NATS on %s? pass --nats-listen HOST:PORT, or --nats URL to use it)", err, *listen))
		}
		defer srv.Shutdown()
		natsOpts = srv.Client(stream.RoleDaemon, name)
		streamBytes = srv.StreamBytes()
	} else if natsOpts, err = natsconn.Options(nf, stream.RoleDaemon, origin.Host, name, *stateDir); err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	nc, err := stream.Connect(natsOpts)
	if err != nil {
		return cli.Fail(cli.ExitAuditSink, cli.AuthHint(err, nf))
	}
	defer nc.Close()
	pubCfg := publish.Config{Conn: nc, SpoolDir: filepath.Join(*stateDir, "spool", "daemon"), Logger: logger}
	if nf.URL == "" {
		pubCfg.EnsureStream = &stream.Config{MaxBytes: streamBytes}
	}
	pub, err := publish.New(ctx, pubCfg)
	if err != nil {
		return cli.Fail(cli.ExitAuditSink, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pub.Close(cctx)
	}()

	// The sink the daemon and its cross-check publish to; with metrics on,
	// it counts what goes through.
	var sink daemon.Sink = pub
	var counted *metrics.EventCounter
	if *metricsListen != "" {
		counted = metrics.CountEvents("daemon", pub)
		sink = counted
	}

	var xc *xcheck.Loop
	if !*noXcheck {
		js, err := jetstream.New(nc)
		if err != nil {
			return cli.Fail(cli.ExitAuditSink, fmt.Errorf("JetStream: %w", err))
		}
		every := min(time.Second, max(*xwindow/4, 100*time.Millisecond))
		xc, err = xcheck.New(xcheck.Config{JetStream: js, Host: origin.Host, Sink: sink, Check: crosscheck.Config{Window: *xwindow}, Every: every, Logger: logger})
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
	}
	probeCfg := probes.DefaultConfig()
	probeCfg.PinDir = pinDir
	d, err := daemon.New(daemon.Config{
		Socket:      *socket,
		SocketGroup: gid,
		StateDir:    *stateDir,
		Sink:        sink,
		Hasher:      hasher,
		Origin:      origin,
		EnableAudit: *enableAudit,
		AuditBacklogFloor: func() int {
			if *backlogFloor <= 0 {
				return -1 // leave the host's
			}
			return *backlogFloor
		}(),
		Probes:     probeCfg,
		Logger:     logger,
		CrossCheck: crossCheck(xc),

		HealthInterval: *healthEvery,
	})
	if err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	if *metricsListen != "" {
		reg := metrics.NewRegistry("daemon", cli.BuildVersion(version))
		reg.MustRegister(metrics.Daemon(d), metrics.Publisher("daemon", pub), counted)
		stop, err := serveMetrics(ctx, *metricsListen, reg, logger)
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		defer stop()
	}
	if err := d.Run(ctx); err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	return cli.ExitOK
}

// serveMetrics serves reg on addr until ctx ends or stop is called; a
// failure to listen is an error at start-up, a failure later is logged.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, logger *slog.Logger) (stop func(), err error) {
	srv, err := metrics.Listen(addr, reg, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx); err != nil {
			logger.Error("metrics server stopped", "error", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// crossCheck keeps a nil *xcheck.Loop from becoming a non-nil interface.
func crossCheck(l *xcheck.Loop) interface{ Run(context.Context) error } {
	if l == nil {
		return nil
	}
	return l
}

// splitListen parses --nats-listen HOST:PORT.
func splitListen(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("--nats-listen %q: want HOST:PORT such as 127.0.0.1:4222: %w", hp, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("--nats-listen %q: the port must be 1-65535", hp)
	}
	return host, port, nil
}

// groupID resolves --socket-group: a group name or a numeric gid.
func groupID(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if gid, err := strconv.Atoi(name); err == nil {
		if gid <= 0 {
			return 0, fmt.Errorf("--socket-group %q: give a group other than root's", name)
		}
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("--socket-group %q: %w (create it with 'groupadd %s')", name, err, name)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil || gid <= 0 {
		return 0, fmt.Errorf("--socket-group %q: gid %q", name, g.Gid)
	}
	return gid, nil
}
