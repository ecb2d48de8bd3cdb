// Package proxy is the protocol-aware Mediator of the launcher: it reads
// every JSON-RPC message between an MCP client and the wrapped server,
// decides each call against the scope before the server sees it (tool
// allowlist, action class, paths, secrets, approvals, attribution, expiry),
// adapts between protocol eras, answers the server's roots/list itself and
// records a sanitized decision for every call.
//
// Every message passes through one table (methods.go: deny by default) and
// every forwarded request through one admission gate (gate.go). The
// session's state is split into parts with their own locks; state.go
// documents the lock order.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Errors Mediate returns when it stops the run. The scope's end wraps the
// launcher's sentinels, which make the launcher kill the whole run at once
// and record why.
var (
	ErrScopeExpired = fmt.Errorf("%w: every call is denied and the server was stopped; issue a new scope", launcher.ErrScopeExpired)
	ErrScopeRevoked = fmt.Errorf("%w: every call is denied and the server was stopped", launcher.ErrScopeRevoked)
	ErrAuditSink    = fmt.Errorf("%w: decision records cannot be written: every call is denied and the server was stopped; fix the audit log or sink", launcher.ErrAudit)
	ErrUpstream     = errors.New("upstream server")
)

// Approvals is where out-of-band approvals arrive (the approval socket).
type Approvals interface {
	Register(p approval.Pending) <-chan bool
	Unregister(opID string)
}

// Defaults for Config fields left zero.
const (
	DefaultMaxResponseBytes = 8 << 20
	DefaultApprovalTimeout  = 2 * time.Minute
	DefaultRootsTimeout     = 10 * time.Second
	DefaultProbeTimeout     = 3 * time.Second
	DefaultWarmupTimeout    = 10 * time.Second
	DefaultRestartTimeout   = 2 * time.Minute
)

// Config is one proxied run.
type Config struct {
	Scope  *schema.CanonicalScope
	RunID  string
	Origin schema.Origin
	Hasher *schema.PathHasher
	// Sink takes decision records; required. The launcher passes one that
	// writes the local audit log and, when configured, the event sink.
	Sink      launcher.Sink
	Logger    *slog.Logger
	Approvals Approvals // nil: only elicitation can approve
	// ServerOrigin names the server in records until its serverInfo is known
	// (the executable's base name).
	ServerOrigin string
	// OnServerInfo, when set, is called once per run as soon as the
	// upstream's protocol era and serverInfo are known (after the probe and
	// the handshake), with the name and version the server reported
	// (either may be empty) and the era ("legacy" or "modern"). The
	// launcher records them in a launch record (phase identified).
	OnServerInfo func(name, version, era string)
	// MaxMessageBytes limits one JSON-RPC frame in either direction
	// (default 16 MiB); MaxResponseBytes limits one tools/call or
	// resources/read response (default 8 MiB).
	MaxMessageBytes  int
	MaxResponseBytes int
	SecretPatterns   []string // nil: schema.DefaultSecretPatterns
	// Home is what '~' in a path argument expands to: the server's $HOME.
	Home string
	// WorkDir is the server's working directory (default: the proxy's
	// own, as the launcher's): a relative name in the arguments of a tool
	// that is not the filesystem server's is checked against it as well as
	// against the base.
	WorkDir         string
	ApprovalTimeout time.Duration
	RootsTimeout    time.Duration // how long a call waits for the client's roots answer
	RestartTimeout  time.Duration // how long a call waits for a narrowing restart of the server
	ProbeTimeout    time.Duration // server/discover probe of the upstream
	WarmupTimeout   time.Duration // wait for a roots server to take its roots after (re)start
	InputTimeout    time.Duration // how long a translated input_required round waits for the client's retry
	// FlushDelay is how long a decision record may wait to be batched with
	// the next ones (default DefaultFlushDelay; negative: write each batch
	// at once).
	FlushDelay time.Duration
	Now        func() time.Time
}

// Proxy is the protocol-aware launcher.Mediator.
type Proxy struct {
	cfg     Config
	policy  *policy.Policy
	methods *methods
	revoked atomic.Bool
	revokeC chan struct{}
}

// New checks cfg and builds a Proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Scope == nil {
		return nil, errors.New("proxy: no scope")
	}
	if cfg.Sink == nil {
		return nil, errors.New("proxy: no sink for decision records")
	}
	if cfg.Hasher == nil {
		return nil, errors.New("proxy: no path hasher")
	}
	if cfg.RunID == "" {
		return nil, errors.New("proxy: no run id")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = jsonrpc.DefaultMaxFrame
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = DefaultApprovalTimeout
	}
	if cfg.RootsTimeout <= 0 {
		cfg.RootsTimeout = DefaultRootsTimeout
	}
	if cfg.RestartTimeout <= 0 {
		cfg.RestartTimeout = DefaultRestartTimeout
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.WarmupTimeout <= 0 {
		cfg.WarmupTimeout = DefaultWarmupTimeout
	}
	if cfg.InputTimeout <= 0 {
		cfg.InputTimeout = DefaultInputTimeout
	}
	if cfg.FlushDelay == 0 {
		cfg.FlushDelay = DefaultFlushDelay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WorkDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("proxy: working directory: %w", err)
		}
		cfg.WorkDir = wd
	}
	pol, err := policy.New(policy.Config{Scope: cfg.Scope, SecretPatterns: cfg.SecretPatterns, Home: cfg.Home, WorkDir: cfg.WorkDir})
	if err != nil {
		return nil, fmt.Errorf("proxy policy: %w", err)
	}
	return &Proxy{cfg: cfg, policy: pol, methods: newMethods(), revokeC: make(chan struct{})}, nil
}

// Revoke revokes the scope: every later call is denied and the running
// session stops its server. Safe to call more than once, from any goroutine.
func (p *Proxy) Revoke() {
	if p.revoked.CompareAndSwap(false, true) {
		close(p.revokeC)
	}
}

// Mediate runs the proxy between the client and the server until the client
// goes away and the server exits, the scope expires or is revoked, or ctx
// ends. On a stop it closes the server's stdin; the launcher stops the rest.
func (p *Proxy) Mediate(ctx context.Context, clientIn io.Reader, clientOut io.Writer, up launcher.Upstream) error {
	s := newSession(ctx, p, clientOut, up)
	return s.run(clientIn)
}

var _ launcher.Mediator = (*Proxy)(nil)

func closeStdin(w io.Writer) {
	if c, ok := w.(io.Closer); ok {
		_ = c.Close()
	}
}

// isClosedPipe reports errors that only mean the other side went away.
func isClosedPipe(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
