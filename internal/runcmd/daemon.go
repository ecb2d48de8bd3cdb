package runcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// daemonExtension adds --daemon-socket to `run`: the run is registered with
// the daemon before the server is exec'd, and refuses to start when it
// cannot be; its launch and decision records go to the daemon, which
// publishes them (the run needs no NATS of its own). Without a socket from
// the flag or the configuration, a daemon whose socket is at the default
// path is used (discovered) and is then just as required; "off" turns both
// off. The daemon names its path-hash key, and a run with another key is
// refused: their hashes of one path would never match.
type daemonExtension struct{ socket string }

func (e *daemonExtension) Flags(fs *flag.FlagSet) {
	fs.StringVar(&e.socket, "daemon-socket", "", "register the run with 'mcpwarden daemon' at `PATH` before the server starts; the run refuses to start if that fails. Default: daemon_socket in the configuration, else "+client.DefaultSocket+" when a daemon's socket is there; 'off': no daemon")
}

func (e *daemonExtension) Configure(ctx context.Context, rc *Context) error {
	socket := e.socket
	switch socket {
	case hostconfig.Off:
		return nil
	case "":
		found, err := DiscoverDaemon(client.DefaultSocket)
		if err != nil {
			return fmt.Errorf("the run is refused: %w", err)
		}
		if !found {
			return nil
		}
		socket = client.DefaultSocket
	}
	if rc.Config.Sink != nil {
		return errors.New("--daemon-socket sends the run's records to the daemon, which publishes them: drop --nats")
	}
	c := client.New(socket)
	launcher.WarmRecordJSON() // the daemon's sink encodes them with encoding/json
	// Fail before anything starts when the daemon is not there.
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("the run is refused because the daemon cannot watch it: %w", err)
	}
	if err := sameKey(info.PathKeyID, rc.PathKeyFile, socket); err != nil {
		return err
	}
	rc.Config.Sink = c.NewSink()
	abi, _ := ll.LandlockGetABIVersion()
	helper, err := helperFile(rc.Config.HelperPath)
	if err != nil {
		return err
	}
	prev := rc.Config.BeforeExec
	rc.Config.BeforeExec = func(ctx context.Context, rootPID int) error {
		if prev != nil {
			if err := prev(ctx, rootPID); err != nil {
				return err
			}
		}
		_, err := c.Register(ctx, api.Registration{
			RunID:       rc.RunID,
			Mode:        rc.Config.Mode,
			Scope:       rc.Scope,
			ScopeHash:   rc.Scope.Hash,
			Runtime:     runtimePaths(launcher.FenceOf(ctx), rootPID),
			LandlockABI: abi,
			ExecPending: true, // BeforeExec: the helper has not exec'd the server yet
			HelperExe:   helper,
		}, rootPID)
		if err != nil {
			return fmt.Errorf("register run with the daemon: %w", err)
		}
		return nil
	}
	return nil
}

// sameKey refuses a run whose path key is not the daemon's.
func sameKey(daemonKeyID, keyFile, socket string) error {
	if daemonKeyID == "" {
		return fmt.Errorf("%w: the run is refused because the daemon at %s does not name its path key (an older mcpwarden daemon?): upgrade it so launcher and daemon match", errConfig, socket)
	}
	key, err := schema.LoadOrCreatePathKey(keyFile)
	if err != nil {
		return fmt.Errorf("%w: the run is refused: %w", errConfig, err)
	}
	h, err := schema.NewPathHasher(key)
	if err != nil {
		return fmt.Errorf("%w: the run is refused: %w", errConfig, err)
	}
	if id := h.KeyID(); id != daemonKeyID {
		return fmt.Errorf("%w: the run is refused because its path key (%s, id %s) is not the daemon's (id %s): the daemon could not match the run's path hashes; set path_key in the configuration (or --path-key) to the daemon's key file, e.g. /var/lib/mcpwarden/path.key", errConfig, keyFile, id, daemonKeyID)
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

// helperFile identifies the fence helper's executable for the daemon: the
// root process and its children running it are the launcher's, not the
// server's.
func helperFile(path string) (*api.FileID, error) {
	if path == "" {
		p, err := launcher.DefaultHelperPath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("the fence helper %s: %w", path, err)
	}
	return &api.FileID{Dev: st.Dev, Ino: st.Ino}, nil
}
