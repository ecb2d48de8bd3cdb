package schema

import "testing"

// TestHostCodePatterns: the names the run-end check reports as code the
// host runs, their near misses, and the heads a symlink may be named as.
func TestHostCodePatterns(t *testing.T) {
	for _, p := range []string{"/h/.vscode/tasks.json", "/h/.claude/settings.json", "/h/proj/CLAUDE.md", "/h/.config/autostart/x.desktop",
		"/h/.config/systemd/user/evil.service", "/h/.local/bin/ls", "/h/.git-hooks-not/.husky/pre-commit", "/h/.github/workflows/ci.yml",
		"/v/lib/python3.11/site-packages/zz.pth", "/h/.config/fish/conf.d/x.fish", "/h/.Rprofile", "/h/.psqlrc", "/h/.bash_completion"} {
		if !DefaultHostCodes.Match(p) {
			t.Errorf("%s is not matched", p)
		}
	}
	for _, p := range []string{"/h/.vscode/extensions.json", "/h/notes.md", "/h/.config/other", "/h/local/bin/x", "/h/src/main.py", "/h/.claude.txt"} {
		if DefaultHostCodes.Match(p) {
			t.Errorf("%s is matched", p)
		}
	}
	for _, h := range []string{".vscode", ".claude", ".config", ".github", ".local"} {
		if !DefaultHostCodeHeads[h] {
			t.Errorf("%s is not a head", h)
		}
	}
	if DefaultHostCodeHeads[".bashrc"] || DefaultHostCodeHeads["tasks.json"] {
		t.Error("a last component taken for a head")
	}
}
