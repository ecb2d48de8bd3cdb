// Package ruleset derives the Landlock ruleset of a run from its canonical
// scope and runtime profile, and decides — as a pure function of the
// kernel's Landlock ABI — whether the run may start strict, degraded, or not
// at all.
package ruleset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// MaxABI is the highest Landlock ABI the launcher uses (go-landlock V7).
const MaxABI = 7

// Origin says why a rule is in the ruleset.
type Origin string

const (
	OriginScope    Origin = "scope"    // an allowed path of the scope record
	OriginRuntime  Origin = "runtime"  // the server's runtime profile
	OriginTmp      Origin = "tmpdir"   // the run's private TMPDIR
	OriginOperator Origin = "operator" // --allow-runtime, chosen by the operator
)

// Access rights per use. Scope paths never get execute: the server runs its
// own runtime, not binaries from the workspace.
const (
	scopeReadFile  = ll.AccessFSReadFile
	scopeReadDir   = ll.AccessFSReadFile | ll.AccessFSReadDir
	scopeWriteFile = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
	// A write scope's directories also get MAKE_BLOCK, which grants
	// nothing (mknod of a block device needs CAP_MKNOD, which no server
	// has; there is none to move in) but makes them differ from TMPDIR:
	// Landlock refuses (EXDEV) to move a directory to where it would gain
	// a right, so a directory of symlinks and FIFOs built in TMPDIR cannot
	// be moved into the workspace, even where the two share a file system
	// (without the mount namespace, whose TMPDIR is a tmpfs of its own).
	scopeWriteDir  = scopeWriteTree | ll.AccessFSMakeBlock
	scopeWriteTree = scopeReadDir | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSRemoveFile | ll.AccessFSRemoveDir | ll.AccessFSRefer
	runtimeExec     = ll.AccessFSExecute | ll.AccessFSReadFile
	runtimeRead     = ll.AccessFSReadFile
	runtimeReadTree = ll.AccessFSReadFile | ll.AccessFSReadDir
	runtimeDevice   = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
	tmpDir          = scopeWriteTree | ll.AccessFSMakeSym | ll.AccessFSMakeSock | ll.AccessFSMakeFifo

	// fileRights are the rights the kernel accepts on a rule for a non-directory.
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// Rule grants Access beneath Path.
type Rule struct {
	Path   string               `json:"path"`
	Kind   schema.PathKind      `json:"kind"`
	Access landlock.AccessFSSet `json:"access"`
	Origin Origin               `json:"origin"`
	Reason string               `json:"reason,omitempty"`
}

// Ruleset is everything the fence allows; everything else Landlock handles is denied.
type Ruleset struct {
	Rules      []Rule   `json:"rules"`
	ConnectTCP []uint16 `json:"connect_tcp"`
	BindTCP    []uint16 `json:"bind_tcp"`
	// BlockIOUring is true unless the scope sets allow_io_uring: io_uring
	// operations bypass the syscall probes the daemon watches.
	BlockIOUring bool `json:"block_io_uring"`
}

// Input is what Derive needs besides the scope.
type Input struct {
	Profile      *runtimeprofile.Profile
	TmpDir       string   // private per-run temp dir, granted read-write; may be empty
	AllowRuntime []string // operator-chosen extra read-only paths (--allow-runtime)
}

// Derive builds the ruleset for scope. It refuses runtime grants that would
// widen the scope: a runtime directory that is the approved base or one of
// its ancestors.
func Derive(scope *schema.CanonicalScope, in Input) (*Ruleset, error) {
	rs := &Ruleset{BlockIOUring: !scope.AllowIOUring}
	idx := map[string]int{}
	add := func(r Rule) {
		if i, ok := idx[r.Path]; ok {
			rs.Rules[i].Access |= r.Access
			return
		}
		idx[r.Path] = len(rs.Rules)
		rs.Rules = append(rs.Rules, r)
	}
	for _, p := range scope.AllowedPaths {
		var a landlock.AccessFSSet
		switch {
		case p.Kind == schema.KindDir && scope.AccessMode == schema.AccessWrite:
			a = scopeWriteDir
		case p.Kind == schema.KindDir:
			a = scopeReadDir
		case scope.AccessMode == schema.AccessWrite:
			a = scopeWriteFile
		default:
			a = scopeReadFile
		}
		add(Rule{Path: p.Path, Kind: p.Kind, Access: a, Origin: OriginScope})
	}
	if in.Profile != nil {
		if scope.AccessMode == schema.AccessWrite {
			for _, f := range in.Profile.CodeFiles {
				if n := schema.Names(f); n > 1 {
					return nil, fmt.Errorf("the server's code %s has %d names (hard links): one may lie in the scope's writable paths, where the server could rewrite the code it runs next time; give it a single name (copy it and remove the links)", f, n)
				}
			}
			for _, e := range in.Profile.CodeDirs {
				if scope.Contains(e.Path) {
					hint := "start it from a directory outside the writable paths, or name one outside them"
					if strings.Contains(e.Reason, "python") {
						hint = "start it from a directory outside the writable paths (or, for python 3.11 and later, pass -P: the working directory is then not searched)"
					}
					return nil, fmt.Errorf("runtime path %s (%s) lies in the scope's writable paths: the server could plant the code it runs next time; %s", e.Path, e.Reason, hint)
				}
			}
		}
		for _, e := range in.Profile.Entries {
			kind, err := kindOf(e.Path)
			if err != nil {
				return nil, fmt.Errorf("runtime path %s: %w", e.Path, err)
			}
			if kind == schema.KindDir && schema.IsWithin(e.Path, scope.Base) {
				return nil, fmt.Errorf("runtime directory %s contains the approved base %s; granting it would widen the scope: install the server outside the base", e.Path, scope.Base)
			}
			if kind == schema.KindDir && schema.IsWithin(scope.Base, e.Path) && !scope.Contains(e.Path) && !covered(in.AllowRuntime, e.Path) {
				return nil, fmt.Errorf("runtime directory %s (%s) lies inside the approved base but outside the scope; granting it would widen the scope: install the server outside the base, or grant it explicitly with --allow-runtime %s", e.Path, e.Reason, e.Path)
			}
			// A program, or the code an interpreter reads (the server's
			// script and its package, node_modules, a virtual environment's
			// site-packages, where a .pth file runs at every start), in a
			// writable path could be rewritten for the next run.
			if e.Class != runtimeprofile.ClassDevice && scope.AccessMode == schema.AccessWrite && scope.Contains(e.Path) {
				if e.Class == runtimeprofile.ClassExec || e.Class == runtimeprofile.ClassExecTree {
					return nil, fmt.Errorf("runtime program %s (%s) lies in the scope's writable paths: the server could rewrite what runs next time; install it outside the scope", e.Path, e.Reason)
				}
				return nil, fmt.Errorf("runtime path %s (%s) lies in the scope's writable paths: the server could rewrite the code it runs next time; install the server outside the scope", e.Path, e.Reason)
			}
			var a landlock.AccessFSSet
			switch e.Class {
			case runtimeprofile.ClassExec:
				a = runtimeExec
			case runtimeprofile.ClassReadTree:
				a = runtimeReadTree
			case runtimeprofile.ClassExecTree:
				a = runtimeReadTree | ll.AccessFSExecute
			case runtimeprofile.ClassDevice:
				a = runtimeDevice
			default:
				a = runtimeRead
			}
			add(Rule{Path: e.Path, Kind: kind, Access: a, Origin: OriginRuntime, Reason: e.Reason})
		}
	}
	for _, p := range in.AllowRuntime {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("--allow-runtime %s: give an absolute path", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("--allow-runtime %s: %w", p, err)
		}
		if real == "/" {
			return nil, errors.New("--allow-runtime /: granting the whole filesystem is refused; name the files the runtime needs")
		}
		kind, err := kindOf(real)
		if err != nil {
			return nil, fmt.Errorf("--allow-runtime %s: %w", p, err)
		}
		if kind == schema.KindDir {
			if schema.IsWithin(real, scope.Base) {
				return nil, fmt.Errorf("--allow-runtime %s contains the approved base %s; granting it would widen the scope: name the runtime's own files or directories", p, scope.Base)
			}
			if wholesale[real] || real == homeDir() {
				return nil, fmt.Errorf("--allow-runtime %s: granting %s wholesale is refused; name the files the runtime needs", p, real)
			}
		}
		// An executable runtime path where the server may write is a place
		// to write a program and run it (Landlock adds the rules' rights):
		// inside a write scope's path, or a directory holding one.
		if scope.AccessMode == schema.AccessWrite {
			for _, sp := range scope.AllowedPaths {
				if schema.IsWithin(sp.Path, real) || (kind == schema.KindDir && schema.IsWithin(real, sp.Path)) {
					return nil, fmt.Errorf("--allow-runtime %s overlaps the scope's writable path %s: the server could write a program there and run it; grant a runtime path outside the writable paths", p, sp.Path)
				}
			}
		}
		a := landlock.AccessFSSet(runtimeExec)
		if kind == schema.KindDir {
			a = runtimeReadTree | ll.AccessFSExecute
		}
		add(Rule{Path: real, Kind: kind, Access: a, Origin: OriginOperator, Reason: "--allow-runtime"})
	}
	if in.TmpDir != "" {
		add(Rule{Path: in.TmpDir, Kind: schema.KindDir, Access: tmpDir, Origin: OriginTmp, Reason: "private TMPDIR of this run"})
	}
	for i := range rs.Rules {
		if rs.Rules[i].Kind != schema.KindDir {
			rs.Rules[i].Access &= fileRights
		}
	}
	for _, p := range scope.Network.ConnectTCP {
		rs.ConnectTCP = append(rs.ConnectTCP, uint16(p))
	}
	for _, p := range scope.Network.BindTCP {
		rs.BindTCP = append(rs.BindTCP, uint16(p))
	}
	return rs, nil
}

// AddRuntimeFiles grants the regular files paths read-only, as runtime
// rules: files the launcher learns about after the profile was resolved
// (the limit files of the run's own cgroup). Paths that are not regular
// files are skipped.
func (rs *Ruleset) AddRuntimeFiles(paths []string, reason string) {
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || !filepath.IsAbs(p) {
			continue
		}
		dup := false
		for _, r := range rs.Rules {
			if r.Path == p {
				dup = true
				break
			}
		}
		if !dup {
			rs.Rules = append(rs.Rules, Rule{Path: p, Kind: schema.KindFile, Access: runtimeRead, Origin: OriginRuntime, Reason: reason})
		}
	}
}

