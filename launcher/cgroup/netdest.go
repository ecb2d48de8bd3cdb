package cgroup

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The link-local destination filter: four cgroup/sock_addr BPF programs
// (connect4, connect6, sendmsg4, sendmsg6) attached to the run's cgroup2
// group, which refuse (EPERM) a connect() or an unconnected UDP sendmsg()
// to 169.254.0.0/16, fe80::/10, fd00:ec2::/32 (the cloud instance metadata
// service's addresses, AWS's IPv6 service block), the IPv6 metadata
// addresses of Google Cloud, Oracle Cloud, Scaleway and Akamai/Linode,
// 100.100.100.200 (Alibaba Cloud's), 192.0.0.192 (Oracle Cloud Classic's),
// 168.63.129.16 but its port 53 (Azure's WireServer, also its DNS
// resolver), and the IPv4-mapped (::ffff:a.b.c.d) and NAT64
// (64:ff9b::a.b.c.d, and each layout of the local-use block 64:ff9b:1::/48)
// forms of those IPv4 addresses.
// Everything else is left to Landlock's port rules. A run with a network
// grant has the host's network; this takes the link-local part of it away.
//
// The instructions are assembled here (16 for IPv4, 153 for IPv6), so that the launcher
// does not link an eBPF library. BPF_F_ALLOW_MULTI: the programs of the
// launcher's own cgroup still run, and nothing attached below the run's
// group can override these (every program must allow).

// eBPF instruction encoding (linux/bpf.h, linux/bpf_common.h).
const (
	bpfLDX   = 0x01
	bpfALU   = 0x04 // 32-bit: w registers
	bpfJMP   = 0x05
	bpfJMP32 = 0x06
	bpfALU64 = 0x07
	bpfW     = 0x00
	bpfMEM   = 0x60
	bpfK     = 0x00
	bpfX     = 0x08
	bpfOR    = 0x40
	bpfAND   = 0x50
	bpfLSH   = 0x60
	bpfRSH   = 0x70
	bpfMOV   = 0xb0
	bpfJA    = 0x00
	bpfJEQ   = 0x10
	bpfJNE   = 0x50
	bpfEXIT  = 0x90

	bpfFAllowMulti = 0x2
)

// insn is one eBPF instruction as the kernel reads it.
type insn struct {
	Op   uint8
	Regs uint8 // dst in the low nibble, src in the high one
	Off  int16
	Imm  int32
}

// The fields of struct bpf_sock_addr the programs read.
const (
	offUserIP4  = 4  // __u32, network byte order
	offUserIP6  = 8  // __u32[4], network byte order
	offUserPort = 24 // __u32 holding the port in network byte order
)

// be32 is the 32-bit value a 4-byte load of the bytes b gives on this host:
// the context's addresses are in network byte order, so comparisons are
// made against the same bytes read the host's way.
func be32(b0, b1, b2, b3 byte) int32 {
	return int32(*(*uint32)(unsafe.Pointer(&[4]byte{b0, b1, b2, b3})))
}

// asm assembles a program with named jump targets.
type asm struct {
	out    []insn
	labels map[string]int
	fixups map[int]string // instruction index → target label
}

func newAsm() *asm { return &asm{labels: map[string]int{}, fixups: map[int]string{}} }

func (a *asm) label(name string) { a.labels[name] = len(a.out) }

// load32: dst = *(u32 *)(r1 + off).
func (a *asm) load32(dst uint8, off int16) {
	a.out = append(a.out, insn{Op: bpfLDX | bpfMEM | bpfW, Regs: dst | 1<<4, Off: off})
}

// and32: wdst &= imm.
func (a *asm) and32(dst uint8, imm int32) {
	a.out = append(a.out, insn{Op: bpfALU | bpfAND | bpfK, Regs: dst, Imm: imm})
}

// mov: dst = src (64-bit).
func (a *asm) mov(dst, src uint8) {
	a.out = append(a.out, insn{Op: bpfALU64 | bpfMOV | bpfX, Regs: dst | src<<4})
}

// alu32: wdst = wdst <op> imm (op: bpfLSH, bpfRSH, bpfAND).
func (a *asm) alu32(op, dst uint8, imm int32) {
	a.out = append(a.out, insn{Op: bpfALU | op | bpfK, Regs: dst, Imm: imm})
}

// or32x: wdst |= wsrc.
func (a *asm) or32x(dst, src uint8) {
	a.out = append(a.out, insn{Op: bpfALU | bpfOR | bpfX, Regs: dst | src<<4})
}

// movImm: dst = imm.
func (a *asm) movImm(dst uint8, imm int32) {
	a.out = append(a.out, insn{Op: bpfALU64 | bpfMOV | bpfK, Regs: dst, Imm: imm})
}

