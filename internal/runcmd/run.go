// Package runcmd is the `run` command of mcpwarden: its flags, the host
// configuration, the scope and the extensions (the daemon, NATS, the
// proxy) that make the launcher.Config, then the run. mcpwarden runs it for
// every server start; mcpwarden-pipeline runs it too, for a run whose
// records go to NATS, whose client only that program links.
package runcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/schema"
)

const runUsage = `usage: mcpwarden run --scope FILE [--base DIR] [--mode enforce|audit] [--best-effort]
                     [--audit-log FILE] [--state-dir DIR] [--allow-runtime PATH]... [--allow-exec PROGRAM]...
                     [--env NAME[=VALUE]]... [--clean-env] [--require-namespaces | --no-namespaces]
                     [--owner USER[:GROUP]] [--run-uid UID]
                     [--max-processes N] [--max-memory-mb N] [--max-file-size-mb N] [--cgroup-parent PATH]
                     -- CMD [ARGS...]

Runs the MCP server CMD inside the Landlock fence derived from the scope
record FILE (paths relative to the approved base DIR, default the current
directory), relays its stdio, and writes launch records to the audit log.

Exit status: the server's own status (128+N when killed by signal N); 64
usage; 65 scope refused; 69 the kernel lacks a Landlock feature the fence
needs (see --best-effort), the host cannot enforce a limit given on the
command line or in the scope, or namespaces are required and cannot be
made; 70 the server could not start under the fence; 71 internal error (a
daemon that does not answer); 74 the audit log or sink cannot take
records; 77 the scope expired or was revoked during the run, which was
stopped; 78 the configuration cannot be used (a daemon whose path key
differs from the run's).

Settings not given as flags come from the host configuration (MCPWARDEN_*
variables, then the configuration file; 'mcpwarden config show' prints
them), so a client's entry needs only --scope FILE -- CMD.
`

// runExtension plugs into `run`: extra flags, then a chance to set
// Config.Mediator, BeforeExec or Sink before the launcher is built.
type runExtension interface {
	Flags(fs *flag.FlagSet)
	Configure(ctx context.Context, rc *Context) error
}

// Context is what an extension sees: the checked scope, the run id, the
// local audit log (a launcher.Sink) and the config it may adjust.
type Context struct {
	Scope       *schema.CanonicalScope
	RunID       string
	StateDir    string
	PathKeyFile string // the path-hash key, shared with the daemon
	AuditLog    launcher.Sink
	Logger      *slog.Logger
	Config      *launcher.Config
	// Launched are called with the launcher once it is built, before it
	// runs (an extension that needs it, e.g. to record what the proxy
	// learns about the server).
	Launched []func(*launcher.Launcher)
	// Given names the flags set on the command line (not from the
	// configuration).
	Given map[string]bool
}

// errConfig marks an extension's error as a configuration the run cannot
// use (exit 78): a daemon with another path key.
var errConfig = errors.New("configuration")

