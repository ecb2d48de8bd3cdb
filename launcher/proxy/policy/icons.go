package policy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/url"
	"strings"

	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Icons (2025-11-25: tools, prompts, resources, resource templates,
// resource links, serverInfo/implementation) carry a src a client's
// interface loads. A src that names a file — a file: URI, a reference
// with no scheme (resolved against the page of a desktop client, which is
// a file), or a data: URI whose document (an SVG) refers to one — is held
// to the path rules: the file must be inside the effective scope and not
// secret, or the icon is dropped. Icons of http and https, and data
// images, pass; any other scheme (javascript:, ftp:, ws:, an app's own)
// is dropped, as 2025-11-25 has consumers reject it.

// CheckIconSrc decides an icon's src. It returns the real paths it
// checked (for the record's hashes).
func (p *Policy) CheckIconSrc(src string, effective []string) ([]string, *Denial) {
	s := urlClean(src)
	scheme, rest, hasScheme := urlScheme(s)
	c := p.newChecker(p.baseRel, effective, false)
	switch {
	case hasScheme && strings.EqualFold(scheme, "file"):
		return c.checked, c.iconFile(s)
	case hasScheme && strings.EqualFold(scheme, "data"):
		return c.checked, c.iconData(rest)
	case hasScheme && openableScheme(scheme):
		return nil, nil // https, http: not a file of this host
	case hasScheme:
		// javascript:, vbscript:, ftp:, ws:, a desktop app's own scheme:
		// 2025-11-25 has consumers reject them (an icon is https or data).
		return nil, CheckOpenURL(s)
	case strings.HasPrefix(s, "//") || strings.HasPrefix(s, `\\`) || strings.HasPrefix(s, `/\`) || strings.HasPrefix(s, `\/`):
		// A network-path reference: file://host/… from a desktop
		// client's page (a share, Windows' UNC).
		return nil, deny(schema.ErrPathOutsideScope, "an icon's src names another host's file")
	}
	// A reference with no scheme: a file relative to the client's page.
	// Read as a browser reads it ('\' is '/', no query or fragment,
	// percent-escapes decoded) and checked as a path under the base.
	ref := strings.ReplaceAll(s, `\`, "/")
	if i := strings.IndexAny(ref, "?#"); i >= 0 {
		ref = ref[:i]
	}
	if ref == "" {
		return nil, nil // the page itself
	}
	if d := c.path([]string{"src"}, ref); d != nil {
		return c.checked, d
	}
	if dec, err := url.PathUnescape(ref); err != nil {
		return c.checked, deny(schema.ErrPathOutsideScope, "an icon's src is not a valid reference")
	} else if dec != ref {
		if d := c.path([]string{"src"}, dec); d != nil {
			return c.checked, d
		}
	}
	return c.checked, nil
}

// iconFile checks a file: URI as a browser reads it ('\' is '/').
func (c *argChecker) iconFile(s string) *Denial {
	u := strings.ReplaceAll(s, `\`, "/")
	if _, err := FilePath(u); err != nil {
		return deny(schema.ErrPathOutsideScope, "an icon's src: %v", err)
	}
	return c.path([]string{"src"}, u)
}

// iconData checks a data: URI's document for file references: an SVG
// (or any text) may load one ("<image href='file:///…'>"): documentFiles.
func (c *argChecker) iconData(rest string) *Denial {
	comma := strings.IndexByte(rest, ',')
	if comma < 0 {
		return nil // not a data: URI a client can load
	}
	header, payload := rest[:comma], rest[comma+1:]
	var doc []byte
	if strings.HasSuffix(strings.ToLower(strings.TrimSpace(header)), ";base64") {
		raw, err := decodeBase64Loose(payload)
		if err != nil {
			return nil // nothing a client can decode: no document
		}
		doc = raw
	} else {
		dec, err := url.PathUnescape(payload)
		if err != nil {
			dec = payload
		}
		doc = []byte(dec)
	}
	if len(doc) > MaxIconDocument {
		return deny(schema.ErrPathOutsideScope, "an icon's data: document is too large to check for file references")
	}
	return c.documentFiles(doc, "an icon's data: document")
}

// documentFiles checks a document a client renders (an SVG, an MCP App's
// HTML) for file references: each "file:" URL in it, character
// references decoded first (&#102;ile: is file:), tabs and line breaks
// removed (a URL parser removes them), is held to the path rules. A CSS
// escape (\66 ile:) cannot be told from text and is refused in a
// document that also says "ile:".
func (c *argChecker) documentFiles(doc []byte, what string) *Denial {
	text := strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(html.UnescapeString(string(doc)))
	// ASCII case only, byte for byte: the indexes found in lower are used
	// in text (strings.ToLower changes lengths: "Ⱥ" is 2 bytes, "ⱥ" 3,
	// so a document of them before "file:" made the slice below panic).
	lower := asciiLower(text)
	if strings.Contains(lower, "ile:") && strings.ContainsRune(lower, '\\') {
		return deny(schema.ErrPathOutsideScope, "%s holds escapes that may spell a file reference", what)
	}
	for i := 0; ; {
		j := strings.Index(lower[i:], "file:")
		if j < 0 {
			return nil
		}
		start := i + j
		end := start
		for end < len(text) && !strings.ContainsRune("\"' <>)`", rune(text[end])) {
			end++
		}
		if d := c.iconFile(text[start:end]); d != nil {
			return d
		}
		i = end
		if i >= len(text) {
			return nil
		}
	}
}

// asciiLower lowers the ASCII letters of s and nothing else (the same
// length, byte for byte).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// MaxIconDocument bounds the data: document of one icon that is checked
// for file references (a larger one is dropped).
const MaxIconDocument = 1 << 20

func decodeBase64Loose(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, s)
	if u, err := url.PathUnescape(s); err == nil {
		s = u
	}
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawURLEncoding.DecodeString(s)
}

