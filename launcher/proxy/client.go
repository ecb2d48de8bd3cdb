package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// request is one client request in flight.
type request struct {
	id      json.RawMessage // the client's id, byte for byte
	method  string
	rule    *clientMethod
	raw     *jsonrpc.Message // params and params._meta are read through it
	era     string
	version string
	start   time.Time
	dec     *schema.Decision // every request that passes the gate, or is refused by it
	// decStore holds dec (one allocation per request, not two); paths
	// are the record's resolved paths, hashed by the record writer
	// (hashPaths).
	decStore schema.Decision
	paths    []string
	upID     int64  // proxy id upstream, once forwarded
	key      string // idKey(id), once looked up (ids.go)
	rounds   int    // input rounds of a modern server the proxy played for this legacy call (legacyrounds.go)
	// mrtr is set when the server asked this (modern) call for client
	// input that the proxy translates into input_required rounds (mrtr.go).
	mrtr atomic.Pointer[mrtrCall]
	// ownState is the server's own requestState of a tagged roots round.
	ownState *stateRestore
	// cancelled: the client cancelled the request before it was forwarded
	// (gate.go); gateCancel, once made, is closed then. Both under
	// pendingTables.mu.
	cancelled  bool
	gateCancel chan struct{}
}

var rawEmptyObject = json.RawMessage(`{}`)

// clientHeadID is compiled on first use: its bounded repetitions make a
// large program that every mcpwarden command would otherwise pay for at start.
var clientHeadID = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\s*\{[^{}]*?"id"\s*:\s*(-?[0-9]{1,19}|"[^"\\]{0,256}")`)
})

func (s *session) readClient(in io.Reader) {
	r := jsonrpc.NewReader(in, s.cfg.MaxMessageBytes)
	for {
		frame, err := r.Next()
		if errors.Is(err, jsonrpc.ErrFrameTooLarge) {
			id := jsonrpc.NullID
			if mm := clientHeadID().FindSubmatch(r.Head); mm != nil {
				id = append(json.RawMessage(nil), mm[1]...)
			}
			s.toClient(jsonrpc.ErrorResponse(id, jsonrpc.CodeInvalidRequest, "message larger than the proxy's limit of "+strconv.Itoa(s.cfg.MaxMessageBytes)+" bytes", nil))
			s.recordProtocolDenial("", eraLegacy, "", schema.ErrMalformedRequest)
			continue
		}
		if err != nil {
			break
		}
		m, perr := jsonrpc.Parse(frame)
		if perr != nil {
			var pe *jsonrpc.ParseError
			code, id := jsonrpc.CodeParseError, json.RawMessage(nil)
			if errors.As(perr, &pe) {
				code, id = pe.Code, pe.ID
			}
			s.toClient(jsonrpc.ErrorResponse(id, code, perr.Error(), nil))
			s.recordProtocolDenial("", eraLegacy, "", schema.ErrMalformedRequest)
			continue
		}
		switch m.Kind {
		case jsonrpc.KindRequest:
			s.onClientRequest(m)
		case jsonrpc.KindNotification:
			s.onClientNotification(m)
		case jsonrpc.KindResponse:
			s.onClientResponse(m)
		}
	}
	// The client went away: give the server EOF; it exits and readUpstream
	// ends the session. A server still taking its first roots gets that
	// (bounded) time first: killed mid-request it would linger on the
	// request's timeout instead of exiting.
	s.client.mu.Lock()
	s.client.gone = true
	s.client.mu.Unlock()
	s.waitUpstream(func() bool { return s.upst.initState != 2 || s.upst.ready }, s.cfg.WarmupTimeout)
	s.upst.mu.Lock()
	stdin := s.upst.stdin
	s.upst.mu.Unlock()
	closeStdin(stdin)
}