// Run is `mcpwarden run ARGS...`; it returns the process exit code.
// publish is what the program does when the run's records go to NATS
// (natsExtension).
func Run(ctx context.Context, args []string, publish Publish) int {
	launcher.WarmUp()
	// In this order: the daemon takes the run's records when there is one,
	// NATS otherwise; the proxy's sink writes through whichever it is.
	runExtensions := []runExtension{&daemonExtension{}, &natsExtension{publish: publish}, &proxyExtension{}}
	fs := cli.NewFlags("run", runUsage)
	scopeFile := fs.String("scope", "", "scope record (JSON) to enforce; required")
	base := fs.String("base", ".", "approved base directory the scope's paths are relative to")
	mode := fs.String("mode", "enforce", "enforce: run inside the fence; audit: run WITHOUT the fence, records marked audit")
	bestEffort := fs.Bool("best-effort", false, "run degraded (loudly) when the kernel lacks a Landlock feature, instead of refusing")
	auditLog := fs.String("audit-log", "", "local JSONL audit log (default STATE_DIR/audit.jsonl)")
	stateDir := fs.String("state-dir", "", "state `DIR` (default /var/lib/mcpwarden as root, else $XDG_STATE_HOME/mcpwarden; or state_dir in the configuration)")
	pathKey := fs.String("path-key", "", "key `FILE` for path hashes in records, shared with the daemon (default STATE_DIR/path.key, created if missing; or path_key in the configuration)")
	var allowRuntime, allowExec, env, unmask cli.StringList
	fs.Var(&allowRuntime, "allow-runtime", "extra read-only runtime `PATH` the server needs (operator-chosen; repeatable)")
	fs.Var(&allowExec, "allow-exec", "a helper `PROGRAM` the server spawns (e.g. git), found on PATH and granted with what it needs to run, inside the same fence (repeatable)")
	fs.Var(&env, "env", "pass `NAME` (from this environment, even one that looks like a credential) or NAME=VALUE to the server (repeatable)")
	cleanEnv := fs.Bool("clean-env", false, "give the server only PATH, the locale, TZ and TERM plus --env, instead of this environment minus credentials")
	lim := AddLimitFlags(fs.FlagSet)
	requireNS := fs.Bool("require-namespaces", false, "refuse to run (exit 69) when the server's namespaces cannot be made, instead of running with Landlock and seccomp only (the scope's require_isolation does the same)")
	noNS := fs.Bool("no-namespaces", false, "run without the server's namespaces (recorded as such); refused with --require-namespaces or require_isolation")
	owner := fs.String("owner", "", "`USER[:GROUP]` that owns the files the server creates in a write scope (root launchers; default: the owner of --base)")
	fs.Var(&unmask, "unmask", "a secret `PATTERN` the fence leaves visible to the server (every entry of the scope matching a secret pattern is hidden from it otherwise; the proxy still refuses it to the client), e.g. .git for a git server (repeatable)")
	secretWalkLimit := fs.Int("secret-walk-limit", launcher.DefaultSecretWalkLimit, "most `ENTRIES` of the scope read at launch looking for secrets to hide; past it the secrets layer is degraded")
	runUID := fs.Int("run-uid", 0, "dedicated host `UID` a root launcher runs the server as (default: a fresh one per run, 1879048192-1895825407)")
	for _, ext := range runExtensions {
		ext.Flags(fs.FlagSet)
	}
	if err := fs.Parse(args); err != nil {
		return fs.Exit(err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := cli.ApplyConfig(fs.FlagSet, cli.WithKeys(map[string]string{"state_dir": "state-dir", "daemon_socket": "daemon-socket", "path_key": "path-key"})); err != nil {
		return cli.ConfigFail(err)
	}
	command := fs.Args()
	if *scopeFile == "" || len(command) == 0 {
		return fs.UsageError("--scope FILE and a server command after '--' are required")
	}
	runMode := schema.RunMode(*mode)
	if runMode != schema.ModeEnforce && runMode != schema.ModeAudit {
		return cli.Fail(cli.ExitUsage, fmt.Errorf("--mode %q: use enforce or audit", *mode))
	}
	scope, err := LoadScope(*scopeFile, *base)
	if err != nil {
		return cli.Fail(cli.ExitBadScope, err)
	}
	// Signals are caught from here on: the run's cgroup exists from the
	// next step, and a ^C must reach the deferred Discard, not kill us
	// with it in place.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// A client that goes away must not kill the launcher with SIGPIPE before
	// it has stopped the server and written the exit record.
	signal.Ignore(syscall.SIGPIPE)
	// The run's cgroup (about 1 ms of mkdir and limit writes) is made while
	// the rest of the configuration is read, the audit log opened and the
	// launcher built; Run takes it over when nothing it is made from has
	// changed by then (and makes its own otherwise), so the server still
	// never runs outside it, and an error it meets fails the run in Run,
	// before anything starts, as before. The fence helper is cloned into it
	// as soon as it exists (it waits for its spec and execs nothing
	// without it), so that its clone into the namespaces and its start-up
	// are done by the time Run needs it; Run takes it over only with the
	// group and when it would start that same helper. Every path that does
	// not reach Run kills the helper and removes the group. The server's
	// runtime profile is resolved meanwhile as well (Run uses it when it
	// would resolve it from the same command, PATH, directory, network
	// grant, --allow-exec and cache).
	if *stateDir == "" {
		if *stateDir, err = auditlog.DefaultStateDir(); err != nil {
			return cli.Fail(cli.ExitAuditSink, err)
		}
	}
	runID := schema.NewID()
	life := launcher.PrepareLife(launcher.Config{
		Scope:             scope,
		Mode:              runMode,
		RunID:             runID,
		Limits:            lim.Limits(),
		RequireLimits:     lim.Required(),
		CgroupParent:      *lim.CgroupParent,
		NoCgroup:          !*lim.Cgroup,
		Command:           command,
		RequireNamespaces: *requireNS,
		NoNamespaces:      *noNS,
		Owner:             *owner,
		RunUID:            *runUID,
		Env:               env,
		CleanEnv:          *cleanEnv,
		AllowExec:         allowExec,
		CacheDir:          filepath.Join(*stateDir, "cache"),
	})
	defer func() {
		if err := life.Discard(); err != nil {
			fmt.Fprintln(os.Stderr, "mcpwarden: WARNING: the run's cgroup:", err)
		}
	}()

	if *auditLog == "" {
		*auditLog = auditlog.DefaultPath(*stateDir)
	}
	if *pathKey == "" {
		*pathKey = filepath.Join(*stateDir, "path.key")
	}
	own := []ownFile{
		{*auditLog, "--audit-log", "put it elsewhere with --audit-log", false},
		{*stateDir, "--state-dir", "put it elsewhere with --state-dir", false},
		{*pathKey, "--path-key", "put it elsewhere with --path-key", false},
		{*scopeFile, "the scope record (--scope)", "keep scope records outside the paths they grant (mcpwarden wrap writes them to /etc/mcpwarden/scopes, or ~/.config/mcpwarden/scopes)", true},
	}
	if exe, err := os.Executable(); err == nil {
		// The fence helper and the exec stage run next to it, as root
		// before the fence when the launcher is root, and publishing
		// execs mcpwarden-pipeline from there.
		own = append(own, ownFile{filepath.Dir(exe), "the directory of mcpwarden's programs (" + filepath.Dir(exe) + ")", "install mcpwarden outside the scope", true})
	}
	if hc, err := cli.HostConfig(); err == nil && hc.Path != "" {
		own = append(own, ownFile{hc.Path, "the host configuration " + hc.Path, "move it out of the scope, or name another with $" + hostconfig.EnvFile, !hc.Found})
	}
	for _, ext := range runExtensions {
		if o, ok := ext.(interface{ ownFiles() []ownFile }); ok {
			own = append(own, o.ownFiles()...)
		}
	}
	if err := checkOwnFiles(scope, own); err != nil {
		return cli.Fail(cli.ExitBadScope, err)
	}
	alog, err := auditlog.Open(*auditLog)
	if err != nil {
		return cli.Fail(cli.ExitAuditSink, fmt.Errorf("the run is refused because its records could not be kept: %w", err))
	}
	defer func() {
		// Close syncs what was written but not yet synced (the proxy's last
		// decisions, when its drain outlasted the exit record).
		if err := alog.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "mcpwarden: audit log:", err)
		}
	}()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	cfg := launcher.Config{
		Scope:             scope,
		Command:           command,
		Mode:              runMode,
		BestEffort:        *bestEffort,
		AllowRuntime:      allowRuntime,
		AllowExec:         allowExec,
		Env:               env,
		CleanEnv:          *cleanEnv,
		RunID:             runID,
		AuditLog:          alog,
		Signals:           sigs,
		Logger:            logger,
		Limits:            lim.Limits(),
		RequireLimits:     lim.Required(),
		CgroupParent:      *lim.CgroupParent,
		NoCgroup:          !*lim.Cgroup,
		Life:              life,
		RequireNamespaces: *requireNS,
		NoNamespaces:      *noNS,
		Owner:             *owner,
		RunUID:            *runUID,
		CacheDir:          filepath.Join(*stateDir, "cache"),
		Unmask:            unmask,
		SecretWalkLimit:   *secretWalkLimit,
	}
	rc := &Context{Scope: scope, RunID: cfg.RunID, StateDir: *stateDir, PathKeyFile: *pathKey, AuditLog: alog, Logger: logger, Config: &cfg, Given: given}
	for _, ext := range runExtensions {
		if err := ext.Configure(ctx, rc); err != nil {
			if errors.Is(err, errConfig) {
				return cli.Fail(cli.ExitConfig, err)
			}
			return cli.Fail(cli.ExitInternal, err)
		}
	}
	l, err := launcher.New(cfg)
	if err != nil {
		code := exitCodeOf(err)
		reason := schema.ExitStartFailed
		if code == cli.ExitKernel {
			reason = schema.ExitRefusedKernel
		}
		if rerr := launcher.RecordRefusal(ctx, cfg, reason, launcher.KernelABI()); rerr != nil {
			fmt.Fprintln(os.Stderr, "mcpwarden:", rerr)
		}
		return cli.Fail(code, err)
	}
	for _, f := range rc.Launched {
		f(l)
	}
	// Signals are forwarded to the server; the run ends when the server does.
	err = l.Run(context.WithoutCancel(ctx))
	var ee *launcher.ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if err != nil {
		return cli.Fail(exitCodeOf(err), err)
	}
	return cli.ExitOK
}