// urlClean is src as a WHATWG URL parser reads it: leading and trailing
// C0 controls and spaces stripped, tabs and line breaks removed anywhere.
func urlClean(s string) string {
	s = strings.TrimFunc(s, func(r rune) bool { return r <= 0x20 })
	if strings.ContainsAny(s, "\t\n\r") {
		s = strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(s)
	}
	return s
}

// urlScheme splits "scheme:rest" (RFC 3986 scheme characters).
func urlScheme(s string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 {
		return "", "", false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", false
		}
	}
	return s[:i], s[i+1:], true
}

// IconDrop is what FilterIcons dropped: how many icons, the real paths
// checked (for hashes) and the first denial.
type IconDrop struct {
	Dropped int
	Paths   []string
	Denial  *Denial
}

// FilterIcons drops, wherever raw (a result, a request's or a
// notification's params) has a member named "icons" holding an array, the
// icons whose src CheckIconSrc refuses, and a member "websiteUrl" (an
// implementation's link a client's interface shows, 2025-11-25) that
// CheckIconSrc refuses. raw is returned unchanged (the same bytes) when
// nothing was dropped.
func (p *Policy) FilterIcons(raw json.RawMessage, effective []string) (json.RawMessage, IconDrop) {
	var drop IconDrop
	if !bytes.Contains(raw, []byte("icons")) && !bytes.Contains(raw, []byte("websiteUrl")) && !HasEscapedASCII(raw, "iconswebsiteUrl") {
		return raw, drop
	}
	out, changed := p.filterIcons(raw, effective, &drop, 0)
	if !changed {
		return raw, drop
	}
	return out, drop
}

