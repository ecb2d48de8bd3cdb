package daemon

import (
	"fmt"
	"os"

	"github.com/mcpwarden/mcpwarden/internal/privdir"
)

// PrepareStateDir creates the daemon's state directory (0700) when it is
// missing and refuses one that someone else could have filled before the
// daemon started: a symlink, a directory owned by another user, or one that
// group or others may write to. The daemon trusts what it holds: the path
// hash key, the run table it adopts runs from, the spool it publishes in
// this host's name, the embedded NATS server's store and users.
func PrepareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w; pass --state-dir DIR somewhere writable", err)
	}
	return privdir.Check(dir, "daemon state directory")
}
