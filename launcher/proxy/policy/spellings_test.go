package policy

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestArgumentSpellingsFifthRound: every spelling of a path outside the
// scope or of a secret, as the argument of a tool the proxy does not know
// ("other", checked by how strings look) and of the filesystem server's
// read_text_file (its own rules). Each is refused except the few that the
// server reading them reads inside the scope (passes below). New in the
// fifth round: names with spaces, U+FEFF or U+200B around them, which a
// server that trims its arguments reads as the path inside.
func TestArgumentSpellingsFifthRound(t *testing.T) {
	_, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	sc, _ := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"other", "read_text_file", "move_file"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, base, time.Now())
	p, _ := New(Config{Scope: sc, Home: filepath.Join(base, "allowed"), WorkDir: filepath.Join(base, "outside")})
	A := filepath.Join(base, "allowed")
	O := filepath.Join(base, "outside")
	cases := []string{
		"file://" + O + "/probe.txt",
		"file://127.0.0.1" + O + "/probe.txt",
		"file:" + O + "/probe.txt",
		"file:///" + O + "/probe.txt",
		"file:////" + O + "/probe.txt",
		"file://" + A + "/..%2f..%2foutside/probe.txt",
		"file://" + A + "/%2e%2e/outside/probe.txt",
		"file://" + A + "/%2E%2E/outside/probe.txt",
		A + "/%2e%2e/outside/probe.txt",
		A + "\\..\\outside\\probe.txt",
		"..\\outside\\probe.txt",
		"C:\\outside\\probe.txt",
		A + "/．．/outside/probe.txt",
		A + "/\u2025/outside/probe.txt",
		A + "/.e\u0301nv",
		A + "/.ENV",
		A + "/.Env",
		A + "/.GIT/config",
		A + "/.git/config",
		A + "//.git/config",
		A + "/./.git/config",
		A + "/sub/../.env",
		A + "/.env/",
		A + "/.env\x00",
		"~/.env",
		"~/../outside/probe.txt",
		"$HOME/../outside/probe.txt",
		"${HOME}/.env",
		"$PWD/probe.txt",
		"../outside/probe.txt",
		"./../outside/probe.txt",
		"probe.txt",
		"outside/probe.txt",
		"allowed/../outside/probe.txt",
		A + "/escape/probe.txt",
		A + "/escape",
		"/proc/self/root" + O + "/probe.txt",
		"/proc/self/cwd/probe.txt",
		"/dev/fd/0",
		strings.Repeat("a/", 3000) + "x",
		"%2Fetc%2Fpasswd",
		"%2e%2e%2foutside%2fprobe.txt",
		"file%3A%2F%2F" + O + "/probe.txt",
		"FILE://" + O + "/probe.txt",
		" " + O + "/probe.txt",
		O + "/probe.txt ",
		"\t" + O + "/probe.txt",
		"\n" + O + "/probe.txt",
		"\u00a0" + O + "/probe.txt",
		"\ufeff" + O + "/probe.txt",
		"\u200b" + O + "/probe.txt",
	}
	// What each server reads inside the scope (or as no file at all):
	// the filesystem server resolves relative names, and names it does not
	// decode, under its first allowed directory; a Windows drive path is a
	// relative name on Linux, and a name longer than PATH_MAX is no file.
	passes := map[string]bool{
		"read_text_file " + A + "/%2e%2e/outside/probe.txt": true,
		"read_text_file " + A + "/．．/outside/probe.txt":     true,
		"read_text_file " + A + "/\u2025/outside/probe.txt": true,
		"read_text_file probe.txt":                          true,
		"read_text_file outside/probe.txt":                  true,
		"read_text_file allowed/../outside/probe.txt":       true,
		"read_text_file %2Fetc%2Fpasswd":                    true,
		"read_text_file %2e%2e%2foutside%2fprobe.txt":       true,
		"read_text_file file%3A%2F%2F" + O + "/probe.txt":   true,
		"read_text_file  " + O + "/probe.txt":               true,
		"read_text_file \u00a0" + O + "/probe.txt":          true,
		"other C:\\outside\\probe.txt":                      true,
		"other " + strings.Repeat("a/", 3000) + "x":         true,
	}
	for _, c := range cases {
		for _, tool := range []string{"other", "read_text_file"} {
			key := "q"
			if tool == "read_text_file" {
				key = "path"
			}
			args, _ := json.Marshal(map[string]any{key: c})
			_, d := p.CheckArguments(tool, args, eff)
			if want := passes[tool+" "+c]; (d == nil) != want {
				t.Errorf("%s %q: denial %v, want passed=%v", tool, c, d, want)
			}
		}
	}
}