// onClientRequest reads the envelope of a request, finds its row in the
// method table and serves it, passes it to the admission gate, or refuses
// it. A request the table does not name is refused and recorded.
func (s *session) onClientRequest(m *jsonrpc.Message) {
	rq := &request{id: m.ID, method: m.Method, raw: m, start: s.cfg.Now(), era: eraLegacy}
	if s.isStopped() {
		// The run was stopped (expiry, revocation, audit failure): every
		// request still gets an answer, none reaches the server.
		s.readEra(rq)
		s.answerStopped(rq)
		return
	}
	if s.refuseDuplicateID(rq) {
		return
	}
	if !s.readEnvelope(rq) {
		return
	}
	rule := s.tab.requests[m.Method]
	if rule == nil || !rule.eras.has(rq.era) {
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeMethodNotFound, "method not available through mcpwarden", nil))
		s.recordRefusedMethod(m.Method, rq.era, rq.version)
		return
	}
	rq.rule = rule
	if rq.era == eraModern && s.resumeInput(rq) {
		return
	}
	if rule.serve != nil {
		rule.serve(s, rq)
		return
	}
	rq.dec = s.newDecision(rq, "", policy.ClassRead)
	a, d := rule.decide(s, rq)
	if d != nil {
		if d.Code == schema.ErrMalformedRequest {
			s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeInvalidParams, d.Reason, nil))
			s.record(rq, d.Code)
			return
		}
		s.deny(rq, d.Code, d.Reason)
		return
	}
	a.check = s.checkRest(rq, a.check)
	s.pend.claim(rq, rq) // in flight until finish answers it
	s.admit(rq, a, true)
}

