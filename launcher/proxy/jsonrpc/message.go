package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Standard JSON-RPC and MCP error codes.
const (
	CodeParseError         = -32700
	CodeInvalidRequest     = -32600
	CodeMethodNotFound     = -32601
	CodeInvalidParams      = -32602
	CodeInternalError      = -32603
	CodeUnsupportedVersion = -32022
	// CodeDenied is mcpwarden's code for a request the policy refused that is
	// not a tool call (tool calls are denied with an isError result instead).
	//
	// It lies outside JSON-RPC's reserved block (-32768…-32000), where the
	// SDKs put codes of their own: go-sdk reads -32003 and -32004 as its
	// connection closing, the TypeScript and Python SDKs -32000 as
	// "connection closed" and -32001 as a timeout; MCP uses -32002,
	// -32020…-32022 and -32042. A denial must read as a denial everywhere.
	CodeDenied = -31403
)

// maxDepth bounds nesting so a hostile frame cannot exhaust the stack of
// either parser.
const maxDepth = 64

// Kind is what a message is.
type Kind int

const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
)

// Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message) }

// Message is one validated JSON-RPC 2.0 message. Raw parts are kept as the
// exact bytes received, so ids of any size round-trip unchanged.
type Message struct {
	Kind   Kind
	ID     json.RawMessage // request and response only
	Method string          // request and notification only
	Params json.RawMessage
	Result json.RawMessage
	Error  *Error
	// ParamMembers are the members of Params, MetaMembers those of
	// params._meta when it is an object, as the frame scanner found them
	// (keys unescaped, values raw): reading them parses nothing again.
	ParamMembers, MetaMembers []Member
}

// Param returns the raw value of params member key.
func (m *Message) Param(key string) (json.RawMessage, bool) { return lookup(m.ParamMembers, key) }

// Meta returns the raw value of params._meta member key.
func (m *Message) Meta(key string) (json.RawMessage, bool) { return lookup(m.MetaMembers, key) }

func lookup(members []Member, key string) (json.RawMessage, bool) {
	for _, mb := range members {
		if string(mb.Key) == key {
			return mb.Value, true
		}
	}
	return nil, false
}

// String decodes a raw JSON string value of a frame that Parse accepted
// (so it is valid JSON without lone surrogates); ok is false for anything
// but a string.
func String(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if strictjson.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// ParseError says why a frame was refused. ID is the request id when it could
// be read, so the answer can name it; otherwise the answer uses null.
type ParseError struct {
	Code   int
	Reason string
	ID     json.RawMessage
}

func (e *ParseError) Error() string { return e.Reason }

func perr(code int, id json.RawMessage, format string, args ...any) *ParseError {
	return &ParseError{Code: code, Reason: fmt.Sprintf(format, args...), ID: id}
}

// Parse validates frame strictly and decodes the envelope. The Message does
// not alias frame.
func Parse(frame []byte) (*Message, error) {
	if !utf8.Valid(frame) {
		return nil, perr(CodeParseError, nil, "message is not valid UTF-8")
	}
	// The message keeps sub-slices of the frame, which the Reader reuses.
	frame = bytes.Clone(frame)
	first := firstNonSpace(frame)
	if first == '[' {
		return nil, perr(CodeInvalidRequest, nil, "batch requests are not supported")
	}
	sc, err := scanFrame(frame)
	if err == nil {
		defer sc.release()
	}
	if err != nil {
		if errors.Is(err, errSyntax) {
			return nil, perr(CodeParseError, nil, "%v", err)
		}
		if first == '{' {
			return nil, perr(CodeInvalidRequest, bestEffortID(frame), "%v", err)
		}
		return nil, perr(CodeParseError, nil, "%v", err)
	}
	if first != '{' {
		return nil, perr(CodeInvalidRequest, nil, "a message must be a JSON object")
	}
	// Members by exact key (never case-folded: "Method" is not "method").
	var env envelope
	for _, mb := range sc.top {
		v := mb.Value
		switch string(mb.Key) {
		case "jsonrpc":
			env.JSONRPC = v
		case "id":
			env.ID = v
		case "method":
			env.Method = v
		case "params":
			env.Params = v
		case "result":
			env.Result = v
		case "error":
			env.Error = v
		default:
			return nil, perr(CodeInvalidRequest, nil, "unknown member %q", truncate(string(mb.Key), 64))
		}
	}
	var id json.RawMessage
	if env.ID != nil {
		if !validID(env.ID) {
			return nil, perr(CodeInvalidRequest, nil, "id must be a string or a number")
		}
		id = env.ID
	}
	if string(env.JSONRPC) != `"2.0"` {
		return nil, perr(CodeInvalidRequest, id, `"jsonrpc" must be "2.0"`)
	}
	m := &Message{ID: id}
	if env.Params != nil && !isNull(env.Params) {
		if c := firstNonSpace(env.Params); c != '{' {
			return nil, perr(CodeInvalidRequest, id, "params must be an object")
		}
		m.Params = env.Params
		m.ParamMembers, m.MetaMembers = sc.members()
	}
	switch {
	case env.Method != nil:
		if env.Result != nil || env.Error != nil {
			return nil, perr(CodeInvalidRequest, id, "a request cannot carry result or error")
		}
		method, ok := String(env.Method)
		if !ok {
			return nil, perr(CodeInvalidRequest, id, "method must be a string")
		}
		if method == "" {
			return nil, perr(CodeInvalidRequest, id, "method is empty")
		}
		m.Method = method
		m.Kind = KindNotification
		if env.ID != nil {
			m.Kind = KindRequest
			if isNull(env.ID) {
				return nil, perr(CodeInvalidRequest, nil, "id must be a string or a number")
			}
		}
	case env.Result != nil || env.Error != nil:
		if env.Result != nil && env.Error != nil {
			return nil, perr(CodeInvalidRequest, id, "a response carries result or error, not both")
		}
		if env.ID == nil {
			return nil, perr(CodeInvalidRequest, nil, "a response needs an id")
		}
		if env.Params != nil {
			return nil, perr(CodeInvalidRequest, id, "a response cannot carry params")
		}
		m.Kind = KindResponse
		if env.Error != nil {
			var e Error
			if err := strictjson.Unmarshal(env.Error, &e, strictjson.AllowUnknownMembers()); err != nil || firstNonSpace(env.Error) != '{' {
				return nil, perr(CodeInvalidRequest, id, "error must be an object with code and message")
			}
			m.Error = &e
		} else {
			m.Result = env.Result
		}
	default:
		return nil, perr(CodeInvalidRequest, id, "message has neither method nor result/error")
	}
	return m, nil
}

type envelope struct {
	JSONRPC, ID, Method, Params, Result, Error json.RawMessage
}

// bestEffortID reads the top-level id of a frame that is valid JSON but was
// refused (often for a duplicate key, so the strict decoder cannot read it),
// so the error answer can name the request. It is used for nothing else.
func bestEffortID(frame []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(frame, &m) != nil {
		return nil
	}
	if id, ok := m["id"]; ok && validID(id) && !isNull(id) {
		return id
	}
	return nil
}

// validID accepts a JSON string, a JSON number or null (null only matters
// for error responses; requests with a null id are refused by Parse).
func validID(raw json.RawMessage) bool {
	switch c := firstNonSpace(raw); {
	case c == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil && len(s) <= 256
	case c == '-' || (c >= '0' && c <= '9'):
		return len(bytes.TrimSpace(raw)) <= 64
	case c == 'n':
		return isNull(raw)
	}
	return false
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(v), err == nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