// covered reports whether path lies under one of the operator's paths.
func covered(operator []string, path string) bool {
	for _, p := range operator {
		if real, err := filepath.EvalSymlinks(p); err == nil && schema.IsWithin(real, path) {
			return true
		}
	}
	return false
}

// wholesale are directories never granted as a whole, even by the operator.
var wholesale = map[string]bool{"/etc": true, "/home": true, "/root": true, "/proc": true, "/sys": true, "/dev": true, "/run": true, "/var": true, "/tmp": true, "/usr": true}

func homeDir() string {
	h, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(h); err == nil {
		return real
	}
	return h
}

func kindOf(p string) (schema.PathKind, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		return schema.KindDir, nil
	}
	return schema.KindFile, nil
}

// Feature is one class of restriction the fence relies on.
type Feature struct {
	Name   string
	MinABI int
	What   string
}

// Features lists what the fence uses, by the Landlock ABI that brought it.
var Features = []Feature{
	{"fs", 1, "file read/write/exec and directory changes"},
	{"fs.refer", 2, "renames and links across directories"},
	{"fs.truncate", 3, "truncate(2) and O_TRUNC"},
	{"net.tcp", 4, "TCP bind and connect"},
	{"fs.ioctl_dev", 5, "ioctl on device files"},
	{"scope", 6, "signals and abstract unix sockets leaving the run"},
	{"audit_log", 7, "kernel audit records of denials after exec"},
}

