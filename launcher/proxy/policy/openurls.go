package policy

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpwarden/mcpwarden/schema"
)

// URLs a client opens. A URL-mode elicitation (2025-11-25: an
// elicitation/create with "mode": "url", relayed, played as an input
// round, listed in a -32042 error's data.elicitations or in a 2026-07-28
// input_required result's or task's inputRequests) asks the client to
// open its url, in a browser or in its own web view; an icon's src is
// loaded by the client's interface and an implementation's websiteUrl is
// a link it shows. Only http and https may be opened: javascript: and
// vbscript: run script in the client's page, data: is a document the
// server wrote, and any other scheme starts a program of the host
// (ms-msdt:, vscode:, ssh:, smb:, a desktop app's own scheme). file:
// follows the path rules (a file inside the effective scope that is not
// secret may be shown).

// openableScheme reports whether a client may open a URL of scheme
// (http, https in any case).
func openableScheme(scheme string) bool {
	return strings.EqualFold(scheme, "https") || strings.EqualFold(scheme, "http")
}

// CheckOpenURL decides a URL a client is asked to open (see above). It
// returns nil for http and https; a file: URL is left to the path rules
// (nil here), and anything else — another scheme, or no scheme — is
// refused. s is read as a client's WHATWG URL parser reads it (urlClean).
func CheckOpenURL(s string) *Denial {
	s = urlClean(s)
	scheme, _, ok := urlScheme(s)
	switch {
	case ok && openableScheme(scheme), ok && strings.EqualFold(scheme, "file"):
		return nil
	case !ok:
		return deny(schema.ErrMalformedRequest, "a URL the client is asked to open has no scheme (only http and https may be opened)")
	}
	return deny(schema.ErrMalformedRequest, "a URL the client is asked to open uses the scheme %q (only http and https may be opened)", truncateScheme(scheme))
}

// objectKey names the value at ptr, one name per value: each token is
// written with its length first, so no member name (which may hold any
// character, NUL included) makes two pointers one key.
func objectKey(ptr []string) string {
	var b strings.Builder
	for _, tok := range ptr {
		b.WriteString(strconv.Itoa(len(tok)))
		b.WriteByte(':')
		b.WriteString(tok)
	}
	return b.String()
}

func truncateScheme(s string) string {
	if len(s) > 32 {
		return s[:32]
	}
	return strings.ToLower(s)
}

// mayHoldURLMode is a quick test that raw may hold a URL-mode
// elicitation: a member named "url", written as is or with a \u escape
// of one of its letters. (Inside a JSON string a quote is escaped, so
// `"url"` is a whole string or member name.)
func mayHoldURLMode(raw []byte) bool {
	return ContainsFold(raw, `"url"`) || HasEscapedASCII(raw, "urlURL")
}

// ContainsFold reports whether raw holds lit (ASCII) in any ASCII case,
// with no allocation: a search for each case of lit's last two bytes
// (bytes.Index), each hit compared whole.
func ContainsFold(raw []byte, lit string) bool {
	n := len(lit)
	if n < 2 {
		for i := range len(raw) - n + 1 {
			if asciiEqualFold(raw[i:i+n], lit) {
				return true
			}
		}
		return n == 0
	}
	xs, nx := foldCases(lit[n-2])
	ys, ny := foldCases(lit[n-1])
	for _, x := range xs[:nx] {
		for _, y := range ys[:ny] {
			anchor := [2]byte{x, y}
			for i := 0; ; {
				j := bytes.Index(raw[i:], anchor[:])
				if j < 0 {
					break
				}
				if start := i + j + 2 - n; start >= 0 && asciiEqualFold(raw[start:start+n], lit) {
					return true
				}
				i += j + 1
			}
		}
	}
	return false
}

// foldCases is c in each of its ASCII cases (n of them).
func foldCases(c byte) (cases [2]byte, n int) {
	switch {
	case c >= 'a' && c <= 'z':
		return [2]byte{c, c - 32}, 2
	case c >= 'A' && c <= 'Z':
		return [2]byte{c, c + 32}, 2
	}
	return [2]byte{c}, 1
}

func asciiEqualFold(b []byte, s string) bool {
	for i := range len(s) {
		x, y := b[i], s[i]
		if x == y {
			continue
		}
		if x|0x20 != y|0x20 || x|0x20 < 'a' || x|0x20 > 'z' {
			return false
		}
	}
	return true
}

