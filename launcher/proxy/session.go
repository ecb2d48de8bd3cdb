package proxy

import (
	"context"
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

// initTimeout bounds the wait for the server's answer to the proxy's
// initialize. The client that caused it waits as long as it likes for a
// direct server, so the bound is generous: a node server on a loaded
// host took over 30 s (the old bound) to start (ci25, load 50).
const initTimeout = 2 * time.Minute

// session is one Mediate call. Its mutable state lives in the parts below,
// each with its own lock; state.go documents the lock order.
type session struct {
	p   *Proxy
	cfg *Config
	pol *policy.Policy
	tab *methods
	log *slog.Logger
	up  launcher.Upstream
	cw  *jsonrpc.Writer
	rec *recorder

	ctx    context.Context
	cancel context.CancelFunc

	nextID   atomic.Int64 // every id the proxy sends, upstream and to the client
	inFlight atomic.Int64 // requests waiting off the client's reader (see maxInFlight)

	restartMu sync.Mutex // serialises restarts; first in the lock order

	nonce  string       // names this session in the requestState of roots rounds
	mroots modernRoots  // roots rounds of a modern server (leaf lock)
	issued issuedTokens // cursors and requestStates the server handed the client (leaf lock; tokens.go)

	life     lifecycle
	changed  notifier
	refusals refusalLimiter // records of refused server requests (refusals.go)
	scope    scopeState
	upst     upstreamState
	pend     pendingTables
	client   clientState
}

func newSession(ctx context.Context, p *Proxy, clientOut io.Writer, up launcher.Upstream) *session {
	s := &session{
		p: p, cfg: &p.cfg, pol: p.policy, tab: p.methods, log: p.cfg.Logger, up: up,
		cw: jsonrpc.NewWriter(clientOut),
	}
	s.life.done = make(chan struct{})
	s.pend.up = map[int64]*upCall{}
	s.pend.cli = map[int64]*cliCall{}
	s.pend.awaiting = map[string]chan struct{}{}
	s.pend.tasks = map[string]taskToken{}
	s.pend.live = map[string]liveID{}
	s.pend.rounds = map[string]*mrtrCall{}
	s.nonce = schema.NewID()
	s.scope.effective = slices.Clone(p.cfg.Scope.AllowedPaths)
	s.scope.paths = roots.Paths(s.scope.effective)
	s.scope.gen = 1
	s.scope.publishLocked()
	s.upst.askedRoots = make(chan struct{})
	s.upst.fence = slices.Clone(p.cfg.Scope.AllowedPaths)
	s.upst.stdin = up.Stdin()
	s.upst.w = jsonrpc.NewWriter(rawWriter(s.upst.stdin))
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.rec = newRecorder(s)
	return s
}

func (s *session) run(clientIn io.Reader) error {
	defer s.cancel()
	go s.rec.run()
	go s.readUpstream(0, s.up.Stdout(), s.upst.w)

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
		case <-s.ctx.Done():
			s.stop(s.ctx.Err())
		case <-s.life.done:
		}
	}()
	go s.readClient(clientIn)

	<-s.life.done
	err := s.stopErr()
	// Every request still in flight gets an answer that says why.
	for _, c := range s.pend.takeAllUp() {
		if c.req != nil {
			s.answerStopped(c.req)
		} else if c.internal != nil {
			c.internal <- nil
		}
	}
	s.abandonRounds()
	s.closeRefusals()
	s.rec.close()
	if rerr := s.rec.err(); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// stop ends the session with err (nil: the server exited or the client
// left). On a policy stop the server's stdin is closed so it exits.
func (s *session) stop(err error) {
	s.life.mu.Lock()
	if s.life.stopped {
		s.life.mu.Unlock()
		return
	}
	s.life.stopped = true
	s.life.err = err
	close(s.life.done)
	s.life.mu.Unlock()
	s.changed.broadcast()
	if err != nil {
		s.log.Warn("proxy stopping the run", "reason", err.Error())
		s.upst.mu.Lock()
		stdin := s.upst.stdin
		s.upst.mu.Unlock()
		closeStdin(stdin)
	}
}

func (s *session) stopErr() error {
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return s.life.err
}

func (s *session) isStopped() bool {
	select {
	case <-s.life.done:
		return true
	default:
		return false
	}
}

// stopErrors are the denial codes that end the run, and the error it stops
// with: one table for the denials and for what a stopped run answers.
var stopErrors = map[schema.ErrorCode]error{
	schema.ErrScopeExpired:  ErrScopeExpired,
	schema.ErrScopeRevoked:  ErrScopeRevoked,
	schema.ErrAuditSinkFull: ErrAuditSink,
}