// ownFile is a file (or directory) of mcpwarden's own that a run reads:
// its records, keys, configuration and the scope record itself. A server
// that could rewrite one would widen its own next run (a scope record
// granting more, a configuration that turns the daemon off or moves the
// state directory), rewrite its records or read a key.
type ownFile struct {
	path, what, fix string
	// writeOnly: only a scope that grants writing may not hold it (a
	// server reading its own scope record or mcpwarden's programs learns
	// nothing it may not know).
	writeOnly bool
}

// checkOwnFiles refuses a run whose scope holds one of mcpwarden's own
// files: inside an allowed path (a symlink on the way resolved), or a
// regular file with more than one name (a hard link, which may be inside
// the scope under another name: a path check cannot see it) when the
// scope grants writing, or when the server may not read the file either. A missing path is checked where it would be created.
func checkOwnFiles(scope *schema.CanonicalScope, files []ownFile) error {
	write := scope.AccessMode == schema.AccessWrite
	for _, f := range files {
		if f.path == "" || (f.writeOnly && !write) {
			continue
		}
		if insideScope(scope, f.path) {
			verb := "read or rewrite"
			if f.writeOnly {
				verb = "rewrite"
			}
			return fmt.Errorf("%s lies inside the scope's allowed paths, where the server could %s it; %s", f.what, verb, f.fix)
		}
		// A file the server may not even read (a key, credentials, the
		// records) may not have a second name in a read scope either.
		if n := schema.Names(f.path); n > 1 {
			where, verb := "write paths", "rewrite"
			if !write {
				where, verb = "paths", "read"
			}
			return fmt.Errorf("%s has %d names (hard links): one may lie inside the scope's %s, where the server could %s it; give it a single name (copy it and remove the links)", f.what, n, where, verb)
		}
	}
	return nil
}

// insideScope reports whether path (which may not exist yet) resolves into
// one of the scope's allowed paths.
func insideScope(scope *schema.CanonicalScope, path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	// Resolve the longest existing prefix, then re-attach the rest.
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return scope.Contains(filepath.Join(real, rest))
		}
		if dir == "/" {
			return scope.Contains(abs)
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// exitCodeOf maps launcher errors to exit codes.
func exitCodeOf(err error) int {
	var ke *ruleset.KernelError
	var le *launcher.LimitsError
	var se *launcher.StartError
	var sce *schema.ScopeError
	var ie *launcher.IsolationError
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.Is(err, launcher.ErrScopeExpired), errors.Is(err, launcher.ErrScopeRevoked):
		return cli.ExitScopeEnded
	case errors.As(err, &ke), errors.As(err, &le), errors.As(err, &ie):
		return cli.ExitKernel
	case errors.As(err, &sce):
		return cli.ExitBadScope
	case errors.Is(err, launcher.ErrUsage):
		return cli.ExitUsage
	case errors.Is(err, launcher.ErrAudit):
		return cli.ExitAuditSink
	case errors.As(err, &se):
		return cli.ExitServerStart
	default:
		return cli.ExitInternal
	}
}
