package policy

import (
	"path"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Wildcards a server expands itself ("*.pem", ".e*", "**/*" to a search
// tool that reads what it matches) cannot be checked as names: what they
// reach depends on the directory. A glob whose expansion under the
// effective scope would match a secret is refused instead: the secrets
// under the effective directories are listed (a bounded walk that follows
// no symlinks, once per call) and the glob is matched against each, as
// minimatch with {dot: true} matches (the filesystem server's search_files
// and directory_tree): "*" and "?" within a component, also a leading
// dot, "**" across components, bracket classes, braces expanded first. A
// server may root the glob at any directory under the scope, so each
// secret is tried relative to each of its ancestors under the scope and
// as its absolute path. A glob that leaves the scope is refused by the
// path rules before this ("../*", "/etc/*": a '..' component, an
// absolute name outside).

// maxGlobWalk bounds the entries walked under the effective directories
// to list their secrets for one call's globs.
const maxGlobWalk = 100000

// hasWildcard: s may be a glob with wildcards a server expands: a '*' or
// '?', no white space, not a URL of another scheme ("https://h/?q=1").
func hasWildcard(s string) bool {
	if !strings.ContainsAny(s, "*?") && !hasExtglob(s) || len(s) > MaxPathLen || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return false
	}
	return !hasURLScheme(s) || hasFileScheme(s)
}

// hasExtglob: s holds minimatch's extended syntax, which needs no '*' or
// '?': an extglob group ("@(.env)", "+(x)", "!(x)") or a POSIX class
// ("[[:alpha:]]", "[![:digit:]]").
func hasExtglob(s string) bool {
	return strings.Contains(s, "(") && strings.ContainsAny(s, "@+!") || strings.Contains(s, "[:")
}

// globAlternatives returns the globs to match for s, a glob a server
// expands as minimatch does (the filesystem server's matcher): its
// braces expanded (expandGlob) and minimatch's extended syntax, which
// needs no '*' or '?', rewritten to what globMatch reads, exactly or
// wider (minimatchSuperset). negatable: s is all of a search pattern,
// where a leading '!' negates it.
func globAlternatives(s string, negatable bool) ([]string, error) {
	s = posixClasses(s)
	alts, err := expandGlob(s)
	if err != nil {
		return nil, err
	}
	if alts == nil {
		alts = []string{s}
	}
	var out []string
	for _, a := range alts {
		r := minimatchSuperset(a, negatable)
		if r != a {
			more, err := expandGlob(r)
			if err != nil {
				return nil, err
			}
			if more != nil {
				out = append(out, more...)
				continue
			}
		}
		out = append(out, r)
	}
	if len(out) > maxExpansions {
		return nil, errTooManyExpansions
	}
	return out, nil
}

// posixClasses rewrites each bracket expression holding a POSIX class
// ("[[:alpha:]]", "[![:digit:]x]") to "?": any one character, wider
// than the class (globMatch, like path.Match, has no such classes).
func posixClasses(p string) string {
	if !strings.Contains(p, "[:") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) {
			b.WriteString(p[i : i+2])
			i++
			continue
		}
		if p[i] == '[' {
			if end := posixClassEnd(p, i); end > 0 {
				b.WriteByte('?')
				i = end - 1
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// minimatchSuperset rewrites minimatch's extglob groups, which need no
// '*' or '?', into globs globMatch reads: "@(a|b)" is "{a,b}" and
// "?(a|b)" is "{,a,b}" (exactly), "+(a|b)" is "{a,b}*" (wider), "*(a|b)" and
// "!(a|b)" are "*" (wider; "**" when the group holds a '/'); groups
// nested in an alternative are rewritten too. With negatable, a leading
// '!' (minimatch's negation: everything the rest does not match) is
// "**". Anything else is returned as it is.
func minimatchSuperset(p string, negatable bool) string {
	if negatable && strings.HasPrefix(p, "!") && !strings.HasPrefix(p, "!(") {
		return "**"
	}
	if !strings.Contains(p, "(") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\\' && i+1 < len(p) {
			b.WriteString(p[i : i+2])
			i++
			continue
		}
		if strings.IndexByte("?*+@!", c) >= 0 && i+1 < len(p) && p[i+1] == '(' {
			if end := closingParen(p, i+1); end > 0 {
				body := p[i+2 : end-1]
				var alts []string
				for _, a := range splitAlternatives(body) {
					alts = append(alts, minimatchSuperset(a, false))
				}
				switch {
				case c == '*' || c == '!':
					if strings.Contains(body, "/") {
						b.WriteString("**")
					} else {
						b.WriteString("*")
					}
				case c == '?':
					b.WriteString("{," + strings.Join(alts, ",") + "}")
				case c == '+':
					b.WriteString(braces(alts) + "*")
				default: // '@'
					b.WriteString(braces(alts))
				}
				i = end - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// braces is "{a,b}" for several alternatives, the one itself for one
// (expandGlob reads a brace group without a comma as literal braces).
func braces(alts []string) string {
	if len(alts) == 1 {
		return alts[0]
	}
	return "{" + strings.Join(alts, ",") + "}"
}

// splitAlternatives splits an extglob group's body on its top-level '|'.
func splitAlternatives(body string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++
		case '(':
			depth++
		case ')':
			depth--
		case '|':
			if depth == 0 {
				out = append(out, body[start:i])
				start = i + 1
			}
		}
	}
	return append(out, body[start:])
}

// closingParen returns the index after the ')' closing the '(' at open
// (nested groups counted, '\\' escapes skipped), or -1.
func closingParen(p string, open int) int {
	depth := 0
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// posixClassEnd returns the index after a bracket expression at open
// that holds a POSIX class ("[[:alpha:]x]"), or -1 for any other.
func posixClassEnd(p string, open int) int {
	i := open + 1
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		i++
	}
	if i < len(p) && p[i] == ']' {
		i++
	}
	posix := false
	for i < len(p) {
		if strings.HasPrefix(p[i:], "[:") {
			j := strings.Index(p[i+2:], ":]")
			if j < 0 {
				return -1
			}
			i += 2 + j + 2
			posix = true
			continue
		}
		if p[i] == ']' {
			if posix {
				return i + 1
			}
			return -1
		}
		i++
	}
	return -1
}

// globSecrets refuses s, a glob a server may expand, when it matches a
// secret under the effective scope.
func (c *argChecker) globSecrets(ptr []string, s string) *Denial {
	pattern := s
	if hasFileScheme(pattern) {
		p, err := FilePath(strings.NewReplacer("*", "%2A", "?", "%3F").Replace(pattern))
		if err != nil {
			return nil // the path rule refuses it
		}
		pattern = p
	}
	secrets, d := c.scopeSecrets()
	if d != nil {
		d.Reason = "argument " + quote(label(ptr)) + " is a glob: " + d.Reason
		return d
	}
	if len(secrets) == 0 {
		return nil
	}
	alts, err := globAlternatives(pattern, false)
	if err != nil {
		return deny(schema.ErrMalformedRequest, "argument %q: %v", label(ptr), err)
	}
	for _, a := range alts {
		a = strings.TrimPrefix(a, "./")
		for _, sec := range secrets {
			if globReaches(a, sec.abs, sec.rel) {
				c.checked = append(c.checked, sec.abs)
				return deny(schema.ErrSecretPath, "argument %q is a glob that matches a secret under the scope (credentials, keys, .env, .git, .ssh); a server that expands it would read the secret: narrow the pattern", label(ptr))
			}
		}
	}
	return nil
}

func quote(s string) string { return `"` + s + `"` }

// scopeSecret is a secret under an effective directory: its absolute
// path and its components relative to that directory.
type scopeSecret struct {
	abs string
	rel []string
}

// scopeSecrets lists the secrets under the effective directories, once
// per checker (from the kept listing when nothing changed: globindex.go).
func (c *argChecker) scopeSecrets() ([]scopeSecret, *Denial) {
	if c.secretsListed {
		if c.secrets == nil && c.secretsBound {
			return nil, deny(schema.ErrMalformedRequest, "the scope holds more than %d entries, too many to check a glob against its secrets: name the files, or declare the tool's path arguments", maxGlobWalk)
		}
		return c.secrets, nil
	}
	c.secretsListed = true
	found, d := c.p.secretsOf(c.eff)
	if d != nil {
		c.secrets, c.secretsBound = nil, true
		return nil, d
	}
	c.secrets = found
	return c.secrets, nil
}

// globReaches reports whether pattern matches the secret abs, read as
// its absolute path or relative to any of its ancestors under the scope
// (rel are its components below the effective directory).
func globReaches(pattern, abs string, rel []string) bool {
	if strings.HasPrefix(pattern, "/") {
		return globMatch(splitGlob(pattern[1:]), strings.Split(abs[1:], "/"))
	}
	pat := splitGlob(pattern)
	for i := range rel {
		if globMatch(pat, rel[i:]) {
			return true
		}
	}
	return false
}

func splitGlob(p string) []string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, x := range parts {
		if x != "" && x != "." {
			out = append(out, x)
		}
	}
	return out
}

// globMatch matches path components against glob components: "**"
// matches any number of components (none included); any other component
// is matched by path.Match ("[!a]" read as "[^a]"), a leading dot
// included.
func globMatch(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 0 && pat[0] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 0 {
				return true
			}
			for i := range name {
				if globMatch(pat, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		ok, err := path.Match(strings.ReplaceAll(pat[0], "[!", "[^"), name[0])
		if err != nil {
			ok = pat[0] == name[0] // a malformed class: a literal name to minimatch
		}
		if !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// pendingGlob is a table tool's search pattern, matched after the walk.
type pendingGlob struct {
	ptr []string
	s   string
}

// rootedGlobs matches a table tool's search patterns (search_files'
// pattern) as the filesystem server does: against each entry's path
// relative to the call's path (minimatch, {dot: true}). The secrets
// under that directory are listed (bounded); a pattern that matches one
// is refused. Without a path that resolves, each pattern is matched as
// an unknown tool's glob.
func (c *argChecker) rootedGlobs() *Denial {
	var root string
	if c.globRoot != nil {
		if r, err := Resolve(*c.globRoot, c.p.home, c.relTo); err == nil && Within(c.eff, r.Real) {
			root = r.Real
		}
	}
	var secrets []scopeSecret
	if root != "" {
		var d *Denial
		if secrets, d = c.secretsBelow(root); d != nil {
			return d
		}
	}
	for _, g := range c.globs {
		if root == "" {
			if d := c.globSecrets(g.ptr, g.s); d != nil {
				return d
			}
			continue
		}
		alts, err := globAlternatives(g.s, true)
		if err != nil {
			return deny(schema.ErrMalformedRequest, "argument %q: %v", label(g.ptr), err)
		}
		for _, a := range alts {
			pat := splitGlob(a)
			for _, sec := range secrets {
				if globMatch(pat, sec.rel) {
					c.checked = append(c.checked, sec.abs)
					return deny(schema.ErrSecretPath, "argument %q is a search pattern that matches a secret under the searched directory (credentials, keys, .env, .git, .ssh): narrow the pattern", label(g.ptr))
				}
			}
		}
	}
	return nil
}

// secretsBelow lists the secrets under root (inside the effective
// scope), relative to root: from the scope's listing, or, when the scope
// is too large to list, from a bounded walk of root alone.
func (c *argChecker) secretsBelow(root string) ([]scopeSecret, *Denial) {
	all, d := c.scopeSecrets()
	if d != nil {
		walked := 0
		found, _, d := c.p.walkSecrets(root, &walked)
		return found, d
	}
	var out []scopeSecret
	for _, s := range all {
		if s.abs != root && schema.IsWithin(root, s.abs) {
			rel, _ := filepath.Rel(root, s.abs)
			out = append(out, scopeSecret{abs: s.abs, rel: strings.Split(rel, "/")})
		}
	}
	return out, nil
}
