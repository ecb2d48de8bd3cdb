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
	if !strings.ContainsAny(s, "*?") || len(s) > MaxPathLen || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return false
	}
	return !hasURLScheme(s) || hasFileScheme(s)
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
	alts, err := expandGlob(pattern)
	if err != nil {
		return deny(schema.ErrMalformedRequest, "argument %q: %v", label(ptr), err)
	}
	if alts == nil {
		alts = []string{pattern}
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
		alts, err := expandGlob(g.s)
		if err != nil {
			return deny(schema.ErrMalformedRequest, "argument %q: %v", label(g.ptr), err)
		}
		if alts == nil {
			alts = []string{g.s}
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
