// Package clientconfig reads and edits the files in which MCP clients list
// their servers, keeping every byte it does not have to change:
//
//   - Claude Desktop, claude_desktop_config.json: {"mcpServers": {NAME:
//     {"command", "args", "env"}}}, besides the app's own keys;
//   - Claude Code, .mcp.json (project scope): {"mcpServers": {NAME:
//     {"type": "stdio", "command", "args", "env"} | {"type": "http"|"sse",
//     "url", "headers"}}}; ${VAR} and ${VAR:-default} expand from the
//     environment in command, args, env, url and headers;
//   - Cursor, ~/.cursor/mcp.json and .cursor/mcp.json: {"mcpServers":
//     {NAME: {"command", "args", "env", "envFile"} | {"url", "headers"}}};
//     ${env:NAME}, ${userHome}, ${workspaceFolder} expand;
//   - VS Code, .vscode/mcp.json and the user profile's mcp.json: {"inputs":
//     [...], "servers": {NAME: {"type": "stdio", "command", "args", "env",
//     "envFile", "cwd"} | {"type": "http"|"sse", "url", "headers"}}}, JSONC
//     (comments, trailing commas); ${workspaceFolder}, ${userHome},
//     ${env:NAME} and ${input:ID} expand.
//
// A file is refused when what mcpwarden reads from it could mean two
// things: a key named twice on the way to a server's command (JSON.parse
// keeps the last, a reviewer may read the first), a name or argument that
// escapes a lone UTF-16 surrogate, a value of the wrong type.
package clientconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpwarden/mcpwarden/adopt/jsonedit"
)

// Format is a client's configuration format.
type Format string

const (
	ClaudeDesktop Format = "claude-desktop"
	ClaudeCode    Format = "claude-code"
	Cursor        Format = "cursor"
	VSCode        Format = "vscode"
)

// Formats lists the formats, for flags and messages.
var Formats = []Format{ClaudeDesktop, ClaudeCode, Cursor, VSCode}

// ServersKey is the top-level member that maps names to servers.
func (f Format) ServersKey() string {
	if f == VSCode {
		return "servers"
	}
	return "mcpServers"
}

// Transport says how the client reaches a server.
type Transport string

const (
	Stdio  Transport = "stdio"  // a command the client starts
	Remote Transport = "remote" // a URL (http, sse, ws)
)

// EnvVar is one member of an entry's env block. Null (VS Code: remove the
// variable) has Set false.
type EnvVar struct {
	Name, Value string
	Set         bool
}

// Entry is one server of the file.
type Entry struct {
	Name      string
	Node      *jsonedit.Node // the entry's object
	Transport Transport
	Type      string // the "type" member, when there is one
	URL       string // remote servers
	Command   string
	Args      []string
	Env       []EnvVar
	EnvFile   string
	Cwd       string
	// Wrapped is set when the entry already runs under `mcpwarden run`.
	Wrapped *Wrapped

	command *jsonedit.Member
	args    *jsonedit.Member
}

// Wrapped is what a wrapped entry's arguments say.
type Wrapped struct {
	Scope, Base string
	EnvNames    []string
	// Command and Args are the server's own, after "--".
	Command string
	Args    []string
}

// Config is one client configuration file.
type Config struct {
	Path   string // as given
	Real   string // every symlink resolved: the file that is read and written
	Format Format
	Doc    *jsonedit.Doc
	Mode   os.FileMode
	UID    int
	GID    int
	// Servers is the servers object (nil when the file has none).
	Servers *jsonedit.Node
	Entries []*Entry
}

// MaxFileSize bounds a configuration file (Claude Code's ~/.claude.json
// keeps history next to its servers and grows to megabytes).
const MaxFileSize = 32 << 20

// Read reads and parses path. format "" detects it from the file's name
// and content.
func Read(path string, format Format) (*Config, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("client configuration %s: %w", path, err)
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("client configuration: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("client configuration %s is not a regular file", path)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("client configuration %s is larger than %d MiB", path, MaxFileSize>>20)
	}
	src, err := os.ReadFile(real)
	if err != nil {
		return nil, fmt.Errorf("client configuration: %w", err)
	}
	c, err := Parse(src, path, format)
	if err != nil {
		return nil, err
	}
	c.Real, c.Mode = real, st.Mode().Perm()
	c.UID, c.GID = ownerOf(st)
	return c, nil
}

