package policy

import (
	"errors"
	"strings"
)

// maxExpansions bounds the names one string's braces and bracket classes
// expand to.
const maxExpansions = 64

var errTooManyExpansions = errors.New("a glob with more than 64 brace or bracket alternatives")

// expandGlob returns the names a server that expands globs (a search
// tool, a shell, fast-glob, Python's glob with braces) makes of s by its
// braces ("{.env,x}" is ".env" and "x") and bracket classes (".e[n]v" is
// ".env"): each is a name such a server opens. Wildcards ("*", "?") and
// negated classes cannot be expanded without a directory and are left
// as they are. nil when s has neither; an error beyond maxExpansions.
func expandGlob(s string) ([]string, error) {
	if !strings.ContainsAny(s, "{[") {
		return nil, nil
	}
	out := []string{s}
	for changed := true; changed; {
		changed = false
		var next []string
		for _, x := range out {
			alts, ok := expandOne(x)
			if !ok {
				next = append(next, x)
				continue
			}
			changed = true
			next = append(next, alts...)
			if len(next) > maxExpansions {
				return nil, errTooManyExpansions
			}
		}
		out = next
	}
	if len(out) == 1 && out[0] == s {
		return nil, nil
	}
	return out, nil
}

// expandOne expands the first brace group with a top-level comma, or the
// first bracket class of plain characters and ranges, in s.
func expandOne(s string) ([]string, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth, parts, start := 0, []string{}, i+1
			for j := i + 1; j < len(s); j++ {
				switch s[j] {
				case '{':
					depth++
				case '}':
					if depth > 0 {
						depth--
						continue
					}
					if len(parts) == 0 {
						j = len(s) // no comma: a literal brace
						continue
					}
					parts = append(parts, s[start:j])
					alts := make([]string, 0, len(parts))
					for _, p := range parts {
						alts = append(alts, s[:i]+p+s[j+1:])
					}
					return alts, true
				case ',':
					if depth == 0 {
						parts = append(parts, s[start:j])
						start = j + 1
					}
				}
			}
		case '[':
			j := strings.IndexByte(s[i+1:], ']')
			if j <= 0 {
				continue
			}
			class := s[i+1 : i+1+j]
			if class[0] == '!' || class[0] == '^' {
				continue
			}
			var chars []string
			for k := 0; k < len(class); k++ {
				if k+2 < len(class) && class[k+1] == '-' {
					lo, hi := class[k], class[k+2]
					if hi < lo || int(hi-lo) >= maxExpansions {
						return []string{s[:i] + s[i+1+j+1:]}, false
					}
					for c := lo; ; c++ {
						chars = append(chars, string(c))
						if c == hi {
							break
						}
					}
					k += 2
					continue
				}
				chars = append(chars, class[k:k+1])
			}
			alts := make([]string, 0, len(chars))
			for _, c := range chars {
				alts = append(alts, s[:i]+c+s[i+1+j+1:])
			}
			return alts, true
		}
	}
	return nil, false
}
