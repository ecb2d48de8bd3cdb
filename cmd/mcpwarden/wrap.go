package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/adopt/clientconfig"
	"github.com/mcpwarden/mcpwarden/adopt/scopegen"
	"github.com/mcpwarden/mcpwarden/adopt/wrap"
	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
)

const wrapUsage = `usage: mcpwarden wrap CONFIG [--dry-run] [--base DIR] [--server NAME]... [flags]

Rewrites the MCP client configuration CONFIG so that every server the
client starts (stdio) runs under 'mcpwarden run', each with a starting
scope of its own: read-only, its directory arguments as allowed_paths
relative to the base, its tools from a tools/list probe of the server run
under the fence, their classes from mcpwarden's table. Tools the table
does not know are marked for review in SCOPE.review.md and stay refused
until you give them a class. Servers reached by URL are left alone and
listed. Every other byte of the file is kept; wrapping a wrapped file
changes nothing; 'mcpwarden unwrap CONFIG' restores it.

Formats (detected from the name, or --format): claude-desktop
(claude_desktop_config.json), claude-code (.mcp.json), cursor
(.cursor/mcp.json), vscode (.vscode/mcp.json, or a profile's mcp.json).
See docs/adoption.md.

Exit status: 0 every stdio server is wrapped; 70 some could not be (each
is listed with why; the others are wrapped); 65 CONFIG cannot be wrapped as
it is (the message says why); 64 usage; 71 internal error; 78 the host
configuration cannot be used.
`

const unwrapUsage = `usage: mcpwarden unwrap CONFIG [--dry-run] [--server NAME]... [flags]

Restores the servers 'mcpwarden wrap' wrapped in CONFIG: an entry wrap's
record says is unchanged gets its original text back byte for byte; one
edited since is rebuilt from its arguments after '--'. Scope files are
kept.

Exit status: 0; 70 an entry could not be restored; 65 CONFIG cannot be
read; 64 usage; 71 internal error.
`

// defaultScopeDir is where wrap writes scopes: /etc/mcpwarden/scopes for
// root, else $XDG_CONFIG_HOME/mcpwarden/scopes.
func defaultScopeDir() (string, error) {
	p, _, err := hostconfig.DefaultPath(func(k string) string {
		if k == hostconfig.EnvFile {
			return ""
		}
		return os.Getenv(k)
	}, os.Geteuid())
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(p), "scopes"), nil
}

// selfPath is this binary's path, symlinks resolved: what wrapped entries
// start.
func selfPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}

func cmdWrap(ctx context.Context, args []string) int   { return wrapCommand(ctx, args, false) }
func cmdUnwrap(ctx context.Context, args []string) int { return wrapCommand(ctx, args, true) }

