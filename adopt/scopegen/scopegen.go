// Package scopegen writes the starting scope of a server mcpwarden has
// just met, and the notes a person needs to review it. The starting scope
// never grants more than what is certain:
//
//   - read-only, on the directories the server was given (or an empty
//     directory of its own when it was given none);
//   - every tool the server listed, with the action class of mcpwarden's
//     own table (launcher/proxy/policy) where the table knows the tool;
//     a tool the table does not know gets no class, so the proxy treats it
//     as destructive and a read-only scope refuses its calls. It is marked
//     for review with what the server claims about it (its annotations are
//     untrusted hints, never taken as the class);
//   - no network, no prompts, approval required for writes (should the
//     operator turn the scope to write), an expiry.
package scopegen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
)

// DefaultExpiresAfterMinutes is the starting scope's lifetime: a run that
// lasts longer (a desktop client keeps servers for days) is stopped with
// exit 77, and the client starts it again with a fresh run.
const DefaultExpiresAfterMinutes = 1440

// maxTools is the most tools a scope's tool_allowlist may list.
const maxTools = 256

// Input is what is known about one server.
type Input struct {
	// ID names the scope (scope_id); see ScopeID.
	ID string
	// Base is the approved base (absolute, symlinks resolved); Paths the
	// allowed paths, absolute and inside Base.
	Base  string
	Paths []string
	Probe *probe.Result
	// ExpiresAfterMinutes; 0 means DefaultExpiresAfterMinutes.
	ExpiresAfterMinutes int
}

// ToolNote is the review of one tool.
type ToolNote struct {
	Name     string   `json:"name"`
	Class    string   `json:"class,omitempty"` // from mcpwarden's table; "" unknown
	Allowed  bool     `json:"allowed"`         // in tool_allowlist
	Hint     string   `json:"hint,omitempty"`  // what the server's annotations claim
	PathArgs []string `json:"path_args,omitempty"`
	Problem  string   `json:"problem,omitempty"` // why it cannot be allowed
}

// Output is a starting scope and its review.
type Output struct {
	Scope *schema.Scope
	JSON  []byte // the scope file's content
	Tools []ToolNote
	// Unknown are the allowed tools with no class: left for review.
	Unknown []string
	Prompts []string // hidden: not in prompt_allowlist
}

// ScopeID makes a scope id from a server's name and a discriminator (the
// configuration file it comes from): letters, digits and '.', '_', '-'
// of the name, and 8 hex digits that keep two "filesystem" servers of two
// projects apart.
func ScopeID(prefix, name, discriminator string) string {
	sum := sha256.Sum256([]byte(discriminator + "\x00" + name))
	return prefix + "-" + Slug(name) + "-" + hex.EncodeToString(sum[:4])
}