// opaqueToken: v is what the schema lets a token be — a string (and, for
// a progress token, a number). An object or array in its place is
// checked as any member (round eleven: before, one reached the server
// unchecked); a string is checked as a token (tokens.go, round twelve).
func opaqueToken(v json.RawMessage, number bool) bool {
	return len(v) > 0 && (v[0] == '"' || number && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'))
}

// checkRest adds to check the params members the method does not read
// itself, and _meta: a path in any of them (a server may read one there)
// is checked like a prompt's argument, without looking names up.
func (s *session) checkRest(rq *request, check func(*scopeView) ([]string, *policy.Denial)) func(*scopeView) ([]string, *policy.Denial) {
	var rest []json.RawMessage
	var answers json.RawMessage
	var tokens [][2]string // key, the client's string token: tokens.go
	for _, m := range rq.raw.ParamMembers {
		if string(m.Key) == "inputResponses" {
			// The client's answers to the server (the protocol's own:
			// roots answers in them are rewritten, see
			// rootsInputResponses; the rest is checked by
			// inputAnswersCheck).
			answers = m.Value
			continue
		}
		// (Keys are compared as bytes: no string is made for a member
		// that needs no check.)
		if slices.ContainsFunc(rq.rule.own, func(k string) bool { return k == string(m.Key) }) {
			continue
		}
		if tokenMethods[string(m.Key)][rq.method] && opaqueToken(m.Value, false) {
			// A cursor, a requestState (round twelve: unread only when
			// the server issued it).
			if !policy.TokenMayHoldPath(m.Value) {
				continue
			}
			if tok, ok := jsonrpc.String(m.Value); ok {
				if !s.issued.has(tok) {
					tokens = append(tokens, [2]string{string(m.Key), tok})
				}
				continue
			}
		}
		if string(m.Key) == "_meta" {
			for _, mm := range rq.raw.MetaMembers {
				if string(mm.Key) == "progressToken" && opaqueToken(mm.Value, true) {
					// The client's own: a string is checked as a token.
					if mm.Value[0] != '"' || !policy.TokenMayHoldPath(mm.Value) {
						continue // a number is never a path; nor is a token as SDKs make them
					}
					if tok, ok := jsonrpc.String(mm.Value); ok {
						tokens = append(tokens, [2]string{"progressToken", tok})
						continue
					}
				}
				// The era's own keys hold a '/' by name: only their values may hold a path.
				ownKey := string(mm.Key) == metaVersion || string(mm.Key) == metaClientCaps || string(mm.Key) == metaClientInfo
				if (!ownKey && (policy.MayHoldPath(mm.Key) || policy.MayNameSecret(mm.Value))) || policy.MayHoldPath(mm.Value) {
					rest = append(rest, mustJSON(map[string]json.RawMessage{string(mm.Key): mm.Value}))
				}
			}
			continue
		}
		if policy.MayHoldPath(m.Key) || policy.MayHoldPath(m.Value) || policy.MayNameSecret(m.Value) {
			rest = append(rest, mustJSON(map[string]json.RawMessage{string(m.Key): m.Value}))
		}
	}
	if answers != nil {
		check = s.inputAnswersCheck(answers, check)
	}
	if len(rest) == 0 && len(tokens) == 0 {
		return check
	}
	return thenCheck(check, func(eff *scopeView) ([]string, *policy.Denial) {
		var paths []string
		for _, t := range tokens {
			p, d := s.pol.CheckToken(t[0], t[1], eff.paths)
			paths = append(paths, p...)
			if d != nil {
				return paths, d
			}
		}
		for _, raw := range rest {
			p, d := s.pol.CheckValues(raw, eff.paths)
			paths = append(paths, p...)
			if d != nil {
				return paths, d
			}
		}
		return paths, nil
	})
}

// thenCheck runs first (when there is one), then next, and returns the
// paths of both; the first denial stops it.
func thenCheck(first, next func(*scopeView) ([]string, *policy.Denial)) func(*scopeView) ([]string, *policy.Denial) {
	if first == nil {
		return next
	}
	return func(eff *scopeView) ([]string, *policy.Denial) {
		paths, d := first(eff)
		if d != nil {
			return paths, d
		}
		more, d := next(eff)
		return append(paths, more...), d
	}
}

// inputAnswersCheck adds to check the client's answers in a modern
// request's inputResponses (an input round's retry, a tasks/update): an
// elicitation or sampling answer is checked before the server reads it
// (policy.CheckClientAnswer); roots answers are rewritten, not checked
// (rootsInputResponses).
func (s *session) inputAnswersCheck(raw json.RawMessage, check func(*scopeView) ([]string, *policy.Denial)) func(*scopeView) ([]string, *policy.Denial) {
	var answers map[string]json.RawMessage
	if strictjson.Unmarshal(raw, &answers) != nil || len(answers) == 0 {
		return check
	}
	return thenCheck(check, func(eff *scopeView) ([]string, *policy.Denial) {
		var paths []string
		for _, v := range answers {
			if isRootsAnswer(v) {
				continue
			}
			p, d := s.pol.CheckClientAnswer(v, eff.paths)
			paths = append(paths, p...)
			if d != nil {
				return paths, d
			}
		}
		return paths, nil
	})
}

// isRootsAnswer: v is an object with a member named "roots" in any case
// (as rootsInputResponses reads it: such an answer is rewritten).
func isRootsAnswer(v json.RawMessage) bool {
	var members map[string]json.RawMessage
	if strictjson.Unmarshal(v, &members) != nil {
		return false
	}
	for name := range members {
		if strings.EqualFold(name, "roots") {
			return true
		}
	}
	return false
}

// param and meta read a member of params and of params._meta (as the
// frame scanner collected them: nothing is parsed again).
func (rq *request) param(key string) json.RawMessage {
	v, _ := rq.raw.Param(key)
	return v
}

func (rq *request) meta(key string) (json.RawMessage, bool) { return rq.raw.Meta(key) }

// readEnvelope checks _meta and the era's rules. It answers and returns
// false when the request is refused.
func (s *session) readEnvelope(rq *request) bool {
	m := rq.raw
	if raw, ok := m.Param("_meta"); ok && firstByte(raw) != '{' {
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "_meta must be an object", nil))
		return false
	}
	v, ok := rq.meta(metaVersion)
	if !ok {
		s.client.mu.Lock()
		rq.version = s.client.version
		s.client.mu.Unlock()
		return true
	}
	rq.era = eraModern
	if rq.version, ok = jsonrpc.String(v); !ok {
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "_meta "+metaVersion+" must be a string", nil))
		s.recordProtocolDenial(m.Method, eraModern, "", schema.ErrMalformedRequest)
		return false
	}
	if rq.version != ModernVersion {
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeUnsupportedVersion, "Unsupported protocol version",
			map[string]any{"supported": []string{ModernVersion}, "requested": truncate(rq.version, 64)}))
		s.recordProtocolDenial(m.Method, eraModern, truncate(rq.version, 32), schema.ErrUnsupportedVersion)
		return false
	}
	if caps, ok := rq.meta(metaClientCaps); !ok || firstByte(caps) != '{' {
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "missing _meta key "+metaClientCaps+" (an object)", nil))
		s.recordProtocolDenial(m.Method, eraModern, rq.version, schema.ErrMalformedRequest)
		return false
	}
	return true
}

