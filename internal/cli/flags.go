package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// StringList is a repeatable string flag.
type StringList []string

func (s *StringList) String() string     { return strings.Join(*s, ",") }
func (s *StringList) Set(v string) error { *s = append(*s, v); return nil }

// Flags is a command's flag set with its usage text. --help (or -h)
// prints the usage and every flag to stdout and is a success; a flag error
// is printed to stderr with a pointer to --help and is a usage error.
type Flags struct {
	*flag.FlagSet
	name  string // as typed: "scope check"
	usage string // the text before the flag list
}

// NewFlags is the flag set of the command typed as name ("scope check").
func NewFlags(name, usage string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {} // printed by Exit, to the right stream
	return &Flags{FlagSet: fs, name: name, usage: usage}
}

// PrintUsage writes the usage text and every flag with its default.
func (c *Flags) PrintUsage(w io.Writer) {
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

// Exit is the exit code for an error of Parse: --help prints the usage to
// stdout and succeeds; anything else (the flag package has printed what)
// is a usage error.
func (c *Flags) Exit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		c.PrintUsage(os.Stdout)
		return ExitOK
	}
	fmt.Fprintf(os.Stderr, "run 'mcpwarden %s --help' for its flags\n", c.name)
	return ExitUsage
}

// UsageError prints msg and the usage to stderr and returns ExitUsage.
func (c *Flags) UsageError(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "mcpwarden %s: %s\n\n", c.name, fmt.Sprintf(format, args...))
	c.PrintUsage(os.Stderr)
	return ExitUsage
}

// ParseInterspersed parses flags that may come after positional arguments
// (scope check FILE --json). Everything after "--" is returned as rest.
func ParseInterspersed(fs *flag.FlagSet, args []string) (positional, rest []string, err error) {
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

// Subcommand checks that args name the one subcommand sub of command cmd
// (`mcpwarden scope check ...`): with no arguments it prints usage to stderr,
// with -h/--help/help to stdout, and refuses any other word. ok is false
// when the command is done, with code its exit status.
func Subcommand(cmd, sub, usage string, args []string) (code int, ok bool) {
	switch {
	case len(args) == 0:
		fmt.Fprint(os.Stderr, usage)
		return ExitUsage, false
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(os.Stdout, usage)
		return ExitOK, false
	case args[0] != sub:
		fmt.Fprintf(os.Stderr, "mcpwarden %s: unknown subcommand %q\n\n%s", cmd, args[0], usage)
		return ExitUsage, false
	}
	return 0, true
}
