package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/go-json-experiment/json/jsontext"
	"golang.org/x/text/unicode/norm"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Bounds of the argument checks. Beyond them a call is refused: a check
// that cannot finish must not pass.
const (
	// maxProbes bounds the strings of one call that are looked up under
	// the base to see whether they name an existing entry.
	maxProbes = 1024
	// maxSubtree and maxSubtreeDepth bound the walk of a moved or copied
	// directory looking for secrets.
	maxSubtree      = 10000
	maxSubtreeDepth = 64
	// maxPaths bounds the paths one call may name.
	maxPaths = 4096
)

// pointer is a parsed tool_path_args entry: JSON Pointer tokens, where "*"
// matches any one token.
type pointer []string

// parsePointer reads a plain argument name ("target": the top-level
// argument) or a JSON Pointer (RFC 6901: "/options/target", "~1" is '/',
// "~0" is '~').
func parsePointer(a string) (pointer, error) {
	if err := schema.CheckArgPointer(a); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(a, "/") {
		return pointer{a}, nil
	}
	var p pointer
	for _, t := range strings.Split(a[1:], "/") {
		p = append(p, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
	}
	return p, nil
}

// covers reports whether p names the value at ptr or one of its ancestors
// (a pointer to a list or an object covers everything inside it).
func (p pointer) covers(ptr []string) bool {
	if len(ptr) < len(p) {
		return false
	}
	for i, t := range p {
		if t != "*" && t != ptr[i] {
			return false
		}
	}
	return true
}

// Token kinds the walker reports besides jsontext's: an object member name.
const kindName = 'k'

// walk calls visit for every value in raw (an object or array at the top)
// and for every object member name, with the JSON Pointer tokens leading
// to it. Containers are reported when they open. The first denial stops
// the walk. Plain JSON (see scanPlain: the arguments of almost every call)
// is walked from its tokens without a decoder; anything else by
// jsontext's decoder (walkDecoder), which also says why it is not valid.
// The two report the same visits (FuzzWalkAgreesWithTheDecoder).
func walk(raw []byte, visit func(ptr []string, kind byte, s string) *Denial) (*Denial, error) {
	var store [64]plainToken
	if toks, ok := scanPlain(raw, store[:0]); ok {
		return walkPlain(raw, toks, visit), nil
	}
	return walkDecoder(raw, visit)
}

// walkDecoder is walk through jsontext's decoder.
func walkDecoder(raw []byte, visit func(ptr []string, kind byte, s string) *Denial) (*Denial, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		object   bool
		index    int
		wantName bool
	}
	var stack []frame
	var ptr []string
	// begin and end bracket one value inside its container.
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
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		kind := byte(tok.Kind())
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantName && kind == '"' {
			name := tok.String()
			ptr = append(ptr, name)
			stack[n-1].wantName = false
			if d := visit(ptr, kindName, name); d != nil {
				return d, nil
			}
			continue
		}
		switch kind {
		case '{', '[':
			begin()
			if d := visit(ptr, kind, ""); d != nil {
				return d, nil
			}
			stack = append(stack, frame{object: kind == '{', wantName: kind == '{'})
		case '}', ']':
			stack = stack[:len(stack)-1]
			end()
		default:
			begin()
			s := ""
			if kind == '"' {
				s = tok.String()
			}
			if d := visit(ptr, kind, s); d != nil {
				return d, nil
			}
			end()
		}
	}
}

// argChecker checks the paths of one call.
type argChecker struct {
	p     *Policy
	relTo func(string) string
	// alt resolves a relative name against the server's working directory
	// when that is not the base (nil otherwise): such a name is checked
	// both ways.
	alt   func(string) string
	eff   []string
	moves bool
	// names: a secret's name (".env", "keys/id_rsa") is refused even
	// where names are not looked up under the base (CheckValues: a
	// request's other members, round eleven).
	names   bool
	checked []string
	probes  int
	paths   int // paths checked so far (bounded by maxPaths)
	walked  int // subtree entries walked so far (bounded by maxSubtree)
	// secrets under the effective directories, listed once for the
	// call's globs (wildcards.go).
	secrets       []scopeSecret
	secretsListed bool
	secretsBound  bool // the listing went past maxGlobWalk
	// globs are a table tool's search patterns, matched once the walk has
	// seen the directory they are rooted at (globRoot: its "path").
	globs    []pendingGlob
	globRoot *string
	// builtin: the call is of a tool of the built-in table, whose members
	// the table names are read as the filesystem server reads them;
	// other checks the rest (unknown).
	builtin bool
	other   *argChecker
	// depth counts the JSON documents in strings being read (embedded.go).
	depth int
}

