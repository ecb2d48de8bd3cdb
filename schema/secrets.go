package schema

import (
	"fmt"
	"path"
	"strings"
)

// DefaultSecretPatterns name paths that hold credentials wherever they are.
// The proxy refuses them even inside a scope and the daemon classes them
// "secret": one list, so both layers agree on what a secret is. Each pattern
// is a '/'-separated sequence of glob components matched, ignoring case,
// against any run of consecutive components of the path; a trailing '/' is
// ignored.
var DefaultSecretPatterns = []string{
	".env", ".env.*", "*.env",
	".git", ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".password-store",
	"id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx",
	"*.gpg", "*.asc", "authorized_keys", "known_hosts", "kubeconfig",
	".netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", ".htpasswd",
	"credentials", "credentials.json", "credentials.*", "*.tfstate", "secrets.*",
	"etc/shadow", "etc/gshadow", "etc/ssl/private",
	// Since session 8: direnv's and wrangler's per-project secrets, state
	// backups (the state's secrets), the GitHub CLI's token, Vault's,
	// Terraform's CLI credentials, s3cmd's, boto's and Docker's legacy
	// keys, PuTTY private keys, MySQL's client password.
	".envrc", ".dev.vars", "*.tfstate.backup", ".config/gh", ".vault-token", ".terraformrc", ".s3cfg", ".boto",
	".dockercfg", "*.ppk", ".my.cnf",
	// Since session 9: the credentials of the AI agents on the hosts this
	// fence guards (Claude Code's .claude/.credentials.json, Codex's
	// .codex/auth.json, Gemini CLI's OAuth tokens, GitHub Copilot's, the
	// Hugging Face token), MySQL's obfuscated login paths, Kerberos
	// keytabs, container registry logins, rclone's remotes, SOPS's age
	// keys, CLI tokens (hub, glab, doctl, hcloud, Databricks, Firebase,
	// Vercel, wrangler's OAuth token, ngrok, Oracle Cloud), Maven's master
	// password, WireGuard's keys, the desktop keyring, browser and mail
	// profiles (saved logins, session cookies), and shell and database
	// client histories (passwords typed on command lines).
	".credentials.json", ".credentials", ".codex/auth.json", "oauth_creds.json", ".config/github-copilot",
	".huggingface", "huggingface/token", "huggingface/stored_tokens", ".mylogin.cnf", "*.keytab",
	"containers/auth.json", "composer/auth.json", "rclone.conf", "sops/age", ".config/hub", ".config/glab-cli",
	".config/doctl", ".config/hcloud", ".databrickscfg", "firebase-tools.json", "com.vercel.cli", ".wrangler",
	"ngrok.yml", ".oci", "settings-security.xml", "etc/wireguard", ".local/share/keyrings", ".mozilla",
	".thunderbird", ".config/google-chrome", ".config/chromium", ".config/bravesoftware", ".config/microsoft-edge",
	".bash_history", ".zsh_history", ".sh_history", ".psql_history", ".mysql_history",
	// Since session 10: the MCP clients' server lists that mcpwarden wrap
	// edits (Claude Desktop's, Claude Code's project .mcp.json and user
	// .claude.json, Cursor's, VS Code's workspace and profile mcp.json):
	// they hold the servers' tokens (env, headers) and the `mcpwarden run`
	// wrapper itself, which a server with a write scope holding one
	// removed for its own next start; mcpwarden's fleet credentials (NATS
	// .creds files and nkey seeds); more credential stores (Yarn's
	// npmAuthToken, Maven's and Gradle's user settings, Sentry's, Kaggle's,
	// Stripe's, Supabase's, Fly.io's, WakaTime's, Netlify's tokens, Helm's
	// repository passwords) and the remaining interactive histories.
	".mcp.json", "claude_desktop_config.json", ".claude.json", ".cursor/mcp.json", ".vscode/mcp.json",
	"code/user/mcp.json", "*.creds", "*.nk", ".yarnrc.yml", ".m2/settings.xml", ".gradle/gradle.properties",
	".sentryclirc", ".kaggle", ".config/stripe", ".supabase/access-token", ".fly", ".wakatime.cfg",
	"helm/repositories.yaml", ".config/netlify", "fish_history", ".rediscli_history", ".node_repl_history",
	".python_history", ".sqlite_history", ".dbshell", "mongosh_repl_history",
	// Since session 11: the shells' start-up files. They export tokens
	// (`export GITHUB_TOKEN=...` in .bashrc is the common way to hand one
	// to CLI tools), and they are code the user's next shell runs outside
	// every fence: a server with a write scope at a home directory that
	// appended a line to .bashrc ran it as the user at the next login.
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".profile", ".zshrc",
	".zshenv", ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".mkshrc", "fish/config.fish", ".cshrc", ".tcshrc",
	// git's user configuration: tokens in url.<base>.insteadOf rewrites
	// and http.extraHeader, and commands git runs (core.pager,
	// core.fsmonitor, "!" aliases).
	".gitconfig", ".config/git/config",
}

// DefaultSecrets is DefaultSecretPatterns compiled.
var DefaultSecrets = mustSecrets(DefaultSecretPatterns)

func mustSecrets(patterns []string) *Secrets {
	s, err := NewSecrets(patterns)
	if err != nil {
		panic(err)
	}
	return s
}

