package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
)

// request is one client request in flight.
type request struct {
	id      json.RawMessage // the client's id, byte for byte
	method  string
	params  map[string]json.RawMessage
	meta    map[string]json.RawMessage
	raw     *jsonrpc.Message
	era     string
	version string
	start   time.Time
	dec     *schema.Decision // tools/call and resources/read only
	upID    int64            // proxy id upstream, once forwarded
}

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
		if perr == nil && s.isStopped() {
			// The run was stopped (expiry, revocation, audit failure): every
			// request still gets an answer, none reaches the server.
			if m.Kind == jsonrpc.KindRequest {
				s.answerStopped(m)
			}
			continue
		}
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
	s.mu.Lock()
	s.clientGone = true
	deadline := time.Now().Add(s.cfg.WarmupTimeout)
	for s.initState == 2 && !s.upReady && !s.stopped && time.Now().Before(deadline) {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
		s.mu.Lock()
	}
	stdin := s.upStdin
	s.mu.Unlock()
	closeStdin(stdin)
}

func (s *session) onClientRequest(m *jsonrpc.Message) {
	rq := &request{id: m.ID, method: m.Method, raw: m, start: s.cfg.Now(), era: eraLegacy}
	if m.Params != nil {
		if err := json.Unmarshal(m.Params, &rq.params); err != nil {
			s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "params must be an object", nil))
			return
		}
	}
	if raw, ok := rq.params["_meta"]; ok {
		if err := json.Unmarshal(raw, &rq.meta); err != nil || rq.meta == nil {
			s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "_meta must be an object", nil))
			return
		}
	}
	if v, ok := rq.meta[metaVersion]; ok {
		rq.era = eraModern
		if err := json.Unmarshal(v, &rq.version); err != nil {
			s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "_meta "+metaVersion+" must be a string", nil))
			s.recordProtocolDenial(m.Method, eraModern, "", schema.ErrMalformedRequest)
			return
		}
		if rq.version != ModernVersion {
			s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeUnsupportedVersion, "Unsupported protocol version",
				map[string]any{"supported": []string{ModernVersion}, "requested": truncate(rq.version, 64)}))
			s.recordProtocolDenial(m.Method, eraModern, truncate(rq.version, 32), schema.ErrUnsupportedVersion)
			return
		}
		if caps, ok := rq.meta[metaClientCaps]; !ok || firstByte(caps) != '{' {
			s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInvalidParams, "missing _meta key "+metaClientCaps+" (an object)", nil))
			s.recordProtocolDenial(m.Method, eraModern, rq.version, schema.ErrMalformedRequest)
			return
		}
	} else {
		s.mu.Lock()
		rq.version = s.clientVersion
		s.mu.Unlock()
	}

	switch m.Method {
	case "initialize":
		s.onInitialize(rq)
	case "ping":
		s.toClient(jsonrpc.Result(m.ID, json.RawMessage(`{}`)))
	case "server/discover":
		if err := s.ensureUpstream(nil, rq.meta); err != nil {
			s.toClient(errorFrame(m.ID, jsonrpc.CodeInternalError, "the upstream server could not be started"))
			return
		}
		s.toClient(jsonrpc.Result(m.ID, s.discoverResult()))
	case "tools/call":
		s.spawn(rq, s.handleToolCall)
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		s.spawn(rq, s.handleResource)
	case "tools/list", "resources/list", "resources/templates/list", "prompts/list", "prompts/get",
		"completion/complete", "logging/setLevel":
		s.spawn(rq, s.handlePlain)
	default:
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeMethodNotFound, "method not available through mcpwarden", nil))
	}
}