// unknown is the checker of what the table does not read as the
// filesystem server does — members it does not name, and its counts,
// flags and words: they are checked as an unknown tool's strings, since a
// tool of a table name on another server (or after its list changed)
// resolves a relative name under its working directory, not under the
// scope's directories. The real server's calls have no such member: the
// checker is made on demand.
func (c *argChecker) unknown() *argChecker {
	if !c.builtin {
		return c
	}
	if c.other == nil {
		c.other = c.p.newChecker(c.p.baseRel, c.eff, false)
		c.other.moves = c.moves
	}
	return c.other
}

// newChecker is an argChecker whose relative names resolve with relTo
// and, for a server that is not the filesystem server, also against the
// server's working directory; fsTool: a call of a built-in table tool.
func (p *Policy) newChecker(relTo func(string) string, effective []string, fsTool bool) *argChecker {
	c := &argChecker{p: p, eff: effective, relTo: relTo, builtin: fsTool}
	if !fsTool {
		c.alt = p.workRel
	}
	return c
}

// CheckArguments finds every path in a call's arguments, at any depth and
// under any key, and checks it against effective (the canonical
// directories and files the call may touch, in the order the server was
// given them):
//
//   - arguments the built-in table names are read as it says (paths, lists
//     of paths, globs, or text that is never a path);
//   - arguments the scope's tool_path_args names (a name or a JSON
//     Pointer) are paths, whatever they look like;
//   - every other string and object member name, at any depth, is checked
//     as a path when it looks like one: absolute, starting with '~', "./"
//     or "../", holding a ".." component, a file:// URI, or naming an
//     entry that exists under the base; also when the server could read it
//     as one after percent-decoding, Unicode NFKC normalisation or turning
//     '\' into '/'.
//
// A tool that moves, renames or copies (by the table, or by its name) has
// the subtree of each of its paths walked for secrets. It returns the real
// paths checked (on a denial, up to and including the refused one when it
// could be resolved), for hashing into the decision record.
func (p *Policy) CheckArguments(name string, raw json.RawMessage, effective []string) ([]string, *Denial) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, deny(schema.ErrMalformedRequest, "arguments must be an object")
	}
	t, builtin := fsTools[name]
	relTo := p.baseRel
	if builtin {
		relTo = FSRelative(effective)
	}
	c := p.newChecker(relTo, effective, builtin)
	c.moves = t.Moves || MovesByName(name)
	declared := p.pathArgs[name]
	var segs segmentArrays
	d, err := walk(raw, func(ptr []string, kind byte, s string) *Denial {
		if len(ptr) == 0 {
			return nil // the arguments object itself
		}
		segs.visit(ptr, kind, s)
		if builtin {
			for _, spec := range t.Args {
				if spec.Name == ptr[0] {
					if kind == kindName {
						return nil // the argument's own name
					}
					if spec.Kind == ArgScalar {
						return c.unknown().table(spec, ptr, kind, s)
					}
					return c.table(spec, ptr, kind, s)
				}
			}
		}
		for _, dp := range declared {
			if dp.covers(ptr) {
				switch {
				case kind == '"':
					return c.path(ptr, s)
				case kind == kindName && len(ptr) > len(dp):
					return c.loose(ptr, s, false)
				}
				return nil
			}
		}
		switch kind {
		case '"':
			return c.unknown().loose(ptr, s, true)
		case kindName:
			return c.unknown().loose(ptr, s, false)
		}
		return nil
	})
	if err != nil {
		return nil, deny(schema.ErrMalformedRequest, "arguments are not valid JSON")
	}
	if d == nil {
		d = segs.joins(func(ptr []string, joined string) *Denial { return c.unknown().loose(ptr, joined, false) })
	}
	if c.other != nil {
		c.checked = append(c.checked, c.other.checked...)
	}
	if d == nil && len(c.globs) > 0 {
		d = c.rootedGlobs()
	}
	return c.checked, d
}

// CheckLooseArguments checks the strings of prompts/get and
// completion/complete arguments: each that looks like a path (see
// CheckArguments) must be inside effective and not secret. Relative names
// resolve against the base.
func (p *Policy) CheckLooseArguments(raw json.RawMessage, effective []string) ([]string, *Denial) {
	return p.checkLoose(raw, effective, true, false, "argument")
}

