// Package launcher runs an unmodified MCP server inside the Landlock fence
// derived from a canonical scope, sitting between the client's stdio and the
// server's. It starts the small fence helper (cmd/mcpwarden-fence, package
// sandbox) that fences itself and execs the server, relays stdio through a
// Mediator, forwards signals, and writes launch records.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Mediator sits between the client's stdio and the server's.
type Mediator interface {
	Mediate(ctx context.Context, clientIn io.Reader, clientOut io.Writer, server Upstream) error
}

// Preparer is a Mediator with set-up of its own (the proxy's approval
// socket) that Run starts as soon as the go-ahead is out, while the run's
// init and exec stage start the server, instead of after the server has
// started: Mediate finds it done (or waits for it) and reports what went
// wrong as it would have, so nothing about the run's outcome changes, only
// when the work is done. Run calls Abandon, once the server is known not
// to have started, so that nothing the set-up made outlives the run.
type Preparer interface {
	Prepare()
	Abandon()
}

// Upstream is the running server as the mediator sees it.
type Upstream interface {
	// Stdin is the current server process's stdin. The value is also an
	// io.Closer: closing it gives the server EOF.
	Stdin() io.Writer
	// Stdout is the current server process's stdout. The mediator reads
	// it and nothing else does; it may take the descriptor over (the proxy
	// reads a blocking duplicate and closes this one), so a later Close of
	// it by the launcher may report os.ErrClosed.
	Stdout() io.Reader
	// Restart stops the current server and starts it again under a fence
	// narrowed to paths (each inside the scope's allowed paths, possibly
	// empty = no workspace access at all). Stdin/Stdout then return the new
	// process's pipes.
	Restart(ctx context.Context, paths []schema.CanonicalPath) error
	Done() <-chan struct{} // closed when the current server process exits
}

// Sink takes sanitized records: the local audit log, the NATS publisher.
// Publish must not keep the events slice after it returns (as io.Writer
// with p): the proxy reuses it for its next batch.
type Sink interface {
	Publish(ctx context.Context, events []schema.Event) error
}

// DeferSyncSink is a Sink that can write records now and leave making them
// durable to its next Publish (or its Close): the mediator's last batch,
// which the run's exit record, published after the mediator returned,
// always follows in the same audit log. (auditlog.Log is one.) A mediator
// uses it for its last batch only, and only on the sink the launcher
// gave it.
type DeferSyncSink interface {
	Sink
	PublishDeferSync(ctx context.Context, events []schema.Event) error
}