// Decision is how a run may use the kernel it found.
type Decision struct {
	ABI      int      // the ABI the ruleset is built for: min(kernel, MaxABI)
	Degraded bool     // some feature is missing and --best-effort was given
	Dropped  []string // names of the missing features
}

// Reason is the launch record's degraded_reason: the dropped features, no paths.
func (d Decision) Reason() string {
	if !d.Degraded {
		return ""
	}
	return "kernel lacks: " + strings.Join(d.Dropped, ",")
}

// KernelError says the kernel cannot give the protection the run needs.
type KernelError struct {
	ABI     int
	Missing []Feature
}

func (e *KernelError) Error() string {
	var parts []string
	for _, f := range e.Missing {
		parts = append(parts, fmt.Sprintf("%s (%s, ABI %d)", f.Name, f.What, f.MinABI))
	}
	if e.ABI == 0 {
		return "the kernel has no Landlock support (enable CONFIG_SECURITY_LANDLOCK and add landlock to the lsm= boot parameter); refusing to run the server unfenced. --best-effort would run it WITHOUT a fence"
	}
	return fmt.Sprintf("the kernel's Landlock ABI is %d and lacks %s; refusing to start. Upgrade the kernel, or pass --best-effort to run with these protections missing", e.ABI, strings.Join(parts, ", "))
}

