// Command mcpwarden-fence is the fence helper of `mcpwarden run`: the small
// program the launcher starts, with a spec on fd 3 and a status pipe on fd 4,
// that fences itself (namespaces, Landlock, seccomp, no capabilities) and
// execs the server. It links only what applying the fence needs; see
// launcher/sandbox. It is not a command for people: it refuses to run
// without the launcher's descriptors.
package main

import (
	"os"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
)

func main() { os.Exit(sandbox.Main()) }
