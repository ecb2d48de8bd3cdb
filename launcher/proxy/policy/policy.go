package policy

import (
	"bytes"
	"encoding/json"
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

// ArgKind says how an argument holds paths.
type ArgKind int

const (
	ArgPath     ArgKind = iota + 1 // a string path
	ArgPathList                    // an array of string paths
	ArgGlob                        // a glob evaluated under the call's path
	ArgGlobList                    // an array of such globs
	ArgAny                         // a path or an array of paths (declared or guessed)
)

// ArgSpec names one path-bearing argument.
type ArgSpec struct {
	Name string
	Kind ArgKind
}

// tool is one row of the built-in table.
type tool struct {
	class Class
	args  []ArgSpec
}

// fsTools is the official filesystem server's tool set
// (@modelcontextprotocol/server-filesystem 2026.8.31).
var fsTools = map[string]tool{
	"read_text_file":            {ClassRead, []ArgSpec{{"path", ArgPath}}},
	"read_file":                 {ClassRead, []ArgSpec{{"path", ArgPath}}},
	"read_media_file":           {ClassRead, []ArgSpec{{"path", ArgPath}}},
	"read_multiple_files":       {ClassRead, []ArgSpec{{"paths", ArgPathList}}},
	"list_directory":            {ClassRead, []ArgSpec{{"path", ArgPath}}},
	"list_directory_with_sizes": {ClassRead, []ArgSpec{{"path", ArgPath}}},
	"directory_tree":            {ClassRead, []ArgSpec{{"path", ArgPath}, {"excludePatterns", ArgGlobList}}},
	"search_files":              {ClassRead, []ArgSpec{{"path", ArgPath}, {"pattern", ArgGlob}, {"excludePatterns", ArgGlobList}}},
	"get_file_info":             {ClassRead, []ArgSpec{{"path", ArgPath}}},
	"list_allowed_directories":  {ClassRead, nil},
	"create_directory":          {ClassWrite, []ArgSpec{{"path", ArgPath}}},
	"write_file":                {ClassDestructive, []ArgSpec{{"path", ArgPath}}}, // overwrites
	"edit_file":                 {ClassDestructive, []ArgSpec{{"path", ArgPath}}},
	"move_file":                 {ClassDestructive, []ArgSpec{{"source", ArgPath}, {"destination", ArgPath}}},
}

// pathLikeKeys are argument names that are treated as paths for tools the
// table does not know and the scope does not declare: defence in depth
// behind the fence.
var pathLikeKeys = map[string]bool{
	"path": true, "paths": true, "file": true, "files": true, "filename": true, "filepath": true,
	"file_path": true, "filepaths": true, "dir": true, "dirs": true, "directory": true, "folder": true,
	"source": true, "destination": true, "src": true, "dst": true, "dest": true, "target": true,
	"root": true, "cwd": true, "workdir": true,
}

// Config is what a Policy is built from.
type Config struct {
	Scope          *schema.CanonicalScope
	SecretPatterns []string // nil → schema.DefaultSecretPatterns
	Home           string   // expansion of '~'; empty refuses '~'
}

// Policy decides calls for one scope. It is immutable and safe for
// concurrent use.
type Policy struct {
	scope   *schema.CanonicalScope
	secrets *schema.Secrets
	home    string
	allowed map[string]bool
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
	p := &Policy{scope: c.Scope, secrets: sec, home: c.Home, allowed: map[string]bool{}}
	for _, t := range c.Scope.ToolAllowlist {
		p.allowed[t] = true
	}
	return p, nil
}

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
		return t.class
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

// argSpecs returns the path arguments of a call: the built-in table's, the
// scope's declared ones, and, for tools neither knows, every argument whose
// name looks like a path.
func (p *Policy) argSpecs(name string, args map[string]json.RawMessage) (specs []ArgSpec, builtin bool) {
	if t, ok := fsTools[name]; ok {
		specs = append(specs, t.args...)
		builtin = true
	}
	declared := p.scope.ToolPathArgs[name]
	for _, a := range declared {
		if !slices.ContainsFunc(specs, func(s ArgSpec) bool { return s.Name == a }) {
			specs = append(specs, ArgSpec{a, ArgAny})
		}
	}
	if !builtin {
		keys := make([]string, 0, len(args))
		for k := range args {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if pathLikeKeys[strings.ToLower(k)] && !slices.ContainsFunc(specs, func(s ArgSpec) bool { return s.Name == k }) {
				specs = append(specs, ArgSpec{k, ArgAny})
			}
		}
	}
	return specs, builtin
}

// CheckArguments canonicalises every path-bearing argument of a call to tool
// name and checks it against effective (the canonical directories and files
// the call may touch, in the order the server was given them). It returns
// the real paths checked (on a denial, up to and including the refused one
// when it could be resolved), for hashing into the decision record.
func (p *Policy) CheckArguments(name string, rawArgs json.RawMessage, effective []string) ([]string, *Denial) {
	args := map[string]json.RawMessage{}
	if len(rawArgs) > 0 && string(bytes.TrimSpace(rawArgs)) != "null" {
		if err := json.Unmarshal(rawArgs, &args); err != nil {
			return nil, deny(schema.ErrMalformedRequest, "arguments must be an object")
		}
	}
	specs, builtin := p.argSpecs(name, args)
	relTo := BaseRelative(p.scope.Base)
	if builtin {
		relTo = FSRelative(effective)
	}
	var checked []string
	for _, s := range specs {
		raw, ok := args[s.Name]
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		switch s.Kind {
		case ArgGlob, ArgGlobList:
			globs, err := stringOrList(raw, s.Kind == ArgGlobList)
			if err != nil {
				return nil, deny(schema.ErrMalformedRequest, "argument %q: %v", s.Name, err)
			}
			for _, g := range globs {
				if err := CheckGlob(g); err != nil {
					return nil, deny(schema.ErrPathOutsideScope, "argument %q: %v", s.Name, err)
				}
			}
			continue
		}
		paths, err := stringOrList(raw, s.Kind != ArgPath)
		if err != nil {
			return nil, deny(schema.ErrMalformedRequest, "argument %q: %v", s.Name, err)
		}
		if s.Kind == ArgPathList && len(paths) == 0 {
			continue
		}
		for _, raw := range paths {
			real, d := p.CheckPath(raw, relTo, effective)
			if real != "" {
				checked = append(checked, real)
			}
			if d != nil {
				d.Reason = fmt.Sprintf("argument %q: %s", s.Name, d.Reason)
				return checked, d
			}
		}
	}
	return checked, nil
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
	if p.secrets.Match(r.Real) || (r.Lexical != r.Real && p.secrets.Match(r.Lexical)) {
		return r.Real, deny(schema.ErrSecretPath, "path is a secret (credentials, keys, .env, .git, .ssh) and is never served")
	}
	return r.Real, nil
}

// IsSecret reports whether an absolute canonical path matches a secret pattern.
func (p *Policy) IsSecret(path string) bool { return p.secrets.Match(path) }

// stringOrList decodes a string, or with list an array of strings (a single
// string is accepted for ArgAny too).
func stringOrList(raw json.RawMessage, list bool) ([]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, nil
	}
	if !list {
		return nil, fmt.Errorf("must be a string")
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, fmt.Errorf("must be a string or an array of strings")
	}
	return ss, nil
}

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
// resource_refs pass; file:// URIs pass when their path is inside effective
// and not secret. It returns the real path for file:// URIs.
func (p *Policy) CheckURI(uri string, effective []string) (string, *Denial) {
	if slices.Contains(p.scope.ResourceRefs, uri) {
		return "", nil
	}
	if !strings.HasPrefix(strings.ToLower(uri), "file:") {
		return "", deny(schema.ErrPathOutsideScope, "resource is not in the scope's resource_refs")
	}
	path, err := FilePath(uri)
	if err != nil {
		return "", deny(schema.ErrPathOutsideScope, "%v", err)
	}
	return p.CheckPath(path, BaseRelative(p.scope.Base), effective)
}