// checkLoose checks every string and member name of raw that looks like a
// path (what names the value in a denial); with probe, a string that does
// not is still checked when it names an entry that exists.
func (p *Policy) checkLoose(raw json.RawMessage, effective []string, probe, names bool, what string) ([]string, *Denial) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	c := p.newChecker(p.baseRel, effective, false)
	c.names = names
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, deny(schema.ErrMalformedRequest, "%s is not valid JSON", what)
		}
		return c.checked, c.loose([]string{"value"}, s, probe)
	}
	if raw[0] != '{' && raw[0] != '[' {
		return nil, nil
	}
	var segs segmentArrays
	d, err := walk(raw, func(ptr []string, kind byte, s string) *Denial {
		segs.visit(ptr, kind, s)
		if len(ptr) > 0 && (kind == '"' || kind == kindName) {
			c.names = names && kind == '"' // (member names: the rule as before)
			return c.loose(ptr, s, probe && kind == '"')
		}
		return nil
	})
	if err != nil {
		return nil, deny(schema.ErrMalformedRequest, "%ss are not valid JSON", what)
	}
	if d == nil {
		d = segs.joins(func(ptr []string, joined string) *Denial { return c.loose(ptr, joined, false) })
	}
	return c.checked, d
}

// table reads an argument the built-in table names.
func (c *argChecker) table(spec ArgSpec, ptr []string, kind byte, s string) *Denial {
	if spec.Kind == ArgText || kind == 'n' {
		return nil
	}
	if spec.Kind == ArgScalar {
		if kind == '"' && len(ptr) == 1 && slices.Contains(scalarWords[spec.Name], s) {
			return nil // the filesystem server's own word (sortBy "name")
		}
		if kind == '"' || kind == kindName {
			return c.loose(ptr, s, kind == '"')
		}
		return nil
	}
	list := spec.Kind == ArgPathList || spec.Kind == ArgGlobList
	switch {
	case len(ptr) == 1 && kind == '"', len(ptr) == 2 && list && kind == '"':
	case len(ptr) == 1 && list && kind == '[':
		return nil
	case list:
		return deny(schema.ErrMalformedRequest, "argument %q: must be a string or an array of strings", label(ptr[:1]))
	default:
		return deny(schema.ErrMalformedRequest, "argument %q: must be a string", label(ptr[:1]))
	}
	if spec.Kind == ArgGlob || spec.Kind == ArgGlobList {
		if err := CheckGlob(s); err != nil {
			return deny(schema.ErrPathOutsideScope, "argument %q: %v", label(ptr[:1]), err)
		}
		if spec.Kind == ArgGlob {
			// A search pattern: what it matches is read (by name) under
			// the call's path. Exclusions only take names away.
			c.globs = append(c.globs, pendingGlob{ptr: slices.Clone(ptr), s: s})
		}
		return nil
	}
	if spec.Name == "path" && len(ptr) == 1 {
		root := s
		c.globRoot = &root
	}
	return c.path(ptr, s)
}

// path checks s as a path (a file:// URI is read as its path). A name
// that starts with an environment variable is checked as a server that
// expands it would read it: $HOME as '~', any other variable is refused
// (the proxy cannot know its value). A relative name is checked against
// the server's working directory too when that is not the base.
func (c *argChecker) path(ptr []string, s string) *Denial {
	if c.paths++; c.paths > maxPaths {
		return deny(schema.ErrMalformedRequest, "a call may name at most %d paths", maxPaths)
	}
	if hasFileScheme(s) {
		p, err := FilePath(s)
		if err != nil {
			return deny(schema.ErrPathOutsideScope, "argument %q: %v", label(ptr), err)
		}
		s = p
	}
	if name, rest, ok := envPrefix(s); ok {
		if name != "HOME" {
			return deny(schema.ErrPathOutsideScope, "argument %q: starts with the environment variable $%s, which the proxy cannot expand", label(ptr), truncateName(name))
		}
		if d := c.one(ptr, "~"+rest, c.relTo); d != nil {
			return d
		}
	}
	if home, rest, ok := tildeUser(s); ok {
		// "~user/…" is a relative name to the filesystem server, but
		// that user's home to one that expands it (Python's
		// os.path.expanduser, a shell): checked both ways.
		if d := c.one(ptr, home+rest, c.relTo); d != nil {
			return d
		}
	}
	if d := c.one(ptr, s, c.relTo); d != nil {
		return d
	}
	if c.alt != nil && !filepath.IsAbs(s) && !strings.HasPrefix(s, "~") {
		return c.one(ptr, s, c.alt)
	}
	return nil
}

