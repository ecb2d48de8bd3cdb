package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
	"golang.org/x/sys/unix"
)

// apply fences the calling thread. Order matters: the bounding set can only
// be dropped while CAP_SETPCAP is still held; no_new_privs must precede
// landlock_restrict_self and the seccomp filter (both need it when not
// privileged); the effective capabilities go last.
func apply(s *Spec, pre *prepared) *Status {
	if s.Dir != "" {
		// Again: after a new root, the inherited working directory is the
		// old root's.
		if err := unix.Chdir(s.Dir); err != nil {
			return &Status{Stage: StagePrivs, Errno: errnoOf(err), Path: s.Dir, Message: "enter the working directory: " + err.Error()}
		}
	}
	if !s.Enforce {
		return nil
	}
	if err := setLimits(s.Limits); err != nil {
		return &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: err.Error()}
	}
	// Others never get write through a creation mode: S_IWOTH joins the
	// inherited umask, and the seccomp filter answers a umask() that would
	// clear it without running it (as the C exec stage does).
	unix.Umask(unix.Umask(0) | unix.S_IWOTH)
	if s.DropCaps {
		if err := dropBoundingSet(); err != nil {
			return &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: err.Error()}
		}
	}
	if s.Identity != nil {
		if err := becomeIdentity(*s.Identity); err != nil {
			return &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: err.Error()}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: "set no_new_privs: " + err.Error()}
	}
	if s.ABI > 0 {
		fd := pre.landlock
		if fd < 0 {
			var st *Status
			if fd, st = buildLandlock(s); st != nil {
				return st
			}
		}
		pre.landlock = -1
		err := landlockRestrictSelf(fd, s.RestrictFlag)
		unix.Close(fd)
		if err != nil {
			return &Status{Stage: StageLandlock, Errno: errnoOf(err), Message: "landlock_restrict_self: " + err.Error()}
		}
	}
	if s.Seccomp {
		filter := pre.filter
		if filter == nil {
			var st *Status
			if filter, st = buildFilter(s); st != nil {
				return st
			}
		}
		prog := unix.SockFprog{Len: uint16(len(filter.Program)), Filter: &filter.Program[0]}
		if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
			return &Status{Stage: StageSeccomp, Errno: errnoOf(err), Message: "install seccomp filter: " + err.Error()}
		}
	}
	if s.DropCaps {
		if err := clearCaps(); err != nil {
			return &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: err.Error()}
		}
	}
	return nil
}

// prepared is what the fence needs that can be built before the
// go-ahead, while the launcher finishes (BeforeExec, the go byte): the
// Landlock ruleset with its rules and the seccomp program. Nothing of it
// restricts this process until apply enforces it.
type prepared struct {
	landlock int // ruleset fd, -1: built by apply
	filter   *seccomp.Filter
}

// prepare builds what it can of the fence of s ahead of apply. The
// ruleset is built only when this process will not change identity before
// enforcing it (s.Identity nil: the server keeps the launcher's identity),
// so that its paths are opened with the server's own permissions, as apply
// would open them; the /proc entries they name are already pinned (by the
// launcher before it sent the spec). A failure here is reported as apply's
// would be, only earlier.
func prepare(s *Spec) (*prepared, *Status) {
	pre := &prepared{landlock: -1}
	if !s.Enforce {
		return pre, nil
	}
	if s.Seccomp {
		f, st := buildFilter(s)
		if st != nil {
			return pre, st
		}
		pre.filter = f
	}
	if s.ABI > 0 && s.Identity == nil {
		fd, st := buildLandlock(s)
		if st != nil {
			return pre, st
		}
		pre.landlock = fd
	}
	return pre, nil
}

// buildLandlock builds the ruleset of s and returns its descriptor.
//
// Each path is opened with openat2(RESOLVE_NO_SYMLINKS): the launcher sends
// canonical paths (every symlink already resolved), so a symlink found now
// means something in the tree was swapped since the scope was checked — the
// run is refused rather than the rule landing on the symlink's target.
func buildLandlock(s *Spec) (int, *Status) {
	fd, st := createRuleset(s)
	if st != nil {
		return -1, st
	}
	if st := addLandlockRules(fd, s, 0); st != nil {
		unix.Close(fd)
		return -1, st
	}
	return fd, nil
}

// createRuleset creates an empty Landlock ruleset handling what s handles.
func createRuleset(s *Spec) (int, *Status) {
	fd, err := landlockCreateRuleset(&rulesetAttr{handledFS: s.HandledFS, handledNet: s.HandledNet, scoped: s.Scoped})
	if err != nil {
		return -1, &Status{Stage: StageLandlock, Errno: errnoOf(err), Message: fmt.Sprintf("create Landlock ruleset (fs %#x, net %#x, scoped %#x): %v", s.HandledFS, s.HandledNet, s.Scoped, err)}
	}
	return fd, nil
}

// buildFilter builds the seccomp program of s for this architecture.
func buildFilter(s *Spec) (*seccomp.Filter, *Status) {
	f, err := seccomp.Build(seccomp.Native, s.Filter)
	if err != nil {
		return nil, &Status{Stage: StageSeccomp, Message: err.Error()}
	}
	return f, nil
}

