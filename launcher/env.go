package launcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// defaultPATH is used when the launcher itself has no PATH.
const defaultPATH = "/usr/local/bin:/usr/bin:/bin"

// The server's environment.
//
// MCP clients configure stdio servers through the environment: the "env"
// block of an mcpServers entry (MEMORY_FILE_PATH, ALLOWED_DIRECTORIES,
// LOG_LEVEL, ...) is added to what the client starts `mcpwarden run` with,
// and the launcher cannot tell the two apart. So by default the server gets
// the launcher's environment, minus:
//   - names that look like credentials (tokens, keys, passwords, cookies,
//     cloud and registry credentials) and values that carry one (a URL with
//     a password, a known token format): a fenced server that may reach the
//     network could send them anywhere, and a scope never grants them;
//   - variables that change what a runtime loads or runs (LD_*, NODE_OPTIONS,
//     PYTHONPATH, BASH_ENV, ...) and the launcher's own (MCPWARDEN_*);
//   - HOME, TMPDIR, TMP and TEMP, replaced by the run's private temp dir.
//
// Every name dropped this way is reported on stderr (the name only, never
// the value). The operator passes one anyway with --env NAME (or sets it
// with --env NAME=VALUE): credentials reach a server only by name, on the
// command line. --clean-env turns the default around into an allowlist: only
// PATH, the locale, TZ and TERM, plus --env.

