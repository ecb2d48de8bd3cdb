package policy

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Paths inside strings that are not paths by themselves (round ten). A
// server that takes a string apart or decodes it reads a path the string
// does not start with:
//
//   - an option or an assignment: "--config=/etc/passwd", "path=.env",
//     "-f/etc/passwd" (a short option glued to its value);
//   - a list: "a.txt,/etc/passwd", "/scope/a:/etc/passwd" (PATH-like),
//     "a;b", "a|b", "@/etc/passwd" (curl's file reference), a value in
//     quotes or brackets (not '<' and '>': "<b>x</b>" is markup);
//   - a JSON document in a string ("{\"path\":\"/etc/passwd\"}"), or one
//     a lenient parser reads (JSON5: comments, single quotes, trailing
//     commas, unquoted names);
//   - a file: URL a WHATWG parser reads past leading C0 controls
//     ("\x01file:///etc/passwd");
//   - base64 (standard or URL alphabet, padded or not) or hex of a path.
//
// Each part that looks like a path (absolute, '~', "./", "../", a ".."
// component, file:, $VAR; or a secret's name) is checked as one. A string
// with white space is text (a sentence, a command line, code): only a
// JSON document and a command line's options and unquoted assignments
// ("--file=/x", "-f/x", "CONF=/x") are read in it; its other words are
// not (see docs/proxy.md, Known limits: a tool that runs commands builds
// any path it likes, and the fence is what holds).

// maxEmbedded bounds the length of a string that is taken apart, and
// maxEmbeddedDepth the JSON documents nested in strings that are read.
const (
	maxEmbedded      = 1 << 16
	maxEmbeddedDepth = 4
	maxLookedUpLines = 64
)

// separators a server splits a value at (':' is handled apart: a URL's
// scheme is not a separator).
const separators = "=,;|@(){}[]'\"`"

// embeddedForms adds the paths embedded in s (see above), each in the
// forms pathForms finds for it. A string of one token only: white space
// makes it text.
func (c *argChecker) embeddedForms(s string, probe bool, add func(string)) error {
	if len(s) < 2 || len(s) > maxEmbedded {
		return nil
	}
	if t := urlClean(s); t != s && hasFileScheme(t) {
		// " \x01file:///etc/passwd": a WHATWG parser strips leading C0
		// controls and spaces (the trim above takes spaces only).
		add(t)
	}
	if strings.IndexByte(s, 0) >= 0 {
		// ".env\x00.txt": a server in C (or any that hands the string
		// to open(2) as a C string) reads up to the NUL; "a\x00/x" is a
		// list of names (find -print0, xargs -0). Each part is checked
		// (round eleven).
		for part := range strings.SplitSeq(s, "\x00") {
			if err := c.addPart(s, part, probe, add); err != nil {
				return err
			}
		}
	}
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		if strings.IndexFunc(s, textSpace) < 0 {
			// Line breaks and tabs but no space: a list, one per line
			// or field ("a.txt\n/etc/passwd", a TSV row), not text
			// (round eleven). Each part is checked as a path; in a list
			// longer than maxLookedUpLines (a base64 blob wrapped at 76
			// columns) a part is not looked up under the base, which
			// would exhaust the call's look-ups, but a secret's name is
			// still refused.
			parts := strings.Fields(s)
			for _, part := range parts {
				if err := c.addPart(s, part, probe && len(parts) <= maxLookedUpLines, add); err != nil {
					return err
				}
				if (probe || c.names) && namesSecret(c.p, part) {
					add(part)
				}
			}
			return nil
		}
		// Text, but a command line's options and assignments are read:
		// "grep --file=/etc/x pat", "run -f/etc/x", "env CONF=/etc/x".
		for word := range strings.FieldsSeq(s) {
			if optionWord(word) {
				if err := c.embeddedForms(word, probe, add); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if glued(s) {
		if err := c.addPart(s, s[2:], probe, add); err != nil {
			return err
		}
	}
	// Every part is shorter than s (a separator is taken out), so the
	// forms of a part never come back here with s.
	if scheme, rest, ok := urlScheme(s); ok && len(scheme) > 5 && strings.EqualFold(scheme[len(scheme)-5:], "+file") {
		// "git+file:///etc/passwd" (pip's, npm's and cargo's VCS URLs;
		// hg+, svn+, bzr+): a local path behind a tool's prefix (round
		// eleven).
		if err := c.addPart(s, "file:"+rest, probe, add); err != nil {
			return err
		}
	}
	if err := c.appParts(s, probe, add); err != nil {
		return err
	}
	if scheme, _, ok := urlScheme(s); ok && strings.EqualFold(scheme, "data") || hasURLScheme(s) && !hasFileScheme(s) {
		// A data: URL's payload is data, not a name; a URL of another
		// scheme names another host's resource, its query included.
		return nil
	}
	if strings.ContainsAny(s, separators) || strings.IndexByte(s, ':') >= 0 && !hasURLScheme(s) && !hasFileScheme(s) {
		if err := c.splitForms(s, probe, add); err != nil {
			return err
		}
	}
	if dec, ok := decodedPath(s); ok {
		forms, err := c.pathForms(dec, false)
		if err != nil {
			return err
		}
		for _, f := range forms {
			add(f)
		}
	}
	return nil
}

// textSpace: white space that makes a string text (a space of any
// kind); line breaks and tabs alone separate a list's items.
func textSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r':
		return false
	}
	return unicode.IsSpace(r)
}

