package launcher

import (
	"regexp"
	"strings"
	"testing"
)

// The regular expressions the environment matchers replaced (env.go): the
// oracle the hand-written matchers are checked against.
var (
	oracleRuntimeVar      = regexp.MustCompile(`^(LD_.*|DYLD_.*|NODE_OPTIONS|NODE_PATH|NODE_REPL_EXTERNAL_MODULE|PYTHONPATH|PYTHONHOME|PYTHONSTARTUP|PYTHONUSERBASE|PYTHONINSPECT|PYTHONWARNINGS|PYTHONBREAKPOINT|PYTHONPLATLIBDIR|PYTHONPYCACHEPREFIX|NODE_COMPILE_CACHE|PERL5LIB|PERL5OPT|PERLLIB|RUBYOPT|RUBYLIB|BASH_ENV|ENV|SHELLOPTS|PS4|PROMPT_COMMAND|GCONV_PATH|LOCPATH|NLSPATH|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|MALLOC_.*|GLIBC_TUNABLES|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|GIT_CONFIG.*|GIT_SSH|GIT_SSH_COMMAND|GIT_ASKPASS|GIT_EXEC_PATH|GIT_TEMPLATE_DIR|SSH_ASKPASS|SUDO_ASKPASS|EDITOR|VISUAL|PAGER|LESSOPEN|LESSCLOSE|MCPWARDEN_.*|TMP|TEMP)$`)
	oracleCredentialName  = regexp.MustCompile(`TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|CREDS|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|_KEY$|^KEY$|AUTH|COOKIE|SESSION|_PAT$|^PAT$|_PASS$|^PASS$|_PWD$|_PW$|SIGNING|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^GCLOUD_|^GH_|^GITHUB_|^GITLAB_|^NPM_CONFIG__|^SSH_AGENT|^SSH_AUTH|^GPG_AGENT|^KUBECONFIG$|^DOCKER_CONFIG$|^KRB5CCNAME$|^DOCKER_HOST$|^PGPASSFILE$|^NETRC$|^DISPLAY$|^WAYLAND_DISPLAY$|^XDG_RUNTIME_DIR$|^DBUS_SYSTEM_BUS_ADDRESS$|^SSLKEYLOGFILE$|^VAULT_|^OP_`)
	oracleCredentialValue = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:[^/\s@]+@|\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|npm_[A-Za-z0-9]{30,}|[sr]k_(live|test)_[A-Za-z0-9]{16,}|xapp-[A-Za-z0-9-]{10,}|SG\.[A-Za-z0-9_-]{20,}|ya29\.[A-Za-z0-9_-]{20,}|GOCSPX-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.)|-----BEGIN [A-Z ]*PRIVATE KEY-----|(^|[;?&\t\n\f\r ])([Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]|[Pp][Ww][Dd]|[Aa][Cc][Cc][Oo][Uu][Nn][Tt][Kk][Ee][Yy]|[Ss][Hh][Aa][Rr][Ee][Dd][Aa][Cc][Cc][Ee][Ss][Ss][Kk][Ee][Yy]|[Ss][Hh][Aa][Rr][Ee][Dd][Aa][Cc][Cc][Ee][Ss][Ss][Ss][Ii][Gg][Nn][Aa][Tt][Uu][Rr][Ee]|[Ss][Ii][Gg]|[Xx]-[Aa][Mm][Zz]-[Ss][Ii][Gg][Nn][Aa][Tt][Uu][Rr][Ee]|[Xx]-[Gg][Oo][Oo][Gg]-[Ss][Ii][Gg][Nn][Aa][Tt][Uu][Rr][Ee])=[^;&\t\n\f\r ]|hooks\.slack\.com/services/|discord(app)?\.com/api/webhooks/|\b[Bb][Ee][Aa][Rr][Ee][Rr] [A-Za-z0-9._~+/-]{16,}`)
)

// checkMatchers compares the matchers with the oracle for one variable.
// The only difference allowed is on the safe side: a runtime-variable
// family (LD_*, ...) matches names with a newline in them, which the
// oracle's '.' does not cross.
func checkMatchers(t *testing.T, name, value string) {
	t.Helper()
	if got, want := isRuntimeVar(name), oracleRuntimeVar.MatchString(name); got != want && !(got && strings.Contains(name, "\n")) {
		t.Errorf("isRuntimeVar(%q) = %v, the expression says %v", name, got, want)
	}
	if got, want := credentialName(name), oracleCredentialName.MatchString(strings.ToUpper(name)); got != want {
		t.Errorf("credentialName(%q) = %v, the expression says %v", name, got, want)
	}
	if got, want := credentialValue(value), oracleCredentialValue.MatchString(value); got != want {
		t.Errorf("credentialValue(%q) = %v, the expression says %v", value, got, want)
	}
}

func TestEnvMatchers(t *testing.T) {
	tok := func(prefix string, n int, c byte) string { return prefix + strings.Repeat(string(c), n) }
	vars := []struct{ name, value string }{
		{"LD_PRELOAD", ""}, {"LD_", ""}, {"XLD_PRELOAD", ""}, {"ld_preload", ""}, {"DYLD_INSERT_LIBRARIES", ""},
		{"NODE_OPTIONS", ""}, {"NODE_OPTIONS2", ""}, {"ENV", ""}, {"ENVX", ""}, {"MALLOC_ARENA_MAX", ""},
		{"GIT_CONFIG_GLOBAL", ""}, {"GIT_CONFIG", ""}, {"GIT_SSH", ""}, {"GIT_SSHX", ""}, {"MCPWARDEN_X", ""},
		{"MCPWARDEN", ""}, {"TMP", ""}, {"TEMP", ""}, {"TMPX", ""}, {"PAGER", ""}, {"_JAVA_OPTIONS", ""},

		{"GITHUB_TOKEN", ""}, {"github_token", ""}, {"MYSQL_PWD", ""}, {"PWD", ""}, {"OLDPWD", ""}, {"X_PWDX", ""}, {"MY_SECRET_THING", ""}, {"DB_PASSWORD", ""}, {"passphrase", ""},
		{"OPENAI_API_KEY", ""}, {"APIKEY", ""}, {"API-KEY", ""}, {"AWS_ACCESS_KEY_ID", ""}, {"AWS_REGION", ""},
		{"SIGNING_KEY", ""}, {"MONKEY", ""}, {"KEY", ""}, {"KEYS", ""}, {"SSH_KEY", ""}, {"KEYBOARD", ""},
		{"PAT", ""}, {"GH_PAT", ""}, {"PATH", ""}, {"PASS", ""}, {"USER_PASS", ""}, {"PASSAGE", ""}, {"COMPASS", ""},
		{"KUBECONFIG", ""}, {"KUBECONFIG_X", ""}, {"DOCKER_CONFIG", ""}, {"OP_SERVICE_ACCOUNT", ""}, {"SHOP_URL", ""},
		{"GOOGLE_APPLICATION_CREDENTIALS", ""}, {"NPM_CONFIG__AUTH", ""}, {"NPM_CONFIG_REGISTRY", ""},
		{"Session_Cookie", ""}, {"AUTHOR", ""}, {"OAUTH_X", ""}, {"VAULT_ADDR", ""}, {"GPG_AGENT_INFO", ""},
		{"ıtoken", ""}, {"\xff_key", ""}, {"KRB5CCNAME", ""}, {"DOCKER_HOST", ""}, {"DOCKER_HOSTNAME", ""}, {"DISPLAY", ""},
		{"XDG_RUNTIME_DIR", ""}, {"XDG_DATA_HOME", ""}, {"LESSOPEN", ""}, {"SUDO_ASKPASS", ""}, {"NETRC", ""},

		{"X", "postgres://app:hunter2@db:5432/x"}, {"X", "https://example.com/x"}, {"X", "https://user@example.com"},
		{"X", "http://u:@h"}, {"X", "http://:p@h"}, {"X", "1://u:p@h"}, {"X", "a1://u:p@h"}, {"X", "+a://u:p@h"},
		{"X", "://u:p@h"}, {"X", "x://u:p/@h"}, {"X", "x://u:p @h"}, {"X", "x://u:p:q@h"}, {"X", "x://u/x:p@h"},
		{"X", "a://b://u:p@"}, {"X", "see x://u:p@h and more"}, {"X", "x://u\t:p@h"}, {"X", "x://u:p\v@h"},
		{"X", "x://é:p@h"}, {"X", "x://u:\xff@h"}, {"X", "é1x://u:p@h"}, {"X", "-://u:p@h"},

		{"X", tok("ghp_", 20, 'a')}, {"X", tok("ghp_", 19, 'a')}, {"X", tok("ghx_", 20, 'a')}, {"X", "a" + tok("ghp_", 20, 'a')},
		{"X", "_" + tok("ghp_", 20, 'a')}, {"X", "-" + tok("ghp_", 20, 'a')}, {"X", "é" + tok("ghr_", 20, 'Z')},
		{"X", tok("github_pat_", 20, '_')}, {"X", tok("glpat-", 20, '-')}, {"X", tok("glpat-", 19, '-')},
		{"X", tok("xoxb-", 10, '-')}, {"X", tok("xoxz-", 10, '-')}, {"X", tok("xoxs-", 9, 'a')},
		{"X", tok("sk-", 20, '_')}, {"X", "task-" + strings.Repeat("a", 20)}, {"X", tok("AKIA", 16, '7')},
		{"X", tok("AKIA", 15, '7')}, {"X", tok("AKIA", 16, 'a')}, {"X", tok("ASIA", 17, 'Q')}, {"X", tok("AIza", 30, '-')},
		{"X", tok("AIza", 29, '-')}, {"X", tok("npm_", 30, '0')}, {"X", tok("npm_", 30, '_')}, {"X", "ghp_short " + tok("ghp_", 20, 'b')},

		{"X", "eyJ" + strings.Repeat("a", 10) + "." + strings.Repeat("b", 10) + "."}, {"X", "eyJ" + strings.Repeat("a", 9) + "." + strings.Repeat("b", 10) + "."},
		{"X", "eyJ" + strings.Repeat("a", 10) + "." + strings.Repeat("b", 10)}, {"X", "xeyJ" + strings.Repeat("a", 10) + "." + strings.Repeat("b", 10) + "."},
		{"X", "eyJ" + strings.Repeat("a", 10) + ".." + strings.Repeat("b", 10) + "."}, {"X", "eyJshort eyJ" + strings.Repeat("-", 10) + "." + strings.Repeat("_", 12) + ".sig"},

		{"X", "-----BEGIN PRIVATE KEY-----"}, {"X", "-----BEGIN RSA PRIVATE KEY-----\nMII"}, {"X", "-----BEGIN PUBLIC KEY-----"},
		{"X", "-----BEGIN OPENSSH PRIVATE KEY----"}, {"X", "-----BEGIN PRIVATE KEYS-----"}, {"X", "-----BEGIN  PRIVATE KEY-----"},
		{"X", "-----BEGIN rsa PRIVATE KEY-----"}, {"X", "-----BEGIN X-----BEGIN EC PRIVATE KEY-----"}, {"X", "-----BEGINPRIVATE KEY-----"},
		{"X", ""}, {"X", "plain value"}, {"X", "/usr/bin:/bin"},
		{"X", "jdbc:mysql://db/x?user=app&password=p"}, {"X", "Server=db;User Id=app;Password=p;"}, {"X", "PWD=x"},
		{"X", "Password=;"}, {"X", "password="}, {"X", "mypassword=x"}, {"X", "a password=x"}, {"X", "pwd =x"},
		{"X", "https://hooks.slack.com/services/T0/B0/x"}, {"X", "https://discordapp.com/api/webhooks/1/x"},
		{"X", "https://discord.com/api/webhook/1"}, {"X", "PAſSWORD=x"},
		// Session 11: a *_PW name, Azure's and presigned URLs' keys and
		// signatures, more token formats; near misses.
		{"LDAP_BIND_PW", ""}, {"PW", ""}, {"PWA_MODE", ""}, {"X_PWX", ""},
		{"X", "AccountName=a;AccountKey=k;"}, {"X", "Endpoint=sb://n/;SharedAccessKey=k"}, {"X", "SharedAccessSignature=sr&sig=x"},
		{"X", "https://h/c?sv=1&sig=abc"}, {"X", "https://h/c?sig_version=2"}, {"X", "sig="}, {"X", "&X-AMZ-SIGNATURE=ab"},
		{"X", "?x-goog-signature=1"}, {"X", "AccountKeyName=x"}, {"X", "ſig=x"},
		{"X", tok("sk_live_", 16, 'a')}, {"X", tok("sk_live_", 15, 'a')}, {"X", tok("rk_test_", 16, '9')}, {"X", tok("sk_prod_", 16, 'a')},
		{"X", "x" + tok("sk_live_", 16, 'a')}, {"X", tok("xapp-", 10, '-')}, {"X", tok("xapp-", 9, '1')}, {"X", tok("SG.", 20, '_')},
		{"X", "see SG.md"}, {"X", tok("ya29.", 20, 'a')}, {"X", tok("GOCSPX-", 20, 'Z')}, {"X", tok("hf_", 30, 'a')},
		{"X", tok("hf_", 29, 'a')}, {"X", "self_" + strings.Repeat("a", 30)},
		{"X", "Authorization: Bearer " + strings.Repeat("a", 16)}, {"X", "bearer " + strings.Repeat("/", 16)}, {"X", "BEARER " + strings.Repeat("x", 15)},
		{"X", "xBearer " + strings.Repeat("a", 16)}, {"X", "Bearer  " + strings.Repeat("a", 16)}, {"X", "Bearer\t" + strings.Repeat("a", 16)},
		{"X", "Bearer " + strings.Repeat("a", 8) + " " + strings.Repeat("a", 8)}, {"X", "beareR ~.-_+/" + strings.Repeat("Z", 10)},
		{"X", "bearſr " + strings.Repeat("a", 16)},
	}
	for _, v := range vars {
		checkMatchers(t, v.name, v.value)
	}
}

// FuzzEnvMatchers: the hand-written matchers decide as the regular
// expressions they replaced, for any name and value.
func FuzzEnvMatchers(f *testing.F) {
	f.Add("GITHUB_TOKEN", "x://u:p@h")
	f.Add("LD_\nX", "eyJaaaaaaaaaa.bbbbbbbbbb.")
	f.Add("gh_pat", "-----BEGIN EC PRIVATE KEY-----")
	f.Add("AKIA", "AKIAAAAAAAAAAAAAAAAA")
	f.Add("a", "xoxb-1234567890 sk-")
	f.Add("a", "x;Pwd=y&password=")
	f.Add("LDAP_BIND_PW", "a;AccountKey=k&sig=s sk_live_aaaaaaaaaaaaaaaa SG.aaaaaaaaaaaaaaaaaaaa hf_ Bearer aaaaaaaaaaaaaaaa")
	f.Fuzz(func(t *testing.T, name, value string) {
		checkMatchers(t, name, value)
		checkMatchers(t, value, name)
	})
}
