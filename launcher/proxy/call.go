package proxy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/roots"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Approval values in decision records.
const (
	approvalNotRequired = schema.ApprovalNotRequired
	approvalApproved    = schema.ApprovalApproved
	approvalDenied      = schema.ApprovalDenied
	approvalTimedOut    = schema.ApprovalTimedOut
)

// traceparent is compiled on first use, like the proxy's other patterns.
var traceparent = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
})

func (s *session) newDecision(rq *request, tool string, class policy.Class) *schema.Decision {
	s.mu.Lock()
	origin := s.serverName
	s.mu.Unlock()
	if origin == "" {
		origin = s.cfg.ServerOrigin
	}
	return &schema.Decision{
		OpID:            schema.NewID(),
		Method:          rq.method,
		ProtocolEra:     rq.era,
		ProtocolVersion: rq.version,
		ServerOrigin:    origin,
		Tool:            tool,
		ActionClass:     class,
		Decision:        schema.OutcomeDeny,
		Approval:        approvalNotRequired,
		StartNS:         rq.start.UnixNano(),
	}
}

// handleToolCall decides one tools/call and forwards it or answers a denial.
func (s *session) handleToolCall(rq *request) {
	var name string
	if err := json.Unmarshal(rq.params["name"], &name); err != nil || name == "" {
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeInvalidParams, "tools/call needs a tool name (a string)", nil))
		s.recordProtocolDenial(rq.method, rq.era, rq.version, schema.ErrMalformedRequest)
		return
	}
	class := s.pol.ClassOf(name)
	if !s.pol.Allowed(name) {
		class = policy.ClassNone
	}
	rq.dec = s.newDecision(rq, truncate(name, 128), class)
	if err := s.ensureUpstream(nil, rq.meta); err != nil {
		s.denyCall(rq, schema.ErrRootsPending, "the upstream server could not be started")
		return
	}

	if code, reason := s.scopeState(); code != "" {
		s.denyCall(rq, code, reason)
		return
	}
	if !s.pol.Allowed(name) {
		// Unknown and disallowed tools alike: the model sees a refusal, the
		// server never sees the call.
		s.denyCall(rq, schema.ErrToolNotAllowed, "tool is not in this run's tool_allowlist")
		return
	}
	if s.pol.WriteForbidden(class) {
		s.denyCall(rq, schema.ErrToolNotAllowed, "this run's scope is read-only and the tool writes")
		return
	}
	if a := s.cfg.Scope.Attribution; a != nil && a.Required {
		var cid string
		if err := json.Unmarshal(rq.meta[a.MetaKey], &cid); err != nil || cid == "" || len(cid) > 256 ||
			(a.MetaKey == "traceparent" && !traceparent().MatchString(cid)) {
			s.denyCall(rq, schema.ErrUnattributed, "the call carries no correlation id in _meta."+a.MetaKey)
			return
		}
		rq.dec.CorrelationID = cid
	} else if v, ok := rq.meta["traceparent"]; ok {
		var cid string
		if json.Unmarshal(v, &cid) == nil && traceparent().MatchString(cid) {
			rq.dec.CorrelationID = cid
		}
	}
	args := rq.params["arguments"]

	// Wait for any roots refresh or restart that began before this call.
	s.mu.Lock()
	if err := s.waitReadyLocked(time.Now()); err != nil {
		s.mu.Unlock()
		s.denyCall(rq, schema.ErrRootsPending, "the client's roots refresh or the server's restart did not finish in time")
		return
	}
	eff, checkedGen := s.effPaths, s.effGen
	s.mu.Unlock()
	paths, d := s.pol.CheckArguments(name, args, eff)
	if d != nil {
		s.hashPaths(rq, paths)
		s.denyCall(rq, d.Code, d.Reason)
		return
	}
	s.hashPaths(rq, paths)

	if s.pol.NeedsApproval(class) {
		verdict := s.awaitApproval(rq, name, class)
		rq.dec.Approval = verdict
		if verdict != approvalApproved {
			code := schema.ErrApprovalDenied
			if verdict == approvalNotRequired { // no channel could carry an approval
				rq.dec.Approval = approvalDenied
				code = schema.ErrApprovalRequired
			}
			s.denyCall(rq, code, "the call needs an approval and did not get one")
			return
		}
		// The wait may have been long: the filesystem may have changed under
		// the checked paths (a symlink swapped). Check them again.
		checkedGen = 0
	}
	s.forwardChecked(rq, name, args, checkedGen)
}