// stopReasons are what the client is told for each of them.
var stopReasons = map[schema.ErrorCode]string{
	schema.ErrScopeExpired:  "the scope expired; the server was stopped and every call is denied; issue a new scope and start the run again",
	schema.ErrScopeRevoked:  "the scope was revoked; the server was stopped and every call is denied",
	schema.ErrAuditSinkFull: "decision records cannot be written; the server was stopped and every call is denied",
}

// stopCode is the error class of a policy stop ("" when the session runs
// or the server exited).
func (s *session) stopCode() schema.ErrorCode {
	err := s.stopErr()
	if err == nil {
		return ""
	}
	for code, e := range stopErrors {
		if errors.Is(err, e) {
			return code
		}
	}
	return ""
}

// stopFor stops the run when code is one that ends it.
func (s *session) stopFor(code schema.ErrorCode) {
	if err, ok := stopErrors[code]; ok {
		s.stop(err)
	}
}

func (s *session) newID() int64 { return s.nextID.Add(1) }

// --- writing ---------------------------------------------------------------

func (s *session) toClient(frame []byte) {
	if err := s.cw.Write(frame); err != nil && !isClosedPipe(err) {
		s.log.Warn("write to client failed", "err", err.Error())
	}
}

// toServer writes to one server process (w was taken from upstreamState).
func (s *session) toServer(w *jsonrpc.Writer, frame []byte) {
	if err := w.Write(frame); err != nil && !isClosedPipe(err) {
		s.log.Warn("write to server failed", "err", err.Error())
	}
}

// internalCall sends a request of the proxy's own to the server and waits
// for the answer (nil on timeout or stop).
func (s *session) internalCall(method string, params any, timeout time.Duration) *jsonrpc.Message {
	ch, done := s.internalStart(method, params)
	defer done()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-ch:
		return m
	case <-t.C:
	case <-s.life.done:
	}
	return nil
}

// internalStart sends a request of the proxy's own to the server; its
// answer (nil when the process is replaced or answers too large) arrives
// on the channel. done forgets the request if it is still unanswered.
func (s *session) internalStart(method string, params any) (<-chan *jsonrpc.Message, func()) {
	ch := make(chan *jsonrpc.Message, 1)
	id := s.newID()
	s.upst.mu.Lock()
	w, gen := s.upst.w, s.upst.gen
	s.pend.mu.Lock()
	s.pend.up[id] = &upCall{gen: gen, internal: ch}
	s.pend.mu.Unlock()
	s.upst.mu.Unlock()
	s.toServer(w, jsonrpc.Request(jsonrpc.IntID(id), method, params))
	return ch, func() { s.pend.takeUp(id, gen) }
}

// --- roots -----------------------------------------------------------------

// askClientRoots sends roots/list to the client for a new generation.
func (s *session) askClientRoots() {
	if declared, _, _ := s.client.declared(); declared {
		s.sendRootsRequest()
	}
}

// sendRootsRequest begins a roots generation and asks the client for it;
// requests read after this wait for its answer.
func (s *session) sendRootsRequest() {
	if s.isStopped() {
		return
	}
	s.scope.mu.Lock()
	gen := s.scope.tracker.Begin()
	s.scope.mu.Unlock()
	id := s.newID()
	s.pend.addRootsAsk(id, &cliCall{rootsGen: gen})
	s.changed.broadcast()
	s.toClient(jsonrpc.Request(jsonrpc.IntID(id), "roots/list", rawEmptyObject))
}

// applyClientRoots handles the client's answer to roots/list generation gen.
//
// A client that declares roots but has none (go-sdk's and the Inspector's
// default) answers an empty list: while no answer of the client ever named
// a root, an empty answer narrows nothing. Once one did, an empty answer
// revokes every path (seed 001). An error or malformed answer always means
// no roots.
func (s *session) applyClientRoots(gen uint64, m *jsonrpc.Message) {
	var client []string
	valid := false
	if m.Error == nil {
		var err error
		client, err = roots.ParseResult(m.Result)
		if err != nil {
			s.log.Warn("client roots answer refused; no roots in effect", "err", err.Error())
			client = nil
		} else {
			valid = true
		}
	} else {
		s.log.Warn("client answered roots/list with an error; no roots in effect", "code", m.Error.Code)
	}
	s.scope.mu.Lock()
	if !s.scope.tracker.Accept(gen) {
		s.scope.mu.Unlock()
		s.log.Info("stale roots answer ignored", "generation", gen)
		return
	}
	s.narrowToClientRoots(valid, client)
}

