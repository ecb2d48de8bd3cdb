package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/roots"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Multi-round-trip requests (MRTR, SEP-2322) of the 2026-07-28 era. A
// modern client gets no server→client requests: a server that needs
// sampling, elicitation or roots answers tools/call, prompts/get or
// resources/read with an input_required result listing inputRequests; the
// client fulfils them and sends the call again with inputResponses and the
// result's opaque requestState.
//
// The proxy takes part in two ways:
//
//   - Translation. A legacy server asks a modern client for sampling or
//     elicitation in the middle of a call (a server→client request on
//     stdio). The proxy holds the server's request, answers the client's
//     call with an input_required result carrying it (a requestState of
//     its own, "mcpwarden.t1.<random>", one per round and used once), and
//     when the client sends the call again, answers the server's request
//     with the client's inputResponse. The server's answer to the call
//     goes to the client's latest request. The call was decided once,
//     when it was first admitted; it has one decision record.
//
//   - Roots. A modern server asks the client's roots (an inputRequest
//     roots/list). The proxy tags the round: its requestState becomes
//     "mcpwarden.r1.<session nonce>.<generation>.<the server's own state,
//     base64url>", which it turns back into the server's own state before
//     the retry goes upstream. The client's answer narrows the proxy's own
//     checks with the legacy rules (an empty first answer narrows nothing,
//     some roots → none revokes every path, an answer to an older round
//     than the one in effect is ignored) and the server gets the effective
//     scope narrowed by the answer, never the client's roots.

// Prefixes of the requestState values the proxy makes.
const (
	translatedStatePrefix = "mcpwarden.t1."
	rootsStatePrefix      = "mcpwarden.r1."
)

// mrtrMethods are the requests that may carry an input_required round.
var mrtrMethods = map[string]bool{"tools/call": true, "prompts/get": true, "resources/read": true}

// maxAsksPerCall bounds the server requests one translated call may hold.
const maxAsksPerCall = 16

// DefaultInputTimeout is how long a translated round waits for the client
// to send its call again.
const DefaultInputTimeout = 5 * time.Minute

// mrtrCall is a modern client's call whose server asked for client input
// in the middle of it (translation). Its fields are guarded by
// pendingTables.mu.
type mrtrCall struct {
	rq      *request
	current json.RawMessage // the client id the call's answer goes to: the original or the latest retry
	owner   *request        // the request whose id current is (it holds the id in flight while open; ids.go)
	open    bool            // a client request (current) waits for an answer
	token   string          // the requestState of the round the client holds ("" while open)
	queued  []*serverAsk    // server requests not yet sent to the client
	sent    []*serverAsk    // the round the client holds
	held    int             // bytes of the params of queued and sent
	nextKey int
	timer   *time.Timer
	// final is the call's answer when it came while no client request was
	// open: it waits for the client's next retry.
	final     []byte
	finalCode schema.ErrorCode
	hasFinal  bool
	done      bool // answered or abandoned
}

// serverAsk is a server→client request held for a modern client.
type serverAsk struct {
	key    string
	id     json.RawMessage // the server's id
	method string
	params json.RawMessage
	gen    uint64
	w      *jsonrpc.Writer
}