// Config is one run.
type Config struct {
	Scope   *schema.CanonicalScope
	Command []string // the server's argv; Command[0] is looked up on the server's PATH
	Dir     string   // working directory of the server; default: the launcher's

	Mode         schema.RunMode // enforce (default) or audit
	BestEffort   bool           // run degraded when the kernel lacks a Landlock feature
	AllowRuntime []string       // operator-chosen extra read-only runtime paths
	// AllowExec names helper programs the server spawns (--allow-exec):
	// each is granted with what it needs to run, inside the same fence.
	AllowExec []string
	// Env names extra variables for the server: "NAME" copies it from the
	// launcher's environment even when it looks like a credential,
	// "NAME=VALUE" sets it. See env.go for what the server gets by default.
	Env []string
	// CleanEnv gives the server only PATH, the locale, TZ and TERM, plus Env
	// (an allowlist), instead of the launcher's environment minus
	// credentials and runtime variables.
	CleanEnv bool

	RunID string // default: a new schema.NewID()
	// AuditLog is the local JSONL log; required. Launch records go there and to Sink.
	AuditLog Sink
	Sink     Sink // optional second sink (NATS publisher, spool)

	Mediator Mediator // default: the byte-transparent Relay
	// BeforeExec runs once the helper process exists, before it fences
	// itself and execs the server; an error aborts the run.
	BeforeExec func(ctx context.Context, rootPID int) error

	Stdin   io.Reader // default os.Stdin
	Stdout  io.Writer // default os.Stdout
	Stderr  io.Writer // the server's stderr goes here; default os.Stderr
	Signals <-chan os.Signal

	// HelperPath is the fence helper (cmd/mcpwarden-fence); default
	// mcpwarden-fence next to this executable.
	HelperPath string
	KernelABI  func() int // default: probe the running kernel
	Logger     *slog.Logger
	Origin     schema.Origin
	Now        func() time.Time
	// StopGrace is how long a server gets after stdin EOF or SIGTERM before
	// the next step (SIGTERM, then SIGKILL). Default 5 s.
	StopGrace time.Duration

	// Limits are the operator's bounds on the run; nil: DefaultLimits. The
	// scope's limits may only narrow them (a scope asking for more is refused).
	Limits *Limits
	// RequireLimits refuses the run (a *LimitsError) when the host cannot
	// enforce the process and memory limits in force, instead of running
	// degraded. A limit the scope names is always required.
	RequireLimits bool
	// CgroupParent is the cgroup path (the same in every hierarchy, e.g.
	// "/mcpwarden") under which the run's cgroup is made; default the
	// launcher's own cgroup.
	CgroupParent string
	// NoCgroup turns the cgroup layer off (recorded as such): no process or
	// memory limit, and the end of the run kills the server's session only.
	NoCgroup bool
	// Life is the run's cgroup made ahead by PrepareLife from this same
	// configuration (nil: Run makes it). Run uses it only when it was made
	// from the configuration Run has; the caller Discards it when the run
	// never reaches Run.
	Life *PreparedLife

	// Namespaces and identity (docs/launcher.md, "Namespaces").

	// RequireNamespaces refuses the run (an *IsolationError, exit 69) when
	// the namespaces cannot be made, instead of running with Landlock and
	// seccomp alone; so does the scope's require_isolation.
	RequireNamespaces bool
	// NoNamespaces runs without namespaces (--no-namespaces), recorded as
	// such; refused together with a requirement of them.
	NoNamespaces bool
	// Owner is who owns the files the server creates in a write scope,
	// "USER[:GROUP]" (names or numbers); default: the owner of the base
	// directory. Only a root launcher can choose another user.
	Owner string
	// CacheDir is where the launcher keeps what it may reuse across runs
	// of this user, each item checked before use (the runtime profile's
	// walks of package trees for native code); empty: nothing is cached.
	// The server must not be able to write it (cmd puts it in the state
	// directory, which the scope may not contain).
	CacheDir string
	// RunUID is the dedicated host uid (and gid) a root launcher runs the
	// server as; 0 picks one per run in [RunUIDBase, RunUIDBase+RunUIDCount).
	RunUID int

	// SecretPatterns are the run's secret patterns, the proxy's (nil:
	// schema.DefaultSecretPatterns): every entry of the scope matching one
	// at launch is masked in the minimal root (secretmask.go).
	SecretPatterns []string
	// Unmask are secret patterns the fence leaves visible to the server
	// (--unmask; the proxy still refuses them to the client), e.g. .git
	// for a git server.
	Unmask []string
	// SecretWalkLimit bounds the entries the walk for secrets reads; 0:
	// DefaultSecretWalkLimit.
	SecretWalkLimit int
}

// Launcher runs one server. Build it with New.
type Launcher struct {
	cfg      Config
	profile  *runtimeprofile.Profile
	decision ruleset.Decision
	base     *ruleset.Ruleset // the run's, nil until Run derived it; the records' layers read it
	env      []string
	// droppedEnv are the launcher's variables held back from the server
	// (credentials, runtime variables), by name.
	droppedEnv []string
	limits     Limits // the operator's, narrowed by the scope's
	openFiles  uint64 // the run's RLIMIT_NOFILE ceiling (OpenFilesCeiling of limits), read once
	// requireProcs, requireMemory: the run is refused when that limit cannot be enforced.
	requireProcs, requireMemory bool
	lifeLayer                   *schema.Layer  // the cgroup layer, once the run's cgroup exists
	netDest                     string         // the netns layer's reason with a network grant (netdest.go); "" before the filter was tried
	identity                    serverIdentity // set by Identified
	cgroupFiles                 []string       // the limit files of the run's own cgroup, granted read-only
	// pidNamespace: the server runs under the init of a new pid namespace
	// that dies with the launcher (set by the namespace layer); then no
	// watcher is needed to end the run if the launcher is SIGKILLed.
	pidNamespace bool
	iso          *isolation
	// secrets: the walk of the scope for secrets, once done (secretmask.go);
	// each restart of the server walks again. Guarded by secretsMu.
	secrets            *secretMasks
	secretsMu          sync.Mutex
	launchSecrets      *secretMasks // the launch's walk (set once, before any restart)
	secretRE, unmaskRE *schema.Secrets
	// planted: what the checks for names planted in the write scope
	// found (planted.go), since plantedSince (the launch, then each
	// check); guarded by secretsMu.
	planted      *planted
	plantedSince time.Time
}

// DroppedEnv names the launcher's environment variables the server does
// not get (they look like credentials or change what a runtime loads).
func (l *Launcher) DroppedEnv() []string { return l.droppedEnv }

