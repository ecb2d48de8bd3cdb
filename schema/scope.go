package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// MaxScopeFileSize bounds a scope file; a real scope is a few hundred bytes.
const MaxScopeFileSize = 64 << 10

// Limits on list sizes and string lengths, so a hostile scope cannot make the
// launcher build a giant ruleset or allocate without bound.
const (
	maxListLen     = 256
	maxStringLen   = 4096
	maxScopeIDLen  = 128
	maxExpiryMins  = 7 * 24 * 60
	maxClockSkew   = time.Minute
	maxNetworkPort = 65535
)

// AccessMode is what the server may do inside the allowed paths.
type AccessMode string

const (
	AccessRead  AccessMode = "read"
	AccessWrite AccessMode = "write"
)

// ApprovalRule says which calls wait for an out-of-band approval.
type ApprovalRule string

const (
	ApprovalNone             ApprovalRule = "none"
	ApprovalRequiredForWrite ApprovalRule = "required_for_write"
	ApprovalRequiredForAll   ApprovalRule = "required_for_all"
)

// NetworkGrant lists the TCP ports a server may connect to or bind. Without a
// grant every TCP connect and bind is denied by the kernel.
type NetworkGrant struct {
	ConnectTCP []int `json:"connect_tcp,omitempty"`
	BindTCP    []int `json:"bind_tcp,omitempty"`
}

// Limits are the bounds a scope asks for its run. Each is optional (0 or
// absent: the operator's bound); the launcher refuses a scope that asks for more than
// the operator's own bounds allow (a scope may only narrow them).
type Limits struct {
	MaxProcesses  int64 `json:"max_processes,omitempty"`    // tasks, threads included
	MaxMemoryMB   int64 `json:"max_memory_mb,omitempty"`    // MiB, swap included
	MaxFileSizeMB int64 `json:"max_file_size_mb,omitempty"` // MiB, largest file it may write
}

// Upper bounds of the limits a scope may name: the kernel's pid_max, and
// sizes whose byte counts fit an int64 with room to spare.
const (
	maxLimitProcesses = MaxPID
	maxLimitMB        = 1 << 30
)

// Attribution asks the proxy to require a correlation id from the model
// gateway on every tools/call.
type Attribution struct {
	Required bool   `json:"required"`
	MetaKey  string `json:"meta_key,omitempty"` // key in params._meta; default "traceparent"
}

// Scope is a scope record as written by an operator. It is untrusted input
// until Canonicalize has checked it against a base directory.
type Scope struct {
	ScopeID             string        `json:"scope_id"`
	AllowedPaths        []string      `json:"allowed_paths"`
	ResourceRefs        []string      `json:"resource_refs"`
	AccessMode          AccessMode    `json:"access_mode"`
	ToolAllowlist       []string      `json:"tool_allowlist"`
	Approval            ApprovalRule  `json:"approval"`
	ExpiresAfterMinutes int           `json:"expires_after_minutes"`
	IssuedAt            *time.Time    `json:"issued_at,omitempty"`
	ExpiresAt           *time.Time    `json:"expires_at,omitempty"`
	Network             *NetworkGrant `json:"network,omitempty"`
	Attribution         *Attribution  `json:"attribution,omitempty"`
	// ToolClasses overrides the proxy's action class for named tools
	// ("read", "write" or "destructive"); unknown tools are destructive otherwise.
	ToolClasses map[string]string `json:"tool_classes,omitempty"`
	// ToolPathArgs declares which arguments of a tool are paths: a
	// top-level argument name ("target"), or a JSON Pointer (RFC 6901) to a
	// nested one ("/options/target", "/files/*/path"; "*" matches every
	// member or element). Whatever the pointer names is a path, or a list
	// or object of them.
	ToolPathArgs map[string][]string `json:"tool_path_args,omitempty"`
	// PromptAllowlist lists the prompts the client may list and get
	// (prompts/get, completion/complete of a prompt argument). Absent or
	// empty: no prompt is passed.
	PromptAllowlist []string `json:"prompt_allowlist,omitempty"`
	// AllowIOUring lets the wrapped server use io_uring, which syscall probes cannot see.
	AllowIOUring bool `json:"allow_io_uring,omitempty"`
	// Limits narrow the operator's bounds on processes, memory and file size.
	Limits *Limits `json:"limits,omitempty"`
	// RequireIsolation refuses to run the server without its namespaces
	// (mount, pid, ipc, uts, and net without a network grant) and identity
	// layer, instead of running with Landlock and seccomp alone.
	RequireIsolation bool `json:"require_isolation,omitempty"`
}