// jmp32: if wdst <op> imm goto target.
func (a *asm) jmp32(op uint8, dst uint8, imm int32, target string) {
	a.fixups[len(a.out)] = target
	a.out = append(a.out, insn{Op: bpfJMP32 | op | bpfK, Regs: dst, Imm: imm})
}

func (a *asm) jump(target string) {
	a.fixups[len(a.out)] = target
	a.out = append(a.out, insn{Op: bpfJMP | bpfJA})
}

func (a *asm) exit() { a.out = append(a.out, insn{Op: bpfJMP | bpfEXIT}) }

// verdicts ends the program: "allow" returns 1, "deny" 0 (EPERM).
func (a *asm) verdicts() []insn {
	a.label("allow")
	a.movImm(0, 1)
	a.exit()
	a.label("deny")
	a.movImm(0, 0)
	a.exit()
	for i, l := range a.fixups {
		t, ok := a.labels[l]
		if !ok {
			panic("netdest: no label " + l)
		}
		a.out[i].Off = int16(t - i - 1)
	}
	return a.out
}

// be16 is the value a 4-byte load of user_port gives for port p: the
// port in network byte order in the low 16 bits, read the host's way.
func be16(p uint16) int32 {
	return int32(*(*uint16)(unsafe.Pointer(&[2]byte{byte(p >> 8), byte(p)})))
}

// denyV4 jumps to deny when wreg, an IPv4 address read the host's way,
// is refused: 169.254.0.0/16, 100.100.100.200 (Alibaba Cloud's metadata
// service), 192.0.0.192 (Oracle Cloud Classic's), or 168.63.129.16 (Azure's WireServer: the VM agent's goal
// state, extension settings and certificates on ports 80 and 32526) on
// any port but 53 (it is also Azure's DNS resolver, which a host's
// resolv.conf may name). Any other address goes on at pass. It uses r4
// and r5.
func (a *asm) denyV4(reg uint8, pass string) {
	a.mov(4, reg)
	a.and32(4, be32(0xff, 0xff, 0, 0))
	a.jmp32(bpfJEQ, 4, be32(169, 254, 0, 0), "deny")
	a.jmp32(bpfJEQ, reg, be32(100, 100, 100, 200), "deny")
	a.jmp32(bpfJEQ, reg, be32(192, 0, 0, 192), "deny")
	a.jmp32(bpfJNE, reg, be32(168, 63, 129, 16), pass)
	a.load32(5, offUserPort)
	a.jmp32(bpfJNE, 5, be16(53), "deny")
}

// inet4Prog refuses what denyV4 refuses.
func inet4Prog() []insn {
	a := newAsm()
	a.load32(2, offUserIP4)
	a.denyV4(2, "allow")
	a.jump("allow")
	return a.verdicts()
}

// metadata6 are the cloud metadata services' IPv6 addresses outside
// fe80::/10 and fd00:ec2::/32 (refused whole), each as the four words of
// user_ip6: Google Cloud's (fd20:ce::254), Oracle Cloud's
// (fd00:c1::a9fe:a9fe), Scaleway's (fd00:42::42) and Akamai/Linode's
// (fd00:a9fe:a9fe::1). Their IPv4 addresses are in 169.254.0.0/16.
var metadata6 = [][4]int32{
	{be32(0xfd, 0x20, 0x00, 0xce), 0, 0, be32(0, 0, 0x02, 0x54)},
	{be32(0xfd, 0x00, 0x00, 0xc1), 0, 0, be32(0xa9, 0xfe, 0xa9, 0xfe)},
	{be32(0xfd, 0x00, 0x00, 0x42), 0, 0, be32(0, 0, 0x00, 0x42)},
	{be32(0xfd, 0x00, 0xa9, 0xfe), be32(0xa9, 0xfe, 0, 0), 0, be32(0, 0, 0, 0x01)},
}

// v4in6 are the first three words of the IPv6 forms that carry an IPv4
// address in the last: IPv4-mapped (::ffff:a.b.c.d, what a dual-stack
// socket connects to), the NAT64 well-known prefix (64:ff9b::a.b.c.d,
// which a NAT64 gateway turns into the IPv4 address) and, since session
// 12, SIIT's IPv4-translated form (::ffff:0:a.b.c.d, RFC 2765, which a
// stateless translator turns into the IPv4 address) and the deprecated
// IPv4-compatible one (::a.b.c.d, RFC 4291). The local-use NAT64 block
// 64:ff9b:1::/48 (RFC 8215) is checked in every layout a prefix inside it
// may use (nat64Local).
var v4in6 = [][3]int32{
	{0, 0, be32(0, 0, 0xff, 0xff)},
	{be32(0, 0x64, 0xff, 0x9b), 0, 0},
	{0, 0, be32(0xff, 0xff, 0, 0)},
	{0, 0, 0},
}

