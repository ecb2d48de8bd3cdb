package scopegen

import (
	"fmt"
	"path/filepath"
	"strings"
)

// ReviewHeader says what the review is about.
type ReviewHeader struct {
	Server    string // the server's name in the client's file
	Config    string // the client's file
	ScopeFile string
	Base      string
	Command   string // the server's command line, for a person
	// ServerInfo is "name version" from initialize.
	ServerInfo string
	ProbeMode  string
	// Home is the user's home directory (symlinks resolved): a grant of
	// all of it is flagged wherever it lives (not only under /home).
	Home string
}

// Review renders the notes a person reads before trusting the scope:
// what it grants, each tool's class and where it came from, the tools
// left for review, and the extra notes (env, arguments) of the caller.
// It holds no time stamp, so the same server yields the same text.
func Review(h ReviewHeader, in Input, out *Output, notes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Review of the starting scope for %q\n\n", h.Server)
	fmt.Fprintf(&b, "- client configuration: %s\n", h.Config)
	fmt.Fprintf(&b, "- scope file: %s (scope_id %s)\n", h.ScopeFile, out.Scope.ScopeID)
	fmt.Fprintf(&b, "- server: %s", h.Command)
	if h.ServerInfo != "" {
		fmt.Fprintf(&b, " (it calls itself %s)", h.ServerInfo)
	}
	fmt.Fprintf(&b, "\n- probed with tools/list under `mcpwarden run --mode %s`\n\n", h.ProbeMode)

	fmt.Fprintf(&b, "## What the scope grants\n\n")
	fmt.Fprintf(&b, "Read-only (`access_mode: read`) access, relative to the approved base `%s`, to:\n\n", h.Base)
	for _, p := range out.Scope.AllowedPaths {
		fmt.Fprintf(&b, "- `%s` (%s)\n", p, filepath.Join(h.Base, p))
	}
	if len(in.Paths) == 0 {
		fmt.Fprintf(&b, "\nThe server was given no directory, so the scope names an empty directory of its own: it can read nothing of yours.\n")
	}
	for _, p := range out.Scope.AllowedPaths {
		if abs := filepath.Join(h.Base, p); abs == "/" || isHome(abs) || (h.Home != "" && abs == filepath.Clean(h.Home)) {
			fmt.Fprintf(&b, "\n**Wide:** the server was given %s as a whole; the scope grants all of it, read-only. Name the project directories it needs instead.\n", abs)
		}
	}
	fmt.Fprintf(&b, "\nNo network (every TCP connect and bind is denied), no prompts, writes need approval should you turn the scope to `write`, and each run ends after %d minutes (the client then starts a new one).\n\n", out.Scope.ExpiresAfterMinutes)

	fmt.Fprintf(&b, "## Tools\n\n")
	for _, t := range out.Tools {
		switch {
		case t.Problem != "":
			fmt.Fprintf(&b, "- `%s`: HIDDEN: %s\n", t.Name, t.Problem)
		case t.Class != "":
			fmt.Fprintf(&b, "- `%s`: %s (mcpwarden's table)", t.Name, t.Class)
			if t.Class != "read" {
				fmt.Fprintf(&b, ": refused while the scope is read-only")
			}
			b.WriteString("\n")
		default:
			fmt.Fprintf(&b, "- `%s`: **REVIEW**: class unknown, so it counts as destructive and this read-only scope refuses its calls", t.Name)
			if t.Hint != "" {
				fmt.Fprintf(&b, "; the server claims %s (an untrusted hint)", t.Hint)
			}
			b.WriteString("\n")
		}
		if len(t.PathArgs) > 0 {
			fmt.Fprintf(&b, "  - arguments that look like paths: %s\n", strings.Join(t.PathArgs, ", "))
		}
	}
	if len(out.Unknown) > 0 {
		fmt.Fprintf(&b, "\nTo let a tool marked REVIEW run, decide what it does and add it to `tool_classes`. What the server's hints would suggest (check each yourself):\n\n    \"tool_classes\": {%s}\n\n", suggestClasses(out))
		fmt.Fprintf(&b, "`read` calls run in this scope; `write` and `destructive` ones need `\"access_mode\": \"write\"` and then wait for `mcpwarden approve`. Name a tool's path arguments in `tool_path_args` (e.g. `{\"%s\": [\"path\"]}`) so the proxy checks them against the scope.\n", out.Unknown[0])
	}
	if len(out.Prompts) > 0 {
		fmt.Fprintf(&b, "\nPrompts the server offers, hidden until listed in `prompt_allowlist`: %s\n", strings.Join(out.Prompts, ", "))
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, "\n## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\nCheck the scope with `mcpwarden scope check %s --base %s`.\n", h.ScopeFile, h.Base)
	return b.String()
}

// suggestClasses maps each unknown tool to the class its hints suggest:
// readOnlyHint true → read, destructiveHint false → write, else
// destructive (MCP's defaults are readOnly false, destructive true).
func suggestClasses(out *Output) string {
	var parts []string
	for _, t := range out.Tools {
		if !t.Allowed || t.Class != "" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%q: %q", t.Name, SuggestedClass(t)))
	}
	return strings.Join(parts, ", ")
}

// SuggestedClass is the class a tool's hints suggest (never applied on
// its own: the hints are the server's word).
func SuggestedClass(t ToolNote) string {
	switch {
	case strings.Contains(t.Hint, "readOnlyHint=true"):
		return "read"
	case strings.Contains(t.Hint, "destructiveHint=false"):
		return "write"
	}
	return "destructive"
}

func isHome(p string) bool {
	d := filepath.Dir(p)
	return d == "/home" || p == "/root"
}