// slugRun is compiled on first use: `mcpwarden run` links this package.
var slugRun = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9._]+`) })

// Slug is the name with every run of other characters turned into '-',
// at most 48 bytes, "server" when nothing is left.
func Slug(name string) string {
	s := strings.Trim(slugRun().ReplaceAllString(name, "-"), "-.")
	if len(s) > 48 {
		s = strings.TrimRight(s[:48], "-.")
	}
	if s == "" {
		return "server"
	}
	return s
}

// Generate builds the starting scope.
func Generate(in Input) (*Output, error) {
	if in.Probe == nil {
		return nil, fmt.Errorf("scopegen: no probe result")
	}
	exp := in.ExpiresAfterMinutes
	if exp == 0 {
		exp = DefaultExpiresAfterMinutes
	}
	s := &schema.Scope{
		ScopeID:             in.ID,
		ResourceRefs:        []string{},
		AccessMode:          schema.AccessRead,
		Approval:            schema.ApprovalRequiredForWrite,
		ExpiresAfterMinutes: exp,
		ToolClasses:         map[string]string{},
	}
	for _, p := range in.Paths {
		rel, err := filepath.Rel(in.Base, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("scopegen: %s is not inside the base %s", p, in.Base)
		}
		s.AllowedPaths = append(s.AllowedPaths, rel)
	}
	sort.Strings(s.AllowedPaths)
	s.AllowedPaths = dedupe(s.AllowedPaths)
	out := &Output{Scope: s, Prompts: in.Probe.Prompts}
	seen := map[string]bool{}
	tools := append([]probe.Tool(nil), in.Probe.Tools...)
	sort.SliceStable(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	for _, t := range tools {
		if seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		n := ToolNote{Name: t.Name, Hint: hint(t.Annotations), PathArgs: PathArgs(t)}
		switch {
		case !ValidToolName(t.Name):
			n.Problem = "its name is outside the MCP tool-name alphabet (1-128 of ASCII letters, digits, '_', '-', '.', '/'): a scope cannot name it, so it stays hidden"
		case len(s.ToolAllowlist) >= maxTools:
			n.Problem = fmt.Sprintf("a scope lists at most %d tools; this one stays hidden", maxTools)
		default:
			n.Allowed = true
			s.ToolAllowlist = append(s.ToolAllowlist, t.Name)
			if row, ok := policy.BuiltinTool(t.Name); ok {
				n.Class = string(row.Class)
				s.ToolClasses[t.Name] = string(row.Class)
			} else {
				out.Unknown = append(out.Unknown, t.Name)
			}
		}
		out.Tools = append(out.Tools, n)
	}
	if len(s.ToolAllowlist) == 0 {
		return out, fmt.Errorf("the server lists no tool a scope can allow (a scope needs at least one)")
	}
	if len(s.ToolClasses) == 0 {
		s.ToolClasses = nil
	}
	b, err := Marshal(s)
	if err != nil {
		return nil, err
	}
	// The file must be what the launcher accepts.
	parsed, err := schema.ParseScope(b)
	if err != nil {
		return nil, fmt.Errorf("scopegen: the generated scope is refused: %w", err)
	}
	if _, err := schema.Canonicalize(parsed, in.Base, time.Now()); err != nil {
		return nil, fmt.Errorf("scopegen: the generated scope is refused: %w", err)
	}
	out.JSON = b
	return out, nil
}

// Marshal writes a scope the way a person would: two-space indent, fields
// in the schema's order, a final newline.
func Marshal(s *schema.Scope) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// ValidToolName is the scope's tool-name rule (schema).
func ValidToolName(s string) bool {
	if s == "" || len(s) > 128 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !(r < utf8.RuneSelf && (r == '.' || r == '_' || r == '-' || r == '/' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))) {
			return false
		}
	}
	return true
}

func hint(a *probe.Annotations) string {
	if a == nil {
		return ""
	}
	var parts []string
	b := func(name string, v *bool) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s=%v", name, *v))
		}
	}
	b("readOnlyHint", a.ReadOnlyHint)
	b("destructiveHint", a.DestructiveHint)
	b("idempotentHint", a.IdempotentHint)
	b("openWorldHint", a.OpenWorldHint)
	return strings.Join(parts, " ")
}

// PathArgs are the tool's top-level arguments that look like paths by
// name, JSON Schema format or description: candidates for the scope's
// tool_path_args (the proxy then checks them as paths).
func PathArgs(t probe.Tool) []string {
	var out []string
	for _, p := range t.Properties() {
		if p.Type != "" && p.Type != "string" && p.Type != "array" {
			continue
		}
		desc := strings.ToLower(p.Description)
		if pathName(p.Name) || p.Format == "uri" || strings.Contains(desc, "path") || strings.Contains(desc, "directory") || strings.Contains(desc, "folder") {
			out = append(out, p.Name)
		}
	}
	return out
}

func pathName(n string) bool {
	l := strings.ToLower(n)
	for _, w := range []string{"path", "paths", "file", "files", "filename", "filepath", "file_path", "dir", "dirs", "directory", "directories", "folder", "folders", "root", "cwd", "workdir", "source", "destination", "src", "dst", "dest", "target"} {
		if l == w || strings.HasSuffix(l, "_"+w) || strings.HasSuffix(l, "-"+w) {
			return true
		}
	}
	// camelCase: filePath, targetDir
	for _, w := range []string{"Path", "Paths", "File", "Dir", "Directory", "Folder"} {
		if strings.HasSuffix(n, w) && len(n) > len(w) {
			return true
		}
	}
	return false
}
