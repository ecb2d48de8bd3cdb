package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// FilterOptions says what the seccomp filter blocks besides the fixed set.
type FilterOptions struct {
	// BlockIOUring denies io_uring_setup/enter/register with EPERM: io_uring
	// submits file operations the daemon's syscall probes cannot see.
	BlockIOUring bool
	// AllowUDP permits AF_INET/AF_INET6 datagram sockets (when the scope
	// grants network ports). Landlock below ABI 10 cannot restrict UDP.
	AllowUDP bool
}

// Arch is the native syscall ABI the filter is built for.
type Arch struct {
	AuditArch uint32
	// X32Bit is set on amd64, where syscalls with bit 30 set use the x32 ABI.
	X32Bit uint32
	// Syscall numbers of the native ABI.
	IOUringSetup, IOUringEnter, IOUringRegister uint32
	Socket, Ioctl                               uint32
	PathMetadata                                []uint32 // chmod/chown family that takes a path
	Keyring                                     []uint32 // add_key, request_key, keyctl
	Setsid                                      uint32
}

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
	offArg2 = 32
)

// BuildFilter assembles the classic BPF program installed before exec.
//
// It allows everything except:
//   - any syscall of a foreign ABI (i386 int 0x80, x32): ENOSYS;
//   - io_uring_* when BlockIOUring: EPERM;
//   - socket() outside AF_INET/AF_INET6 stream TCP and NETLINK_ROUTE:
//     EACCES (EPERM for AF_UNIX, the errno Landlock's own abstract-socket
//     scope gives). This closes what Landlock ABI 7 leaves open: pathname unix
//     sockets (a docker or D-Bus socket outside the scope), MPTCP and SCTP
//     (not covered by Landlock's TCP rules), raw and packet sockets, vsock;
//     UDP unless the scope grants network ports;
//   - chmod/chown on paths (Landlock does not fence metadata changes; a root
//     server could chmod a root-owned file anywhere): EPERM. fchmod/fchown
//     on a file the fence let it open still work;
//   - kernel keyrings (shared with the caller's session): EPERM;
//   - setsid: the server is the leader of the run's session, and the
//     launcher kills that session when the run ends; a descendant must not
//     leave it to outlive the run: EPERM;
//   - the TIOCSTI/TIOCLINUX ioctls (terminal input injection): EPERM.
func BuildFilter(a Arch, o FilterOptions) ([]unix.SockFilter, error) {
	var p prog
	p.ld(offArch)
	p.jeq(a.AuditArch, "", "foreign")
	p.ld(offNr)
	if a.X32Bit != 0 {
		p.jset(a.X32Bit, "foreign", "")
	}
	if o.BlockIOUring {
		for _, nr := range []uint32{a.IOUringSetup, a.IOUringEnter, a.IOUringRegister} {
			p.jeq(nr, "eperm", "")
		}
	}
	for _, nr := range a.PathMetadata {
		p.jeq(nr, "eperm", "")
	}
	for _, nr := range a.Keyring {
		p.jeq(nr, "eperm", "")
	}
	p.jeq(a.Setsid, "eperm", "")
	p.jeq(a.Socket, "socket", "")
	p.jeq(a.Ioctl, "ioctl", "allow")

	p.label("ioctl")
	p.ld(offArg1)
	p.jeq(unix.TIOCSTI, "eperm", "")
	p.jeq(unix.TIOCLINUX, "eperm", "allow")

	p.label("socket")
	p.ld(offArg0)
	p.jeq(unix.AF_INET, "inet", "")
	p.jeq(unix.AF_INET6, "inet", "")
	p.jeq(unix.AF_UNIX, "eperm", "")
	p.jeq(unix.AF_NETLINK, "netlink", "eacces")

	p.label("netlink")
	p.ld(offArg2)
	p.jeq(unix.NETLINK_ROUTE, "allow", "eacces")

	p.label("inet")
	p.ld(offArg1)
	p.and(0xf) // strip SOCK_NONBLOCK / SOCK_CLOEXEC
	if o.AllowUDP {
		p.jeq(unix.SOCK_DGRAM, "udp", "")
	}
	p.jeq(unix.SOCK_STREAM, "tcp", "eacces")
	p.label("tcp")
	p.ld(offArg2)
	p.jeq(0, "allow", "")
	p.jeq(unix.IPPROTO_TCP, "allow", "eacces")
	if o.AllowUDP {
		p.label("udp")
		p.ld(offArg2)
		p.jeq(0, "allow", "")
		p.jeq(unix.IPPROTO_UDP, "allow", "eacces")
	}

	p.label("allow")
	p.ret(unix.SECCOMP_RET_ALLOW)
	p.label("eperm")
	p.ret(errno(unix.EPERM))
	p.label("eacces")
	p.ret(errno(unix.EACCES))
	p.label("foreign")
	p.ret(errno(unix.ENOSYS))
	return p.assemble()
}

func errno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

// prog is a tiny classic-BPF assembler with symbolic jump targets; an empty
// target means "fall through to the next instruction".
type prog struct {
	ins    []insn
	labels map[string]int
}

type insn struct {
	f      unix.SockFilter
	jt, jf string
}

func (p *prog) label(name string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[name] = len(p.ins)
}

func (p *prog) ld(off uint32) {
	p.ins = append(p.ins, insn{f: unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}})
}

func (p *prog) and(k uint32) {
	p.ins = append(p.ins, insn{f: unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: k}})
}

func (p *prog) jeq(k uint32, jt, jf string) {
	p.ins = append(p.ins, insn{f: unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k}, jt: jt, jf: jf})
}

func (p *prog) jset(k uint32, jt, jf string) {
	p.ins = append(p.ins, insn{f: unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: k}, jt: jt, jf: jf})
}

func (p *prog) ret(k uint32) {
	p.ins = append(p.ins, insn{f: unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k}})
}

func (p *prog) assemble() ([]unix.SockFilter, error) {
	out := make([]unix.SockFilter, len(p.ins))
	for i, in := range p.ins {
		f := in.f
		if f.Code&0x07 == unix.BPF_JMP {
			jt, err := p.offset(i, in.jt)
			if err != nil {
				return nil, err
			}
			jf, err := p.offset(i, in.jf)
			if err != nil {
				return nil, err
			}
			f.Jt, f.Jf = jt, jf
		}
		out[i] = f
	}
	if len(out) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp filter has %d instructions, limit %d", len(out), unix.BPF_MAXINSNS)
	}
	return out, nil
}

func (p *prog) offset(from int, label string) (uint8, error) {
	if label == "" {
		return 0, nil
	}
	to, ok := p.labels[label]
	if !ok {
		return 0, fmt.Errorf("seccomp filter: unknown label %q", label)
	}
	d := to - from - 1
	if d < 0 || d > 255 {
		return 0, fmt.Errorf("seccomp filter: jump to %q out of range (%d)", label, d)
	}
	return uint8(d), nil
}
