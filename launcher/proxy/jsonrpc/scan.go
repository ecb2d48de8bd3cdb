package jsonrpc

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// errSyntax marks a frame that is not JSON; other scan errors are valid
// JSON that the proxy refuses (duplicate keys, depth, surrogates).
var errSyntax = errors.New("invalid JSON")

// member is one top-level member of an object: its key and the raw bytes
// of its value.
type member struct {
	key   string
	value []byte
}

// scanner validates a frame in one pass: JSON syntax, no duplicate keys at
// any depth (compared after unescaping and case folding), no lone UTF-16
// surrogate escapes, no control characters inside strings, bounded depth.
// It accepts exactly what schema/strictjson.Check accepts (on valid UTF-8;
// FuzzScanAgreesWithStrictDecoder holds the two together), in one pass
// that also collects the envelope: it is on every message's path.
// It collects the top-level members, so the envelope needs no second parse.
// UTF-8 validity is checked by the caller.
type scanner struct {
	b     []byte
	i     int
	depth int
	top   []member
}

// scanFrame validates b and returns its top-level members when it is an
// object.
func scanFrame(b []byte) ([]member, error) {
	s := scanner{b: b}
	s.ws()
	if err := s.value(); err != nil {
		return nil, err
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, fmt.Errorf("%w: data after the value", errSyntax)
	}
	return s.top, nil
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

func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return s.syntax("unexpected end")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		_, _, err := s.str()
		return err
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
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
		if err := s.value(); err != nil {
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

func (s *scanner) object() error {
	if err := s.enter(); err != nil {
		return err
	}
	isTop := s.depth == 1
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	var small [8]string
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
		key := string(raw[1 : len(raw)-1])
		if escaped {
			if err := json.Unmarshal(raw, &key); err != nil {
				return s.syntax("invalid key")
			}
		}
		folded := strictjson.FoldName(key)
		if many != nil {
			if _, dup := many[folded]; dup {
				return dupKey(key)
			}
			many[folded] = struct{}{}
		} else {
			for _, k := range keys {
				if k == folded {
					return dupKey(key)
				}
			}
			keys = append(keys, folded)
			if len(keys) == cap(small) {
				many = make(map[string]struct{}, 16)
				for _, k := range keys {
					many[k] = struct{}{}
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
		if err := s.value(); err != nil {
			return err
		}
		if isTop {
			s.top = append(s.top, member{key: key, value: s.b[vstart:s.i]})
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

func dupKey(key string) error {
	return fmt.Errorf("duplicate key %q (keys are compared ignoring case, as Go's decoder matches them)", truncate(key, 64))
}
