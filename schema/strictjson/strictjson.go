// Package strictjson is the one way mcpwarden reads untrusted JSON: scope
// files, the JSON-RPC frames of MCP clients and servers, and the requests on
// the daemon's and the approval sockets.
//
// Every layer that reads the same bytes must see the same values, or a
// reviewer, the proxy and a server decide on different documents. So a
// document is refused, never resolved, when:
//
//   - it is not exactly one JSON value (trailing data, empty input);
//   - it is not valid UTF-8, or a string escapes a lone UTF-16 surrogate
//     (Go would read U+FFFD where JavaScript keeps the surrogate);
//   - an object names a member twice at any depth, also when the two names
//     differ only in case (Go's encoding/json matches struct fields
//     ignoring case and keeps the last; JavaScript keeps both apart, so a
//     Go server and the proxy could read different values);
//   - it nests deeper than the limit (64 unless told);
//   - a struct target has no field of exactly that name (case matters:
//     "Access_Mode" is not "access_mode"), unless AllowUnknownMembers;
//   - a value has the wrong type (a string where a number is wanted, 1.5
//     or 1e2 for an integer).
//
// Decoding is done by github.com/go-json-experiment/json, whose defaults
// already match names exactly and refuse exact duplicates and invalid
// UTF-8; this package adds the case-folded duplicate check, the depth bound
// and one error type that names where the document was refused.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DefaultMaxDepth bounds nesting when no MaxDepth option is given.
const DefaultMaxDepth = 64

// Kind classifies a refusal.
type Kind int

const (
	// KindSyntax: not JSON, not one value, invalid UTF-8, a lone surrogate.
	KindSyntax Kind = iota + 1
	// KindDuplicate: a member named twice (compared after case folding).
	KindDuplicate
	// KindDepth: nested deeper than the limit.
	KindDepth
	// KindUnknownMember: a member the target struct has no field for.
	KindUnknownMember
	// KindType: a value of the wrong JSON type or range for its field.
	KindType
)

func (k Kind) String() string {
	switch k {
	case KindSyntax:
		return "invalid JSON"
	case KindDuplicate:
		return "duplicate member"
	case KindDepth:
		return "nested too deep"
	case KindUnknownMember:
		return "unknown member"
	case KindType:
		return "wrong type"
	}
	return "refused"
}

// Error says why and where a document was refused. Pointer is a JSON
// Pointer (RFC 6901) to the offending member or value ("" is the whole
// document); it names keys of the document, never values.
type Error struct {
	Kind    Kind
	Pointer string
	Offset  int64 // byte offset at or after which the problem was found
	Reason  string
}

func (e *Error) Error() string {
	if e.Pointer == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s at %s", e.Reason, e.Pointer)
}

// Field is the pointer in a form an operator reads as a field name:
// "/network/connect_tcp/0" becomes "network.connect_tcp[0]".
func (e *Error) Field() string { return PointerField(e.Pointer) }

// Option changes how a document is read.
type Option func(*config)

type config struct {
	allowUnknown bool
	maxDepth     int
}

// AllowUnknownMembers lets struct targets ignore members they have no field
// for (duplicates, case variants and types are still checked). Use it only
// where the contract says extra members are allowed (JSON-RPC params).
func AllowUnknownMembers() Option { return func(c *config) { c.allowUnknown = true } }

// MaxDepth sets the deepest nesting accepted (arrays and objects count).
func MaxDepth(n int) Option { return func(c *config) { c.maxDepth = n } }

func newConfig(opts []Option) config {
	c := config{maxDepth: DefaultMaxDepth}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Unmarshal checks data (see the package comment) and decodes it into v.
// On an error v may be partly filled and must not be used.
func Unmarshal(data []byte, v any, opts ...Option) error {
	c := newConfig(opts)
	if err := check(data, c.maxDepth); err != nil {
		return err
	}
	err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(!c.allowUnknown))
	if err == nil {
		return nil
	}
	return convert(err)
}

// Check validates data without decoding it: one JSON value, valid UTF-8,
// no lone surrogates, no duplicate members at any depth (case folded), no
// deeper nesting than allowed.
func Check(data []byte, opts ...Option) error {
	return check(data, newConfig(opts).maxDepth)
}

// FoldName maps member names that Go's encoding/json would match to the same
// struct field (ASCII case, and the Kelvin sign and long s that fold to k
// and s) to one value. Two names with equal folds are duplicates.
func FoldName(k string) string {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= utf8.RuneSelf || (c >= 'A' && c <= 'Z') {
			return strings.ToLower(strings.ToUpper(k))
		}
	}
	return k
}

