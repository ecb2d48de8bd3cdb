// Command mcpwarden enforces a per-run scope record on MCP servers: it runs
// them under Landlock behind a protocol-aware proxy, watches them from the
// kernel, and ships sanitized evidence to a fleet store.
//
// This program holds what an agent host runs for every server start (run,
// scope, approve, wrap, config); it links no NATS (server or client),
// ClickHouse or eBPF code, whose start-up every launch would pay. The
// audit pipeline's commands (daemon, collect, query, events, why), profile
// (which reads the daemon's events from NATS) and a run whose records go
// to NATS (--nats, nats.url) are mcpwarden-pipeline's, which this program
// execs for them (internal/cli, internal/runcmd).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/mcpwarden/mcpwarden/internal/cli"
)

// command is one subcommand. run returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

var commands = map[string]command{
	"run":     {"run an MCP server inside the scope's fence, behind the proxy", cmdRun},
	"scope":   {"check a scope record and show the ruleset it yields (scope check FILE)", cmdScope},
	"approve": {"approve a pending call of a run (approve RUN_ID OP_ID)", cmdApprove},
	"version": {"print the version", cmdVersion},
	"config":  {"print the effective host configuration (config show)", cmdConfig},
	"wrap":    {"put every stdio server of an MCP client's configuration under mcpwarden run", cmdWrap},
	"unwrap":  {"restore a configuration mcpwarden wrap rewrote", cmdUnwrap},
}

// pipelineCommand is a command of mcpwarden-pipeline: run by exec'ing it.
func pipelineCommand(name string) command {
	return command{run: func(_ context.Context, args []string) int { return cli.ExecPipeline(name, args) }}
}

// lookup finds a command of this program or of mcpwarden-pipeline.
func lookup(name string) (command, bool) {
	if c, ok := commands[name]; ok {
		return c, true
	}
	for _, p := range cli.PipelineCommands {
		if p.Name == name {
			c := pipelineCommand(name)
			c.summary = p.Summary
			return c, true
		}
	}
	return command{}, false
}

// version is set at build time with -ldflags "-X main.version=..." (make
// build uses git describe); otherwise it comes from the build's own record.
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
		if len(args) > 1 {
			c, ok := lookup(args[1])
			if !ok {
				fmt.Fprintf(os.Stderr, "mcpwarden help: unknown command %q; run 'mcpwarden help' for the list\n", args[1])
				return cli.ExitUsage
			}
			return c.run(ctx, append([]string{"--help"}, args[2:]...))
		}
		usage(os.Stdout)
		return cli.ExitOK
	case "--version", "-version":
		return cmdVersion(ctx, args[1:])
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(os.Stderr, "mcpwarden: unknown command %q; run 'mcpwarden help' for the list\n", args[0])
		return cli.ExitUsage
	}
	return c.run(ctx, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: mcpwarden COMMAND [FLAGS] [ARGS]\n\ncommands:")
	summaries := map[string]string{}
	for n, c := range commands {
		summaries[n] = c.summary
	}
	for _, p := range cli.PipelineCommands {
		summaries[p.Name] = p.Summary
	}
	names := make([]string, 0, len(summaries))
	for n := range summaries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, summaries[n])
	}
	fmt.Fprintln(w, "\nRun 'mcpwarden COMMAND --help' (or 'mcpwarden help COMMAND') for a command's flags;")
	fmt.Fprintln(w, "'mcpwarden --version' prints the version.")
}

const versionUsage = `usage: mcpwarden version (or mcpwarden --version)

Prints the version of this build: the one make build stamps (git describe),
else the module version or VCS revision Go recorded in the binary.
`

func cmdVersion(_ context.Context, args []string) int {
	fs := cli.NewFlags("version", versionUsage)
	if err := fs.Parse(args); err != nil {
		return fs.Exit(err)
	}
	if fs.NArg() > 0 {
		return fs.UsageError("takes no arguments")
	}
	fmt.Println("mcpwarden", buildVersion())
	return cli.ExitOK
}

// buildVersion is the stamped version, else what the Go toolchain recorded
// (cli.BuildVersion).
func buildVersion() string { return cli.BuildVersion(version) }