// optionWord: a word of a command line that hands a value to a program:
// an option ("-f/x", "--file=/x") or an unquoted assignment ("CONF=/x";
// not markup's href="/x").
func optionWord(w string) bool {
	if len(w) > 2 && w[0] == '-' {
		return strings.IndexByte(w, '=') > 0 || glued(w)
	}
	eq := strings.IndexByte(w, '=')
	if eq <= 0 || eq == len(w)-1 || w[eq+1] == '"' || w[eq+1] == '\'' {
		return false
	}
	for i := 0; i < eq; i++ {
		if b := w[i]; !(isLetter(b) || b == '_' || i > 0 && (b >= '0' && b <= '9' || b == '.' || b == '-')) {
			return false
		}
	}
	return true
}

// glued: s is a short option glued to a path ("-f/etc/passwd",
// "-I../x", "-C~").
func glued(s string) bool {
	return len(s) > 2 && s[0] == '-' && isLetter(s[1]) && strings.ContainsAny(s[2:3], "/~.$")
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// splitForms adds the parts of s (split at the separators, then at ':'
// outside a URL) that look like paths, each in its own forms.
func (c *argChecker) splitForms(s string, probe bool, add func(string)) error {
	for part := range strings.FieldsFuncSeq(s, func(r rune) bool { return strings.ContainsRune(separators, r) }) {
		if err := c.partForms(s, part, probe, add); err != nil {
			return err
		}
	}
	return nil
}

// partForms checks one part of a split value: a URL of another scheme is
// not a path; a file: URL is read whole; anything else is split again at
// ':' (a PATH-like list, "C:/x").
func (c *argChecker) partForms(whole, part string, probe bool, add func(string)) error {
	if part == "" {
		return nil
	}
	if glued(part) {
		if err := c.addPart(whole, part[2:], probe, add); err != nil {
			return err
		}
	}
	if hasFileScheme(part) || hasURLScheme(part) || strings.IndexByte(part, ':') < 0 {
		return c.addPart(whole, part, probe, add)
	}
	if len(part) > 2 && part[1] == ':' && isLetter(part[0]) && strings.IndexByte(part[2:], ':') < 0 {
		// "C:\x", "C:/x": a drive letter, not a list (a relative name on
		// this host, checked as such).
		return c.addPart(whole, part, probe, add)
	}
	for sub := range strings.SplitSeq(part, ":") {
		if err := c.addPart(whole, sub, probe, add); err != nil {
			return err
		}
	}
	return nil
}

// addPart adds part's forms when it is a path a server may read; the
// whole string's own forms are pathForms' (never found again here, which
// would not end).
func (c *argChecker) addPart(whole, part string, probe bool, add func(string)) error {
	if part == "" || part == whole {
		return nil
	}
	if hasURLScheme(part) && !hasFileScheme(part) {
		return c.appParts(part, probe, add) // a.txt,vscode://file/<path>
	}
	// Probed as the whole string would be: "--dir=outside" names the
	// entry "outside" to a server that takes the option apart.
	forms, err := c.pathForms(part, probe)
	if err != nil {
		return err
	}
	for _, f := range forms {
		add(f)
	}
	return nil
}

// decodedPath reads s as base64 (standard or URL alphabet, padded or
// not) or hex; ok when what it encodes is printable UTF-8 that looks like
// a path ("L2V0Yy9wYXNzd2Q=" is "/etc/passwd").
func decodedPath(s string) (string, bool) {
	if len(s) < 4 {
		return "", false
	}
	hexOnly := len(s)%2 == 0
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= '0' && b <= '9', b >= 'a' && b <= 'f', b >= 'A' && b <= 'F':
		case isLetter(b), b == '+', b == '/', b == '-', b == '_':
			hexOnly = false
		case b == '=' && i >= len(s)-2:
			hexOnly = false
		default:
			return "", false
		}
	}
	// Decode only what could start a path ('/', '~', '.', '$', "file:"):
	// the first byte is known from the first two characters.
	if hexOnly && pathStart(byte(unhex(s[0])<<4|unhex(s[1]))) {
		if d, err := hex.DecodeString(s); err == nil && plausiblePath(d) {
			return string(d), true
		}
	}
	if !pathStart(b64(s[0])<<2 | b64(s[1])>>4) {
		return "", false
	}
	t := strings.TrimRight(s, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(t); err == nil && plausiblePath(d) {
			return string(d), true
		}
	}
	return "", false
}

// pathStart: b may be the first byte of a path or a file: URL.
func pathStart(b byte) bool { return strings.IndexByte("/~.$fF", b) >= 0 }

