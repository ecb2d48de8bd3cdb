// Package policy decides tool calls against a scope: which tools exist, what
// class of action each is, which arguments are paths, where a path really
// lands after symlinks, and which paths are secret even inside the scope.
// Everything here is pure over its inputs and the filesystem; the proxy
// supplies the effective scope.
package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/sys/unix"
	"golang.org/x/text/unicode/norm"
)

// MaxPathLen is PATH_MAX on Linux.
const MaxPathLen = 4096

// ErrBadPath is wrapped by every refusal of a path's form (as opposed to
// where it points).
var ErrBadPath = errors.New("path refused")

func badPath(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadPath, fmt.Sprintf(format, args...))
}

// CheckForm refuses strings no honest path contains: NUL and other control
// characters, invisible format characters (bidi overrides, zero-width
// joiners), anything not in Unicode NFC and combining marks (look-alikes
// that the filesystem server matches loosely), private-use and unassigned
// code points, U+FFFD and backslashes.
func CheckForm(p string) error {
	switch {
	case p == "":
		return badPath("empty")
	case len(p) > MaxPathLen:
		return badPath("longer than %d bytes", MaxPathLen)
	case !utf8.ValidString(p):
		return badPath("not valid UTF-8")
	case !asciiOnly(p) && !norm.NFC.IsNormalString(p):
		// The filesystem server matches a missing name to an existing
		// NFC-equivalent one (U+212A KELVIN SIGN is 'K'): the proxy would
		// check one file and the server open another.
		return badPath("not in Unicode normal form C")
	}
	for _, r := range p {
		switch {
		case r == 0:
			return badPath("contains NUL")
		case r == '\\':
			return badPath("contains a backslash")
		case r == utf8.RuneError:
			return badPath("contains U+FFFD")
		case r < utf8.RuneSelf:
			if unicode.IsControl(r) {
				return badPath("contains a control character")
			}
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs, unicode.Mn, unicode.Me, unicode.Zl, unicode.Zp):
			return badPath("contains an invisible, combining or control character (U+%04X)", r)
		case !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
			return badPath("contains an unassigned code point (U+%04X)", r)
		case r == 0xFFFE || r == 0xFFFF:
			return badPath("contains a noncharacter")
		}
	}
	return nil
}

// Resolved is a path argument after canonicalisation.
type Resolved struct {
	Lexical string // absolute and cleaned, symlinks not followed
	Real    string // every existing component's symlinks resolved
	// Physical is where the kernel lands for the name as written, when it
	// holds a ".." component: a ".." after a symlink goes to the parent of
	// the symlink's target, not back over the symlink's name, so a server
	// that hands the name to open(2) uncleaned ("refs/../config" with refs
	// a symlink to .git/refs) reads another file than one that cleans it
	// first. Empty when the name has no ".." (it is then Real).
	Physical string
}

// Resolve turns a raw path argument into its lexical and real absolute
// forms. "~" and "~/..." expand to home (refused when home is empty);
// relative paths go through relTo. For a path that does not exist yet (a
// write target), the deepest existing ancestor is resolved and the rest
// appended; a dangling symlink on the way is refused, because writing
// through it would create its target wherever it points.
func Resolve(raw, home string, relTo func(string) string) (Resolved, error) {
	if err := CheckForm(raw); err != nil {
		return Resolved{}, err
	}
	p := raw
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home == "" {
			return Resolved{}, badPath("'~' cannot be expanded: no home directory is configured")
		}
		p = filepath.Join(home, p[1:])
	}
	if !filepath.IsAbs(p) {
		p = relTo(p)
		if !filepath.IsAbs(p) {
			return Resolved{}, badPath("relative path has no base to resolve against")
		}
	}
	lexical := filepath.Clean(p)
	real, err := resolveReal(lexical)
	if err != nil {
		return Resolved{}, err
	}
	r := Resolved{Lexical: lexical, Real: real}
	if hasDotDot(raw) {
		unclean := raw
		switch {
		case raw == "~" || strings.HasPrefix(raw, "~/"):
			unclean = home + "/" + raw[1:]
		case !filepath.IsAbs(raw):
			// relTo cleans what it joins; its directory is what it gives
			// for the empty name.
			unclean = relTo("") + "/" + raw
		}
		if r.Physical, err = resolvePhysical(unclean); err != nil {
			return Resolved{}, err
		}
	}
	return r, nil
}

