package launcher

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Names planted in a write scope (docs/launcher.md, "Names planted in a
// write scope"). No layer of the fence can refuse a name the server makes
// in a directory it may write (Known limits): a .ssh/authorized_keys, a
// .bashrc where none was, a .mcp.json, a .vscode/tasks.json. What the
// launcher can do is look when the server is gone: at the run's end (and
// before a restart) it walks the write scope for entries whose name is a
// secret's or one of schema.DefaultHostCodePatterns, and whose inode
// changed during the run (its ctime: set by the kernel at every create,
// write, rename, link and metadata change, and never set back by a
// process without CAP_SYS_TIME). Each is reported: a WARNING on stderr
// naming it relative to its scope path, and the exit record's secrets
// layer "degraded" with planted=N. A walk that could not see everything
// says what it missed (planted_unchecked); nothing runs at launch.

// plantedClock is the time inode times are compared with: the kernel
// stamps an inode from its coarse clock (CLOCK_REALTIME_COARSE, one tick
// behind the fine one at most; a file system with fine-grained
// timestamps stamps later, never earlier), so a change after this reading
// has a ctime at or after it, and a change before it one at or before it
// (only a change in the same tick before the reading is taken for the
// server's). Without the coarse clock: the fine one less 10 ms.
func plantedClock() time.Time {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil {
		return time.Now().Add(-10 * time.Millisecond)
	}
	return time.Unix(ts.Unix())
}

// maxPlantedNames bounds the names the warning lists (all are counted).
const maxPlantedNames = 16

// planted is what one check found.
type planted struct {
	names  []string // relative to their scope path, as found (at most maxPlantedNames)
	count  int      // names found
	secret int      // of which secrets' names (the rest: code or configuration the host runs)
	// unchecked counts directories that could not be listed; bound names
	// the walk's bound it hit ("entries", "depth").
	unchecked int
	bound     string
}

// complete reports whether the walk saw every entry of the write scope.
func (p *planted) complete() bool { return p.unchecked == 0 && p.bound == "" }

// add merges o into p (a restart's check, then the run end's).
func (p *planted) add(o *planted) {
	for _, n := range o.names {
		if len(p.names) < maxPlantedNames && !slices.Contains(p.names, n) {
			p.names = append(p.names, n)
		}
	}
	p.count += o.count
	p.secret += o.secret
	p.unchecked += o.unchecked
	if p.bound == "" {
		p.bound = o.bound
	}
}

// plantedWalker walks a write scope for names made or changed since.
type plantedWalker struct {
	secrets, unmask, host *schema.Secrets
	since                 unix.Timespec
	limit, entries        int
	out                   *planted
	comps                 []string // lowercased components of the entry's absolute path
	rel                   []string // the entry's components below its scope path
	seen                  map[string]bool
	buf                   [32 << 10]byte
}

// plantedCheck walks the write scope of scope (nothing for a read scope)
// for entries named as a secret (secrets, less unmask) or as code the host
// runs (schema.DefaultHostCodes), or lying in such a directory, whose
// ctime is at or after since (plantedClock; a ctime of whole seconds, from
// a file system that keeps no more, at or after since's second), reading
// at most limit entries.
func plantedCheck(scope *schema.CanonicalScope, secrets, unmask *schema.Secrets, since time.Time, limit int) *planted {
	out := &planted{}
	if scope == nil || scope.AccessMode != schema.AccessWrite {
		return out
	}
	if limit <= 0 {
		limit = DefaultSecretWalkLimit
	}
	w := &plantedWalker{secrets: secrets, unmask: unmask, host: schema.DefaultHostCodes, limit: limit, out: out,
		since: unix.NsecToTimespec(since.UnixNano()), seen: map[string]bool{}}
	for _, p := range scope.AllowedPaths {
		if p.Kind == schema.KindDir {
			w.seen[p.Path] = true
		}
	}
	for _, p := range scope.AllowedPaths {
		if p.Kind != schema.KindDir {
			continue // a file the operator granted by its name: theirs to write
		}
		fd, err := unix.Open(p.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err != unix.ENOENT {
				out.unchecked++
			}
			continue
		}
		w.comps = w.comps[:0]
		for _, c := range strings.Split(strings.Trim(p.Path, "/"), "/") {
			w.comps = append(w.comps, strings.ToLower(c))
		}
		w.rel = w.rel[:0]
		w.dir(fd, p.Path, len(w.comps), 0, "")
		unix.Close(fd)
		if out.bound != "" {
			break
		}
	}
	return out
}

// class: the class of the entry whose components are comps ("" when it is
// neither a secret's name nor code the host runs).
func (w *plantedWalker) class(comps []string) string {
	lc := comps
	if tc := strings.TrimRight(comps[len(comps)-1], ". "); tc != "" && tc != comps[len(comps)-1] {
		lc = append(slices.Clone(comps[:len(comps)-1]), tc)
	}
	switch {
	case w.secrets.MatchLast(lc) && !w.unmask.MatchLast(lc):
		return "secret"
	case w.host.MatchLast(lc):
		return "host"
	}
	return ""
}

// dir walks the directory open as fd at abs; base is how many of w.comps
// are the scope path's; under is the class of a matching directory it lies
// in ("": none).
func (w *plantedWalker) dir(fd int, abs string, base, depth int, under string) {
	if depth >= secretWalkDepth {
		w.out.bound = "depth"
		return
	}
	type sub struct{ name, class string }
	var subs []sub
	buf := w.buf[:]
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			w.out.unchecked++
			break
		}
		if n <= 0 {
			break
		}
		for off := 0; off < n; {
			_, reclen, typ, name := direntAt(buf[off:n])
			if reclen == 0 {
				break
			}
			off += reclen
			if name == "." || name == ".." || name == "" {
				continue
			}
			if w.entries++; w.entries > w.limit {
				w.out.bound = "entries"
				return
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if err != unix.ENOENT {
						w.out.unchecked++
					}
					continue
				}
				typ = dtOf(st.Mode)
			}
			class := under
			w.comps = append(w.comps[:base+depth], strings.ToLower(name))
			if class == "" {
				class = w.class(w.comps)
			}
			if typ == unix.DT_LNK && class == "" && schema.DefaultHostCodeHeads[strings.ToLower(name)] {
				// A link named as the first directory of a host-code
				// pattern (.vscode -> elsewhere/) leads to its files.
				class = "host"
			}
			if typ == unix.DT_DIR {
				if !w.seen[abs+"/"+name] {
					subs = append(subs, sub{name, class})
				}
				if class == "" {
					continue
				}
			}
			if class == "" {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err != unix.ENOENT {
					w.out.unchecked++
				}
				continue
			}
			if st.Ctim.Sec < w.since.Sec || st.Ctim.Sec == w.since.Sec && st.Ctim.Nsec != 0 && st.Ctim.Nsec < w.since.Nsec {
				continue
			}
			w.out.count++
			if class == "secret" {
				w.out.secret++
			}
			if len(w.out.names) < maxPlantedNames {
				w.out.names = append(w.out.names, strings.Join(append(slices.Clone(w.rel), name), "/"))
			}
		}
	}
	for _, s := range subs {
		cfd, err := unix.Openat(fd, s.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err != unix.ENOENT && err != unix.ELOOP && err != unix.ENOTDIR {
				w.out.unchecked++
			}
			continue
		}
		w.comps = append(w.comps[:base+depth], strings.ToLower(s.name))
		w.rel = append(w.rel[:depth], s.name)
		w.dir(cfd, abs+"/"+s.name, base, depth+1, s.class)
		unix.Close(cfd)
		if w.out.bound != "" {
			return
		}
	}
}

