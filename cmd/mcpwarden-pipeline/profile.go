package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/adopt/learn"
	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/adopt/scopegen"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/cli/natsconn"
	"github.com/mcpwarden/mcpwarden/internal/runcmd"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const profileUsage = `usage: mcpwarden profile learn [--base DIR] [--path DIR]... [--script FILE] [--out FILE] [flags] -- CMD [ARGS...]

Runs the MCP server CMD to find out what a scope for it needs, and writes
a proposal for review; it changes no scope and no configuration.

First under the fence (enforce), again after each start-up the fence
refused, adding the grant the launcher names (--allow-runtime PATH,
--allow-exec PROGRAM), up to 8 times; then the whole session in audit mode
(no fence) under the daemon's kernel view, when a daemon runs: every file
the server opened outside the scope and its runtime profile is a grant the
scope or the run would need. Each run drives initialize, tools/list and
the scripted session (--script: one JSON-RPC request per line, e.g.
{"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/srv/ws/a.txt"}}}).

Without a daemon, only what the fence denies at start-up is learned (the
summary says so); run 'mcpwarden daemon' as root for the kernel view.

Writes FILE (default mcpwarden-learn-NAME.json: the proposal, with a
starting scope) and FILE.txt (the summary, also printed).

Exit status: 0 the proposal was written; 70 the server answered neither
under the fence nor without it; 64 usage; 71 internal error; 78 the host
configuration cannot be used.
`