// hasDotDot reports whether p has a ".." component.
func hasDotDot(p string) bool {
	for i := strings.Index(p, ".."); i >= 0; {
		if (i == 0 || p[i-1] == '/') && (i+2 == len(p) || p[i+2] == '/') {
			return true
		}
		j := strings.Index(p[i+2:], "..")
		if j < 0 {
			return false
		}
		i += 2 + j
	}
	return false
}

// resolvePhysical resolves the absolute, uncleaned p component by
// component as the kernel does: each symlink is resolved where it is met,
// and ".." goes to the parent of the directory reached so far. A name
// below the deepest existing component is appended cleaned (the kernel
// would fail on "missing/..", a server that cleans would not); a dangling
// symlink on the way is refused as in Resolve.
func resolvePhysical(p string) (string, error) {
	cur := "/"
	parts := strings.Split(p, "/")
	for i, c := range parts {
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return filepath.Join(append([]string{next}, parts[i+1:]...)...), nil
			}
			return "", badPath("cannot be resolved (%v)", errors.Unwrap(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if next, err = filepath.EvalSymlinks(next); err != nil {
				return "", badPath("leads through a dangling or broken symlink")
			}
		}
		cur = next
	}
	return cur, nil
}

// resolveReal is the real path of lexical, which must be absolute and
// clean (Resolve cleans it): the fast path returns it as it is.
func resolveReal(lexical string) (string, error) {
	if noSymlinks(lexical) {
		// It exists and no component is a symlink: it is its own real path.
		return lexical, nil
	}
	return resolveRealSlow(lexical)
}

// resolveRealSlow resolves lexical through every symlink: the kernel's
// answer for an existing path, else a walk.
func resolveRealSlow(lexical string) (string, error) {
	if real, ok := kernelRealpath(lexical); ok {
		return real, nil
	}
	real, err := filepath.EvalSymlinks(lexical)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", badPath("cannot be resolved (%v)", errors.Unwrap(err))
	}
	// Walk up to the deepest ancestor that exists (as an entry, so that a
	// dangling symlink counts as existing).
	dir, rest := lexical, []string{}
	for {
		if _, lerr := os.Lstat(dir); lerr == nil {
			break
		} else if !errors.Is(lerr, fs.ErrNotExist) {
			return "", badPath("cannot be resolved (%v)", errors.Unwrap(lerr))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", badPath("no existing ancestor")
		}
		rest = append(rest, filepath.Base(dir))
		dir = parent
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", badPath("leads through a dangling or broken symlink")
	}
	st, err := os.Stat(realDir)
	if err != nil || !st.IsDir() {
		return "", badPath("a component below an existing file does not exist")
	}
	for i := len(rest) - 1; i >= 0; i-- {
		realDir = filepath.Join(realDir, rest[i])
	}
	return realDir, nil
}