func (p *Policy) filterIcons(raw json.RawMessage, effective []string, drop *IconDrop, depth int) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || depth > 64 {
		return raw, false
	}
	switch raw[0] {
	case '{':
		var m map[string]json.RawMessage
		if strictjson.Unmarshal(raw, &m) != nil {
			return raw, false
		}
		changed := false
		for k, v := range m {
			if k == "websiteUrl" {
				var link string
				if strictjson.Unmarshal(v, &link) == nil {
					paths, d := p.CheckIconSrc(link, effective)
					if d == nil {
						// A link is opened, not loaded as an image: a
						// data: document is no website either.
						d = CheckOpenURL(link)
					}
					if d != nil {
						drop.Dropped++
						drop.Paths = append(drop.Paths, paths...)
						if drop.Denial == nil {
							drop.Denial = d
						}
						delete(m, k)
						changed = true
					}
				}
				continue
			}
			if k == "icons" {
				if nv, ok := p.filterIconList(v, effective, drop); ok {
					m[k], changed = nv, true
					continue
				}
			}
			if nv, ok := p.filterIcons(v, effective, drop, depth+1); ok {
				m[k], changed = nv, true
			}
		}
		if !changed {
			return raw, false
		}
		b, _ := json.Marshal(m)
		return b, true
	case '[':
		var l []json.RawMessage
		if strictjson.Unmarshal(raw, &l) != nil {
			return raw, false
		}
		changed := false
		for i, v := range l {
			if nv, ok := p.filterIcons(v, effective, drop, depth+1); ok {
				l[i], changed = nv, true
			}
		}
		if !changed {
			return raw, false
		}
		b, _ := json.Marshal(l)
		return b, true
	}
	return raw, false
}

// filterIconList filters one icons array; false when nothing was dropped
// (or it is not an array).
func (p *Policy) filterIconList(raw json.RawMessage, effective []string, drop *IconDrop) (json.RawMessage, bool) {
	var list []json.RawMessage
	if strictjson.Unmarshal(raw, &list) != nil || list == nil {
		return raw, false
	}
	kept := make([]json.RawMessage, 0, len(list))
	for _, icon := range list {
		var ic map[string]json.RawMessage
		var src string
		if strictjson.Unmarshal(icon, &ic) == nil && ic != nil && strictjson.Unmarshal(ic["src"], &src) == nil {
			paths, d := p.CheckIconSrc(src, effective)
			if d != nil {
				drop.Dropped++
				drop.Paths = append(drop.Paths, paths...)
				if drop.Denial == nil {
					drop.Denial = d
				}
				continue
			}
		}
		kept = append(kept, icon)
	}
	if len(kept) == len(list) {
		return raw, false
	}
	b, _ := json.Marshal(kept)
	return b, true
}

// FilterCompletionValues keeps the completion suggestions a server
// volunteers (completion/complete's values) that pass the path rule of
// arguments: a value that looks like a path, names a secret or names an
// entry under the base is checked as one, and dropped when it is outside
// effective or secret (a server's suggestions for "/etc/pa" or ".e" would
// show the client names the scope does not give it). It returns the kept
// values, the real paths of the dropped ones (for hashes) and the first
// denial.
func (p *Policy) FilterCompletionValues(values []string, effective []string) (kept, paths []string, first *Denial) {
	c := p.newChecker(p.baseRel, effective, false)
	kept = make([]string, 0, len(values))
	for _, v := range values {
		n := len(c.checked)
		if d := c.loose([]string{"values"}, v, true); d != nil {
			paths = append(paths, c.checked[n:]...)
			if first == nil {
				first = d
			}
			continue
		}
		kept = append(kept, v)
	}
	return kept, paths, first
}