func wrapCommand(ctx context.Context, args []string, undo bool) int {
	name, usage := "wrap", wrapUsage
	if undo {
		name, usage = "unwrap", unwrapUsage
	}
	fs := cli.NewFlags(name, usage)
	format := fs.String("format", "", "the client's `FORMAT`: claude-desktop, claude-code, cursor or vscode (default: from the file's name)")
	stateDir := fs.String("state-dir", "", "state `DIR` where wrap records what unwrap restores (default as for run)")
	dryRun := fs.Bool("dry-run", false, "print the change as a diff and write nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	var servers cli.StringList
	fs.Var(&servers, "server", "only this server `NAME` of the file (repeatable)")
	var base, scopeDir, probeMode, self *string
	var probeTimeout *time.Duration
	var expires *int
	var force, verbose *bool
	if !undo {
		base = fs.String("base", "", "approved base `DIR` of every wrapped server; their directory arguments must lie inside it (default: the project directory of a project's file, else your home)")
		scopeDir = fs.String("scope-dir", "", "`DIR` for the scopes (0600) and their reviews (default /etc/mcpwarden/scopes as root, else $XDG_CONFIG_HOME/mcpwarden/scopes)")
		probeMode = fs.String("probe-mode", "enforce", "run the tools/list probe under the fence (enforce) or without it (audit, for a server that cannot start under it yet)")
		probeTimeout = fs.Duration("probe-timeout", 30*time.Second, "how long the probe waits for each answer of a server")
		expires = fs.Int("expires-after-minutes", scopegen.DefaultExpiresAfterMinutes, "lifetime of each run of a starting scope (1-10080)")
		force = fs.Bool("force", false, "overwrite an existing scope file that differs from the one wrap would write")
		self = fs.String("mcpwarden", "", "the mcpwarden `PATH` the wrapped entries start (default: this binary)")
		verbose = fs.Bool("v", false, "show the probed servers' stderr")
	}
	pos, _, err := cli.ParseInterspersed(fs.FlagSet, args)
	if err != nil {
		return fs.Exit(err)
	}
	if len(pos) != 1 {
		return fs.UsageError("give one client configuration file")
	}
	if err := cli.ApplyConfig(fs.FlagSet, map[string]string{"state_dir": "state-dir"}); err != nil {
		return cli.ConfigFail(err)
	}
	o := wrap.Options{Config: pos[0], StateDir: *stateDir, DryRun: *dryRun, Servers: servers}
	if *format != "" {
		if o.Format, err = clientconfig.ParseFormat(*format); err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
	}
	if o.StateDir == "" {
		if o.StateDir, err = auditlog.DefaultStateDir(); err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
	}
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	var rep *wrap.Report
	if undo {
		o.Mcpwarden = "/"
		o.ScopeDir = "/"
		rep, err = wrap.Unwrap(ctx, o)
	} else {
		o.ProbeMode, o.ProbeTimeout, o.ExpiresAfterMinutes, o.Force = *probeMode, *probeTimeout, *expires, *force
		if *expires < 1 || *expires > 10080 {
			return cli.Fail(cli.ExitUsage, errors.New("--expires-after-minutes: give 1-10080"))
		}
		if o.Base = *base; o.Base != "" {
			if o.Base, err = filepath.Abs(o.Base); err != nil {
				return cli.Fail(cli.ExitUsage, err)
			}
		}
		if o.ScopeDir = *scopeDir; o.ScopeDir == "" {
			if o.ScopeDir, err = defaultScopeDir(); err != nil {
				return cli.Fail(cli.ExitInternal, err)
			}
		}
		if o.ScopeDir, err = filepath.Abs(o.ScopeDir); err != nil {
			return cli.Fail(cli.ExitUsage, err)
		}
		if o.Mcpwarden = *self; o.Mcpwarden == "" {
			if o.Mcpwarden, err = selfPath(); err != nil {
				return cli.Fail(cli.ExitInternal, err)
			}
		} else if !filepath.IsAbs(o.Mcpwarden) {
			return cli.Fail(cli.ExitUsage, errors.New("--mcpwarden: give an absolute path (the client starts it from anywhere)"))
		}
		if *verbose {
			o.ProbeStderr = os.Stderr
		}
		rep, err = wrap.Wrap(ctx, o)
	}
	if err != nil {
		if rep != nil && *asJSON {
			printWrapReport(os.Stdout, rep, true, undo)
		}
		if errors.Is(err, wrap.ErrConfig) {
			return cli.Fail(cli.ExitBadScope, err)
		}
		return cli.Fail(cli.ExitInternal, err)
	}
	printWrapReport(os.Stdout, rep, *asJSON, undo)
	if rep.Failed() {
		return cli.ExitServerStart
	}
	return cli.ExitOK
}

func printWrapReport(w io.Writer, rep *wrap.Report, asJSON, undo bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	verb := "wrap"
	if undo {
		verb = "unwrap"
	}
	fmt.Fprintf(w, "mcpwarden %s: %s (%s)\n", verb, rep.Config, rep.Format)
	if len(rep.Entries) == 0 {
		fmt.Fprintln(w, "  no servers")
	}
	for _, e := range rep.Entries {
		switch e.Status {
		case wrap.StatusWrapped:
			review := ""
			if len(e.Unknown) > 0 {
				review = fmt.Sprintf(", %d to review: %s", len(e.Unknown), strings.Join(e.Unknown, ", "))
			}
			fmt.Fprintf(w, "  %-20s wrapped: %d tools%s\n", e.Name, e.Tools, review)
			fmt.Fprintf(w, "  %-20s   scope  %s (base %s)\n  %-20s   review %s\n", "", e.Scope, e.Base, "", e.Review)
			if e.Reason != "" {
				fmt.Fprintf(w, "  %-20s   note   %s\n", "", e.Reason)
			}
		case wrap.StatusAlready:
			fmt.Fprintf(w, "  %-20s already wrapped (scope %s)\n", e.Name, e.Scope)
		case wrap.StatusRemote:
			fmt.Fprintf(w, "  %-20s left alone: a remote server (%s), no process to fence\n", e.Name, e.URL)
		case wrap.StatusSkipped:
			fmt.Fprintf(w, "  %-20s skipped (not named by --server)\n", e.Name)
		case wrap.StatusRestored:
			how := "exactly as it was"
			if !e.Exact {
				how = "rebuilt: " + e.Reason
			}
			fmt.Fprintf(w, "  %-20s restored, %s (scope kept: %s)\n", e.Name, how, e.Scope)
		case wrap.StatusNotOurs:
			fmt.Fprintf(w, "  %-20s not wrapped by mcpwarden: left alone\n", e.Name)
		case wrap.StatusFailed:
			fmt.Fprintf(w, "  %-20s NOT WRAPPED: %s\n", e.Name, indentMore(e.Reason))
		}
	}
	switch {
	case rep.DryRun && rep.Changed:
		fmt.Fprintf(w, "\ndry run: nothing written; the file would change like this:\n%s", rep.Diff)
	case rep.DryRun:
		fmt.Fprintln(w, "\ndry run: the file would not change")
	case rep.Changed:
		fmt.Fprintf(w, "\n%s rewritten; restart the client to use it. Undo with 'mcpwarden %s %s'.\n", rep.Config, map[bool]string{false: "unwrap", true: "wrap"}[undo], rep.Config)
	default:
		fmt.Fprintln(w, "\nthe file is unchanged")
	}
}

func indentMore(s string) string {
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", 26))
}