// warn writes the operator's lines about p (nothing when p found nothing
// and saw everything). Names are relative to their scope path, quoted.
func (p *planted) warn(w io.Writer, when string) {
	if p.count > 0 {
		names := make([]string, len(p.names))
		for i, n := range p.names {
			names[i] = strconv.Quote(n)
		}
		more := ""
		if p.count > len(p.names) {
			more = fmt.Sprintf(" and %d more", p.count-len(p.names))
		}
		fmt.Fprintf(w, "mcpwarden: WARNING: %s, the write scope holds %d name(s) created or changed during the run that hold secrets or code the host runs (%d secret name(s), %d agent configuration(s), start-up file(s) or hook(s)): %s%s (relative to the scope path); no layer can refuse a name made in a write scope: check them before a shell, an editor, git or an MCP client opens that directory\n",
			when, p.count, p.secret, p.count-p.secret, strings.Join(names, ", "), more)
	}
	if !p.complete() {
		why := []string{}
		if p.unchecked > 0 {
			why = append(why, fmt.Sprintf("%d director(ies) or entries could not be read", p.unchecked))
		}
		if p.bound != "" {
			why = append(why, "the walk stopped at its bound of "+p.bound+" (--secret-walk-limit)")
		}
		fmt.Fprintf(w, "mcpwarden: WARNING: %s, the write scope could not be checked whole for planted names (%s): what the server made there is not known\n", when, strings.Join(why, "; "))
	}
}