// addLandlockRules adds the rules of s to the ruleset fd. A rule under
// /proc/self names the /proc entry of server, the process that becomes the
// server (0: this one).
func addLandlockRules(fd int, s *Spec, server int) *Status {
	for _, p := range s.Paths {
		access := p.Access & s.HandledFS
		if access == 0 {
			continue
		}
		var path string
		if server > 0 {
			path = procOf(p.Path, server)
		} else {
			var err error
			if path, err = ownProc(p.Path); err != nil {
				return &Status{Stage: StageLandlock, Errno: errnoOf(err), Path: p.Path, Message: err.Error()}
			}
		}
		pfd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			msg := fmt.Sprintf("open %s for a Landlock rule: %v", p.Path, err)
			if errors.Is(err, unix.ELOOP) {
				msg = fmt.Sprintf("%s became a symlink after the scope was checked; refusing to run", p.Path)
			}
			return &Status{Stage: StageLandlock, Errno: errnoOf(err), Path: p.Path, Message: msg}
		}
		err = landlockAddPathRule(fd, &pathBeneathAttr{allowed: access, parentFD: int32(pfd)})
		unix.Close(pfd)
		if err != nil {
			return &Status{Stage: StageLandlock, Errno: errnoOf(err), Path: p.Path, Message: fmt.Sprintf("add Landlock rule for %s (access %#x): %v", p.Path, access, err)}
		}
	}
	if s.HandledNet != 0 {
		for _, p := range s.Ports {
			if err := landlockAddPortRule(fd, &netPortAttr{allowed: p.Access & s.HandledNet, port: uint64(p.Port)}); err != nil {
				return &Status{Stage: StageLandlock, Errno: errnoOf(err), Message: fmt.Sprintf("add Landlock rule for TCP port %d: %v", p.Port, err)}
			}
		}
	}
	return nil
}

// procSelf is how a rule names the server's own /proc entry
// (runtimeprofile.ProcSelf).
const procSelf = "/proc/self"

// ownProc turns a rule path under /proc/self into the same path under this
// process's own /proc/PID: Landlock binds a rule to the inode it is given,
// and /proc/self is a symlink each process resolves to its own entry. The
// pid is read from the /proc/self link itself, so it is the one the /proc
// mounted here knows (in a pid namespace with its own /proc, the
// namespace's). This process becomes the server at exec and keeps the pid,
// so the rule covers the server's /proc entry and no other process's.
func ownProc(path string) (string, error) {
	if rest, ok := strings.CutPrefix(path, procSelf); !ok || rest != "" && rest[0] != '/' {
		return path, nil
	}
	pid, err := os.Readlink(procSelf)
	if err != nil {
		return "", fmt.Errorf("read %s for the rule on the server's own /proc entry: %w", procSelf, err)
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return "", fmt.Errorf("%s points to %q, not a process id", procSelf, pid)
	}
	return procOf(path, n), nil
}

// procOf turns a rule path under /proc/self into the same path under
// /proc/PID: the exec stage's entry, as the run's init (its parent, in the
// same pid namespace and /proc) sees it.
func procOf(path string, pid int) string {
	rest, ok := strings.CutPrefix(path, procSelf)
	if !ok || rest != "" && rest[0] != '/' {
		return path
	}
	return "/proc/" + strconv.Itoa(pid) + rest
}

// becomeIdentity switches every thread to id (no supplementary groups).
// Leaving uid 0 clears the capability sets; the parent-death signal, which
// the kernel clears on a change of credentials, is set again.
func becomeIdentity(id Identity) error {
	sig := pdeathsig()
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(id.GID, id.GID, id.GID); err != nil {
		return fmt.Errorf("switch to gid %d: %w", id.GID, err)
	}
	if err := syscall.Setresuid(id.UID, id.UID, id.UID); err != nil {
		return fmt.Errorf("switch to uid %d: %w", id.UID, err)
	}
	if sig != 0 {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0); err != nil {
			return fmt.Errorf("set the parent-death signal again: %w", err)
		}
	}
	return nil
}

func pdeathsig() int {
	var sig int32
	if _, _, e := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0); e != 0 {
		return 0
	}
	return int(sig)
}

// dropBoundingSet empties the capability bounding set and the ambient set,
// so that exec of the server — even as uid 0 — yields no capabilities.
// Without CAP_SETPCAP (not root) there is nothing to drop: no_new_privs
// already stops file capabilities and set-id bits.
func dropBoundingSet() error {
	last := lastCap()
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= last; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EPERM) {
			if c == 0 && !hasCapSetpcap() {
				return nil
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

func clearCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	return nil
}

func hasCapSetpcap() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SETPCAP) != 0
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < 64 {
			return n
		}
	}
	return 63
}

// deniedExecPath finds the first file of the exec chain (the executable, a
// "#!" interpreter, the ELF program interpreter) that cannot be opened for
// execution from inside the fence. It runs after the fence is applied, so
// the kernel answers the question.
func deniedExecPath(exe string) string {
	chain := []string{exe}
	seen := map[string]bool{}
	for i := 0; i < len(chain) && i < 8; i++ {
		p := chain[i]
		if seen[p] {
			continue
		}
		seen[p] = true
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return p
		}
		buf := make([]byte, 256)
		n, _ := unix.Read(fd, buf)
		unix.Close(fd)
		if next := nextInChain(buf[:n]); next != "" {
			chain = append(chain, next)
		}
	}
	return ""
}

func nextInChain(head []byte) string {
	if len(head) > 2 && head[0] == '#' && head[1] == '!' {
		line := string(head[2:])
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		if f := strings.Fields(line); len(f) > 0 {
			return f[0]
		}
	}
	return ""
}
