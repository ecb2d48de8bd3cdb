package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/roots"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Protocol eras.
const (
	eraLegacy = "legacy"
	eraModern = "modern"
)

// ModernVersion is the one modern protocol version the proxy speaks.
const ModernVersion = "2026-07-28"

// LegacyVersions are the initialize-era versions, newest first.
var LegacyVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// _meta keys of the modern era.
const (
	metaVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCaps = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo = "io.modelcontextprotocol/clientInfo"
	metaServerInfo = "io.modelcontextprotocol/serverInfo"
)

const initTimeout = 30 * time.Second

// upCall is a request the proxy sent to the server.
type upCall struct {
	gen      uint64
	internal chan *jsonrpc.Message // proxy's own request: the answer goes here
	req      *request              // a client's request
}

// cliCall is a request the proxy sent to the client.
type cliCall struct {
	rootsGen uint64                // roots/list of this generation
	answer   chan *jsonrpc.Message // elicitation for an approval
	relayID  json.RawMessage       // a server request relayed to the client: the server's id
	relayGen uint64
}

// session is one Mediate call.
type session struct {
	p   *Proxy
	cfg *Config
	pol *policy.Policy
	log *slog.Logger
	up  launcher.Upstream
	cw  *jsonrpc.Writer
	rec *recorder

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed by stop

	inFlight atomic.Int64 // requests being handled (see maxInFlight)

	restartMu sync.Mutex // serialises restarts; taken before mu, never while holding it

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced whenever readiness may have changed
	stopErr    error
	stopped    bool
	nextID     int64
	upw        *jsonrpc.Writer
	upStdin    io.Writer
	upGen      uint64
	upEra      string
	upReady    bool
	initState  int // 0 not started, 1 running, 2 done
	initErr    error
	initParams map[string]json.RawMessage // legacy initialize params sent upstream, replayed on restart
	upInfo     map[string]json.RawMessage // initialize result (legacy) or discover result (modern)
	serverName string
	askedRoots chan struct{} // closed when the current server process asks roots/list
	rootsUser  bool          // the server asks for roots (seen once)
	rootsKnown bool          // whether the server asks for roots is known
	upPending  map[int64]*upCall
	cliPending map[int64]*cliCall
	awaiting   map[string]chan struct{} // client id → closed when the client cancels a call waiting for approval

	clientCaps    map[string]json.RawMessage
	clientVersion string
	clientRoots   bool // the client declared the roots capability
	clientElicit  bool
	clientSample  bool
	tracker       roots.Tracker
	rootsWanted   bool // ask the client for roots once it is initialized
	effective     []schema.CanonicalPath
	effPaths      []string
	effGen        uint64 // bumped whenever effective changes; starts at 1 (0 means "check again")
	fence         []schema.CanonicalPath
	restarting    bool
	clientGone    bool
}

func newSession(ctx context.Context, p *Proxy, clientOut io.Writer, up launcher.Upstream) *session {
	s := &session{
		p: p, cfg: &p.cfg, pol: p.policy, log: p.cfg.Logger, up: up,
		cw:         jsonrpc.NewWriter(clientOut),
		done:       make(chan struct{}),
		changed:    make(chan struct{}),
		upPending:  map[int64]*upCall{},
		cliPending: map[int64]*cliCall{},
		awaiting:   map[string]chan struct{}{},
		askedRoots: make(chan struct{}),
		effective:  slices.Clone(p.cfg.Scope.AllowedPaths),
		fence:      slices.Clone(p.cfg.Scope.AllowedPaths),
		effGen:     1,
	}
	s.effPaths = roots.Paths(s.effective)
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.upStdin = up.Stdin()
	s.upw = jsonrpc.NewWriter(s.upStdin)
	s.rec = newRecorder(s)
	return s
}