// Parse parses a configuration's bytes; path names it (for messages and
// format detection).
func Parse(src []byte, path string, format Format) (*Config, error) {
	doc, err := jsonedit.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("client configuration %s: %w", path, err)
	}
	if doc.Root.Kind != jsonedit.Object {
		return nil, fmt.Errorf("client configuration %s: the file is a JSON %s, not an object", path, doc.Root.Kind)
	}
	if format == "" {
		if format, err = Detect(path, doc); err != nil {
			return nil, err
		}
	}
	c := &Config{Path: path, Real: path, Format: format, Doc: doc}
	key := format.ServersKey()
	ms := doc.Root.Get(key)
	switch {
	case len(ms) > 1:
		return nil, fmt.Errorf("client configuration %s: %q appears %d times; the client would read only the last: keep one", path, key, len(ms))
	case len(ms) == 0:
		return c, nil
	}
	if ms[0].Value.Kind != jsonedit.Object {
		return nil, fmt.Errorf("client configuration %s: %q is a %s, not an object", path, key, ms[0].Value.Kind)
	}
	c.Servers = ms[0].Value
	seen := map[string]bool{}
	for i := range c.Servers.Members {
		m := &c.Servers.Members[i]
		if m.BadKey {
			return nil, fmt.Errorf("client configuration %s: a server name at byte %d escapes a lone UTF-16 surrogate; rename it", path, m.KeyStart)
		}
		if seen[m.Key] {
			return nil, fmt.Errorf("client configuration %s: server %q is defined twice in %q; the client would use only the last: remove one", path, m.Key, key)
		}
		seen[m.Key] = true
		e, err := readEntry(src, m)
		if err != nil {
			return nil, fmt.Errorf("client configuration %s: server %q: %w", path, m.Key, err)
		}
		c.Entries = append(c.Entries, e)
	}
	return c, nil
}

// Detect tells the format from the file's name, its directory and its
// top-level keys.
func Detect(path string, doc *jsonedit.Doc) (Format, error) {
	base, dir := filepath.Base(path), filepath.Base(filepath.Dir(path))
	hasServers, hasMCPServers := len(doc.Root.Get("servers")) > 0, len(doc.Root.Get("mcpServers")) > 0
	switch {
	case base == "claude_desktop_config.json":
		return ClaudeDesktop, nil
	case base == ".mcp.json":
		return ClaudeCode, nil
	case base == "mcp.json" && dir == ".cursor":
		return Cursor, nil
	case base == "mcp.json" && (dir == ".vscode" || (hasServers && !hasMCPServers)):
		return VSCode, nil
	}
	return "", fmt.Errorf("cannot tell which client %s is for: pass --format %s", path, strings.Join(formatNames(), "|"))
}

func formatNames() []string {
	var out []string
	for _, f := range Formats {
		out = append(out, string(f))
	}
	return out
}

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q: use %s", s, strings.Join(formatNames(), ", "))
}

// the entry members mcpwarden reads; each must appear once.
var entryKeys = []string{"command", "args", "env", "envFile", "cwd", "type", "url", "serverUrl", "httpUrl"}

