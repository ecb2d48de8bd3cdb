package main

import (
	"errors"
	"flag"
	"strings"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

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

// flagExit is the exit code for a flag-parsing error: --help is a success,
// anything else a usage error (the flag package has already said what).
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
