package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/explain"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/cli/natsconn"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const whyUsage = `usage: mcpwarden why RUN_ID [--scope FILE [--base DIR]] [--path PATH]... [--candidates FILE]
                     [--clickhouse DSN | [--host HOST] [--since DURATION] [NATS flags]]
                     [--state-dir DIR] [--path-key FILE] [--json] [-- SERVER...]

For the operator on the host, who holds the path key: reads the run's events
(from this host's stream, or from ClickHouse with --clickhouse), turns the
hashed paths of its denials and findings back into paths where it can, by
hashing candidates (the scope's trees, the runtime profile of the server's
command, common system paths, the run's /proc entries, and --path or
--candidates), and says which scope field or flag would grant each. The
records stay hashed; the paths appear only here. Run it as root: the key
(STATE_DIR/path.key) and the embedded NATS credentials are root-only.
`

func cmdWhy(ctx context.Context, args []string) int {
	fs := cli.NewFlags("why", whyUsage)
	scopeFile := fs.String("scope", "", "the run's scope `FILE` (checked against its scope_hash): its trees become candidates, and the report says what the scope grants")
	base := fs.String("base", ".", "the approved base `DIR` the run used with --scope")
	var paths cli.StringList
	fs.Var(&paths, "path", "a candidate `PATH` to test (repeatable)")
	candFile := fs.String("candidates", "", "`FILE` of candidate paths, one per line")
	dsn := fs.String("clickhouse", "", "read the run from ClickHouse at `DSN` instead of this host's stream (a run older than the stream's 7 days)")
	host := fs.String("host", "", "the host whose stream subjects hold the run (default this host); with --clickhouse, the run's host (default: looked up; a run id of several hosts is refused)")
	since := fs.Duration("since", 7*24*time.Hour, "how far back to read the stream")
	nf := cli.AddNATSFlags(fs.FlagSet, cli.DefaultNATS, "NATS `URL` (default the daemon's embedded server on this host)")
	stateDir := fs.String("state-dir", cli.DaemonStateDir, "the daemon's state `DIR`: the path key and the embedded NATS credentials")
	pathKey := fs.String("path-key", "", "the path hash key `FILE` (default STATE_DIR/path.key)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "debug logging")
	pos, command, err := cli.ParseInterspersed(fs.FlagSet, args)
	if err != nil {
		return fs.Exit(err)
	}
	if len(pos) != 1 {
		return fs.UsageError("one RUN_ID is needed")
	}
	// The host's configuration names the daemon's state dir, path key and
	// NATS; not the ClickHouse DSN: the stream stays the default source.
	if err := cli.ApplyConfig(fs.FlagSet, cli.WithKeys(cli.DaemonStateKeys(map[string]string{"path_key": "path-key"}))); err != nil {
		return cli.ConfigFail(err)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg := explain.Config{RunID: pos[0], Paths: paths, Command: command, Base: *base, Logger: logger}
	if *pathKey == "" {
		*pathKey = filepath.Join(*stateDir, "path.key")
	}
	key, err := os.ReadFile(*pathKey)
	if err != nil {
		return cli.Fail(cli.ExitUsage, fmt.Errorf("why: the path key: %w (it is root-only: run as root, or pass --path-key FILE)", err))
	}
	if len(key) != schema.PathKeySize {
		return cli.Fail(cli.ExitUsage, fmt.Errorf("why: %s is %d bytes, not a path key (%d)", *pathKey, len(key), schema.PathKeySize))
	}
	if cfg.Hasher, err = schema.NewPathHasher(key); err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	if *candFile != "" {
		more, err := readLines(*candFile)
		if err != nil {
			return cli.Fail(cli.ExitUsage, fmt.Errorf("--candidates: %w", err))
		}
		cfg.Paths = append(cfg.Paths, more...)
	}
	if *scopeFile != "" {
		if cfg.ScopeRecord, err = schema.ReadScopeFile(*scopeFile); err != nil {
			return cli.Fail(cli.ExitBadScope, err)
		}
	}
	if *dsn != "" {
		st, err := store.Open(ctx, *dsn, false, nil)
		if err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		defer st.Close()
		if err := st.CheckSchema(ctx); err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		cfg.Source = &explain.StoreSource{Store: st, Host: *host}
	} else {
		h := *host
		if h == "" {
			h = schema.LocalOrigin().Host
		}
		opts, err := natsconn.Options(nf, stream.RoleReader, h, "mcpwarden-why", *stateDir)
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		nc, err := stream.Connect(opts, nats.RetryOnFailedConnect(false))
		if err != nil {
			return cli.Fail(cli.ExitInternal, cli.AuthHint(err, nf))
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		cfg.Source = &explain.StreamSource{JS: js, Host: h, Since: *since}
	}
	rep, err := explain.Run(ctx, cfg)
	if err != nil {
		code := cli.ExitInternal
		if errors.Is(err, explain.ErrNoSuchRun) {
			code = cli.ExitUsage
		}
		return cli.Fail(code, err)
	}
	if *asJSON {
		err = rep.WriteJSON(os.Stdout)
	} else {
		err = rep.WriteText(os.Stdout)
	}
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	return cli.ExitOK
}

// readLines reads a list of paths, one per line ('#' starts a comment).
func readLines(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(f, 64<<20))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}
