// Package jsonedit reads JSON (and JSONC: comments and trailing commas, as
// VS Code's and Cursor's configuration files allow) into a tree that
// remembers where every value lies in the bytes, so a program can change
// one value and leave every other byte of the file — formatting, comments,
// key order, escapes — as it was.
//
// It is for files a person edits (MCP client configurations), not for
// protocol traffic: it accepts what those files contain and refuses what
// would make the file mean two things (invalid UTF-8, a lone UTF-16
// surrogate in a string that is used, input past the limits). Duplicate
// keys are kept in the tree in file order; the caller decides whether they
// are ambiguous for what it reads.
package jsonedit

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits on what Parse accepts.
const (
	MaxSize  = 64 << 20 // bytes
	MaxDepth = 256
)

// Kind is a JSON value's type.
type Kind byte

const (
	Object Kind = '{'
	Array  Kind = '['
	String Kind = '"'
	Number Kind = '0'
	True   Kind = 't'
	False  Kind = 'f'
	Null   Kind = 'n'
)

func (k Kind) String() string {
	switch k {
	case Object:
		return "object"
	case Array:
		return "array"
	case String:
		return "string"
	case Number:
		return "number"
	case True, False:
		return "boolean"
	case Null:
		return "null"
	}
	return "value"
}

// Node is one value. Start and End are its byte span in the document
// (End exclusive); for objects and arrays they include the brackets.
type Node struct {
	Kind       Kind
	Start, End int
	// Str is a string's decoded value. BadString says it escaped a lone
	// UTF-16 surrogate, which Go and JavaScript would read differently.
	Str       string
	BadString bool
	Members   []Member // objects, in file order
	Elems     []*Node  // arrays
}

// Member is one key and value of an object. Start is where the key's
// opening quote is.
type Member struct {
	Key      string
	BadKey   bool // the key escaped a lone surrogate
	KeyStart int
	KeyEnd   int
	Value    *Node
}

// Get returns the members named key, in file order.
func (n *Node) Get(key string) []*Member {
	var out []*Member
	for i := range n.Members {
		if n.Members[i].Key == key {
			out = append(out, &n.Members[i])
		}
	}
	return out
}

// Doc is a parsed document.
type Doc struct {
	Src  []byte
	Root *Node
	BOM  bool // the input starts with a UTF-8 byte order mark (kept in Src)
	// Comments says the input has comments or trailing commas (JSONC).
	Comments bool
}

// SyntaxError says where the input is not JSON(C).
type SyntaxError struct {
	Offset int
	Line   int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d (byte %d): %s", e.Line, e.Offset, e.Msg)
}

// Parse reads one JSON(C) value.
func Parse(src []byte) (*Doc, error) {
	if len(src) > MaxSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxSize)
	}
	if !utf8.Valid(src) {
		i := 0
		for i < len(src) {
			r, n := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, &SyntaxError{Offset: i, Line: 1 + bytes.Count(src[:i], []byte("\n")), Msg: "not valid UTF-8"}
	}
	p := &parser{src: src}
	d := &Doc{Src: src}
	if bytes.HasPrefix(src, []byte("\xef\xbb\xbf")) {
		d.BOM = true
		p.pos = 3
	}
	if err := p.space(); err != nil {
		return nil, err
	}
	root, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if err := p.space(); err != nil {
		return nil, err
	}
	if p.pos != len(src) {
		return nil, p.errf("data after the JSON value")
	}
	d.Root, d.Comments = root, p.comments
	return d, nil
}

type parser struct {
	src      []byte
	pos      int
	comments bool
	// afterComma: the last member or element read was followed by ','.
	// trailingComma: the same, until the next token is read.
	afterComma, trailingComma bool
}

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, Line: 1 + bytes.Count(p.src[:p.pos], []byte("\n")), Msg: fmt.Sprintf(format, args...)}
}

// space skips white space and comments.
func (p *parser) space() error {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		case c == '/' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '/':
			p.comments = true
			if i := bytes.IndexByte(p.src[p.pos:], '\n'); i >= 0 {
				p.pos += i + 1
			} else {
				p.pos = len(p.src)
			}
		case c == '/' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '*':
			p.comments = true
			i := bytes.Index(p.src[p.pos+2:], []byte("*/"))
			if i < 0 {
				return p.errf("unterminated /* comment")
			}
			p.pos += i + 4
		default:
			return nil
		}
	}
	return nil
}

func (p *parser) value(depth int) (*Node, error) {
	if depth >= MaxDepth {
		return nil, p.errf("nested deeper than %d", MaxDepth)
	}
	if p.pos >= len(p.src) {
		return nil, p.errf("unexpected end of input")
	}
	start := p.pos
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, bad, err := p.str()
		if err != nil {
			return nil, err
		}
		return &Node{Kind: String, Start: start, End: p.pos, Str: s, BadString: bad}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		if err := p.number(); err != nil {
			return nil, err
		}
		return &Node{Kind: Number, Start: start, End: p.pos}, nil
	default:
		for _, lit := range []struct {
			word string
			kind Kind
		}{{"true", True}, {"false", False}, {"null", Null}} {
			if bytes.HasPrefix(p.src[p.pos:], []byte(lit.word)) {
				p.pos += len(lit.word)
				return &Node{Kind: lit.kind, Start: start, End: p.pos}, nil
			}
		}
		return nil, p.errf("unexpected character %q", string(c))
	}
}

