package main

import (
	"context"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/runcmd"
	"github.com/mcpwarden/mcpwarden/launcher"
)

func cmdRun(ctx context.Context, args []string) int {
	// A run whose records go to NATS is mcpwarden-pipeline's, which links
	// the NATS client this program leaves out: nothing has started yet
	// (the configuration and the scope are read, the audit log is open,
	// close-on-exec), and that program runs the same command with the same
	// arguments and configuration.
	// The cgroup made ahead for this run goes first: the exec would leave it
	// behind.
	return runcmd.Run(ctx, args, func(_ context.Context, rc *runcmd.Context, _ *cli.NATSFlags, _ int64) (launcher.Sink, error) {
		if err := rc.Config.Life.Discard(); err != nil {
			return nil, err
		}
		return nil, cli.ReplaceWithPipeline("run", args)
	})
}
