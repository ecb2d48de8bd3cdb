package launcher

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

// The bounds of the walk of the scope for secrets (see secretWalk).
const (
	// DefaultSecretWalkLimit is how many entries the walk reads at most.
	DefaultSecretWalkLimit = 200_000
	// secretWalkDepth is how deep below a scope path it goes at most.
	secretWalkDepth = 64
	// maxSecretMasks bounds the masks (each one a mount of the run).
	maxSecretMasks = 4096
)

// secretMasks is what the walk of the scope found: the masks of the
// minimal root, and counts for the secrets layer (never a name).
type secretMasks struct {
	masks []sandbox.Mount
	files int // files matching a pattern
	dirs  int // directories matching a pattern
	links int // other hard links, inside the scope, to a file of a secret
	kept  int // masks of an earlier walk this one did not find (keepMasks)
	// unlisted: directories the walk may pass through but not list (an
	// unprivileged launcher, mode 0311): the server could open a .env in
	// one by its name, and the walk cannot tell what is there; masked whole.
	unlisted int
	bound    string // the bound the walk hit ("entries", "depth", "masks"); "": it saw everything
}

func (s *secretMasks) count() int { return s.files + s.dirs + s.links + s.kept + s.unlisted }

// keepMasks adds to s (a walk for a restart) the masks of the launch's
// walk it did not find again: what the launch masked stays masked, even
// when this walk stopped at a bound before reaching it (a server with a
// write scope can fill the scope with entries before it is restarted).
// An entry gone since is skipped when the root is made.
func (s *secretMasks) keepMasks(launch *secretMasks) {
	if launch == nil {
		return
	}
	have := make(map[string]bool, len(s.masks))
	for _, m := range s.masks {
		have[m.Path] = true
	}
	for _, m := range launch.masks {
		if !have[m.Path] {
			s.masks = append(s.masks, m)
			s.kept++
		}
	}
}

// secretWalk finds, below every path the scope grants, the entries that
// match a secret pattern (the path relative to the scope path is matched:
// the scope path itself is the operator's explicit grant) and not an
// unmask pattern. A matching directory is masked whole; the walk still
// goes through it, because a file in it may have another hard link
// elsewhere in the scope, which would reach the same content: every
// such link is masked too. Symlinks are not followed (their target, when
// inside the scope, is checked where it is), but a symlink whose own name
// is a secret's (a dotfiles manager's .bashrc -> dotfiles/bashrc, .ssh ->
// dotfiles/ssh) has its target masked when that lies inside the scope:
// the content is the secret's whatever the target is called. The walk reads at most limit
// entries and secretWalkDepth levels and finds at most maxSecretMasks
// entries; past a bound it stops and says which (the layer is then
// degraded: what was found is masked, the rest is not known).
//
// Hard links cost nothing in the common case: the first pass keeps the
// inode numbers getdents gives, of the files inside secrets and of the
// others; only when the two sets meet does a second pass find those
// entries' paths and compare device and inode with lstat.
func secretWalk(scope *schema.CanonicalScope, secrets, unmask *schema.Secrets, limit int) *secretMasks {
	w := &walker{secrets: secrets, unmask: unmask, limit: limit, out: &secretMasks{}, scope: scope,
		secretIno: map[uint64]struct{}{}, otherIno: map[uint64]struct{}{}, seen: map[string]bool{}, masked: map[string]bool{}}
	if w.limit <= 0 {
		w.limit = DefaultSecretWalkLimit
	}
	for _, p := range scope.AllowedPaths {
		if p.Kind == schema.KindDir {
			w.seen[p.Path] = true
		}
	}
	w.walk(scope)
	// The inodes seen both inside and outside secrets: same device and
	// inode, or a coincidence of numbers across file systems.
	cand := map[uint64]struct{}{}
	for ino := range w.secretIno {
		if _, ok := w.otherIno[ino]; ok {
			cand[ino] = struct{}{}
		}
	}
	if len(cand) == 0 || w.out.bound != "" {
		return w.out
	}
	w.cand, w.entries = cand, 0
	w.walk(scope)
	ids := map[fileID]bool{}
	for _, p := range w.secretPaths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			ids[fileID{uint64(st.Dev), st.Ino}] = true
		}
	}
	for _, p := range w.otherPaths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || !ids[fileID{uint64(st.Dev), st.Ino}] {
			continue
		}
		if !w.mask(p, false) {
			break
		}
		w.out.links++
	}
	return w.out
}