// readEra finds a request's era and version for the answer of a stopped
// run (best effort: the request is refused whatever it holds).
func (s *session) readEra(rq *request) {
	if v, ok := rq.meta(metaVersion); ok {
		rq.era = eraModern
		rq.version, _ = jsonrpc.String(v)
		rq.version = truncate(rq.version, 32)
	}
}

// answerStopped answers a request when the run was stopped or stops while
// it is in flight: a JSON-RPC error whose message and data name the reason
// (SCOPE_EXPIRED, SCOPE_REVOKED, AUDIT_SINK_UNAVAILABLE), so the client,
// not only the model, learns that the session is over and why. The refusal
// of a tool call is recorded.
func (s *session) answerStopped(rq *request) {
	code := s.stopCode()
	if code == "" {
		s.finish(rq, errorFrame(rq.id, jsonrpc.CodeInternalError, "the server stopped before answering"), "")
		return
	}
	if rq.dec == nil && rq.method == "tools/call" {
		name, _ := jsonrpc.String(rq.param("name"))
		rq.dec = s.newDecision(rq, name, policy.ClassNone)
	}
	s.deny(rq, code, stopReasons[code])
}

// onInitialize answers a legacy client's initialize from the upstream's own
// handshake, which the proxy owns.
func (s *session) onInitialize(rq *request) {
	v, _ := jsonrpc.String(rq.param("protocolVersion"))
	caps := map[string]json.RawMessage{}
	if raw := rq.param("capabilities"); raw != nil {
		_ = strictjson.Unmarshal(raw, &caps)
	}
	s.client.mu.Lock()
	s.client.version = truncate(v, 32)
	s.client.caps = caps
	_, s.client.roots = caps["roots"]
	_, s.client.elicit = caps["elicitation"]
	_, s.client.sample = caps["sampling"]
	declared := s.client.roots
	if declared {
		s.client.rootsWanted = true
	}
	s.client.mu.Unlock()
	if declared {
		// Requests wait from now until the client's first roots answer.
		s.scope.mu.Lock()
		s.scope.tracker.Begin()
		s.scope.mu.Unlock()
		s.changed.broadcast()
	}
	if err := s.ensureUpstream(eraLegacy, membersMap(rq.raw.ParamMembers), nil); err != nil {
		s.toClient(errorFrame(rq.id, jsonrpc.CodeInternalError, "the upstream server could not be initialised: "+truncate(err.Error(), 256)))
		return
	}
	s.toClient(jsonrpc.Result(rq.id, s.dropIcons("initialize", s.initializeResult(v))))
}

func (s *session) onPing(rq *request) { s.toClient(jsonrpc.Result(rq.id, rawEmptyObject)) }

func (s *session) onDiscover(rq *request) {
	if err := s.ensureUpstream(rq.era, nil, rq.raw.MetaMembers); err != nil {
		s.toClient(errorFrame(rq.id, jsonrpc.CodeInternalError, "the upstream server could not be started"))
		return
	}
	s.toClient(jsonrpc.Result(rq.id, s.dropIcons("server/discover", s.discoverResult())))
}

