package proxy

import (
	"bytes"
	"encoding/json"
	"math/big"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Client ids in flight. JSON-RPC requires a client's id to be unique among
// its requests in flight; a client that reuses one cannot tell the answers
// apart, and a cancellation naming it could stop either. The proxy keeps
// the ids of the client requests it has not answered yet and refuses a
// request whose id is one of them (-32600, recorded as MALFORMED_REQUEST);
// the first request is not touched. An id is free again as soon as its
// answer is decided — before the answer is written, so a client that
// reuses an id once it has its answer is never refused.
//
// A translated call (mrtr.go) is answered once per round: its id is free
// once the input_required result is decided, and the retry's id is in
// flight until the next round or the call's answer.

// liveID is one client id in flight.
type liveID struct {
	owner *request // the request the id is the client's id of (a retry, for a translated call)
	call  *request // the request forwarded upstream for it: owner, or the translated call owner retries
}

// idKey is the identity of a client id: strings by their value, numbers by
// their value (1, 1.0 and 1e0 are one id to a JavaScript client; the
// proxy echoes each as written, but a client reading them cannot tell them
// apart). A string's key starts with '"', a number's never does.
func idKey(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		if bytes.IndexByte(raw, '\\') < 0 {
			return string(raw)
		}
		v, _ := jsonrpc.String(raw)
		return `"` + v + `"`
	}
	if plainInt(raw) {
		return string(raw)
	}
	f, _, err := big.ParseFloat(string(raw), 10, 512, big.ToNearestEven)
	switch {
	case err != nil || f.IsInf():
		return string(raw)
	case f.Sign() == 0:
		return "0" // -0 is 0
	case f.IsInt() && f.MantExp(nil) <= 512:
		return f.Text('f', 0)
	}
	return f.Text('g', 160)
}

// plainInt reports whether raw is an integer in its canonical spelling
// (no sign on zero, no fraction or exponent).
func plainInt(raw []byte) bool {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || (digits[0] == '0' && (len(digits) > 1 || len(raw) != len(digits))) {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// idLive reports whether a client request with id key is in flight.
func (pt *pendingTables) idLive(key string) bool {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	_, ok := pt.live[key]
	return ok
}

// claim marks rq's id in flight, for call (see liveID). Only the client's
// reader claims, after it found the id free.
func (pt *pendingTables) claim(rq, call *request) {
	pt.mu.Lock()
	pt.claimLocked(rq, call)
	pt.mu.Unlock()
}

func (pt *pendingTables) claimLocked(rq, call *request) {
	if rq.key == "" {
		rq.key = idKey(rq.id)
	}
	pt.live[rq.key] = liveID{owner: rq, call: call}
}

// release frees rq's id if rq holds it.
func (pt *pendingTables) release(rq *request) {
	pt.mu.Lock()
	pt.releaseLocked(rq)
	pt.mu.Unlock()
}

func (pt *pendingTables) releaseLocked(rq *request) {
	if rq == nil || rq.key == "" {
		return
	}
	if l, ok := pt.live[rq.key]; ok && l.owner == rq {
		delete(pt.live, rq.key)
	}
}

// refuseDuplicateID answers a request whose id is in flight already, and
// reports whether it did.
func (s *session) refuseDuplicateID(rq *request) bool {
	rq.key = idKey(rq.id)
	if !s.pend.idLive(rq.key) {
		return false
	}
	s.readEra(rq)
	s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeInvalidRequest, "mcpwarden: a request with this id is in flight already; ids must be unique among requests in flight", nil))
	s.recordProtocolDenial(rq.method, rq.era, rq.version, schema.ErrMalformedRequest)
	return true
}