// fileID is an inode on a device.
type fileID struct{ dev, ino uint64 }

type walker struct {
	secrets, unmask *schema.Secrets
	limit, entries  int
	out             *secretMasks
	// First pass: the inode numbers of the regular files inside secrets
	// (a matching file, or any file below a matching directory), and of
	// the other regular files.
	secretIno, otherIno map[uint64]struct{}
	// Second pass (cand non-nil): the paths of the files whose inode
	// number is in cand, inside secrets and outside.
	cand                    map[uint64]struct{}
	secretPaths, otherPaths []string
	seen                    map[string]bool // the scope's directories (one inside another is walked once)
	scope                   *schema.CanonicalScope
	masked                  map[string]bool // the paths masked, each once
	// comps holds the lowercased components of the entry's absolute path:
	// base of them are the scope path's own (a multi-component pattern may
	// start above the scope path, as the proxy matches the absolute path;
	// only a run ending at an entry below it is matched). tcomps are the
	// same with trailing dots and spaces dropped, as the proxy also treats
	// ".env." and ".ssh " as the secret they spell.
	comps, tcomps []string
	base          int
	buf           [32 << 10]byte
}

func (w *walker) walk(scope *schema.CanonicalScope) {
	for _, p := range scope.AllowedPaths {
		if p.Kind != schema.KindDir {
			continue
		}
		fd, err := unix.Open(p.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			// Gone, or closed to the launcher's uid: the launch fails or
			// the server cannot reach it either, unless it may still pass
			// through it.
			if w.unlistable(unix.AT_FDCWD, p.Path, err) && !w.maskUnlisted(p.Path) {
				return
			}
			continue
		}
		w.comps, w.tcomps, w.base = w.comps[:0], w.tcomps[:0], 0
		trimmed := 0
		for _, c := range strings.Split(strings.Trim(p.Path, "/"), "/") {
			lc, tc := lowerTrim(c)
			w.comps, w.tcomps = append(w.comps, lc), append(w.tcomps, tc)
			if tc != lc {
				trimmed++
			}
		}
		w.base = len(w.comps)
		w.dir(fd, p.Path, 0, false, trimmed)
		unix.Close(fd)
		if w.out.bound != "" {
			return
		}
	}
}

// reliableDIno: file systems whose getdents inode numbers are the ones
// stat returns. Elsewhere (overlayfs without xino, network file systems)
// the walk stats every regular file.
func reliableDIno(fd int) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return false
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}

// lowerTrim is a name as the patterns are matched: lowercased, and also
// without its trailing dots and spaces (the name itself when only those).
func lowerTrim(name string) (lower, trimmed string) {
	lower = strings.ToLower(name)
	trimmed = strings.TrimRight(lower, ". ")
	if trimmed == "" {
		trimmed = lower
	}
	return lower, trimmed
}

