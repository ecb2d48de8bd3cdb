package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// natsRunExtension adds --nats to `run`: launch and decision records also
// go to NATS JetStream through the publisher (spooling to
// STATE_DIR/spool/run-RUN_ID while NATS is away). A full spool makes the
// sink refuse records, which the launcher and proxy turn into refusing the
// run or denying calls (fail closed).
type natsRunExtension struct {
	nf       *cli.NATSFlags
	spoolMax int64
}

func init() { runExtensions = append(runExtensions, &natsRunExtension{}) }

func (e *natsRunExtension) Flags(fs *flag.FlagSet) {
	e.nf = cli.AddNATSFlags(fs, "", "also publish launch and decision records to NATS JetStream at `URL` (e.g. nats://127.0.0.1:4222; as the host's publisher: on the daemon's embedded server that needs root)")
	fs.Int64Var(&e.spoolMax, "spool-max-bytes", 64<<20, "bound of the on-disk spool used while NATS is unreachable; when full, new calls are denied")
}

func (e *natsRunExtension) Configure(ctx context.Context, rc *runContext) error {
	if e.nf.URL == "" {
		return nil
	}
	if rc.Config.Sink != nil {
		// The daemon publishes the run's records. A NATS server named by the
		// configuration is for the other commands (events, collect); one
		// named on the command line is a contradiction.
		if rc.Given["nats"] {
			return errors.New("--nats and --daemon-socket: with a daemon the run's records go through it, drop --nats")
		}
		return nil
	}
	opts, err := e.nf.Options(stream.RoleDaemon, schema.LocalOrigin().Host, "mcpwarden-run", rc.StateDir)
	if err != nil {
		return err
	}
	nc, err := stream.Connect(opts, nats.ReconnectBufSize(-1)) // never buffer in memory: spool on disk instead
	if err != nil {
		return cli.AuthHint(err, e.nf)
	}
	p, err := publish.New(ctx, publish.Config{
		Conn:          nc,
		SpoolDir:      filepath.Join(rc.StateDir, "spool", "run-"+rc.RunID),
		SpoolMaxBytes: e.spoolMax,
		// Spools of earlier runs that ended while NATS was away.
		Adopt:  filepath.Join(rc.StateDir, "spool", "run-*"),
		Logger: rc.Logger,
	})
	if err != nil {
		nc.Close()
		return fmt.Errorf("the run is refused because its records could not be published: %w", err)
	}
	rc.Config.Sink = &flushOnExit{p: p, nc: nc}
	return nil
}

// flushOnExit waits, after the run's exit record, until everything is
// acknowledged or safely spooled, so the process can end without losing
// records in flight.
type flushOnExit struct {
	p  *publish.Publisher
	nc *nats.Conn
}

func (f *flushOnExit) Publish(ctx context.Context, events []schema.Event) error {
	if err := f.p.Publish(ctx, events); err != nil {
		return err
	}
	for _, e := range events {
		if e.Launch != nil && e.Launch.Phase == "exit" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = f.p.Close(cctx) // what is not acknowledged stays in the spool
			f.nc.Close()
		}
	}
	return nil
}