// answerStopped answers a request that arrived after the run stopped: a
// tool call gets the denial the model should see, anything else an error.
func (s *session) answerStopped(m *jsonrpc.Message) {
	code := s.stopCode()
	reason := "the run was stopped: " + s.stopReason()
	if m.Method != "tools/call" || code == "" {
		data := map[string]string{}
		if code != "" {
			data["error_code"] = string(code)
		}
		s.toClient(jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeDenied, "mcpwarden: "+reason, data))
		return
	}
	rq := &request{id: m.ID, method: m.Method, raw: m, start: s.cfg.Now(), era: eraLegacy}
	var params struct {
		Name string                     `json:"name"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(m.Params, &params)
	if _, ok := params.Meta[metaVersion]; ok {
		rq.era = eraModern
		_ = json.Unmarshal(params.Meta[metaVersion], &rq.version)
	}
	rq.dec = s.newDecision(rq, truncate(params.Name, 128), policy.ClassNone)
	s.denyCall(rq, code, reason)
}

// maxInFlight bounds the requests the proxy handles at once (each may wait
// for an approval or a roots refresh); beyond it requests are refused.
const maxInFlight = 1024

// spawn handles rq on its own goroutine, so that a call waiting for an
// approval or a roots refresh never blocks the client's other messages.
func (s *session) spawn(rq *request, handle func(*request)) {
	if s.inFlight.Add(1) > maxInFlight {
		s.inFlight.Add(-1)
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: too many requests in flight; wait for answers before sending more", nil))
		return
	}
	go func() {
		defer s.inFlight.Add(-1)
		handle(rq)
	}()
}

// onInitialize answers a legacy client's initialize from the upstream's own
// handshake, which the proxy owns.
func (s *session) onInitialize(rq *request) {
	var v string
	_ = json.Unmarshal(rq.params["protocolVersion"], &v)
	caps := map[string]json.RawMessage{}
	_ = json.Unmarshal(rq.params["capabilities"], &caps)
	s.mu.Lock()
	s.clientVersion = truncate(v, 32)
	s.clientCaps = caps
	_, s.clientRoots = caps["roots"]
	_, s.clientElicit = caps["elicitation"]
	_, s.clientSample = caps["sampling"]
	if s.clientRoots {
		// Calls wait from now until the client's first roots answer.
		s.tracker.Begin()
		s.rootsWanted = true
		s.broadcastLocked()
	}
	s.mu.Unlock()
	if err := s.ensureUpstream(rq.params, nil); err != nil {
		s.toClient(errorFrame(rq.id, jsonrpc.CodeInternalError, "the upstream server could not be initialised"))
		return
	}
	s.toClient(jsonrpc.Result(rq.id, s.initializeResult(v)))
}

// initializeResult is the legacy initialize result the client sees.
func (s *session) initializeResult(requested string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upEra == eraLegacy {
		res := map[string]json.RawMessage{}
		for k, v := range s.upInfo {
			res[k] = v
		}
		return mustJSON(res)
	}
	// A modern upstream: build the legacy answer from its DiscoverResult.
	var supported []string
	_ = json.Unmarshal(s.upInfo["supportedVersions"], &supported)
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
	if version == "" {
		version = LegacyVersions[0]
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(s.upInfo["_meta"], &meta)
	info := meta[metaServerInfo]
	if info == nil {
		info = json.RawMessage(`{"name":"unknown","version":"0"}`)
	}
	caps := s.upInfo["capabilities"]
	if caps == nil {
		caps = json.RawMessage(`{}`)
	}
	return mustJSON(map[string]json.RawMessage{"protocolVersion": mustJSON(version), "capabilities": caps, "serverInfo": info})
}

// discoverResult answers a modern client's server/discover. The proxy
// answers it itself for both upstream eras: the capabilities are the
// upstream's, the version is the one the proxy speaks, and the result is
// private because what a client may do depends on this run's scope.
func (s *session) discoverResult() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	caps := s.upInfo["capabilities"]
	if caps == nil {
		caps = json.RawMessage(`{}`)
	}
	info := s.upInfo["serverInfo"]
	if info == nil {
		var meta map[string]json.RawMessage
		_ = json.Unmarshal(s.upInfo["_meta"], &meta)
		info = meta[metaServerInfo]
	}
	if info == nil {
		info = json.RawMessage(`{"name":"unknown","version":"0"}`)
	}
	return mustJSON(map[string]any{
		"supportedVersions": []string{ModernVersion},
		"capabilities":      caps,
		"resultType":        "complete",
		"ttlMs":             0,
		"cacheScope":        "private",
		"_meta":             map[string]json.RawMessage{metaServerInfo: info},
	})
}

func (s *session) onClientNotification(m *jsonrpc.Message) {
	switch m.Method {
	case "notifications/initialized":
		s.mu.Lock()
		want := s.rootsWanted
		s.rootsWanted = false
		s.mu.Unlock()
		if want {
			s.sendRootsRequest()
		}
	case "notifications/roots/list_changed":
		s.askClientRoots()
	case "notifications/cancelled":
		s.forwardCancel(m)
	default:
		// Notifications are one-way; nothing but the above reaches the server,
		// so a "notification" carrying a tools/call is dropped here.
		s.log.Info("client notification dropped", "method", truncate(m.Method, 64))
	}
}

// sendRootsRequest sends the first roots/list, for the generation begun at
// initialize.
func (s *session) sendRootsRequest() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	gen := s.tracker.Begin()
	id := s.newIDLocked()
	s.cliPending[id] = &cliCall{rootsGen: gen}
	s.broadcastLocked()
	s.mu.Unlock()
	s.toClient(jsonrpc.Request(jsonrpc.IntID(id), "roots/list", json.RawMessage(`{}`)))
}

// forwardCancel maps a client's cancellation to the proxy id upstream.
func (s *session) forwardCancel(m *jsonrpc.Message) {
	var p map[string]json.RawMessage
	if json.Unmarshal(m.Params, &p) != nil {
		return
	}
	rid := bytes.TrimSpace(p["requestId"])
	s.mu.Lock()
	if ch, ok := s.awaiting[string(rid)]; ok {
		delete(s.awaiting, string(rid))
		close(ch)
	}
	var upID int64
	for id, c := range s.upPending {
		if c.req != nil && bytes.Equal(bytes.TrimSpace(c.req.id), rid) {
			upID = id
			break
		}
	}
	w := s.upw
	s.mu.Unlock()
	if upID == 0 {
		return
	}
	params := map[string]json.RawMessage{"requestId": jsonrpc.IntID(upID)}
	if r, ok := p["reason"]; ok {
		params["reason"] = r
	}
	s.toServer(w, jsonrpc.Request(nil, "notifications/cancelled", params))
}

func (s *session) onClientResponse(m *jsonrpc.Message) {
	id, err := strconv.ParseInt(string(bytes.TrimSpace(m.ID)), 10, 64)
	s.mu.Lock()
	c, ok := s.cliPending[id]
	if ok && err == nil {
		delete(s.cliPending, id)
	} else {
		ok = false
	}
	w, gen := s.upw, s.upGen
	s.mu.Unlock()
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
		if c.relayGen == gen {
			s.toServer(w, jsonrpc.Forward(m, c.relayID))
		}
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