// forwardChecked re-checks expiry, readiness and paths under the lock, then
// forwards. The final check sits immediately before the write.
func (s *session) forwardChecked(rq *request, name string, args json.RawMessage, checkedGen uint64) {
	for {
		if code, reason := s.scopeState(); code != "" {
			s.denyCall(rq, code, reason)
			return
		}
		s.mu.Lock()
		if err := s.waitReadyLocked(time.Now()); err != nil {
			s.mu.Unlock()
			s.denyCall(rq, schema.ErrRootsPending, "the client's roots refresh or the server's restart did not finish in time")
			return
		}
		if checkedGen != 0 && s.effGen == checkedGen {
			// Nothing changed since the paths were checked: forward now,
			// under the same lock as the check of the state.
			s.forwardLocked(rq)
			return
		}
		eff, gen := s.effPaths, s.effGen
		s.mu.Unlock()
		if _, d := s.pol.CheckArguments(name, args, eff); d != nil {
			s.denyCall(rq, d.Code, d.Reason)
			return
		}
		checkedGen = gen // check the state again under the lock
		continue
	}
}

// scopeState reports an expired or revoked scope, or a failed audit sink.
func (s *session) scopeState() (schema.ErrorCode, string) {
	if s.p.revoked.Load() {
		return schema.ErrScopeRevoked, "the scope was revoked"
	}
	if s.cfg.Scope.Expired(s.cfg.Now()) {
		return schema.ErrScopeExpired, "the scope expired"
	}
	if s.rec.failed() {
		return schema.ErrAuditSinkFull, "decision records cannot be written"
	}
	return "", ""
}

func (s *session) hashPaths(rq *request, paths []string) {
	for _, p := range paths {
		rq.dec.PathHashes = append(rq.dec.PathHashes, s.cfg.Hasher.Hash(p))
	}
}

// awaitApproval asks for an approval over every channel this run has and
// waits for the first answer or the timeout. It returns approvalNotRequired
// when no channel exists.
func (s *session) awaitApproval(rq *request, tool string, class policy.Class) schema.ApprovalState {
	opID := rq.dec.OpID
	var socket <-chan bool
	if s.cfg.Approvals != nil {
		socket = s.cfg.Approvals.Register(approval.Pending{OpID: opID, Tool: truncate(tool, 128), Class: string(class), Since: time.Now().UTC().Format(time.RFC3339)})
		defer s.cfg.Approvals.Unregister(opID)
	}
	var elicit chan *jsonrpc.Message
	s.mu.Lock()
	canElicit := s.clientElicit && rq.era == eraLegacy
	var elicitID int64
	if canElicit {
		elicit = make(chan *jsonrpc.Message, 1)
		elicitID = s.newIDLocked()
		s.cliPending[elicitID] = &cliCall{answer: elicit}
	}
	s.mu.Unlock()
	if socket == nil && elicit == nil {
		return approvalNotRequired
	}
	s.log.Warn("call waiting for approval", "run_id", s.cfg.RunID, "op_id", opID, "tool", truncate(tool, 128), "action_class", string(class))
	if elicit != nil {
		s.toClient(jsonrpc.Request(jsonrpc.IntID(elicitID), "elicitation/create", map[string]any{
			"message": "mcpwarden: allow the " + string(class) + " call to tool " + truncate(tool, 128) + " (op " + opID + ")? Accept to allow it once.",
			"requestedSchema": map[string]any{
				"type":       "object",
				"properties": map[string]any{},
			},
		}))
		defer func() {
			s.mu.Lock()
			delete(s.cliPending, elicitID)
			s.mu.Unlock()
		}()
	}
	// A notifications/cancelled for this request withdraws it.
	cancelled := make(chan struct{})
	key := string(rq.id)
	s.mu.Lock()
	s.awaiting[key] = cancelled
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.awaiting[key] == cancelled {
			delete(s.awaiting, key)
		}
		s.mu.Unlock()
	}()
	t := time.NewTimer(s.cfg.ApprovalTimeout)
	defer t.Stop()
	for {
		select {
		case <-cancelled:
			return approvalDenied
		case ok := <-socket:
			if ok {
				return approvalApproved
			}
			return approvalDenied
		case m := <-elicit:
			var res struct {
				Action string `json:"action"`
			}
			if m != nil && m.Error == nil && json.Unmarshal(m.Result, &res) == nil {
				if res.Action == "accept" {
					return approvalApproved
				}
				return approvalDenied
			}
			elicit = nil // an error answer: keep waiting for the socket
			if socket == nil {
				return approvalDenied
			}
		case <-t.C:
			return approvalTimedOut
		case <-s.done:
			return approvalDenied
		}
	}
}

