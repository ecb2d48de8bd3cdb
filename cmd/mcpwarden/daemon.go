package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/daemon/xcheck"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const daemonUsage = `usage: mcpwarden daemon [--socket PATH] [--nats URL] [--state-dir DIR] [--path-key FILE] [--enable-audit]

Loads the eBPF probes, serves the run registration socket (root only), and
sends sanitized file_op, landlock_denial, finding and health events to NATS
JetStream. Without --nats it runs an embedded NATS server with JetStream on
127.0.0.1:4222, storing under STATE_DIR/nats, so one host needs nothing else.
Must run as root.
`

func cmdDaemon(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, daemonUsage); fs.PrintDefaults() }
	socket := fs.String("socket", client.DefaultSocket, "registration socket `PATH` (created 0600 in a 0700 directory)")
	natsURL := fs.String("nats", "", "external NATS `URL` (default: run an embedded NATS server)")
	natsCreds := fs.String("nats-creds", "", "NATS credentials `FILE` for an external fleet cluster")
	stateDir := fs.String("state-dir", "", "state `DIR`: path hash key, spool, embedded NATS store (default /var/lib/mcpwarden)")
	pathKey := fs.String("path-key", "", "key `FILE` for path hashes (default STATE_DIR/path.key, created if missing; share it with 'run' so hashes match)")
	enableAudit := fs.Bool("enable-audit", false, "turn kernel auditing on so Landlock denial records arrive (like 'auditctl -e 1')")
	xwindow := fs.Duration("crosscheck-window", 2*time.Minute, "late-event window of the on-host cross-check: findings are final this long after their evidence")
	noXcheck := fs.Bool("no-crosscheck", false, "do not run the cross-check in the daemon (a collector runs it)")
	verbose := fs.Bool("v", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mcpwarden daemon: unexpected argument %q\n\n%s", fs.Arg(0), daemonUsage)
		return exitUsage
	}
	if os.Geteuid() != 0 {
		return fail(exitInternal, errors.New("daemon: must run as root (it loads eBPF programs and reads the audit netlink): run it with sudo or as a systemd service"))
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var err error
	if *stateDir == "" {
		if *stateDir, err = auditlog.DefaultStateDir(); err != nil {
			return fail(exitInternal, err)
		}
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		return fail(exitInternal, fmt.Errorf("create state dir: %w; pass --state-dir DIR somewhere writable", err))
	}
	if *pathKey == "" {
		*pathKey = filepath.Join(*stateDir, "path.key")
	}
	key, err := schema.LoadOrCreatePathKey(*pathKey)
	if err != nil {
		return fail(exitInternal, err)
	}
	hasher, err := schema.NewPathHasher(key)
	if err != nil {
		return fail(exitInternal, err)
	}

	url := *natsURL
	if url == "" {
		srv, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(*stateDir, "nats"), Logger: logger})
		if err != nil {
			return fail(exitInternal, fmt.Errorf("start embedded NATS: %w (is another NATS on 127.0.0.1:4222? pass --nats URL to use it)", err))
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
	}
	origin := schema.LocalOrigin()
	nc, err := stream.Connect(stream.ConnOptions{URL: url, CredsFile: *natsCreds, Name: "daemon@" + origin.Host})
	if err != nil {
		return fail(exitAuditSink, err)
	}
	defer nc.Close()
	pubCfg := publish.Config{Conn: nc, SpoolDir: filepath.Join(*stateDir, "spool", "daemon"), Logger: logger}
	if *natsURL == "" {
		pubCfg.EnsureStream = &stream.Config{}
	}
	pub, err := publish.New(ctx, pubCfg)
	if err != nil {
		return fail(exitAuditSink, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pub.Close(cctx)
	}()

	var xc *xcheck.Loop
	if !*noXcheck {
		js, err := jetstream.New(nc)
		if err != nil {
			return fail(exitAuditSink, fmt.Errorf("JetStream: %w", err))
		}
		every := min(5*time.Second, max(*xwindow/2, 500*time.Millisecond))
		xc, err = xcheck.New(xcheck.Config{JetStream: js, Host: origin.Host, Sink: pub, Check: crosscheck.Config{Window: *xwindow}, Every: every, Logger: logger})
		if err != nil {
			return fail(exitUsage, err)
		}
	}
	d, err := daemon.New(daemon.Config{
		Socket:      *socket,
		Sink:        pub,
		Hasher:      hasher,
		Origin:      origin,
		EnableAudit: *enableAudit,
		Probes:      probes.DefaultConfig(),
		Logger:      logger,
		CrossCheck:  crossCheck(xc),
	})
	if err != nil {
		return fail(exitUsage, err)
	}
	if err := d.Run(ctx); err != nil {
		return fail(exitInternal, err)
	}
	return exitOK
}

// crossCheck keeps a nil *xcheck.Loop from becoming a non-nil interface.
func crossCheck(l *xcheck.Loop) interface{ Run(context.Context) error } {
	if l == nil {
		return nil
	}
	return l
}