// ScopeError names the field that is wrong and why. Every refusal of a scope is one.
type ScopeError struct {
	Field  string
	Reason string
}

func (e *ScopeError) Error() string {
	if e.Field == "" {
		return "scope refused: " + e.Reason
	}
	return fmt.Sprintf("scope refused: %s: %s", e.Field, e.Reason)
}

func scopeErr(field, format string, args ...any) error {
	return &ScopeError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ReadScopeFile reads and strictly parses a scope file.
func ReadScopeFile(name string) (*Scope, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, &ScopeError{Reason: fmt.Sprintf("cannot open scope file: %v", err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxScopeFileSize+1))
	if err != nil {
		return nil, &ScopeError{Reason: fmt.Sprintf("cannot read scope file: %v", err)}
	}
	return ParseScope(data)
}

// ParseScope strictly decodes a scope record with the one strict decoder
// (schema/strictjson): member names match exactly ("Access_Mode" is not
// "access_mode"), a member named twice at any depth is refused (also when
// the names differ only in case), and unknown fields, wrong types, trailing
// data and oversized input are refused. A reviewer and the launcher
// therefore always read the same scope.
func ParseScope(data []byte) (*Scope, error) {
	if len(data) > MaxScopeFileSize {
		return nil, scopeErr("", "scope is larger than %d bytes", MaxScopeFileSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, scopeErr("", "scope is empty; write a JSON object with scope_id, allowed_paths, access_mode, tool_allowlist, approval and expires_after_minutes")
	}
	if !utf8.Valid(data) {
		return nil, scopeErr("", "scope is not valid UTF-8")
	}
	var s Scope
	if err := strictjson.Unmarshal(data, &s, strictjson.MaxDepth(maxScopeDepth)); err != nil {
		return nil, decodeError(err)
	}
	if err := s.validateFields(); err != nil {
		return nil, err
	}
	return &s, nil
}

// maxScopeDepth bounds nesting in a scope file; the deepest real member is
// three levels down (tool_path_args.NAME[i]).
const maxScopeDepth = 16

func decodeError(err error) error {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return scopeErr("", "invalid scope: %v", err)
	}
	field := se.Field()
	switch se.Kind {
	case strictjson.KindUnknownMember:
		return scopeErr(field, "unknown field (names are case-sensitive); see schema/scope.schema.json for the allowed fields")
	case strictjson.KindDuplicate:
		return scopeErr(field, "key appears more than once (compared ignoring case); a scope must say each thing once")
	case strictjson.KindType:
		if strings.HasSuffix(field, "issued_at") || strings.HasSuffix(field, "expires_at") {
			return scopeErr(field, "not an RFC 3339 time (%s)", se.Reason)
		}
		return scopeErr(field, "%s", se.Reason)
	case strictjson.KindDepth:
		return scopeErr(field, "JSON %s", se.Reason)
	}
	if strings.Contains(se.Reason, "data after") {
		return scopeErr("", "trailing data after the scope object")
	}
	return scopeErr(field, "invalid JSON at byte %d: %s", se.Offset, se.Reason)
}

// validateFields checks everything that does not need the filesystem or the clock.
func (s *Scope) validateFields() error {
	if s.ScopeID == "" {
		return scopeErr("scope_id", "missing; give the run's scope a stable identifier")
	}
	if len(s.ScopeID) > maxScopeIDLen || !isIdentifier(s.ScopeID) {
		return scopeErr("scope_id", "must be 1-%d characters of letters, digits, '.', '_', ':' or '-'", maxScopeIDLen)
	}
	if len(s.AllowedPaths) == 0 {
		return scopeErr("allowed_paths", "empty; an empty scope grants nothing, list at least one path relative to the base")
	}
	if len(s.AllowedPaths) > maxListLen {
		return scopeErr("allowed_paths", "more than %d entries", maxListLen)
	}
	for i, p := range s.AllowedPaths {
		if err := checkRelativePath(p); err != nil {
			return scopeErr(fmt.Sprintf("allowed_paths[%d]", i), "%s", err)
		}
	}
	if len(s.ResourceRefs) > maxListLen {
		return scopeErr("resource_refs", "more than %d entries", maxListLen)
	}
	for i, r := range s.ResourceRefs {
		if r == "" || len(r) > maxStringLen || hasControl(r) {
			return scopeErr(fmt.Sprintf("resource_refs[%d]", i), "must be a non-empty reference without control characters")
		}
	}
	switch s.AccessMode {
	case AccessRead, AccessWrite:
	case "":
		return scopeErr("access_mode", "missing; use \"read\" or \"write\"")
	default:
		return scopeErr("access_mode", "unknown mode %q; use \"read\" or \"write\"", s.AccessMode)
	}
	if len(s.ToolAllowlist) == 0 {
		return scopeErr("tool_allowlist", "empty; list the tools this run may call")
	}
	if len(s.ToolAllowlist) > maxListLen {
		return scopeErr("tool_allowlist", "more than %d entries", maxListLen)
	}
	for i, t := range s.ToolAllowlist {
		if !isToolName(t) {
			return scopeErr(fmt.Sprintf("tool_allowlist[%d]", i), "not a valid tool name (1-128 of letters, digits, '_', '-', '.', '/')")
		}
	}
	switch s.Approval {
	case ApprovalNone, ApprovalRequiredForWrite, ApprovalRequiredForAll:
	case "":
		return scopeErr("approval", "missing; use \"none\", \"required_for_write\" or \"required_for_all\"")
	default:
		return scopeErr("approval", "unknown rule %q; use \"none\", \"required_for_write\" or \"required_for_all\"", s.Approval)
	}
	if s.ExpiresAfterMinutes <= 0 || s.ExpiresAfterMinutes > maxExpiryMins {
		return scopeErr("expires_after_minutes", "must be between 1 and %d; a scope without an expiry is refused", maxExpiryMins)
	}
	if s.IssuedAt != nil && s.ExpiresAt != nil && !s.ExpiresAt.After(*s.IssuedAt) {
		return scopeErr("expires_at", "not after issued_at")
	}
	if s.Network != nil {
		for _, list := range []struct {
			name  string
			ports []int
		}{{"network.connect_tcp", s.Network.ConnectTCP}, {"network.bind_tcp", s.Network.BindTCP}} {
			if len(list.ports) > maxListLen {
				return scopeErr(list.name, "more than %d ports", maxListLen)
			}
			for _, p := range list.ports {
				if p < 1 || p > maxNetworkPort {
					return scopeErr(list.name, "port %d outside 1-%d", p, maxNetworkPort)
				}
			}
		}
	}
	if l := s.Limits; l != nil {
		for _, f := range []struct {
			name   string
			v, max int64
		}{{"limits.max_processes", l.MaxProcesses, maxLimitProcesses}, {"limits.max_memory_mb", l.MaxMemoryMB, maxLimitMB}, {"limits.max_file_size_mb", l.MaxFileSizeMB, maxLimitMB}} {
			if f.v < 0 || f.v > f.max {
				return scopeErr(f.name, "must be between 1 and %d (or 0 or absent for the operator's bound)", f.max)
			}
		}
		if *l == (Limits{}) {
			return scopeErr("limits", "names no limit; leave it out or give max_processes, max_memory_mb or max_file_size_mb")
		}
	}
	if s.Attribution != nil && s.Attribution.MetaKey != "" && !isToolName(s.Attribution.MetaKey) {
		return scopeErr("attribution.meta_key", "not a valid _meta key")
	}
	for tool, class := range s.ToolClasses {
		if !isToolName(tool) {
			return scopeErr("tool_classes", "key %q is not a valid tool name", tool)
		}
		switch class {
		case "read", "write", "destructive":
		default:
			return scopeErr("tool_classes."+tool, "unknown class %q; use \"read\", \"write\" or \"destructive\"", class)
		}
	}
	for tool, args := range s.ToolPathArgs {
		if !isToolName(tool) {
			return scopeErr("tool_path_args", "key %q is not a valid tool name", tool)
		}
		if len(args) == 0 || len(args) > maxListLen {
			return scopeErr("tool_path_args."+tool, "list 1-%d argument names", maxListLen)
		}
		for _, a := range args {
			if err := CheckArgPointer(a); err != nil {
				return scopeErr("tool_path_args."+tool, "argument %q: %v", a, err)
			}
		}
	}
	if len(s.PromptAllowlist) > maxListLen {
		return scopeErr("prompt_allowlist", "more than %d entries", maxListLen)
	}
	for i, p := range s.PromptAllowlist {
		if !isToolName(p) {
			return scopeErr(fmt.Sprintf("prompt_allowlist[%d]", i), "not a valid prompt name (1-128 of letters, digits, '_', '-', '.', '/')")
		}
	}
	return nil
}

// CheckArgPointer accepts a tool_path_args entry: a plain argument name, or
// a JSON Pointer (RFC 6901: "/a/b", "~1" for '/', "~0" for '~') whose
// tokens are names, indexes or "*" (any member or element), at most 16
// deep.
func CheckArgPointer(a string) error {
	if !strings.HasPrefix(a, "/") {
		if !isToolName(a) {
			return errors.New("not a valid argument name or JSON Pointer")
		}
		return nil
	}
	if len(a) > 512 || hasControl(a) {
		return errors.New("JSON Pointer longer than 512 bytes or with control characters")
	}
	toks := strings.Split(a[1:], "/")
	if len(toks) > 16 {
		return errors.New("JSON Pointer deeper than 16")
	}
	for _, t := range toks {
		if t == "" {
			return errors.New("JSON Pointer with an empty token")
		}
		for i := 0; i < len(t); i++ {
			if t[i] == '~' && (i+1 >= len(t) || (t[i+1] != '0' && t[i+1] != '1')) {
				return errors.New("JSON Pointer with a '~' not followed by 0 or 1")
			}
		}
	}
	return nil
}

// checkRelativePath refuses anything that is not a plain relative path below
// the base: absolute paths, "..", empty segments and control characters.
func checkRelativePath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path; use \".\" for the whole base")
	case len(p) > maxStringLen:
		return fmt.Errorf("longer than %d bytes", maxStringLen)
	case hasControl(p):
		return errors.New("contains a control character")
	case strings.HasPrefix(p, "/"):
		return errors.New("absolute path; allowed_paths are relative to the approved base (--base)")
	case strings.HasPrefix(p, "~"):
		return errors.New("'~' is not expanded; allowed_paths are relative to the approved base (--base)")
	case strings.Contains(p, "\\"):
		return errors.New("contains a backslash; use '/' as the separator")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return errors.New("contains '..'; a scope may not climb out of its base")
		}
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return true
		}
	}
	return false
}

