package launcher

import (
	"errors"
	"fmt"
	"regexp"
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

// runtimeVars change what a runtime loads or runs: dropped by default,
// passed by --env NAME.
var runtimeVars = regexp.MustCompile(`^(LD_.*|DYLD_.*|NODE_OPTIONS|NODE_PATH|NODE_REPL_EXTERNAL_MODULE|PYTHONPATH|PYTHONHOME|PYTHONSTARTUP|PYTHONUSERBASE|PYTHONINSPECT|PERL5LIB|PERL5OPT|PERLLIB|RUBYOPT|RUBYLIB|BASH_ENV|ENV|SHELLOPTS|PS4|PROMPT_COMMAND|GCONV_PATH|LOCPATH|NLSPATH|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|MALLOC_.*|GLIBC_TUNABLES|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|GIT_CONFIG.*|GIT_SSH|GIT_SSH_COMMAND|GIT_ASKPASS|GIT_EXEC_PATH|GIT_TEMPLATE_DIR|SSH_ASKPASS|EDITOR|VISUAL|PAGER|MCPWARDEN_.*|TMP|TEMP)$`)

// credentialName matches names that hold credentials (upper-cased first).
var credentialName = regexp.MustCompile(`TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|CREDS|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|_KEY$|^KEY$|AUTH|COOKIE|SESSION|_PAT$|^PAT$|_PASS$|^PASS$|SIGNING|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^GCLOUD_|^GH_|^GITHUB_|^GITLAB_|^NPM_CONFIG__|^SSH_AGENT|^SSH_AUTH|^GPG_AGENT|^KUBECONFIG$|^DOCKER_CONFIG$|^VAULT_|^OP_`)

// credentialValue matches values that carry a credential whatever their
// name: a URL with a password, and common token formats.
var credentialValue = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:[^/\s@]+@|\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|npm_[A-Za-z0-9]{30,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.)|-----BEGIN [A-Z ]*PRIVATE KEY-----`)

// looksLikeCredential reports why a variable is held back as a credential,
// or "" when it is not.
func looksLikeCredential(name, value string) bool {
	return credentialName.MatchString(strings.ToUpper(name)) || credentialValue.MatchString(value)
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
		case runtimeVars.MatchString(k) || looksLikeCredential(k, v):
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
