// Command mcpwarden-fence is the fence helper of `mcpwarden run`: the small
// program the launcher starts, with a spec on fd 3 and a status pipe on fd 4,
// that fences itself (namespaces, Landlock, seccomp, no capabilities) and
// execs the server. It links only what applying the fence needs; see
// launcher/sandbox. It is not a command for people: it refuses to run
// without the launcher's descriptors.
//
// Started as mcpwarden-fence-watch (argv[0]), it is instead the run's
// watcher: it holds the launcher's lifeline and kills the run's cgroup when
// the launcher dies (see launcher/cgroup).
package main

import (
	"os"

	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
)

func main() {
	if len(os.Args) > 0 && os.Args[0] == cgroup.WatcherName {
		os.Exit(cgroup.WatchMain(os.Args[1:]))
	}
	os.Exit(sandbox.Main())
}