// initializeResult is the legacy initialize result the client sees.
func (s *session) initializeResult(requested string) json.RawMessage {
	s.upst.mu.Lock()
	defer s.upst.mu.Unlock()
	if s.upst.era == eraLegacy {
		return mustJSON(s.upst.info)
	}
	// A modern upstream: build the legacy answer from its DiscoverResult.
	var supported []string
	_ = strictjson.Unmarshal(s.upst.info["supportedVersions"], &supported)
	version := ""
	for _, v := range LegacyVersions {
		if v == requested && containsStr(supported, v) {
			version = v
			break
		}
	}
	if version == "" {
		for _, v := range LegacyVersions {
			if containsStr(supported, v) {
				version = v
				break
			}
		}
	}
	if version == "" && containsStr(LegacyVersions, requested) {
		// A server of the 2026-07-28 era only: the proxy translates, and
		// speaks the legacy version the client asked for.
		version = requested
	}
	if version == "" {
		version = LegacyVersions[0]
	}
	info := serverInfoOf(s.upst.info)
	caps := s.upst.info["capabilities"]
	if caps == nil {
		caps = rawEmptyObject
	}
	res := map[string]json.RawMessage{"protocolVersion": mustJSON(version), "capabilities": caps, "serverInfo": info}
	if in, ok := s.upst.info["instructions"]; ok {
		res["instructions"] = in
	}
	return mustJSON(res)
}

// discoverResult answers a modern client's server/discover. The proxy
// answers it itself for both upstream eras: the capabilities are the
// upstream's, the version is the one the proxy speaks, and the result is
// private because what a client may do depends on this run's scope.
func (s *session) discoverResult() json.RawMessage {
	s.upst.mu.Lock()
	defer s.upst.mu.Unlock()
	caps := s.upst.info["capabilities"]
	if caps == nil {
		caps = rawEmptyObject
	}
	res := map[string]any{
		"supportedVersions": []string{ModernVersion},
		"capabilities":      caps,
		"resultType":        "complete",
		"ttlMs":             0,
		"cacheScope":        "private",
		"_meta":             map[string]json.RawMessage{metaServerInfo: serverInfoOf(s.upst.info)},
	}
	// The server's instructions for the model, from either era's handshake.
	if in, ok := s.upst.info["instructions"]; ok {
		res["instructions"] = in
	}
	return mustJSON(res)
}

// serverInfoOf is the serverInfo of an initialize or discover result.
func serverInfoOf(info map[string]json.RawMessage) json.RawMessage {
	if si := info["serverInfo"]; si != nil {
		return si
	}
	var meta map[string]json.RawMessage
	_ = strictjson.Unmarshal(info["_meta"], &meta)
	if si := meta[metaServerInfo]; si != nil {
		return si
	}
	return json.RawMessage(`{"name":"unknown","version":"0"}`)
}

func (s *session) onClientNotification(m *jsonrpc.Message) {
	if h := s.tab.notifications[m.Method]; h != nil {
		h(s, m)
		return
	}
	// Notifications are one-way; nothing but the table's reaches the
	// server, so a "notification" carrying a tools/call is dropped here.
	s.log.Info("client notification dropped", "method", recordLabel(truncate(m.Method, 64)))
	s.recordRefusedMethod(m.Method, eraLegacy, "")
}

func (s *session) onClientInitialized(*jsonrpc.Message) {
	s.client.mu.Lock()
	want := s.client.rootsWanted
	s.client.rootsWanted = false
	s.client.mu.Unlock()
	if want {
		s.sendRootsRequest()
	}
}

