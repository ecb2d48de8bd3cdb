// Command mcpwarden enforces a per-run scope record on MCP servers: it runs
// them under Landlock behind a protocol-aware proxy, watches them from the
// kernel, and ships sanitized evidence to a fleet store.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

var commands = map[string]command{
	"run":     {"run an MCP server inside the scope's fence, behind the proxy", cmdRun},
	"scope":   {"check a scope record and show the ruleset it yields (scope check FILE)", cmdScope},
	"daemon":  {"load the kernel probes and watch launched runs", cmdDaemon},
	"events":  {"print events live for a person", cmdEvents},
	"approve": {"approve a pending call of a run (approve RUN_ID OP_ID)", cmdApprove},
	"collect": {"move events from NATS JetStream into ClickHouse", cmdCollect},
	"query":   {"run a canned fleet query against ClickHouse", cmdQuery},
	"version": {"print the version", cmdVersion},
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:]))
}

func dispatch(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, []string{"--help"})
			}
		}
		usage()
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "mcpwarden: unknown command %q; run 'mcpwarden help' for the list\n", args[0])
		return exitUsage
	}
	return c.run(ctx, args[1:])
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mcpwarden COMMAND [FLAGS] [ARGS]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'mcpwarden COMMAND --help' for a command's flags.")
}

func cmdVersion(context.Context, []string) int {
	fmt.Println("mcpwarden", version)
	return 0
}

// fail prints err for a person and returns code.
func fail(code int, err error) int {
	fmt.Fprintln(os.Stderr, "mcpwarden:", err)
	return code
}
