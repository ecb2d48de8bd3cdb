package seccomp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// asm is a small classic-BPF assembler with symbolic jump targets. Labels
// are small integers; next (0) means "the next instruction". Conditional
// jumps reach at most 255 instructions ahead; assemble inserts `ja`
// trampolines for the ones that must go further, so the program's layout
// never has to care.
type asm struct {
	ins    []insn
	labels []int // label -> instruction index; -1 while unbound
}

// label names a jump target.
type label int

// next is the fall-through target.
const next label = 0

type insn struct {
	f      unix.SockFilter
	jt, jf label // conditional jumps; for BPF_JA, jt is the target
}

const (
	opLdAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	opAnd   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	opJa    = unix.BPF_JMP | unix.BPF_JA
	opJeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	opJge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	opJgt   = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
	opJset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	opRet   = unix.BPF_RET | unix.BPF_K
)

// newLabel returns an unbound label.
func (a *asm) newLabel() label {
	if len(a.labels) == 0 {
		a.labels = append(a.labels, -1) // next
	}
	a.labels = append(a.labels, -1)
	return label(len(a.labels) - 1)
}

// bind places l at the next instruction emitted.
func (a *asm) bind(l label) {
	if a.labels[l] >= 0 {
		panic(fmt.Sprintf("seccomp: label %d bound twice", l))
	}
	a.labels[l] = len(a.ins)
}

func (a *asm) emit(code uint16, k uint32, jt, jf label) {
	a.ins = append(a.ins, insn{f: unix.SockFilter{Code: code, K: k}, jt: jt, jf: jf})
}

func (a *asm) ld(off uint32)               { a.emit(opLdAbs, off, next, next) }
func (a *asm) and(k uint32)                { a.emit(opAnd, k, next, next) }
func (a *asm) ja(to label)                 { a.emit(opJa, 0, to, next) }
func (a *asm) jeq(k uint32, jt, jf label)  { a.emit(opJeq, k, jt, jf) }
func (a *asm) jge(k uint32, jt, jf label)  { a.emit(opJge, k, jt, jf) }
func (a *asm) jset(k uint32, jt, jf label) { a.emit(opJset, k, jt, jf) }
func (a *asm) ret(k uint32)                { a.emit(opRet, k, next, next) }

func isCond(code uint16) bool { return code&0x07 == unix.BPF_JMP && code != opJa }

// assemble resolves the labels into the kernel's instruction format.
func (a *asm) assemble() ([]unix.SockFilter, error) {
	for l, at := range a.labels {
		if l != int(next) && (at < 0 || at >= len(a.ins)) {
			return nil, fmt.Errorf("seccomp filter: label %d is unbound or points past the end", l)
		}
	}
	for a.relax() {
	}
	out := make([]unix.SockFilter, len(a.ins))
	for i, in := range a.ins {
		f := in.f
		switch {
		case f.Code == opJa:
			d, err := a.dist(i, in.jt)
			if err != nil {
				return nil, err
			}
			f.K = uint32(d)
		case isCond(f.Code):
			jt, err := a.dist(i, in.jt)
			if err != nil {
				return nil, err
			}
			jf, err := a.dist(i, in.jf)
			if err != nil {
				return nil, err
			}
			if jt > 255 || jf > 255 {
				return nil, fmt.Errorf("seccomp filter: jump at %d out of range after relaxation", i)
			}
			f.Jt, f.Jf = uint8(jt), uint8(jf)
		}
		out[i] = f
	}
	if len(out) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp filter has %d instructions, the kernel's limit is %d", len(out), unix.BPF_MAXINSNS)
	}
	return out, nil
}

// dist is how many instructions a jump at from skips to reach l.
func (a *asm) dist(from int, l label) (int, error) {
	if l == next {
		return 0, nil
	}
	d := a.labels[l] - from - 1
	if d < 0 {
		return 0, fmt.Errorf("seccomp filter: backward jump at %d", from)
	}
	return d, nil
}

// relax finds the first conditional jump that cannot reach its target and
// routes it through `ja` trampolines placed right after it. It reports
// whether it changed the program.
func (a *asm) relax() bool {
	for i, in := range a.ins {
		if !isCond(in.f.Code) {
			continue
		}
		far := func(l label) bool {
			d, err := a.dist(i, l)
			return err == nil && d > 255
		}
		farT, farF := far(in.jt), far(in.jf)
		if !farT && !farF {
			continue
		}
		// The fall-through target must stay the instruction that follows
		// now, not the trampoline about to be inserted.
		after := a.newLabel()
		a.labels[after] = i + 1
		jt, jf := in.jt, in.jf
		if jt == next {
			jt = after
		}
		if jf == next {
			jf = after
		}
		var tramp []insn
		var names []label
		if farT {
			names = append(names, a.newLabel())
			tramp = append(tramp, insn{f: unix.SockFilter{Code: opJa}, jt: jt})
			jt = names[len(names)-1]
		}
		if farF {
			names = append(names, a.newLabel())
			tramp = append(tramp, insn{f: unix.SockFilter{Code: opJa}, jt: jf})
			jf = names[len(names)-1]
		}
		a.ins[i].jt, a.ins[i].jf = jt, jf
		a.insert(i+1, tramp)
		for k, n := range names {
			a.labels[n] = i + 1 + k
		}
		return true
	}
	return false
}

// insert puts ins before position at; labels at or after it move with the
// instructions they name.
func (a *asm) insert(at int, ins []insn) {
	for l, idx := range a.labels {
		if l != int(next) && idx >= at {
			a.labels[l] = idx + len(ins)
		}
	}
	a.ins = append(a.ins[:at], append(append([]insn{}, ins...), a.ins[at:]...)...)
}
