package sandbox

import (
	"errors"
	"sort"
	"strings"
)

// DefaultTmpSize bounds the run's private TMPDIR (also HOME).
const DefaultTmpSize = 256 << 20

// EncodePlan computes the whole plan of a run with namespaces (s.NS with
// its pid and mount namespaces) and encodes it for the C init: the root's
// mounts in the order they are made, the links, directories and private
// TMPDIR, the Landlock ruleset with its rules (the rules below the
// server's own /proc entry marked as such, the /proc ones to be held), the
// seccomp program for this architecture, the ids of the server's user
// namespace and of the init after its drop, the fence's flags, the
// command and its environment. The init performs it without deciding
// anything; what it would refuse is refused here first, with a message.
func EncodePlan(s *Spec) ([]byte, error) {
	h, err := planOf(s)
	if err != nil {
		return nil, err
	}
	return encodeHandover(h)
}

func planOf(s *Spec) (*handover, error) {
	ns := s.NS
	if ns == nil || !ns.PID || !ns.Mount {
		return nil, errors.New("the run's init needs its own pid and mount namespaces")
	}
	if err := ns.check(); err != nil {
		return nil, err
	}
	if s.Exe == "" || len(s.Argv) == 0 {
		return nil, errors.New("spec names no executable")
	}
	h := &handover{
		enforce:       s.Enforce,
		dropCaps:      s.DropCaps,
		identity:      s.Identity,
		fileSize:      s.Limits.FileSizeBytes,
		openFiles:     s.Limits.OpenFiles,
		landlock:      s.Enforce && s.ABI > 0,
		restrictFlags: s.RestrictFlag,
		dir:           s.Dir,
		exe:           s.Exe,
		argv:          s.Argv,
		env:           s.Env,
		staging:       ns.Root.Staging,
		links:         ns.Root.Links,
		dirs:          ns.Root.Dirs,
	}
	if s.Enforce && s.Seccomp {
		f, st := buildFilter(s)
		if st != nil {
			return nil, st
		}
		h.filter = f.Program
	}
	if ns.Net {
		h.ns |= hoNSNet
	}
	if ns.MemfdNoexec {
		h.ns |= hoNSMemfdNoexec
	}
	if ns.NoNestedUserNS {
		h.ns |= hoNSNoUserNS
	}
	if ns.UTS {
		h.hostname = ns.Hostname
	}
	// The init gives up its privileges for the server's dedicated host
	// ids (its own user namespace: the stage already runs as the server),
	// or the server's identity, or (neither) its capabilities.
	h.initID = s.Identity
	if ns.Server != nil {
		h.server = ns.Server
		h.identity = nil
		host := ns.Server.Host
		h.initID = &host
	}
	mounts := append([]Mount(nil), ns.Root.Mounts...)
	// Parents first: a file granted inside a granted directory is mounted
	// over that directory's bind.
	sort.SliceStable(mounts, func(i, j int) bool { return mounts[i].Path < mounts[j].Path })
	for _, m := range mounts {
		var f uint32
		for _, b := range []struct {
			on   bool
			flag uint32
		}{{m.Dir, hoMDir}, {m.Write, hoMWrite}, {m.Exec, hoMExec}, {m.Dev, hoMDev}, {m.Idmap, hoMIdmap}, {m.Mask, hoMMask}} {
			if b.on {
				f |= b.flag
			}
		}
		h.mounts = append(h.mounts, planMount{flags: f, path: m.Path})
	}
	if r := ns.Root; r.Tmp != "" {
		size := r.TmpSize
		if size <= 0 {
			size = DefaultTmpSize
		}
		h.tmp = &planTmp{size: uint64(size), owner: r.TmpOwner, path: r.Tmp}
	}
	if h.landlock {
		h.handled = [3]uint64{s.HandledFS, s.HandledNet, s.Scoped}
		for _, p := range s.Paths {
			access := p.Access & s.HandledFS
			if access == 0 {
				continue
			}
			r := planRule{access: access, path: p.Path}
			if rest, ok := strings.CutPrefix(p.Path, procSelf); ok && (rest == "" || rest[0] == '/') {
				r.flags, r.path = hoRSelf, rest
			} else if strings.HasPrefix(p.Path, "/proc/") {
				// Held for the run: a Landlock rule binds to an inode, and
				// procfs makes a new one when an entry whose dentry was
				// dropped is looked up again.
				r.flags = hoRPin
			}
			h.rules = append(h.rules, r)
		}
		if s.HandledNet != 0 {
			for _, p := range s.Ports {
				if a := p.Access & s.HandledNet; a != 0 {
					h.ports = append(h.ports, PortRule{Port: p.Port, Access: a})
				}
			}
		}
	}
	return h, nil
}
