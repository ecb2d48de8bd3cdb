package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// run interprets a classic BPF seccomp program over one seccomp_data, with
// just the instructions BuildFilter emits.
func run(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[0:], nr)
	binary.LittleEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= in.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			if acc&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("unexpected instruction %#x at %d", in.Code, pc)
		}
	}
	t.Fatal("program fell off the end")
	return 0
}

func TestFilterDecisions(t *testing.T) {
	a := NativeArch
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := errno(unix.EPERM)
	eacces := errno(unix.EACCES)
	enosys := errno(unix.ENOSYS)
	strict, err := BuildFilter(a, FilterOptions{BlockIOUring: true})
	if err != nil {
		t.Fatal(err)
	}
	loose, err := BuildFilter(a, FilterOptions{AllowUDP: true})
	if err != nil {
		t.Fatal(err)
	}
	const cloexec = unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK
	tests := []struct {
		name string
		prog []unix.SockFilter
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"read", strict, a.AuditArch, unix.SYS_READ, nil, allow},
		{"openat", strict, a.AuditArch, unix.SYS_OPENAT, nil, allow},
		{"io_uring_setup blocked", strict, a.AuditArch, a.IOUringSetup, nil, eperm},
		{"io_uring_enter blocked", strict, a.AuditArch, a.IOUringEnter, nil, eperm},
		{"io_uring_register blocked", strict, a.AuditArch, a.IOUringRegister, nil, eperm},
		{"io_uring allowed", loose, a.AuditArch, a.IOUringSetup, nil, allow},
		{"foreign arch", strict, unix.AUDIT_ARCH_I386, 3, nil, enosys},
		{"tcp", strict, a.AuditArch, a.Socket, []uint64{unix.AF_INET, unix.SOCK_STREAM | cloexec, 0}, allow},
		{"tcp6 explicit", strict, a.AuditArch, a.Socket, []uint64{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_TCP}, allow},
		{"mptcp", strict, a.AuditArch, a.Socket, []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, eacces},
		{"sctp stream", strict, a.AuditArch, a.Socket, []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP}, eacces},
		{"udp without grant", strict, a.AuditArch, a.Socket, []uint64{unix.AF_INET, unix.SOCK_DGRAM, 0}, eacces},
		{"udp with grant", loose, a.AuditArch, a.Socket, []uint64{unix.AF_INET, unix.SOCK_DGRAM | cloexec, 0}, allow},
		{"raw", loose, a.AuditArch, a.Socket, []uint64{unix.AF_INET, unix.SOCK_RAW, 1}, eacces},
		{"unix", strict, a.AuditArch, a.Socket, []uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, eperm},
		{"packet", strict, a.AuditArch, a.Socket, []uint64{unix.AF_PACKET, unix.SOCK_RAW, 0}, eacces},
		{"vsock", strict, a.AuditArch, a.Socket, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, eacces},
		{"netlink route", strict, a.AuditArch, a.Socket, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, allow},
		{"netlink audit", strict, a.AuditArch, a.Socket, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}, eacces},
		{"domain high bits ignored", strict, a.AuditArch, a.Socket, []uint64{1<<32 | unix.AF_UNIX, unix.SOCK_STREAM, 0}, eperm},
		{"tiocsti", strict, a.AuditArch, a.Ioctl, []uint64{2, unix.TIOCSTI}, eperm},
		{"tiocsti high bits", strict, a.AuditArch, a.Ioctl, []uint64{2, 1<<32 | unix.TIOCSTI}, eperm},
		{"fionread", strict, a.AuditArch, a.Ioctl, []uint64{0, unix.TIOCINQ}, allow},
		{"keyctl", strict, a.AuditArch, a.Keyring[2], nil, eperm},
		{"setsid", strict, a.AuditArch, a.Setsid, nil, eperm},
		{"setpgid", strict, a.AuditArch, unix.SYS_SETPGID, nil, allow},
	}
	for _, nr := range a.PathMetadata {
		tests = append(tests, struct {
			name string
			prog []unix.SockFilter
			arch uint32
			nr   uint32
			args []uint64
			want uint32
		}{"path metadata", strict, a.AuditArch, nr, nil, eperm})
	}
	if a.X32Bit != 0 {
		tests = append(tests, struct {
			name string
			prog []unix.SockFilter
			arch uint32
			nr   uint32
			args []uint64
			want uint32
		}{"x32 io_uring", loose, a.AuditArch, a.X32Bit | a.IOUringSetup, nil, enosys})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(t, tt.prog, tt.arch, tt.nr, tt.args...); got != tt.want {
				t.Errorf("got %#x, want %#x", got, tt.want)
			}
		})
	}
}

// FuzzFilter: for any syscall and arguments the filter returns a valid
// action, and io_uring is never allowed when blocked.
func FuzzFilter(f *testing.F) {
	f.Add(uint32(unix.SYS_READ), uint64(0), uint64(0), uint64(0), true)
	f.Add(NativeArch.IOUringSetup, uint64(0), uint64(0), uint64(0), false)
	f.Add(NativeArch.Socket, uint64(unix.AF_INET), uint64(unix.SOCK_STREAM), uint64(unix.IPPROTO_MPTCP), true)
	f.Fuzz(func(t *testing.T, nr uint32, a0, a1, a2 uint64, block bool) {
		prog, err := BuildFilter(NativeArch, FilterOptions{BlockIOUring: block})
		if err != nil {
			t.Fatal(err)
		}
		got := run(t, prog, NativeArch.AuditArch, nr, a0, a1, a2)
		isURing := nr == NativeArch.IOUringSetup || nr == NativeArch.IOUringEnter || nr == NativeArch.IOUringRegister
		if block && isURing && got == unix.SECCOMP_RET_ALLOW {
			t.Fatal("io_uring allowed")
		}
		if nr == NativeArch.Socket && got == unix.SECCOMP_RET_ALLOW {
			dom, typ, proto := uint32(a0), uint32(a1)&0xf, uint32(a2)
			okInet := (dom == unix.AF_INET || dom == unix.AF_INET6) && typ == unix.SOCK_STREAM && (proto == 0 || proto == unix.IPPROTO_TCP)
			okNetlink := dom == unix.AF_NETLINK && proto == unix.NETLINK_ROUTE
			if !okInet && !okNetlink {
				t.Fatalf("socket(%d, %d, %d) allowed", dom, typ, proto)
			}
		}
	})
}
