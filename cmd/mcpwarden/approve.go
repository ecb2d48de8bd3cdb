package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
)

const approveUsage = `usage: mcpwarden approve [--state-dir DIR] [--deny] RUN_ID OP_ID
       mcpwarden approve [--state-dir DIR] --list RUN_ID
       mcpwarden approve [--state-dir DIR] --revoke RUN_ID

Approves (or with --deny refuses) one pending call of a running
'mcpwarden run', over the run's local socket in the state directory. The
run's stderr names each call that waits ("call waiting for approval",
op_id=...); --list shows them. --revoke revokes the run's whole scope: every
later call is denied and the server is stopped. Only root and the user
running the launcher can reach the socket.
`

func cmdApprove(ctx context.Context, args []string) int {
	fs := newFlags("approve", approveUsage)
	stateDir := fs.String("state-dir", "", "the run's state directory (default as for 'mcpwarden run')")
	deny := fs.Bool("deny", false, "refuse the call instead of approving it")
	list := fs.Bool("list", false, "list the run's pending calls")
	revoke := fs.Bool("revoke", false, "revoke the run's scope and stop its server")
	// Flags may come after the ids: parse flags and positionals in any order.
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return fs.exit(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
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
		return fail(exitUsage, errors.New("approve: use only one of --deny, --list, --revoke"))
	case *list || *revoke:
		if len(pos) != 1 {
			return fs.usageError("--list and --revoke take one RUN_ID")
		}
		req.Action = approval.ActionList
		if *revoke {
			req.Action = approval.ActionRevoke
		}
	default:
		if len(pos) != 2 {
			return fs.usageError("give RUN_ID and OP_ID")
		}
		req.Action, req.OpID = approval.ActionApprove, pos[1]
		if *deny {
			req.Action = approval.ActionDeny
		}
	}
	if *stateDir == "" {
		d, err := auditlog.DefaultStateDir()
		if err != nil {
			return fail(exitUsage, err)
		}
		*stateDir = d
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := approval.Send(ctx, *stateDir, pos[0], req)
	if err != nil {
		return fail(exitInternal, err)
	}
	switch req.Action {
	case approval.ActionList:
		if len(resp.Pending) == 0 {
			fmt.Println("no pending calls")
		}
		for _, p := range resp.Pending {
			fmt.Printf("%s  %-12s %s  since %s\n", p.OpID, p.Class, p.Tool, p.Since)
		}
	case approval.ActionRevoke:
		fmt.Println("scope revoked; the run denies every call and stops its server")
	default:
		verb := map[string]string{approval.ActionApprove: "approved", approval.ActionDeny: "denied"}[req.Action]
		fmt.Printf("%s %s\n", verb, req.OpID)
	}
	return exitOK
}