// forwardCancel maps a client's cancellation to the proxy id upstream.
func (s *session) forwardCancel(m *jsonrpc.Message) {
	var p map[string]json.RawMessage
	if strictjson.Unmarshal(m.Params, &p) != nil {
		return
	}
	key := idKey(p["requestId"])
	var upID int64
	s.pend.mu.Lock()
	if ch, ok := s.pend.awaiting[key]; ok {
		delete(s.pend.awaiting, key)
		close(ch)
	}
	// The id names one request in flight at most (ids.go): the one the
	// client has no answer for yet — for a translated call, its open retry.
	if l, ok := s.pend.live[key]; ok {
		for id, c := range s.pend.up {
			if c.req == l.call {
				upID = id
				break
			}
		}
		if upID == 0 && l.owner == l.call {
			// Not forwarded yet: the gate drops it (gate.go).
			s.pend.cancelLocked(l.call)
		}
	}
	s.pend.mu.Unlock()
	if upID == 0 {
		return
	}
	s.upst.mu.Lock()
	w := s.upst.w
	s.upst.mu.Unlock()
	params := map[string]json.RawMessage{"requestId": jsonrpc.IntID(upID)}
	if r, ok := p["reason"]; ok && len(r) > 0 && r[0] == '"' {
		// Only a string, as the schema has it (round eleven): an object
		// here would carry to the server what no check has read. And
		// only one the path rules pass, as any other member (round
		// twelve): a reason that names a file the scope does not allow
		// is left out; the cancellation still goes.
		if _, d := s.pol.CheckValues(mustJSON(map[string]json.RawMessage{"reason": r}), s.scope.current().paths); d == nil {
			params["reason"] = r
		} else {
			s.log.Warn("a cancellation's reason left out: it names a path the scope does not allow", "error_code", string(d.Code))
		}
	}
	s.toServer(w, jsonrpc.Request(nil, "notifications/cancelled", params))
}

func (s *session) onClientResponse(m *jsonrpc.Message) {
	id, err := strconv.ParseInt(string(bytes.TrimSpace(m.ID)), 10, 64)
	var c *cliCall
	ok := false
	if err == nil {
		c, ok = s.pend.takeCli(id)
	}
	if !ok {
		s.log.Warn("client response with an unknown id dropped")
		return
	}
	switch {
	case c.rootsGen != 0:
		s.applyClientRoots(c.rootsGen, m)
	case c.answer != nil:
		c.answer <- m
	case c.relayID != nil:
		s.upst.mu.Lock()
		w, gen := s.upst.w, s.upst.gen
		s.upst.mu.Unlock()
		if c.relayGen != gen {
			return
		}
		if m.Error != nil {
			// The client's error (it declined, it failed) reaches the
			// server only when its message and data pass the rule of a
			// request's other members (round twelve: before, a path in
			// them reached the server unread); else the server gets the
			// code alone.
			raw := mustJSON(map[string]json.RawMessage{"message": mustJSON(m.Error.Message), "data": m.Error.Data})
			if _, d := s.pol.CheckValues(raw, s.scope.current().paths); d != nil {
				s.log.Warn("client error to a server request stripped: it names a path the scope does not allow", "error_code", string(d.Code))
				s.toServer(w, jsonrpc.ErrorResponse(c.relayID, m.Error.Code, "mcpwarden: the client's error message named a path the scope does not allow", nil))
				s.recordServerRequest(c.relayMethod, nil, d.Code)
				return
			}
		}
		if m.Error == nil {
			// The client's answer to the server's sampling or elicitation:
			// what it names, the server reads (policy.CheckClientAnswer).
			if paths, d := s.pol.CheckClientAnswer(m.Result, s.scope.current().paths); d != nil {
				s.log.Warn("client answer to a server request refused: it names a path the scope does not allow", "error_code", string(d.Code))
				s.toServer(w, jsonrpc.ErrorResponse(c.relayID, jsonrpc.CodeDenied, "mcpwarden: "+string(d.Code)+": the client's answer: "+d.Reason, map[string]string{"error_code": string(d.Code)}))
				s.recordServerRequest(c.relayMethod, paths, d.Code)
				return
			}
		}
		s.toServer(w, jsonrpc.Forward(m, c.relayID))
	}
}

func firstByte(b []byte) byte {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func containsStr(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// membersMap is members as a map (for the few places that rewrite or keep
// a whole object).
func membersMap(members []jsonrpc.Member) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(members))
	for _, mb := range members {
		m[string(mb.Key)] = mb.Value
	}
	return m
}