func (s *session) run(clientIn io.Reader) error {
	defer s.cancel()
	go s.rec.run()
	go s.readUpstream(0, s.up.Stdout(), s.upw, s.up.Done())

	if d := s.cfg.Scope.NotAfter.Sub(s.cfg.Now()); d <= 0 {
		s.stop(ErrScopeExpired)
	} else {
		t := time.AfterFunc(d, func() { s.stop(ErrScopeExpired) })
		defer t.Stop()
	}
	go func() {
		select {
		case <-s.p.revokeC:
			s.stop(ErrScopeRevoked)
		case <-s.done:
		}
	}()
	go func() {
		select {
		case <-s.ctx.Done():
			s.stop(s.ctx.Err())
		case <-s.done:
		}
	}()
	go s.readClient(clientIn)

	<-s.done
	s.mu.Lock()
	err := s.stopErr
	pending := s.upPending
	s.upPending = map[int64]*upCall{}
	s.mu.Unlock()
	for _, c := range pending {
		if c.req != nil {
			s.finish(c.req, nil, errorFrame(c.req.id, jsonrpc.CodeInternalError, "the server stopped before answering"), schema.ErrorCode(""))
		}
	}
	s.rec.close()
	if rerr := s.rec.err(); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// stop ends the session with err (nil: the server exited or the client
// left). On a policy stop the server's stdin is closed so it exits.
func (s *session) stop(err error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.stopErr = err
	stdin := s.upStdin
	s.broadcastLocked()
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("proxy stopping the run", "reason", err.Error())
		closeStdin(stdin)
	}
	close(s.done)
}

func (s *session) stopReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopErr == nil {
		return "the server exited"
	}
	return s.stopErr.Error()
}

// stopCode is the error class of a policy stop ("" when the server exited).
func (s *session) stopCode() schema.ErrorCode {
	s.mu.Lock()
	defer s.mu.Unlock()
	for code, err := range stopErrors {
		if errors.Is(s.stopErr, err) {
			return code
		}
	}
	return ""
}

// stopErrors are the denial codes that end the run, and the error it stops
// with: one table for the denials and for what a stopped run answers.
var stopErrors = map[schema.ErrorCode]error{
	schema.ErrScopeExpired:  ErrScopeExpired,
	schema.ErrScopeRevoked:  ErrScopeRevoked,
	schema.ErrAuditSinkFull: ErrAuditSink,
}

// stopFor stops the run when code is one that ends it.
func (s *session) stopFor(code schema.ErrorCode) {
	if err, ok := stopErrors[code]; ok {
		s.stop(err)
	}
}

func (s *session) isStopped() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// broadcastLocked wakes every goroutine waiting for a state change.
func (s *session) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *session) newIDLocked() int64 {
	s.nextID++
	return s.nextID
}

// --- writing ---------------------------------------------------------------

func (s *session) toClient(frame []byte) {
	if err := s.cw.Write(frame); err != nil && !isClosedPipe(err) {
		s.log.Warn("write to client failed", "err", err.Error())
	}
}

// toServer writes to the current server process. w was captured under mu.
func (s *session) toServer(w *jsonrpc.Writer, frame []byte) {
	if err := w.Write(frame); err != nil && !isClosedPipe(err) {
		s.log.Warn("write to server failed", "err", err.Error())
	}
}

// internalCall sends a request of the proxy's own to the server and waits
// for the answer (nil on timeout or stop).
func (s *session) internalCall(method string, params any, timeout time.Duration) *jsonrpc.Message {
	ch := make(chan *jsonrpc.Message, 1)
	s.mu.Lock()
	id := s.newIDLocked()
	s.upPending[id] = &upCall{gen: s.upGen, internal: ch}
	w := s.upw
	s.mu.Unlock()
	s.toServer(w, jsonrpc.Request(jsonrpc.IntID(id), method, params))
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-ch:
		return m
	case <-t.C:
	case <-s.done:
	}
	s.mu.Lock()
	delete(s.upPending, id)
	s.mu.Unlock()
	return nil
}

// --- readiness -------------------------------------------------------------

// errNotReady is why a call could not wait for the proxy to be ready.
var errNotReady = errors.New("not ready")

// waitReadyLocked waits until the upstream is initialised, no roots refresh
// is pending and no restart is running. A pending roots refresh may hold a
// call for RootsTimeout, a restart for RestartTimeout. Called and returns
// with mu held.
func (s *session) waitReadyLocked(start time.Time) error {
	rootsDeadline := start.Add(s.cfg.RootsTimeout)
	restartDeadline := start.Add(s.cfg.RestartTimeout)
	for {
		if s.stopped {
			return errNotReady
		}
		if s.upReady && !s.restarting && !s.tracker.Pending() {
			return nil
		}
		deadline := restartDeadline
		if s.tracker.Pending() {
			deadline = rootsDeadline
		}
		ch := s.changed
		s.mu.Unlock()
		d := time.Until(deadline)
		if d <= 0 {
			s.mu.Lock()
			return errNotReady
		}
		t := time.NewTimer(d)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		s.mu.Lock()
	}
}

