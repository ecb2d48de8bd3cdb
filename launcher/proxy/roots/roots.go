// Package roots is the proxy's Roots adapter: it turns a client's roots/list
// answer into canonical paths, intersects them with the scope (client roots
// only ever narrow), answers a server's roots/list from the result, and
// tracks refresh generations so that only the newest request's reply counts.
package roots

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// MaxRoots bounds how many roots a client answer may carry.
const MaxRoots = 256

// ParseResult decodes a client's roots/list result into canonical real
// paths. A root that is not a valid file:// URI of an existing path is
// dropped: dropping can only narrow. A malformed result is an error, which
// the caller treats as "no roots". It is read by the strict decoder:
// exact-case names ({"Roots": …} is not an answer, a root's "URI" is no
// uri), so no case-folding reader decides what the proxy narrows to.
func ParseResult(raw json.RawMessage) ([]string, error) {
	var res struct {
		Roots *[]struct {
			URI string `json:"uri"`
		} `json:"roots"`
	}
	if err := strictjson.Unmarshal(raw, &res, strictjson.AllowUnknownMembers()); err != nil || res.Roots == nil {
		return nil, errors.New("roots/list result has no roots array")
	}
	if len(*res.Roots) > MaxRoots {
		return nil, fmt.Errorf("roots/list result has more than %d roots", MaxRoots)
	}
	var out []string
	for _, r := range *res.Roots {
		p, err := policy.FilePath(r.URI)
		if err != nil || policy.CheckForm(p) != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Clean(p))
		if err != nil {
			continue
		}
		out = append(out, real)
	}
	return out, nil
}

// Intersect returns scope ∩ client: a client root inside a scope path keeps
// the root; a scope path inside a client root keeps the scope path; anything
// else is dropped. The result is sorted and has no path nested in another.
func Intersect(scope []schema.CanonicalPath, client []string) []schema.CanonicalPath {
	var out []schema.CanonicalPath
	for _, s := range scope {
		for _, c := range client {
			switch {
			case schema.IsWithin(s.Path, c):
				kind := s.Kind
				if c != s.Path {
					// A root below a scope directory: a file root stays a file,
					// so the narrowed fence grants it file rights only.
					st, err := os.Stat(c)
					if err != nil {
						continue
					}
					kind = schema.KindDir
					if !st.IsDir() {
						if !st.Mode().IsRegular() {
							continue
						}
						kind = schema.KindFile
					}
				}
				out = append(out, schema.CanonicalPath{Path: c, Kind: kind})
			case schema.IsWithin(c, s.Path):
				out = append(out, s)
			}
		}
	}
	return Minimal(out)
}

// Minimal sorts paths and removes duplicates and paths nested in another.
func Minimal(in []schema.CanonicalPath) []schema.CanonicalPath {
	in = slices.Clone(in)
	slices.SortFunc(in, func(a, b schema.CanonicalPath) int { return strings.Compare(a.Path, b.Path) })
	var out []schema.CanonicalPath
	for _, p := range in {
		if n := len(out); n > 0 && schema.IsWithin(out[n-1].Path, p.Path) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Paths returns the plain paths.
func Paths(in []schema.CanonicalPath) []string {
	out := make([]string, len(in))
	for i, p := range in {
		out[i] = p.Path
	}
	return out
}

// Equal reports whether two minimal lists name the same paths.
func Equal(a, b []schema.CanonicalPath) bool {
	return slices.EqualFunc(a, b, func(x, y schema.CanonicalPath) bool { return x.Path == y.Path })
}

// ListResult encodes the answer to a server's roots/list: one canonical
// file:// URI per effective path. An empty list is an empty array.
func ListResult(paths []schema.CanonicalPath) json.RawMessage {
	type root struct {
		URI  string `json:"uri"`
		Name string `json:"name"`
	}
	res := struct {
		Roots []root `json:"roots"`
	}{Roots: []root{}}
	for _, p := range paths {
		res.Roots = append(res.Roots, root{URI: FileURI(p.Path), Name: filepath.Base(p.Path)})
	}
	b, _ := json.Marshal(res)
	return b
}

// FileURI encodes an absolute path as a file:// URI, escaping everything
// but unreserved characters and '/'.
func FileURI(p string) string {
	var b strings.Builder
	b.WriteString("file://")
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' || c == '-' || c == '.' || c == '_' || c == '~' ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// Tracker numbers roots/list requests to the client. Only the reply to the
// newest request is applied; a late reply to an older one is ignored, so it
// can never restore access that a newer answer took away. Not safe for
// concurrent use: the proxy holds its lock around it.
type Tracker struct {
	latest  uint64 // generation of the newest request sent
	applied uint64 // generation whose reply is in effect
}

// Begin records a new request and returns its generation.
func (t *Tracker) Begin() uint64 {
	t.latest++
	return t.latest
}

// Accept reports whether a reply to generation gen is the one to apply,
// and marks it applied.
func (t *Tracker) Accept(gen uint64) bool {
	if gen != t.latest {
		return false
	}
	t.applied = gen
	return true
}

// Pending reports whether the newest request is still unanswered.
func (t *Tracker) Pending() bool { return t.applied != t.latest }