// askModernClient turns a server request into an input request of the
// modern client call it belongs to. It reports false when no modern call
// is in flight on server process gen (the request is then the legacy
// relay's to handle).
func (s *session) askModernClient(gen uint64, w *jsonrpc.Writer, m *jsonrpc.Message) bool {
	s.pend.mu.Lock()
	rq := s.pend.modernCaller(gen)
	if rq == nil {
		s.pend.mu.Unlock()
		return false
	}
	caps, _ := rq.meta(metaClientCaps)
	if !declaresCapability(caps, capabilityFor(m.Method)) {
		s.pend.mu.Unlock()
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeMethodNotFound, "the client did not declare this capability", nil))
		return true
	}
	mc := rq.mrtr.Load()
	if mc == nil {
		mc = &mrtrCall{rq: rq, current: rq.id, owner: rq, open: true}
		rq.mrtr.Store(mc)
	}
	if mc.done || len(mc.queued)+len(mc.sent) >= maxAsksPerCall {
		s.pend.mu.Unlock()
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInternalError, "too many requests to the client in one call", nil))
		return true
	}
	// A round is one frame to the client: what it holds counts against
	// the response cap, as an answer would.
	if mc.held+len(m.Params) > s.cfg.MaxResponseBytes {
		s.pend.mu.Unlock()
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInternalError, "the request is larger than this run's response cap", nil))
		return true
	}
	mc.held += len(m.Params)
	mc.nextKey++
	mc.queued = append(mc.queued, &serverAsk{key: "input-" + strconv.Itoa(mc.nextKey), id: m.ID, method: m.Method, params: m.Params, gen: gen, w: w})
	frame := s.nextRoundLocked(mc)
	s.pend.mu.Unlock()
	if frame != nil {
		s.toClient(frame)
	}
	return true
}

// modernCaller is the oldest modern client call in flight on server
// process gen that can carry an input_required round, or nil. On stdio a
// server request does not name the call it belongs to; with one call in
// flight (the common case) it is that one.
func (pt *pendingTables) modernCaller(gen uint64) *request {
	var best *request
	var bestID int64
	for id, c := range pt.up {
		if c.gen != gen || c.req == nil || c.req.era != eraModern || !mrtrMethods[c.req.method] {
			continue
		}
		if best == nil || id < bestID {
			best, bestID = c.req, id
		}
	}
	return best
}

func capabilityFor(method string) string {
	if method == "sampling/createMessage" {
		return "sampling"
	}
	return "elicitation"
}

// declaresCapability reports whether modern clientCapabilities name cap.
func declaresCapability(caps json.RawMessage, cap string) bool {
	var m map[string]json.RawMessage
	if strictjson.Unmarshal(caps, &m) != nil {
		return false
	}
	_, ok := m[cap]
	return ok
}

// nextRoundLocked answers the open client request of mc with an
// input_required result holding every queued server request, and returns
// that frame (nil when there is nothing to ask or no request is open).
// Called with pendingTables.mu held.
func (s *session) nextRoundLocked(mc *mrtrCall) []byte {
	if !mc.open || len(mc.queued) == 0 || mc.done {
		return nil
	}
	reqs := make(map[string]any, len(mc.queued))
	for _, a := range mc.queued {
		r := map[string]json.RawMessage{"method": mustJSON(a.method)}
		if a.params != nil {
			r["params"] = a.params
		}
		reqs[a.key] = r
	}
	token := translatedStatePrefix + schema.NewID()
	s.pend.releaseLocked(mc.owner) // the round answers the open request
	mc.sent, mc.queued = mc.queued, nil
	mc.open, mc.token = false, token
	s.pend.rounds[token] = mc
	if mc.timer != nil {
		mc.timer.Stop()
	}
	mc.timer = time.AfterFunc(s.cfg.InputTimeout, func() { s.expireRound(mc, token) })
	return jsonrpc.Result(mc.current, mustJSON(map[string]any{
		"resultType": "input_required", "inputRequests": reqs, "requestState": token,
	}))
}

// resumeInput handles the requestState of a modern client's request. A
// retry of a translated round is answered here (true: nothing more to do);
// a retry of a roots round is untagged and its roots answer applied, and
// the request continues (false).
func (s *session) resumeInput(rq *request) bool {
	raw, ok := rq.raw.Param("requestState")
	if !ok {
		return false
	}
	state, ok := jsonrpc.String(raw)
	if !ok {
		return false
	}
	switch {
	case strings.HasPrefix(state, rootsStatePrefix):
		s.untagRootsRound(rq, state)
		return false
	case strings.HasPrefix(state, translatedStatePrefix):
		s.resumeTranslated(rq, state)
		return true
	}
	return false
}