// littleEndian: the layouts of nat64Local are assembled from the words of
// user_ip6 read the host's way, with shifts written for a little-endian
// host (amd64, arm64, riscv64, ...).
var littleEndian = be32(1, 0, 0, 0) == 1

// nat64Local refuses an address of the local-use NAT64 block
// 64:ff9b:1::/48 (RFC 8215) whose IPv4 address, in any RFC 6052 layout of
// a prefix inside the block, is one denyV4 refuses: a /96 prefix (any of
// the block's: bytes 12-15), a /64 (bytes 9-12), a /56 (bytes 7, 9-11) and
// the /48 itself (bytes 6-7, 9-10; byte 8, RFC 6052's u octet, skipped).
// The block is for a network's own gateway, which may use any of them;
// an address of the block whose other layouts hold a refused IPv4 address
// by chance is refused too. On a big-endian host the whole block is
// refused. r2 holds user_ip6[0]; it uses r3, r6, r7, r8 (and r4, r5).
func (a *asm) nat64Local() {
	a.jmp32(bpfJNE, 2, be32(0, 0x64, 0xff, 0x9b), "allow")
	a.load32(6, offUserIP6+4)
	a.mov(3, 6)
	a.and32(3, be32(0xff, 0xff, 0, 0))
	a.jmp32(bpfJNE, 3, be32(0, 1, 0, 0), "allow")
	if !littleEndian {
		a.jump("deny")
		return
	}
	a.load32(7, offUserIP6+8)
	// /96: the last word.
	a.load32(3, offUserIP6+12)
	a.mov(8, 3)
	a.denyV4(3, "nat64-64")
	a.label("nat64-64")
	// /64: bytes 9-12 = (word2 >> 8) | (word3 << 24).
	a.alu32(bpfLSH, 8, 24)
	a.mov(3, 7)
	a.alu32(bpfRSH, 3, 8)
	a.or32x(3, 8)
	a.denyV4(3, "nat64-56")
	a.label("nat64-56")
	// /56: bytes 7, 9-11 = (word1 >> 24) | (word2 & 0xffffff00).
	a.mov(3, 6)
	a.alu32(bpfRSH, 3, 24)
	a.mov(8, 7)
	a.and32(8, be32(0, 0xff, 0xff, 0xff))
	a.or32x(3, 8)
	a.denyV4(3, "nat64-48")
	a.label("nat64-48")
	// /48: bytes 6-7, 9-10 = (word1 >> 16) | ((word2 >> 8) << 16).
	a.mov(3, 6)
	a.alu32(bpfRSH, 3, 16)
	a.mov(8, 7)
	a.alu32(bpfRSH, 8, 8)
	a.alu32(bpfLSH, 8, 16)
	a.or32x(3, 8)
	a.denyV4(3, "allow")
	a.jump("allow")
}

// inet6Prog refuses fe80::/10, fd00:ec2::/32 (AWS's IPv6 service block:
// the metadata service at ::254, the EKS Pod Identity agent's credentials
// at ::23, its resolver and time server), the other clouds' metadata
// addresses (metadata6), and the IPv4-mapped and NAT64 forms (v4in6) of
// what denyV4 refuses.
func inet6Prog() []insn {
	a := newAsm()
	a.load32(2, offUserIP6)
	a.mov(3, 2)
	a.and32(3, be32(0xff, 0xc0, 0, 0))
	a.jmp32(bpfJEQ, 3, be32(0xfe, 0x80, 0, 0), "deny")
	a.jmp32(bpfJEQ, 2, be32(0xfd, 0x00, 0x0e, 0xc2), "deny")
	for i, w := range metadata6 {
		next := fmt.Sprintf("metadata6-%d", i)
		a.jmp32(bpfJNE, 2, w[0], next)
		for k := 1; k < 4; k++ {
			a.load32(3, offUserIP6+int16(4*k))
			if k < 3 {
				a.jmp32(bpfJNE, 3, w[k], next)
			}
		}
		a.jmp32(bpfJEQ, 3, w[3], "deny")
		a.label(next)
	}
	for i, w := range v4in6 {
		next := fmt.Sprintf("v4in6-%d", i)
		a.jmp32(bpfJNE, 2, w[0], next)
		a.load32(3, offUserIP6+4)
		a.jmp32(bpfJNE, 3, w[1], next)
		a.load32(3, offUserIP6+8)
		a.jmp32(bpfJNE, 3, w[2], next)
		a.load32(3, offUserIP6+12)
		a.denyV4(3, "allow")
		a.jump("allow")
		a.label(next)
	}
	a.nat64Local()
	return a.verdicts()
}

