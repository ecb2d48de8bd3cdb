package launcher

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

// The dedicated host uids a root launcher runs servers as: one per run,
// picked at random in [RunUIDBase, RunUIDBase+RunUIDCount), above the
// ranges distributions and systemd hand out (systemd's container range
// ends at 0x6FFFFFFF), so that no host file, process or account has it.
const (
	RunUIDBase  = 0x70000000
	RunUIDCount = 1 << 24
)

// hostname is the run's host name in its uts namespace.
const hostname = "mcpwarden"

// isolation is how a run is isolated beyond Landlock and seccomp: which
// namespaces the helper is cloned into, who the server runs as, who owns
// what it creates. New plans it from the configuration and what this
// process may do; spawn drops the namespaces when the kernel refuses them.
type isolation struct {
	// privileged: root with CAP_SYS_ADMIN, CAP_SETUID and CAP_SETGID. The
	// helper gets no user namespace (its namespaces belong to the host's);
	// the server runs in a user namespace of its own, mapped to a
	// dedicated uid.
	privileged bool
	flags      uintptr // CLONE_NEW* for the helper; 0: none
	userNS     bool    // the helper's own user namespace (unprivileged launcher)
	net        bool    // a network namespace with loopback only
	memfd      bool    // vm.memfd_noexec=2 in the run's pid namespace

	server   *sandbox.ServerUserNS // privileged, with idmapped scope mounts
	identity *sandbox.Identity     // privileged without idmapped mounts: run as the owner
	owner    sandbox.Identity      // who owns the files the server creates
	// serverUID is the host uid the server runs as.
	serverUID int

	nsReason string // why there are no namespaces (flags == 0), a token
	idReason string // the identity layer's reason
	idState  schema.LayerState
	required bool   // namespaces are required (--require-namespaces, require_isolation, allow_io_uring)
	because  string // why, when not the first two (IsolationError.Because)
}

// IsolationError says the run requires namespaces that cannot be made
// here; cmd maps it to exit 69.
type IsolationError struct {
	Missing string // what is missing, a token (the layer reason)
	Err     error  // the kernel's answer, when there was one
	Hint    string
	// Because says why they are required; "": --require-namespaces or
	// the scope's require_isolation.
	Because string
}

// ioUringNeedsNamespaces is why a scope that allows io_uring needs them.
const ioUringNeedsNamespaces = "the scope's allow_io_uring: io_uring operations pass the seccomp filter unchecked, and without the mount namespace they reach the host's unix sockets (Docker's, systemd's, D-Bus) and every socket family"

func (e *IsolationError) Error() string {
	because := e.Because
	if because == "" {
		because = "--require-namespaces or the scope's require_isolation"
	}
	msg := "the run requires namespaces (" + because + "), but " + e.Missing
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Hint != "" {
		msg += ". " + e.Hint
	}
	return msg
}

func (e *IsolationError) Unwrap() error { return e.Err }