func (p *parser) object(depth int) (*Node, error) {
	n := &Node{Kind: Object, Start: p.pos}
	p.pos++ // {
	for {
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos >= len(p.src) {
			return nil, p.errf("unterminated object")
		}
		if p.src[p.pos] == '}' {
			if len(n.Members) > 0 && p.trailingComma {
				p.comments = true
			}
			p.trailingComma = false
			p.pos++
			n.End = p.pos
			return n, nil
		}
		if len(n.Members) > 0 && !p.afterComma {
			return nil, p.errf("expected ',' or '}' after an object member")
		}
		if p.src[p.pos] != '"' {
			return nil, p.errf("expected a string key")
		}
		m := Member{KeyStart: p.pos}
		key, bad, err := p.str()
		if err != nil {
			return nil, err
		}
		m.Key, m.BadKey, m.KeyEnd = key, bad, p.pos
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return nil, p.errf("expected ':' after key %q", truncate(key))
		}
		p.pos++
		if err := p.space(); err != nil {
			return nil, err
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m.Value = v
		n.Members = append(n.Members, m)
		if err := p.comma(); err != nil {
			return nil, err
		}
	}
}

func (p *parser) array(depth int) (*Node, error) {
	n := &Node{Kind: Array, Start: p.pos}
	p.pos++ // [
	for {
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos >= len(p.src) {
			return nil, p.errf("unterminated array")
		}
		if p.src[p.pos] == ']' {
			if len(n.Elems) > 0 && p.trailingComma {
				p.comments = true
			}
			p.trailingComma = false
			p.pos++
			n.End = p.pos
			return n, nil
		}
		if len(n.Elems) > 0 && !p.afterComma {
			return nil, p.errf("expected ',' or ']' after an array element")
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		n.Elems = append(n.Elems, v)
		if err := p.comma(); err != nil {
			return nil, err
		}
	}
}

// comma consumes an optional ',' after a member or element and records
// whether one was there.
func (p *parser) comma() error {
	if err := p.space(); err != nil {
		return err
	}
	p.afterComma, p.trailingComma = false, false
	if p.pos < len(p.src) && p.src[p.pos] == ',' {
		p.pos++
		p.afterComma, p.trailingComma = true, true
	}
	return nil
}

// str reads a string at p.pos and returns its decoded value; bad reports a
// lone surrogate escape (decoded as U+FFFD).
func (p *parser) str() (string, bool, error) {
	p.pos++ // opening quote
	var b strings.Builder
	bad := false
	for {
		if p.pos >= len(p.src) {
			return "", false, p.errf("unterminated string")
		}
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), bad, nil
		case c < 0x20:
			return "", false, p.errf("control character in a string (escape it)")
		case c == '\\':
			if p.pos+1 >= len(p.src) {
				return "", false, p.errf("unterminated escape")
			}
			e := p.src[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", false, p.errf("bad \\u escape")
				}
				if utf16.IsSurrogate(r) {
					lo := rune(-1)
					if p.pos+1 < len(p.src) && p.src[p.pos] == '\\' && p.src[p.pos+1] == 'u' {
						save := p.pos
						p.pos += 2
						if l, ok := p.hex4(); ok && l >= 0xDC00 && l <= 0xDFFF && r < 0xDC00 {
							lo = l
						} else {
							p.pos = save
						}
					}
					if lo < 0 {
						bad = true
						r = utf8.RuneError
					} else {
						r = utf16.DecodeRune(r, lo)
					}
				}
				b.WriteRune(r)
			default:
				return "", false, p.errf("bad escape \\%c", e)
			}
		default:
			r, n := utf8.DecodeRune(p.src[p.pos:])
			b.WriteRune(r)
			p.pos += n
		}
	}
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.src) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(v), true
}

func (p *parser) number() error {
	start := p.pos
	if p.src[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		s := p.pos
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		return p.pos - s
	}
	if p.pos < len(p.src) && p.src[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return p.errf("bad number")
	}
	if p.pos < len(p.src) && p.src[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return p.errf("bad number")
		}
	}
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.src) && (p.src[p.pos] == '+' || p.src[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.errf("bad number")
		}
	}
	if p.pos == start {
		return p.errf("bad number")
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Edit replaces Src[Start:End] with Text (an insertion when Start == End).
type Edit struct {
	Start, End int
	Text       string
}

// Apply returns src with the edits applied. Edits must not overlap.
func Apply(src []byte, edits []Edit) ([]byte, error) {
	es := append([]Edit(nil), edits...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].Start < es[j].Start })
	var out bytes.Buffer
	out.Grow(len(src))
	pos := 0
	for _, e := range es {
		if e.Start < pos || e.End < e.Start || e.End > len(src) {
			return nil, errors.New("jsonedit: overlapping or out-of-range edits")
		}
		out.Write(src[pos:e.Start])
		out.WriteString(e.Text)
		pos = e.End
	}
	out.Write(src[pos:])
	return out.Bytes(), nil
}

// Quote encodes s as a JSON string the way JSON.stringify does, except
// that '<', '>' and '&' stay as they are (a configuration file is no HTML).
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Indent returns the white space before offset on its line, when only
// white space precedes it there ("" otherwise), and whether the value at
// offset starts a line.
func Indent(src []byte, offset int) (string, bool) {
	i := offset
	for i > 0 && (src[i-1] == ' ' || src[i-1] == '\t') {
		i--
	}
	if i == 0 || src[i-1] == '\n' {
		return string(src[i:offset]), true
	}
	return "", false
}