// narrowToClientRoots sets the effective scope from a client's roots
// answer (valid: it parsed), in either era: while no answer of the client
// ever named a root, an empty one narrows nothing; after that, an empty
// one revokes every path; an invalid one always means no roots. Called
// with scope.mu held; returns with it released.
func (s *session) narrowToClientRoots(valid bool, client []string) {
	if valid && len(client) > 0 {
		s.scope.clientNamedRoots = true
	}
	if valid && len(client) == 0 && !s.scope.clientNamedRoots {
		s.scope.effective = slices.Clone(s.cfg.Scope.AllowedPaths)
		s.log.Warn("the client declares roots but has none: the scope is not narrowed until it names one")
	} else {
		s.scope.effective = roots.Intersect(s.cfg.Scope.AllowedPaths, client)
	}
	s.publishEffective()
}

// publishEffective makes s.scope.effective the scope in effect: the
// proxy's checks, and a restart of the server when its fence differs.
// Called with scope.mu held; returns with it released.
func (s *session) publishEffective() {
	s.scope.paths = roots.Paths(s.scope.effective)
	s.scope.gen++
	s.scope.publishLocked()
	n := len(s.scope.paths)
	s.upst.mu.Lock()
	needRestart := !roots.Equal(s.scope.effective, s.upst.fence)
	if needRestart {
		s.upst.restart = true
	}
	s.upst.mu.Unlock()
	s.scope.mu.Unlock()
	s.changed.broadcast()
	s.log.Info("effective scope changed", "paths", n, "restart", needRestart)
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
		if s.isStopped() {
			return
		}
		// Let a process that is still taking its first roots finish that
		// first (bounded): one killed while its roots/list is unanswered
		// lingers on the request's timeout instead of exiting on EOF.
		s.waitUpstream(func() bool { return s.upst.ready }, s.cfg.WarmupTimeout)
		if s.isStopped() {
			return
		}
		s.scope.mu.Lock()
		target := slices.Clone(s.scope.effective)
		s.upst.mu.Lock()
		if roots.Equal(target, s.upst.fence) && s.upst.ready {
			s.upst.restart = false
			s.upst.mu.Unlock()
			s.scope.mu.Unlock()
			s.changed.broadcast()
			return
		}
		s.upst.restart = true
		s.upst.ready = false
		s.upst.gen++
		gen := s.upst.gen
		s.upst.askedRoots = make(chan struct{})
		s.upst.mu.Unlock()
		s.scope.mu.Unlock()
		// Every request registered on the old process (each was decided
		// before gen changed) is answered, never retried: it may not be
		// idempotent.
		pending := s.pend.takeAllUp()
		s.changed.broadcast()
		for _, c := range pending {
			if c.req != nil {
				s.finish(c.req, errorFrame(c.req.id, jsonrpc.CodeInternalError, "the server was restarted to narrow its fence; the call was not retried"), "")
			} else if c.internal != nil {
				c.internal <- nil
			}
		}
		if err := s.up.Restart(s.ctx, target); err != nil {
			s.stop(errors.Join(ErrUpstream, err))
			return
		}
		s.upst.mu.Lock()
		s.upst.stdin = s.up.Stdin()
		s.upst.w = jsonrpc.NewWriter(rawWriter(s.upst.stdin))
		w := s.upst.w
		s.upst.fence = target
		s.upst.mu.Unlock()
		s.client.mu.Lock()
		gone := s.client.gone
		s.client.mu.Unlock()
		if gone {
			// The client left while the server restarted: nothing more to serve.
			closeStdin(s.up.Stdin())
			s.stop(nil)
			return
		}
		go s.readUpstream(gen, s.up.Stdout(), w)
		if err := s.handshake(false); err != nil {
			s.stop(errors.Join(ErrUpstream, err))
			return
		}
		s.log.Info("server restarted under a narrowed fence", "paths", len(target))
	}
}

// waitUpstream waits (bounded by d) until cond, evaluated under the
// upstream lock, holds or the session stops.
func (s *session) waitUpstream(cond func() bool, d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		ch := s.changed.wait()
		s.upst.mu.Lock()
		ok := cond()
		s.upst.mu.Unlock()
		left := time.Until(deadline)
		if ok || s.isStopped() || left <= 0 {
			return
		}
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		case <-s.life.done:
		}
		t.Stop()
	}
}
