package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
)

// daemonExtension adds --daemon-socket to `run`: the run is registered with
// the daemon before the server is exec'd, and refuses to start when it
// cannot be.
type daemonExtension struct{ socket string }

func init() { runExtensions = append(runExtensions, &daemonExtension{}) }

func (e *daemonExtension) Flags(fs *flag.FlagSet) {
	fs.StringVar(&e.socket, "daemon-socket", "", "register the run with 'mcpwarden daemon' at `PATH` (e.g. "+client.DefaultSocket+") before the server starts; the run refuses to start if that fails")
}

func (e *daemonExtension) Configure(ctx context.Context, rc *runContext) error {
	if e.socket == "" {
		return nil
	}
	c := client.New(e.socket)
	// Fail before anything starts when the daemon is not there.
	if _, err := c.Status(ctx); err != nil {
		return fmt.Errorf("the run is refused because the daemon cannot watch it: %w", err)
	}
	abi, _ := ll.LandlockGetABIVersion()
	prev := rc.Config.BeforeExec
	rc.Config.BeforeExec = func(ctx context.Context, rootPID int) error {
		if prev != nil {
			if err := prev(ctx, rootPID); err != nil {
				return err
			}
		}
		_, err := c.Register(ctx, api.Registration{
			RunID:       rc.RunID,
			RootPID:     rootPID,
			Mode:        rc.Config.Mode,
			Scope:       rc.Scope,
			ScopeHash:   rc.Scope.Hash,
			Runtime:     runtimePaths(launcher.FenceOf(ctx), rootPID),
			LandlockABI: abi,
			ExecPending: true, // BeforeExec: the helper has not exec'd the server yet
		})
		if err != nil {
			return fmt.Errorf("register run with the daemon: %w", err)
		}
		return nil
	}
	return nil
}

// writeRights are the Landlock rights that let a runtime entry be changed.
const writeRights = ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSMakeReg | ll.AccessFSMakeDir |
	ll.AccessFSRemoveFile | ll.AccessFSRemoveDir | ll.AccessFSMakeSym | ll.AccessFSMakeSock | ll.AccessFSMakeFifo

// runtimePaths is the non-scope part of the fence: what the daemon counts
// as the run's runtime profile.
func runtimePaths(rs *ruleset.Ruleset, rootPID int) []classify.RuntimePath {
	if rs == nil {
		return nil
	}
	var out []classify.RuntimePath
	for _, r := range rs.Rules {
		if r.Origin == ruleset.OriginScope {
			continue
		}
		w := r.Access&landlock.AccessFSSet(writeRights) != 0
		out = append(out, classify.RuntimePath{Path: r.Path, Write: w})
		if r.Path == runtimeprofile.ProcSelf {
			// The fence's rule is on the server's own /proc/PID (the helper's
			// pid, kept at exec): that is the path the kernel's views name.
			out = append(out, classify.RuntimePath{Path: "/proc/" + strconv.Itoa(rootPID), Write: w},
				classify.RuntimePath{Path: "/proc/thread-self", Write: w})
		}
	}
	return out
}