// resumeTranslated takes a modern client's retry of a translated round:
// the answers go to the server's requests, and the retry waits for the
// call's answer (or gets the next round).
func (s *session) resumeTranslated(rq *request, token string) {
	s.pend.mu.Lock()
	mc := s.pend.rounds[token]
	if mc == nil || mc.done {
		s.pend.mu.Unlock()
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeInvalidParams, "mcpwarden: requestState is unknown, used already or expired; send the call again without it", nil))
		s.recordProtocolDenial(rq.method, rq.era, rq.version, schema.ErrMalformedRequest)
		return
	}
	if rq.method != mc.rq.method || !sameCall(membersMap(mc.rq.raw.ParamMembers), membersMap(rq.raw.ParamMembers)) {
		// The round stays valid for the call it belongs to.
		s.pend.mu.Unlock()
		s.toClient(jsonrpc.ErrorResponse(rq.id, jsonrpc.CodeInvalidParams, "mcpwarden: requestState belongs to another call; send the same call with it", nil))
		s.recordProtocolDenial(rq.method, rq.era, rq.version, schema.ErrMalformedRequest)
		return
	}
	delete(s.pend.rounds, token)
	if mc.timer != nil {
		mc.timer.Stop()
	}
	var answers map[string]json.RawMessage
	if r, ok := rq.raw.Param("inputResponses"); ok && strictjson.Unmarshal(r, &answers) != nil {
		answers = nil
	}
	type delivery struct {
		a      *serverAsk
		answer json.RawMessage
	}
	var deliver []delivery
	for _, a := range mc.sent {
		if v, ok := answers[a.key]; ok && firstByte(v) == '{' {
			deliver = append(deliver, delivery{a, v})
			mc.held -= len(a.params)
		} else if !mc.hasFinal {
			mc.queued = append(mc.queued, a) // not answered: asked again
		}
	}
	mc.sent = nil
	mc.current, mc.owner, mc.open, mc.token = rq.id, rq, true, ""
	s.pend.claimLocked(rq, mc.rq) // until the next round or the answer
	var frame []byte
	var code schema.ErrorCode
	finished := false
	if mc.hasFinal {
		frame, code, finished = reID(mc.final, rq.id), mc.finalCode, true
		mc.done = true
		s.pend.releaseLocked(rq)
	} else {
		frame = s.nextRoundLocked(mc)
	}
	s.pend.mu.Unlock()
	s.upst.mu.Lock()
	current := s.upst.gen
	s.upst.mu.Unlock()
	eff := s.scope.current().paths
	for _, d := range deliver {
		if d.a.gen != current {
			continue
		}
		// What the client answered, the server reads (policy.CheckClientAnswer).
		if paths, den := s.pol.CheckClientAnswer(d.answer, eff); den != nil {
			s.log.Warn("client answer to a server request refused: it names a path the scope does not allow", "error_code", string(den.Code))
			s.toServer(d.a.w, jsonrpc.ErrorResponse(d.a.id, jsonrpc.CodeDenied, "mcpwarden: "+string(den.Code)+": the client's answer: "+den.Reason, map[string]string{"error_code": string(den.Code)}))
			s.recordServerRequest(d.a.method, paths, den.Code)
			continue
		}
		s.toServer(d.a.w, jsonrpc.Result(d.a.id, d.answer))
	}
	if finished {
		s.record(mc.rq, code)
	}
	if frame != nil {
		s.toClient(frame)
	}
}

// mrtrFinish routes the answer of a call that had an input round: to the
// client's open request (re-addressed to its id), or held until the
// client's next retry. write: frame is to be written (and recorded as any
// answer); record: nothing is written, but the call is recorded now.
func (s *session) mrtrFinish(mc *mrtrCall, frame []byte, code schema.ErrorCode) (out []byte, write, record bool) {
	s.pend.mu.Lock()
	var drop []*serverAsk
	defer func() {
		s.pend.mu.Unlock()
		s.refuseAsks(drop)
	}()
	switch {
	case mc.done:
		// Abandoned by the client: nobody waits, but the call is recorded.
		return nil, false, true
	case mc.open:
		mc.done = true
		s.pend.releaseLocked(mc.owner)
		drop = s.takeAsksLocked(mc)
		return reID(frame, mc.current), true, false
	case s.isStopped():
		mc.done = true
		delete(s.pend.rounds, mc.token)
		drop = s.takeAsksLocked(mc)
		return nil, false, true
	}
	mc.final, mc.finalCode, mc.hasFinal = frame, code, true
	return nil, false, false
}