// planIsolation decides what to try; it does not touch the kernel beyond
// reading this process's credentials and a few /proc files.
func planIsolation(cfg *Config) (*isolation, error) {
	iso := &isolation{required: cfg.RequireNamespaces || cfg.Scope.RequireIsolation}
	// io_uring's operations are seen by no argument check of the filter:
	// only the minimal root keeps its sockets and paths to the run's own
	// (TestFenceIOUringHostUnixSocket). So a scope that allows it requires
	// the namespaces, in enforce mode.
	if cfg.Mode == schema.ModeEnforce && cfg.Scope.AllowIOUring && !iso.required {
		iso.required, iso.because = true, ioUringNeedsNamespaces
	}
	euid, egid := os.Geteuid(), os.Getegid()
	iso.serverUID = euid
	iso.owner = sandbox.Identity{UID: euid, GID: egid}
	if cfg.Mode != schema.ModeEnforce {
		iso.nsReason, iso.idState, iso.idReason = "audit_mode", schema.LayerOff, "audit_mode"
		if iso.required {
			return nil, &IsolationError{Missing: "audit_mode", Hint: "--mode audit runs the server without the fence; drop --require-namespaces or run in enforce mode"}
		}
		return iso, nil
	}
	if cfg.NoNamespaces {
		if iso.required {
			hint := "--no-namespaces and a requirement of namespaces contradict each other"
			if iso.because != "" {
				hint = "drop --no-namespaces, or remove allow_io_uring from the scope"
			}
			return nil, &IsolationError{Missing: "operator_disabled", Hint: hint, Because: iso.because}
		}
		iso.nsReason = "operator_disabled"
	}
	caps := effectiveCaps()
	iso.privileged = euid == 0 && caps&(1<<unix.CAP_SYS_ADMIN) != 0 && caps&(1<<unix.CAP_SETUID) != 0 && caps&(1<<unix.CAP_SETGID) != 0
	if cfg.Owner != "" && !iso.privileged {
		if o, err := parseOwner(cfg.Owner); err != nil {
			return nil, err
		} else if o.UID != euid {
			return nil, fmt.Errorf("%w: --owner %s: only a root launcher can make another user own the files the server creates", ErrUsage, cfg.Owner)
		}
	}
	if cfg.RunUID != 0 && !iso.privileged {
		return nil, fmt.Errorf("%w: --run-uid: only a root launcher can run the server as another uid", ErrUsage)
	}
	iso.net = !networkGranted(cfg.Scope)
	// vm.memfd_noexec is per pid namespace, but /proc/sys writes need the
	// host's root: an unprivileged launcher's init cannot set it.
	iso.memfd = fileExists("/proc/sys/vm/memfd_noexec") && iso.privileged
	if iso.nsReason == "" {
		iso.flags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
		if iso.net {
			iso.flags |= unix.CLONE_NEWNET
		}
		if !iso.privileged {
			iso.flags |= unix.CLONE_NEWUSER
			iso.userNS = true
		}
	}
	if !iso.privileged {
		iso.idState, iso.idReason = schema.LayerOn, "unprivileged_launcher"
		if euid == 0 {
			// Root, but not allowed to change uid or mount: the server keeps uid 0.
			iso.idState, iso.idReason = schema.LayerOff, "root_without_setuid"
		}
		return iso, nil
	}
	owner, err := resolveOwner(cfg.Owner, cfg.Scope.Base)
	if err != nil {
		return nil, err
	}
	iso.owner = owner
	run := cfg.RunUID
	if run == 0 {
		run = pickRunUID(owner)
	} else if run < 0 || run == owner.UID || run > 0x7fffffff {
		return nil, fmt.Errorf("%w: --run-uid %d: pick an unused uid that is not the owner's (default: one in %d-%d per run)", ErrUsage, run, RunUIDBase, RunUIDBase+RunUIDCount-1)
	}
	iso.setPrivilegedIdentity(run, cfg.Scope)
	return iso, nil
}

// setPrivilegedIdentity decides, for a root launcher, between the
// dedicated uid with idmapped scope mounts and, where those cannot be made
// (no mount namespace, a file system without idmap support), running the
// server as the owner.
func (iso *isolation) setPrivilegedIdentity(run int, scope *schema.CanonicalScope) {
	why := ""
	if iso.flags == 0 {
		why = "no_mount_namespace"
	} else if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		why = "no_userns" // the server's own user namespace cannot be made
	} else {
		for _, p := range scope.AllowedPaths {
			if !idmapSupported(p.Path) {
				why = "no_idmap_fs"
				break
			}
		}
	}
	if why == "" {
		iso.server = &sandbox.ServerUserNS{Inside: iso.owner, Host: sandbox.Identity{UID: run, GID: run}}
		iso.identity = nil
		iso.serverUID = run
		iso.idState, iso.idReason = schema.LayerOn, "dedicated_uid"
		return
	}
	// The server runs as the owner: not root, owns what the owner owns.
	iso.server = nil
	id := iso.owner
	iso.identity = &id
	iso.serverUID = id.UID
	iso.idState, iso.idReason = schema.LayerDegraded, "runs_as_owner_"+why
	if id.UID == 0 {
		iso.identity = nil
		iso.idState, iso.idReason = schema.LayerOff, "owner_is_root_"+why
	}
}

// degrade drops the namespaces after the kernel refused them (err from
// starting the helper): the run goes on with Landlock and seccomp, and
// says so. With namespaces required it is an *IsolationError instead.
func (iso *isolation) degrade(err error, scope *schema.CanonicalScope) error {
	reason, hint := "namespaces_failed", ""
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		reason = "namespaces_denied"
		if iso.userNS {
			reason = "userns_denied"
			hint = "unprivileged user namespaces are restricted on this host (Ubuntu 24.04+: AppArmor's kernel.apparmor_restrict_unprivileged_userns; elsewhere kernel.unprivileged_userns_clone=0): allow them for mcpwarden, or run mcpwarden as root"
		}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EUSERS):
		reason = "namespace_limit"
		if iso.userNS {
			reason = "userns_limit"
		}
		hint = "a namespace limit is reached (sysctl user.max_user_namespaces and friends): raise it"
	case errors.Is(err, syscall.EINVAL):
		reason = "namespaces_unsupported"
		hint = "this kernel lacks a namespace type the fence uses (CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS, ...)"
	}
	if iso.required {
		return &IsolationError{Missing: reason, Err: err, Hint: hint, Because: iso.because}
	}
	iso.flags, iso.userNS, iso.nsReason = 0, false, reason
	if iso.privileged {
		iso.setPrivilegedIdentity(iso.serverUID, scope)
	}
	return nil
}

