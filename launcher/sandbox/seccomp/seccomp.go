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

	allowed []string // syscalls with at least one way to be allowed
	checked []string // syscalls decided by their arguments
	checks  []string // names of the argument checks in force
}

// Build assembles the filter for arch.
func Build(arch *Arch, o Options) (*Filter, error) {
	if arch == nil {
		return nil, errors.New("seccomp: no syscall table for this architecture; the fence cannot run here")
	}
	table, err := decisions(arch, o)
	if err != nil {
		return nil, err
	}
	f := &Filter{Arch: arch, Options: o}
	checks := map[string]bool{}
	for nr, d := range table {
		name := d.name
		if d.rule.Check != "" && (len(d.rule.Clauses) > 0 || d.rule.Else != Allow) {
			checks[d.rule.Check] = true
		}
		if len(d.rule.Clauses) > 0 {
			f.checked = append(f.checked, name)
		}
		if d.rule.Else == Allow || hasAllow(d.rule) {
			f.allowed = append(f.allowed, name)
		}
		_ = nr
	}
	for c := range checks {
		f.checks = append(f.checks, c)
	}
	sort.Strings(f.allowed)
	sort.Strings(f.checked)
	sort.Strings(f.checks)
	f.Program, err = compile(arch, table)
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

type decision struct {
	name string
	rule Rule
}

// decisions maps every syscall number the filter treats other than with
// Default to its rule. A rule naming a syscall this ABI lacks is skipped
// (arm64 has no open, chmod, fork, ...).
func decisions(arch *Arch, o Options) (map[uint32]decision, error) {
	out := map[uint32]decision{}
	add := func(name string, r Rule) error {
		nr, ok := arch.Nr(name)
		if !ok {
			return nil
		}
		if prev, dup := out[nr]; dup {
			return fmt.Errorf("seccomp: %s and %s share number %d on %s", prev.name, name, nr, arch.Name)
		}
		if arch.ForeignNr != 0 && nr >= arch.ForeignNr {
			return fmt.Errorf("seccomp: %s has number %#x, in the foreign range on %s", name, nr, arch.Name)
		}
		out[nr] = decision{name: name, rule: r}
		return nil
	}
	rs := rules(o)
	for _, n := range allowed {
		if _, dup := rs[n]; dup {
			return nil, fmt.Errorf("seccomp: %s is both allowed and checked", n)
		}
		if err := add(n, Rule{Else: Allow}); err != nil {
			return nil, err
		}
	}
	for n, r := range rs {
		if err := add(n, r); err != nil {
			return nil, err
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
func compile(arch *Arch, table map[uint32]decision) ([]unix.SockFilter, error) {
	var a asm
	a.ld(offArch)
	a.jeq(arch.AuditArch, "", "foreign")
	a.ld(offNr)
	if arch.ForeignNr != 0 {
		a.jge(arch.ForeignNr, "foreign", "")
	}

	// Leaves: a return, or a block shared by syscalls with the same rule.
	blocks := map[string]string{} // rule key -> label
	var blockOrder []string
	blockRule := map[string]Rule{}
	leafOf := func(r Rule) leaf {
		if len(r.Clauses) == 0 {
			return leaf{ret: r.Else}
		}
		k := ruleKey(r)
		l, ok := blocks[k]
		if !ok {
			l = fmt.Sprintf("b%d", len(blocks))
			blocks[k] = l
			blockOrder = append(blockOrder, k)
			blockRule[k] = r
		}
		return leaf{block: l}
	}
	nrs := make([]uint32, 0, len(table))
	for nr := range table {
		nrs = append(nrs, nr)
	}
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })
	var ranges []span
	push := func(lo uint32, l leaf) {
		if n := len(ranges); n > 0 && ranges[n-1].leaf == l {
			return
		}
		ranges = append(ranges, span{lo: lo, leaf: l})
	}
	def := leaf{ret: Default}
	next := uint32(0)
	for _, nr := range nrs {
		if nr > next {
			push(next, def)
		}
		push(nr, leafOf(table[nr].rule))
		next = nr + 1
	}
	// Numbers past the newest syscall the table knows get ENOSYS, as the
	// kernel itself answers for a syscall it does not have: a libc probing
	// a syscall newer than this filter then falls back as it would on an
	// older kernel.
	var newest uint32
	for _, nr := range arch.Syscalls {
		newest = max(newest, nr)
	}
	if next <= newest {
		push(next, def)
		next = newest + 1
	}
	push(next, leaf{ret: Unknown})

	t := tree{a: &a}
	t.emit(ranges)

	for _, k := range blockOrder {
		a.label(blocks[k])
		emitRule(&a, blocks[k], blockRule[k])
	}
	a.label("foreign")
	a.ret(uint32(Foreign))
	return a.assemble()
}

type leaf struct {
	ret   Action
	block string
}

// span is a range of syscall numbers starting at lo and ending where the
// next span starts.
type span struct {
	lo   uint32
	leaf leaf
}

type tree struct {
	a *asm
	n int
}

// emit writes a balanced comparison tree over ranges (sorted, contiguous,
// the first starting at 0 or at whatever lower bound the caller proved).
func (t *tree) emit(ranges []span) {
	if len(ranges) == 1 {
		l := ranges[0].leaf
		if l.block != "" {
			t.a.ja(l.block)
		} else {
			t.a.ret(uint32(l.ret))
		}
		return
	}
	mid := len(ranges) / 2
	t.n++
	right := fmt.Sprintf("n%d", t.n)
	t.a.jge(ranges[mid].lo, right, "")
	t.emit(ranges[:mid])
	t.a.label(right)
	t.emit(ranges[mid:])
}

// emitRule writes a decision list: each clause's conditions in turn, a
// failing one skipping to the next clause.
func emitRule(a *asm, prefix string, r Rule) {
	for i, c := range r.Clauses {
		next := fmt.Sprintf("%s.c%d", prefix, i+1)
		for _, cond := range c.When {
			a.ld(argOffset(cond))
			if cond.Mask != 0 && cond.Mask != 0xffffffff {
				a.and(cond.Mask)
			}
			if cond.Not {
				a.jeq(cond.Value, next, "")
			} else {
				a.jeq(cond.Value, "", next)
			}
		}
		a.ret(uint32(c.Then))
		a.label(next)
	}
	a.ret(uint32(r.Else))
}

func ruleKey(r Rule) string {
	var b strings.Builder
	for _, c := range r.Clauses {
		for _, k := range c.When {
			fmt.Fprintf(&b, "%d/%t/%x/%x/%t,", k.Arg, k.High, k.Mask, k.Value, k.Not)
		}
		fmt.Fprintf(&b, "->%x;", uint32(c.Then))
	}
	fmt.Fprintf(&b, "else %x", uint32(r.Else))
	return b.String()
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
		Allowed:      len(f.allowed),
		Checked:      len(f.checked),
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
		{o.MountNamespace, "inotify watches (own mount namespace)"},
		{o.WriteScope && o.DedicatedUID, "fchmod and futimens on descriptors (write scope, dedicated uid)"},
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