func readEntry(src []byte, m *jsonedit.Member) (*Entry, error) {
	e := &Entry{Name: m.Key, Node: m.Value}
	if m.Value.Kind != jsonedit.Object {
		return nil, fmt.Errorf("is a %s, not an object", m.Value.Kind)
	}
	one := map[string]*jsonedit.Member{}
	for _, k := range entryKeys {
		ms := m.Value.Get(k)
		if len(ms) > 1 {
			return nil, fmt.Errorf("%q appears %d times; the client would read only the last: keep one", k, len(ms))
		}
		if len(ms) == 1 {
			one[k] = ms[0]
		}
	}
	str := func(k string) (string, error) {
		mm := one[k]
		if mm == nil {
			return "", nil
		}
		if mm.Value.Kind != jsonedit.String {
			return "", fmt.Errorf("%q is a %s, not a string", k, mm.Value.Kind)
		}
		if mm.Value.BadString {
			return "", fmt.Errorf("%q escapes a lone UTF-16 surrogate", k)
		}
		return mm.Value.Str, nil
	}
	var err error
	for _, f := range []struct {
		key string
		dst *string
	}{{"type", &e.Type}, {"command", &e.Command}, {"envFile", &e.EnvFile}, {"cwd", &e.Cwd}} {
		if *f.dst, err = str(f.key); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"url", "serverUrl", "httpUrl"} {
		if u, err := str(k); err != nil {
			return nil, err
		} else if u != "" {
			e.URL = u
		}
	}
	switch {
	case e.Type != "" && e.Type != "stdio":
		e.Transport = Remote
		return e, nil
	case e.URL != "" && one["command"] == nil:
		e.Transport = Remote
		return e, nil
	case one["command"] == nil:
		return nil, errors.New("has neither \"command\" nor \"url\"")
	case e.Command == "":
		return nil, errors.New("\"command\" is empty")
	}
	e.Transport = Stdio
	e.command = one["command"]
	if a := one["args"]; a != nil {
		e.args = a
		if a.Value.Kind != jsonedit.Array {
			return nil, fmt.Errorf("\"args\" is a %s, not an array", a.Value.Kind)
		}
		for i, el := range a.Value.Elems {
			if el.Kind != jsonedit.String {
				return nil, fmt.Errorf("args[%d] is a %s, not a string", i, el.Kind)
			}
			if el.BadString {
				return nil, fmt.Errorf("args[%d] escapes a lone UTF-16 surrogate", i)
			}
			e.Args = append(e.Args, el.Str)
		}
	}
	if env := one["env"]; env != nil {
		if env.Value.Kind != jsonedit.Object {
			return nil, fmt.Errorf("\"env\" is a %s, not an object", env.Value.Kind)
		}
		seen := map[string]bool{}
		for _, v := range env.Value.Members {
			if v.BadKey || v.Value.BadString {
				return nil, fmt.Errorf("env %q escapes a lone UTF-16 surrogate", v.Key)
			}
			if seen[v.Key] {
				return nil, fmt.Errorf("env %q appears twice; keep one", v.Key)
			}
			seen[v.Key] = true
			switch v.Value.Kind {
			case jsonedit.String:
				e.Env = append(e.Env, EnvVar{Name: v.Key, Value: v.Value.Str, Set: true})
			case jsonedit.Number, jsonedit.True, jsonedit.False:
				e.Env = append(e.Env, EnvVar{Name: v.Key, Value: string(src[v.Value.Start:v.Value.End]), Set: true})
			case jsonedit.Null:
				e.Env = append(e.Env, EnvVar{Name: v.Key})
			default:
				return nil, fmt.Errorf("env %q is a %s", v.Key, v.Value.Kind)
			}
		}
	}
	e.Wrapped = parseWrapped(e.Command, e.Args)
	return e, nil
}

// IsMcpwarden reports whether a command names mcpwarden.
func IsMcpwarden(command string) bool { return filepath.Base(command) == "mcpwarden" }

// parseWrapped recognises `mcpwarden run [flags] -- CMD ARGS`.
func parseWrapped(command string, args []string) *Wrapped {
	if !IsMcpwarden(command) || len(args) == 0 || args[0] != "run" {
		return nil
	}
	w := &Wrapped{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				w.Command, w.Args = args[i+1], append([]string{}, args[i+2:]...)
			}
			return w
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasVal && i+1 < len(args) && (name == "scope" || name == "base" || name == "env") {
			i++
			val = args[i]
		}
		switch name {
		case "scope":
			w.Scope = val
		case "base":
			w.Base = val
		case "env":
			w.EnvNames = append(w.EnvNames, val)
		}
	}
	return w // `mcpwarden run` without "--": still mcpwarden's, left alone
}