// CheckOpenURLs refuses raw (a server's result, an error's data, a
// request's or a notification's params) when it holds, at any depth, an
// object with "mode": "url" (a URL-mode elicitation) whose string "url"
// a client must not open (CheckOpenURL). Other members named "url" (a
// tool's structured content) are the server's data and are not read.
func CheckOpenURLs(raw []byte) *Denial {
	if !mayHoldURLMode(raw) {
		return nil
	}
	// Objects are told apart by the pointer to them; mode and url may
	// come in either order.
	var urlMode map[string]bool
	var urls map[string]string
	d, err := walk(raw, func(ptr []string, kind byte, s string) *Denial {
		if kind != '"' || len(ptr) == 0 {
			return nil
		}
		// Member names in any case (round twelve): go-sdk reads a -32042's
		// elicitations and a round's inputRequests with encoding/json,
		// which folds case ("Mode", "URL").
		switch strings.ToLower(ptr[len(ptr)-1]) {
		case "mode":
			if strings.EqualFold(s, "url") {
				if urlMode == nil {
					urlMode = map[string]bool{}
				}
				urlMode[objectKey(ptr[:len(ptr)-1])] = true
			}
		case "url":
			if urls == nil {
				urls = map[string]string{}
			}
			urls[objectKey(ptr[:len(ptr)-1])] = s
		}
		return nil
	})
	if err != nil {
		return deny(schema.ErrMalformedRequest, "the server's answer is not valid JSON")
	}
	if d != nil {
		return d
	}
	for obj := range urlMode {
		u, ok := urls[obj]
		if !ok {
			continue // no url: nothing to open
		}
		if d := CheckOpenURL(u); d != nil {
			return d
		}
	}
	return nil
}

// URIs a server hands the client. A resource's uri (a resource_link in a
// tool's result or a prompt's messages, an embedded resource, an entry of
// resources/list, a template's uriTemplate, a notification's) is the
// server's name for it, and 2025-11-25 lets it use any scheme, custom
// ones included (test://, git://, postgres://): those pass. But a client
// may render such a URI as a link and open it, so the schemes that run
// code in the client's page are refused wherever one reaches the client:
// javascript: and vbscript:, and a data: URI whose document is not inert
// (text/html, image/svg+xml, XML, PDF, script, anything but plain text,
// JSON, CSV, raster images, audio, video, fonts and octet streams). file:
// follows the path rules (CheckResultURIs).

// inertDataTypes are the media types of a data: document a client shows
// without running anything in it (WHATWG's default, text/plain, when the
// type is empty).
var inertDataTypes = map[string]bool{
	"text/plain": true, "text/csv": true, "application/json": true,
	"application/octet-stream": true,
	"image/png":                true, "image/jpeg": true, "image/gif": true, "image/webp": true,
	"image/avif": true, "image/bmp": true,
}

// inertDataPrefixes are whole families that carry no script.
var inertDataPrefixes = []string{"audio/", "video/", "font/"}

// ActiveURI reports the scheme of s when a client that opened s would
// run code in its page: javascript:, vbscript:, or a data: URI whose
// media type is not inert (see inertDataTypes; a data: URI with no comma,
// which a browser refuses, is refused too). s is read as a WHATWG URL
// parser reads it (urlClean: leading and trailing C0 controls and spaces
// stripped, every tab and line break removed; the scheme in any case).
// "" means s may reach the client.
func ActiveURI(s string) string {
	scheme, rest, ok := urlScheme(urlClean(s))
	if !ok {
		return ""
	}
	switch {
	case strings.EqualFold(scheme, "javascript"), strings.EqualFold(scheme, "vbscript"):
		return strings.ToLower(scheme)
	case strings.EqualFold(scheme, "data"):
		if inertData(rest) {
			return ""
		}
		return "data"
	}
	return ""
}

// inertData: the media type of a data: URI's header (WHATWG's data: URL
// processor: what precedes the first comma, HTTP white space trimmed, its
// parameters after ';') is one a client shows without running it.
func inertData(rest string) bool {
	header, _, ok := strings.Cut(rest, ",")
	if !ok {
		return false
	}
	mt, _, _ := strings.Cut(header, ";")
	mt = asciiLower(strings.Trim(mt, " \t\n\r\f"))
	if mt == "" {
		return true // text/plain;charset=US-ASCII
	}
	if inertDataTypes[mt] {
		return true
	}
	for _, p := range inertDataPrefixes {
		if strings.HasPrefix(mt, p) && len(mt) > len(p) && !strings.ContainsAny(mt[len(p):], "/ \t") {
			return true
		}
	}
	return false
}

