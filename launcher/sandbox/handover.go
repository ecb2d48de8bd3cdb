package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The plan is what the launcher gives the run's C init (mcpwarden-exec
// started as mcpwarden-init, launcher/sandbox/execstage) on its fd 3: the
// whole set-up of a run with namespaces (the root's mounts, the Landlock
// ruleset and rules, the seccomp program, the server's ids, environment
// and command), computed here, in a compact, versioned binary form that a
// small C reader checks whole before it performs anything. The layout is
// in execstage/handover.h; the constants here must match it
// (TestHandoverMatchesC runs the C reader on what encodeHandover writes).
//
//	header:  "MWXS"  u16 version  u16 0  u32 body length
//	body:    records in increasing tag order: u16 tag, u32 length, bytes
//
// Integers are little-endian; only the list records repeat.
const (
	hoMagic       = "MWXS"
	hoVersion     = 2
	hoHeaderSize  = 12
	hoMaxBody     = 4 << 20
	hoMaxFilter   = 4096
	hoMaxStrings  = 1 << 16
	hoMaxPath     = 4095
	hoMaxHostname = 64
)

const (
	hoFlags    = 1
	hoIdentity = 2
	hoFSize    = 3
	hoLandlock = 4
	hoSeccomp  = 5
	hoDir      = 6
	hoExe      = 7
	hoArg      = 8
	hoEnv      = 9
	hoNS       = 10
	hoHostname = 11
	hoServer   = 12
	hoInitID   = 13
	hoRuleset  = 14
	hoStaging  = 15
	hoMount    = 16
	hoLink     = 17
	hoMkdir    = 18
	hoTmp      = 19
	hoRule     = 20
	hoPort     = 21
	hoNoFile   = 22
)

const (
	hoFEnforce  = 1 << 0
	hoFDropCaps = 1 << 1
	hoFLandlock = 1 << 2
	hoFSeccomp  = 1 << 3
	hoFIdentity = 1 << 4
	hoFFSize    = 1 << 5
	hoFNoFile   = 1 << 6
)

// Namespace flags (hoNS).
const (
	hoNSNet         = 1 << 0
	hoNSMemfdNoexec = 1 << 1
	hoNSNoUserNS    = 1 << 2
)

// Mount flags (hoMount).
const (
	hoMDir   = 1 << 0
	hoMWrite = 1 << 1
	hoMExec  = 1 << 2
	hoMDev   = 1 << 3
	hoMIdmap = 1 << 4
	hoMMask  = 1 << 5 // an empty, mode-000, read-only file or directory over a secret
)

// Rule flags (hoRule).
const (
	hoRSelf = 1 << 0 // below the server's own /proc entry
	hoRPin  = 1 << 1 // held open for the run
)

// ExecStageName is the C init's file name (the exec stage is a fork of
// it); the launcher finds it next to the fence helper, opens and checks
// it, and execs it from the descriptor (ExecStageFD).
const ExecStageName = "mcpwarden-exec"

// ExecStageFD is where the launcher passes the C init's executable
// (opened read-only) to the process it clones; the init closes it first.
const ExecStageFD = 5

// InitName is argv[0] of the C init (execstage/init.c), InitArg its one
// argument.
const (
	InitName = "mcpwarden-init"
	InitArg  = "plan"
)

// handover is the plan: what the exec stage applies (the first block)
// and what the init sets up before (the second); planOf fills it from a
// Spec.
type handover struct {
	enforce, dropCaps bool
	identity          *Identity
	fileSize          uint64
	openFiles         uint64
	landlock          bool
	restrictFlags     uint32
	filter            []unix.SockFilter
	dir, exe          string
	argv, env         []string

	ns       uint32
	hostname string
	server   *ServerUserNS
	initID   *Identity // nil: the init keeps its ids and drops every capability
	handled  [3]uint64 // fs, net, scoped (with landlock)
	staging  string
	mounts   []planMount
	links    []Link
	dirs     []string
	tmp      *planTmp
	rules    []planRule
	ports    []PortRule
}

type planMount struct {
	flags uint32
	path  string
}

type planTmp struct {
	size  uint64
	owner Identity
	path  string
}

type planRule struct {
	access uint64
	flags  uint32
	path   string // with hoRSelf: below /proc/PID ("" or "/...")
}

// flags are the handover's flags record: which parts of the fence the
// stage applies (none but the working directory without enforce).
func (h *handover) flags() uint32 {
	if !h.enforce {
		return 0
	}
	flags := uint32(hoFEnforce)
	if h.dropCaps {
		flags |= hoFDropCaps
	}
	if h.landlock {
		flags |= hoFLandlock
	}
	if len(h.filter) > 0 {
		flags |= hoFSeccomp
	}
	if h.identity != nil {
		flags |= hoFIdentity
	}
	if h.fileSize > 0 {
		flags |= hoFFSize
	}
	if h.openFiles > 0 {
		flags |= hoFNoFile
	}
	return flags
}

