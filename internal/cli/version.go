package cli

import "runtime/debug"

// BuildVersion is the version a program reports: stamped, the value make
// build sets with -ldflags "-X main.version=...", when it is not empty,
// else what the Go toolchain recorded: the module version of an installed
// release, or the VCS revision (with "-dirty" for a modified tree), else
// "dev".
func BuildVersion(stamped string) string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}