// mayHoldActiveURI is a quick test that raw may hold a member "uri" or
// "uriTemplate" (written as is or with a \u escape of one of its
// letters) whose value is an active URI: one ending "script:" or "data:"
// in any case, or any JSON escape (a \t, \n, \r a URL parser removes,
// or a \u escape of a letter, may split or spell the scheme).
func mayHoldActiveURI(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`"uri`)) && !HasEscapedASCII(raw, "uriTemplate") {
		return false
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		return true
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(raw[i:], ':')
		if j < 0 {
			return false
		}
		i += j
		if endsWithFold(raw[:i], "script") || endsWithFold(raw[:i], "data") {
			return true
		}
	}
}

// mayHoldRelativeURI is a quick test that raw may hold a member "uri"
// whose value is not an absolute URI: a "uri" member (or a \u escape of
// one of its letters, which may spell one) whose string value does not
// start with scheme characters and ':' — a value that starts with an
// escape or white space is walked (a URL parser strips them).
func mayHoldRelativeURI(raw []byte) bool {
	if HasEscapedASCII(raw, "uri") {
		return true
	}
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`"uri"`))
		if j < 0 {
			return false
		}
		i += j + len(`"uri"`)
		k := skipJSONSpace(raw, i)
		if k >= len(raw) || raw[k] != ':' {
			continue // "uri" as a value, not a member name
		}
		if k = skipJSONSpace(raw, k+1); k >= len(raw) || raw[k] != '"' {
			continue // not a string
		}
		n := k + 1
		for n < len(raw) && (isLetter(raw[n]) || n > k+1 && (raw[n] >= '0' && raw[n] <= '9' || raw[n] == '+' || raw[n] == '-' || raw[n] == '.')) {
			n++
		}
		if n == k+1 || n >= len(raw) || raw[n] != ':' {
			return true
		}
	}
}

func skipJSONSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// endsWithFold: b ends with word (lower-case ASCII) in any ASCII case.
func endsWithFold(b []byte, word string) bool {
	if len(b) < len(word) {
		return false
	}
	b = b[len(b)-len(word):]
	for i := range len(word) {
		if b[i]|0x20 != word[i] {
			return false
		}
	}
	return true
}

// CheckActiveURIs refuses raw (a server's result, an error's data, a
// request's or a notification's params) when a member named "uri" or
// "uriTemplate", at any depth, is a string ActiveURI refuses: a client
// that renders it as a link and opens it runs the server's code. Other
// members named "url" are the server's data (a scraper's list of a
// page's links holds javascript:void(0)), except a URL-mode
// elicitation's (CheckOpenURLs) and an implementation's websiteUrl
// (FilterIcons).
//
// A "uri" (not a uriTemplate) must moreover be an absolute URI — a
// scheme, then ':' — as the schema's "format": "uri" requires of a
// resource's, a link's and a resource contents' uri (round ten): a
// reference with no scheme ("/etc/passwd", "../../.ssh/id_rsa",
// "//host/share/x", "") is resolved by a client against its own page,
// which is a file: URL in a desktop client, so it names a file of the
// client's host the path rules never saw.
func CheckActiveURIs(raw []byte) *Denial {
	if !mayHoldActiveURI(raw) && !mayHoldRelativeURI(raw) {
		return nil
	}
	d, err := walk(raw, func(ptr []string, kind byte, s string) *Denial {
		if kind != '"' || len(ptr) == 0 {
			return nil
		}
		switch ptr[len(ptr)-1] {
		case "uri", "uriTemplate":
		default:
			return nil
		}
		if scheme := ActiveURI(s); scheme != "" {
			return deny(schema.ErrMalformedRequest, "the server's answer holds a %s: URI in %q, which runs code in a client that opens it", scheme, ptr[len(ptr)-1])
		}
		if ptr[len(ptr)-1] == "uri" && !slices.Contains(ptr, "structuredContent") {
			// (A tool's structuredContent is its own data, in the shape
			// of its outputSchema: a member named uri there is not a
			// resource's.)
			if _, _, ok := urlScheme(urlClean(s)); !ok {
				return deny(schema.ErrMalformedRequest, "the server's answer holds a \"uri\" with no scheme, which a client resolves against its own page (a file: page names a file of the client's host); a resource's uri must be an absolute URI")
			}
		}
		return nil
	})
	if err != nil {
		return deny(schema.ErrMalformedRequest, "the server's answer is not valid JSON")
	}
	return d
}