// handleResource decides resources/read, subscribe and unsubscribe.
func (s *session) handleResource(rq *request) {
	rq.dec = s.newDecision(rq, "", policy.ClassRead)
	var uri string
	if err := json.Unmarshal(rq.params["uri"], &uri); err != nil || uri == "" {
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeInvalidParams, "the request needs a uri (a string)", nil))
		s.recordProtocolDenial(rq.method, rq.era, rq.version, schema.ErrMalformedRequest)
		return
	}
	if err := s.ensureUpstream(nil, rq.meta); err != nil {
		s.denyCall(rq, schema.ErrRootsPending, "the upstream server could not be started")
		return
	}
	for {
		if code, reason := s.scopeState(); code != "" {
			s.denyCall(rq, code, reason)
			return
		}
		s.mu.Lock()
		if err := s.waitReadyLocked(time.Now()); err != nil {
			s.mu.Unlock()
			s.denyCall(rq, schema.ErrRootsPending, "the client's roots refresh or the server's restart did not finish in time")
			return
		}
		eff := s.effPaths
		s.mu.Unlock()
		p, d := s.pol.CheckURI(uri, eff)
		if d != nil {
			s.denyCall(rq, d.Code, d.Reason)
			return
		}
		s.mu.Lock()
		if s.stopped || !s.upReady || s.restarting || s.tracker.Pending() || !slices.Equal(eff, s.effPaths) {
			s.mu.Unlock()
			continue
		}
		if p != "" && rq.dec.PathHashes == nil {
			rq.dec.PathHashes = []schema.PathHash{s.cfg.Hasher.Hash(p)}
		}
		s.forwardLocked(rq)
		return
	}
}

// handlePlain forwards a request that touches no path (lists, prompts).
func (s *session) handlePlain(rq *request) {
	if code, reason := s.scopeState(); code != "" {
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: "+string(code)+": "+reason, map[string]string{"error_code": string(code)}))
		s.stopFor(code)
		return
	}
	if err := s.ensureUpstream(nil, rq.meta); err != nil {
		s.toClient(errorFrame(rq.id, jsonrpc.CodeInternalError, "the upstream server could not be started"))
		return
	}
	s.mu.Lock()
	if err := s.waitReadyLocked(time.Now()); err != nil {
		s.mu.Unlock()
		s.toClient(errorFrame(rq.id, jsonrpc.CodeInternalError, "the server is not ready (roots refresh or restart pending)"))
		return
	}
	s.forwardLocked(rq)
}

// forwardLocked registers rq and writes it upstream; called with mu held,
// returns with it released.
func (s *session) forwardLocked(rq *request) {
	id := s.newIDLocked()
	rq.upID = id
	s.upPending[id] = &upCall{gen: s.upGen, req: rq}
	w := s.upw
	era := s.upEra
	s.mu.Unlock()
	if rq.dec != nil {
		rq.dec.Decision = "allow"
	}
	s.toServer(w, s.upstreamFrame(rq, era, id))
}

