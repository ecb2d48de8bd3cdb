// Package seccomp builds the fence's seccomp filter: an allowlist of
// syscalls per architecture, starting from Docker's default profile for a
// process without capabilities, with argument checks where Landlock leaves
// gaps (new namespaces, TCP without connect/bind, set-id bits, metadata,
// executable memfds, other processes, IPC, watches). Everything unlisted
// fails with EPERM; nothing is killed.
//
// The program is classic BPF from a small assembler of our own: a binary
// search over syscall-number ranges, then one block per checked syscall.
// It depends on nothing but golang.org/x/sys, so the fence helper stays
// small and static.
package seccomp

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Filter is an assembled program and what it was built from.
type Filter struct {
	Arch    *Arch
	Options Options
	Program []unix.SockFilter

	allowed int      // syscalls with at least one way to be allowed
	checked int      // syscalls decided by their arguments
	checks  []string // names of the argument checks in force
}

// Build assembles the filter for arch. It runs in the fence helper for
// every run, once, with cold caches: it allocates little and builds no
// maps (the policy and the syscall tables are static data).
func Build(arch *Arch, o Options) (*Filter, error) {
	if arch == nil {
		return nil, errors.New("seccomp: no syscall table for this architecture; the fence cannot run here")
	}
	groups := rules(o)
	table, err := decisions(arch, groups)
	if err != nil {
		return nil, err
	}
	f := &Filter{Arch: arch, Options: o}
	used := make([]bool, len(groups)+2)
	for _, g := range table {
		if g == 0 {
			continue
		}
		used[g] = true
		r := ruleOf(groups, g)
		if len(r.Clauses) > 0 {
			f.checked++
		}
		if r.Else == Allow || hasAllow(r) {
			f.allowed++
		}
	}
	for i, g := range groups {
		r := g.rule
		if used[i+2] && r.Check != "" && (len(r.Clauses) > 0 || r.Else != Allow) && !contains(f.checks, r.Check) {
			f.checks = append(f.checks, r.Check)
		}
	}
	sort.Strings(f.checks)
	f.Program, err = compile(arch, groups, table)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func hasAllow(r Rule) bool {
	for _, c := range r.Clauses {
		if c.Then == Allow {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Group numbers in a decision table: 0 is Default, 1 the allowlist, i+2
// the rule groups[i].
const (
	noGroup      = 0
	allowedGroup = 1
)

var allowRule = Rule{Else: Allow}

func ruleOf(groups []group, g uint16) Rule {
	if g == allowedGroup {
		return allowRule
	}
	return groups[g-2].rule
}

// decisions is indexed by syscall number, up to the newest syscall of the
// table, and holds each number's group. A name this ABI lacks is skipped
// (arm64 has no open, chmod, fork, ...).
func decisions(arch *Arch, groups []group) ([]uint16, error) {
	out := make([]uint16, arch.newest()+1)
	add := func(name string, g uint16) error {
		nr, ok := arch.Nr(name)
		if !ok {
			return nil
		}
		if arch.ForeignNr != 0 && nr >= arch.ForeignNr {
			return fmt.Errorf("seccomp: %s has number %#x, in the foreign range on %s", name, nr, arch.Name)
		}
		if out[nr] != noGroup {
			return fmt.Errorf("seccomp: %s has two rules (number %d on %s)", name, nr, arch.Name)
		}
		out[nr] = g
		return nil
	}
	for _, n := range allowed {
		if err := add(n, allowedGroup); err != nil {
			return nil, err
		}
	}
	for i, g := range groups {
		for _, n := range g.names {
			if err := add(n, uint16(i+2)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

func argOffset(c Cond) uint32 {
	off := uint32(offArgs + 8*c.Arg)
	if c.High {
		off += 4 // little-endian: the upper half follows the lower
	}
	return off
}

// compile lays the program out:
//
//	arch check → foreign ABI range → binary search on the syscall number
//	over ranges of equal decision → a return, or a jump to the argument
//	block of a checked syscall (one block per distinct rule).
//
// The foreign-ABI returns sit right after their checks, so no jump in the
// program is longer than the comparison tree.
func compile(arch *Arch, groups []group, table []uint16) ([]unix.SockFilter, error) {
	a := asm{ins: make([]insn, 0, 512), labels: make([]int, 0, 256)}
	native := a.newLabel()
	a.ld(offArch)
	a.jeq(arch.AuditArch, native, next)
	a.ret(uint32(Foreign))
	a.bind(native)
	a.ld(offNr)
	if arch.ForeignNr != 0 {
		ours := a.newLabel()
		a.jge(arch.ForeignNr, next, ours)
		a.ret(uint32(Foreign))
		a.bind(ours)
	}

	// Leaves: a return, or the argument block of the syscall's group
	// (one block per group, shared by its syscalls).
	blockOf := make([]label, len(groups)+2)
	var blocks []uint16
	leafOf := func(g uint16) leaf {
		r := ruleOf(groups, g)
		if len(r.Clauses) == 0 {
			return leaf{ret: r.Else}
		}
		if blockOf[g] == next {
			blockOf[g] = a.newLabel()
			blocks = append(blocks, g)
		}
		return leaf{block: blockOf[g]}
	}
	ranges := make([]span, 0, 256)
	push := func(lo uint32, l leaf) {
		if n := len(ranges); n > 0 && ranges[n-1].leaf == l {
			return
		}
		ranges = append(ranges, span{lo: lo, leaf: l})
	}
	def := leaf{ret: Default}
	for nr, g := range table {
		if g != noGroup {
			push(uint32(nr), leafOf(g))
		} else {
			push(uint32(nr), def)
		}
	}
	// Numbers past the newest syscall the table knows get ENOSYS, as the
	// kernel itself answers for a syscall it does not have: a libc probing
	// a syscall newer than this filter then falls back as it would on an
	// older kernel.
	push(uint32(len(table)), leaf{ret: Unknown})

	emitTree(&a, ranges)
	for _, g := range blocks {
		a.bind(blockOf[g])
		emitRule(&a, ruleOf(groups, g))
	}
	return a.assemble()
}

type leaf struct {
	ret   Action
	block label
}

// span is a range of syscall numbers starting at lo and ending where the
// next span starts.
type span struct {
	lo   uint32
	leaf leaf
}

// emitTree writes a balanced comparison tree over ranges (sorted and
// contiguous; the caller proved the number is at least ranges[0].lo).
func emitTree(a *asm, ranges []span) {
	if len(ranges) == 1 {
		l := ranges[0].leaf
		if l.block != next {
			a.ja(l.block)
		} else {
			a.ret(uint32(l.ret))
		}
		return
	}
	mid := len(ranges) / 2
	right := a.newLabel()
	a.jge(ranges[mid].lo, right, next)
	emitTree(a, ranges[:mid])
	a.bind(right)
	emitTree(a, ranges[mid:])
}

// emitRule writes a decision list: each clause's conditions in turn, a
// failing one skipping to the next clause.
func emitRule(a *asm, r Rule) {
	for _, c := range r.Clauses {
		skip := a.newLabel()
		for _, cond := range c.When {
			a.ld(argOffset(cond))
			if cond.Mask != 0 && cond.Mask != 0xffffffff {
				a.and(cond.Mask)
			}
			if cond.Not {
				a.jeq(cond.Value, skip, next)
			} else {
				a.jeq(cond.Value, next, skip)
			}
		}
		a.ret(uint32(c.Then))
		a.bind(skip)
	}
	a.ret(uint32(r.Else))
}

// Summary is what the launch record and `scope check` say about the
// seccomp layer.
type Summary struct {
	Arch         string   `json:"arch"`
	Default      string   `json:"default"`      // errno of unlisted syscalls
	Allowed      int      `json:"allowed"`      // syscalls that may run, some only with checked arguments
	Checked      int      `json:"checked"`      // syscalls decided by their arguments
	Instructions int      `json:"instructions"` // BPF program length
	Checks       []string `json:"checks"`       // argument checks in force
	Relaxed      []string `json:"relaxed,omitempty"`
}

// Summary describes the filter.
func (f *Filter) Summary() Summary {
	s := Summary{
		Arch:         f.Arch.Name,
		Default:      unix.ErrnoName(unix.Errno(uint32(Default) & unix.SECCOMP_RET_DATA)),
		Allowed:      f.allowed,
		Checked:      f.checked,
		Instructions: len(f.Program),
		Checks:       append([]string(nil), f.checks...),
	}
	o := f.Options
	for _, r := range []struct {
		on   bool
		what string
	}{
		{o.AllowIOUring, "io_uring allowed (its operations bypass the argument checks)"},
		{o.AllowUDP, "udp sockets (granted network ports)"},
		{o.AllowListen, "listen (granted bind ports)"},
		{o.IPCNamespace, "sysv-ipc and mqueues (own ipc namespace)"},
		{o.MountNamespace, "inotify watches, modes (no set-id bits), times and xattr reads, confined by the mounts (own mount namespace)"},
		{o.OwnUserCounters, "inotify instances (the server's user namespace owned by its dedicated uid)"},
		{o.PIDNamespace, "PIDFD_GET_INFO (own pid namespace: a pidfd names only a process of the run)"},
		{o.WriteScope && o.DedicatedUID && !o.MountNamespace, "fchmod (no set-id bits) and futimens on descriptors (write scope, dedicated uid)"},
	} {
		if r.on {
			s.Relaxed = append(s.Relaxed, r.what)
		}
	}
	return s
}

// String is the summary on one line.
func (s Summary) String() string {
	line := fmt.Sprintf("allowlist of %d syscalls (%d with argument checks, %d BPF instructions, %s otherwise) on %s; checks: %s",
		s.Allowed, s.Checked, s.Instructions, s.Default, s.Arch, strings.Join(s.Checks, ", "))
	if len(s.Relaxed) > 0 {
		line += "; relaxed: " + strings.Join(s.Relaxed, "; ")
	}
	return line
}
