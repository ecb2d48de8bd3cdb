package clientconfig

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Vars are what a client's variables expand to when mcpwarden runs a
// server the way the client would (to probe it, and to find its directory
// arguments).
type Vars struct {
	Env  func(string) (string, bool)
	Home string
	// WorkspaceFolder is the project the file belongs to ("" for a user's
	// own configuration, where ${workspaceFolder} means nothing).
	WorkspaceFolder string
}

// WorkspaceFolder is the project directory of a project-scoped file: the
// directory holding .vscode/ or .cursor/, or .mcp.json's own directory.
// It is "" for user-level files (Claude Desktop, a VS Code profile).
func (c *Config) WorkspaceFolder() string {
	dir := filepath.Dir(c.Real)
	switch c.Format {
	case ClaudeCode:
		return dir
	case VSCode, Cursor:
		if b := filepath.Base(dir); b == ".vscode" || b == ".cursor" {
			return filepath.Dir(dir)
		}
	}
	return ""
}

// Compiled on first use: `mcpwarden run` links this package and never
// expands a client's variables.
var (
	claudeVar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`) })
	vscodeVar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{([^}]*)\}`) })
)

// Expand expands the client's variables in s the way the client does.
// A variable mcpwarden cannot know (VS Code's ${input:ID}, an unset
// ${VAR} without a default in Claude Code) is an error.
func (f Format) Expand(s string, v Vars) (string, error) {
	var err error
	fail := func(format string, args ...any) string {
		if err == nil {
			err = fmt.Errorf(format, args...)
		}
		return ""
	}
	switch f {
	case ClaudeCode:
		out := claudeVar().ReplaceAllStringFunc(s, func(m string) string {
			g := claudeVar().FindStringSubmatch(m)
			if val, ok := v.Env(g[1]); ok {
				return val
			}
			if g[2] != "" {
				return g[3]
			}
			return fail("${%s} is not set in this environment (Claude Code would refuse the server too)", g[1])
		})
		return out, err
	case VSCode, Cursor:
		out := vscodeVar().ReplaceAllStringFunc(s, func(m string) string {
			name := m[2 : len(m)-1]
			switch {
			case name == "userHome":
				return v.Home
			case name == "workspaceFolder" || name == "workspaceRoot":
				if v.WorkspaceFolder == "" {
					return fail("${%s} in a configuration that belongs to no workspace", name)
				}
				return v.WorkspaceFolder
			case name == "workspaceFolderBasename":
				if v.WorkspaceFolder == "" {
					return fail("${%s} in a configuration that belongs to no workspace", name)
				}
				return filepath.Base(v.WorkspaceFolder)
			case name == "pathSeparator" || name == "/":
				return "/"
			case strings.HasPrefix(name, "env:"):
				val, _ := v.Env(strings.TrimPrefix(name, "env:"))
				return val
			case strings.HasPrefix(name, "input:"):
				return fail("${%s} is asked of the user when the client starts the server; mcpwarden cannot know it", name)
			}
			return fail("${%s} is a variable mcpwarden does not know", name)
		})
		return out, err
	}
	return s, nil
}
