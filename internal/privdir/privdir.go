// Package privdir checks that a directory whose contents a component trusts
// (a spool it publishes, a state directory it resumes from) could not have
// been filled by anyone else.
package privdir

import (
	"fmt"
	"os"
	"syscall"
)

// Check refuses dir when it is not a directory (a symlink is refused, not
// followed), when it is owned by another user than this process's
// effective one, or when group or others may write to it. what names the
// directory in the error ("spool directory"), which also says how to fix it.
func Check(dir, what string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s is not a directory (a symlink is refused): remove it, or pass another directory", what, dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s %s is owned by uid %d, not by this user (uid %d): anyone who planted it could have filled it; remove it, or pass another directory", what, dir, sys.Uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s %s may be written by group or others (mode %v): fix it with 'chmod 700 %s'", what, dir, st.Mode().Perm(), dir)
	}
	return nil
}