// takeAsksLocked takes the server requests of mc that will never reach
// the client (its call ended or was abandoned); refuseAsks answers them.
func (s *session) takeAsksLocked(mc *mrtrCall) []*serverAsk {
	asks := slices.Concat(mc.queued, mc.sent)
	mc.queued, mc.sent, mc.held = nil, nil, 0
	if mc.timer != nil {
		mc.timer.Stop()
	}
	return asks
}

func (s *session) refuseAsks(asks []*serverAsk) {
	for _, a := range asks {
		s.toServer(a.w, jsonrpc.ErrorResponse(a.id, jsonrpc.CodeInternalError, "the client did not answer", nil))
	}
}

// expireRound abandons a round the client did not answer in time.
func (s *session) expireRound(mc *mrtrCall, token string) {
	s.pend.mu.Lock()
	if mc.done || mc.token != token || s.pend.rounds[token] != mc {
		s.pend.mu.Unlock()
		return
	}
	delete(s.pend.rounds, token)
	mc.done = true
	drop := s.takeAsksLocked(mc)
	held := mc.hasFinal
	s.pend.mu.Unlock()
	s.refuseAsks(drop)
	if held {
		s.record(mc.rq, mc.finalCode)
	}
}

// abandonRounds records the calls whose answer waited for a retry that
// will not come (the session ends).
func (s *session) abandonRounds() {
	s.pend.mu.Lock()
	var held []*mrtrCall
	for token, mc := range s.pend.rounds {
		delete(s.pend.rounds, token)
		if !mc.done {
			mc.done = true
			if mc.timer != nil {
				mc.timer.Stop()
			}
			if mc.hasFinal {
				held = append(held, mc)
			}
		}
	}
	s.pend.mu.Unlock()
	for _, mc := range held {
		s.record(mc.rq, mc.finalCode)
	}
}

// reID re-addresses one of the proxy's own response frames to id.
func reID(frame []byte, id json.RawMessage) []byte {
	m, err := jsonrpc.Parse(frame)
	if err != nil || m.Kind != jsonrpc.KindResponse || bytes.Equal(m.ID, id) {
		return frame
	}
	return jsonrpc.Forward(m, id)
}

// sameCall reports whether two requests' params name the same call: equal
// but for _meta, inputResponses and requestState.
func sameCall(a, b map[string]json.RawMessage) bool {
	skip := func(k string) bool { return k == "_meta" || k == "inputResponses" || k == "requestState" }
	n := 0
	for k, va := range a {
		if skip(k) {
			continue
		}
		n++
		vb, ok := b[k]
		if !ok || !sameJSON(va, vb) {
			return false
		}
	}
	for k := range b {
		if !skip(k) {
			n--
		}
	}
	return n == 0
}

func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// --- roots rounds of a modern server ---------------------------------------

// modernRoots numbers the roots/list input requests a modern server sends
// a modern client. A leaf lock: the upstream reader takes it, and nothing
// else is taken while it is held.
type modernRoots struct {
	mu     sync.Mutex
	latest uint64
	keys   map[uint64][]string // the roots/list keys of recent rounds
}

// maxRootsRounds bounds how many rounds' keys are kept; only the newest
// rounds can still be applied anyway.
const maxRootsRounds = 64

func (mr *modernRoots) issue(keys []string) uint64 {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	mr.latest++
	if mr.keys == nil {
		mr.keys = map[uint64][]string{}
	}
	mr.keys[mr.latest] = keys
	delete(mr.keys, mr.latest-maxRootsRounds)
	return mr.latest
}