func isIdentifier(s string) bool {
	for _, r := range s {
		if !(r < utf8.RuneSelf && (r == '.' || r == '_' || r == ':' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// isToolName accepts the MCP tool-name alphabet (SEP-986) plus '/'.
func isToolName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r < utf8.RuneSelf && (r == '.' || r == '_' || r == '-' || r == '/' || unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// PathKind is whether a canonical allowed path is a directory or a file; the
// Landlock rights that can be granted differ.
type PathKind string

const (
	KindDir  PathKind = "dir"
	KindFile PathKind = "file"
)

// CanonicalPath is one allowed path after resolution against the base.
type CanonicalPath struct {
	Path string   `json:"path"` // absolute, symlinks resolved
	Kind PathKind `json:"kind"`
}

// CanonicalScope is a scope that passed every check. It is the one authority
// the launcher, the proxy and the daemon enforce.
type CanonicalScope struct {
	ScopeID             string              `json:"scope_id"`
	Base                string              `json:"base"`
	AllowedPaths        []CanonicalPath     `json:"allowed_paths"`
	ResourceRefs        []string            `json:"resource_refs"`
	AccessMode          AccessMode          `json:"access_mode"`
	ToolAllowlist       []string            `json:"tool_allowlist"`
	Approval            ApprovalRule        `json:"approval"`
	ExpiresAfterMinutes int                 `json:"expires_after_minutes"`
	IssuedAt            *time.Time          `json:"issued_at,omitempty"`
	ExpiresAt           *time.Time          `json:"expires_at,omitempty"`
	Network             NetworkGrant        `json:"network"`
	Attribution         *Attribution        `json:"attribution,omitempty"`
	ToolClasses         map[string]string   `json:"tool_classes,omitempty"`
	ToolPathArgs        map[string][]string `json:"tool_path_args,omitempty"`
	PromptAllowlist     []string            `json:"prompt_allowlist,omitempty"`
	AllowIOUring        bool                `json:"allow_io_uring"`
	Limits              *Limits             `json:"limits,omitempty"`
	// RequireIsolation is omitted when false, so that the hash of every
	// scope that does not set it stays what it was.
	RequireIsolation bool `json:"require_isolation,omitempty"`

	// Hash is "sha256:" + hex SHA-256 of the canonical JSON of every field
	// above. It does not depend on when the scope was loaded.
	Hash string `json:"-"`
	// NotAfter is the effective expiry of this run: the earliest of
	// expires_at, issued_at+expires_after_minutes, or load time+expires_after_minutes
	// when issued_at is absent.
	NotAfter time.Time `json:"-"`
}

// Canonicalize resolves s against base at time now and refuses anything
// that ends outside the base, does not exist, or is not valid now.
func Canonicalize(s *Scope, base string, now time.Time) (*CanonicalScope, error) {
	if err := s.validateFields(); err != nil {
		return nil, err
	}
	realBase, err := resolveBase(base)
	if err != nil {
		return nil, err
	}
	c := &CanonicalScope{
		ScopeID:             s.ScopeID,
		Base:                realBase,
		ResourceRefs:        sortedUnique(s.ResourceRefs),
		AccessMode:          s.AccessMode,
		ToolAllowlist:       sortedUnique(s.ToolAllowlist),
		Approval:            s.Approval,
		ExpiresAfterMinutes: s.ExpiresAfterMinutes,
		Attribution:         s.Attribution,
		ToolClasses:         s.ToolClasses,
		ToolPathArgs:        s.ToolPathArgs,
		PromptAllowlist:     sortedUnique(s.PromptAllowlist),
		AllowIOUring:        s.AllowIOUring,
		Limits:              s.Limits,
		RequireIsolation:    s.RequireIsolation,
	}
	if c.Attribution != nil && c.Attribution.MetaKey == "" {
		a := *c.Attribution
		a.MetaKey = "traceparent"
		c.Attribution = &a
	}
	if s.Network != nil {
		c.Network = NetworkGrant{ConnectTCP: sortedUnique(s.Network.ConnectTCP), BindTCP: sortedUnique(s.Network.BindTCP)}
	}
	seen := map[string]bool{}
	for i, p := range s.AllowedPaths {
		cp, err := resolveUnder(realBase, p)
		if err != nil {
			return nil, scopeErr(fmt.Sprintf("allowed_paths[%d]", i), "%s", err)
		}
		if !seen[cp.Path] {
			seen[cp.Path] = true
			c.AllowedPaths = append(c.AllowedPaths, cp)
		}
	}
	slices.SortFunc(c.AllowedPaths, func(a, b CanonicalPath) int { return strings.Compare(a.Path, b.Path) })

	if s.IssuedAt != nil {
		t := s.IssuedAt.UTC()
		c.IssuedAt = &t
	}
	if s.ExpiresAt != nil {
		t := s.ExpiresAt.UTC()
		c.ExpiresAt = &t
	}
	start := now
	if c.IssuedAt != nil {
		if c.IssuedAt.After(now.Add(maxClockSkew)) {
			return nil, scopeErr("issued_at", "in the future (not yet valid); check the issuer's clock")
		}
		start = *c.IssuedAt
	}
	c.NotAfter = start.Add(time.Duration(s.ExpiresAfterMinutes) * time.Minute)
	if c.ExpiresAt != nil && c.ExpiresAt.Before(c.NotAfter) {
		c.NotAfter = *c.ExpiresAt
	}
	if !now.Before(c.NotAfter) {
		return nil, scopeErr("expires_after_minutes", "scope expired at %s; issue a new scope", c.NotAfter.Format(time.RFC3339))
	}

	canon, err := appendCanonicalJSON(make([]byte, 0, 512), c)
	if err != nil {
		return nil, fmt.Errorf("encode canonical scope: %w", err)
	}
	sum := sha256.Sum256(canon)
	c.Hash = "sha256:" + hex.EncodeToString(sum[:])
	return c, nil
}

func resolveBase(base string) (string, error) {
	if base == "" {
		return "", scopeErr("base", "empty; pass --base DIR")
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return "", scopeErr("base", "cannot make absolute: %v", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", scopeErr("base", "does not resolve (%v); pass an existing directory with --base", errors.Unwrap(err))
	}
	st, err := os.Stat(real)
	if err != nil || !st.IsDir() {
		return "", scopeErr("base", "not a directory; pass an existing directory with --base")
	}
	if real == "/" {
		return "", scopeErr("base", "is the root directory; an approved base must be a project directory, not /")
	}
	return real, nil
}

// resolveUnder joins rel to base, resolves every symlink and checks that the
// result is still base or below it.
func resolveUnder(base, rel string) (CanonicalPath, error) {
	joined := filepath.Join(base, rel)
	real, err := filepath.EvalSymlinks(joined)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return CanonicalPath{}, errors.New("does not exist under the base; create it or fix the path")
		}
		return CanonicalPath{}, fmt.Errorf("cannot resolve: %v", errors.Unwrap(err))
	}
	if !IsWithin(base, real) {
		return CanonicalPath{}, errors.New("resolves outside the base (symlink escape)")
	}
	st, err := os.Stat(real)
	if err != nil {
		return CanonicalPath{}, fmt.Errorf("cannot stat: %v", errors.Unwrap(err))
	}
	kind := KindFile
	switch {
	case st.IsDir():
		kind = KindDir
	case !st.Mode().IsRegular():
		return CanonicalPath{}, errors.New("is neither a directory nor a regular file")
	}
	return CanonicalPath{Path: real, Kind: kind}, nil
}

// Names returns how many names (hard links) the regular file at path has;
// 0 when path is not a regular file or cannot be examined. A file with more
// than one may be reached through a name a path check never sees.
func Names(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Nlink)
	}
	return 0
}

// IsWithin reports whether path equals dir or lies below it. Both must be
// clean absolute paths.
func IsWithin(dir, path string) bool {
	if path == dir {
		return true
	}
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return strings.HasPrefix(path, dir+"/")
}

// Contains reports whether the canonical absolute path p lies inside one of
// the scope's allowed paths.
func (c *CanonicalScope) Contains(p string) bool {
	for _, a := range c.AllowedPaths {
		if IsWithin(a.Path, p) {
			return true
		}
	}
	return false
}

// Expired reports whether the scope is no longer valid at now.
func (c *CanonicalScope) Expired(now time.Time) bool { return !now.Before(c.NotAfter) }

func sortedUnique[T interface{ ~string | ~int }](in []T) []T {
	out := slices.Clone(in)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []T{}
	}
	return out
}
