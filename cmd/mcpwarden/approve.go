package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
)

const approveUsage = `usage: mcpwarden approve [--state-dir DIR] [--deny] RUN_ID OP_ID
       mcpwarden approve [--state-dir DIR] --list [RUN_ID]
       mcpwarden approve [--state-dir DIR] --revoke RUN_ID

Approves (or with --deny refuses) one pending call of a running
'mcpwarden run', over the run's local socket in the state directory. The
run's stderr names each call that waits ("call waiting for approval",
op_id=...). --list shows the pending calls of one run, or without RUN_ID of
every run on the host: run and op ids, action class, tool, and the paths the
call would touch (resolved, in clear: only this socket shows them; records
keep keyed hashes). --revoke revokes the run's whole scope: every later call
is denied and the server is stopped. Only root and the user running the
launcher can reach the socket.
`

func cmdApprove(ctx context.Context, args []string) int {
	fs := cli.NewFlags("approve", approveUsage)
	stateDir := fs.String("state-dir", "", "the run's state directory (default as for 'mcpwarden run')")
	deny := fs.Bool("deny", false, "refuse the call instead of approving it")
	list := fs.Bool("list", false, "list the run's pending calls")
	revoke := fs.Bool("revoke", false, "revoke the run's scope and stop its server")
	// Flags may come after the ids: parse flags and positionals in any order.
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return fs.Exit(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if err := cli.ApplyConfig(fs.FlagSet, map[string]string{"state_dir": "state-dir"}); err != nil {
		return cli.ConfigFail(err)
	}
	modes := 0
	for _, b := range []bool{*deny, *list, *revoke} {
		if b {
			modes++
		}
	}
	var req approval.Request
	switch {
	case modes > 1:
		return cli.Fail(cli.ExitUsage, errors.New("approve: use only one of --deny, --list, --revoke"))
	case *list && len(pos) == 0:
		return listAll(ctx, *stateDir)
	case *list || *revoke:
		if len(pos) != 1 {
			return fs.UsageError("--list takes at most one RUN_ID, --revoke one")
		}
		req.Action = approval.ActionList
		if *revoke {
			req.Action = approval.ActionRevoke
		}
	default:
		if len(pos) != 2 {
			return fs.UsageError("give RUN_ID and OP_ID")
		}
		req.Action, req.OpID = approval.ActionApprove, pos[1]
		if *deny {
			req.Action = approval.ActionDeny
		}
	}
	if *stateDir == "" {
		d, err := auditlog.DefaultStateDir()
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		*stateDir = d
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := approval.Send(ctx, *stateDir, pos[0], req)
	if err != nil {
		return cli.Fail(cli.ExitInternal, err)
	}
	switch req.Action {
	case approval.ActionList:
		if len(resp.Pending) == 0 {
			fmt.Println("no pending calls")
		}
		for _, p := range resp.Pending {
			printPending(p, false)
		}
	case approval.ActionRevoke:
		fmt.Println("scope revoked; the run denies every call and stops its server")
	default:
		verb := map[string]string{approval.ActionApprove: "approved", approval.ActionDeny: "denied"}[req.Action]
		fmt.Printf("%s %s\n", verb, req.OpID)
	}
	return cli.ExitOK
}

// listAll lists the pending calls of every run on the host.
func listAll(ctx context.Context, stateDir string) int {
	if stateDir == "" {
		d, err := auditlog.DefaultStateDir()
		if err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		stateDir = d
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pending, errs := approval.ListAll(ctx, stateDir)
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, "mcpwarden:", err)
	}
	if len(pending) == 0 {
		fmt.Println("no pending calls")
	}
	for _, p := range pending {
		printPending(p, true)
	}
	if len(errs) > 0 {
		return cli.ExitInternal
	}
	return cli.ExitOK
}

// printPending prints one pending call: its ids, class and tool on one
// line, then each path it would touch.
func printPending(p approval.Pending, withRun bool) {
	if withRun {
		fmt.Printf("%s  ", p.RunID)
	}
	fmt.Printf("%s  %-12s %s  since %s\n", p.OpID, p.Class, p.Tool, p.Since)
	for _, path := range p.Paths {
		fmt.Printf("    path %q\n", path)
	}
}
