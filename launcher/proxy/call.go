package proxy

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// traceparent is compiled on first use, like the proxy's other patterns.
var traceparent = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
})

// newDecision starts rq's record. Its op id is made when something on the
// path names the call (opID: a denial, an approval); else the record
// writer makes it, off the call path.
func (s *session) newDecision(rq *request, tool string, class policy.Class) *schema.Decision {
	rq.decStore = schema.Decision{
		Method:          recordLabel(rq.method),
		ProtocolEra:     rq.era,
		ProtocolVersion: rq.version,
		ServerOrigin:    s.serverOrigin(),
		Tool:            recordLabel(truncate(tool, 128)),
		ActionClass:     class,
		Decision:        schema.OutcomeDeny,
		Approval:        schema.ApprovalNotRequired,
		StartNS:         rq.start.UnixNano(),
	}
	return &rq.decStore
}

// opID is the op id of rq's record, made on first use.
func (s *session) opID(rq *request) string {
	if rq.dec.OpID == "" {
		rq.dec.OpID = schema.NewID()
	}
	return rq.dec.OpID
}

// recordLabel keeps a name from the wire in a record only when it is a
// valid label (consumers drop events that are not); anything else is
// recorded as "invalid".
func recordLabel(s string) string {
	if s == "" || schema.IsLabel(s) {
		return s
	}
	return "invalid"
}

// decideToolCall checks a tools/call's name, class and attribution; its
// path arguments are the gate's to check.
func (s *session) decideToolCall(rq *request) (admission, *policy.Denial) {
	name, ok := jsonrpc.String(rq.param("name"))
	if !ok || name == "" {
		rq.dec.ActionClass = policy.ClassNone
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "tools/call needs a tool name (a string)"}
	}
	class := s.pol.ClassOf(name)
	allowed := s.pol.Allowed(name)
	if !allowed {
		class = policy.ClassNone
	}
	rq.dec.Tool = recordLabel(truncate(name, 128))
	rq.dec.ActionClass = class
	if code, reason := s.scopeStop(); code != "" {
		return admission{}, &policy.Denial{Code: code, Reason: reason}
	}
	if !allowed {
		// Unknown and disallowed tools alike: the model sees a refusal, the
		// server never sees the call.
		return admission{}, &policy.Denial{Code: schema.ErrToolNotAllowed, Reason: "tool is not in this run's tool_allowlist"}
	}
	if s.pol.WriteForbidden(class) {
		return admission{}, &policy.Denial{Code: schema.ErrToolNotAllowed, Reason: "this run's scope is read-only and the tool writes"}
	}
	if a := s.cfg.Scope.Attribution; a != nil && a.Required {
		raw, _ := rq.meta(a.MetaKey)
		cid, ok := jsonrpc.String(raw)
		if !ok || cid == "" || len(cid) > 256 ||
			(a.MetaKey == "traceparent" && !traceparent().MatchString(cid)) {
			return admission{}, &policy.Denial{Code: schema.ErrUnattributed, Reason: "the call carries no correlation id in _meta." + a.MetaKey}
		}
		rq.dec.CorrelationID = cid
	} else if v, ok := rq.meta("traceparent"); ok {
		if cid, ok := jsonrpc.String(v); ok && traceparent().MatchString(cid) {
			rq.dec.CorrelationID = cid
		}
	}
	args := rq.param("arguments")
	return admission{
		check: func(eff *scopeView) ([]string, *policy.Denial) {
			return s.pol.CheckArguments(name, args, eff.paths)
		},
		approval: s.pol.NeedsApproval(class),
		tool:     name,
		class:    class,
	}, nil
}