// b64 is the value of a base64 character (either alphabet).
func b64(c byte) byte {
	switch {
	case c >= 'A' && c <= 'Z':
		return c - 'A'
	case c >= 'a' && c <= 'z':
		return c - 'a' + 26
	case c >= '0' && c <= '9':
		return c - '0' + 52
	case c == '+', c == '-':
		return 62
	}
	return 63 // '/', '_' ('=' never comes first: no path)
}

// plausiblePath: b is a path spelled with the characters of names
// (letters, digits, "/._-~$:+@%,=" and non-ASCII UTF-8), holding a '/',
// that looks like a path: "~)^", what the word "file" decodes to, is no
// path.
func plausiblePath(b []byte) bool {
	if len(b) < 2 || !utf8.Valid(b) || bytes.IndexByte(b, '/') < 0 {
		return false
	}
	for _, r := range string(b) {
		if r < 0x80 && !(isLetter(byte(r)) || r >= '0' && r <= '9' || strings.ContainsRune("/._-~$:+@%,=", r)) || r == utf8.RuneError {
			return false
		}
	}
	return looksLikePath(string(b))
}

// jsonDocument: s (trimmed) is what a JSON parser, strict or lenient,
// reads as an object or an array.
func jsonDocument(s string) bool {
	t := strings.TrimFunc(s, trimmable)
	return len(t) >= 2 && (t[0] == '{' && t[len(t)-1] == '}' || t[0] == '[' && t[len(t)-1] == ']')
}

// looseJSON checks a JSON document carried in a string: every string and
// member name in it as an argument's (a server that parses the string
// reads them as its arguments). A document no strict parser reads (JSON5:
// comments, single quotes, trailing commas, unquoted names) is taken
// apart at its separators and white space, each word checked as a part.
func (c *argChecker) looseJSON(ptr []string, s string, probe bool) *Denial {
	if c.depth >= maxEmbeddedDepth {
		return deny(schema.ErrMalformedRequest, "argument %q: JSON nested in strings more than %d deep", label(ptr), maxEmbeddedDepth)
	}
	c.depth++
	defer func() { c.depth-- }()
	d, err := walk([]byte(s), func(sub []string, kind byte, v string) *Denial {
		if len(sub) > 0 && (kind == '"' || kind == kindName) {
			return c.loose(ptr, v, probe && kind == '"')
		}
		return nil
	})
	if err == nil {
		return d
	}
	var out []string
	add := func(f string) { out = append(out, f) }
	for word := range strings.FieldsSeq(s) {
		if err := c.splitForms(word, probe, add); err != nil {
			return deny(schema.ErrMalformedRequest, "argument %q: %v", label(ptr), err)
		}
	}
	for _, f := range out {
		if d := c.path(ptr, f); d != nil {
			return d
		}
	}
	return nil
}

// partGlobs checks the parts of s (split as embeddedForms splits it) that
// are globs: what each would match under the scope must not be a secret.
func (c *argChecker) partGlobs(ptr []string, s string) *Denial {
	if len(s) > maxEmbedded || hasURLScheme(s) && !hasFileScheme(s) {
		return nil
	}
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		if strings.IndexFunc(s, textSpace) < 0 {
			// A list by line or field (embeddedForms): every part.
			for part := range strings.FieldsSeq(s) {
				if hasWildcard(part) && !(hasURLScheme(part) && !hasFileScheme(part)) {
					if d := c.globSecrets(ptr, part); d != nil {
						return d
					}
				}
				if d := c.partGlobs(ptr, part); d != nil {
					return d
				}
			}
			return nil
		}
		// Text: its options and assignments only (embeddedForms).
		for word := range strings.FieldsSeq(s) {
			if optionWord(word) {
				if d := c.partGlobs(ptr, word); d != nil {
					return d
				}
			}
		}
		return nil
	}
	var first *Denial
	glob := func(part string) {
		if first == nil && part != s && hasWildcard(part) && !(hasURLScheme(part) && !hasFileScheme(part)) {
			first = c.globSecrets(ptr, part)
		}
	}
	if glued(s) {
		glob(s[2:])
	}
	for part := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == 0 || strings.ContainsRune(separators, r) }) {
		if glued(part) {
			glob(part[2:])
		}
		glob(part)
		if strings.IndexByte(part, ':') >= 0 && !hasURLScheme(part) && !hasFileScheme(part) {
			for sub := range strings.SplitSeq(part, ":") {
				glob(sub)
			}
		}
	}
	return first
}

// appParts adds the names an editor's or application's URL in s wraps
// (appurls.go, round twelve: vscode-file://vscode-app/<path>,
// vscode://file/<path>:<line>, idea://open?file=<path>, a subl:// URL's
// file: url), each in its path forms; a wrapping scheme's URL that does
// not parse is refused.
func (c *argChecker) appParts(s string, probe bool, add func(string)) error {
	refs, ok := appFileRefs(s)
	if !ok {
		return nil
	}
	if len(refs) == 0 {
		return badPath("an application URL that wraps a file's path cannot be read")
	}
	for _, r := range refs {
		if err := c.addPart(s, r, probe, add); err != nil {
			return err
		}
	}
	return nil
}
