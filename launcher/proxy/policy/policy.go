package policy

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Class is the action class of a tool, from mcpwarden's own table; the
// server's annotations are untrusted hints and are ignored.
type Class = schema.ActionClass

const (
	ClassNone        = schema.ActionNone
	ClassRead        = schema.ActionRead
	ClassWrite       = schema.ActionWrite
	ClassDestructive = schema.ActionDestructive // overwrite, move, edit, delete
)

// Config is what a Policy is built from.
type Config struct {
	Scope          *schema.CanonicalScope
	SecretPatterns []string // nil → schema.DefaultSecretPatterns
	Home           string   // expansion of '~'; empty refuses '~'
	// WorkDir is the server's working directory, where a server that is
	// not the filesystem server resolves a relative name; "" when it is
	// the base.
	WorkDir string
}

// Policy decides calls for one scope. It is immutable and safe for
// concurrent use.
type Policy struct {
	scope   *schema.CanonicalScope
	secrets *schema.Secrets
	home    string
	// baseRel resolves a relative name against the base; workRel against
	// the server's working directory when that is not the base (nil
	// otherwise). Both are made once: every check uses them.
	baseRel, workRel func(string) string
	allowed          map[string]bool
	prompts          map[string]bool
	pathArgs         map[string][]pointer // tool_path_args, parsed
	globs            *globIndex           // the scope's secrets, kept for globs (globindex.go)
}

// New builds a Policy.
func New(c Config) (*Policy, error) {
	if c.Scope == nil {
		return nil, fmt.Errorf("policy needs a canonical scope")
	}
	sec := schema.DefaultSecrets // compiled once, read-only
	if c.SecretPatterns != nil {
		var err error
		if sec, err = schema.NewSecrets(c.SecretPatterns); err != nil {
			return nil, err
		}
	}
	workDir := c.WorkDir
	if workDir != "" {
		if real, err := filepath.EvalSymlinks(workDir); err == nil {
			workDir = real
		}
		workDir = filepath.Clean(workDir)
	}
	p := &Policy{scope: c.Scope, secrets: sec, home: c.Home, baseRel: BaseRelative(c.Scope.Base), allowed: map[string]bool{}, prompts: map[string]bool{}, pathArgs: map[string][]pointer{}, globs: &globIndex{}}
	if workDir != "" && workDir != c.Scope.Base {
		p.workRel = BaseRelative(workDir)
	}
	for _, t := range c.Scope.ToolAllowlist {
		p.allowed[t] = true
	}
	for _, t := range c.Scope.PromptAllowlist {
		p.prompts[t] = true
	}
	for tool, args := range c.Scope.ToolPathArgs {
		for _, a := range args {
			ptr, err := parsePointer(a)
			if err != nil {
				return nil, fmt.Errorf("tool_path_args.%s: %w", tool, err)
			}
			p.pathArgs[tool] = append(p.pathArgs[tool], ptr)
		}
	}
	return p, nil
}

// PromptAllowed reports whether the scope's prompt_allowlist names the
// prompt, byte for byte.
func (p *Policy) PromptAllowed(name string) bool { return p.prompts[name] }

// Allowed reports whether the scope allows the tool. Names compare byte for
// byte: no case folding, no normalisation, exactly as the server looks them up.
func (p *Policy) Allowed(name string) bool { return p.allowed[name] }

// ClassOf returns the tool's action class: the scope's override, else the
// built-in table, else destructive.
func (p *Policy) ClassOf(name string) Class {
	if c, ok := p.scope.ToolClasses[name]; ok {
		return Class(c)
	}
	if t, ok := fsTools[name]; ok {
		return t.Class
	}
	return ClassDestructive
}

// NeedsApproval applies the scope's approval rule to a class.
func (p *Policy) NeedsApproval(c Class) bool {
	switch p.scope.Approval {
	case schema.ApprovalRequiredForAll:
		return true
	case schema.ApprovalRequiredForWrite:
		return c == ClassWrite || c == ClassDestructive
	}
	return false
}

