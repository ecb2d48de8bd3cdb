package proxy

import (
	"encoding/json"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
)

// The proxy passes only what these tables name; everything else is refused
// and recorded. Each row says who may send it (which protocol era), how it
// is decided and what is recorded. docs/proxy.md ("Methods") is this table
// in prose; TestMethodTableIsDenyByDefault holds the two together.

// eraSet is the set of client eras a method is passed in.
type eraSet uint8

const (
	inLegacy eraSet = 1 << iota
	inModern
	inBoth = inLegacy | inModern
)

func (e eraSet) has(era string) bool {
	if era == eraModern {
		return e&inModern != 0
	}
	return e&inLegacy != 0
}

// clientMethod is how a client→server request is handled.
type clientMethod struct {
	eras eraSet
	// serve answers the request in the proxy itself (the handshake, ping);
	// such requests never reach the server and are not recorded.
	serve func(s *session, rq *request)
	// decide checks what can be checked without the scope view (names,
	// allowlists, classes, attribution) and returns how the admission gate
	// decides the rest, or a denial. Every request it passes goes through
	// the gate (gate.go) and leaves one decision record.
	decide func(s *session, rq *request) (admission, *policy.Denial)
	// answer builds the client's answer from the server's result (filters,
	// modern-era completion); nil forwards it (completed for modern clients).
	answer func(s *session, rq *request, result json.RawMessage) json.RawMessage
	// own names the params members decide reads and checks itself; every
	// other member (and _meta, but for its progressToken) is checked by
	// the gate for strings that look like paths (checkRest).
	own []string
	// results: the server's answer may embed resources; its file:// URIs
	// are checked before it reaches the client (policy.CheckResultURIs).
	results bool
	// capped: the answer counts against MaxResponseBytes.
	capped bool
	// cacheable: a modern-era result carries ttlMs and cacheScope.
	cacheable bool
}

// methods is the proxy's table: every message it passes, in both
// directions.
type methods struct {
	// requests is every client→server request the proxy passes.
	requests map[string]*clientMethod
	// notifications is every client→server notification the proxy acts on;
	// all others are dropped and recorded.
	notifications map[string]func(s *session, m *jsonrpc.Message)
	// serverRequests is every server→client request the proxy answers or
	// relays; all others get -32601 and are recorded.
	serverRequests map[string]func(s *session, gen uint64, w *jsonrpc.Writer, m *jsonrpc.Message)
	// serverNotifications may pass to the client; anything else (including
	// a "notification" named like a request) is dropped.
	serverNotifications map[string]bool
}