// tildeUser reports whether s starts with "~user" ("~user" alone or
// followed by '/') for a user of this host with a home directory, and
// returns that home and what follows the name. A name no user has is
// left as it is by the servers that expand the others.
func tildeUser(s string) (home, rest string, ok bool) {
	if len(s) < 2 || s[0] != '~' || s[1] == '/' {
		return "", "", false
	}
	name := s[1:]
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name, rest = name[:i], name[i:]
	}
	u, err := user.Lookup(name)
	if err != nil || u.HomeDir == "" || !filepath.IsAbs(u.HomeDir) {
		return "", "", false
	}
	return u.HomeDir, rest, true
}

// one checks s as a path with relative names resolved by relTo.
func (c *argChecker) one(ptr []string, s string, relTo func(string) string) *Denial {
	real, d := c.p.CheckPath(s, relTo, c.eff)
	if real != "" {
		c.checked = append(c.checked, real)
	}
	if d == nil && c.moves {
		d = c.p.checkSubtree(real, &c.walked)
	}
	if d != nil {
		d.Reason = fmt.Sprintf("argument %q: %s", label(ptr), d.Reason)
	}
	return d
}

// envPrefix reports whether s starts with an environment variable a shell
// or a server that expands them would replace: "$NAME" or "${NAME}",
// alone or followed by '/'. rest is what follows the variable.
func envPrefix(s string) (name, rest string, ok bool) {
	if len(s) < 2 || s[0] != '$' {
		return "", "", false
	}
	body, braced := s[1:], false
	if body[0] == '{' {
		body, braced = body[1:], true
	}
	n := 0
	for n < len(body) && (body[n] == '_' || body[n] >= 'A' && body[n] <= 'Z' || body[n] >= 'a' && body[n] <= 'z' || n > 0 && body[n] >= '0' && body[n] <= '9') {
		n++
	}
	if n == 0 {
		return "", "", false
	}
	name, rest = body[:n], body[n:]
	if braced {
		if !strings.HasPrefix(rest, "}") {
			return "", "", false
		}
		rest = rest[1:]
	}
	if rest != "" && rest[0] != '/' {
		return "", "", false
	}
	return name, rest, true
}

// loose checks s when it looks like a path, in each form a server might
// read it as. With probe, a string that does not look like one is still
// checked when it names an entry that exists (member names are not probed:
// they are mostly the names of arguments).
func (c *argChecker) loose(ptr []string, s string, probe bool) *Denial {
	forms, err := c.pathForms(s, probe)
	if err != nil {
		return deny(schema.ErrMalformedRequest, "argument %q: %v", label(ptr), err)
	}
	for _, f := range forms {
		if d := c.path(ptr, f); d != nil {
			return d
		}
	}
	if jsonDocument(s) {
		// A JSON document in a string: a server that parses it reads its
		// strings as arguments (embedded.go).
		if d := c.looseJSON(ptr, s, probe); d != nil {
			return d
		}
	}
	if probe && hasWildcard(s) {
		// A glob a server may expand: what it would match under the
		// scope must not be a secret (wildcards.go).
		if d := c.globSecrets(ptr, s); d != nil {
			return d
		}
	}
	if probe && (strings.ContainsAny(s, "*?") || hasExtglob(s)) {
		// Also as a part of a value a server takes apart
		// ("--include=*.pem", "grep --include=*.pem x").
		return c.partGlobs(ptr, s)
	}
	return nil
}