// layerNote is what p adds to the secrets layer's reason ("" for nothing).
func (p *planted) layerNote() string {
	var out []string
	if p.count > 0 {
		out = append(out, "planted="+strconv.Itoa(p.count))
	}
	switch {
	case p.bound != "":
		out = append(out, "planted_unchecked_bound_"+p.bound)
	case p.unchecked > 0:
		out = append(out, "planted_unchecked="+strconv.Itoa(p.unchecked))
	}
	return strings.Join(out, ",")
}

// homeWriteWarning warns when a write scope path is a home directory or
// holds one (the launcher's $HOME, root's and every login user's of
// passwd, uid 0 or 1000 and up): there the server may make the names the
// user's next login, shell, editor or agent runs (.ssh/authorized_keys, a
// missing .bashrc, .config/autostart, .local/bin), which no layer can
// refuse; they are reported at the run's end only. "" when none is.
func homeWriteWarning(scope *schema.CanonicalScope, home, passwd string) string {
	if scope == nil || scope.AccessMode != schema.AccessWrite {
		return ""
	}
	homes := map[string]string{} // home → whose
	if home != "" && filepath.IsAbs(home) {
		homes[filepath.Clean(home)] = "the launching user"
	}
	if b, err := os.ReadFile(passwd); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) < 7 {
				continue
			}
			uid, err := strconv.Atoi(f[2])
			if err != nil || (uid != 0 && (uid < 1000 || uid == 65534)) || !filepath.IsAbs(f[5]) || filepath.Clean(f[5]) == "/" {
				continue
			}
			if _, ok := homes[filepath.Clean(f[5])]; !ok {
				homes[filepath.Clean(f[5])] = "user " + strconv.Quote(f[0])
			}
		}
	}
	// Each home resolved once (a home may be a symlink), in a stable order.
	names := slices.Sorted(maps.Keys(homes))
	real := make([]string, len(names))
	for i, h := range names {
		real[i] = h
		if r, err := filepath.EvalSymlinks(h); err == nil {
			real[i] = r
		}
	}
	for _, p := range scope.AllowedPaths {
		if p.Kind != schema.KindDir {
			continue
		}
		for i, h := range names {
			verb := ""
			switch {
			case real[i] == p.Path:
				verb = "is"
			case schema.IsWithin(p.Path, real[i]):
				verb = "holds"
			default:
				continue
			}
			return fmt.Sprintf("mcpwarden: WARNING: a write scope path %s the home directory of %s: the server may create there what that user's next login, shell, editor or agent runs (.ssh/authorized_keys, a missing .bashrc or .profile, .config/autostart, .local/bin), which no layer can refuse (only reported when the run ends); grant write to a project directory below it instead", verb, homes[h])
		}
	}
	return ""
}