// netDestProgs are the programs and where each is attached.
var netDestProgs = []struct {
	attach uint32
	prog   func() []insn
}{
	{unix.BPF_CGROUP_INET4_CONNECT, inet4Prog},
	{unix.BPF_CGROUP_INET6_CONNECT, inet6Prog},
	{unix.BPF_CGROUP_UDP4_SENDMSG, inet4Prog},
	{unix.BPF_CGROUP_UDP6_SENDMSG, inet6Prog},
}

// ErrNoNetFilter is wrapped by every failure to put the filter in place.
var ErrNoNetFilter = errors.New("cannot refuse link-local destinations (cloud metadata service)")

// loadProg loads one cgroup/sock_addr program for attach type at. It loads
// without the verifier's log (which costs time and, past its buffer's
// size, fails the load with ENOSPC) and, on a refusal, again with it to
// say why.
func loadProg(prog []insn, at uint32) (int, error) {
	fd, err := loadProgLog(prog, at, nil)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL) {
		logBuf := make([]byte, 64<<10)
		if _, lerr := loadProgLog(prog, at, logBuf); lerr != nil {
			if n := cstrLen(logBuf); n > 0 {
				return -1, fmt.Errorf("BPF_PROG_LOAD: %w (verifier: %s)", lerr, logBuf[:n])
			}
		}
	}
	return -1, fmt.Errorf("BPF_PROG_LOAD: %w", err)
}

// loadProgLog is one BPF_PROG_LOAD, with the verifier's log into logBuf
// when it is not nil.
func loadProgLog(prog []insn, at uint32, logBuf []byte) (int, error) {
	license := []byte("GPL\x00")
	attr := struct {
		progType, insnCnt   uint32
		insns, license      uint64
		logLevel, logSize   uint32
		logBuf              uint64
		kernVersion, flags  uint32
		name                [16]byte
		ifindex, expectedAT uint32
	}{
		progType: unix.BPF_PROG_TYPE_CGROUP_SOCK_ADDR, insnCnt: uint32(len(prog)),
		insns: uint64(uintptr(unsafe.Pointer(&prog[0]))), license: uint64(uintptr(unsafe.Pointer(&license[0]))),
		expectedAT: at,
	}
	if len(logBuf) > 0 {
		attr.logLevel, attr.logSize, attr.logBuf = 1, uint32(len(logBuf)), uint64(uintptr(unsafe.Pointer(&logBuf[0])))
	}
	copy(attr.name[:], "mcpw_netdest")
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(prog)
	runtime.KeepAlive(license)
	runtime.KeepAlive(logBuf)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func cstrLen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// attachProg attaches prog to the cgroup open at cgFD.
func attachProg(cgFD, prog int, at uint32) error {
	attr := struct{ target, bpfFD, attachType, flags, replace uint32 }{
		target: uint32(cgFD), bpfFD: uint32(prog), attachType: at, flags: bpfFAllowMulti,
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_ATTACH, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return fmt.Errorf("BPF_PROG_ATTACH: %w", errno)
	}
	return nil
}

// denyLinkLocal attaches the filter to the cgroup2 directory dir. The
// kernel keeps the programs for as long as the group exists; nothing is
// left to close.
func denyLinkLocal(dir string) error {
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open the run's cgroup2 group: %w", ErrNoNetFilter, err)
	}
	defer unix.Close(cg)
	for _, p := range netDestProgs {
		fd, err := loadProg(p.prog(), p.attach)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNoNetFilter, err)
		}
		err = attachProg(cg, fd, p.attach)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNoNetFilter, err)
		}
	}
	return nil
}

// DenyLinkLocal puts the link-local destination filter on the group. It
// needs the group's cgroup2 directory and CAP_BPF (root); an error says
// which is missing, and the run must then say that the filter is off.
func (g *Group) DenyLinkLocal() error {
	if g == nil || g.v2 == "" {
		return fmt.Errorf("%w: the run has no cgroup2 group (cgroup v2 is not mounted, or --cgroup=false)", ErrNoNetFilter)
	}
	return denyLinkLocal(g.v2)
}

// ProbeLinkLocal loads the filter's programs without attaching them: nil
// when this process could put the filter on a run's cgroup2 group.
func ProbeLinkLocal() error {
	for _, p := range netDestProgs {
		fd, err := loadProg(p.prog(), p.attach)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNoNetFilter, err)
		}
		unix.Close(fd)
	}
	return nil
}