// WriteForbidden reports whether the class writes and the scope is read-only.
func (p *Policy) WriteForbidden(c Class) bool {
	return p.scope.AccessMode != schema.AccessWrite && (c == ClassWrite || c == ClassDestructive)
}

// Denial is a refusal with a stable code and a short reason the model may see.
type Denial struct {
	Code   schema.ErrorCode
	Reason string
}

func (d *Denial) Error() string { return string(d.Code) + ": " + d.Reason }

func deny(code schema.ErrorCode, format string, args ...any) *Denial {
	return &Denial{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// CheckPath canonicalises one path and checks it is inside effective, both
// as written and after symlinks, and not secret. On a denial the real path
// is still returned when it could be resolved (for the record's hash only).
func (p *Policy) CheckPath(raw string, relTo func(string) string, effective []string) (string, *Denial) {
	r, err := Resolve(raw, p.home, relTo)
	if err != nil {
		return "", deny(schema.ErrPathOutsideScope, "%v", err)
	}
	if !Within(effective, r.Lexical) || !Within(effective, r.Real) {
		return r.Real, deny(schema.ErrPathOutsideScope, "path is outside the run's scope")
	}
	if p.secrets.Match(r.Real) || (r.Lexical != r.Real && p.secrets.Match(r.Lexical)) || p.secretTrimmed(r.Lexical) || p.secretTrimmed(r.Real) {
		return r.Real, deny(schema.ErrSecretPath, "path is a secret (credentials, keys, .env, .git, .ssh) and is never served")
	}
	if r.Physical != "" && r.Physical != r.Real {
		// ".." after a symlink: where the kernel lands for the name as
		// written must pass too (a server need not clean it first).
		if !Within(effective, r.Physical) {
			return r.Physical, deny(schema.ErrPathOutsideScope, "path is outside the run's scope once '..' is resolved after a symlink")
		}
		if p.secrets.Match(r.Physical) || p.secretTrimmed(r.Physical) {
			return r.Physical, deny(schema.ErrSecretPath, "path is a secret once '..' is resolved after a symlink (credentials, keys, .env, .git, .ssh) and is never served")
		}
	}
	return r.Real, nil
}

// secretTrimmed reports whether path matches a secret pattern once the
// trailing dots and spaces of its components are dropped, as Windows and
// some servers drop them (".git." and ".ssh " are ".git" and ".ssh"
// there): such a name is refused like the secret it spells.
func (p *Policy) secretTrimmed(path string) bool {
	if !strings.Contains(path, "./") && !strings.Contains(path, " /") && !strings.HasSuffix(path, ".") && !strings.HasSuffix(path, " ") {
		return false
	}
	parts := strings.Split(path, "/")
	changed := false
	for i, c := range parts {
		if t := strings.TrimRight(c, ". "); t != c && t != "" {
			parts[i], changed = t, true
		}
	}
	return changed && p.secrets.Match(strings.Join(parts, "/"))
}

// IsSecret reports whether an absolute canonical path matches a secret pattern.
func (p *Policy) IsSecret(path string) bool { return p.secrets.Match(path) }

// FilePath turns a file:// URI into an absolute path. Percent-escapes are
// decoded once; an escaped '/', NUL or backslash, a host other than
// localhost, a query or a fragment are refused.
func FilePath(uri string) (string, error) {
	if len(uri) > MaxPathLen+16 {
		return "", badPath("URI too long")
	}
	u, err := url.Parse(uri)
	if err != nil {
		return "", badPath("not a URI")
	}
	if u.Scheme != "file" {
		return "", badPath("not a file:// URI")
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", badPath("file:// URI names a remote host")
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return "", badPath("file:// URI has parts other than a path")
	}
	lower := strings.ToLower(u.EscapedPath())
	for _, bad := range []string{"%2f", "%00", "%5c"} {
		if strings.Contains(lower, bad) {
			return "", badPath("file:// URI escapes a separator or NUL")
		}
	}
	if !filepath.IsAbs(u.Path) {
		return "", badPath("file:// URI path is not absolute")
	}
	return u.Path, nil
}

// CheckURI decides a resource URI: exact matches of the scope's
// resource_refs of other schemes pass; file:// URIs — listed or not — pass
// only when their path is inside effective and not secret (a listed file
// is still narrowed and revoked with the client's roots). It returns the
// real path for file:// URIs.
func (p *Policy) CheckURI(uri string, effective []string) (string, *Denial) {
	if !hasFileScheme(uri) && slices.Contains(p.scope.ResourceRefs, uri) {
		return "", nil
	}
	if !strings.HasPrefix(strings.ToLower(uri), "file:") {
		return "", deny(schema.ErrPathOutsideScope, "resource is not in the scope's resource_refs")
	}
	path, err := FilePath(uri)
	if err != nil {
		return "", deny(schema.ErrPathOutsideScope, "%v", err)
	}
	return p.CheckPath(path, p.baseRel, effective)
}

// TemplateAllowed decides whether a resource template (RFC 6570, as
// resources/templates/list lists them) may be shown to the client. A
// file: template is kept only when the directory its literal prefix names
// is inside effective or above some of it (its expansions can reach the
// scope), that directory is not secret, and the template with each
// expression filled in does not name a secret (file:///{dir}/.env,
// file:///home/u/.ssh/{key}); a template of any other scheme is kept (a
// read of one still needs its exact URI in resource_refs). Reads are
// decided on their own whatever a template said.
//
// The template is read as a client's URL parser (WHATWG) reads what it
// expands to: leading and trailing spaces and C0 controls stripped, tabs
// and line breaks removed (" file:///etc/{x}" is a file: template). Its
// scheme must be written out, as the schema's resource uri is absolute
// (round eleven): a template with no scheme ("/etc/{name}",
// "../{+path}", "//host/{x}"), or whose scheme is an expression or holds
// one ("{+uri}", "{s}:///etc/passwd", "fi{x}le:"), is dropped — its
// expansions are references a client resolves against its own page (a
// file: URL in a desktop client), or URIs of any scheme, file: included,
// that no rule here can judge before they exist.
func (p *Policy) TemplateAllowed(tmpl string, effective []string) bool {
	tmpl = urlClean(tmpl)
	if _, _, ok := urlScheme(tmpl); !ok {
		return false
	}
	if !hasFileScheme(tmpl) {
		// An editor's or application's URL wrapping a file's path
		// (vscode-file://vscode-app/etc/{name}: appurls.go, round
		// twelve) is judged as the file: template of that path; one
		// whose path is in its query (idea://open?file={f}) is dropped.
		if _, ok := appFileRefs(fillExpressions(tmpl)); ok {
			ft, ok := appFileTemplate(tmpl)
			return ok && p.TemplateAllowed(ft, effective)
		}
		return true
	}
	open := strings.IndexByte(tmpl, '{')
	if open < 0 {
		_, d := p.CheckURI(tmpl, effective)
		return d == nil
	}
	var probe strings.Builder
	for rest := tmpl; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			probe.WriteString(rest)
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return false // an expression that never ends
		}
		probe.WriteString(rest[:i])
		probe.WriteString("x")
		rest = rest[i+j+1:]
	}
	filled, err := FilePath(probe.String())
	if err != nil {
		return false
	}
	filled = filepath.Clean(filled)
	if p.secrets.Match(filled) || p.secretTrimmed(filled) {
		return false
	}
	dir := "/"
	if prefix, err := FilePath(tmpl[:open]); err == nil {
		if strings.HasSuffix(prefix, "/") {
			dir = filepath.Clean(prefix)
		} else {
			dir = filepath.Dir(prefix)
		}
	}
	r, err := Resolve(dir, p.home, p.baseRel)
	if err != nil {
		return false
	}
	reaches := func(d string) bool {
		if Within(effective, d) {
			return true
		}
		return slices.ContainsFunc(effective, func(e string) bool { return Within([]string{d}, e) })
	}
	if !reaches(r.Lexical) || !reaches(r.Real) {
		return false
	}
	return !p.secrets.Match(r.Real) && !p.secrets.Match(r.Lexical) && !p.secretTrimmed(r.Lexical)
}