func (mr *modernRoots) keysOf(gen uint64) ([]string, bool) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	k, ok := mr.keys[gen]
	return k, ok
}

// tagRootsRound tags a modern server's input_required result that asks
// the client's roots, so that the client's answer can be told from an
// answer to an older round.
func (s *session) tagRootsRound(result json.RawMessage) json.RawMessage {
	// includeContext "allServers": see narrowInputRequests.
	narrowed := narrowInputRequests(result)
	var res map[string]json.RawMessage
	var rt string
	if strictjson.Unmarshal(narrowed, &res) != nil || res == nil || strictjson.Unmarshal(res["resultType"], &rt) != nil || rt != "input_required" {
		return narrowed
	}
	var reqs map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if strictjson.Unmarshal(res["inputRequests"], &reqs, strictjson.AllowUnknownMembers()) != nil {
		return narrowed
	}
	var keys []string
	for k, r := range reqs {
		if r.Method == "roots/list" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return narrowed
	}
	gen := s.mroots.issue(keys)
	res["requestState"] = mustJSON(rootsState(s.nonce, gen, res["requestState"]))
	return mustJSON(res)
}

// rootsState is the requestState of a tagged roots round: the session's
// nonce, the round and the server's own state (raw JSON; nil: none).
func rootsState(nonce string, gen uint64, own json.RawMessage) string {
	return rootsStatePrefix + nonce + "." + strconv.FormatUint(gen, 10) + "." + base64.RawURLEncoding.EncodeToString(own)
}

// parseRootsState reads a tagged requestState; ok is false for anything
// the proxy did not make (own is then nil), and own is valid JSON or empty
// (the server sent none).
func parseRootsState(state string) (nonce string, gen uint64, own json.RawMessage, ok bool) {
	rest, found := strings.CutPrefix(state, rootsStatePrefix)
	if !found {
		return "", 0, nil, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", 0, nil, false
	}
	gen, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return "", 0, nil, false
	}
	own, err = base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || (len(own) > 0 && strictjson.Unmarshal(own, new(any)) != nil) {
		return "", 0, nil, false
	}
	return parts[0], gen, own, true
}

// untagRootsRound restores the server's own requestState of a retry and,
// when the round is this session's, applies the client's roots answer.
// A value that does not parse is left as it is: the server refuses it as
// it refuses any state it did not make.
func (s *session) untagRootsRound(rq *request, state string) {
	nonce, gen, own, ok := parseRootsState(state)
	if !ok {
		return // not what the proxy made: passed on as it is
	}
	rq.ownState = &stateRestore{raw: own}
	if nonce != s.nonce {
		return // a round of another run (a bridge may start one per request)
	}
	keys, ok := s.mroots.keysOf(gen)
	if !ok {
		return
	}
	var answers map[string]json.RawMessage
	if strictjson.Unmarshal(rq.param("inputResponses"), &answers) != nil {
		return
	}
	var given []json.RawMessage
	for _, k := range keys {
		if v, ok := answers[k]; ok {
			given = append(given, v)
		}
	}
	if len(given) == 0 {
		return
	}
	valid := true
	var client []string
	for i, v := range given {
		c, err := roots.ParseResult(v)
		if err != nil || (i > 0 && !sameSet(client, c)) {
			valid, client = false, nil // a malformed or inconsistent answer: no roots
			break
		}
		client = c
	}
	s.scope.mu.Lock()
	if gen <= s.scope.modernApplied {
		s.scope.mu.Unlock()
		s.log.Info("roots answer to an older round ignored", "round", gen)
		return
	}
	s.scope.modernApplied = gen
	s.narrowToClientRoots(valid, client) // unlocks scope.mu
}

// stateRestore is the server's own requestState of a tagged round (raw
// nil: the server sent none).
type stateRestore struct{ raw json.RawMessage }

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
