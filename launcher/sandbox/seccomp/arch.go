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
	// Syscalls are this ABI's syscalls, sorted by name (a static table:
	// nothing is built at start-up).
	Syscalls []Syscall
	byHash   []nameHash
}

// nameHash indexes Syscalls by the FNV-1a hash of the name.
type nameHash struct {
	hash uint64
	i    uint16
}

// Syscall is one syscall of an ABI.
type Syscall struct {
	Name string
	Nr   uint32
}

// The supported ABIs. Tables come from golang.org/x/sys (zsyscalls_*.go).
var (
	X86_64  = &Arch{Name: "x86_64", AuditArch: unix.AUDIT_ARCH_X86_64, ForeignNr: 0x40000000, Syscalls: syscallsX86_64, byHash: syscallsX86_64ByHash}
	AArch64 = &Arch{Name: "aarch64", AuditArch: unix.AUDIT_ARCH_AARCH64, Syscalls: syscallsAArch64, byHash: syscallsAArch64ByHash}
)

// Arches lists every supported ABI.
var Arches = []*Arch{X86_64, AArch64}

// Nr returns the number of a syscall by name, and whether this ABI has it.
func (a *Arch) Nr(name string) (uint32, bool) {
	h := fnv1a(name)
	lo, hi := 0, len(a.byHash)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a.byHash[m].hash < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(a.byHash) && a.byHash[lo].hash == h {
		if s := a.Syscalls[a.byHash[lo].i]; s.Name == name {
			return s.Nr, true
		}
	}
	return 0, false
}

// fnv1a is the 64-bit FNV-1a hash (internal/mksyscalls computes the same).
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// newest is the highest syscall number of the table.
func (a *Arch) newest() uint32 {
	var m uint32
	for _, s := range a.Syscalls {
		m = max(m, s.Nr)
	}
	return m
}