// Errors returned by New and Run; cmd maps them to exit codes.
var (
	// ErrAudit wraps any failure to write a launch record (fail closed).
	ErrAudit = errors.New("audit log")
	// ErrUsage wraps a configuration the operator must fix (a bad --owner).
	ErrUsage = errors.New("usage")
)

// StartError says the server could not be started under the fence.
type StartError struct {
	Path string // the file the fence or file system refused, when known
	// Hint says which flag or scope field grants Path; default
	// --allow-runtime Path.
	Hint string
	Err  error
}

func (e *StartError) Error() string {
	if e.Path != "" {
		hint := e.Hint
		if hint == "" {
			hint = fmt.Sprintf("if the server needs it, grant it read-only with --allow-runtime %s (or install the server's runtime where the profile finds it)", e.Path)
		}
		return fmt.Sprintf("the server could not start under the fence: %v. Denied or missing: %s — %s", e.Err, e.Path, hint)
	}
	return fmt.Sprintf("the server could not start under the fence: %v", e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// ExitError is the server's own non-zero status.
type ExitError struct {
	Code   int // exit code, or 128+signal
	Signal os.Signal
}

func (e *ExitError) Error() string {
	if e.Signal != nil {
		return fmt.Sprintf("server killed by %v", e.Signal)
	}
	return fmt.Sprintf("server exited with status %d", e.Code)
}

// New checks cfg and decides, from the kernel's Landlock ABI, whether the
// run may start (Run resolves the runtime profile). A *ruleset.KernelError
// means the kernel cannot fence this run and --best-effort was not given.
func New(cfg Config) (*Launcher, error) {
	if cfg.Scope == nil {
		return nil, errors.New("no scope")
	}
	if len(cfg.Command) == 0 {
		return nil, errors.New("no server command; put it after '--'")
	}
	if cfg.AuditLog == nil {
		return nil, fmt.Errorf("%w: no audit log configured", ErrAudit)
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = schema.ModeEnforce
	case schema.ModeEnforce, schema.ModeAudit:
	default:
		return nil, fmt.Errorf("unknown mode %q; use enforce or audit", cfg.Mode)
	}
	if cfg.RunID == "" {
		cfg.RunID = schema.NewID()
	}
	if cfg.Mediator == nil {
		cfg.Mediator = Relay{}
	}
	if cfg.Stdin == nil {
		cfg.Stdin = os.Stdin
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.KernelABI == nil {
		cfg.KernelABI = KernelABI
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.Origin.Host == "" {
		cfg.Origin = schema.LocalOrigin()
	}
	if cfg.HelperPath == "" {
		p, err := DefaultHelperPath()
		if err != nil {
			return nil, err
		}
		cfg.HelperPath = p
	}
	if err := checkHelper(cfg.HelperPath); err != nil {
		return nil, err
	}
	op := DefaultLimits
	if cfg.Limits != nil {
		op = *cfg.Limits
	}
	if op.MaxProcesses < 0 || op.MaxMemoryMB < 0 || op.MaxFileSizeMB < 0 {
		return nil, errors.New("limits must not be negative (0 means no limit)")
	}
	limits, err := effectiveLimits(op, cfg.Scope.Limits)
	if err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		cfg.Dir = wd
	}
	env, dropped, err := serverEnv(EnvPolicy{Extra: cfg.Env, Clean: cfg.CleanEnv}, os.Environ())
	if err != nil {
		return nil, err
	}
	l := &Launcher{cfg: cfg, env: env, droppedEnv: dropped, limits: limits, openFiles: OpenFilesCeiling(limits.MaxProcesses)}
	l.requireProcs = cfg.RequireLimits || (cfg.Scope.Limits != nil && cfg.Scope.Limits.MaxProcesses > 0)
	l.requireMemory = cfg.RequireLimits || (cfg.Scope.Limits != nil && cfg.Scope.Limits.MaxMemoryMB > 0)
	if cfg.Mode == schema.ModeEnforce {
		l.decision, err = ruleset.Decide(cfg.KernelABI(), cfg.BestEffort)
		if err != nil {
			return nil, err
		}
	} else {
		l.decision = ruleset.Decision{ABI: min(cfg.KernelABI(), ruleset.MaxABI)}
	}
	if l.secretRE, l.unmaskRE, err = secretPatterns(&l.cfg); err != nil {
		return nil, err
	}
	if l.iso, err = planIsolation(&l.cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// resolve resolves the server's runtime profile and derives the run's
// ruleset, with tmp (the run's private temp dir; "" for a run refused
// before it had one) granted. Run calls it while the fence helper starts:
// neither depends on the other.
func (l *Launcher) resolve(tmp string) (*ruleset.Ruleset, error) {
	cfg := &l.cfg
	plan := newProfilePlan(cfg, envValue(l.env, "PATH"))
	prof, ok, err := cfg.Life.takeProfile(plan)
	if !ok {
		prof, err = plan.resolve()
	}
	l.profile = prof
	if err != nil {
		return nil, &StartError{Err: fmt.Errorf("runtime profile: %w", err)}
	}
	rs, err := ruleset.Derive(cfg.Scope, ruleset.Input{Profile: l.profile, TmpDir: tmp, AllowRuntime: cfg.AllowRuntime})
	if err != nil {
		return nil, &StartError{Err: err}
	}
	l.base = rs
	return rs, nil
}

// RunID is this run's id.
func (l *Launcher) RunID() string { return l.cfg.RunID }

// Decision is the strict/degraded decision for this kernel.
func (l *Launcher) Decision() ruleset.Decision { return l.decision }

// RecordRefusal writes the one launch record of a run that New refused
// (kernel capability, runtime profile): phase "exit", exit_status -1 and a
// stable reason class, to the audit log and the sink, so that refused runs
// are counted too. It returns the first write error.
func RecordRefusal(ctx context.Context, cfg Config, reason schema.ExitReason, kernelABI int) error {
	if cfg.AuditLog == nil || cfg.Scope == nil || len(cfg.Command) == 0 {
		return fmt.Errorf("%w: nothing to record the refusal in", ErrAudit)
	}
	if cfg.Origin.Host == "" {
		cfg.Origin = schema.LocalOrigin()
	}
	if cfg.Mode == "" {
		cfg.Mode = schema.ModeEnforce
	}
	now := time.Now()
	if cfg.Now != nil {
		now = cfg.Now()
	}
	ev := cfg.Origin.NewEvent(schema.KindLaunch, cfg.RunID, cfg.Scope.ScopeID, cfg.Scope.Hash, now)
	ev.Launch = &schema.Launch{
		Phase:       schema.PhaseExit,
		Mode:        cfg.Mode,
		LandlockABI: kernelABI,
		ServerExe:   filepath.Base(cfg.Command[0]),
		ExitStatus:  -1,
		ExitReason:  reason,
	}
	events := []schema.Event{ev}
	if err := cfg.AuditLog.Publish(ctx, events); err != nil {
		return fmt.Errorf("%w: %v", ErrAudit, err)
	}
	if cfg.Sink != nil {
		if err := cfg.Sink.Publish(ctx, events); err != nil {
			return fmt.Errorf("%w: sink: %v", ErrAudit, err)
		}
	}
	return nil
}

// DefaultHelperPath is mcpwarden-fence next to the running executable.
func DefaultHelperPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the fence helper: locate this executable: %w", err)
	}
	return filepath.Join(filepath.Dir(exe), sandbox.HelperName), nil
}

// checkHelper refuses a fence helper, or an exec stage next to it, that
// is missing, not executable, or writable by others (whoever can rewrite
// either controls every fenced server).
func checkHelper(path string) error {
	if err := checkBinary("fence helper", path); err != nil {
		return err
	}
	return checkBinary("exec stage", execStagePath(path))
}

// execStagePath is the exec stage (mcpwarden-exec) next to the fence helper.
func execStagePath(helper string) string {
	return filepath.Join(filepath.Dir(helper), sandbox.ExecStageName)
}

func checkBinary(what, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return missingBinary(what, path, err)
	}
	return checkMode(what, path, st)
}

func missingBinary(what, path string, err error) error {
	return fmt.Errorf("the %s %s is missing (%v): build it with 'make build', which puts it next to mcpwarden, or install it there", what, path, errors.Unwrap(err))
}

func checkMode(what, path string, st os.FileInfo) error {
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("the %s %s is not an executable file: rebuild it with 'make build'", what, path)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("the %s %s is writable by group or others (mode %v): fix it with chmod go-w %s", what, path, st.Mode().Perm(), path)
	}
	return nil
}

// openExecStage opens the exec stage next to the fence helper for one
// run, checked on the descriptor the helper will exec.
func openExecStage(helper string) (*os.File, error) {
	path := execStagePath(helper)
	f, err := os.Open(path)
	if err != nil {
		return nil, missingBinary("exec stage", path, err)
	}
	st, err := f.Stat()
	if err == nil {
		err = checkMode("exec stage", path, st)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
