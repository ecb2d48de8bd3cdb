package policy

import (
	"encoding/json"

	"github.com/mcpwarden/mcpwarden/schema"
)

// CheckToken decides a protocol token that is a string the server did not
// hand out in this session (round twelve): a list's cursor, an input
// round's requestState, a progressToken (the client's own). The server
// reads it back, so a path in it is checked as one in any other member
// (CheckValues: "/etc/passwd", "../x", "file:///…", ".env", base64 of a
// path). One exception keeps genuine tokens whole: a token in the base64
// alphabet (either one, with its padding) that is absolute — a standard
// base64 token starts with '/' one time in 64 — passes when it names
// nothing on this host and no secret ("/abc+=" passes, "/etc/passwd" and
// "/x/id_rsa" do not), and so does one whose only '/' is its first
// character (a name at the root of the host is a directory there, never
// a file a server reads: "/t"). The tokens the server issued are never checked
// (the proxy remembers them: launcher/proxy/tokens.go).
func (p *Policy) CheckToken(key, tok string, effective []string) ([]string, *Denial) {
	if !TokenMayHoldPath(jsonQuoted(tok)) || len(tok) > 1 && tok[0] == '/' && base64Alphabet(tok) && !Exists(tok) && !namesSecret(p, tok) {
		return nil, nil
	}
	raw, err := json.Marshal(map[string]string{key: tok})
	if err != nil {
		return nil, deny(schema.ErrMalformedRequest, "the %s is not valid UTF-8", key)
	}
	return p.CheckValues(raw, effective)
}

// base64Alphabet: every byte of s is of the standard or the URL-safe
// base64 alphabet, or padding.
func base64Alphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_' || c == '=') {
			return false
		}
	}
	return true
}

// TokenMayHoldPath is the quick test, with no allocation, before a token
// (raw: a JSON string) is checked by CheckToken: false when CheckValues
// would pass it (SDKs' tokens: "tok-1", a UUID, "MTA="), or when it
// starts with '/' and the rest is in the base64 alphabet with no other
// '/' ("/t", "/abc+="). It runs
// on every call that carries a string progressToken.
func TokenMayHoldPath(raw []byte) bool {
	if !MayHoldPath(raw) && !MayNameSecret(raw) {
		return false
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return true
	}
	body := raw[1 : len(raw)-1]
	if len(body) == 0 || body[0] != '/' {
		return true
	}
	for _, c := range body[1:] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '_' || c == '=') {
			return true
		}
	}
	return false
}

// jsonQuoted is s as a JSON string's bytes, near enough for
// TokenMayHoldPath (which reads quotes, ASCII and escapes only).
func jsonQuoted(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
