package proxy

import (
	"errors"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
)

// admission is what the gate still has to decide for one request once its
// method's decide step passed it.
type admission struct {
	// check decides the request against one generation of the effective
	// scope (paths, URIs); nil when the method touches no path. It may
	// touch the filesystem and runs without locks. It returns the resolved
	// paths it checked, for the record's keyed hashes.
	check func(eff *scopeView) ([]string, *policy.Denial)
	// approval: wait for an approval after the first passing check, then
	// check again (the filesystem may have changed during the wait).
	approval bool
	tool     string // for the approval request
	class    policy.Class
}

// admit is the one admission gate every forwarded client request passes:
//
//	scope state (expired, revoked, audit sink) → upstream ready (initialised,
//	no restart, no roots refresh pending) → check → approval → re-check if
//	the effective scope changed meanwhile → forward.
//
// The last step registers and forwards the request only if the effective
// scope's generation is still the one it was checked against, decided under
// the scope and upstream locks; otherwise it goes round again. A fix to the
// check-then-forward race therefore lives here and nowhere else.
//
// With inline, admit runs on the client's reader and must not wait: a
// request that would (the upstream is not ready, a roots refresh or restart
// is pending, an approval is needed) continues on a goroutine of its own.
func (s *session) admit(rq *request, a admission, inline bool) {
	var checked uint64 // the scope generation the request was last checked against; 0: not yet
	var paths []string // what the last check resolved, for the approver
	approved := !a.approval
	for {
		if s.pend.isCancelled(rq) {
			s.dropCancelled(rq)
			return
		}
		if code, reason := s.scopeStop(); code != "" {
			s.deny(rq, code, reason)
			return
		}
		if !s.readyNow() {
			if inline {
				s.continueAsync(rq, a)
				return
			}
			if err := s.waitReady(rq); err != nil {
				if errors.Is(err, errCancelled) {
					s.dropCancelled(rq)
					return
				}
				if code, reason := s.scopeStop(); code != "" {
					s.deny(rq, code, reason)
					return
				}
				s.deny(rq, schema.ErrRootsPending, err.Error())
				return
			}
		}
		view := s.scope.current()
		if checked != view.gen {
			if a.check != nil {
				var d *policy.Denial
				paths, d = a.check(view)
				rq.paths = rq.paths[:0]
				s.hashPaths(rq, paths)
				if d != nil {
					s.deny(rq, d.Code, d.Reason)
					return
				}
			}
			checked = view.gen
		}
		if !approved {
			if inline {
				s.continueAsync(rq, a)
				return
			}
			if code := s.approve(rq, a, paths); code != "" {
				if stop, reason := s.scopeStop(); stop != "" {
					s.deny(rq, stop, reason) // the run stopped during the wait: say why
					return
				}
				s.deny(rq, code, "the call needs an approval and did not get one")
				return
			}
			approved = true
			checked = 0 // check the paths again: the wait may have been long
			continue
		}
		if s.forwardIfCurrent(rq, checked) {
			return
		}
		// The scope changed or the upstream stopped being ready between
		// the check and now: go round again.
	}
}

// continueAsync moves a request that must wait off the client's reader,
// so the client's other messages keep flowing. At most maxInFlight wait at
// once; beyond that requests are refused.
func (s *session) continueAsync(rq *request, a admission) {
	if s.inFlight.Add(1) > maxInFlight {
		s.inFlight.Add(-1)
		s.pend.release(rq)
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: too many requests waiting; wait for answers before sending more", nil))
		s.record(rq, schema.ErrMalformedRequest)
		return
	}
	go func() {
		defer s.inFlight.Add(-1)
		s.admit(rq, a, false)
	}()
}

// maxInFlight bounds the requests waiting at once (each may wait for an
// approval, a roots refresh or a restart).
const maxInFlight = 1024

// readyNow reports, without waiting, whether a request could be forwarded:
// the upstream is initialised and ready, no restart and no roots refresh
// is pending, and the session runs.
func (s *session) readyNow() bool {
	if s.isStopped() {
		return false
	}
	s.scope.mu.Lock()
	pending := s.scope.tracker.Pending()
	s.scope.mu.Unlock()
	if pending {
		return false
	}
	s.upst.mu.Lock()
	defer s.upst.mu.Unlock()
	return s.upst.initState == 2 && s.upst.initErr == nil && s.upst.ready && !s.upst.restart
}

// errCancelled: the client cancelled the request while it waited.
var errCancelled = errors.New("the client cancelled the request")

// errNotReady is why a request could not wait for the proxy to be ready.
var errNotReady = errors.New("the client's roots refresh or the server's restart did not finish in time")