// objectNames tracks the folded names of one open object: a short list
// first, a map once it grows.
type objectNames struct {
	small []string
	many  map[string]struct{}
}

func (o *objectNames) add(folded string) (dup bool) {
	if o.many != nil {
		if _, ok := o.many[folded]; ok {
			return true
		}
		o.many[folded] = struct{}{}
		return false
	}
	for _, k := range o.small {
		if k == folded {
			return true
		}
	}
	o.small = append(o.small, folded)
	if len(o.small) > 16 {
		o.many = make(map[string]struct{}, 2*len(o.small))
		for _, k := range o.small {
			o.many[k] = struct{}{}
		}
		o.small = nil
	}
	return false
}

func check(data []byte, maxDepth int) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &Error{Kind: KindSyntax, Reason: "empty document"}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	// stack[i] is nil for an array, the names seen so far for an object.
	var stack []*objectNames
	for {
		// A name is due when the innermost open value is an object and an
		// even number of its tokens have been read.
		wantName := false
		if n := len(stack); n > 0 && stack[n-1] != nil {
			_, count := dec.StackIndex(dec.StackDepth())
			wantName = count%2 == 0
		}
		tok, err := dec.ReadToken()
		if err == io.EOF {
			if len(stack) != 0 {
				return &Error{Kind: KindSyntax, Offset: dec.InputOffset(), Reason: "the document ends early (truncated?)"}
			}
			return nil
		}
		if err != nil {
			return convert(err)
		}
		switch tok.Kind() {
		case '{', '[':
			if len(stack) >= maxDepth {
				return &Error{Kind: KindDepth, Pointer: string(dec.StackPointer()), Offset: dec.InputOffset(), Reason: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
			}
			if tok.Kind() == '{' {
				stack = append(stack, &objectNames{})
			} else {
				stack = append(stack, nil)
			}
		case '}', ']':
			stack = stack[:len(stack)-1]
		case '"':
			if wantName {
				name := tok.String()
				if stack[len(stack)-1].add(FoldName(name)) {
					return &Error{Kind: KindDuplicate, Pointer: string(dec.StackPointer()), Offset: dec.InputOffset(),
						Reason: fmt.Sprintf("member %q appears more than once (names are compared ignoring case)", truncate(name, 64))}
				}
			}
		}
		if len(stack) == 0 {
			// One top-level value has been read: anything after it is an error.
			if _, err := dec.ReadToken(); err != io.EOF {
				if err == nil {
					return &Error{Kind: KindSyntax, Offset: dec.InputOffset(), Reason: "data after the top-level value"}
				}
				return convert(err)
			}
			return nil
		}
	}
}

// convert turns an error of the JSON library into an *Error.
func convert(err error) error {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		reason := "invalid JSON"
		if se.Err != nil {
			reason = "invalid JSON: " + strings.TrimPrefix(se.Err.Error(), "jsontext: ")
		}
		kind := KindSyntax
		if errors.Is(se.Err, jsontext.ErrDuplicateName) {
			kind = KindDuplicate
			reason = "a member appears more than once"
		}
		return &Error{Kind: kind, Pointer: string(se.JSONPointer), Offset: se.ByteOffset, Reason: reason}
	}
	var sem *jsonv2.SemanticError
	if errors.As(err, &sem) {
		if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			return &Error{Kind: KindUnknownMember, Pointer: string(sem.JSONPointer), Offset: sem.ByteOffset, Reason: "unknown member"}
		}
		reason := "wrong type"
		if sem.JSONKind != 0 && sem.GoType != nil {
			reason = fmt.Sprintf("wrong type or value: got JSON %s, want %s", kindName(sem.JSONKind), goTypeName(sem.GoType.String()))
		}
		if sem.Err != nil && !errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			reason += ": " + strings.TrimPrefix(sem.Err.Error(), "json: ")
		}
		return &Error{Kind: KindType, Pointer: string(sem.JSONPointer), Offset: sem.ByteOffset, Reason: reason}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Kind: KindSyntax, Reason: "the document ends early (truncated?)"}
	}
	return &Error{Kind: KindSyntax, Reason: "invalid JSON: " + err.Error()}
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return k.String()
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case strings.HasPrefix(t, "map["):
		return "an object"
	}
	return t
}

// PointerField renders a JSON Pointer as a field path for messages:
// "/network/connect_tcp/0" → "network.connect_tcp[0]".
func PointerField(ptr string) string {
	if ptr == "" {
		return ""
	}
	var b strings.Builder
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		if isIndex(tok) && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(truncate(tok, 64))
	}
	return b.String()
}

func isIndex(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary so the message stays valid UTF-8.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
