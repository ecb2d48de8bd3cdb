package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/schema"
)

// stderrTailSize is how much of the server's stderr is kept to explain a
// start that failed.
const stderrTailSize = 16 << 10

// tailBuffer keeps the last max bytes written to it: the server's stderr
// as the operator saw it, each line after prefix (serverlog's).
type tailBuffer struct {
	mu     sync.Mutex
	max    int
	prefix string
	buf    []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the kept lines without their prefix.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.prefix == "" {
		return string(t.buf)
	}
	lines := strings.Split(string(t.buf), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, t.prefix)
	}
	return strings.Join(lines, "\n")
}

// watchWriter records whether anything was written: a server that answered
// the client has started, whatever happens later.
type watchWriter struct {
	w     interface{ Write([]byte) (int, error) }
	wrote atomic.Bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.wrote.Store(true)
	}
	return w.w.Write(p)
}

// startDiagnosis explains why a server could not start under the fence.
type startDiagnosis struct {
	Path string // the denied file
	What string // what was denied, for the message
	Hint string // the flag or scope field that grants it
}

// startPatterns are the expressions diagnoseStart reads a failed start's
// stderr with, compiled on first use: only a run whose server failed to
// start needs them, and compiling them at every launch cost more than the
// fence itself.
var startPatterns = sync.OnceValue(func() *startRegexps {
	return &startRegexps{
		// denied matches how runtimes report a refused open or exec:
		// node's "EACCES: permission denied, open '/x'", Go's "open /x:
		// permission denied", CPython's "[Errno 13] Permission denied: '/x'",
		// sh's "/x: Permission denied", EPERM for the ones seccomp refuses.
		// With the run's mount namespace a path outside its root does not
		// exist there: "ENOENT: no such file or directory", "[Errno 2]", sh's
		// "/x: not found". Only a path that exists on the host counts, so a
		// file that is missing everywhere is never blamed on the fence.
		denied: regexp.MustCompile(`(?i)permission denied|\bEACCES\b|\[Errno 13\]|\bEPERM\b|operation not permitted|no such file or directory|\bENOENT\b|\[Errno 2\]|: not found`),
		// absPath is an absolute path in a message, quoted or not.
		absPath: regexp.MustCompile("(?:^|[\\s'\"`(=:,])(/[^\\s'\"`(),:;]+)"),
		// exec is a failed exec: execve, spawn, "exec format"...
		exec: regexp.MustCompile(`(?i)\bexec|\bspawn`),
		// shell is a shell's report of a command it could not run:
		// "sh: 2: /usr/bin/id: Permission denied", "bash: line 1: /x: ...".
		// "/srv/run.sh: 2: /usr/bin/id: Permission denied" (a script's name and
		// line number first).
		shell: regexp.MustCompile(`^\s*((/\S*/)?(ba|da|z|k|mk)?sh|\S+): (line )?\d+: `),
		// nodeSpawn is node's report of a program it could not exec: "spawn git EACCES".
		nodeSpawn: regexp.MustCompile(`spawn (\S+) (EACCES|ENOENT|EPERM)`),
	}
})

type startRegexps struct {
	denied, absPath, exec, shell, nodeSpawn *regexp.Regexp
}

// diagnoseStart looks in the server's last stderr output for a path the
// fence denied: a path named on a "permission denied" line that exists and
// that the ruleset does not grant. It returns the first such path with the
// flag or scope field that grants it.
func diagnoseStart(stderr string, rs *ruleset.Ruleset, scope *schema.CanonicalScope, serverPATH string) (startDiagnosis, bool) {
	re := startPatterns()
	for _, line := range strings.Split(stderr, "\n") {
		if !re.denied.MatchString(line) {
			continue
		}
		if m := re.nodeSpawn.FindStringSubmatch(line); m != nil {
			prog := m[1]
			if p, ok := lookOnPath(prog, serverPATH); ok && !granted(rs, p, ll.AccessFSExecute) {
				return startDiagnosis{Path: p, What: "the fence denied running " + prog, Hint: fmt.Sprintf("the server runs %s: grant it with --allow-exec %s", prog, filepath.Base(p))}, true
			}
		}
		for _, m := range re.absPath.FindAllStringSubmatch(line, -1) {
			p := filepath.Clean(strings.TrimRight(m[1], ".'\""))
			// The rules name real paths (/bin/cat is /usr/bin/cat here);
			// /proc/self would resolve to the launcher's own entry.
			if !strings.HasPrefix(p, "/proc/") {
				if real, err := filepath.EvalSymlinks(p); err == nil {
					p = real
				}
			}
			st, err := os.Stat(p)
			if err != nil {
				continue
			}
			exec := !st.IsDir() && st.Mode().Perm()&0o111 != 0 && (re.exec.MatchString(line) || re.shell.MatchString(line))
			want := landlock.AccessFSSet(ll.AccessFSReadFile)
			if st.IsDir() {
				want = ll.AccessFSReadDir
			}
			if exec && !st.IsDir() {
				want = ll.AccessFSExecute
			}
			if granted(rs, p, want) {
				continue
			}
			return startDiagnosis{Path: p, What: "the fence denied " + p, Hint: grantHint(p, st.IsDir(), exec, scope)}, true
		}
	}
	return startDiagnosis{}, false
}

// granted reports whether some rule of rs gives want on p.
func granted(rs *ruleset.Ruleset, p string, want landlock.AccessFSSet) bool {
	for _, r := range rs.Rules {
		if r.Access&want == want && (r.Path == p || r.Kind == schema.KindDir && schema.IsWithin(r.Path, p)) {
			return true
		}
	}
	return false
}

// grantHint names what grants p: the scope for a path in the workspace,
// --allow-exec for a program, --allow-runtime for the rest.
func grantHint(p string, dir, exec bool, scope *schema.CanonicalScope) string {
	switch {
	case schema.DefaultSecrets.Match(p):
		// The path comes from the server's own output: never talk the
		// operator into granting something that looks like a credential.
		return "it looks like a secret (a key, token or credentials file); mcpwarden suggests no grant for it, and a server that needs it at start-up deserves a look"
	case strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/proc/self"):
		return "another process's /proc entry, /proc and /sys as a whole are never granted; the server's own /proc entry is (/proc/self)"
	case scope != nil && schema.IsWithin(scope.Base, p):
		return fmt.Sprintf("it lies in the approved base %s: add it to the scope's allowed_paths (relative to --base), or, if it is the server's own code, install the server outside the base or grant it with --allow-runtime %s", scope.Base, p)
	case exec:
		return fmt.Sprintf("the server runs it: grant it with --allow-exec %s (or --allow-runtime %s)", filepath.Base(p), p)
	case dir:
		return fmt.Sprintf("grant the directory read-only with --allow-runtime %s", p)
	default:
		return fmt.Sprintf("grant it read-only with --allow-runtime %s", p)
	}
}

// lookOnPath finds prog on the server's PATH, symlinks resolved.
func lookOnPath(prog, path string) (string, bool) {
	if strings.Contains(prog, "/") {
		if filepath.IsAbs(prog) {
			if real, err := filepath.EvalSymlinks(prog); err == nil {
				return real, true
			}
		}
		return "", false
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		c := filepath.Join(d, prog)
		if _, err := exec.LookPath(c); err == nil {
			if real, err := filepath.EvalSymlinks(c); err == nil {
				return real, true
			}
		}
	}
	return "", false
}
