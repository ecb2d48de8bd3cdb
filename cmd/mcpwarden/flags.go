package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mcpwarden/mcpwarden/launcher"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// cmdFlags is a command's flag set with its usage text. --help (or -h)
// prints the usage and every flag to stdout and is a success; a flag error
// is printed to stderr with a pointer to --help and is a usage error.
type cmdFlags struct {
	*flag.FlagSet
	name  string // as typed: "scope check"
	usage string // the text before the flag list
}

func newFlags(name, usage string) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {} // printed by exit, to the right stream
	return &cmdFlags{FlagSet: fs, name: name, usage: usage}
}

// printUsage writes the usage text and every flag with its default.
func (c *cmdFlags) printUsage(w io.Writer) {
	fmt.Fprint(w, c.usage)
	n := 0
	c.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	out := c.Output()
	c.SetOutput(w)
	c.PrintDefaults()
	c.SetOutput(out)
}

// exit is the exit code for an error of Parse: --help prints the usage to
// stdout and succeeds; anything else (the flag package has printed what)
// is a usage error.
func (c *cmdFlags) exit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		c.printUsage(os.Stdout)
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "run 'mcpwarden %s --help' for its flags\n", c.name)
	return exitUsage
}

// usageError prints msg and the usage to stderr and returns exitUsage.
func (c *cmdFlags) usageError(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "mcpwarden %s: %s\n\n", c.name, fmt.Sprintf(format, args...))
	c.printUsage(os.Stderr)
	return exitUsage
}

// parseInterspersed parses flags that may come after positional arguments
// (scope check FILE --json). Everything after "--" is returned as rest.
func parseInterspersed(fs *flag.FlagSet, args []string) (positional, rest []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		left := fs.Args()
		// fs.Parse consumed a "--" if it stopped there.
		if len(args) > len(left) && args[len(args)-len(left)-1] == "--" {
			return positional, left, nil
		}
		if len(left) == 0 {
			return positional, nil, nil
		}
		if left[0] == "--" {
			return positional, left[1:], nil
		}
		positional = append(positional, left[0])
		args = left[1:]
	}
}

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
