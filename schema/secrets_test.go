package schema

import (
	"path"
	"strconv"
	"strings"
	"testing"
)

func TestSecretsCompiled(t *testing.T) {
	s, err := NewSecrets(DefaultSecretPatterns)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"/w/.env": true, "/w/.env.local": true, "/w/prod.env": true, "/w/.git/HEAD": true, "/w/x/.SSH/config": true,
		"/w/id_rsa.pub": true, "/w/cert.PEM": true, "/w/.config/gcloud/creds": true, "/w/.config/other": false,
		"/w/environment.txt": false, "/w/gitignore": false, "/w/src/main.go": false, "/w/credentials": true, "/w/a.tfstate": true,
		"/w/my.envy": false, "/etc/shadow": true, "/srv/etc/shadow": true, "/etc/ssl/private/k": true,
		"/etc/ssl/certs/ca.crt": false, "/home/u/.ssh/authorized_keys": true, "/w/backup.gpg": true,
		"/w/.envrc": true, "/w/.dev.vars": true, "/w/terraform.tfstate.backup": true, "/h/.config/gh/hosts.yml": true,
		"/h/.vault-token": true, "/h/.terraformrc": true, "/h/.s3cfg": true, "/h/.boto": true, "/h/.dockercfg": true,
		"/w/deploy.PPK": true, "/h/.my.cnf": true, "/h/.config/ghostty/config": false, "/w/envrc.md": false,
		"/w/.dev.vars.example": false, "/w/my.cnf": false,
		// Session 9: agent credentials and the other stores, and near misses.
		"/h/.claude/.credentials.json": true, "/h/.codex/auth.json": true, "/h/.gemini/oauth_creds.json": true,
		"/h/.config/github-copilot/apps.json": true, "/h/.cache/huggingface/token": true, "/h/.huggingface/token": true,
		"/h/.mylogin.cnf": true, "/etc/krb5.KEYTAB": true, "/h/.config/containers/auth.json": true,
		"/h/.config/rclone/rclone.conf": true, "/h/.config/sops/age/keys.txt": true, "/h/.config/hub": true,
		"/h/.wrangler/config/default.toml": true, "/h/.oci/config": true, "/etc/wireguard/wg0.conf": true,
		"/h/.mozilla/firefox/p/key4.db": true, "/h/.config/BraveSoftware/B/Default/Cookies": true,
		"/h/.local/share/keyrings/login.keyring": true, "/h/.bash_history": true, "/h/.psql_history": true,
		"/w/auth.json": false, "/w/.codex/config.toml": false, "/w/src/token": false, "/w/huggingface/model.bin": false,
		"/w/containers/list.json": false, "/w/keytab.md": false, "/h/.config/hubble": false, "/w/age/keys.txt": false,
		"/w/history.md": false, "/w/.config/chromium-docs": false,
		// Session 10: the MCP clients' server lists, fleet credentials,
		// more stores and histories, and near misses.
		"/w/.mcp.json": true, "/h/Library/claude_desktop_config.json": true, "/h/.claude.json": true,
		"/h/.cursor/mcp.json": true, "/w/.vscode/mcp.json": true, "/h/.config/Code/User/mcp.json": true,
		"/w/fleet.CREDS": true, "/s/nats-auth/collect.nk": true, "/w/.yarnrc.yml": true, "/h/.m2/settings.xml": true,
		"/h/.gradle/gradle.properties": true, "/h/.sentryclirc": true, "/h/.kaggle/kaggle.json": true,
		"/h/.config/stripe/config.toml": true, "/h/.supabase/access-token": true, "/h/.fly/config.yml": true,
		"/h/.wakatime.cfg": true, "/h/.config/helm/repositories.yaml": true, "/h/.config/netlify/config.json": true,
		"/h/.local/share/fish/fish_history": true, "/h/.rediscli_history": true, "/h/.node_repl_history": true,
		"/h/.python_history": true, "/h/.sqlite_history": true, "/h/.dbshell": true,
		"/h/.mongodb/mongosh/mongosh_repl_history": true,
		"/w/mcp.json": false, "/w/.claude/settings.json": false, "/w/.vscode/settings.json": false,
		"/w/claude_desktop_config.json.md": false, "/w/docs/mcp.json": false, "/w/nats.conf": false,
		"/w/creds.md": false, "/w/nk": false, "/w/.yarnrc": false, "/w/settings.xml": false,
		"/w/gradle.properties": false, "/w/helm/values.yaml": false, "/w/fly.toml": false, "/w/.config/netlify-docs": false,
		// Session 11: the shells' start-up files, and near misses.
		"/h/.bashrc": true, "/h/.BASH_PROFILE": true, "/h/.bash_login": true, "/h/.bash_logout": true,
		"/h/.bash_aliases": true, "/h/.profile": true, "/h/.zshrc": true, "/h/.zshenv": true, "/h/.zprofile": true,
		"/h/.zlogin": true, "/h/.zlogout": true, "/h/.kshrc": true, "/h/.mkshrc": true,
		"/h/.config/fish/config.fish": true, "/h/.cshrc": true, "/h/.tcshrc": true, "/h/.gitconfig": true,
		"/h/.config/git/config": true, "/w/.config/git/ignore": false, "/w/gitconfig.md": false, "/w/git/config": false,
		"/w/bashrc.md": false, "/w/profile": false, "/w/.profile.d/x": false, "/w/docs/.bashrc.example": false,
		"/w/config.fish": false, "/w/.zshrc.d/x": false,
	} {
		if got := s.Match(p); got != want {
			t.Errorf("Match(%q) = %v, want %v", p, got, want)
		}
	}
	// Past the components kept on the stack, and the edges of splitting.
	deep := strings.Repeat("/d", 40)
	for p, want := range map[string]bool{
		deep + "/.env": true, deep + "/etc/ssl/private/k": true, deep + "/.config/gcloud/x": true, deep + "/x": false,
		"/": false, "": false, "//": false, ".env": true, "/w//.env": true,
	} {
		if got := s.Match(p); got != want {
			t.Errorf("Match(%q) = %v, want %v", p, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Match("/srv/base/allowed/probe.txt") }); n != 0 {
		t.Errorf("Match: %v allocations, budget 0", n)
	}
	if _, err := NewSecrets([]string{"[a-"}); err == nil {
		t.Error("malformed glob accepted")
	}
}

