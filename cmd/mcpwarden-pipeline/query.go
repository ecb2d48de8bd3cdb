package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/query"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/cli"
)

func cmdQuery(ctx context.Context, args []string) int {
	var u strings.Builder
	u.WriteString("usage: mcpwarden query NAME [flags]\n\ncanned queries (SQL in schema/clickhouse/queries/NAME.sql; --sql prints it):\n")
	for _, c := range query.List {
		fmt.Fprintf(&u, "  %-10s %s\n", c.Name, c.Summary)
	}
	fs := cli.NewFlags("query", u.String())
	dsn := fs.String("clickhouse", store.DefaultDSN, "ClickHouse DSN, native protocol")
	since := fs.Duration("since", 24*time.Hour, "time range: this long before --to")
	fromS := fs.String("from", "", "time range start, RFC 3339 (overrides --since)")
	toS := fs.String("to", "", "time range end, RFC 3339 (default: now)")
	host := fs.String("host", "", "only this host")
	scope := fs.String("scope", "", "only this scope_id")
	severity := fs.String("severity", "", "only this severity (findings): low, medium, high, critical")
	tool := fs.String("tool", "", "only this tool (findings)")
	run := fs.String("run", "", "run `RUN_ID`: the run of the timeline; only this run's findings")
	limit := fs.Int("limit", 1000, "at most this many rows")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	showSQL := fs.Bool("sql", false, "print the query's SQL and exit")
	pos, _, err := cli.ParseInterspersed(fs.FlagSet, args)
	if err != nil {
		return fs.Exit(err)
	}
	if err := cli.ApplyConfig(fs.FlagSet, map[string]string{"clickhouse_dsn": "clickhouse"}); err != nil {
		return cli.ConfigFail(err)
	}
	if len(pos) != 1 {
		return fs.UsageError("give one query NAME")
	}
	name := pos[0]
	text, err := query.Text(name)
	if err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	if name == "timeline" && *run == "" {
		return cli.Fail(cli.ExitUsage, query.ErrTimelineNeedsRun)
	}
	if *showSQL {
		fmt.Print(text)
		return cli.ExitOK
	}
	to := time.Now()
	if *toS != "" {
		if to, err = time.Parse(time.RFC3339, *toS); err != nil {
			return cli.Fail(cli.ExitUsage, fmt.Errorf("--to: want RFC 3339 such as 2026-11-30T07:00:00Z: %w", err))
		}
	}
	from := to.Add(-*since)
	if *fromS != "" {
		if from, err = time.Parse(time.RFC3339, *fromS); err != nil {
			return cli.Fail(cli.ExitUsage, fmt.Errorf("--from: want RFC 3339 such as 2026-11-30T06:00:00Z: %w", err))
		}
	}
	if !from.Before(to) {
		return cli.Fail(cli.ExitUsage, errors.New("the time range is empty: --from must be before --to"))
	}
	if *severity != "" && !strings.Contains(" low medium high critical ", " "+*severity+" ") {
		return cli.Fail(cli.ExitUsage, fmt.Errorf("--severity %q: use low, medium, high or critical", *severity))
	}
	st, err := store.Open(ctx, *dsn, false, nil)
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	defer st.Close()
	if err := st.CheckSchema(ctx); err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	if err := st.CheckMigrated(ctx); err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	res, err := query.Run(ctx, st, name, query.Params{
		From: from, To: to, Host: *host, Scope: *scope, Severity: *severity, Tool: *tool, Run: *run, Limit: *limit,
	})
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	if *asJSON {
		err = res.WriteJSON(os.Stdout)
	} else {
		err = res.WriteTable(os.Stdout)
	}
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	return cli.ExitOK
}