// upstreamFrame is rq as the upstream must see it: a new id, and for a
// modern upstream, the modern _meta keys (derived from a legacy client's
// initialize when the client is legacy) without the roots capability.
func (s *session) upstreamFrame(rq *request, upEra string, id int64) []byte {
	if upEra != eraModern {
		return jsonrpc.Forward(rq.raw, jsonrpc.IntID(id))
	}
	params := map[string]json.RawMessage{}
	for k, v := range rq.params {
		params[k] = v
	}
	meta := map[string]json.RawMessage{}
	for k, v := range rq.meta {
		meta[k] = v
	}
	if rq.era == eraLegacy {
		s.mu.Lock()
		caps := mustJSON(s.clientCaps)
		info := s.initParams["clientInfo"]
		s.mu.Unlock()
		meta[metaVersion] = mustJSON(ModernVersion)
		meta[metaClientCaps] = caps
		if info != nil {
			meta[metaClientInfo] = info
		}
	}
	meta[metaClientCaps] = mustJSON(withoutRoots(meta[metaClientCaps]))
	params["_meta"] = mustJSON(meta)
	if ir, ok := params["inputResponses"]; ok {
		params["inputResponses"] = s.rootsInputResponses(ir)
	}
	return jsonrpc.Request(jsonrpc.IntID(id), rq.method, params)
}

// rootsInputResponses rewrites the answers to modern-era roots/list input
// requests (MRTR): the client's roots never reach the server; it gets the
// effective scope narrowed by what the client answered.
func (s *session) rootsInputResponses(raw json.RawMessage) json.RawMessage {
	resp := map[string]json.RawMessage{}
	if json.Unmarshal(raw, &resp) != nil || resp == nil {
		return raw
	}
	s.mu.Lock()
	eff := slices.Clone(s.effective)
	s.mu.Unlock()
	for k, v := range resp {
		var probe struct {
			Roots *json.RawMessage `json:"roots"`
		}
		if json.Unmarshal(v, &probe) != nil || probe.Roots == nil {
			continue
		}
		client, err := roots.ParseResult(v)
		if err != nil {
			client = nil
		}
		resp[k] = roots.ListResult(roots.Intersect(eff, client))
	}
	return mustJSON(resp)
}

// onCallAnswered relays the server's answer to a client request.
func (s *session) onCallAnswered(rq *request, m *jsonrpc.Message, size int) {
	capped := rq.method == "tools/call" || rq.method == "resources/read"
	if capped && size > s.cfg.MaxResponseBytes {
		s.answerTooLarge(rq)
		return
	}
	var frame []byte
	switch {
	case m.Error != nil:
		frame = jsonrpc.Forward(m, rq.id)
	case rq.method == "tools/list":
		frame = jsonrpc.Result(rq.id, s.complete(rq, s.filterTools(m.Result), true))
	case rq.method == "resources/list":
		frame = jsonrpc.Result(rq.id, s.complete(rq, s.filterResources(m.Result), true))
	case rq.era == eraModern:
		frame = jsonrpc.Result(rq.id, s.complete(rq, m.Result, cacheable[rq.method]))
	default:
		frame = jsonrpc.Forward(m, rq.id)
	}
	s.finish(rq, m, frame, "")
}

// cacheable methods carry ttlMs and cacheScope in the modern era.
var cacheable = map[string]bool{
	"tools/list": true, "prompts/list": true, "resources/list": true,
	"resources/templates/list": true, "resources/read": true,
}

func (s *session) answerTooLarge(rq *request) {
	if rq.method == "tools/call" {
		s.finish(rq, nil, jsonrpc.Result(rq.id, s.denialResult(rq, schema.ErrResponseTooLarge, "the server's response was larger than this run's cap")), schema.ErrResponseTooLarge)
		return
	}
	s.finish(rq, nil, jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: RESPONSE_TOO_LARGE: the server's response was larger than this run's cap",
		map[string]string{"error_code": string(schema.ErrResponseTooLarge)}), schema.ErrResponseTooLarge)
}

// finish writes the client's answer and the decision record.
func (s *session) finish(rq *request, _ *jsonrpc.Message, frame []byte, code schema.ErrorCode) {
	if rq.dec != nil {
		end := s.cfg.Now()
		rq.dec.EndNS = end.UnixNano()
		rq.dec.LatencyMS = float64(end.Sub(rq.start).Microseconds()) / 1000
		if code != "" {
			rq.dec.ErrorCode = string(code)
		}
		s.rec.add(*rq.dec)
	}
	s.toClient(frame)
}