func FuzzSecretsMatch(f *testing.F) {
	f.Add("/w/.env")
	f.Add("/W/.GIT/config")
	f.Fuzz(func(t *testing.T, p string) {
		// Case folding is part of the contract: a secret stays a secret
		// whatever case a client or filesystem uses.
		if DefaultSecrets.Match(p) != DefaultSecrets.Match(strings.ToUpper(p)) && isASCII(p) {
			t.Fatalf("Match(%q) depends on case", p)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// FuzzSecretsMatchLast: Match of a path is MatchLast of one of its
// prefixes (what the launcher's walk of the scope relies on).
func FuzzSecretsMatchLast(f *testing.F) {
	for _, p := range []string{"a/.env", "x/.config/gcloud/t", "etc/ssl/private/k", "src/main.go", "A/ID_RSA.pub", "a//b"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		comps := strings.Split(strings.Trim(strings.ToLower(p), "/"), "/")
		any := false
		for i := range comps {
			if DefaultSecrets.MatchLast(comps[:i+1]) {
				any = true
				break
			}
		}
		if any != DefaultSecrets.Match(p) {
			t.Fatalf("Match(%q) = %v, MatchLast of its prefixes %v", p, DefaultSecrets.Match(p), any)
		}
	})
}

// globMatch is the patterns' definition, unoptimised: some pattern's
// components, as path.Match globs, match a run of p's lowercased
// components.
func globMatch(patterns []string, p string) bool {
	comps := strings.Split(strings.Trim(strings.ToLower(p), "/"), "/")
	for _, pat := range patterns {
		parts := strings.Split(strings.Trim(strings.ToLower(pat), "/"), "/")
		for i := 0; i+len(parts) <= len(comps); i++ {
			all := true
			for j, part := range parts {
				if ok, _ := path.Match(part, comps[i+j]); !ok {
					all = false
					break
				}
			}
			if all {
				return true
			}
		}
	}
	return false
}

// FuzzSecretsAsGlobs: Match (literals and "*.x" suffixes by lookup, the
// rest by matcher) agrees with the patterns read as plain globs, for the
// built-in list and for one with suffixes not starting with a dot.
func FuzzSecretsAsGlobs(f *testing.F) {
	for _, p := range []string{"/w/.env", "/w/prod.env", "/w/a.b.tfstate.backup", "/w/x.PPK", "/h/.config/gh/hosts.yml",
		"/w/.tfstate", "/w/tfstate.backup", "/w/..env", "/w/x.", "/w/a.pem.bak", "/w/my.cnf", "/w/abcenv"} {
		f.Add(p)
	}
	for _, p := range []string{"/h/.codex/auth.json", "/h/auth.json/.codex", "/a/huggingface/huggingface/token", "/x/sops/age/k"} {
		f.Add(p)
	}
	other := []string{"*env", "*.a.b", "x*.y", "*.z", ".k", "d/e", "*x/e", "p/q/r", "e/e"}
	otherS, err := NewSecrets(other)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := DefaultSecrets.Match(p), globMatch(DefaultSecretPatterns, p); got != want {
			t.Fatalf("Match(%q) = %v, the globs say %v", p, got, want)
		}
		if got, want := otherS.Match(p), globMatch(other, p); got != want {
			t.Fatalf("%v: Match(%q) = %v, the globs say %v", other, p, got, want)
		}
	})
}

// benchNames are the components of a 49,500-entry workspace as the
// launch's walk sees them (500 directories of 99 files below src/), and
// paths as a client names them.
func benchNames() [][]string {
	var out [][]string
	for d := 0; d < 500; d++ {
		dir := "pkg" + strconv.Itoa(d)
		for f := 0; f < 99; f++ {
			out = append(out, []string{"home", "u", "proj", "src", dir, "file" + strconv.Itoa(f) + ".go"})
		}
	}
	return out
}

// BenchmarkSecretsMatchLast: the walk's test of each entry (the built-in
// list; op = one entry).
func BenchmarkSecretsMatchLast(b *testing.B) {
	names := benchNames()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = DefaultSecrets.MatchLast(names[i%len(names)])
	}
}

// BenchmarkSecretsMatch: the proxy's test of a path argument.
func BenchmarkSecretsMatch(b *testing.B) {
	var paths []string
	for _, n := range benchNames()[:990] {
		paths = append(paths, "/"+strings.Join(n, "/"))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = DefaultSecrets.Match(paths[i%len(paths)])
	}
}