func cmdProfile(ctx context.Context, args []string) int {
	if code, ok := cli.Subcommand("profile", "learn", profileUsage, args); !ok {
		return code
	}
	fs := cli.NewFlags("profile learn", profileUsage)
	base := fs.String("base", ".", "approved base `DIR` the allowed paths lie in")
	var paths, allowRuntime, allowExec cli.StringList
	fs.Var(&paths, "path", "a `DIR` (or file) inside the base the server works on (repeatable; default: its directory arguments, else an empty directory)")
	fs.Var(&allowRuntime, "allow-runtime", "a runtime `PATH` already granted, as for run (repeatable)")
	fs.Var(&allowExec, "allow-exec", "a helper `PROGRAM` already granted, as for run (repeatable)")
	script := fs.String("script", "", "`FILE` of JSON-RPC requests (one per line) to send after tools/list")
	outFile := fs.String("out", "", "proposal `FILE` (default mcpwarden-learn-NAME.json in the current directory)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long each request may wait for the server's answer")
	stateDir := fs.String("state-dir", "", "state `DIR` for the learning runs (default as for run)")
	pathKey := fs.String("path-key", "", "the path-hash key `FILE` the daemon uses (default as for run)")
	socket := fs.String("daemon-socket", "", "the daemon for the kernel view (default as for run: the configuration, else "+client.DefaultSocket+" when there; 'off': none)")
	nf := cli.AddNATSFlags(fs.FlagSet, cli.DefaultNATS, "NATS `URL` the daemon publishes to, read for the run's events (default the daemon's embedded server on this host)")
	daemonState := fs.String("daemon-state-dir", cli.DaemonStateDir, "the daemon's state `DIR`, where the embedded NATS server's reader key is")
	pos, command, err := cli.ParseInterspersed(fs.FlagSet, args[1:])
	if err != nil {
		return fs.Exit(err)
	}
	if len(pos) > 0 || len(command) == 0 {
		return fs.UsageError("give the server's command after '--'")
	}
	if err := cli.ApplyConfig(fs.FlagSet, cli.WithKeys(map[string]string{"state_dir": "state-dir", "daemon_socket": "daemon-socket", "path_key": "path-key"})); err != nil {
		return cli.ConfigFail(err)
	}
	home, _ := os.UserHomeDir()
	cwd, _ := os.Getwd()
	realBase, err := filepath.EvalSymlinks(*base)
	if err == nil {
		realBase, err = filepath.Abs(realBase)
	}
	if err != nil {
		return cli.Fail(cli.ExitUsage, fmt.Errorf("--base: %w", err))
	}
	var dirs []string
	for _, p := range paths {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			r, err = filepath.Abs(r)
		}
		if err != nil || !schema.IsWithin(realBase, r) {
			return cli.Fail(cli.ExitUsage, fmt.Errorf("--path %s: must exist inside the base %s", p, realBase))
		}
		dirs = append(dirs, r)
	}
	if len(dirs) == 0 {
		found, _, _ := scopegen.DirectoryArgs(command[1:], home, cwd)
		for _, d := range found {
			if schema.IsWithin(realBase, d) {
				dirs = append(dirs, d)
			}
		}
	}
	if len(dirs) == 0 {
		empty, err := os.MkdirTemp("", "mcpwarden-learn-ws-")
		if err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		defer os.RemoveAll(empty)
		realBase, dirs = empty, []string{empty}
	}
	var reqs []probe.Request
	if *script != "" {
		b, err := os.ReadFile(*script)
		if err != nil {
			return cli.Fail(cli.ExitUsage, fmt.Errorf("--script: %w", err))
		}
		if reqs, err = probe.ParseScript(b); err != nil {
			return cli.Fail(cli.ExitUsage, fmt.Errorf("--script %s: %w", *script, err))
		}
	}
	if *stateDir == "" {
		if *stateDir, err = auditlog.DefaultStateDir(); err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
	}
	if *pathKey == "" {
		*pathKey = filepath.Join(*stateDir, "path.key")
	}
	self, err := mcpwardenPath()
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	cfg := learn.Config{Mcpwarden: self, Command: command, Dir: cwd, Environ: os.Environ(), Base: realBase, Paths: dirs,
		AllowRuntime: allowRuntime, AllowExec: allowExec, Script: reqs, StateDir: *stateDir, Timeout: *timeout, Home: home, Stderr: os.Stderr}

	// The kernel view: the daemon the runs would use, if one answers.
	daemonSock := *socket
	if daemonSock == "" {
		if found, _ := runcmd.DiscoverDaemon(client.DefaultSocket); found {
			daemonSock = client.DefaultSocket
		}
	}
	if daemonSock != "" && daemonSock != hostconfig.Off {
		if _, err := client.New(daemonSock).Info(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "mcpwarden profile learn: the daemon at %s does not answer (%v): learning without the kernel view\n", daemonSock, err)
		} else if key, err := schema.LoadOrCreatePathKey(*pathKey); err != nil {
			return cli.ConfigFail(err)
		} else if h, err := schema.NewPathHasher(key); err != nil {
			return cli.ConfigFail(err)
		} else {
			cfg.DaemonSocket, cfg.Hasher, cfg.PathKey = daemonSock, h, *pathKey
			cfg.Events = func(ctx context.Context, runID string, since time.Time) ([]schema.Event, error) {
				return readRunEvents(ctx, nf, *daemonState, runID, since)
			}
		}
	}
	if *outFile == "" {
		*outFile = "mcpwarden-learn-" + scopegen.Slug(filepath.Base(command[0])) + ".json"
	}
	p, err := learn.Learn(ctx, cfg)
	if err != nil {
		if p == nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		fmt.Fprintln(os.Stderr, "mcpwarden:", err)
	}
	b, _ := json.MarshalIndent(p, "", "  ")
	if werr := os.WriteFile(*outFile, append(b, '\n'), 0o600); werr != nil {
		return cli.Fail(cli.ExitInternal, werr)
	}
	summary := learn.Summary(p, *outFile)
	if werr := os.WriteFile(*outFile+".txt", []byte(summary), 0o600); werr != nil {
		return cli.Fail(cli.ExitInternal, werr)
	}
	fmt.Print(summary)
	if err != nil {
		return cli.ExitServerStart
	}
	return cli.ExitOK
}

// readRunEvents reads the file operations the daemon published for a run
// since a time, to the stream's end (stream.ReadToEnd: a stall is waited
// out or named, never taken for the end).
func readRunEvents(ctx context.Context, nf *cli.NATSFlags, stateDir, runID string, since time.Time) ([]schema.Event, error) {
	opts, err := natsconn.Options(nf, stream.RoleReader, schema.LocalOrigin().Host, "mcpwarden-learn", stateDir)
	if err != nil {
		return nil, err
	}
	nc, err := stream.Connect(opts, nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, cli.AuthHint(err, nf)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.SubjectPrefix + ".*." + string(schema.KindFileOp)},
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}
	var out []schema.Event
	err = stream.ReadToEnd(ctx, js, cc, func(msg jetstream.Msg) error {
		evs, _, err := stream.DecodeBatch(msg.Subject(), msg.Data())
		if err != nil {
			return nil
		}
		for _, e := range evs {
			if e.RunID == runID {
				out = append(out, e)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// mcpwardenPath is the mcpwarden next to this program (which found this
// program next to itself), symlinks resolved: what learning runs start.
func mcpwardenPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(p), "mcpwarden"), nil
}