// Decide is the strict-or-degrade decision, a pure function of the kernel's
// ABI: with every feature present the run is strict; otherwise it is refused
// unless bestEffort, and then it is marked degraded with what was dropped.
func Decide(kernelABI int, bestEffort bool) (Decision, error) {
	if kernelABI < 0 {
		kernelABI = 0
	}
	d := Decision{ABI: min(kernelABI, MaxABI)}
	var missing []Feature
	for _, f := range Features {
		if f.MinABI > kernelABI {
			missing = append(missing, f)
			d.Dropped = append(d.Dropped, f.Name)
		}
	}
	if len(missing) == 0 {
		return d, nil
	}
	if !bestEffort {
		return Decision{}, &KernelError{ABI: kernelABI, Missing: missing}
	}
	d.Degraded = true
	return d, nil
}

// presets are go-landlock's per-ABI configurations.
var presets = []landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}

// Handled is what a ruleset built for abi restricts.
func Handled(abi int) (fs landlock.AccessFSSet, net landlock.AccessNetSet, scoped landlock.ScopedSet) {
	abi = max(0, min(abi, MaxABI))
	c := presets[abi]
	return c.HandledAccessFS, c.HandledAccessNet & (ll.AccessNetBindTCP | ll.AccessNetConnectTCP), c.Scoped
}

// Sorted returns the rules ordered by path, for stable output.
func (rs *Ruleset) Sorted() []Rule {
	out := slices.Clone(rs.Rules)
	slices.SortFunc(out, func(a, b Rule) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Narrow returns a copy of rs in which the scope's rules are replaced by
// rules for paths (each must lie inside one of the original scope rules,
// with at most its rights). Runtime, tmpdir and operator rules are kept.
func (rs *Ruleset) Narrow(paths []schema.CanonicalPath) (*Ruleset, error) {
	out := &Ruleset{ConnectTCP: rs.ConnectTCP, BindTCP: rs.BindTCP, BlockIOUring: rs.BlockIOUring}
	var scopeRules []Rule
	for _, r := range rs.Rules {
		if r.Origin == OriginScope {
			scopeRules = append(scopeRules, r)
			continue
		}
		out.Rules = append(out.Rules, r)
	}
	for _, p := range paths {
		var parent *Rule
		for i := range scopeRules {
			if schema.IsWithin(scopeRules[i].Path, p.Path) {
				parent = &scopeRules[i]
				break
			}
		}
		if parent == nil {
			return nil, fmt.Errorf("narrowed path is not inside the scope's allowed paths")
		}
		a := parent.Access
		if p.Kind != schema.KindDir {
			a &= fileRights
		}
		out.Rules = append(out.Rules, Rule{Path: p.Path, Kind: p.Kind, Access: a, Origin: OriginScope})
	}
	return out, nil
}

// RightNames lists the Landlock rights in a, by their kernel names.
func RightNames(a landlock.AccessFSSet) []string {
	s := strings.Trim(a.String(), "{}")
	if s == "" || s == "∅" {
		return []string{}
	}
	return strings.Split(s, ",")
}
