package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Data is the kernel's struct seccomp_data: what a filter sees of a syscall.
type Data struct {
	Nr   uint32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

// sizeofData is sizeof(struct seccomp_data).
const sizeofData = 64

// Bytes lays d out as the kernel does on a little-endian machine.
func (d Data) Bytes() []byte {
	b := make([]byte, sizeofData)
	binary.LittleEndian.PutUint32(b[0:], d.Nr)
	binary.LittleEndian.PutUint32(b[4:], d.Arch)
	binary.LittleEndian.PutUint64(b[8:], d.IP)
	for i, a := range d.Args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// ErrBadProgram is returned by Eval for a program the kernel would refuse
// (or that could not end in a return).
var ErrBadProgram = errors.New("invalid seccomp program")

// jumpTaken reports whether the conditional jump in takes its true branch
// with acc in the accumulator.
func jumpTaken(in unix.SockFilter, acc uint32) bool {
	switch in.Code {
	case opJeq:
		return acc == in.K
	case opJge:
		return acc >= in.K
	case opJgt:
		return acc > in.K
	case opJset:
		return acc&in.K != 0
	}
	return false
}

// Eval runs a classic-BPF seccomp program over d the way the kernel does,
// for the instructions this package emits (32-bit absolute loads, AND,
// conditional and unconditional forward jumps, returns), and returns the
// action. Anything else, an out-of-range load or jump, or running off the
// end is ErrBadProgram; it never panics.
func Eval(prog []unix.SockFilter, d Data) (uint32, error) {
	data := d.Bytes()
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case opLdAbs:
			if in.K%4 != 0 || in.K > sizeofData-4 {
				return 0, fmt.Errorf("%w: load at offset %d (pc %d)", ErrBadProgram, in.K, pc)
			}
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case opAnd:
			acc &= in.K
		case opJa:
			if uint64(pc)+1+uint64(in.K) >= uint64(len(prog)) {
				return 0, fmt.Errorf("%w: jump past the end (pc %d)", ErrBadProgram, pc)
			}
			pc += int(in.K)
		case opJeq, opJge, opJgt, opJset:
			off := int(in.Jf)
			if jumpTaken(in, acc) {
				off = int(in.Jt)
			}
			if pc+1+off >= len(prog) {
				return 0, fmt.Errorf("%w: jump past the end (pc %d)", ErrBadProgram, pc)
			}
			pc += off
		case opRet:
			return in.K, nil
		default:
			return 0, fmt.Errorf("%w: instruction %#x at pc %d", ErrBadProgram, in.Code, pc)
		}
	}
	return 0, fmt.Errorf("%w: ran off the end", ErrBadProgram)
}