// dir walks the directory open as fd, at path abs, depth levels below its
// scope path (w.comps holds their names); under says it lies inside a
// secret already masked; trimmed counts the components of abs that
// trailing dots or spaces change.
func (w *walker) dir(fd int, abs string, depth int, under bool, trimmed int) {
	if depth >= secretWalkDepth {
		w.out.bound = "depth"
		return
	}
	second := w.cand != nil
	reliable := reliableDIno(fd)
	type sub struct {
		name    string
		secret  bool
		trimmed int
	}
	var subs []sub
	buf := w.buf[:]
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		for off := 0; off < n; {
			ino, reclen, typ, name := direntAt(buf[off:n])
			if reclen == 0 {
				break
			}
			off += reclen
			if name == "." || name == ".." || name == "" {
				continue
			}
			if !second {
				if w.entries++; w.entries > w.limit {
					w.out.bound = "entries"
					return
				}
			}
			if typ == unix.DT_UNKNOWN || (typ == unix.DT_REG && !reliable) {
				var st unix.Stat_t
				if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				typ = dtOf(st.Mode)
				ino = st.Ino
			}
			secret, tr := false, trimmed
			if !under {
				lc, tc := lowerTrim(name)
				if tc != lc {
					tr++
				}
				n := w.base + depth
				w.comps, w.tcomps = append(w.comps[:n], lc), append(w.tcomps[:n], tc)
				secret = w.secret(w.comps) || (tr > 0 && w.secret(w.tcomps))
			}
			switch typ {
			case unix.DT_DIR:
				if w.seen[abs+"/"+name] {
					continue // a scope path of its own, walked on its own
				}
				if secret && !second && !w.masked[abs+"/"+name] {
					if !w.mask(abs+"/"+name, true) {
						return
					}
					w.out.dirs++
				}
				subs = append(subs, sub{name, secret, tr})
			case unix.DT_LNK:
				// Not followed: a target inside the scope is checked where
				// it is. A link named as a secret masks its target.
				if secret && !second && !w.maskLinkTarget(abs+"/"+name) {
					return
				}
			default:
				if secret && !second && !w.masked[abs+"/"+name] {
					if !w.mask(abs+"/"+name, false) {
						return
					}
					w.out.files++
				}
				if typ != unix.DT_REG {
					continue
				}
				inSecret := secret || under
				switch {
				case second:
					if _, ok := w.cand[ino]; !ok {
						continue
					}
					if inSecret {
						w.secretPaths = append(w.secretPaths, abs+"/"+name)
					} else {
						w.otherPaths = append(w.otherPaths, abs+"/"+name)
					}
				case inSecret:
					w.secretIno[ino] = struct{}{}
				default:
					w.otherIno[ino] = struct{}{}
				}
			}
		}
	}
	for _, s := range subs {
		cfd, err := unix.Openat(fd, s.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			// Closed to the launcher's uid: closed to the server too,
			// unless it may still pass through it.
			if !second && !under && !s.secret && w.unlistable(fd, s.name, err) && !w.maskUnlisted(abs+"/"+s.name) {
				return
			}
			continue
		}
		lc, tc := lowerTrim(s.name)
		n := w.base + depth
		w.comps, w.tcomps = append(w.comps[:n], lc), append(w.tcomps[:n], tc)
		w.dir(cfd, abs+"/"+s.name, depth+1, under || s.secret, s.trimmed)
		unix.Close(cfd)
		if w.out.bound != "" {
			return
		}
	}
}

// unlistable: opening the directory name (at dirfd) for listing failed
// with err, and yet the launcher's uid (the server's, unprivileged) may
// search it: the server could open an entry in it by its name.
func (w *walker) unlistable(dirfd int, name string, err error) bool {
	return w.cand == nil && err == unix.EACCES && unix.Faccessat(dirfd, name, unix.X_OK, unix.AT_EACCESS) == nil
}

// maskUnlisted masks a directory the walk could not list; false when the
// bound on masks is hit.
func (w *walker) maskUnlisted(abs string) bool {
	if !w.mask(abs, true) {
		return false
	}
	w.out.unlisted++
	return true
}

// secret: comps (the entry's, lowercased, from /) end with a secret that
// no unmask pattern names.
func (w *walker) secret(comps []string) bool {
	return w.secrets.MatchLast(comps) && !w.unmask.MatchLast(comps)
}

// maskLinkTarget masks what the symlink link (named as a secret) resolves
// to, when that lies strictly inside a scope path (a target outside every
// scope path is out of the server's reach; the scope path itself, or one
// holding it, is the operator's explicit grant). False when the bound on
// masks is hit.
func (w *walker) maskLinkTarget(link string) bool {
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return true // dangling or a loop: nothing to reach
	}
	inside := false
	for _, p := range w.scope.AllowedPaths {
		if p.Kind == schema.KindDir && target != p.Path && schema.IsWithin(p.Path, target) {
			inside = true
		}
		if schema.IsWithin(target, p.Path) {
			return true
		}
	}
	var st unix.Stat_t
	if !inside || w.masked[target] || unix.Stat(target, &st) != nil {
		return true
	}
	dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if !w.mask(target, dir) {
		return false
	}
	if dir {
		w.out.dirs++
	} else {
		w.out.files++
	}
	return true
}

// mask adds the mask of abs; false when the bound on masks is hit.
func (w *walker) mask(abs string, dir bool) bool {
	if w.masked[abs] {
		return true
	}
	if len(w.out.masks) >= maxSecretMasks {
		w.out.bound = "masks"
		return false
	}
	w.out.masks = append(w.out.masks, sandbox.Mount{Path: abs, Dir: dir, Mask: true})
	w.masked[abs] = true
	return true
}

