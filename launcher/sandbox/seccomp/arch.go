package seccomp

import "golang.org/x/sys/unix"

// Arch is a syscall ABI a filter can be built for. Only little-endian
// 64-bit ABIs are supported: the filter reads the low and high halves of
// each argument at fixed offsets.
type Arch struct {
	Name      string // "x86_64", "aarch64"
	AuditArch uint32 // the value of seccomp_data.arch for this ABI
	// ForeignNr, when non-zero, is the first syscall number that belongs to
	// another ABI sharing this one's audit arch (x32 on x86_64: bit 30).
	ForeignNr uint32
	// Syscalls maps each syscall name of this ABI to its number.
	Syscalls map[string]uint32
}

// The supported ABIs. Tables come from golang.org/x/sys (zsyscalls_*.go).
var (
	X86_64  = &Arch{Name: "x86_64", AuditArch: unix.AUDIT_ARCH_X86_64, ForeignNr: 0x40000000, Syscalls: syscallsX86_64}
	AArch64 = &Arch{Name: "aarch64", AuditArch: unix.AUDIT_ARCH_AARCH64, Syscalls: syscallsAArch64}
)

// Arches lists every supported ABI.
var Arches = []*Arch{X86_64, AArch64}

// Nr returns the number of a syscall by name, and whether this ABI has it.
func (a *Arch) Nr(name string) (uint32, bool) {
	nr, ok := a.Syscalls[name]
	return nr, ok
}
