package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// errSyntax marks a frame that is not JSON; other scan errors are valid
// JSON that the proxy refuses (duplicate keys, depth, surrogates).
var errSyntax = errors.New("invalid JSON")

// Member is one member of an object: its key (unescaped) and the raw bytes
// of its value.
type Member struct {
	Key   []byte
	Value json.RawMessage
}

// scanner validates a frame in one pass: JSON syntax, no duplicate keys at
// any depth (compared after unescaping and case folding), no lone UTF-16
// surrogate escapes, no control characters inside strings, bounded depth.
// It accepts exactly what schema/strictjson.Check accepts (on valid UTF-8;
// FuzzScanAgreesWithStrictDecoder holds the two together), in one pass
// that also collects the members of the envelope, of its params and of
// params._meta, so nothing on a message's path parses the frame twice.
// UTF-8 validity is checked by the caller.
type scanner struct {
	b     []byte
	i     int
	depth int
	top   []Member
	// params and meta are the members of the top-level "params" object and
	// of its "_meta" object, when they are objects.
	params, meta []Member
	store        [24]Member // backing for the three lists in the common case
}

// scanners are reused from frame to frame: a scanner is over a kilobyte
// (its member store), two per call. What a Message keeps of one is copied
// out first (Parse); release clears every reference into the frame.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

// scanFrame validates b and returns its scanner, holding the members of
// the envelope, params and params._meta when b is an object. The caller
// releases it when done with its lists.
func scanFrame(b []byte) (*scanner, error) {
	s := scanners.Get().(*scanner)
	s.b, s.i, s.depth = b, 0, 0
	s.top = s.store[:0:8]
	s.params = s.store[8:8:16]
	s.meta = s.store[16:16:24]
	s.ws()
	if err := s.value(collectTop); err != nil {
		s.release()
		return nil, err
	}
	s.ws()
	if s.i != len(s.b) {
		s.release()
		return nil, fmt.Errorf("%w: data after the value", errSyntax)
	}
	return s, nil
}

// release returns s to the pool, holding nothing of its frame.
func (s *scanner) release() {
	clear(s.store[:])
	s.b, s.top, s.params, s.meta = nil, nil, nil, nil
	scanners.Put(s)
}

// members returns copies of the params and _meta lists in one allocation
// (none when both are empty), so that nothing refers to the scanner.
func (s *scanner) members() (params, meta []Member) {
	np, nm := len(s.params), len(s.meta)
	if np+nm == 0 {
		return nil, nil
	}
	all := make([]Member, np+nm)
	copy(all, s.params)
	copy(all[np:], s.meta)
	if np > 0 {
		params = all[:np:np]
	}
	if nm > 0 {
		meta = all[np:]
	}
	return params, meta
}

// What an object's members are collected into.
type collect int

const (
	collectNone collect = iota
	collectTop
	collectParams
	collectMeta
)

func (s *scanner) list(c collect) *[]Member {
	switch c {
	case collectTop:
		return &s.top
	case collectParams:
		return &s.params
	case collectMeta:
		return &s.meta
	}
	return nil
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) syntax(what string) error {
	return fmt.Errorf("%w: %s at byte %d", errSyntax, what, s.i)
}

func (s *scanner) value(c collect) error {
	if s.i >= len(s.b) {
		return s.syntax("unexpected end")
	}
	switch c2 := s.b[s.i]; {
	case c2 == '{':
		return s.object(c)
	case c2 == '[':
		return s.array()
	case c2 == '"':
		_, _, err := s.str()
		return err
	case c2 == 't':
		return s.lit("true")
	case c2 == 'f':
		return s.lit("false")
	case c2 == 'n':
		return s.lit("null")
	case c2 == '-' || (c2 >= '0' && c2 <= '9'):
		return s.number()
	}
	return s.syntax("unexpected character")
}

func (s *scanner) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.syntax("invalid literal")
	}
	s.i += len(word)
	return nil
}

func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.syntax("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.syntax("invalid number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.syntax("invalid number")
		}
	}
	if s.i == start {
		return s.syntax("invalid number")
	}
	return nil
}

// str scans a string and returns its raw span (with quotes) and whether it
// contains escapes.
func (s *scanner) str() ([]byte, bool, error) {
	start := s.i
	s.i++ // opening quote
	escaped := false
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start:s.i], escaped, nil
		case c < 0x20:
			return nil, false, s.syntax("control character in a string")
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return nil, false, s.syntax("truncated escape")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				r, ok := hex4(s.b, s.i+2)
				if !ok {
					return nil, false, s.syntax("invalid \\u escape")
				}
				s.i += 6
				switch {
				case r >= 0xD800 && r <= 0xDBFF:
					if s.i+6 > len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
						return nil, false, fmt.Errorf("%w: lone UTF-16 surrogate in a string", errSyntax)
					}
					lo, ok := hex4(s.b, s.i+2)
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return nil, false, fmt.Errorf("%w: lone UTF-16 surrogate in a string", errSyntax)
					}
					s.i += 6
				case r >= 0xDC00 && r <= 0xDFFF:
					return nil, false, fmt.Errorf("%w: lone UTF-16 surrogate in a string", errSyntax)
				}
			default:
				return nil, false, s.syntax("invalid escape")
			}
		default:
			s.i++
		}
	}
	return nil, false, s.syntax("unterminated string")
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	return nil
}

func (s *scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if err := s.value(collectNone); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.syntax("unterminated array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or ']'")
		}
	}
}

func (s *scanner) object(c collect) error {
	if err := s.enter(); err != nil {
		return err
	}
	into := s.list(c)
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	// Folded keys seen so far: slices of the frame in the common case
	// (unescaped keys without upper case or non-ASCII bytes), so checking
	// a frame allocates nothing; a map once an object grows large.
	var small [8][]byte
	keys := small[:0]
	var many map[string]struct{}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.syntax("expected a key")
		}
		raw, escaped, err := s.str()
		if err != nil {
			return err
		}
		key := raw[1 : len(raw)-1]
		if escaped {
			var k string
			if err := json.Unmarshal(raw, &k); err != nil {
				return s.syntax("invalid key")
			}
			key = []byte(k)
		}
		folded := foldBytes(key)
		if many != nil {
			if _, dup := many[string(folded)]; dup {
				return dupKey(key)
			}
			many[string(folded)] = struct{}{}
		} else {
			for _, k := range keys {
				if bytes.Equal(k, folded) {
					return dupKey(key)
				}
			}
			keys = append(keys, folded)
			if len(keys) == cap(small) {
				many = make(map[string]struct{}, 16)
				for _, k := range keys {
					many[string(k)] = struct{}{}
				}
			}
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.syntax("expected ':'")
		}
		s.i++
		s.ws()
		vstart := s.i
		next := collectNone
		switch {
		case c == collectTop && string(key) == "params":
			next = collectParams
		case c == collectParams && string(key) == "_meta":
			next = collectMeta
		}
		if err := s.value(next); err != nil {
			return err
		}
		if into != nil {
			*into = append(*into, Member{Key: key, Value: s.b[vstart:s.i]})
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.syntax("unterminated object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or '}'")
		}
	}
}

// foldBytes is strictjson.FoldName on bytes, without allocating for keys
// that fold to themselves.
func foldBytes(k []byte) []byte {
	for _, c := range k {
		if c >= utf8.RuneSelf || (c >= 'A' && c <= 'Z') {
			return []byte(strictjson.FoldName(string(k)))
		}
	}
	return k
}

func dupKey(key []byte) error {
	return fmt.Errorf("duplicate key %q (keys are compared ignoring case, as Go's decoder matches them)", truncate(string(key), 64))
}
