package policy

import (
	"slices"
	"strings"
	"unicode"
)

// Paths given as arrays of segments. A server that joins an array with
// '/' (`segments.join("/")`, `"/".join(parts)`) reads ["", "etc",
// "passwd"] as /etc/passwd, although no element looks like a path: the
// first element is empty, so the join is absolute. Every array whose
// first element is "" and whose other elements are names (strings with
// no white space or control character; at least one) is checked once
// more, joined with '/', by the rule of a string that looks like a path
// (an absolute name always does). Arrays that start otherwise need no
// join: an element that is absolute, "~", "..", a file: URI or a secret's
// name is checked by itself, and a relative join stays under the
// directory the server resolves it in, which the rule for each element
// (an entry that exists there) already covers.

// segmentArrays finds the arrays that may be a path's segments during
// one walk of a call's arguments.
type segmentArrays struct {
	open []string       // the last array opened (its pointer)
	cand []*segmentJoin // candidates: arrays whose first element is ""
}

type segmentJoin struct {
	ptr   []string // the array
	parts []string // its elements after the first
	ok    bool     // every element so far is a name
}

// visit is called for every value the walk reports (see walk).
func (g *segmentArrays) visit(ptr []string, kind byte, s string) {
	if len(ptr) == 0 {
		return
	}
	if kind == '[' {
		g.open = append(g.open[:0], ptr...)
	}
	parent := ptr[:len(ptr)-1]
	if kind == '"' && s == "" && ptr[len(ptr)-1] == "0" && slices.Equal(parent, g.open) {
		g.cand = append(g.cand, &segmentJoin{ptr: slices.Clone(parent), ok: true})
		return
	}
	if len(g.cand) == 0 || kind == kindName {
		return
	}
	j := g.cand[len(g.cand)-1]
	if !j.ok || !slices.Equal(parent, j.ptr) {
		return
	}
	if kind != '"' || !isSegment(s) {
		j.ok = false
		return
	}
	j.parts = append(j.parts, s)
}

// joins returns each candidate's join ("/" + its other elements joined
// by '/') with the array's pointer.
func (g *segmentArrays) joins(each func(ptr []string, joined string) *Denial) *Denial {
	for _, j := range g.cand {
		if !j.ok || len(j.parts) == 0 {
			continue
		}
		if d := each(j.ptr, "/"+strings.Join(j.parts, "/")); d != nil {
			return d
		}
	}
	return nil
}

// isSegment: s may be a component of a path a server builds (no white
// space or control character; not empty).
func isSegment(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}
