package main

import (
	"flag"

	"github.com/mcpwarden/mcpwarden/launcher"
)

// limitFlags are the run's bounds, shared by run and scope check.
type limitFlags struct {
	procs, memMB, fileMB *int64
	cgroupParent         *string
	cgroup               *bool
	fs                   *flag.FlagSet
}

func addLimitFlags(fs *flag.FlagSet) *limitFlags {
	d := launcher.DefaultLimits
	return &limitFlags{
		fs:           fs,
		procs:        fs.Int64("max-processes", d.MaxProcesses, "most tasks (processes and threads) the run may have at once; 0: no limit"),
		memMB:        fs.Int64("max-memory-mb", d.MaxMemoryMB, "most memory of the whole run in MiB, swap included; 0: no limit"),
		fileMB:       fs.Int64("max-file-size-mb", d.MaxFileSizeMB, "largest file the run may write in MiB (and the size of its private /tmp); 0: no limit"),
		cgroupParent: fs.String("cgroup-parent", "", "cgroup `PATH` (e.g. /mcpwarden, the same in every hierarchy) to make the run's cgroup under; default the launcher's own cgroup"),
		cgroup:       fs.Bool("cgroup", true, "give the run a cgroup of its own (limits, killed whole); --cgroup=false turns the layer off, recorded as such"),
	}
}

func (f *limitFlags) limits() *launcher.Limits {
	return &launcher.Limits{MaxProcesses: *f.procs, MaxMemoryMB: *f.memMB, MaxFileSizeMB: *f.fileMB}
}

// required reports whether a process or memory limit was given on the
// command line: a host that cannot enforce it then refuses the run; the
// defaults only degrade, loudly.
func (f *limitFlags) required() bool {
	req := false
	f.fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "max-processes" || fl.Name == "max-memory-mb" {
			req = true
		}
	})
	return req
}