// CheckAppResource checks the answer to a resources/read of an MCP App's
// ui:// resource: HTML a host renders in an iframe, where a reference to
// a file (<img src="file:///…/.env">, in any spelling documentFiles
// reads) would have the host load it. Each content's text, its blob
// (base64) and its _meta (the app's CSP domains) are checked; the first
// reference the scope does not allow refuses the whole answer (an app
// cannot be rendered in part). It returns the real paths it checked.
func (p *Policy) CheckAppResource(result json.RawMessage, effective []string) ([]string, *Denial) {
	var res struct {
		Contents []struct {
			Text *string        `json:"text"`
			Blob *string        `json:"blob"`
			Meta map[string]any `json:"_meta"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(result, &res); err != nil {
		return nil, nil // not the spec's shape: a host renders nothing from it
	}
	c := p.newChecker(p.baseRel, effective, false)
	for _, ct := range res.Contents {
		if ct.Text != nil {
			if d := c.documentFiles([]byte(*ct.Text), "an MCP App's document"); d != nil {
				return c.checked, d
			}
		}
		if ct.Blob != nil {
			doc, err := decodeBase64Loose(*ct.Blob)
			if err == nil {
				if d := c.documentFiles(doc, "an MCP App's document"); d != nil {
					return c.checked, d
				}
			}
		}
		if ct.Meta != nil {
			meta, _ := json.Marshal(ct.Meta)
			if d := c.documentFiles(meta, "an MCP App's _meta"); d != nil {
				return c.checked, d
			}
		}
	}
	return c.checked, nil
}

// IsAppURI reports whether uri names an MCP App's resource (ui://), as a
// host's URL parser reads it.
func IsAppURI(uri string) bool {
	scheme, _, ok := urlScheme(urlClean(uri))
	return ok && strings.EqualFold(scheme, "ui")
}

// MayHoldAppURI is a quick test before CheckEmbeddedApps: raw (JSON) may
// hold a "ui:" URI (any case, or \u-escaped).
func MayHoldAppURI(raw []byte) bool {
	for i := 1; i < len(raw); i++ {
		if raw[i] == ':' && endsWithWord(raw[:i], "iu") {
			return true
		}
	}
	return HasEscapedASCII(raw, "uiUI:\t\n\r")
}

// endsWithWord: b ends with the letters of backwards (reversed), in any
// case, tabs and line breaks (escaped: a URL parser removes them) between
// them skipped.
func endsWithWord(b []byte, backwards string) bool {
	k, n := 0, len(b)
	for k < len(backwards) && n > 0 {
		if n >= 2 && b[n-2] == '\\' && (b[n-1] == 't' || b[n-1] == 'n' || b[n-1] == 'r') {
			n -= 2
			continue
		}
		if b[n-1]|0x20 != backwards[k] {
			return false
		}
		n--
		k++
	}
	return k == len(backwards)
}

// CheckEmbeddedApps checks every embedded resource of an answer (a tool's
// result, a prompt's messages, a task's result) whose uri is an MCP App's
// (ui://: MCP-UI hosts render such a resource in a tool result) as
// CheckAppResource checks a read: its text, blob and _meta must refer to
// no file the scope does not allow.
func (p *Policy) CheckEmbeddedApps(raw json.RawMessage, effective []string) ([]string, *Denial) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil, nil
	}
	c := p.newChecker(p.baseRel, effective, false)
	var visit func(v any) *Denial
	visit = func(v any) *Denial {
		switch x := v.(type) {
		case map[string]any:
			if uri, ok := x["uri"].(string); ok && IsAppURI(uri) {
				if t, ok := x["text"].(string); ok {
					if d := c.documentFiles([]byte(t), "an MCP App's document"); d != nil {
						return d
					}
				}
				if b, ok := x["blob"].(string); ok {
					if doc, err := decodeBase64Loose(b); err == nil {
						if d := c.documentFiles(doc, "an MCP App's document"); d != nil {
							return d
						}
					}
				}
				if m, ok := x["_meta"]; ok {
					meta, _ := json.Marshal(m)
					if d := c.documentFiles(meta, "an MCP App's _meta"); d != nil {
						return d
					}
				}
			}
			for _, e := range x {
				if d := visit(e); d != nil {
					return d
				}
			}
		case []any:
			for _, e := range x {
				if d := visit(e); d != nil {
					return d
				}
			}
		}
		return nil
	}
	return c.checked, visit(v)
}