// layers are the namespace and identity layers of the run.
func (iso *isolation) layers() []schema.Layer {
	state := func(on bool, reason string) schema.Layer {
		if on {
			return schema.Layer{State: schema.LayerOn, Reason: reason}
		}
		return schema.Layer{State: schema.LayerOff, Reason: reason}
	}
	ns := iso.flags != 0
	var out []schema.Layer
	add := func(name schema.LayerName, l schema.Layer) {
		l.Name = name
		out = append(out, l)
	}
	switch {
	case !ns:
		add(schema.LayerUserNS, state(false, iso.nsReason))
	case iso.userNS:
		add(schema.LayerUserNS, state(true, "launcher_userns"))
	case iso.server != nil:
		add(schema.LayerUserNS, state(true, "server_userns"))
	default:
		add(schema.LayerUserNS, state(false, "runs_as_owner"))
	}
	pid := schema.Layer{State: schema.LayerOff, Reason: iso.nsReason}
	if ns {
		pid = state(true, "memfd_noexec")
		switch {
		case !iso.memfd && iso.userNS:
			pid.Reason = "no_memfd_noexec_unprivileged"
		case !iso.memfd:
			pid.Reason = "no_memfd_noexec_kernel"
		}
	}
	add(schema.LayerMountNS, state(ns, iso.nsReason))
	add(schema.LayerPIDNS, pid)
	add(schema.LayerIPCNS, state(ns, iso.nsReason))
	add(schema.LayerUTSNS, state(ns, iso.nsReason))
	switch {
	case iso.net && ns:
		add(schema.LayerNetNS, state(true, "loopback_only"))
	case !iso.net:
		add(schema.LayerNetNS, state(false, "scope_grants_network"))
	default:
		add(schema.LayerNetNS, state(false, iso.nsReason))
	}
	add(schema.LayerIdentity, schema.Layer{State: iso.idState, Reason: iso.idReason})
	return out
}

// fileOwner is the record's file_owner: "uid:gid".
func (iso *isolation) fileOwner() string {
	if iso.idState == schema.LayerOff && iso.idReason == "audit_mode" {
		return ""
	}
	return fmt.Sprintf("%d:%d", iso.owner.UID, iso.owner.GID)
}

// cInit reports whether the run's init is the C program (execstage/init.c)
// fed the binary plan: whenever the run has its own pid namespace (and so
// its mount namespace). Without namespaces the Go helper fences itself.
func (iso *isolation) cInit() bool { return iso.flags&unix.CLONE_NEWPID != 0 }

// namespaces is the helper's namespace spec for ruleset rs; nil without
// namespaces.
func (iso *isolation) namespaces(rs *ruleset.Ruleset, prof *runtimeprofile.Profile, tmp, dir string, tmpSize int64) *sandbox.Namespaces {
	if iso.flags == 0 {
		return nil
	}
	ns := &sandbox.Namespaces{
		User: iso.userNS, Mount: true, PID: true, IPC: true, UTS: true, Net: iso.net,
		Hostname: hostname, MemfdNoexec: iso.memfd, NoNestedUserNS: iso.userNS,
		Server: iso.server,
	}
	r := &ns.Root
	r.Staging, r.Tmp, r.TmpSize = tmp, tmp, tmpSize
	switch {
	case iso.server != nil:
		r.TmpOwner = iso.server.Host
	case iso.identity != nil:
		r.TmpOwner = *iso.identity
	}
	for _, rule := range rs.Rules {
		if rule.Origin == ruleset.OriginTmp || hasPathPrefix(rule.Path, "/proc") {
			continue // the private tmpfs, the run's own /proc
		}
		m := sandbox.Mount{Path: rule.Path, Dir: rule.Kind == schema.KindDir}
		if rule.Origin == ruleset.OriginScope {
			m.Write = rule.Access&writeRights != 0
			m.Exec = rule.Access&ll.AccessFSExecute != 0
			m.Idmap = iso.server != nil
		} else {
			// Runtime: executables, the loader and libraries are mapped
			// executable; the files are read-only either way. A device
			// (/dev/null) is opened and written on a read-only mount too
			// (the kernel asks a mount's permission to write a regular
			// file, a directory or a link, never a device): writable, its
			// mount let the server set the host device's times (utimensat
			// with no times needs only the right to write the file, not
			// its ownership), and chmod it where the server runs as its
			// owner. Nothing maps a device to run it: noexec.
			m.Dev = isDevice(rule.Path)
			m.Exec = !m.Dev
		}
		r.Mounts = append(r.Mounts, m)
	}
	var names []string
	if prof != nil {
		names = append(names, prof.Names...)
	}
	r.Links = symlinkChains(names)
	if dir != "" && dir != "/" {
		r.Dirs = []string{filepath.Clean(dir)} // the working directory, empty unless granted
	}
	return ns
}

