package jsonrpc

import (
	"encoding/json"
	"io"
	"strconv"
	"sync"
)

// Writer writes whole frames; it is safe for concurrent use, and frames from
// different goroutines never interleave. Each frame and its newline go out
// in one write(2).
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter wraps w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// maxKept bounds the buffer a Writer keeps between frames.
const maxKept = 64 << 10

// Write writes frame followed by a newline.
func (w *Writer) Write(frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(append(w.buf[:0], frame...), '\n')
	_, err := w.w.Write(w.buf)
	if cap(w.buf) > maxKept {
		w.buf = nil // a large frame's buffer is not kept
	}
	return err
}

// NullID is the id of an error answer to a message whose id is unknown.
var NullID = json.RawMessage("null")

// IntID encodes a proxy-assigned numeric id.
func IntID(n int64) json.RawMessage { return strconv.AppendInt(nil, n, 10) }

// Request encodes a request or, with a nil id, a notification. params must
// be nil, a json.RawMessage or a value that marshals to an object.
func Request(id json.RawMessage, method string, params any) []byte {
	b := []byte(`{"jsonrpc":"2.0"`)
	if id != nil {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	b = append(b, `,"method":`...)
	b = appendJSON(b, method)
	if params != nil {
		b = append(b, `,"params":`...)
		b = appendJSON(b, params)
	}
	return append(b, '}')
}

// Result encodes a successful response.
func Result(id json.RawMessage, result any) []byte {
	b := []byte(`{"jsonrpc":"2.0","id":`)
	b = append(b, idOrNull(id)...)
	b = append(b, `,"result":`...)
	b = appendJSON(b, result)
	return append(b, '}')
}

// ErrorResponse encodes an error response; data may be nil.
func ErrorResponse(id json.RawMessage, code int, message string, data any) []byte {
	e := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}{code, message, data}
	b := []byte(`{"jsonrpc":"2.0","id":`)
	b = append(b, idOrNull(id)...)
	b = append(b, `,"error":`...)
	b = appendJSON(b, e)
	return append(b, '}')
}

// Forward re-encodes a message with a new id, keeping params, result or
// error byte for byte. It is on every forwarded message's path: the frame
// is sized first and built in one allocation (a method name that needs
// escaping, and an error, take the general encoder).
func Forward(m *Message, id json.RawMessage) []byte {
	switch {
	case m.Kind == KindResponse && m.Error != nil:
		b := []byte(`{"jsonrpc":"2.0","id":`)
		b = append(b, idOrNull(id)...)
		b = append(b, `,"error":`...)
		b = appendJSON(b, m.Error)
		return append(b, '}')
	case m.Kind == KindResponse:
		id = idOrNull(id)
		b := make([]byte, 0, len(resultHead)+len(id)+len(resultMid)+len(m.Result)+1)
		b = append(append(append(b, resultHead...), id...), resultMid...)
		return append(append(b, m.Result...), '}')
	}
	if m.Kind == KindNotification {
		id = nil
	}
	if !plain(m.Method) {
		var params any
		if m.Params != nil {
			params = m.Params
		}
		return Request(id, m.Method, params)
	}
	n := len(requestHead) + len(`,"method":""`) + len(m.Method) + 1
	if id != nil {
		n += len(`,"id":`) + len(id)
	}
	if m.Params != nil {
		n += len(`,"params":`) + len(m.Params)
	}
	b := append(make([]byte, 0, n), requestHead...)
	if id != nil {
		b = append(append(b, `,"id":`...), id...)
	}
	b = append(append(append(b, `,"method":"`...), m.Method...), '"')
	if m.Params != nil {
		b = append(append(b, `,"params":`...), m.Params...)
	}
	return append(b, '}')
}

const (
	requestHead = `{"jsonrpc":"2.0"`
	resultHead  = `{"jsonrpc":"2.0","id":`
	resultMid   = `,"result":`
)

func idOrNull(id json.RawMessage) json.RawMessage {
	if id == nil {
		return NullID
	}
	return id
}

func appendJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case json.RawMessage:
		return append(b, v...)
	case string:
		if plain(v) {
			b = append(b, '"')
			b = append(b, v...)
			return append(b, '"')
		}
	}
	enc, err := json.Marshal(v)
	if err != nil {
		// Only values built by this program reach here; a failure is a bug.
		panic("jsonrpc: cannot encode " + err.Error())
	}
	return append(b, enc...)
}

// plain reports whether s needs no escaping in JSON (printable ASCII other
// than the quote, the backslash and the characters encoding/json escapes
// for HTML), so it can be written as is.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