// pathForms returns the forms of s to check as paths: none when s does not
// look like a path in any form a server might make of it.
func (c *argChecker) pathForms(s string, probe bool) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	add := func(f string) {
		for _, o := range out {
			if o == f {
				return
			}
		}
		out = append(out, f)
	}
	if looksLikePath(s) {
		add(s)
	}
	// A server that trims its arguments (JavaScript's trim, Python's strip,
	// Go's TrimSpace: Unicode spaces, line breaks, U+FEFF) reads
	// " /etc/passwd" as "/etc/passwd": the trimmed form is checked too, in
	// each of its own forms.
	if t := strings.TrimFunc(s, trimmable); t != s && t != "" {
		forms, err := c.pathForms(t, false)
		if err != nil {
			return nil, err
		}
		for _, f := range forms {
			add(f)
		}
		if (probe || c.names) && namesSecret(c.p, t) {
			add(t)
		}
	}
	// A server that turns '\' into '/' (or runs on another OS's path
	// rules) reads "..\x" as "../x": the original, with its backslash, is
	// checked and refused.
	if strings.ContainsRune(s, '\\') {
		if f := strings.ReplaceAll(s, `\`, "/"); looksLikePath(f) || (probe || c.names) && namesSecret(c.p, f) {
			add(s)
		}
	}
	// Decoded as often as a server might decode it (a doubly encoded
	// "%252e%252e%252f" is "../" to one that decodes twice).
	for i, d := 0, s; i < 3 && strings.ContainsRune(d, '%'); i++ {
		next, err := url.PathUnescape(d)
		if err != nil || next == d {
			break
		}
		if d = next; looksLikePath(d) || (probe || c.names) && namesSecret(c.p, d) {
			add(s)
			add(d)
		}
		if n := strings.IndexByte(d, 0); n > 0 {
			// ".env%00.txt": what a C string of it reads (round eleven).
			forms, err := c.pathForms(d[:n], probe)
			if err != nil {
				return nil, err
			}
			for _, f := range forms {
				add(f)
			}
		}
	}
	if len(s) <= MaxPathLen && !asciiOnly(s) && !norm.NFKC.IsNormalString(s) {
		if n := norm.NFKC.String(s); looksLikePath(n) || (probe || c.names) && namesSecret(c.p, n) {
			add(s)
			add(n)
		}
	}
	// A server that expands globs reads "{/etc/passwd,x}" and ".e[n]v" as
	// the names they expand to: each is checked in its own forms (and
	// looked up under the base, as s would be).
	if alts, err := expandGlob(s); err != nil {
		return nil, err
	} else if len(alts) > 0 {
		for _, a := range alts {
			forms, err := c.pathForms(a, probe)
			if err != nil {
				return nil, err
			}
			for _, f := range forms {
				add(f)
			}
		}
	}
	// A path inside a string a server takes apart or decodes: an option
	// ("--config=/etc/x", "-f/etc/x"), a key=value or separated list, a
	// JSON document in a string (a lenient parser's too), a URL a WHATWG
	// parser reads past leading controls, base64 or hex (embedded.go).
	if err := c.embeddedForms(s, probe, add); err != nil {
		return nil, err
	}
	if len(out) == 0 && (probe || c.names) && namesSecret(c.p, s) {
		// ".env", "sub/id_rsa", "credentials.json": a secret's name,
		// whether or not it exists under the base — a server may resolve
		// it under a directory of its own (a "cwd" member beside it); its
		// trimmed, decoded and NFKC forms above too.
		add(s)
	}
	if len(out) == 0 && probe && probeable(s) {
		if c.probes++; c.probes > maxProbes {
			return nil, fmt.Errorf("more than %d strings that could name files; declare the tool's path arguments in tool_path_args", maxProbes)
		}
		if Exists(c.relTo(s)) || c.alt != nil && Exists(c.alt(s)) {
			add(s) // it names an existing entry
		}
	}
	return out, nil
}

// namesSecret: s reads as a file name (no white space; a '.', '/' or '_'
// in it, so that a plain word such as "credentials" stays text) one of
// whose components is a secret.
func namesSecret(p *Policy, s string) bool {
	if len(s) > MaxPathLen || !strings.ContainsAny(s, "./_") || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return false
	}
	return p.secrets.Match(s)
}

// trimmable is what a server's trim may take off an argument's ends.
func trimmable(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' || r == '\u200b' }

// looksLikePath: absolute, '~', "./", "../", "." or "..", a ".."
// component, or a file: URI.
func looksLikePath(s string) bool {
	switch {
	case s == "":
		return false
	case s == "." || s == "..":
		return true
	case strings.HasPrefix(s, "/"), strings.HasPrefix(s, "~"), strings.HasPrefix(s, "./"), strings.HasPrefix(s, "../"):
		return true
	case hasFileScheme(s):
		return true
	case s[0] == '$':
		_, _, env := envPrefix(s)
		return env
	case strings.Contains(s, "/../") || strings.HasSuffix(s, "/.."):
		// A URL of another scheme ("https://h/a/../b") is not a path.
		return !hasURLScheme(s)
	}
	return false
}

// hasURLScheme: s starts with scheme "://" (RFC 3986 scheme characters).
func hasURLScheme(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 {
		return false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func hasFileScheme(s string) bool { return len(s) >= 5 && strings.EqualFold(s[:5], "file:") }

// probeable: a string that could be the name of an entry (short enough, no
// NUL, no line breaks) and so is worth a look under the base.
func probeable(s string) bool {
	return len(s) <= MaxPathLen && !strings.ContainsAny(s, "\x00\n\r")
}

// checkSubtree refuses a move, rename or copy of a directory whose subtree
// holds a secret: the secret would be readable under its new name. The
// walk does not follow symlinks, is bounded, and a subtree that cannot be
// walked is refused.
func (p *Policy) checkSubtree(real string, walked *int) *Denial {
	st, err := os.Lstat(real)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a new destination: its own name was checked
	}
	if err != nil {
		return deny(schema.ErrPathOutsideScope, "cannot be inspected (%v)", errors.Unwrap(err))
	}
	if !st.IsDir() {
		return nil
	}
	errSecret := errors.New("secret")
	errBound := errors.New("bound")
	werr := filepath.WalkDir(real, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		*walked++
		if *walked > maxSubtree || strings.Count(path[len(real):], "/") > maxSubtreeDepth {
			return errBound
		}
		if p.secrets.Match(path) {
			return errSecret
		}
		return nil
	})
	switch {
	case werr == nil:
		return nil
	case errors.Is(werr, errSecret):
		return deny(schema.ErrSecretPath, "the directory holds a secret (credentials, keys, .env, .git, .ssh); moving or copying it would serve the secret under another name")
	case errors.Is(werr, errBound):
		return deny(schema.ErrPathOutsideScope, "the directory is too large to check for secrets (more than %d entries or %d levels)", maxSubtree, maxSubtreeDepth)
	}
	return deny(schema.ErrPathOutsideScope, "the directory cannot be checked for secrets (%v)", errors.Unwrap(werr))
}

// label is a pointer for a message: "path", "/options/target".
func label(ptr []string) string {
	if len(ptr) == 1 {
		return truncateName(ptr[0])
	}
	var b strings.Builder
	for _, t := range ptr {
		b.WriteByte('/')
		b.WriteString(truncateName(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")))
	}
	return b.String()
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// MayHoldPath is a quick test that raw (JSON) holds no string a path
// check could refuse: nothing absolute, relative with a separator, '~',
// '$', percent-encoded, backslashed or outside ASCII (NFKC), and no "." or
// "..". When it reports false, CheckValues would pass raw.
//
// A string that may be base64 or hex of a path (decodedPath) holds none
// of these: it is told by its first two characters, which encode the
// path's first character ('/', '~', '.', '$' or the 'f' of file:; round
// eleven: before, base64 of a path in _meta or a cursor passed).
func MayHoldPath(raw []byte) bool {
	for i, b := range raw {
		switch {
		case b == '/', b == '~', b == '%', b == '\\', b == '$', b >= 0x80:
			return true
		case partBound[b] && i+2 < len(raw) && encodedPathStart(raw[i+1], raw[i+2]):
			return true
		}
	}
	// (A '[' may open a glob's bracket class, "[--0]" or "[.]", which
	// expands to any character of its range: the walk decides.)
	return bytes.IndexByte(raw, '[') >= 0 || mayHoldDotPart(raw) || mayHoldEncodedDotDot(raw) || hasFileScheme0(raw)
}

// hasFileScheme0: raw holds "file:" in any case (a file: URI with no
// '/', "file:x", is refused as one).
func hasFileScheme0(raw []byte) bool {
	for i := 0; i+5 <= len(raw); i++ {
		if raw[i]|0x20 == 'f' && raw[i+1]|0x20 == 'i' && raw[i+2]|0x20 == 'l' && raw[i+3]|0x20 == 'e' && raw[i+4] == ':' {
			return true
		}
	}
	return false
}

// partBound: the bytes a part of a string starts or ends after or
// before: a quote, a space, a separator or ':' (embedded.go).
var partBound = func() (t [256]bool) {
	for _, b := range []byte(separators + "\": ") {
		t[b] = true
	}
	return t
}()

// mayHoldDotPart: raw may hold "." or ".." as a string or as a part of
// one a server takes apart ("x,.", "k=..", "'.'": embedded.go): a '.' or
// ".." with a quote, a separator, a space or ":" on each side (or a short
// option before it).
func mayHoldDotPart(raw []byte) bool {
	bound := func(b byte) bool { return partBound[b] }
	for i := 0; ; {
		j := bytes.IndexByte(raw[i:], '.')
		if j < 0 {
			return false
		}
		i += j
		k := i + 1
		if k < len(raw) && raw[k] == '.' {
			k++
		}
		before := i > 0 && bound(raw[i-1]) || i > 1 && raw[i-2] == '-' && isLetter(raw[i-1]) // (or glued to a short option: "-C.")
		if before && k < len(raw) && bound(raw[k]) {
			return true
		}
		i = k
	}
}

// mayHoldEncodedDotDot: raw may hold base64 or hex of a "/.." inside a
// string (a relative path that climbs: "a/../../etc/passwd"), which
// looksLikePath reads as a path whatever its first character. In base64
// "/.." is "Ly4u", "…8uL…" or "…Li4…" by its alignment; in hex "2f2e2e"
// in any case.
func mayHoldEncodedDotDot(raw []byte) bool {
	if bytes.Contains(raw, []byte("Ly4u")) || bytes.Contains(raw, []byte("8uL")) || bytes.Contains(raw, []byte("Li4")) {
		return true
	}
	for i := 0; i+6 <= len(raw); i++ {
		if raw[i] == '2' && raw[i+1]|0x20 == 'f' && raw[i+2] == '2' && raw[i+3]|0x20 == 'e' && raw[i+4] == '2' && raw[i+5]|0x20 == 'e' {
			return true
		}
	}
	return false
}

// encodedPathStart: a string starting c0 c1 may be base64 (either
// alphabet) or hex of a string starting '/', '~', '.', '$' or the 'f'
// or 'F' of file:.
func encodedPathStart(c0, c1 byte) bool {
	switch c0 {
	case 'L', 'f', 'J', 'Z', 'R': // base64: '/' and '.' are 'L', '~' 'f', '$' 'J', 'f' 'Z', 'F' 'R'
		return true
	case '2':
		return c1 == 'f' || c1 == 'F' || c1 == 'e' || c1 == 'E' || c1 == '4' // hex: 2f, 2e, 24
	case '7':
		return c1 == 'e' || c1 == 'E' // 7e
	case '6':
		return c1 == '6' // 66
	case '4':
		return c1 == '6' // 46
	}
	return false
}

// CheckValues checks the strings and member names of a request's
// parameters that are not its arguments (params members a method does not
// read, _meta): each that looks like a path must be inside effective and
// not secret. Nothing is looked up under the base: these are not the
// arguments of a tool.
//
// A secret's name among the values (".env", "keys/id_rsa",
// "credentials.json") is refused too, as in a tool's arguments (round
// eleven: a server that reads params.path under its own directory reads
// the secret); that needs no look-up.
func (p *Policy) CheckValues(raw json.RawMessage, effective []string) ([]string, *Denial) {
	if !MayHoldPath(raw) && !MayNameSecret(raw) {
		return nil, nil
	}
	return p.checkLoose(raw, effective, false, true, "parameter")
}

// MayNameSecret is a quick test that raw (JSON) holds no string that
// names a secret (namesSecret: a '.', '/' or '_' in it). When it and
// MayHoldPath both report false, CheckValues passes raw.
func MayNameSecret(raw []byte) bool { return bytes.ContainsAny(raw, "._/") }

// CheckResultURIs checks a server's result (a tool's content, a prompt's
// messages, a resource's contents), request or notification for file://
// URIs in members named "uri" or "url": an embedded resource or a link to
// a file outside effective, or to a secret, is refused — the server read,
// or points the client at, what the scope does not allow (through a path
// the proxy never saw). "url" is a URL-mode elicitation's (2025-11-25): a
// client opens it. URIs of other schemes are the server's own names,
// except a URL-mode elicitation's url, which must be http or https
// (CheckOpenURLs: a client opens it), and a "uri" or "uriTemplate" that
// runs code in a client that opens it (CheckActiveURIs: javascript:,
// vbscript:, an active data: document).
func (p *Policy) CheckResultURIs(raw json.RawMessage, effective []string) ([]string, *Denial) {
	if d := CheckActiveURIs(raw); d != nil {
		return nil, d
	}
	return p.checkFileURIs(raw, effective)
}

// checkFileURIs is CheckResultURIs without the check of active URIs (a
// client's answer goes to the server, which does not open links).
func (p *Policy) checkFileURIs(raw json.RawMessage, effective []string) ([]string, *Denial) {
	if d := CheckOpenURLs(raw); d != nil {
		return nil, d
	}
	if !hasFileURI(raw) && !mayHoldAppURL(raw) {
		return nil, nil
	}
	c := p.newChecker(p.baseRel, effective, false)
	d, err := walk(raw, func(ptr []string, kind byte, s string) *Denial {
		// (A member name in any case, round twelve: go-sdk reads a
		// -32042's elicitations and a round's inputRequests with
		// encoding/json, which folds case: "URL", "Uri".)
		if kind != '"' || len(ptr) == 0 || len(ptr[len(ptr)-1]) != 3 || !strings.EqualFold(ptr[len(ptr)-1], "uri") && !strings.EqualFold(ptr[len(ptr)-1], "url") {
			return nil
		}
		// As a client's URL parser reads it: " file:…" and "fi\nle:…" are
		// file URLs to WHATWG's.
		if s = urlClean(s); !hasFileScheme(s) {
			// An editor's or application's URL wrapping a file's path
			// (vscode-file://vscode-app/<path>, vscode://file/<path>,
			// idea://open?file=<path>: appurls.go, round twelve), which
			// the client opens: each name it wraps is checked.
			refs, ok := appFileRefs(s)
			if !ok {
				return nil
			}
			if len(refs) == 0 {
				return deny(schema.ErrMalformedRequest, "the server's answer holds an application URL that wraps a file's path and cannot be read (%s)", truncateScheme(s))
			}
			for _, r := range refs {
				if d := c.path(ptr, r); d != nil {
					d.Reason = "the server's answer holds an application URL of a file it may not serve: " + d.Reason
					return d
				}
			}
			return nil
		}
		if d := c.path(ptr, s); d != nil {
			d.Reason = "the server's answer holds a file URI it may not serve: " + d.Reason
			return d
		}
		return nil
	})
	if err != nil {
		return nil, deny(schema.ErrMalformedRequest, "the server's answer is not valid JSON")
	}
	return c.checked, d
}

// hasFileURI: raw holds "file:" in any case, or a JSON escape that may
// spell one of its characters ("\u0066ile:", "file\u003a": a client
// reads the string unescaped, so the escaped spelling is a file URI too).
func hasFileURI(raw []byte) bool {
	return hasPlainFileURI(raw) || HasEscapedASCII(raw, "fileFILE:\t\n\r")
}

// HasEscapedASCII reports whether raw (JSON) holds a \u escape of one of
// the ASCII characters in chars: a quick test before a byte scan for a
// literal is trusted, since a JSON reader sees "\u0066" as "f".
func HasEscapedASCII(raw []byte, chars string) bool {
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`\u00`))
		if j < 0 {
			return false
		}
		i += j + 4
		if i+2 > len(raw) {
			return false
		}
		hi, lo := unhex(raw[i]), unhex(raw[i+1])
		if hi < 0 || lo < 0 {
			continue
		}
		if c := byte(hi<<4 | lo); c < 0x80 && strings.IndexByte(chars, c) >= 0 {
			return true
		}
	}
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// hasPlainFileURI: raw holds "file:" in any case, unescaped, also with
// the tab and line-break escapes a URL parser removes between its
// letters ("fi\nle:").
func hasPlainFileURI(raw []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(raw[i:], ':')
		if j < 0 {
			return false
		}
		i += j
		if endsWithFile(raw[:i]) {
			return true
		}
		i++
	}
}

// endsWithFile: b ends with "file" in any case, "\t", "\n" and "\r"
// escapes between its letters skipped.
func endsWithFile(b []byte) bool {
	const word = "elif" // backwards
	k, n := 0, len(b)
	for k < len(word) && n > 0 {
		if n >= 2 && b[n-2] == '\\' && (b[n-1] == 't' || b[n-1] == 'n' || b[n-1] == 'r') {
			n -= 2
			continue
		}
		if b[n-1]|0x20 != word[k] {
			return false
		}
		n--
		k++
	}
	return k == len(word)
}

// CheckClientAnswer checks the client's answer to a server's sampling or
// elicitation request (relayed in the 2025-11-25 era, an input response
// in 2026-07-28's rounds and tasks) before the server gets it: the
// server reads what it is told, so a file URI the scope does not allow
// (a resource link or embedded resource in a model's answer) is refused
// as in a server's result, and an elicitation's accepted form values
// (content) are checked as a request's parameters (a path or a secret's
// name a user or a model typed there is one the server would then read).
// A model's free text is not read for names.
func (p *Policy) CheckClientAnswer(raw json.RawMessage, effective []string) ([]string, *Denial) {
	paths, d := p.checkFileURIs(raw, effective)
	if d != nil {
		// (CheckResultURIs words its reason for a server's answer.)
		return paths, &Denial{Code: d.Code, Reason: "it links or embeds a file URI the scope does not allow"}
	}
	// (In any case, round twelve: go-sdk's server reads inputResponses
	// with encoding/json, which takes {"ACTION": "accept", "CONTENT":
	// {…}} for an elicitation's answer; so does the decode below.)
	if !ContainsFold(raw, `"action"`) && !HasEscapedASCII(raw, "actionACTION") {
		return paths, nil // no elicitation answer
	}
	var res struct {
		Action  *string         `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &res) != nil || res.Action == nil || len(res.Content) == 0 || res.Content[0] != '{' {
		return paths, nil
	}
	// Form values are read as a tool's arguments are (an existing entry's
	// name included), not only by how they look.
	more, d := p.checkLoose(res.Content, effective, true, false, "answer")
	return append(paths, more...), d
}