// Within reports whether p equals one of dirs or lies below it.
func Within(dirs []string, p string) bool {
	for _, d := range dirs {
		// (p under d+"/", without making that string.)
		if p == d || (d == "/" && strings.HasPrefix(p, "/")) || len(p) > len(d) && p[len(d)] == '/' && strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// FSRelative returns the relative-path rule of the official filesystem
// server for the directory list dirs, in order: the first dir under which
// the joined path stays inside one of dirs, else the first dir. With no dirs
// the server would use its working directory; the proxy refuses instead.
func FSRelative(dirs []string) func(string) string {
	return func(rel string) string {
		for _, d := range dirs {
			c := filepath.Join(d, rel)
			if Within(dirs, c) {
				return c
			}
		}
		if len(dirs) == 0 {
			return rel // stays relative: Resolve refuses it
		}
		return filepath.Join(dirs[0], rel)
	}
}

// BaseRelative resolves relative paths against one directory.
func BaseRelative(base string) func(string) string {
	return func(rel string) string { return filepath.Join(base, rel) }
}

// CheckGlob refuses a glob pattern that could name anything outside the
// directory it is evaluated under: absolute patterns, '~', '..' anywhere
// (also inside braces), and the characters CheckForm refuses.
func CheckGlob(pattern string) error {
	if pattern == "" {
		return nil
	}
	if len(pattern) > 1024 {
		return badPath("glob pattern longer than 1024 bytes")
	}
	for _, r := range pattern {
		if r == 0 || unicode.IsControl(r) || unicode.In(r, unicode.Cf) {
			return badPath("glob pattern contains a control or invisible character")
		}
	}
	switch {
	case strings.HasPrefix(pattern, "/"):
		return badPath("glob pattern is absolute; patterns are relative to the searched directory")
	case strings.HasPrefix(pattern, "~"):
		return badPath("glob pattern starts with '~'")
	case strings.Contains(pattern, ".."):
		return badPath("glob pattern contains '..'")
	}
	alts, err := expandGlob(pattern)
	if err != nil {
		return badPath("%v", err)
	}
	for _, a := range alts {
		if strings.HasPrefix(a, "/") || strings.HasPrefix(a, "~") {
			return badPath("glob pattern has an absolute alternative; patterns are relative to the searched directory")
		}
	}
	return nil
}

// kernelRealpath resolves an existing path as the kernel does, in three
// system calls whatever its depth (filepath.EvalSymlinks takes one lstat
// per component): open it O_PATH (which follows every symlink but opens
// nothing: no device is touched, no read permission needed), read the
// descriptor's path from /proc/self/fd, close it. ok is false when any of
// that fails (the path does not exist, /proc is not mounted, the name is
// not one the kernel can print): the caller falls back to the walk.
func kernelRealpath(p string) (string, bool) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	var buf [MaxPathLen + 1]byte
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf[:])
	if err != nil || n <= 0 || n > MaxPathLen || buf[0] != '/' {
		return "", false
	}
	real := string(buf[:n])
	// A file unlinked meanwhile reads "... (deleted)"; anything not clean
	// is left to the walk.
	if strings.HasSuffix(real, " (deleted)") || filepath.Clean(real) != real {
		return "", false
	}
	return real, true
}

// resolveCached is RESOLVE_CACHED (Linux 5.12): fail with EAGAIN instead of
// looking up a name that is not in the kernel's dentry cache.
const resolveCached = 0x20

// openCached opens p O_PATH (which opens nothing: no device is touched, no
// read permission is needed) with one openat2 that cannot block: with
// RESOLVE_CACHED the kernel answers from its dentry cache or fails with
// EAGAIN instead of reading a disk or asking a network filesystem. So it
// is made as a raw system call, without the runtime's bookkeeping, which
// would otherwise wake the runtime's monitor thread around every call the
// proxy decides (see launcher/proxy/rawio.go). The descriptor is closed
// at once, also raw (closing an O_PATH descriptor flushes nothing). It
// returns the errno (0: opened). Any answer but 0, ENOENT and ENOTDIR
// (EAGAIN, ELOOP under RESOLVE_NO_SYMLINKS, ENOSYS on an old kernel, a
// permission error) leaves the decision to the caller's general path.
func openCached(p string, flags int, resolve uint64) syscall.Errno {
	b, err := unix.BytePtrFromString(p)
	if err != nil {
		return unix.EINVAL
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_PATH | unix.O_CLOEXEC), Resolve: resolve | resolveCached}
	fdcwd := unix.AT_FDCWD
	fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT2, uintptr(fdcwd), uintptr(unsafe.Pointer(b)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
	runtime.KeepAlive(b)
	if e != 0 {
		return e
	}
	unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
	return 0
}

// noSymlinks reports that p exists and that none of its components is a
// symlink (or a /proc magic link), decided from the dentry cache without
// blocking: p, absolute and clean, is then its own real path. false means
// "not known": the caller resolves p the general way.
func noSymlinks(p string) bool {
	return openCached(p, 0, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS) == 0
}

// Exists reports whether p names an entry (as lstat(2) sees it: symlinks
// of the directories on the way are followed, the last component is not).
// It is one statx(2) that asks for no attributes: a lookup and nothing
// else. (An openat2 O_PATH, which this used to be, allocates and frees a
// file even when the name does not exist: about three times the cost, on
// every plain string a call carries.) It goes through the runtime's
// system-call path, so a lookup that waits for a disk or a network
// filesystem holds its thread, not a processor.
func Exists(p string) bool {
	var st unix.Statx_t
	for {
		err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, 0, &st)
		if err != unix.EINTR {
			return err == nil
		}
	}
}

// asciiOnly reports that s is ASCII, which every Unicode normal form leaves
// as it is (norm's check allocates: it is skipped for the common case).
func asciiOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
