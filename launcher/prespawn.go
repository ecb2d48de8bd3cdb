package launcher

import (
	"os"
	"sync"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
)

// The launch overhead is dominated by two Go start-ups: the launcher's and
// the helper's. When this binary was started as "mcpwarden run", the helper
// is spawned from this package's initialiser, so that it boots while the
// launcher still runs the rest of its initialisers, parses flags and checks
// the scope. It does nothing until Run sends it a spec; if the run never
// gets there (usage error, refused scope), the helper sees the spec pipe
// close when this process exits, and exits without having exec'd anything.
var prespawn struct {
	sync.Mutex
	h      *pending
	helper string
	dir    string
	taken  bool
}

// EnvNoPrespawn disables the early helper (for debugging the launcher).
const EnvNoPrespawn = "MCPWARDEN_NO_PRESPAWN"

func init() {
	if sandbox.IsHelper() || len(os.Args) < 2 || os.Args[1] != "run" || os.Getenv(EnvNoPrespawn) != "" {
		return
	}
	for _, a := range os.Args[2:] {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	dir, err := os.Getwd()
	if err != nil {
		return
	}
	h, err := spawnHelper(exe, dir, os.Stderr)
	if err != nil {
		return
	}
	prespawn.h, prespawn.helper, prespawn.dir = h, exe, dir
}

// takePrespawned hands the early helper to the first Run whose config it
// fits (same helper binary, directory and stderr), once.
func takePrespawned(cfg *Config) *pending {
	prespawn.Lock()
	defer prespawn.Unlock()
	if prespawn.h == nil || prespawn.taken {
		return nil
	}
	prespawn.taken = true
	if cfg.HelperPath != prespawn.helper || cfg.Dir != prespawn.dir || cfg.Stderr != os.Stderr {
		prespawn.h.kill()
		return nil
	}
	return prespawn.h
}
