package policy

import "strconv"

// plainToken is one token of plain JSON (see scanPlain): its kind as
// jsontext reports it ('{', '}', '[', ']', '"', '0', 't', 'f', 'n') and,
// for a string, where its contents lie in the input (no quotes; a plain
// string has no escapes, so these bytes are its value).
type plainToken struct {
	kind       byte
	start, end int32
}

// Bounds of plain JSON; beyond them walk leaves the input to the decoder.
const (
	plainMaxDepth   = 64
	plainMaxMembers = 32 // per object: duplicate names are looked for pairwise
	plainMaxBytes   = 1 << 20
)

// scanPlain tokenizes raw when it is plain JSON: one valid value, only
// ASCII, no escape in any string, no duplicate member names in an object,
// within the bounds above. ok is false for anything else, valid or not:
// the caller then uses the decoder, which reports the same tokens for what
// scanPlain accepts and says why the rest is invalid. The tokens are
// appended to toks (its backing array is reused when large enough).
func scanPlain(raw []byte, toks []plainToken) ([]plainToken, bool) {
	if len(raw) > plainMaxBytes {
		return nil, false
	}
	for _, c := range raw {
		if c >= 0x80 || c == '\\' {
			return nil, false
		}
	}
	p := plainScanner{b: raw, toks: toks}
	p.ws()
	if !p.value(0) {
		return nil, false
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, false
	}
	return p.toks, true
}

type plainScanner struct {
	b    []byte
	i    int
	toks []plainToken
}

func (p *plainScanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return
		}
	}
}

func (p *plainScanner) value(depth int) bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == 't':
		return p.lit("true", 't')
	case c == 'f':
		return p.lit("false", 'f')
	case c == 'n':
		return p.lit("null", 'n')
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return false
}

func (p *plainScanner) lit(word string, kind byte) bool {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return false
	}
	p.toks = append(p.toks, plainToken{kind: kind})
	p.i += len(word)
	return true
}

// number accepts RFC 8259's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *plainScanner) number() bool {
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return false
		}
	}
	p.toks = append(p.toks, plainToken{kind: '0'})
	return true
}

// str accepts a string of printable ASCII (scanPlain has refused
// backslashes and bytes above 0x7F already).
func (p *plainScanner) str() bool {
	start := p.i + 1
	for p.i = start; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.toks = append(p.toks, plainToken{kind: '"', start: int32(start), end: int32(p.i)})
			p.i++
			return true
		case c < 0x20:
			return false
		}
	}
	return false
}

func (p *plainScanner) array(depth int) bool {
	if depth > plainMaxDepth {
		return false
	}
	p.toks = append(p.toks, plainToken{kind: '['})
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.toks = append(p.toks, plainToken{kind: ']'})
		return true
	}
	for {
		p.ws()
		if !p.value(depth) {
			return false
		}
		p.ws()
		if p.i >= len(p.b) {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			p.toks = append(p.toks, plainToken{kind: ']'})
			return true
		default:
			return false
		}
	}
}

func (p *plainScanner) object(depth int) bool {
	if depth > plainMaxDepth {
		return false
	}
	p.toks = append(p.toks, plainToken{kind: '{'})
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.toks = append(p.toks, plainToken{kind: '}'})
		return true
	}
	var names [plainMaxMembers]plainToken
	n := 0
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' || !p.str() {
			return false
		}
		name := p.toks[len(p.toks)-1]
		if n == len(names) {
			return false
		}
		for _, o := range names[:n] {
			if string(p.b[o.start:o.end]) == string(p.b[name.start:name.end]) {
				return false // a duplicate: the decoder refuses it
			}
		}
		names[n] = name
		n++
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		p.ws()
		if !p.value(depth) {
			return false
		}
		p.ws()
		if p.i >= len(p.b) {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			p.toks = append(p.toks, plainToken{kind: '}'})
			return true
		default:
			return false
		}
	}
}

// walkPlain is walk over the tokens scanPlain made of raw: the visits of
// walkDecoder, in the same order, with the same arguments.
func walkPlain(raw []byte, toks []plainToken, visit func(ptr []string, kind byte, s string) *Denial) *Denial {
	type frame struct {
		object   bool
		index    int
		wantName bool
	}
	var stackStore [8]frame
	var ptrStore [8]string
	stack, ptr := stackStore[:0], ptrStore[:0]
	begin := func() {
		if n := len(stack); n > 0 && !stack[n-1].object {
			ptr = append(ptr, strconv.Itoa(stack[n-1].index))
			stack[n-1].index++
		}
	}
	end := func() {
		if n := len(stack); n > 0 {
			ptr = ptr[:len(ptr)-1]
			if stack[n-1].object {
				stack[n-1].wantName = true
			}
		}
	}
	for _, t := range toks {
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantName && t.kind == '"' {
			name := string(raw[t.start:t.end])
			ptr = append(ptr, name)
			stack[n-1].wantName = false
			if d := visit(ptr, kindName, name); d != nil {
				return d
			}
			continue
		}
		switch t.kind {
		case '{', '[':
			begin()
			if d := visit(ptr, t.kind, ""); d != nil {
				return d
			}
			stack = append(stack, frame{object: t.kind == '{', wantName: t.kind == '{'})
		case '}', ']':
			stack = stack[:len(stack)-1]
			end()
		default:
			begin()
			s := ""
			if t.kind == '"' {
				s = string(raw[t.start:t.end])
			}
			if d := visit(ptr, t.kind, s); d != nil {
				return d
			}
			end()
		}
	}
	return nil
}
