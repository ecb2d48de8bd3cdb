package policy

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// TestArgumentSpellingsSixthRound (guards): Unicode case and compatibility
// variants of secrets, Windows and UNC spellings, file: URI variants and
// very long names, as the argument of a tool the proxy does not know and
// of read_text_file.
func TestArgumentSpellingsSixthRound(t *testing.T) {
	_, base := fixture(t)
	eff := []string{filepath.Join(base, "allowed")}
	sc, _ := schema.Canonicalize(&schema.Scope{
		ScopeID: "t", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"other", "read_text_file"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5,
	}, base, time.Now())
	p, _ := New(Config{Scope: sc, Home: filepath.Join(base, "allowed"), WorkDir: filepath.Join(base, "outside")})
	A := filepath.Join(base, "allowed")
	O := filepath.Join(base, "outside")
	refused := []string{
		A + "/.\u017fsh/id_rsa",    // long s: NFKC "s"
		A + "/.\uff25\uff2e\uff36", // fullwidth ENV
		A + "/\uff0eenv",           // fullwidth full stop
		A + "/.ENV.local",
		A + "/Credentials.JSON",
		A + "/ID_RSA.pub",
		"//" + O[1:] + "/probe.txt",
		"\\\\?\\" + O + "\\probe.txt",
		"\\\\server\\share\\x",
		"file://server/share/x",
		"file://localhost" + O + "/probe.txt",
		"file:" + O + "/probe.txt;type=a",
		"file://" + O + "/probe.txt?x=1",
		"file://" + O + "/probe.txt#frag",
		"file://" + O + "/%70robe.txt",
		"file://" + A + "/%2Eenv",
		"FiLe://" + O + "/probe.txt",
		"file://" + A + "/.env",
		A + "/" + strings.Repeat("x", 5000),
		"/" + strings.Repeat("a/", 2100) + "x",
	}
	for _, c := range refused {
		for _, tool := range []string{"other", "read_text_file"} {
			key := "q"
			if tool == "read_text_file" {
				key = "path"
			}
			args, _ := json.Marshal(map[string]any{key: c})
			// The filesystem server reads compatibility forms as they are
			// (a file named ".ＥＮＶ", which is not .env): passed to it.
			if tool == "read_text_file" && strings.ContainsAny(c, "\uff25\uff0e") {
				continue
			}
			if _, d := p.CheckArguments(tool, args, eff); d == nil {
				t.Errorf("%s %q passed", tool, c)
			}
		}
	}
	// Text, not a path: a data: URI that holds a file URI is passed (a
	// server would read the data, not the file).
	args, _ := json.Marshal(map[string]any{"q": "data:text/plain,file:///etc/passwd"})
	if _, d := p.CheckArguments("other", args, eff); d != nil {
		t.Errorf("a data: URI = %v", d)
	}
}