// newMethods builds the table (once per Proxy: its rows refer to session
// methods, which a package-level variable could not without an
// initialisation cycle).
func newMethods() *methods {
	noCheck := func(*session, *request) (admission, *policy.Denial) { return admission{}, nil }
	return &methods{
		requests: map[string]*clientMethod{
			// 2026-07-28 removed initialize, ping, logging/setLevel and
			// resources/(un)subscribe (SEP-2575, SEP-2567): sent with modern
			// _meta they are unknown methods (-32601), as a modern server
			// answers them.
			"initialize":      {eras: inLegacy, serve: (*session).onInitialize},
			"ping":            {eras: inLegacy, serve: (*session).onPing},
			"server/discover": {eras: inBoth, serve: (*session).onDiscover},

			"tools/list":               {eras: inBoth, decide: noCheck, answer: (*session).filterTools, cacheable: true},
			"tools/call":               {eras: inBoth, decide: (*session).decideToolCall, own: []string{"name", "arguments"}, results: true, capped: true},
			"resources/list":           {eras: inBoth, decide: noCheck, answer: (*session).filterResources, cacheable: true},
			"resources/templates/list": {eras: inBoth, decide: noCheck, answer: (*session).filterTemplates, cacheable: true},
			"resources/read":           {eras: inBoth, decide: (*session).decideResource, own: []string{"uri"}, results: true, capped: true, cacheable: true},
			"resources/subscribe":      {eras: inLegacy, decide: (*session).decideResource, own: []string{"uri"}},
			"resources/unsubscribe":    {eras: inLegacy, decide: (*session).decideResource, own: []string{"uri"}},
			// subscriptions/listen replaces them: every URI it subscribes to
			// is decided as a resource read.
			"subscriptions/listen": {eras: inModern, decide: (*session).decideListen, own: []string{"notifications"}},
			"prompts/list":         {eras: inBoth, decide: noCheck, answer: (*session).filterPrompts, cacheable: true},
			"prompts/get":          {eras: inBoth, decide: (*session).decidePrompt, own: []string{"name", "arguments"}, results: true, capped: true},
			"completion/complete":  {eras: inBoth, decide: (*session).decideCompletion, answer: (*session).filterCompletions, own: []string{"ref", "argument", "context"}},
			"logging/setLevel":     {eras: inLegacy, decide: noCheck},
			// Tasks (2025-11-25): a tools/call with a "task" member is
			// decided as any call and answered with the server's task; its
			// result, fetched later by tasks/result, is the call's answer
			// and gets the call's answer checks (file URIs, the size cap).
			// Tasks of the 2026-07-28 era (the io.modelcontextprotocol/tasks
			// extension): a tools/call the server answers with resultType
			// "task" was decided as any call; tasks/get carries the call's
			// result inline once it completed (the same answer checks) and
			// the server's input requests while it waits for input (a
			// sampling's includeContext narrowed); tasks/update carries the
			// client's answers (roots answers rewritten, as in input
			// rounds, and narrowing the proxy's checks and the fence:
			// decideTaskUpdate); tasks/cancel passes. 2026-07-28 has no tasks/list
			// and no tasks/result.
			"tasks/get":    {eras: inBoth, decide: noCheck, answer: (*session).taskAnswer, results: true, capped: true},
			"tasks/update": {eras: inModern, decide: (*session).decideTaskUpdate, own: []string{"taskId"}},
			"tasks/list":   {eras: inLegacy, decide: noCheck},
			"tasks/cancel": {eras: inBoth, decide: noCheck},
			"tasks/result": {eras: inLegacy, decide: noCheck, results: true, capped: true},
		},
		notifications: map[string]func(*session, *jsonrpc.Message){
			"notifications/initialized":        (*session).onClientInitialized,
			"notifications/roots/list_changed": func(s *session, _ *jsonrpc.Message) { s.askClientRoots() },
			"notifications/cancelled":          (*session).forwardCancel,
		},
		serverRequests: map[string]func(*session, uint64, *jsonrpc.Writer, *jsonrpc.Message){
			"roots/list": (*session).answerServerRoots,
			"ping": func(s *session, _ uint64, w *jsonrpc.Writer, m *jsonrpc.Message) {
				s.toServer(w, jsonrpc.Result(m.ID, json.RawMessage(`{}`)))
			},
			"elicitation/create":     (*session).relayServerRequest,
			"sampling/createMessage": (*session).relayServerRequest,
		},
		serverNotifications: map[string]bool{
			"notifications/message":                true,
			"notifications/progress":               true,
			"notifications/tools/list_changed":     true,
			"notifications/resources/list_changed": true,
			"notifications/resources/updated":      true,
			"notifications/prompts/list_changed":   true,
			// URL elicitation finished (2025-11-25).
			"notifications/elicitation/complete": true,
			// first message on a subscriptions/listen stream (2026-07-28).
			"notifications/subscriptions/acknowledged": true,
			// a task's status changed (2025-11-25).
			"notifications/tasks/status": true,
			// a task's status changed, its result inline once it
			// completed (2026-07-28 tasks extension): checked as tasks/get.
			"notifications/tasks": true,
		},
	}
}

// recordRefusedMethod records a request or notification of a method the
// tables do not pass (or not in this era).
func (s *session) recordRefusedMethod(method, era, version string) {
	s.recordProtocolDenial(method, era, version, schema.ErrMethodNotAllowed)
}
