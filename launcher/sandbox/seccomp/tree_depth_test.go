package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestNumberDecidedInFewComparisons: docs/launcher.md's "at most 10
// comparisons in all on x86_64 (9 on aarch64) before a syscall is allowed,
// refused, or sent to its argument block" (the arch check, x32's, the
// tree), for every syscall number of the table, past it and of the
// foreign ABI, under every combination of the options that change the
// policy. A policy that needs more: say so in the docs, then here.
func TestNumberDecidedInFewComparisons(t *testing.T) {
	most := map[string]int{"x86_64": 10, "aarch64": 9}
	for _, arch := range Arches {
		worst := 0
		for bits := 0; bits < 1<<9; bits++ {
			on := func(i int) bool { return bits&(1<<i) != 0 }
			o := Options{WriteScope: on(0), AllowIOUring: on(1), AllowUDP: on(2), AllowListen: on(3), IPCNamespace: on(4),
				MountNamespace: on(5), DedicatedUID: on(6), OwnUserCounters: on(7), PIDNamespace: on(8)}
			f, err := Build(arch, o)
			if err != nil {
				t.Fatalf("%s %+v: %v", arch.Name, o, err)
			}
			nrs := []uint32{arch.newest() + 1, arch.newest() + 1000, 1 << 30, 1<<30 + 1, 0xffffffff}
			for nr := uint32(0); nr <= arch.newest(); nr++ {
				nrs = append(nrs, nr)
			}
			for _, nr := range nrs {
				n, ok := comparisonsToDecide(f.Program, Data{Nr: nr, Arch: arch.AuditArch})
				if !ok {
					t.Fatalf("%s %+v: syscall %d: the program did not decide the number", arch.Name, o, nr)
				}
				worst = max(worst, n)
			}
		}
		if worst > most[arch.Name] {
			t.Errorf("%s: a syscall number takes %d comparisons, the docs say at most %d", arch.Name, worst, most[arch.Name])
		}
		t.Logf("%s: at most %d comparisons", arch.Name, worst)
	}
}

// comparisonsToDecide runs prog over d as Eval does and counts the
// conditional jumps taken until a return or the first load of an
// argument (the argument block); ok is false for anything else.
func comparisonsToDecide(prog []unix.SockFilter, d Data) (n int, ok bool) {
	b := d.Bytes()
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case opLdAbs:
			if in.K != offNr && in.K != offArch {
				return n, true
			}
			acc = uint32(b[in.K]) | uint32(b[in.K+1])<<8 | uint32(b[in.K+2])<<16 | uint32(b[in.K+3])<<24
		case opJa:
			pc += int(in.K)
		case opJeq, opJge, opJgt, opJset:
			n++
			if jumpTaken(in, acc) {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case opRet:
			return n, true
		default:
			return n, false
		}
	}
	return n, false
}