// writeRights are the Landlock rights that need a writable mount.
const writeRights = landlock.AccessFSSet(ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSRemoveFile | ll.AccessFSRemoveDir | ll.AccessFSRefer)

// devices are the character devices a runtime bind keeps openable (no
// nodev); anything else is mounted nodev.
var devices = map[string]bool{"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/random": true, "/dev/urandom": true}

func isDevice(p string) bool {
	if !devices[p] {
		return false
	}
	st, err := os.Stat(p)
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func hasPathPrefix(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// symlinkChains lists the symlinks met resolving each name on the host,
// including those inside their targets, in a stable order: the minimal
// root recreates them so that a literal path resolves there as here.
func symlinkChains(names []string) []sandbox.Link {
	seen := map[string]bool{}
	var out []sandbox.Link
	for _, n := range names {
		p := filepath.Clean(n)
		if !filepath.IsAbs(p) {
			continue
		}
		for hops := 0; hops < 40; hops++ {
			link, target, rest, ok := firstSymlink(p)
			if !ok {
				break
			}
			if !seen[link] {
				seen[link] = true
				out = append(out, sandbox.Link{Path: link, Target: target})
			}
			next := target
			if !filepath.IsAbs(next) {
				next = filepath.Join(filepath.Dir(link), target)
			}
			p = filepath.Join(next, rest)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// firstSymlink finds the first component of p that is a symlink: the
// link's path, its target, and the rest of p after it.
func firstSymlink(p string) (link, target, rest string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := ""
	for i, part := range parts {
		cur += "/" + part
		st, err := os.Lstat(cur)
		if err != nil {
			return "", "", "", false
		}
		if st.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(cur)
			if err != nil {
				return "", "", "", false
			}
			return cur, t, strings.Join(parts[i+1:], "/"), true
		}
	}
	return "", "", "", false
}

// idmapSupported reports whether path lies on a file system that takes
// idmapped mounts (FS_ALLOW_IDMAP, Linux 6.3+ for tmpfs).
func idmapSupported(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.F2FS_SUPER_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, 0xE0F5E1E2, unix.MSDOS_SUPER_MAGIC:
		return true
	}
	return false
}

// resolveOwner parses --owner USER[:GROUP] (names or numbers); empty: the
// owner of the base directory.
func resolveOwner(spec, base string) (sandbox.Identity, error) {
	if spec == "" {
		st, err := os.Stat(base)
		if err != nil {
			return sandbox.Identity{}, fmt.Errorf("the owner of the base directory (the default --owner): %w", err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		return sandbox.Identity{UID: int(sys.Uid), GID: int(sys.Gid)}, nil
	}
	return parseOwner(spec)
}

func parseOwner(spec string) (sandbox.Identity, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	bad := func(what string, err error) (sandbox.Identity, error) {
		return sandbox.Identity{}, fmt.Errorf("%w: --owner %s: %s: %v (give USER[:GROUP], names or numbers)", ErrUsage, spec, what, err)
	}
	var id sandbox.Identity
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		id.UID, id.GID = n, n
		if _, gid, err := lookupUser(name); err == nil {
			id.GID = gid
		}
	} else {
		uid, gid, err := lookupUser(name)
		if err != nil {
			return bad("no such user", err)
		}
		id.UID, id.GID = uid, gid
	}
	if hasGroup {
		if n, err := strconv.Atoi(group); err == nil && n >= 0 {
			id.GID = n
		} else {
			gid, err := lookupGroup(group)
			if err != nil {
				return bad("no such group", err)
			}
			id.GID = gid
		}
	}
	return id, nil
}

// getentPath is the host's getent(1). mcpwarden is a static program (no
// cgo: the dynamic loader and libc's start-up cost every launch about half
// a millisecond), so os/user reads /etc/passwd and /etc/group only; a user
// or group known through the host's name services alone (LDAP, sssd,
// systemd-homed) is looked up with getent, which loads them. An absolute
// path, run with an empty environment: PATH does not choose who owns the
// server's files. A variable for the tests.
var getentPath = "/usr/bin/getent"

// lookupUser finds the user key (a name, or a number) in /etc/passwd, then
// through getent; it returns the uid and the primary gid.
func lookupUser(key string) (uid, gid int, err error) {
	var u *user.User
	if _, nerr := strconv.Atoi(key); nerr == nil {
		u, err = user.LookupId(key)
	} else {
		u, err = user.Lookup(key)
	}
	if err == nil {
		uid, uerr := strconv.Atoi(u.Uid)
		gid, gerr := strconv.Atoi(u.Gid)
		if uerr == nil && gerr == nil {
			return uid, gid, nil
		}
	}
	f, gerr := getent("passwd", key, 4)
	if gerr != nil {
		return 0, 0, err
	}
	uid, uerr := parseID(f[2])
	gid, gerr = parseID(f[3])
	if (f[0] != key && f[2] != key) || uerr != nil || gerr != nil {
		return 0, 0, fmt.Errorf("getent passwd %s: an entry for another user, or not a uid and gid", key)
	}
	return uid, gid, nil
}

// lookupGroup finds the group name in /etc/group, then through getent.
func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err == nil {
		if gid, cerr := strconv.Atoi(g.Gid); cerr == nil {
			return gid, nil
		}
	}
	f, gerr := getent("group", name, 3)
	if gerr != nil {
		return 0, err
	}
	gid, perr := parseID(f[2])
	if f[0] != name || perr != nil {
		return 0, fmt.Errorf("getent group %s: an entry for another group, or not a gid", name)
	}
	return gid, nil
}

// getent runs `getent DB KEY` and returns the fields of its one line,
// which must have at least min of them.
func getent(db, key string, min int) ([]string, error) {
	if key == "" || strings.ContainsAny(key, ":\n") || strings.HasPrefix(key, "-") {
		return nil, fmt.Errorf("not a %s name", db)
	}
	cmd := exec.Command(getentPath, db, "--", key)
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	line, rest, _ := strings.Cut(string(out), "\n")
	if rest != "" {
		return nil, fmt.Errorf("getent %s %s: more than one entry", db, key)
	}
	f := strings.Split(line, ":")
	if len(f) < min {
		return nil, fmt.Errorf("getent %s %s: a malformed entry", db, key)
	}
	return f, nil
}

// parseID reads a uid or gid: a decimal number below 2^32-1.
func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("%q is not an id", s)
	}
	return int(n), nil
}

// pickRunUID picks this run's dedicated uid.
func pickRunUID(owner sandbox.Identity) int {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		uid := RunUIDBase + int(binary.LittleEndian.Uint32(b[:])%RunUIDCount)
		if uid != owner.UID && uid != owner.GID {
			return uid
		}
	}
}

