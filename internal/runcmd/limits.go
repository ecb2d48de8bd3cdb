package runcmd

import (
	"flag"

	"github.com/mcpwarden/mcpwarden/launcher"
)

// LimitFlags are the run's bounds, shared by run and scope check.
type LimitFlags struct {
	procs, memMB, fileMB *int64
	CgroupParent         *string
	Cgroup               *bool
	fs                   *flag.FlagSet
}

// AddLimitFlags registers the bounds' flags on fs.
func AddLimitFlags(fs *flag.FlagSet) *LimitFlags {
	d := launcher.DefaultLimits
	return &LimitFlags{
		fs:           fs,
		procs:        fs.Int64("max-processes", d.MaxProcesses, "most tasks (processes and threads) the run may have at once; 0: no limit"),
		memMB:        fs.Int64("max-memory-mb", d.MaxMemoryMB, "most memory of the whole run in MiB, swap included; 0: no limit"),
		fileMB:       fs.Int64("max-file-size-mb", d.MaxFileSizeMB, "largest file the run may write in MiB (and the size of its private /tmp); 0: no limit"),
		CgroupParent: fs.String("cgroup-parent", "", "cgroup `PATH` (e.g. /mcpwarden, the same in every hierarchy) to make the run's cgroup under; default the launcher's own cgroup"),
		Cgroup:       fs.Bool("cgroup", true, "give the run a cgroup of its own (limits, killed whole); --cgroup=false turns the layer off, recorded as such"),
	}
}

// Limits are the bounds the flags give.
func (f *LimitFlags) Limits() *launcher.Limits {
	return &launcher.Limits{MaxProcesses: *f.procs, MaxMemoryMB: *f.memMB, MaxFileSizeMB: *f.fileMB}
}

// Required reports whether a process or memory limit was given on the
// command line: a host that cannot enforce it then refuses the run; the
// defaults only degrade, loudly.
func (f *LimitFlags) Required() bool {
	req := false
	f.fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "max-processes" || fl.Name == "max-memory-mb" {
			req = true
		}
	})
	return req
}