// direntAt decodes the linux_dirent64 at the start of b.
func direntAt(b []byte) (ino uint64, reclen int, typ uint8, name string) {
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	if len(b) < nameOff {
		return 0, 0, 0, ""
	}
	reclen = int(b[16]) | int(b[17])<<8
	if reclen < nameOff || reclen > len(b) {
		return 0, 0, 0, ""
	}
	ino = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	typ = b[18]
	nb := b[nameOff:reclen]
	for i, c := range nb {
		if c == 0 {
			nb = nb[:i]
			break
		}
	}
	return ino, reclen, typ, string(nb)
}

func dtOf(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFLNK:
		return unix.DT_LNK
	case unix.S_IFREG:
		return unix.DT_REG
	}
	return unix.DT_UNKNOWN // another kind: masked as a file if it matches
}

// secretPatterns compiles the run's secret and unmask patterns.
func secretPatterns(cfg *Config) (secrets, unmask *schema.Secrets, err error) {
	secrets = schema.DefaultSecrets
	if cfg.SecretPatterns != nil {
		if secrets, err = schema.NewSecrets(cfg.SecretPatterns); err != nil {
			return nil, nil, fmt.Errorf("%w: secret patterns: %v", ErrUsage, err)
		}
	}
	if unmask, err = schema.NewSecrets(cfg.Unmask); err != nil {
		return nil, nil, fmt.Errorf("%w: --unmask: %v", ErrUsage, err)
	}
	return secrets, unmask, nil
}

// secretsLayer is the secrets layer of a run with masks m, with or
// without its mount namespace: counts, never names.
func secretsLayer(mode schema.RunMode, m *secretMasks, mountNS bool) schema.Layer {
	ly := schema.Layer{Name: schema.LayerSecrets, State: schema.LayerOn}
	n := 0
	if m != nil {
		n = m.count()
	}
	switch {
	case mode != schema.ModeEnforce:
		ly.State, ly.Reason = schema.LayerOff, "audit_mode"
		return ly
	case m == nil:
		ly.State, ly.Reason = schema.LayerOff, "not_walked"
		return ly
	case !mountNS && n > 0:
		// Landlock alone cannot take entries out of a granted directory.
		ly.State, ly.Reason = schema.LayerDegraded, "unmasked="+strconv.Itoa(n)+",no_mount_namespace"
	case !mountNS:
		ly.Reason = "none_found"
	case n == 0:
		ly.Reason = "none_found"
	default:
		ly.Reason = "masked=" + strconv.Itoa(n)
	}
	if m.bound != "" {
		ly.State = schema.LayerDegraded
		ly.Reason = "walk_bound_" + m.bound + "," + ly.Reason
	}
	return ly
}

// ProbeSecrets is the secrets layer a run of cfg would get here (for
// `scope check`), given whether it gets its mount namespace.
func ProbeSecrets(cfg Config, mountNS bool) (schema.Layer, error) {
	if cfg.Mode == "" {
		cfg.Mode = schema.ModeEnforce
	}
	secrets, unmask, err := secretPatterns(&cfg)
	if err != nil {
		return schema.Layer{}, err
	}
	var m *secretMasks
	if cfg.Mode == schema.ModeEnforce {
		m = secretWalk(cfg.Scope, secrets, unmask, cfg.SecretWalkLimit)
	}
	return secretsLayer(cfg.Mode, m, mountNS), nil
}

// secretWarning is the operator's warning for a layer that is not on.
func secretWarning(ly schema.Layer) string {
	if ly.State != schema.LayerDegraded {
		return ""
	}
	if strings.Contains(ly.Reason, "no_mount_namespace") {
		return "mcpwarden: WARNING: the scope holds files or directories matching a secret pattern, and without the mount namespace the fence cannot hide them from the server (the proxy still refuses them to the client); run with namespaces, move them out of the scope, or --unmask the patterns you mean to grant"
	}
	return "mcpwarden: WARNING: the walk of the scope for secrets stopped at a bound (" + ly.Reason + "): secrets beyond it are not hidden from the server; narrow the scope or raise --secret-walk-limit"
}