// denyCall answers a denied call: a tool result with isError for tools/call
// (the model sees why), a JSON-RPC error for anything else.
func (s *session) denyCall(rq *request, code schema.ErrorCode, reason string) {
	rq.dec.Decision = "deny"
	if rq.method == "tools/call" {
		s.finish(rq, nil, jsonrpc.Result(rq.id, s.denialResult(rq, code, reason)), code)
	} else {
		s.finish(rq, nil, jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: "+string(code)+": "+reason,
			map[string]string{"error_code": string(code), "op_id": rq.dec.OpID}), code)
	}
	s.stopFor(code) // the denial is written first, then the run stops
}

func (s *session) denialResult(rq *request, code schema.ErrorCode, reason string) json.RawMessage {
	res := map[string]any{
		"content": []map[string]string{{"type": "text", "text": "mcpwarden denied this call: " + string(code) + ": " + reason}},
		"isError": true,
		"_meta":   map[string]string{"io.mcpwarden/error_code": string(code), "io.mcpwarden/op_id": rq.dec.OpID},
	}
	if rq.era == eraModern {
		res["resultType"] = "complete"
	}
	return mustJSON(res)
}

// complete fills the modern-era fields a legacy upstream does not send.
func (s *session) complete(rq *request, result json.RawMessage, list bool) json.RawMessage {
	if rq.era != eraModern {
		return result
	}
	m := map[string]json.RawMessage{}
	if json.Unmarshal(result, &m) != nil || m == nil {
		return result
	}
	if _, ok := m["resultType"]; !ok {
		m["resultType"] = json.RawMessage(`"complete"`)
	}
	if list {
		if _, ok := m["ttlMs"]; !ok {
			m["ttlMs"] = json.RawMessage(`0`)
		}
		if rq.method == "tools/list" || rq.method == "resources/list" {
			m["cacheScope"] = json.RawMessage(`"private"`) // filtered by this run's scope
		} else if _, ok := m["cacheScope"]; !ok {
			m["cacheScope"] = json.RawMessage(`"private"`)
		}
	}
	meta := map[string]json.RawMessage{}
	_ = json.Unmarshal(m["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	if _, ok := meta[metaServerInfo]; !ok {
		s.mu.Lock()
		info := s.upInfo["serverInfo"]
		s.mu.Unlock()
		if info != nil {
			meta[metaServerInfo] = info
			m["_meta"] = mustJSON(meta)
		}
	}
	return mustJSON(m)
}

// filterTools keeps the allowlisted tools, sorted by name.
func (s *session) filterTools(result json.RawMessage) json.RawMessage {
	m := map[string]json.RawMessage{}
	if json.Unmarshal(result, &m) != nil || m == nil {
		return json.RawMessage(`{"tools":[]}`)
	}
	var tools []json.RawMessage
	_ = json.Unmarshal(m["tools"], &tools)
	type named struct {
		name string
		raw  json.RawMessage
	}
	var kept []named
	seen := map[string]bool{}
	for _, t := range tools {
		var n struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t, &n) != nil || !s.pol.Allowed(n.Name) || seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		kept = append(kept, named{n.Name, t})
	}
	slices.SortFunc(kept, func(a, b named) int { return strings.Compare(a.name, b.name) })
	out := make([]json.RawMessage, len(kept))
	for i, k := range kept {
		out[i] = k.raw
	}
	m["tools"] = mustJSON(out)
	return mustJSON(m)
}

// filterResources keeps resource_refs and file:// URIs inside the
// effective scope.
func (s *session) filterResources(result json.RawMessage) json.RawMessage {
	m := map[string]json.RawMessage{}
	if json.Unmarshal(result, &m) != nil || m == nil {
		return json.RawMessage(`{"resources":[]}`)
	}
	var list []json.RawMessage
	_ = json.Unmarshal(m["resources"], &list)
	s.mu.Lock()
	eff := s.effPaths
	s.mu.Unlock()
	out := []json.RawMessage{}
	for _, r := range list {
		var u struct {
			URI string `json:"uri"`
		}
		if json.Unmarshal(r, &u) != nil {
			continue
		}
		if _, d := s.pol.CheckURI(u.URI, eff); d == nil {
			out = append(out, r)
		}
	}
	m["resources"] = mustJSON(out)
	return mustJSON(m)
}

func errorFrame(id json.RawMessage, code int, msg string) []byte {
	return jsonrpc.ErrorResponse(id, code, msg, nil)
}
