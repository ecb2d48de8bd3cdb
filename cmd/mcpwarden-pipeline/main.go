// Command mcpwarden-pipeline holds the audit pipeline's commands of
// mcpwarden: daemon, collect, query, events, why and profile, and run when
// its records go to NATS. People run them as
// `mcpwarden COMMAND`, which execs this program (found next to it); they
// link the NATS server, ClickHouse and eBPF code that `mcpwarden run`
// never needs, so that a launch does not pay for their start-up
// (internal/cli).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpwarden/mcpwarden/internal/cli"
)

// commands run a subcommand and return the process exit code; their
// summaries are cli.PipelineCommands.
var commands = map[string]func(ctx context.Context, args []string) int{
	"daemon":  cmdDaemon,
	"events":  cmdEvents,
	"collect": cmdCollect,
	"query":   cmdQuery,
	"why":     cmdWhy,
	"profile": cmdProfile,
	// Not listed: mcpwarden runs its own run, and execs this one for a run
	// whose records go to NATS.
	"run": cmdRun,
}

// version is set at build time with -ldflags "-X main.version=..." (make
// build stamps both programs alike); the metrics' build info reports it.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:]))
}

func dispatch(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return cli.ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(os.Stdout)
		return cli.ExitOK
	}
	run, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "mcpwarden: unknown command %q; run 'mcpwarden help' for the list\n", args[0])
		return cli.ExitUsage
	}
	return run(ctx, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: mcpwarden COMMAND [FLAGS] [ARGS] (this program, "+cli.PipelineName+", holds these commands of mcpwarden)\n\ncommands:")
	for _, c := range cli.PipelineCommands {
		fmt.Fprintf(w, "  %-8s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun 'mcpwarden COMMAND --help' for a command's flags; 'mcpwarden help' lists every command.")
}
