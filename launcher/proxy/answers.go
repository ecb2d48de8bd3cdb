package proxy

import (
	"encoding/json"
	"strings"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/roots"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// upstreamFrame is rq as the upstream must see it: a new id; for a modern
// upstream, the modern _meta keys (derived from a legacy client's
// initialize when the client is legacy) without the roots capability; in
// either era, roots answers in inputResponses replaced by the effective
// scope and the server's own requestState of a tagged roots round (go-sdk
// uses input rounds on legacy connections too).
func (s *session) upstreamFrame(rq *request, upEra string, id int64) []byte {
	if upEra != eraModern {
		_, ir := rq.raw.Param("inputResponses")
		if !ir && rq.ownState == nil {
			return jsonrpc.Forward(rq.raw, jsonrpc.IntID(id))
		}
		params := membersMap(rq.raw.ParamMembers)
		s.rewriteInputs(rq, params)
		return jsonrpc.Request(jsonrpc.IntID(id), rq.method, params)
	}
	params := membersMap(rq.raw.ParamMembers)
	meta := membersMap(rq.raw.MetaMembers)
	if rq.era == eraLegacy {
		s.client.mu.Lock()
		caps := mustJSON(s.client.caps)
		s.client.mu.Unlock()
		s.upst.mu.Lock()
		info := s.upst.initParams["clientInfo"]
		s.upst.mu.Unlock()
		meta[metaVersion] = mustJSON(ModernVersion)
		meta[metaClientCaps] = caps
		if info != nil {
			meta[metaClientInfo] = info
		}
	}
	meta[metaClientCaps] = mustJSON(withoutRoots(meta[metaClientCaps]))
	params["_meta"] = mustJSON(meta)
	s.rewriteInputs(rq, params)
	return jsonrpc.Request(jsonrpc.IntID(id), rq.method, params)
}

// rewriteInputs replaces the roots answers in params' inputResponses and
// restores the server's own requestState of a tagged roots round.
func (s *session) rewriteInputs(rq *request, params map[string]json.RawMessage) {
	if ir, ok := params["inputResponses"]; ok {
		params["inputResponses"] = s.rootsInputResponses(ir)
	}
	if rq.ownState != nil {
		if len(rq.ownState.raw) == 0 {
			delete(params, "requestState")
		} else {
			params["requestState"] = rq.ownState.raw
		}
	}
}

// rootsInputResponses rewrites the answers to modern-era roots/list input
// requests (MRTR): the client's roots never reach the server; it gets the
// effective scope narrowed by what the client answered. An answer is a
// roots answer when it has a member named "roots" in any case: go-sdk
// reads inputResponses with encoding/json, which folds case, and takes any
// answer with roots as a roots answer. The proxy reads it strictly
// (roots.ParseResult): a case variant names no root, and the server gets
// none. A value that is not an object is passed unchanged: no SDK reads
// roots from one.
func (s *session) rootsInputResponses(raw json.RawMessage) json.RawMessage {
	resp := map[string]json.RawMessage{}
	if strictjson.Unmarshal(raw, &resp) != nil || resp == nil {
		return raw
	}
	eff := s.scope.current().effective
	for k, v := range resp {
		var members map[string]json.RawMessage
		if strictjson.Unmarshal(v, &members) != nil {
			continue
		}
		isRoots := false
		for name := range members {
			if strings.EqualFold(name, "roots") {
				isRoots = true
			}
		}
		if !isRoots {
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

// decideTaskUpdate: a tasks/update (2026-07-28 tasks) carries the
// client's answers to a task's input requests. A roots answer among them
// narrows the proxy's own checks and the fence (a restart under the
// narrower fence, as a roots/list answer does), besides what the server
// sees (rootsInputResponses). Unlike an input round's, nothing tells an
// answer's age here (no requestState), so it only ever narrows the scope
// in effect, never widens it back: a late answer to an older task cannot
// restore what a newer answer took away. An empty answer narrows nothing
// while no answer of the client ever named a root (as in either era); a
// malformed one, or answers naming different roots, means no roots.
func (s *session) decideTaskUpdate(rq *request) (admission, *policy.Denial) {
	raw, ok := rq.raw.Param("inputResponses")
	if !ok {
		return admission{}, nil
	}
	var answers map[string]json.RawMessage
	if strictjson.Unmarshal(raw, &answers) != nil {
		return admission{}, nil
	}
	found, valid := false, true
	var client []string
	for _, v := range answers {
		var members map[string]json.RawMessage
		if strictjson.Unmarshal(v, &members) != nil {
			continue
		}
		isRoots := false
		for name := range members {
			isRoots = isRoots || strings.EqualFold(name, "roots")
		}
		if !isRoots {
			continue
		}
		c, err := roots.ParseResult(v)
		if err != nil || (found && !sameSet(client, c)) {
			found, valid, client = true, false, nil
			break
		}
		found, client = true, c
	}
	if !found {
		return admission{}, nil
	}
	s.scope.mu.Lock()
	if valid && len(client) > 0 {
		s.scope.clientNamedRoots = true
	}
	if valid && len(client) == 0 && !s.scope.clientNamedRoots {
		s.scope.mu.Unlock()
		return admission{}, nil
	}
	narrowed := roots.Intersect(s.scope.effective, client)
	if roots.Equal(narrowed, s.scope.effective) {
		s.scope.mu.Unlock()
		return admission{}, nil
	}
	s.scope.effective = narrowed
	s.log.Info("a tasks/update roots answer narrowed the scope")
	s.publishEffective() // unlocks scope.mu
	return admission{}, nil
}

// onCallAnswered relays the server's answer to a client request.
func (s *session) onCallAnswered(rq *request, m *jsonrpc.Message, size int) {
	if rq.rule.capped && size > s.cfg.MaxResponseBytes {
		s.answerTooLarge(rq)
		return
	}
	if rq.rule.results || m.Error != nil {
		// A result, or an error's data — of any method: a client may show
		// it, and a -32042 (URLElicitationRequired) answering any request
		// asks it to open a URL (a server could link the file there
		// instead).
		checked := m.Result
		if m.Error != nil {
			checked = m.Error.Data
		}
		paths, d := s.pol.CheckResultURIs(checked, s.scope.current().paths)
		if d != nil {
			s.hashPaths(rq, paths)
			s.log.Warn("server answer refused: it holds a file URI the scope does not allow", "method", rq.method, "error_code", string(d.Code))
			s.deny(rq, d.Code, d.Reason)
			return
		}
	}
	if m.Error == nil && rq.rule.results {
		// An MCP App's HTML, which a host renders: the answer to a read of
		// a ui: URI, or a ui: resource embedded in an answer (MCP-UI).
		var paths []string
		var d *policy.Denial
		if rq.method == "resources/read" {
			if uri, _ := jsonrpc.String(rq.param("uri")); policy.IsAppURI(uri) {
				paths, d = s.pol.CheckAppResource(m.Result, s.scope.current().paths)
			}
		}
		if d == nil && policy.MayHoldAppURI(m.Result) {
			var more []string
			more, d = s.pol.CheckEmbeddedApps(m.Result, s.scope.current().paths)
			paths = append(paths, more...)
		}
		if d != nil {
			s.hashPaths(rq, paths)
			s.log.Warn("server answer refused: an MCP App's document refers to a file the scope does not allow", "error_code", string(d.Code))
			s.deny(rq, d.Code, d.Reason)
			return
		}
	}
	if m.Error == nil {
		m.Result = s.dropIcons(rq.method, m.Result)
	}
	if m.Error == nil && s.legacyInputRound(rq, m.Result) {
		return // the proxy plays the round and sends the call again
	}
	result := m.Result
	if m.Error == nil && rq.rule.answer != nil {
		// A list filtered by the scope (resources/list and
		// resources/templates/list drop an entry whose URI runs code).
		result = rq.rule.answer(s, rq, m.Result)
	}
	if m.Error == nil && !rq.rule.results {
		// Any other result: a uri a client may render as a link must not
		// run code in it (results of the methods above got this check
		// with their file URIs').
		if d := policy.CheckActiveURIs(result); d != nil {
			s.log.Warn("server answer refused: it holds a URI that runs code in a client", "method", rq.method, "error_code", string(d.Code))
			s.deny(rq, d.Code, d.Reason)
			return
		}
	}
	var frame []byte
	switch {
	case m.Error != nil:
		frame = jsonrpc.Forward(m, rq.id)
	case rq.rule.answer != nil:
		result = s.complete(rq, result)
		frame = jsonrpc.Result(rq.id, result)
	case rq.era == eraModern && mayHold(m.Result, "input_required"):
		result = s.complete(rq, s.tagRootsRound(m.Result))
		frame = jsonrpc.Result(rq.id, result)
	case rq.era == eraModern:
		frame = jsonrpc.Result(rq.id, s.complete(rq, m.Result))
	case mrtrMethods[rq.method] && mayHold(m.Result, "input_required"):
		// A legacy server's input round passed to a legacy client (go-sdk
		// uses them on a legacy connection): its sampling includeContext
		// "allServers" is narrowed as in the modern era's (round twelve:
		// before, it passed).
		result = narrowInputRequests(m.Result)
		frame = jsonrpc.Result(rq.id, result)
	default:
		frame = jsonrpc.Forward(m, rq.id)
	}
	if m.Error == nil {
		// A cursor or requestState the client may send back (tokens.go).
		s.noteIssued(rq.method, result)
	}
	s.finish(rq, frame, "")
}

func (s *session) answerTooLarge(rq *request) {
	if rq.method == "tools/call" {
		s.finish(rq, jsonrpc.Result(rq.id, s.denialResult(rq, schema.ErrResponseTooLarge, "the server's response was larger than this run's cap")), schema.ErrResponseTooLarge)
		return
	}
	data := map[string]string{"error_code": string(schema.ErrResponseTooLarge)}
	if rq.dec != nil {
		data["op_id"] = s.opID(rq)
	}
	s.finish(rq, jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: RESPONSE_TOO_LARGE: the server's response was larger than this run's cap", data), schema.ErrResponseTooLarge)
}

// complete fills the modern-era fields a legacy upstream does not send to
// a modern client. A modern upstream's result is passed unchanged, except
// that a list filtered by this run's scope is private.
func (s *session) complete(rq *request, result json.RawMessage) json.RawMessage {
	if rq.era != eraModern {
		return result
	}
	m := map[string]json.RawMessage{}
	if strictjson.Unmarshal(result, &m) != nil || m == nil {
		return result
	}
	s.upst.mu.Lock()
	upModern := s.upst.era == eraModern
	s.upst.mu.Unlock()
	if upModern {
		if rq.rule.cacheable && rq.rule.answer != nil {
			m["cacheScope"] = json.RawMessage(`"private"`) // filtered by this run's scope
			return mustJSON(m)
		}
		return result
	}
	if _, ok := m["resultType"]; !ok {
		m["resultType"] = json.RawMessage(`"complete"`)
	}
	if rq.rule.cacheable {
		if _, ok := m["ttlMs"]; !ok {
			m["ttlMs"] = json.RawMessage(`0`)
		}
		if rq.rule.answer != nil {
			m["cacheScope"] = json.RawMessage(`"private"`) // filtered by this run's scope
		} else if _, ok := m["cacheScope"]; !ok {
			m["cacheScope"] = json.RawMessage(`"private"`)
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := m["_meta"]; ok {
		_ = strictjson.Unmarshal(raw, &meta)
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	if _, ok := meta[metaServerInfo]; !ok {
		s.upst.mu.Lock()
		info := s.upst.info["serverInfo"]
		s.upst.mu.Unlock()
		if info != nil {
			meta[metaServerInfo] = s.dropIcons(rq.method, info)
			m["_meta"] = mustJSON(meta)
		}
	}
	return mustJSON(m)
}

// filterTools keeps the allowlisted tools, once each, in the server's order.
func (s *session) filterTools(_ *request, result json.RawMessage) json.RawMessage {
	return filterNamed(result, "tools", s.pol.Allowed)
}

// filterNamed keeps the entries of result[key] whose "name" keep accepts,
// once each (the first), in the server's order: a client sees the list the
// server sent, less what the scope does not allow.
func filterNamed(result json.RawMessage, key string, keep func(string) bool) json.RawMessage {
	m := map[string]json.RawMessage{}
	if strictjson.Unmarshal(result, &m) != nil || m == nil {
		return mustJSON(map[string][]any{key: {}})
	}
	var list []json.RawMessage
	if raw, ok := m[key]; ok {
		_ = strictjson.Unmarshal(raw, &list)
	}
	type named struct {
		name string
		raw  json.RawMessage
	}
	var kept []named
	seen := map[string]bool{}
	for _, t := range list {
		var n struct {
			Name string `json:"name"`
		}
		if strictjson.Unmarshal(t, &n, strictjson.AllowUnknownMembers()) != nil || !keep(n.Name) || seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		kept = append(kept, named{n.Name, t})
	}
	out := make([]json.RawMessage, len(kept))
	for i, k := range kept {
		out[i] = k.raw
	}
	m[key] = mustJSON(out)
	return mustJSON(m)
}

// filterResources keeps resource_refs and file:// URIs inside the
// effective scope.
func (s *session) filterResources(_ *request, result json.RawMessage) json.RawMessage {
	m := map[string]json.RawMessage{}
	if strictjson.Unmarshal(result, &m) != nil || m == nil {
		return json.RawMessage(`{"resources":[]}`)
	}
	var list []json.RawMessage
	if raw, ok := m["resources"]; ok {
		_ = strictjson.Unmarshal(raw, &list)
	}
	eff := s.scope.current().paths
	out := []json.RawMessage{}
	for _, r := range list {
		var u struct {
			URI string `json:"uri"`
		}
		if strictjson.Unmarshal(r, &u, strictjson.AllowUnknownMembers()) != nil {
			continue
		}
		if _, d := s.pol.CheckURI(u.URI, eff); d == nil && policy.CheckActiveURIs(r) == nil {
			out = append(out, r)
		}
	}
	m["resources"] = mustJSON(out)
	return mustJSON(m)
}

// filterTemplates keeps the resource templates the client may be shown:
// none whose file: expansions all fall outside the effective scope or name
// a secret (policy.TemplateAllowed).
func (s *session) filterTemplates(_ *request, result json.RawMessage) json.RawMessage {
	m := map[string]json.RawMessage{}
	if strictjson.Unmarshal(result, &m) != nil || m == nil {
		return json.RawMessage(`{"resourceTemplates":[]}`)
	}
	var list []json.RawMessage
	if raw, ok := m["resourceTemplates"]; ok {
		_ = strictjson.Unmarshal(raw, &list)
	}
	eff := s.scope.current().paths
	out := []json.RawMessage{}
	for _, r := range list {
		var u struct {
			URITemplate string `json:"uriTemplate"`
		}
		if strictjson.Unmarshal(r, &u, strictjson.AllowUnknownMembers()) != nil {
			continue
		}
		if s.pol.TemplateAllowed(u.URITemplate, eff) && policy.CheckActiveURIs(r) == nil {
			// (javascript:{x}: an expansion runs code in a client that
			// opens it.)
			out = append(out, r)
		}
	}
	m["resourceTemplates"] = mustJSON(out)
	return mustJSON(m)
}

// dropIcons drops from raw (a result, or a server request's or
// notification's params) every icon whose src names a file the scope
// does not allow (policy.FilterIcons): a client's interface would load
// it. What was dropped is recorded as a refusal of the server's (method,
// the code, the path hashes; bounded: refusals.go).
func (s *session) dropIcons(method string, raw json.RawMessage) json.RawMessage {
	out, drop := s.pol.FilterIcons(raw, s.scope.current().paths)
	if drop.Dropped == 0 {
		return raw
	}
	s.log.Warn("icons dropped: their src names a file the scope does not allow", "method", recordLabel(truncate(method, 64)), "count", drop.Dropped, "error_code", string(drop.Denial.Code))
	s.recordServerRequest(method, drop.Paths, drop.Denial.Code)
	return out
}

// filterCompletions keeps the suggestions of a completion/complete answer
// that pass the path rules (policy.FilterCompletionValues); total is
// lowered by the number dropped. What was dropped is recorded as a
// refusal of the server's (the code, the path hashes). An answer that is
// not the spec's shape passes as it is: a client reads nothing from it.
func (s *session) filterCompletions(rq *request, result json.RawMessage) json.RawMessage {
	var res map[string]json.RawMessage
	if strictjson.Unmarshal(result, &res) != nil || res == nil {
		return result
	}
	var comp map[string]json.RawMessage
	if strictjson.Unmarshal(res["completion"], &comp) != nil || comp == nil {
		return result
	}
	var raw []json.RawMessage
	if strictjson.Unmarshal(comp["values"], &raw) != nil {
		return result
	}
	// A suggestion is a string: anything else is no suggestion a client
	// can use, and is dropped rather than read past.
	values := make([]string, 0, len(raw))
	for _, r := range raw {
		var v string
		if strictjson.Unmarshal(r, &v) == nil {
			values = append(values, v)
		}
	}
	kept, paths, d := s.pol.FilterCompletionValues(values, s.scope.current().paths)
	if d == nil && len(values) == len(raw) {
		return result
	}
	if d == nil {
		d = &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "completion suggestions that are not strings"}
	}
	dropped := len(raw) - len(kept)
	s.log.Warn("completion suggestions dropped: they name files the scope does not allow", "count", dropped, "error_code", string(d.Code))
	s.recordServerRequest(rq.method, paths, d.Code)
	comp["values"] = mustJSON(kept)
	var total int64
	if raw, ok := comp["total"]; ok && strictjson.Unmarshal(raw, &total) == nil && total >= int64(dropped) {
		comp["total"] = mustJSON(total - int64(dropped))
	}
	res["completion"] = mustJSON(comp)
	return mustJSON(res)
}

// taskAnswer is a tasks/get answer as the client sees it: a task of the
// 2026-07-28 era waiting for input carries the server's input requests,
// whose sampling includeContext "allServers" is narrowed as in an input
// round (narrowInputRequests). Its result, inline once the task
// completed, was checked as the call's answer (file URIs, the size cap)
// before this.
func (s *session) taskAnswer(_ *request, result json.RawMessage) json.RawMessage {
	return narrowInputRequests(result)
}

// narrowInputRequests narrows the sampling requests among the
// inputRequests of raw (an input_required result of either era, a
// tasks/get result, a notifications/tasks params): narrowSamplingContext.
// An entry's "method" and "params" are found in any case (round twelve):
// go-sdk reads inputRequests with encoding/json, which folds case, so
// {"Method": "sampling/createMessage", "Params": {"IncludeContext":
// "allServers"}} is a sampling request of all servers' context to it.
func narrowInputRequests(raw json.RawMessage) json.RawMessage {
	if !mayHoldFold(raw, "allServers") {
		return raw
	}
	var outer map[string]json.RawMessage
	if strictjson.Unmarshal(raw, &outer) != nil || outer == nil {
		return raw
	}
	var reqs map[string]map[string]json.RawMessage
	if strictjson.Unmarshal(outer["inputRequests"], &reqs) != nil {
		return raw
	}
	changed := false
	for k, r := range reqs {
		var method string
		var paramsKey string
		for mk, mv := range r {
			switch {
			case strings.EqualFold(mk, "method"):
				_ = strictjson.Unmarshal(mv, &method)
			case strings.EqualFold(mk, "params"):
				paramsKey = mk
			}
		}
		if method != "sampling/createMessage" || paramsKey == "" {
			continue
		}
		if p, ok := narrowSamplingContext(r[paramsKey]); ok {
			r[paramsKey] = p
			reqs[k], changed = r, true
		}
	}
	if !changed {
		return raw
	}
	outer["inputRequests"] = mustJSON(reqs)
	return mustJSON(outer)
}