// --- roots -----------------------------------------------------------------

// askClientRoots sends roots/list to the client for a new generation.
func (s *session) askClientRoots() {
	s.mu.Lock()
	declared := s.clientRoots
	s.mu.Unlock()
	if declared {
		s.sendRootsRequest()
	}
}

// applyClientRoots handles the client's answer to roots/list generation gen.
func (s *session) applyClientRoots(gen uint64, m *jsonrpc.Message) {
	var client []string
	if m.Error == nil {
		var err error
		client, err = roots.ParseResult(m.Result)
		if err != nil {
			s.log.Warn("client roots answer refused; no roots in effect", "err", err.Error())
			client = nil
		}
	} else {
		s.log.Warn("client answered roots/list with an error; no roots in effect", "code", m.Error.Code)
	}
	s.mu.Lock()
	if !s.tracker.Accept(gen) {
		s.mu.Unlock()
		s.log.Info("stale roots answer ignored", "generation", gen)
		return
	}
	s.effective = roots.Intersect(s.cfg.Scope.AllowedPaths, client)
	s.effPaths = roots.Paths(s.effective)
	s.effGen++
	needRestart := !roots.Equal(s.effective, s.fence)
	if needRestart {
		s.restarting = true
	}
	s.broadcastLocked()
	s.mu.Unlock()
	s.log.Info("effective scope changed", "paths", len(s.effPaths), "restart", needRestart)
	if needRestart {
		go s.restartLoop()
	}
}

// restartLoop restarts the server until its fence matches the effective
// scope (the scope may change again while a restart runs).
func (s *session) restartLoop() {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		// Let a process that is still taking its first roots finish that
		// first (bounded): one killed while its roots/list is unanswered
		// lingers on the request's timeout instead of exiting on EOF.
		deadline := time.Now().Add(s.cfg.WarmupTimeout)
		for !s.upReady && !s.stopped && time.Now().Before(deadline) {
			ch := s.changed
			s.mu.Unlock()
			select {
			case <-ch:
			case <-time.After(time.Until(deadline)):
			}
			s.mu.Lock()
		}
		if s.stopped {
			s.mu.Unlock()
			return
		}
		if roots.Equal(s.effective, s.fence) && s.upReady {
			s.restarting = false
			s.broadcastLocked()
			s.mu.Unlock()
			return
		}
		target := slices.Clone(s.effective)
		s.restarting = true
		s.upReady = false
		s.upGen++
		gen := s.upGen
		pending := s.upPending
		s.upPending = map[int64]*upCall{}
		s.askedRoots = make(chan struct{})
		s.broadcastLocked()
		s.mu.Unlock()

		// Calls in flight on the old process are answered, never retried:
		// they may not be idempotent.
		for _, c := range pending {
			if c.req != nil {
				s.finish(c.req, nil, errorFrame(c.req.id, jsonrpc.CodeInternalError, "the server was restarted to narrow its fence; the call was not retried"), "")
			} else if c.internal != nil {
				c.internal <- nil
			}
		}
		if err := s.up.Restart(s.ctx, target); err != nil {
			s.stop(errors.Join(ErrUpstream, err))
			return
		}
		s.mu.Lock()
		s.upStdin = s.up.Stdin()
		s.upw = jsonrpc.NewWriter(s.upStdin)
		w := s.upw
		s.fence = target
		gone := s.clientGone
		s.mu.Unlock()
		if gone {
			// The client left while the server restarted: nothing more to serve.
			closeStdin(s.up.Stdin())
			s.stop(nil)
			return
		}
		go s.readUpstream(gen, s.up.Stdout(), w, s.up.Done())
		if err := s.handshake(false); err != nil {
			s.stop(errors.Join(ErrUpstream, err))
			return
		}
		s.log.Info("server restarted under a narrowed fence", "paths", len(target))
	}
}