// encodeHandover writes h in the exec stage's form. It refuses what the
// stage would refuse, so that a bad spec fails in the init, with a
// message, rather than in the stage.
func encodeHandover(h *handover) ([]byte, error) {
	flags := h.flags()
	b := make([]byte, hoHeaderSize, 512)
	copy(b, hoMagic)
	binary.LittleEndian.PutUint16(b[4:], hoVersion)
	rec := func(tag uint16, v []byte) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	str := func(tag uint16, what, s string) error {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("the server's %s holds a NUL byte", what)
		}
		rec(tag, []byte(s))
		return nil
	}
	rec(hoFlags, binary.LittleEndian.AppendUint32(nil, flags))
	if flags&hoFIdentity != 0 {
		id := *h.identity
		if !idOK(id) {
			return nil, fmt.Errorf("identity %d:%d out of range", id.UID, id.GID)
		}
		v := binary.LittleEndian.AppendUint32(nil, uint32(id.UID))
		rec(hoIdentity, binary.LittleEndian.AppendUint32(v, uint32(id.GID)))
	}
	if flags&hoFFSize != 0 {
		rec(hoFSize, binary.LittleEndian.AppendUint64(nil, h.fileSize))
	}
	if flags&hoFLandlock != 0 {
		rec(hoLandlock, binary.LittleEndian.AppendUint32(nil, h.restrictFlags))
	}
	if flags&hoFSeccomp != 0 {
		if len(h.filter) > hoMaxFilter {
			return nil, fmt.Errorf("seccomp program of %d instructions (at most %d)", len(h.filter), hoMaxFilter)
		}
		v := make([]byte, 0, 8*len(h.filter))
		for _, in := range h.filter {
			v = binary.LittleEndian.AppendUint16(v, in.Code)
			v = append(v, in.Jt, in.Jf)
			v = binary.LittleEndian.AppendUint32(v, in.K)
		}
		rec(hoSeccomp, v)
	}
	if h.dir != "" {
		if h.dir[0] != '/' {
			return nil, fmt.Errorf("working directory %q is not absolute", h.dir)
		}
		if err := str(hoDir, "working directory", h.dir); err != nil {
			return nil, err
		}
	}
	if h.exe == "" || len(h.argv) == 0 {
		return nil, errors.New("spec names no executable")
	}
	if h.identity != nil && h.server != nil && flags&hoFIdentity != 0 {
		return nil, errors.New("an identity and the server's user namespace")
	}
	if len(h.argv) > hoMaxStrings || len(h.env) > hoMaxStrings {
		return nil, errors.New("too many arguments or environment strings")
	}
	if err := str(hoExe, "executable", h.exe); err != nil {
		return nil, err
	}
	for _, a := range h.argv {
		if err := str(hoArg, "argument", a); err != nil {
			return nil, err
		}
	}
	for _, e := range h.env {
		if err := str(hoEnv, "environment", e); err != nil {
			return nil, err
		}
	}
	if err := h.encodeSetup(rec); err != nil {
		return nil, err
	}
	// Records go in tag order; this one came after the set-up's.
	if flags&hoFNoFile != 0 {
		rec(hoNoFile, binary.LittleEndian.AppendUint64(nil, h.openFiles))
	}
	if len(b)-hoHeaderSize > hoMaxBody {
		return nil, errors.New("the server's command and environment are too large")
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-hoHeaderSize))
	return b, nil
}

func idOK(id Identity) bool {
	return id.UID >= 0 && id.GID >= 0 && id.UID < 1<<32-1 && id.GID < 1<<32-1
}

// cleanAbs reports whether p is a clean absolute path below "/", as the
// C reader checks it (ho_clean).
func cleanAbs(p string) bool {
	return len(p) >= 2 && len(p) <= hoMaxPath && p[0] == '/' && filepath.Clean(p) == p && strings.IndexByte(p, 0) < 0
}