// effectiveCaps is this thread's effective capability set (low 64 bits).
func effectiveCaps() uint64 {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32
}

func networkGranted(s *schema.CanonicalScope) bool {
	return len(s.Network.ConnectTCP) > 0 || len(s.Network.BindTCP) > 0
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ProbeIsolation is the namespace and identity layers a run of cfg would
// get here (for `scope check`): the plan New makes, with the namespaces
// tried for real by starting the fence helper in them (it exits at once
// without the launcher's descriptors). An *IsolationError when they are
// required and cannot be made.
func ProbeIsolation(cfg Config) ([]schema.Layer, error) {
	if cfg.Mode == "" {
		cfg.Mode = schema.ModeEnforce
	}
	if cfg.HelperPath == "" {
		p, err := DefaultHelperPath()
		if err != nil {
			return nil, err
		}
		cfg.HelperPath = p
	}
	if err := checkHelper(cfg.HelperPath); err != nil {
		return nil, err
	}
	iso, err := planIsolation(&cfg)
	if err != nil {
		return nil, err
	}
	if iso.flags != 0 {
		cmd := exec.Command(cfg.HelperPath)
		sys := &syscall.SysProcAttr{Cloneflags: iso.flags}
		if iso.userNS {
			sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		cmd.SysProcAttr = sys
		if err := cmd.Start(); err != nil {
			if derr := iso.degrade(err, cfg.Scope); derr != nil {
				return nil, derr
			}
		} else {
			_ = cmd.Wait()
		}
	}
	return iso.layers(), nil
}