// waitReady initialises the upstream on first use and waits until a request
// can be forwarded. A pending roots refresh may hold a request for
// RootsTimeout, a restart or the first handshake for RestartTimeout.
func (s *session) waitReady(rq *request) error {
	if err := s.ensureUpstream(rq.era, nil, rq.raw.MetaMembers); err != nil {
		return errors.New("the upstream server could not be started")
	}
	start := time.Now()
	rootsDeadline := start.Add(s.cfg.RootsTimeout)
	restartDeadline := start.Add(s.cfg.RestartTimeout)
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	cancelled := s.pend.gateCancelled(rq)
	for {
		ch := s.changed.wait()
		if s.isStopped() {
			return errNotReady
		}
		select {
		case <-cancelled:
			return errCancelled
		default:
		}
		if s.readyNow() {
			return nil
		}
		s.scope.mu.Lock()
		rootsPending := s.scope.tracker.Pending()
		s.scope.mu.Unlock()
		deadline := restartDeadline
		if rootsPending {
			deadline = rootsDeadline
		}
		d := time.Until(deadline)
		if d <= 0 {
			return errNotReady
		}
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-ch:
		case <-t.C:
		case <-s.life.done:
		case <-cancelled:
		}
	}
}

// forwardIfCurrent registers rq and writes it upstream if the effective
// scope is still generation checked and the upstream is ready; it reports
// whether it did. The decision is taken under the scope and upstream locks
// (in that order); the write happens after they are released, to the
// process that was current then. A restart that begins after the decision
// answers the request with an error (it is registered with its process's
// generation), so a request is never silently served by a process that was
// replaced.
func (s *session) forwardIfCurrent(rq *request, checked uint64) bool {
	s.scope.mu.Lock()
	if s.scope.gen != checked || s.scope.tracker.Pending() || s.isStopped() {
		s.scope.mu.Unlock()
		return false
	}
	s.upst.mu.Lock()
	if !s.upst.ready || s.upst.restart {
		s.upst.mu.Unlock()
		s.scope.mu.Unlock()
		return false
	}
	s.pend.mu.Lock()
	if rq.cancelled {
		// The client cancelled it since the last look: the caller drops it.
		s.pend.mu.Unlock()
		s.upst.mu.Unlock()
		s.scope.mu.Unlock()
		return false
	}
	id := s.newID()
	rq.upID = id
	// Set before the request is registered: from then on a stop or a
	// restart may answer (and deny) it on another goroutine, and nothing
	// here may write to it.
	rq.dec.Decision = schema.OutcomeAllow
	s.pend.up[id] = &upCall{gen: s.upst.gen, req: rq}
	s.pend.mu.Unlock()
	w, era, gen := s.upst.w, s.upst.era, s.upst.gen
	s.upst.mu.Unlock()
	s.scope.mu.Unlock()
	if s.isStopped() {
		// The run stopped between the check and the registration: the
		// stop's sweep of the table may have run already. Whoever takes
		// the request back answers it, once.
		if _, ok := s.pend.takeUp(id, gen); ok {
			s.answerStopped(rq)
		}
		return true
	}
	s.toServer(w, s.upstreamFrame(rq, era, id))
	return true
}

// dropCancelled ends a request the client cancelled before it was
// forwarded: it is never sent, gets no answer (a cancelled request gets
// none in MCP; the client has stopped waiting for it), its id is free and
// its record says CANCELLED.
func (s *session) dropCancelled(rq *request) {
	s.pend.release(rq)
	if rq.dec != nil {
		rq.dec.Decision = schema.OutcomeDeny
	}
	s.record(rq, schema.ErrCancelled)
}

// cancelLocked marks rq cancelled by the client before it was forwarded
// and wakes the gate if it waits.
func (pt *pendingTables) cancelLocked(rq *request) {
	if rq.cancelled {
		return
	}
	rq.cancelled = true
	if rq.gateCancel != nil {
		close(rq.gateCancel)
	}
}

func (pt *pendingTables) isCancelled(rq *request) bool {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return rq.cancelled
}

// gateCancelled is closed when the client cancels rq before it is
// forwarded (made on first use: most requests never wait).
func (pt *pendingTables) gateCancelled(rq *request) <-chan struct{} {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if rq.gateCancel == nil {
		rq.gateCancel = make(chan struct{})
		if rq.cancelled {
			close(rq.gateCancel)
		}
	}
	return rq.gateCancel
}

// scopeStop reports an expired or revoked scope, a failed audit sink, or a
// run that stopped for one of them.
func (s *session) scopeStop() (schema.ErrorCode, string) {
	if code := s.stopCode(); code != "" {
		return code, stopReasons[code]
	}
	switch {
	case s.p.revoked.Load():
		return schema.ErrScopeRevoked, stopReasons[schema.ErrScopeRevoked]
	case s.cfg.Scope.Expired(s.cfg.Now()):
		return schema.ErrScopeExpired, stopReasons[schema.ErrScopeExpired]
	case s.rec.failed():
		return schema.ErrAuditSinkFull, stopReasons[schema.ErrAuditSinkFull]
	}
	return "", ""
}

// hashPaths adds paths to those of rq's record. The record writer hashes
// them (keyed) into its path_hashes, off the call path (recorder.event).
func (s *session) hashPaths(rq *request, paths []string) {
	rq.paths = append(rq.paths, paths...)
}
