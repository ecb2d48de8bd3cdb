package policy

import (
	"bytes"
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
	return bytes.Contains(raw, []byte(`"url"`)) || HasEscapedASCII(raw, "url")
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
		switch ptr[len(ptr)-1] {
		case "mode":
			if s == "url" {
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
