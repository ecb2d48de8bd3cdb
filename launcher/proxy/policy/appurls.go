package policy

import (
	"bytes"
	"net/url"
	"strings"
)

// Editors' and applications' own URLs that wrap a local file's path
// (round twelve). A client that opens or renders one reads the file: VS
// Code's renderer loads vscode-file://vscode-app/<path>, its URL handler
// opens vscode://file/<path>:<line> (and every fork's: cursor://file/,
// windsurf://file/, vscodium://file/ …), vscode-remote://<authority>/<path>
// is a file of the remote (which may be this host), JetBrains IDEs open
// idea://open?file=<path> and jetbrains://<ide>/navigate/reference?path=,
// Sublime Text, TextMate and MacVim open subl://open?url=file://<path>,
// GitHub Desktop opens x-github-client://openLocalRepo/<path>, Obsidian
// obsidian://open?path=<path>. Such a URL is read as the names it wraps,
// each checked as a path: in a request's arguments and other members (a
// server that opens it), and in a uri or url member of an answer, a server
// request or a notification (a client that opens it).

// netSchemes are the schemes whose URL names a resource of another host
// (or no file at all): never read as a wrapped path.
var netSchemes = map[string]bool{
	"http": true, "https": true, "ws": true, "wss": true, "ftp": true, "ftps": true, "sftp": true,
	"ssh": true, "git": true, "svn": true, "smb": true, "nfs": true, "s3": true, "gs": true,
	"mailto": true, "tel": true, "urn": true, "data": true, "file": true,
}

// wrappingSchemes: the scheme's URL is <scheme>://<any authority>/<path>.
var wrappingSchemes = map[string]bool{"vscode-file": true, "vscode-remote": true}

// pathQueryKeys are the query members an application reads a file's path
// (or a file: URL) from.
var pathQueryKeys = map[string]bool{
	"file": true, "path": true, "filename": true, "filepath": true, "folder": true,
	"dir": true, "directory": true, "workspace": true, "url": true, "uri": true,
}

// appFileRefs returns the names an application URL wraps (absolute or
// relative paths, or file: URLs), and whether s is one: a URL of a scheme
// that is not a network one whose authority is "file" or
// "openLocalRepo", of a wrapping scheme (vscode-file, vscode-remote), or
// with a query member naming a path. A wrapping scheme's URL that does
// not parse is one with no names (the caller refuses it: fail closed).
func appFileRefs(s string) (refs []string, ok bool) {
	scheme, rest, found := urlScheme(s)
	if !found {
		return nil, false
	}
	scheme = strings.ToLower(scheme)
	if netSchemes[scheme] || !strings.HasPrefix(rest, "//") {
		return nil, false
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, wrappingSchemes[scheme]
	}
	host := strings.ToLower(u.Host)
	if wrappingSchemes[scheme] || host == "file" || host == "openlocalrepo" {
		p := u.Path
		if u.Opaque != "" {
			p = u.Opaque
		}
		if host == "openlocalrepo" || host == "file" {
			p = "/" + strings.TrimLeft(p, "/") // vscode://file//etc/x, x-github-client://openLocalRepo/%2Fetc
		}
		refs = append(refs, p)
		if t := trimLineCol(p); t != p {
			refs = append(refs, t) // /etc/passwd:10:5
		}
	}
	for k, vs := range u.Query() {
		if !pathQueryKeys[strings.ToLower(k)] {
			continue
		}
		for _, v := range vs {
			if v == "" || hasURLScheme(v) && !hasFileScheme(v) {
				continue
			}
			refs = append(refs, v)
			if t := trimLineCol(v); t != v {
				refs = append(refs, t)
			}
		}
	}
	return refs, len(refs) > 0 || wrappingSchemes[scheme]
}

// trimLineCol drops a ":line" or ":line:col" suffix (an editor's position).
func trimLineCol(p string) string {
	for range 2 {
		i := strings.LastIndexByte(p, ':')
		if i <= 0 || i == len(p)-1 || strings.Trim(p[i+1:], "0123456789") != "" {
			break
		}
		p = p[:i]
	}
	return p
}

// mayHoldAppURL is the quick scan before a walk of an answer for
// application URLs: raw holds "://" after a scheme that is not a network
// one, its slashes written as they are or escaped ("cursor:\/\/file\/…":
// JSON's "\/" is "/", and some encoders write every slash so). (JSON
// escapes of ':' are caught by hasFileURI's scan.)
func mayHoldAppURL(raw []byte) bool {
	for _, sep := range appURLSeps {
		for i := 0; ; {
			j := bytes.Index(raw[i:], sep)
			if j < 0 {
				break
			}
			i += j
			k := i
			for k > 0 && schemeByte(raw[k-1]) {
				k--
			}
			if k < i && !netSchemes[string(raw[k:i])] && !netSchemes[strings.ToLower(string(raw[k:i]))] {
				return true
			}
			i += len(sep)
		}
	}
	return false
}

// appURLSeps are "://" with each slash plain or JSON-escaped.
var appURLSeps = [][]byte{[]byte("://"), []byte(`:\/\/`), []byte(`:/\/`), []byte(`:\//`)}

func schemeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// fillExpressions is tmpl with each RFC 6570 expression replaced by "x"
// (an expression that never ends is kept as it is).
func fillExpressions(tmpl string) string {
	var b strings.Builder
	for rest := tmpl; ; {
		i := strings.IndexByte(rest, '{')
		j := strings.IndexByte(rest[max(i, 0):], '}')
		if i < 0 || j < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i])
		b.WriteString("x")
		rest = rest[i+j+1:]
	}
}

// appFileTemplate turns a resource template of an application URL that
// wraps a file's path in its own path (vscode-file://vscode-app/{+p},
// vscode://file/{p}) into the file: template of that path; ok is false
// for any other (its path is in its query: the caller drops it).
func appFileTemplate(tmpl string) (string, bool) {
	scheme, rest, _ := urlScheme(tmpl)
	rest, ok := strings.CutPrefix(rest, "//")
	if !ok || strings.ContainsAny(rest, "?#") {
		return "", false
	}
	authority, path, _ := strings.Cut(rest, "/")
	host := strings.ToLower(fillExpressions(authority))
	if !wrappingSchemes[strings.ToLower(scheme)] && host != "file" && host != "openlocalrepo" {
		return "", false
	}
	return "file:///" + strings.TrimLeft(path, "/"), true
}
