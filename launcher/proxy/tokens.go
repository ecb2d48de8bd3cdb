package proxy

import (
	"encoding/json"
	"sync"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// The protocol's own tokens in a client's request (round twelve). A
// cursor is only ever one the server handed out (a list result's
// nextCursor), and so is an input round's requestState (an input_required
// result's): the proxy remembers each it passed to the client in this
// session, and a token the server issued reaches it unread, whatever it
// holds (a standard base64 cursor starts with '/' one time in 64). A
// string token the server never issued — and a progressToken, which the
// client makes up — is checked (policy.CheckToken): "cursor":
// "/etc/passwd" is refused, "/abc+=" passes. A token member where the
// method has no such token (a cursor in tools/call, a requestState in
// tools/list) is checked as any other member.

// tokenMethods: the methods whose params carry each token.
var tokenMethods = map[string]map[string]bool{
	"cursor": {"tools/list": true, "resources/list": true, "resources/templates/list": true, "prompts/list": true, "tasks/list": true},
	// (A translated round's own state is taken before the check:
	// resumeInput.)
	"requestState": mrtrMethods,
}

// resultToken is the member of a method's result that issues a token.
func resultToken(method string) string {
	switch {
	case tokenMethods["cursor"][method]:
		return "nextCursor"
	case mrtrMethods[method]:
		return "requestState"
	}
	return ""
}

// maxIssuedTokens bounds the tokens remembered (the oldest is forgotten
// first); maxTokenLen the length of one (a longer one is not remembered,
// and is checked if the client sends it back).
const (
	maxIssuedTokens = 4096
	maxTokenLen     = 4096
)

// issuedTokens are the tokens the server handed the client in this
// session, of any server process (a client may page on after a restart).
// A leaf lock.
type issuedTokens struct {
	mu    sync.Mutex
	set   map[string]struct{}
	order []string // ring of maxIssuedTokens, next at pos
	pos   int
}

func (it *issuedTokens) add(tok string) {
	if len(tok) == 0 || len(tok) > maxTokenLen {
		return
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if _, ok := it.set[tok]; ok {
		return
	}
	if it.set == nil {
		it.set = map[string]struct{}{}
	}
	if len(it.order) < maxIssuedTokens {
		it.order = append(it.order, tok)
	} else {
		delete(it.set, it.order[it.pos])
		it.order[it.pos] = tok
		it.pos = (it.pos + 1) % maxIssuedTokens
	}
	it.set[tok] = struct{}{}
}

func (it *issuedTokens) has(tok string) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	_, ok := it.set[tok]
	return ok
}

// noteIssued remembers the token a result hands the client (its
// nextCursor, its requestState), if any.
func (s *session) noteIssued(method string, result json.RawMessage) {
	key := resultToken(method)
	if key == "" || !mayHold(result, key) {
		return
	}
	var m map[string]json.RawMessage
	if strictjson.Unmarshal(result, &m) != nil {
		return
	}
	var tok string
	if strictjson.Unmarshal(m[key], &tok) == nil {
		s.issued.add(tok)
	}
}