// encodeSetup writes the init's records (hoNS on) with rec, refusing what
// the C reader would refuse.
func (h *handover) encodeSetup(rec func(uint16, []byte)) error {
	u32 := binary.LittleEndian.AppendUint32
	u64 := binary.LittleEndian.AppendUint64
	path := func(what, p string) error {
		if !cleanAbs(p) {
			return fmt.Errorf("%s is not a clean absolute path below /", what)
		}
		return nil
	}
	if h.ns&^(hoNSNet|hoNSMemfdNoexec|hoNSNoUserNS) != 0 {
		return fmt.Errorf("unknown namespace flags %#x", h.ns)
	}
	rec(hoNS, u32(nil, h.ns))
	if h.hostname != "" {
		if len(h.hostname) > hoMaxHostname || strings.IndexByte(h.hostname, 0) >= 0 {
			return errors.New("host name too long or holds a NUL byte")
		}
		rec(hoHostname, []byte(h.hostname))
	}
	if h.server != nil {
		in, host := h.server.Inside, h.server.Host
		if !idOK(in) || !idOK(host) || host.UID == 0 || host.GID == 0 {
			return errors.New("the server's ids are out of range or its dedicated host ids are root")
		}
		v := u32(u32(nil, uint32(in.UID)), uint32(in.GID))
		rec(hoServer, u32(u32(v, uint32(host.UID)), uint32(host.GID)))
	}
	if h.initID != nil {
		if !idOK(*h.initID) {
			return errors.New("the init's identity is out of range")
		}
		rec(hoInitID, u32(u32(nil, uint32(h.initID.UID)), uint32(h.initID.GID)))
	}
	landlock := h.flags()&hoFLandlock != 0
	if landlock {
		rec(hoRuleset, u64(u64(u64(nil, h.handled[0]), h.handled[1]), h.handled[2]))
	} else if len(h.rules) > 0 || len(h.ports) > 0 {
		return errors.New("rules without the Landlock ruleset")
	}
	if err := path("the staging directory", h.staging); err != nil {
		return err
	}
	rec(hoStaging, []byte(h.staging))
	if len(h.mounts) > hoMaxStrings || len(h.links) > hoMaxStrings || len(h.dirs) > hoMaxStrings || len(h.rules) > hoMaxStrings || len(h.ports) > hoMaxStrings {
		return errors.New("too many mounts, links, directories or rules")
	}
	for _, m := range h.mounts {
		if m.flags&^(hoMDir|hoMWrite|hoMExec|hoMDev|hoMIdmap|hoMMask) != 0 {
			return fmt.Errorf("unknown mount flags %#x", m.flags)
		}
		if m.flags&hoMIdmap != 0 && h.server == nil {
			return errors.New("an idmapped mount without the server's user namespace")
		}
		if m.flags&hoMDev != 0 && m.flags&hoMDir != 0 {
			return errors.New("a device mount of a directory")
		}
		if m.flags&hoMMask != 0 && m.flags&(hoMWrite|hoMExec|hoMDev|hoMIdmap) != 0 {
			return errors.New("a mask must be read-only, noexec, nodev and not idmapped")
		}
		if err := path("a mount", m.path); err != nil {
			return err
		}
		rec(hoMount, append(u32(nil, m.flags), m.path...))
	}
	for _, l := range h.links {
		if err := path("a link", l.Path); err != nil {
			return err
		}
		if l.Target == "" || len(l.Target) > hoMaxPath || strings.IndexByte(l.Target, 0) >= 0 {
			return errors.New("a link's target is empty, too long or holds a NUL byte")
		}
		rec(hoLink, append(append(u32(nil, uint32(len(l.Path))), l.Path...), l.Target...))
	}
	for _, d := range h.dirs {
		if err := path("a directory", d); err != nil {
			return err
		}
		rec(hoMkdir, []byte(d))
	}
	if t := h.tmp; t != nil {
		if t.size == 0 || !idOK(t.owner) {
			return errors.New("the private TMPDIR has no size or its owner is out of range")
		}
		if err := path("the private TMPDIR", t.path); err != nil {
			return err
		}
		v := u32(u32(u64(nil, t.size), uint32(t.owner.UID)), uint32(t.owner.GID))
		rec(hoTmp, append(v, t.path...))
	}
	for _, r := range h.rules {
		if r.access == 0 || r.access&^h.handled[0] != 0 || r.flags&^(hoRSelf|hoRPin) != 0 {
			return fmt.Errorf("a Landlock rule with access %#x (handled %#x) or flags %#x", r.access, h.handled[0], r.flags)
		}
		if !(r.flags&hoRSelf != 0 && r.path == "") {
			if err := path("a Landlock rule", r.path); err != nil {
				return err
			}
		}
		rec(hoRule, append(u32(u64(nil, r.access), r.flags), r.path...))
	}
	for _, p := range h.ports {
		if p.Access == 0 || p.Access&^h.handled[1] != 0 {
			return fmt.Errorf("a Landlock port rule with access %#x (handled %#x)", p.Access, h.handled[1])
		}
		rec(hoPort, binary.LittleEndian.AppendUint16(u64(nil, p.Access), p.Port))
	}
	return nil
}