// cleanVars are what --clean-env keeps: what a runtime needs to pick a
// locale, a time zone and a terminal type.
var cleanVars = []string{"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "TZ", "TERM"}

// forbiddenVars are never passed: the launcher sets them per run, or they
// would let the server's loader run code the fence did not plan for.
var forbiddenVars = []string{"HOME", "TMPDIR", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"}

// The matchers below are plain string tests, not regular expressions: they
// run for every variable of every launch, and compiling the equivalent
// expressions cost a launch more CPU than the whole fence. The tests keep
// the regular expressions they replace as the oracle (env_match_test.go).

// runtimeVarNames change what a runtime loads or runs: dropped by default,
// passed by --env NAME. runtimeVarPrefixes are whole families of them.
var (
	runtimeVarNames = []string{"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT",
		// PYTHONWARNINGS imports the module of a category it names
		// ("ignore::mod.Class"), PYTHONBREAKPOINT the hook it names;
		// PYTHONPLATLIBDIR moves the library directory, and
		// PYTHONPYCACHEPREFIX and NODE_COMPILE_CACHE are where compiled
		// code is loaded from.
		"PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "NODE_COMPILE_CACHE",
		"PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "RUBYLIB", "BASH_ENV", "ENV", "SHELLOPTS", "PS4", "PROMPT_COMMAND", "GCONV_PATH", "LOCPATH", "NLSPATH",
		"HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN", "GLIBC_TUNABLES", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GIT_SSH", "GIT_SSH_COMMAND",
		"GIT_ASKPASS", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "SSH_ASKPASS", "SUDO_ASKPASS", "EDITOR", "VISUAL", "PAGER", "LESSOPEN", "LESSCLOSE", "TMP", "TEMP"}
	runtimeVarPrefixes = []string{"LD_", "DYLD_", "MALLOC_", "GIT_CONFIG", "MCPWARDEN_"}
)

// isRuntimeVar reports whether name is a variable that changes what a
// runtime loads or runs.
func isRuntimeVar(name string) bool {
	return slices.Contains(runtimeVarNames, name) || hasAnyPrefix(name, runtimeVarPrefixes)
}

// Names that hold credentials, tested on the upper-cased name: anywhere in
// it, at its end, as the whole name, at its start.
var (
	credentialNameParts    = []string{"TOKEN", "SECRET", "PASSW", "PASSPHRASE", "CREDENTIAL", "CREDS", "APIKEY", "API_KEY", "ACCESSKEY", "ACCESS_KEY", "PRIVATEKEY", "PRIVATE_KEY", "AUTH", "COOKIE", "SESSION", "SIGNING"}
	credentialNameSuffixes = []string{"_KEY", "_PAT", "_PASS", "_PWD", "_PW"} // _PWD: MYSQL_PWD (the mysql client's password), DB_PWD ...; _PW: LDAP_BIND_PW
	credentialNames        = []string{"KEY", "PAT", "PASS", "KUBECONFIG", "DOCKER_CONFIG",
		// Where the operator's credentials and session live: a Kerberos
		// ticket cache, the Docker daemon (root on the host), password
		// files, the desktop's display, bus and runtime directory.
		"KRB5CCNAME", "DOCKER_HOST", "PGPASSFILE", "NETRC", "DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "DBUS_SYSTEM_BUS_ADDRESS",
		// Where TLS libraries (OpenSSL, python's ssl, curl, NSS) write the
		// session keys of every connection they make.
		"SSLKEYLOGFILE"}
	credentialNamePrefixes = []string{"AWS_", "AZURE_", "GOOGLE_APPLICATION", "GCLOUD_", "GH_", "GITHUB_", "GITLAB_", "NPM_CONFIG__", "SSH_AGENT", "SSH_AUTH", "GPG_AGENT", "VAULT_", "OP_"}
)

// credentialName reports whether a variable's name says it holds a credential.
func credentialName(name string) bool {
	u := strings.ToUpper(name)
	if slices.Contains(credentialNames, u) || hasAnyPrefix(u, credentialNamePrefixes) {
		return true
	}
	for _, s := range credentialNameSuffixes {
		if strings.HasSuffix(u, s) {
			return true
		}
	}
	for _, p := range credentialNameParts {
		if strings.Contains(u, p) {
			return true
		}
	}
	return false
}

// tokenFormat is a credential format recognised in a value: a prefix that
// starts a word, then at least min bytes of a character class.
type tokenFormat struct {
	prefix string
	class  func(byte) bool
	min    int
}

var tokenFormats = []tokenFormat{
	{"ghp_", alnum, 20}, {"gho_", alnum, 20}, {"ghu_", alnum, 20}, {"ghs_", alnum, 20}, {"ghr_", alnum, 20}, // GitHub
	{"github_pat_", word, 20},
	{"glpat-", wordDash, 20},                                                                                                                                   // GitLab
	{"xoxa-", alnumDash, 10}, {"xoxb-", alnumDash, 10}, {"xoxp-", alnumDash, 10}, {"xoxo-", alnumDash, 10}, {"xoxs-", alnumDash, 10}, {"xoxr-", alnumDash, 10}, // Slack
	{"sk-", wordDash, 20},                              // OpenAI and others
	{"AKIA", upperDigit, 16}, {"ASIA", upperDigit, 16}, // AWS access key ids
	{"AIza", wordDash, 30}, // Google API keys
	{"npm_", alnum, 30},
	// Since session 11: Stripe's secret and restricted keys, Slack's app
	// tokens, SendGrid's keys, Google's OAuth access tokens and client
	// secrets, Hugging Face's tokens.
	{"sk_live_", alnum, 16}, {"sk_test_", alnum, 16}, {"rk_live_", alnum, 16}, {"rk_test_", alnum, 16},
	{"xapp-", alnumDash, 10}, {"SG.", wordDash, 20}, {"ya29.", wordDash, 20}, {"GOCSPX-", wordDash, 20},
	{"hf_", alnum, 30},
}

// credentialValue reports whether a value carries a credential whatever
// its variable's name: a URL with a password, a known token format, a JWT,
// a PEM private key.
func credentialValue(v string) bool {
	return urlWithPassword(v) || tokenInValue(v) || jwtInValue(v) || pemPrivateKey(v) || passwordParam(v) || webhookURL(v) || bearerToken(v)
}

// bearerToken finds an HTTP bearer credential: "Bearer " (the word in any
// ASCII case, at the start of a word) and at least 16 token68 bytes
// (RFC 9110: letters, digits, -._~+/), as in an "Authorization: Bearer ..."
// header a client hands a remote MCP server's proxy in its environment.
func bearerToken(v string) bool {
	const word6 = "bearer "
	for i := 0; i+len(word6) <= len(v); i++ {
		if i > 0 && word(v[i-1]) || !strings.EqualFold(v[i:i+len(word6)], word6) {
			continue
		}
		if run(v[i+len(word6):], token68) >= 16 {
			return true
		}
	}
	return false
}

func token68(c byte) bool {
	return alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
}

// secretParams are the keys of passwordParam: passwords, and since
// session 11 the keys of Azure's connection strings (storage's
// AccountKey=, Service Bus and Event Hubs' SharedAccessKey= and
// SharedAccessSignature=) and the signatures of presigned URLs (an Azure
// SAS's sig=, S3's X-Amz-Signature=, GCS's X-Goog-Signature=: whoever has
// the URL has the object).
var secretParams = []string{"password=", "pwd=", "accountkey=", "sharedaccesskey=", "sharedaccesssignature=", "sig=", "x-amz-signature=", "x-goog-signature="}

// passwordParam finds KEY=VALUE for a key of secretParams (in any ASCII
// case, the value not empty) at the start of the value or after ';', '?',
// '&' or a blank: a JDBC URL's ?user=u&password=p, an ADO.NET or ODBC
// connection string's Server=h;Password=p, which carry no USER:PASSWORD@.
func passwordParam(v string) bool {
	for i := 0; i < len(v); i++ {
		if i > 0 && v[i-1] != ';' && v[i-1] != '?' && v[i-1] != '&' && !isBlank(v[i-1]) {
			continue
		}
		for _, key := range secretParams {
			if rest := v[i:]; len(rest) > len(key) && strings.EqualFold(rest[:len(key)], key) {
				if c := rest[len(key)]; c != ';' && c != '&' && !isBlank(c) {
					return true
				}
			}
		}
	}
	return false
}

// webhookURL finds a Slack or Discord webhook URL: whoever has one may
// post as the integration it names.
func webhookURL(v string) bool {
	return strings.Contains(v, "hooks.slack.com/services/") || strings.Contains(v, "discord.com/api/webhooks/") ||
		strings.Contains(v, "discordapp.com/api/webhooks/")
}

// urlWithPassword finds SCHEME://USER:PASSWORD@ (the scheme starting with a
// letter; the user without '/', ':', '@' or blanks; a non-empty password
// without '/', '@' or blanks).
func urlWithPassword(v string) bool {
	for i := 0; ; {
		j := strings.Index(v[i:], "://")
		if j < 0 {
			return false
		}
		at := i + j
		i = at + 1
		letter := false
		for k := at - 1; k >= 0 && schemeChar(v[k]); k-- {
			letter = letter || isLetter(v[k])
		}
		if !letter {
			continue
		}
		k := at + 3
		for k < len(v) && v[k] != '/' && v[k] != ':' && v[k] != '@' && !isBlank(v[k]) {
			k++
		}
		if k == len(v) || v[k] != ':' {
			continue
		}
		k++
		pw := k
		for k < len(v) && v[k] != '/' && v[k] != '@' && !isBlank(v[k]) {
			k++
		}
		if k > pw && k < len(v) && v[k] == '@' {
			return true
		}
	}
}

// tokenInValue finds a token format at the start of a word.
func tokenInValue(v string) bool {
	for _, f := range tokenFormats {
		for i := 0; ; {
			j := strings.Index(v[i:], f.prefix)
			if j < 0 {
				break
			}
			at := i + j
			i = at + 1
			if at > 0 && word(v[at-1]) {
				continue
			}
			if run(v[at+len(f.prefix):], f.class) >= f.min {
				return true
			}
		}
	}
	return false
}

// jwtInValue finds the header and payload of a JSON Web Token: "eyJ" at the
// start of a word, at least 10 base64url bytes, '.', at least 10 more, '.'.
func jwtInValue(v string) bool {
	for i := 0; ; {
		j := strings.Index(v[i:], "eyJ")
		if j < 0 {
			return false
		}
		at := i + j
		i = at + 1
		if at > 0 && word(v[at-1]) {
			continue
		}
		rest := v[at+3:]
		n := run(rest, wordDash)
		if n < 10 || n == len(rest) || rest[n] != '.' {
			continue
		}
		rest = rest[n+1:]
		if n = run(rest, wordDash); n >= 10 && n < len(rest) && rest[n] == '.' {
			return true
		}
	}
}

// pemPrivateKey finds "-----BEGIN [A-Z ]*PRIVATE KEY-----".
func pemPrivateKey(v string) bool {
	const begin, end = "-----BEGIN ", "PRIVATE KEY-----"
	for i := 0; ; {
		j := strings.Index(v[i:], begin)
		if j < 0 {
			return false
		}
		at := i + j + len(begin)
		i = at
		// The label runs over [A-Z ] and must end in "PRIVATE KEY", right
		// before the closing dashes (which end the run).
		n := run(v[at:], func(c byte) bool { return c == ' ' || 'A' <= c && c <= 'Z' })
		if strings.HasSuffix(v[at:at+n], "PRIVATE KEY") && strings.HasPrefix(v[at+n:], "-----") {
			return true
		}
	}
}

// run is how many leading bytes of s are in class.
func run(s string, class func(byte) bool) int {
	n := 0
	for n < len(s) && class(s[n]) {
		n++
	}
	return n
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func isLetter(c byte) bool   { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func alnum(c byte) bool      { return isLetter(c) || isDigit(c) }
func word(c byte) bool       { return alnum(c) || c == '_' }
func wordDash(c byte) bool   { return word(c) || c == '-' }
func alnumDash(c byte) bool  { return alnum(c) || c == '-' }
func upperDigit(c byte) bool { return 'A' <= c && c <= 'Z' || isDigit(c) }
func schemeChar(c byte) bool { return alnum(c) || c == '+' || c == '.' || c == '-' }
func isBlank(c byte) bool    { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// looksLikeCredential reports whether a variable is held back as a
// credential, by its name or its value.
func looksLikeCredential(name, value string) bool {
	return credentialName(name) || credentialValue(value)
}

// EnvPolicy is how the server's environment is built.
type EnvPolicy struct {
	// Extra holds --env values: "NAME" passes the launcher's NAME even when
	// the default would drop it, "NAME=VALUE" sets it.
	Extra []string
	// Clean is --clean-env: start from cleanVars instead of the launcher's
	// whole environment.
	Clean bool
}

// serverEnv builds the server's environment from the launcher's (environ,
// as os.Environ returns it). HOME and TMPDIR are added per run (both the
// private temp dir). It returns the names it dropped as credentials or
// runtime variables, for the operator.
func serverEnv(p EnvPolicy, environ []string) (env, dropped []string, err error) {
	host := map[string]string{}
	var hostOrder []string
	for _, e := range environ {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			continue
		}
		if _, seen := host[k]; !seen {
			hostOrder = append(hostOrder, k)
		}
		host[k] = v
	}
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	named := map[string]bool{}
	for _, e := range p.Extra {
		name, value, _ := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, "\x00 \t\n") {
			return nil, nil, fmt.Errorf("--env %q: want NAME or NAME=VALUE", e)
		}
		if slices.Contains(forbiddenVars, name) {
			return nil, nil, fmt.Errorf("--env %s: the launcher sets or forbids this variable", name)
		}
		if strings.ContainsRune(value, 0) {
			return nil, nil, errors.New("--env value contains a NUL byte")
		}
		named[name] = true
	}
	for _, k := range hostOrder {
		v := host[k]
		switch {
		case k == "HOME" || k == "TMPDIR":
			continue // replaced by the run's private temp dir
		case slices.Contains(forbiddenVars, k):
			dropped = append(dropped, k)
		case named[k]:
			set(k, v)
		case p.Clean:
			if slices.Contains(cleanVars, k) {
				set(k, v)
			}
		case isRuntimeVar(k) || looksLikeCredential(k, v):
			dropped = append(dropped, k)
		default:
			set(k, v)
		}
	}
	for _, e := range p.Extra {
		name, value, hasValue := strings.Cut(e, "=")
		switch {
		case hasValue:
			set(name, value)
		case !hasKey(vals, name):
			if v, ok := host[name]; ok {
				set(name, v)
			} else {
				set(name, "")
			}
		}
	}
	if vals["PATH"] == "" {
		set("PATH", defaultPATH)
	}
	env = make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, dropped, nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func envValue(env []string, name string) string {
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// KernelABI is the running kernel's Landlock ABI, 0 without Landlock. Like
// go-landlock it reports ABI 6+ as 5 when the kernel lacks the fix for the
// signal-scoping erratum.
func KernelABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	if v >= 6 {
		errata, err := ll.LandlockGetErrata()
		if err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return v
}
