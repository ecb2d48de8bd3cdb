package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/cli/natsconn"
	"github.com/mcpwarden/mcpwarden/internal/runcmd"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// cmdRun is `mcpwarden run` for a run whose records go to NATS: mcpwarden,
// which does not link the NATS client, execs this program with its
// arguments for it (internal/runcmd).
func cmdRun(ctx context.Context, args []string) int {
	return runcmd.Run(ctx, args, publishToNATS)
}

// publishToNATS connects to NATS and returns the publisher as the run's
// sink (runcmd.Publish).
func publishToNATS(ctx context.Context, rc *runcmd.Context, nf *cli.NATSFlags, spoolMax int64) (launcher.Sink, error) {
	host := schema.LocalOrigin().Host
	if err := schema.CheckHost(host); err != nil {
		return nil, err
	}
	opts, err := natsconn.Options(nf, stream.RoleDaemon, host, "mcpwarden-run", rc.StateDir)
	if err != nil {
		return nil, err
	}
	nc, err := stream.Connect(opts, nats.ReconnectBufSize(-1)) // never buffer in memory: spool on disk instead
	if err != nil {
		return nil, cli.AuthHint(err, nf)
	}
	p, err := publish.New(ctx, publish.Config{
		Conn:          nc,
		SpoolDir:      filepath.Join(rc.StateDir, "spool", "run-"+rc.RunID),
		SpoolMaxBytes: spoolMax,
		// Spools of earlier runs that ended while NATS was away.
		Adopt:  filepath.Join(rc.StateDir, "spool", "run-*"),
		Logger: rc.Logger,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("the run is refused because its records could not be published: %w", err)
	}
	return &flushOnExit{p: p, nc: nc, uid: os.Getuid()}, nil
}

// flushOnExit waits, after the run's exit record, until everything is
// acknowledged or safely spooled, so the process can end without losing
// records in flight.
type flushOnExit struct {
	p   *publish.Publisher
	nc  *nats.Conn
	uid int // the launcher's real uid
}

// Publish publishes events, its launch records stamped with who launched
// the run: this process's real uid, as the launcher's own word
// (launcher_uid_by "launcher"): no daemon stands between it and NATS to
// read its peer credentials. What it is worth: publishing at all took the
// host's publisher credentials (root-only on a single host), whose holder
// could write anything; docs/events.md, "Who asserts each field".
func (f *flushOnExit) Publish(ctx context.Context, events []schema.Event) error {
	events = stampLauncher(events, f.uid)
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

// stampLauncher returns events with every launch record saying uid
// launched the run, in the launcher's own word; the caller's slice is left
// as it was.
func stampLauncher(events []schema.Event, uid int) []schema.Event {
	if !slices.ContainsFunc(events, func(e schema.Event) bool { return e.Launch != nil }) {
		return events
	}
	out := slices.Clone(events)
	for i := range out {
		if out[i].Launch == nil {
			continue
		}
		c := *out[i].Launch
		c.LauncherUID, c.LauncherUIDBy = &uid, schema.LauncherUIDByLauncher
		out[i].Launch = &c
		out[i].SchemaVersion = max(out[i].SchemaVersion, 3)
	}
	return out
}
