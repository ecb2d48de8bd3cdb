// Command mcpwarden-loadgen simulates a fleet of hosts for the audit
// pipeline: each host publishes a realistic mix of runs with its own NATS
// credentials through the real publisher, and, given a ClickHouse DSN, the
// command checks run by run that everything produced is stored once and
// measures the lag from publish to stored (collector/loadgen,
// docs/fleet.md). Exit status: 0 when stored exactly (or not checked), 1
// when not, 2 for bad flags, 3 for any other failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/loadgen"
)

const usage = `usage: mcpwarden-loadgen --nats URL --seeds DIR [--create-seeds] [--hosts N] [--duration D | --runs N] [--rate EVENTS/S] [--clickhouse DSN]

Simulates N hosts named PREFIX-0001... Each connects to NATS with its own
nkey seed (DIR/<host>.nk; --create-seeds makes the missing ones and
--users-conf FILE writes the nats-server users they need) and publishes runs
of the mix below. With --clickhouse it waits for the collectors to store
everything, compares run by run, and reports the lag publish -> stored.

flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcpwarden-loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var o loadgen.Options
	o.Mix = loadgen.DefaultMix
	fs.StringVar(&o.NATSURL, "nats", "", "NATS `URL` (comma-separated for a cluster)")
	fs.StringVar(&o.SeedDir, "seeds", "", "`DIR` of the hosts' nkey seeds, one HOST.nk each")
	fs.BoolVar(&o.CreateSeeds, "create-seeds", false, "create the seeds that are missing")
	usersConf := fs.String("users-conf", "", "write the hosts' nats-server users (nkeys with their own subjects only) to `FILE` and exit")
	fs.IntVar(&o.Hosts, "hosts", 10, "simulated hosts")
	fs.StringVar(&o.HostPrefix, "host-prefix", "loadgen", "host name `PREFIX`")
	fs.DurationVar(&o.Duration, "duration", time.Minute, "how long the hosts run (0: until --runs)")
	fs.IntVar(&o.Runs, "runs", 0, "runs per host (0: until --duration)")
	fs.Float64Var(&o.Rate, "rate", 0, "events per second for the whole fleet (0: as fast as NATS acknowledges)")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", 16, "unacknowledged messages per host (the daemon's default is 256; hosts x this many messages may be held in memory)")
	fs.IntVar(&o.Mix.RuntimeOps, "runtime-ops", o.Mix.RuntimeOps, "file operations of a server's start-up, per run")
	fs.IntVar(&o.Mix.Calls, "calls", o.Mix.Calls, "tools/call decisions per run")
	fs.IntVar(&o.Mix.OpsPerCall, "ops-per-call", o.Mix.OpsPerCall, "file operations per call")
	fs.IntVar(&o.Mix.DenyEvery, "deny-every", o.Mix.DenyEvery, "one run in `N` has a denied call, a Landlock denial and a finding (0: none)")
	fs.DurationVar(&o.Mix.HealthEvery, "health-every", o.Mix.HealthEvery, "health event interval per host (0: none)")
	fs.StringVar(&o.SpoolDir, "spool-dir", "", "`DIR` for the hosts' spools (default a temporary directory)")
	fs.StringVar(&o.ClickHouseDSN, "clickhouse", "", "ClickHouse `DSN` to check what was stored (default: no check)")
	fs.DurationVar(&o.Wait, "wait", 10*time.Minute, "longest wait for the collectors to store everything")
	fs.BoolVar(&o.JSON, "json", false, "print the summary as JSON")
	verbose := fs.Bool("v", false, "log the publishers' warnings")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpwarden-loadgen: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	level := slog.LevelError
	if *verbose {
		level = slog.LevelWarn
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *usersConf != "" {
		if err := loadgen.WriteUsersConf(*usersConf, o); err != nil {
			fmt.Fprintln(stderr, "mcpwarden-loadgen:", err)
			return 3
		}
		return 0
	}
	if _, err := loadgen.Simulate(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "mcpwarden-loadgen:", err)
		if errors.Is(err, loadgen.ErrNotStored) {
			return 1
		}
		return 3
	}
	return 0
}
