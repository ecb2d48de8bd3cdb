package schema

import "strings"

// DefaultHostCodePatterns name files and directories that the host's own
// programs read as code or as instructions, outside every fence: the
// coding agents' and MCP clients' project settings (hooks, commands,
// instructions), editors' tasks, git and build hooks, a session's
// start-up files other than the shells' (those are secrets), and the
// interpreters' start-up code. They are not secrets (a server may read
// them), but one created or changed in a write scope during a run is
// reported at its end (docs/launcher.md, "Names planted in a write
// scope"). Matched as secret patterns are: glob per component, case-folded.
var DefaultHostCodePatterns = []string{
	// Coding agents and MCP clients: settings with hooks, commands,
	// subagents, instructions read into every prompt.
	".claude/settings.json", ".claude/settings.local.json", ".claude/commands", ".claude/agents", ".claude/hooks",
	"claude.md", "claude.local.md", "agents.md", "gemini.md", ".gemini/settings.json", ".cursorrules", ".cursor/rules",
	".windsurfrules", ".clinerules", ".roo", ".continue", ".aider.conf.yml", ".github/copilot-instructions.md",
	".codex/config.toml", ".amazonq",
	// Editors and IDEs: tasks run when a folder opens, settings naming
	// programs, project start-up files.
	".vscode/tasks.json", ".vscode/settings.json", ".vscode/launch.json", ".idea/workspace.xml", ".devcontainer",
	".vimrc", ".exrc", ".nvimrc", ".nvim.lua", ".config/nvim", ".emacs", ".emacs.d", ".gdbinit", ".tmux.conf",
	// Hooks of git and of build and CI tools.
	".husky", ".pre-commit-config.yaml", ".github/workflows", ".gitlab-ci.yml", ".cargo/config.toml", ".cargo/config",
	// A session's start-up besides the shells' files, and the user's PATH.
	".config/autostart", ".config/systemd/user", ".config/environment.d", ".pam_environment", ".xinitrc", ".xprofile",
	".xsession", ".xsessionrc", ".bashrc.d", "fish/conf.d", "fish/functions", ".local/bin", ".bash_completion",
	".bash_completion.d", ".oh-my-zsh/custom", ".screenrc", ".mise.toml", "mise.toml", ".config/mise",
	"lefthook.yml", ".lefthook.yml", ".hgrc", ".hg/hgrc",
	// Interpreters', debuggers' and database shells' start-up code.
	"sitecustomize.py", "usercustomize.py", "*.pth", ".pythonrc", ".pythonrc.py", ".ipython/profile_default/startup",
	".irbrc", ".pryrc", ".yarnrc", ".rprofile", ".pdbrc", ".ghci", ".lldbinit", ".psqlrc", ".sqliterc", ".vim",
}

// DefaultHostCodes is DefaultHostCodePatterns compiled.
var DefaultHostCodes = mustSecrets(DefaultHostCodePatterns)

// DefaultHostCodeHeads are the directories on the way to a
// multi-component pattern of DefaultHostCodePatterns or
// DefaultSecretPatterns (.vscode, .claude, .config, ...), lowercased: a
// symlink by such a name leads to what the pattern names.
var DefaultHostCodeHeads = func() map[string]bool {
	heads := map[string]bool{}
	for _, list := range [][]string{DefaultHostCodePatterns, DefaultSecretPatterns} {
		for _, p := range list {
			parts := strings.Split(strings.ToLower(p), "/")
			for _, h := range parts[:len(parts)-1] {
				heads[h] = true
			}
		}
	}
	return heads
}()
