package proxy

import (
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Input rounds of a modern server for a legacy client. A 2026-07-28 server
// that needs the client's roots, an elicitation or a sampling answers a
// call with an input_required result; a legacy client (translated to that
// server: a modern-only server, or a session begun in the modern era)
// knows no such result. The proxy plays the round for it: roots/list is
// answered with the effective scope (client roots never reach a server),
// elicitation and sampling become server→client requests of the legacy
// era — only those the client declared, checked like any server request —
// and the call is sent again with the answers (inputResponses) and the
// server's requestState. The retry passes the admission gate again (the
// scope may have narrowed meanwhile) without a second approval; the call
// keeps its one decision record. At most maxAsksPerCall rounds per call.

// legacyInputRound reports whether result is an input round the proxy
// plays for rq (and starts it): rq is a legacy client's call to a modern
// upstream.
func (s *session) legacyInputRound(rq *request, result json.RawMessage) bool {
	if rq.era != eraLegacy || !mrtrMethods[rq.method] || !mayHold(result, "input_required") {
		return false
	}
	s.upst.mu.Lock()
	modern := s.upst.era == eraModern
	s.upst.mu.Unlock()
	if !modern {
		return false // a legacy upstream's result is the legacy client's own business (go-sdk plays rounds on legacy sessions)
	}
	var r struct {
		ResultType    string                     `json:"resultType"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  *string                    `json:"requestState"`
	}
	if strictjson.Unmarshal(result, &r, strictjson.AllowUnknownMembers()) != nil || r.ResultType != "input_required" {
		return false
	}
	go s.playLegacyRound(rq, r.InputRequests, r.RequestState)
	return true
}

// playLegacyRound gets every input the server asked for, then sends the
// call again through the gate.
func (s *session) playLegacyRound(rq *request, asks map[string]json.RawMessage, state *string) {
	fail := func(msg string) {
		s.finish(rq, errorFrame(rq.id, jsonrpc.CodeInternalError, "mcpwarden: "+msg), "")
	}
	if rq.rounds >= maxAsksPerCall {
		fail("the server asked for input more than " + strconv.Itoa(maxAsksPerCall) + " times in one call")
		return
	}
	if len(asks) == 0 || len(asks) > maxAsksPerCall {
		fail("the server's input round is empty or too large")
		return
	}
	// A notifications/cancelled for the call ends the round: nothing more
	// is asked and the call is not sent again.
	cancelled, stop := s.pend.awaitCancel(idKey(rq.id))
	defer stop()
	keys := make([]string, 0, len(asks))
	for k := range asks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	answers := make(map[string]json.RawMessage, len(asks))
	for _, k := range keys {
		var ask struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if strictjson.Unmarshal(asks[k], &ask) != nil {
			fail("the server's input request is malformed")
			return
		}
		switch ask.Method {
		case "roots/list":
			answers[k] = s.scope.current().rootsList
		case "elicitation/create", "sampling/createMessage":
			answer, msg := s.askLegacyClient(rq, ask.Method, ask.Params, cancelled)
			if answer == nil {
				if msg != "" {
					fail(msg)
				}
				return
			}
			answers[k] = answer
		default:
			s.recordServerRequest(ask.Method, nil, schema.ErrMethodNotAllowed)
			fail("the server asked for input the proxy does not pass (" + truncate(recordLabel(ask.Method), 64) + ")")
			return
		}
	}
	params := membersMap(rq.raw.ParamMembers)
	params["inputResponses"] = mustJSON(answers)
	delete(params, "requestState")
	if state != nil {
		params["requestState"] = mustJSON(*state)
	}
	raw, err := jsonrpc.Parse(jsonrpc.Request(rq.id, rq.method, params))
	if err != nil {
		fail("the call could not be sent again with the server's input")
		return
	}
	retry := &request{id: rq.id, method: rq.method, rule: rq.rule, raw: raw, era: rq.era, version: rq.version,
		start: rq.start, dec: rq.dec, paths: rq.paths, key: rq.key, rounds: rq.rounds + 1}
	s.pend.claim(retry, retry) // the client's id now belongs to the retry
	a, d := rq.rule.decide(s, retry)
	if d != nil {
		s.deny(retry, d.Code, d.Reason)
		return
	}
	a.approval = false // approved (if it had to be) when the call was first admitted
	a.check = s.checkRest(retry, a.check)
	s.admit(retry, a, false)
}

// askLegacyClient sends one elicitation or sampling request of a modern
// server's round to the legacy client and waits for its answer. It returns
// the answer, or nil and why the call fails ("" when the call needs no
// answer: the run stopped, and it was answered; the client cancelled it,
// and it was recorded).
func (s *session) askLegacyClient(rq *request, method string, params json.RawMessage, cancelled <-chan struct{}) (json.RawMessage, string) {
	_, elicit, sample := s.client.declared()
	if (method == "elicitation/create" && !elicit) || (method == "sampling/createMessage" && !sample) {
		s.recordServerRequest(method, nil, schema.ErrMethodNotAllowed)
		return nil, "the server asked for " + method + ", which the client did not declare"
	}
	if firstByte(params) != '{' {
		return nil, "the server's input request has no params object"
	}
	m := &jsonrpc.Message{Params: params}
	paths, d := s.checkServerRequest(m)
	if d != nil {
		s.recordServerRequest(method, paths, d.Code)
		return nil, string(d.Code) + ": " + d.Reason
	}
	s.recordServerRequest(method, paths, "")
	if method == "sampling/createMessage" {
		if narrowed, ok := narrowSamplingContext(params); ok {
			params = narrowed
		}
	}
	ch := make(chan *jsonrpc.Message, 1)
	id := s.newID()
	s.pend.addCli(id, &cliCall{answer: ch})
	defer s.pend.takeCli(id)
	s.toClient(jsonrpc.Request(jsonrpc.IntID(id), method, params))
	t := time.NewTimer(s.cfg.InputTimeout)
	defer t.Stop()
	select {
	case a := <-ch:
		if a == nil || a.Error != nil || firstByte(a.Result) != '{' {
			return nil, "the client did not answer the server's " + method
		}
		return a.Result, ""
	case <-t.C:
		return nil, "the client did not answer the server's " + method + " in time"
	case <-s.life.done:
		s.answerStopped(rq)
		return nil, ""
	case <-cancelled:
		// The client no longer waits for an answer (and expects none).
		s.pend.release(rq)
		s.record(rq, "")
		return nil, ""
	}
}
