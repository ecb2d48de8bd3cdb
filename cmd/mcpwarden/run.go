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
	return runcmd.Run(ctx, args, func(context.Context, *runcmd.Context, *cli.NATSFlags, int64) (launcher.Sink, error) {
		return nil, cli.ReplaceWithPipeline("run", args)
	})
}