// Secrets matches paths against secret patterns. Patterns are compiled to
// literal, prefix and suffix tests where they can be: this runs on every
// path argument of every call.
type Secrets struct {
	patterns [][]matcher
	// byName: what a component decides by its exact (lowercased) text,
	// in one lookup: whether it is a single-component literal pattern, and
	// the multi-component patterns whose last component is that literal
	// (tested only where they can end, instead of each at every place).
	byName map[string]nameRule
	// suffixes: single-component "*.x" patterns, by their ".x" (a
	// component ends with one exactly when it is the component from one of
	// its dots on): one lookup per dot instead of one test per pattern.
	suffixes map[string]bool
}

type matchKind int

const (
	matchLiteral matchKind = iota
	matchPrefix            // "x*"
	matchSuffix            // "*x"
	matchGlob
)

type matcher struct {
	kind matchKind
	text string
}

func (m matcher) match(comp string) bool {
	switch m.kind {
	case matchLiteral:
		return comp == m.text
	case matchPrefix:
		return strings.HasPrefix(comp, m.text)
	case matchSuffix:
		return strings.HasSuffix(comp, m.text)
	}
	ok, _ := path.Match(m.text, comp)
	return ok
}

func compile(part string) matcher {
	const meta = "*?[\\"
	switch {
	case !strings.ContainsAny(part, meta):
		return matcher{matchLiteral, part}
	case strings.HasSuffix(part, "*") && !strings.ContainsAny(part[:len(part)-1], meta):
		return matcher{matchPrefix, part[:len(part)-1]}
	case strings.HasPrefix(part, "*") && !strings.ContainsAny(part[1:], meta):
		return matcher{matchSuffix, part[1:]}
	}
	return matcher{matchGlob, part}
}

// NewSecrets compiles patterns; a malformed glob is an error.
func NewSecrets(patterns []string) (*Secrets, error) {
	s := &Secrets{byName: map[string]nameRule{}, suffixes: map[string]bool{}}
	for _, p := range patterns {
		p = strings.Trim(strings.ToLower(p), "/")
		if p == "" {
			return nil, fmt.Errorf("secret pattern is empty")
		}
		parts := strings.Split(p, "/")
		var ms []matcher
		for _, part := range parts {
			if _, err := path.Match(part, ""); err != nil {
				return nil, fmt.Errorf("secret pattern %q: %w", p, err)
			}
			ms = append(ms, compile(part))
		}
		if len(ms) == 1 && ms[0].kind == matchLiteral {
			r := s.byName[ms[0].text]
			r.literal = true
			s.byName[ms[0].text] = r
			continue
		}
		if len(ms) == 1 && ms[0].kind == matchSuffix && strings.HasPrefix(ms[0].text, ".") {
			s.suffixes[ms[0].text] = true
			continue
		}
		if last := ms[len(ms)-1]; len(ms) > 1 && last.kind == matchLiteral {
			r := s.byName[last.text]
			r.ending = append(r.ending, ms)
			s.byName[last.text] = r
			continue
		}
		s.patterns = append(s.patterns, ms)
	}
	return s, nil
}

// Match reports whether the absolute path p names a secret or lies inside one.
func (s *Secrets) Match(p string) bool {
	// The components, as strings.Split gives them, into a buffer that
	// stays on the stack for paths of up to 32 components (this runs for
	// every path of every decided call).
	var buf [32]string
	comps := buf[:0]
	for rest, more := strings.Trim(strings.ToLower(p), "/"), true; more; {
		var c string
		c, rest, more = strings.Cut(rest, "/")
		comps = append(comps, c)
	}
	for k := range comps {
		if s.endsHere(comps[:k+1]) {
			return true
		}
	}
	for _, pat := range s.patterns {
		for i := 0; i+len(pat) <= len(comps); i++ {
			if matchRun(pat, comps[i:]) {
				return true
			}
		}
	}
	return false
}

// nameRule is what a component's exact text decides (Secrets.byName).
type nameRule struct {
	literal bool        // a single-component pattern
	ending  [][]matcher // multi-component patterns whose last component it is
}

// endsHere reports whether a literal, a suffix or a multi-component
// pattern ending in a literal matches a run of comps ending with its last
// component (comps not empty).
func (s *Secrets) endsHere(comps []string) bool {
	n := len(comps)
	c := comps[n-1]
	if r, ok := s.byName[c]; ok {
		if r.literal {
			return true
		}
		for _, pat := range r.ending {
			if i := n - len(pat); i >= 0 && matchRun(pat, comps[i:]) {
				return true
			}
		}
	}
	return s.dotSuffix(c)
}

// dotSuffix reports whether component c ends with one of the suffixes.
func (s *Secrets) dotSuffix(c string) bool {
	for i := strings.LastIndexByte(c, '.'); i >= 0; i = strings.LastIndexByte(c[:i], '.') {
		if s.suffixes[c[i:]] {
			return true
		}
	}
	return false
}

// matchRun reports whether pat matches the first len(pat) of comps.
func matchRun(pat []matcher, comps []string) bool {
	for j, m := range pat {
		if !m.match(comps[j]) {
			return false
		}
	}
	return true
}

// MatchLast reports whether some pattern matches a run of comps that ends
// with its last component; comps are path components already lowercased
// (strings.ToLower). A walk that stops at every match calls it once per
// entry with the components from where it started: Match(p) is true
// exactly when MatchLast holds for some prefix of p's components.
func (s *Secrets) MatchLast(comps []string) bool {
	n := len(comps)
	if n == 0 {
		return false
	}
	if s.endsHere(comps) {
		return true
	}
	for _, pat := range s.patterns {
		if i := n - len(pat); i >= 0 && matchRun(pat, comps[i:]) {
			return true
		}
	}
	return false
}