// decideResource checks that resources/read, subscribe and unsubscribe name
// a URI; the gate checks it against the effective scope.
func (s *session) decideResource(rq *request) (admission, *policy.Denial) {
	uri, ok := jsonrpc.String(rq.param("uri"))
	if !ok || uri == "" {
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "the request needs a uri (a string)"}
	}
	return admission{check: func(eff *scopeView) ([]string, *policy.Denial) {
		p, d := s.pol.CheckURI(uri, eff.paths)
		if p == "" {
			return nil, d
		}
		return []string{p}, d
	}}, nil
}

// decideListen decides a modern subscriptions/listen: every URI it asks
// notifications/resources/updated for is decided as a resource read would
// be; one outside the scope denies the whole request.
func (s *session) decideListen(rq *request) (admission, *policy.Denial) {
	var notes map[string]json.RawMessage
	if err := strictjson.Unmarshal(rq.param("notifications"), &notes); err != nil || notes == nil {
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "subscriptions/listen needs notifications (an object)"}
	}
	for k := range notes {
		// A server whose decoder folds case would read "ResourceSubscriptions"
		// as the list this check never saw.
		if k != "resourceSubscriptions" && strings.EqualFold(k, "resourceSubscriptions") {
			return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "notifications names resourceSubscriptions in another case"}
		}
	}
	var p struct {
		Notifications *struct {
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"notifications"`
	}
	if err := strictjson.Unmarshal(rq.param("notifications"), &p.Notifications, strictjson.AllowUnknownMembers()); err != nil || p.Notifications == nil {
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "subscriptions/listen: notifications.resourceSubscriptions must be a list of URIs"}
	}
	uris := p.Notifications.ResourceSubscriptions
	for _, u := range uris {
		if u == "" {
			return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "an empty resource URI"}
		}
	}
	if len(uris) == 0 {
		return admission{}, nil
	}
	return admission{check: func(eff *scopeView) ([]string, *policy.Denial) {
		var paths []string
		for _, uri := range uris {
			p, d := s.pol.CheckURI(uri, eff.paths)
			if p != "" {
				paths = append(paths, p)
			}
			if d != nil {
				return paths, d
			}
		}
		return paths, nil
	}}, nil
}

// approve asks for an approval and returns "" when it was given, else the
// denial's code (recording how it ended).
func (s *session) approve(rq *request, a admission, paths []string) schema.ErrorCode {
	verdict := s.awaitApproval(rq, a.tool, a.class, paths)
	rq.dec.Approval = verdict
	switch verdict {
	case schema.ApprovalApproved:
		return ""
	case schema.ApprovalNotRequired: // no channel could carry an approval
		rq.dec.Approval = schema.ApprovalDenied
		return schema.ErrApprovalRequired
	}
	return schema.ErrApprovalDenied
}

// awaitApproval asks for an approval over every channel this run has and
// waits for the first answer or the timeout. It returns ApprovalNotRequired
// when no channel exists. The approval socket shows the approver the
// resolved paths in clear (it is local and peer-checked); the log line and
// the elicitation name the tool and class only.
func (s *session) awaitApproval(rq *request, tool string, class policy.Class, paths []string) schema.ApprovalState {
	opID := s.opID(rq)
	var socket <-chan bool
	if s.cfg.Approvals != nil {
		socket = s.cfg.Approvals.Register(approval.Pending{RunID: s.cfg.RunID, OpID: opID, Tool: truncate(tool, 128), Class: string(class),
			Paths: paths, Since: time.Now().UTC().Format(time.RFC3339)})
		defer s.cfg.Approvals.Unregister(opID)
	}
	var elicit chan *jsonrpc.Message
	_, canElicit, _ := s.client.declared()
	canElicit = canElicit && rq.era == eraLegacy
	var elicitID int64
	if canElicit {
		elicit = make(chan *jsonrpc.Message, 1)
		elicitID = s.newID()
		s.pend.addCli(elicitID, &cliCall{answer: elicit})
	}
	if socket == nil && elicit == nil {
		return schema.ApprovalNotRequired
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
		defer s.pend.takeCli(elicitID)
	}
	// A notifications/cancelled for this request withdraws it.
	cancelled, stop := s.pend.awaitCancel(idKey(rq.id))
	defer stop()
	t := time.NewTimer(s.cfg.ApprovalTimeout)
	defer t.Stop()
	for {
		select {
		case <-cancelled:
			return schema.ApprovalDenied
		case ok := <-socket:
			if ok {
				return schema.ApprovalApproved
			}
			return schema.ApprovalDenied
		case m := <-elicit:
			var res struct {
				Action string `json:"action"`
			}
			if m != nil && m.Error == nil && strictjson.Unmarshal(m.Result, &res, strictjson.AllowUnknownMembers()) == nil {
				if res.Action == "accept" {
					return schema.ApprovalApproved
				}
				return schema.ApprovalDenied
			}
			elicit = nil // an error answer: keep waiting for the socket
			if socket == nil {
				return schema.ApprovalDenied
			}
		case <-t.C:
			return schema.ApprovalTimedOut
		case <-s.life.done:
			return schema.ApprovalDenied
		}
	}
}

// finish writes the client's answer, then queues the request's decision
// record (its end time is taken before the write).
func (s *session) finish(rq *request, frame []byte, code schema.ErrorCode) {
	if mc := rq.mrtr.Load(); mc != nil {
		var write, record bool
		if frame, write, record = s.mrtrFinish(mc, frame, code); !write {
			if record {
				s.record(rq, code)
			}
			return
		}
	}
	s.pend.release(rq) // before the write: the client may reuse the id once it has the answer
	if rq.dec == nil {
		s.toClient(frame)
		return
	}
	s.endRecord(rq, code)
	s.toClient(frame)
	s.rec.addPaths(*rq.dec, rq.paths)
}

// record queues rq's decision record with code (if any).
func (s *session) record(rq *request, code schema.ErrorCode) {
	if rq.dec == nil {
		return
	}
	s.endRecord(rq, code)
	s.rec.addPaths(*rq.dec, rq.paths)
}

func (s *session) endRecord(rq *request, code schema.ErrorCode) {
	end := s.cfg.Now()
	rq.dec.EndNS = end.UnixNano()
	rq.dec.LatencyMS = float64(end.Sub(rq.start).Microseconds()) / 1000
	if code != "" {
		rq.dec.ErrorCode = string(code)
	}
}

// deny answers a refused request. A tool call's policy denial is a tool
// result with isError, so the model sees why; anything else, and a run
// that stopped (expired, revoked, audit sink down), is a JSON-RPC error
// whose message starts with the code and whose data names it.
func (s *session) deny(rq *request, code schema.ErrorCode, reason string) {
	if rq.dec != nil {
		rq.dec.Decision = schema.OutcomeDeny
	}
	_, stops := stopErrors[code]
	if rq.method == "tools/call" && !stops && rq.dec != nil {
		s.finish(rq, jsonrpc.Result(rq.id, s.denialResult(rq, code, reason)), code)
	} else {
		data := map[string]string{"error_code": string(code)}
		if rq.dec != nil {
			data["op_id"] = s.opID(rq)
		}
		s.finish(rq, jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeDenied, "mcpwarden: "+string(code)+": "+reason, data), code)
	}
	s.stopFor(code) // the denial is written first, then the run stops
}

func (s *session) denialResult(rq *request, code schema.ErrorCode, reason string) json.RawMessage {
	res := map[string]any{
		"content": []map[string]string{{"type": "text", "text": "mcpwarden denied this call: " + string(code) + ": " + reason}},
		"isError": true,
		"_meta":   map[string]string{"io.mcpwarden/error_code": string(code), "io.mcpwarden/op_id": s.opID(rq)},
	}
	if rq.era == eraModern {
		res["resultType"] = "complete"
	}
	return mustJSON(res)
}

func errorFrame(id json.RawMessage, code int, msg string) []byte {
	return jsonrpc.ErrorResponse(id, code, msg, nil)
}
