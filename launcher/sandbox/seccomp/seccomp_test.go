package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// decide runs the filter for arch and opts over one syscall, through both
// our evaluator and golang.org/x/net/bpf's VM, and fails if they differ.
func decide(t testing.TB, f *Filter, d Data) Action {
	t.Helper()
	got, err := Eval(f.Program, d)
	if err != nil {
		t.Fatalf("eval %+v: %v", d, err)
	}
	if ref := refEval(t, f.Program, d); ref != Action(got) {
		t.Fatalf("evaluators disagree on %+v: ours %#x, x/net/bpf %#x", d, got, ref)
	}
	return Action(got)
}

// refEval runs prog in x/net/bpf's VM. That VM loads words big-endian (it
// is made for packets), so every 32-bit word of seccomp_data is handed to
// it byte-swapped: the filter only makes aligned 32-bit loads.
func refEval(t testing.TB, prog []unix.SockFilter, d Data) Action {
	t.Helper()
	raw := make([]bpf.RawInstruction, len(prog))
	for i, in := range prog {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("x/net/bpf cannot disassemble the program")
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("x/net/bpf refuses the program: %v", err)
	}
	le := d.Bytes()
	be := make([]byte, len(le))
	for i := 0; i < len(le); i += 4 {
		binary.BigEndian.PutUint32(be[i:], binary.LittleEndian.Uint32(le[i:]))
	}
	n, err := vm.Run(be)
	if err != nil {
		t.Fatalf("x/net/bpf run: %v", err)
	}
	return Action(uint32(n))
}

func build(t testing.TB, a *Arch, o Options) *Filter {
	t.Helper()
	f, err := Build(a, o)
	if err != nil {
		t.Fatalf("build %s %+v: %v", a.Name, o, err)
	}
	return f
}

type call struct {
	name string
	args []uint64
}

func sys(name string, args ...uint64) call { return call{name, args} }

func (c call) data(t testing.TB, a *Arch) (Data, bool) {
	nr, ok := a.Nr(c.name)
	if !ok {
		return Data{}, false
	}
	d := Data{Nr: nr, Arch: a.AuditArch}
	copy(d.Args[:], c.args)
	return d, true
}

const hi = 1 << 32 // a bit the kernel ignores in int arguments

// cwd is AT_FDCWD as a syscall argument.
var cwd = ^uint64(99) // -100, sign-extended as the kernel sees it

func TestFilterDecisions(t *testing.T) {
	var (
		strict    = Options{}
		write     = Options{WriteScope: true}
		writeOwn  = Options{WriteScope: true, DedicatedUID: true}
		readOwn   = Options{DedicatedUID: true}
		network   = Options{AllowUDP: true, AllowListen: true}
		layered   = Options{IPCNamespace: true, MountNamespace: true}
		uring     = Options{AllowIOUring: true}
		pidNS     = Options{PIDNamespace: true}
		stream    = uint64(unix.SOCK_STREAM | unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK)
		tfo       = uint64(unix.MSG_FASTOPEN)
		threadFl  = uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
		forkFl    = uint64(unix.CLONE_CHILD_SETTID | unix.CLONE_CHILD_CLEARTID | uint64(unix.SIGCHLD))
		eperm     = Errno(unix.EPERM)
		eacces    = Errno(unix.EACCES)
		enosys    = Errno(unix.ENOSYS)
		enotsup   = Errno(unix.EOPNOTSUPP)
		ptr       = uint64(0x7ffc12345678)
		noexecMFD = uint64(unix.MFD_CLOEXEC | unix.MFD_NOEXEC_SEAL)
	)
	tests := []struct {
		name string
		o    Options
		c    call
		want Action
	}{
		// the runtime's everyday calls
		{"read", strict, sys("read", 0, ptr, 10), Allow},
		{"openat read", strict, sys("openat", cwd, ptr, unix.O_RDONLY|unix.O_CLOEXEC, 0), Allow},
		{"openat create 0644", strict, sys("openat", cwd, ptr, unix.O_CREAT|unix.O_WRONLY, 0o644), Allow},
		{"open create 0666", strict, sys("open", ptr, unix.O_CREAT|unix.O_WRONLY, 0o666), Allow},
		{"mmap exec (JIT)", strict, sys("mmap", 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0), Allow},
		{"mprotect exec", strict, sys("mprotect", ptr, 4096, unix.PROT_READ|unix.PROT_EXEC), Allow},
		{"clone thread", strict, sys("clone", threadFl, ptr, ptr, ptr, ptr), Allow},
		{"clone fork", strict, sys("clone", forkFl, 0, 0, ptr, 0), Allow},
		{"epoll_pwait", strict, sys("epoll_pwait", 3, ptr, 16, 0, 0), Allow},
		{"eventfd2", strict, sys("eventfd2", 0, unix.EFD_CLOEXEC), Allow},
		{"statx", strict, sys("statx", cwd, ptr, 0, 0x7ff, ptr), Allow},
		{"getrandom", strict, sys("getrandom", ptr, 16, 0), Allow},
		{"sched_getaffinity self", strict, sys("sched_getaffinity", 0, 128, ptr), Allow},
		{"sched_getaffinity other (read only)", strict, sys("sched_getaffinity", 1, 128, ptr), Allow},
		{"prlimit64 self", strict, sys("prlimit64", 0, unix.RLIMIT_NOFILE, 0, ptr), Allow},
		{"prlimit64 self, junk high bits", strict, sys("prlimit64", hi, unix.RLIMIT_NOFILE, 0, ptr), Allow},
		{"ioctl TCGETS", strict, sys("ioctl", 1, unix.TCGETS, ptr), Allow},
		{"ioctl FIONBIO", strict, sys("ioctl", 1, 0x5421, ptr), Allow},
		{"fcntl F_GETFL", strict, sys("fcntl", 0, unix.F_GETFL), Allow},
		{"fcntl F_SETLK", strict, sys("fcntl", 3, unix.F_SETLK, ptr), Allow},
		{"fgetxattr", strict, sys("fgetxattr", 3, ptr, ptr, 64), Allow},
		{"personality query", strict, sys("personality", 0xffffffff), Allow},
		{"personality linux", strict, sys("personality", 0), Allow},
		{"setpgid", strict, sys("setpgid", 0, 0), Allow},
		{"kill (Landlock scopes signals)", strict, sys("kill", 1, 0), Allow},
		{"unshare files", strict, sys("unshare", unix.CLONE_FILES|unix.CLONE_FS), Allow},
		{"execve", strict, sys("execve", ptr, ptr, ptr), Allow},
		{"execveat relative", strict, sys("execveat", 3, ptr, ptr, ptr, 0), Allow},
		{"landlock", strict, sys("landlock_create_ruleset", 0, 0, 1), Allow},

		// unlisted
		{"bpf", strict, sys("bpf", 0, ptr, 0), eperm},
		{"perf_event_open", strict, sys("perf_event_open", ptr, 0, ^uint64(0), ^uint64(0), 0), eperm},
		{"userfaultfd", strict, sys("userfaultfd", 0), eperm},
		{"keyctl", strict, sys("keyctl", 0), eperm},
		{"add_key", strict, sys("add_key", ptr), eperm},
		{"setsid", strict, sys("setsid"), eperm},
		{"mount", strict, sys("mount", ptr, ptr, ptr, 0, 0), eperm},
		{"open_tree", strict, sys("open_tree", cwd, ptr, 1), eperm},
		{"move_mount", strict, sys("move_mount", 3, ptr, 4, ptr, 0), eperm},
		{"fsopen", strict, sys("fsopen", ptr, 0), eperm},
		{"mount_setattr", strict, sys("mount_setattr", 3, ptr, 0, ptr, 32), eperm},
		{"chroot", strict, sys("chroot", ptr), eperm},
		{"pivot_root", strict, sys("pivot_root", ptr, ptr), eperm},
		{"modify_ldt", strict, sys("modify_ldt", 1, ptr, 16), eperm},
		{"fanotify_init", strict, sys("fanotify_init", 0, 0), eperm},
		{"syslog", strict, sys("syslog", 3, ptr, 100), eperm},
		{"listmount", strict, sys("listmount", ptr, ptr, 10, 0), eperm},
		{"statmount", strict, sys("statmount", ptr, ptr, 100, 0), eperm},
		{"listns", strict, sys("listns", ptr, ptr, 10, 0), eperm},
		{"lsm_set_self_attr", strict, sys("lsm_set_self_attr", 100, ptr, 64, 0), eperm},
		{"memfd_secret", strict, sys("memfd_secret", 0), eperm},
		{"open_by_handle_at", strict, sys("open_by_handle_at", 3, ptr, 0), eperm},
		{"unknown number", strict, call{name: "nr-460-unused"}, eperm},

		// privilege: namespaces
		{"clone newuser", strict, sys("clone", forkFl|unix.CLONE_NEWUSER), eperm},
		{"clone newns", strict, sys("clone", forkFl|unix.CLONE_NEWNS), eperm},
		{"clone newnet", strict, sys("clone", forkFl|unix.CLONE_NEWNET), eperm},
		{"clone newpid", strict, sys("clone", forkFl|unix.CLONE_NEWPID), eperm},
		{"clone newipc", strict, sys("clone", forkFl|unix.CLONE_NEWIPC), eperm},
		{"clone newuts", strict, sys("clone", forkFl|unix.CLONE_NEWUTS), eperm},
		{"clone newcgroup", strict, sys("clone", forkFl|unix.CLONE_NEWCGROUP), eperm},
		{"clone newuser, high bits", strict, sys("clone", hi|unix.CLONE_NEWUSER), eperm},
		{"unshare newuser", strict, sys("unshare", unix.CLONE_NEWUSER), eperm},
		{"unshare newns", strict, sys("unshare", unix.CLONE_NEWNS), eperm},
		{"unshare newtime", strict, sys("unshare", unix.CLONE_NEWTIME), eperm},
		{"unshare newuser even with layers", layered, sys("unshare", unix.CLONE_NEWUSER|unix.CLONE_NEWNS), eperm},
		{"setns", strict, sys("setns", 3, 0), eperm},
		{"clone3 falls back", strict, sys("clone3", ptr, 88), enosys},
		{"openat2 falls back", strict, sys("openat2", cwd, ptr, ptr, 24), enosys},

		// network
		{"tcp", strict, sys("socket", unix.AF_INET, stream, 0), Allow},
		{"tcp6 explicit", strict, sys("socket", unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_TCP), Allow},
		{"mptcp", strict, sys("socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), eacces},
		{"sctp", strict, sys("socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP), eacces},
		{"sctp seqpacket", network, sys("socket", unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP), eacces},
		{"udp not granted", strict, sys("socket", unix.AF_INET, unix.SOCK_DGRAM, 0), eacces},
		{"udp granted", network, sys("socket", unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP), Allow},
		{"udplite", network, sys("socket", unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE), eacces},
		{"icmp ping socket", network, sys("socket", unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), eacces},
		{"raw", network, sys("socket", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW), eacces},
		{"unix", strict, sys("socket", unix.AF_UNIX, unix.SOCK_STREAM, 0), eperm},
		{"unix dgram", strict, sys("socket", unix.AF_UNIX, unix.SOCK_DGRAM, 0), eperm},
		{"unix, high bits", strict, sys("socket", hi|unix.AF_UNIX, unix.SOCK_STREAM, 0), eperm},
		{"packet", strict, sys("socket", unix.AF_PACKET, unix.SOCK_RAW, 0), eacces},
		{"vsock", strict, sys("socket", unix.AF_VSOCK, unix.SOCK_STREAM, 0), eacces},
		{"netlink route", strict, sys("socket", unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE), Allow},
		{"netlink audit", strict, sys("socket", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT), eacces},
		{"socketpair stream", strict, sys("socketpair", unix.AF_UNIX, stream, 0, ptr), Allow},
		{"socketpair seqpacket", strict, sys("socketpair", unix.AF_UNIX, unix.SOCK_SEQPACKET, 0, ptr), Allow},
		{"socketpair dgram", strict, sys("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM, 0, ptr), eperm},
		{"socketpair inet", strict, sys("socketpair", unix.AF_INET, unix.SOCK_STREAM, 0, ptr), eperm},
		{"sendto plain", strict, sys("sendto", 3, ptr, 10, unix.MSG_NOSIGNAL, 0, 0), Allow},
		{"sendto fast open", network, sys("sendto", 3, ptr, 10, tfo, ptr, 16), eacces},
		{"sendto fast open, high bits clear test", strict, sys("sendto", 3, ptr, 10, hi|tfo|unix.MSG_DONTWAIT, ptr, 16), eacces},
		{"sendmsg plain", strict, sys("sendmsg", 3, ptr, unix.MSG_NOSIGNAL), Allow},
		{"sendmsg fast open", strict, sys("sendmsg", 3, ptr, tfo), eacces},
		{"sendmmsg fast open", strict, sys("sendmmsg", 3, ptr, 2, tfo), eacces},
		{"sendmmsg plain", strict, sys("sendmmsg", 3, ptr, 2, 0), Allow},
		{"setsockopt nodelay", strict, sys("setsockopt", 3, unix.IPPROTO_TCP, unix.TCP_NODELAY, ptr, 4), Allow},
		{"setsockopt reuseaddr", strict, sys("setsockopt", 3, unix.SOL_SOCKET, unix.SO_REUSEADDR, ptr, 4), Allow},
		{"setsockopt fastopen connect", network, sys("setsockopt", 3, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, ptr, 4), eacces},
		{"setsockopt fastopen", network, sys("setsockopt", 3, unix.IPPROTO_TCP, unix.TCP_FASTOPEN, ptr, 4), eacces},
		{"listen without bind grant", strict, sys("listen", 3, 128), eacces},
		{"listen with bind grant", network, sys("listen", 3, 128), Allow},
		{"connect (Landlock decides)", strict, sys("connect", 3, ptr, 16), Allow},
		{"io_uring blocked", strict, sys("io_uring_setup", 4, ptr), eperm},
		{"io_uring_enter blocked", strict, sys("io_uring_enter", 4, 1, 0, 0, 0, 0), eperm},
		{"io_uring_register blocked", strict, sys("io_uring_register", 4, 0, 0, 0), eperm},
		{"io_uring granted", uring, sys("io_uring_setup", 4, ptr), Allow},

		// set-id bits
		{"openat setuid", write, sys("openat", cwd, ptr, unix.O_CREAT|unix.O_WRONLY, 0o4755), eperm},
		{"openat setgid", write, sys("openat", cwd, ptr, unix.O_CREAT|unix.O_WRONLY, 0o2755), eperm},
		{"openat O_TMPFILE setuid", write, sys("openat", 3, ptr, unix.O_TMPFILE|unix.O_WRONLY, 0o4700), eperm},
		{"open setuid", write, sys("open", ptr, unix.O_CREAT|unix.O_WRONLY, 0o4755), eperm},
		{"creat setuid", write, sys("creat", ptr, 0o4755), eperm},
		{"mknod regular setuid", write, sys("mknod", ptr, unix.S_IFREG|0o4755, 0), eperm},
		{"mknodat setuid", write, sys("mknodat", cwd, ptr, unix.S_IFREG|0o4755, 0), eperm},
		{"mknodat fifo", write, sys("mknodat", cwd, ptr, unix.S_IFIFO|0o600, 0), Allow},
		{"fchmod setuid (owned)", writeOwn, sys("fchmod", 3, 0o4755), eperm},
		{"fchmod setgid (owned)", writeOwn, sys("fchmod", 3, 0o2755), eperm},
		{"fchmod plain (owned)", writeOwn, sys("fchmod", 3, 0o644), Allow},
		{"fchmod group write (owned)", writeOwn, sys("fchmod", 3, 0o775), Allow},
		{"fchmod others write (owned)", writeOwn, sys("fchmod", 3, 0o777), eperm},
		{"fchmod sticky others write (owned)", writeOwn, sys("fchmod", 3, 0o1777), eperm},
		{"fchmod others write only, high bits (owned)", writeOwn, sys("fchmod", 3, hi|0o002), eperm},
		{"umask 0", strict, sys("umask", 0), retZero},
		{"umask 0o020 (others may write)", writeOwn, sys("umask", 0o020), retZero},
		{"umask 0o775 with high bits", strict, sys("umask", hi|0o775), retZero},
		{"umask 0o022", strict, sys("umask", 0o022), Allow},
		{"umask 0o002", writeOwn, sys("umask", 0o002), Allow},
		{"umask 0o077", strict, sys("umask", 0o077), Allow},

		// metadata
		{"chmod path", writeOwn, sys("chmod", ptr, 0o644), eperm},
		{"fchmodat path", writeOwn, sys("fchmodat", cwd, ptr, 0o644), eperm},
		{"fchmodat2 empty path", writeOwn, sys("fchmodat2", 3, ptr, 0o644, unix.AT_EMPTY_PATH), eperm},
		{"chown", writeOwn, sys("chown", ptr, 0, 0), eperm},
		{"lchown", writeOwn, sys("lchown", ptr, 0, 0), eperm},
		{"fchown", writeOwn, sys("fchown", 3, 0, 0), eperm},
		{"fchownat", writeOwn, sys("fchownat", 3, ptr, 0, 0, 0), eperm},
		{"fchmod read scope", readOwn, sys("fchmod", 3, 0o644), eperm},
		{"fchmod write scope, host uid", write, sys("fchmod", 3, 0o644), eperm},
		{"futimens (owned)", writeOwn, sys("utimensat", 3, 0, ptr, 0), Allow},
		{"futimens, pointer high half", writeOwn, sys("utimensat", 3, hi, ptr, 0), eperm},
		{"utimensat path (owned)", writeOwn, sys("utimensat", cwd, ptr, ptr, 0), eperm},
		{"futimens read scope", readOwn, sys("utimensat", 3, 0, ptr, 0), eperm},
		{"futimens host uid", write, sys("utimensat", 3, 0, ptr, 0), eperm},
		{"utimes", writeOwn, sys("utimes", ptr, ptr), eperm},
		{"utime", writeOwn, sys("utime", ptr, ptr), eperm},
		{"futimesat", writeOwn, sys("futimesat", 3, 0, ptr), eperm},
		{"setxattr", writeOwn, sys("setxattr", ptr, ptr, ptr, 4, 0), eperm},
		{"lsetxattr", writeOwn, sys("lsetxattr", ptr, ptr, ptr, 4, 0), eperm},
		{"fsetxattr (ACL)", writeOwn, sys("fsetxattr", 3, ptr, ptr, 44, 0), eperm},
		{"removexattr", writeOwn, sys("removexattr", ptr, ptr), eperm},
		{"fremovexattr", writeOwn, sys("fremovexattr", 3, ptr), eperm},
		{"setxattrat", writeOwn, sys("setxattrat", 3, ptr, 0, ptr, ptr, 32), eperm},
		{"removexattrat", writeOwn, sys("removexattrat", 3, ptr, 0, ptr), eperm},
		{"file_setattr", writeOwn, sys("file_setattr", 3, ptr, ptr, 24, 0), eperm},
		{"getxattr by path", strict, sys("getxattr", ptr, ptr, ptr, 64), enotsup},
		{"listxattr by path", strict, sys("listxattr", ptr, ptr, 64), enotsup},
		{"getxattrat", strict, sys("getxattrat", 3, ptr, 0, ptr, ptr, 32), enotsup},
		{"ioctl FS_IOC_SETFLAGS", writeOwn, sys("ioctl", 3, fsIocSetflags, ptr), eperm},
		{"ioctl FS_IOC32_SETFLAGS", writeOwn, sys("ioctl", 3, fsIoc32Setflags, ptr), eperm},
		{"ioctl FS_IOC_FSSETXATTR", writeOwn, sys("ioctl", 3, fsIocFssetxattr, ptr), eperm},
		{"ioctl FS_IOC_ENABLE_VERITY", writeOwn, sys("ioctl", 3, fsIocEnableVerity, ptr), eperm},
		{"ioctl TIOCSTI", strict, sys("ioctl", 0, unix.TIOCSTI, ptr), eperm},
		{"ioctl TIOCSTI, high bits", strict, sys("ioctl", 0, hi|unix.TIOCSTI, ptr), eperm},
		{"ioctl PIDFD_GET_INFO without a pid namespace", strict, sys("ioctl", 3, 0xc040ff0b, ptr), Errno(unix.ENOTTY)},
		{"ioctl PIDFD_GET_INFO, a larger struct", strict, sys("ioctl", 3, 0xc050ff0b, ptr), Errno(unix.ENOTTY)},
		{"ioctl PIDFD_GET_INFO in the run's pid namespace", pidNS, sys("ioctl", 3, 0xc040ff0b, ptr), Allow},
		{"ioctl PIDFD_GET_PID_NAMESPACE (not on the allowlist)", strict, sys("ioctl", 3, 0xff05, 0), Errno(unix.ENOTTY)},
		{"ioctl FIONREAD", strict, sys("ioctl", 0, 0x541b /* FIONREAD */, ptr), Allow},
		// The allowlist: what the runtimes use passes (measured: TCGETS,
		// TIOCGWINSZ, FIONBIO, FIOCLEX), everything else is ENOTTY,
		// including the ownership-only ioctls that were a Known limit.
		{"ioctl TCGETS (isatty)", pidNS, sys("ioctl", 1, unix.TCGETS, ptr), Allow},
		{"ioctl TIOCGWINSZ", strict, sys("ioctl", 1, unix.TIOCGWINSZ, ptr), Allow},
		{"ioctl FIOCLEX (CPython's set_inheritable)", strict, sys("ioctl", 3, 0x5451, 0), Allow},
		{"ioctl FIONCLEX", strict, sys("ioctl", 3, 0x5450, 0), Allow},
		{"ioctl FS_IOC_GETFLAGS (lsattr)", strict, sys("ioctl", 3, unix.FS_IOC_GETFLAGS, ptr), Allow},
		{"ioctl SIOCGIFINDEX", strict, sys("ioctl", 3, unix.SIOCGIFINDEX, ptr), Allow},
		{"ioctl EXT4_IOC_MIGRATE (owner only, was a Known limit)", writeOwn, sys("ioctl", 3, 0x6609, 0), Errno(unix.ENOTTY)},
		{"ioctl FAT_IOCTL_SET_ATTRIBUTES (owner only, was a Known limit)", writeOwn, sys("ioctl", 3, 0x40047211, ptr), Errno(unix.ENOTTY)},
		{"ioctl EXT4_IOC_SWAP_BOOT", writeOwn, sys("ioctl", 3, 0x6611, 0), Errno(unix.ENOTTY)},
		{"ioctl EXT4_IOC_SHUTDOWN", strict, sys("ioctl", 3, 0x8004587d, ptr), Errno(unix.ENOTTY)},
		{"ioctl FIFREEZE", strict, sys("ioctl", 3, 0xc0045877, ptr), Errno(unix.ENOTTY)},
		{"ioctl FITRIM", strict, sys("ioctl", 3, 0xc0185879, ptr), Errno(unix.ENOTTY)},
		{"ioctl FS_IOC_SETFSLABEL", strict, sys("ioctl", 3, 0x41009432, ptr), Errno(unix.ENOTTY)},
		{"ioctl FIBMAP", strict, sys("ioctl", 3, 1, ptr), Errno(unix.ENOTTY)},
		{"ioctl TCSETS", strict, sys("ioctl", 0, unix.TCSETS, ptr), Errno(unix.ENOTTY)},
		{"ioctl TIOCSCTTY", strict, sys("ioctl", 0, unix.TIOCSCTTY, 0), Errno(unix.ENOTTY)},
		{"ioctl TIOCCONS", strict, sys("ioctl", 0, unix.TIOCCONS, 0), Errno(unix.ENOTTY)},
		{"ioctl TIOCSWINSZ", strict, sys("ioctl", 0, unix.TIOCSWINSZ, ptr), Errno(unix.ENOTTY)},
		{"ioctl FIOASYNC (SIGIO)", strict, sys("ioctl", 3, 0x5452, ptr), Errno(unix.ENOTTY)},
		{"ioctl SIOCSIFFLAGS", strict, sys("ioctl", 3, unix.SIOCSIFFLAGS, ptr), Errno(unix.ENOTTY)},
		{"ioctl SIOCADDRT", strict, sys("ioctl", 3, unix.SIOCADDRT, ptr), Errno(unix.ENOTTY)},
		{"ioctl RNDADDENTROPY", strict, sys("ioctl", 3, 0x40085203, ptr), Errno(unix.ENOTTY)},
		{"ioctl LOOP_SET_FD", strict, sys("ioctl", 3, 0x4c00, 4), Errno(unix.ENOTTY)},
		{"ioctl SECCOMP_IOCTL_NOTIF_RECV", strict, sys("ioctl", 3, 0xc0502100, ptr), Errno(unix.ENOTTY)},
		{"ioctl NS_GET_PARENT", strict, sys("ioctl", 3, 0xb702, 0), Errno(unix.ENOTTY)},
		{"ioctl TCGETS with junk high bits (the kernel reads 32)", strict, sys("ioctl", 1, hi|unix.TCGETS, ptr), Allow},
		{"landlock_restrict_self, records kept", strict, sys("landlock_restrict_self", 3, 0), Allow},
		{"landlock_restrict_self LOG_NEW_EXEC_ON", strict, sys("landlock_restrict_self", 3, 2), Allow},
		{"landlock_restrict_self LOG_SAME_EXEC_OFF", strict, sys("landlock_restrict_self", 3, 1), eperm},
		{"landlock_restrict_self LOG_SUBDOMAINS_OFF, no ruleset", pidNS, sys("landlock_restrict_self", ^uint64(0), 4), eperm},
		{"landlock_restrict_self LOG_SAME_EXEC_OFF, high bits", writeOwn, sys("landlock_restrict_self", 3, hi|1), eperm},
		{"ioctl BTRFS_IOC_SUBVOL_CREATE", strict, sys("ioctl", 3, 0x5000940e, ptr), Errno(unix.ENOTTY)},
		{"ioctl BTRFS_IOC_SUBVOL_CREATE_V2", pidNS, sys("ioctl", 3, 0x50009418, ptr), Errno(unix.ENOTTY)},
		{"ioctl BTRFS_IOC_SNAP_CREATE_V2", writeOwn, sys("ioctl", 3, 0x50009417, ptr), Errno(unix.ENOTTY)},
		{"ioctl BTRFS_IOC_SNAP_DESTROY_V2", strict, sys("ioctl", 3, 0x5000943f, ptr), Errno(unix.ENOTTY)},
		{"ioctl BTRFS_IOC_SUBVOL_SETFLAGS", strict, sys("ioctl", 3, 0x4008941a, ptr), Errno(unix.ENOTTY)},
		{"ioctl BTRFS_IOC_SUBVOL_CREATE, high bits", strict, sys("ioctl", 3, hi|0x5000940e, ptr), Errno(unix.ENOTTY)},
		{"ioctl FICLONE (cp --reflink, libuv copyfile)", strict, sys("ioctl", 4, 0x40049409, 3), Allow},
		{"ioctl FICLONERANGE", strict, sys("ioctl", 4, 0x4020940d, ptr), Allow},
		{"ioctl FIDEDUPERANGE", strict, sys("ioctl", 4, unix.FIDEDUPERANGE, ptr), Allow},
		{"ioctl FS_IOC_SET_ENCRYPTION_POLICY", writeOwn, sys("ioctl", 3, 0x800c6613, ptr), enotsup},
		{"ioctl FS_IOC_SET_ENCRYPTION_POLICY, a v2 policy's size", strict, sys("ioctl", 3, 0x80186613, ptr), enotsup},
		{"ioctl FS_IOC_ADD_ENCRYPTION_KEY", strict, sys("ioctl", 3, 0xc0506617, ptr), enotsup},
		{"ioctl FS_IOC_REMOVE_ENCRYPTION_KEY", strict, sys("ioctl", 3, 0xc0406618, ptr), enotsup},
		{"ioctl FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS", strict, sys("ioctl", 3, 0xc0406619, ptr), enotsup},
		{"ioctl FS_IOC_GET_ENCRYPTION_POLICY (not on the allowlist)", strict, sys("ioctl", 3, 0x400c6615, ptr), Errno(unix.ENOTTY)},
		{"bind a netlink socket (getifaddrs)", strict, sys("bind", 3, ptr, 12), Allow},
		{"bind a netlink socket, junk high bits", strict, sys("bind", 3, ptr, hi|12), Allow},
		{"bind an abstract unix name without a grant", strict, sys("bind", 3, ptr, 2+1+18), eacces},
		{"bind TCP without a grant", strict, sys("bind", 3, ptr, 16), eacces},
		{"bind TCP6 without a grant", layered, sys("bind", 3, ptr, 28), eacces},
		{"bind with a network grant", network, sys("bind", 3, ptr, 16), Allow},
		{"bind with a connect grant (UDP)", Options{AllowUDP: true}, sys("bind", 3, ptr, 21), Allow},
		{"renameat2 plain", write, sys("renameat2", cwd, ptr, cwd, ptr, 0), Allow},
		{"renameat2 RENAME_NOREPLACE", write, sys("renameat2", cwd, ptr, cwd, ptr, unix.RENAME_NOREPLACE), Allow},
		{"renameat2 RENAME_EXCHANGE (Landlock checks both)", write, sys("renameat2", cwd, ptr, cwd, ptr, unix.RENAME_EXCHANGE), Allow},
		{"renameat2 RENAME_WHITEOUT", write, sys("renameat2", cwd, ptr, cwd, ptr, unix.RENAME_WHITEOUT), Errno(unix.EINVAL)},
		{"renameat2 RENAME_WHITEOUT with the mount namespace", layered, sys("renameat2", cwd, ptr, cwd, ptr, unix.RENAME_WHITEOUT|unix.RENAME_NOREPLACE), Errno(unix.EINVAL)},
		{"ioctl TIOCLINUX", strict, sys("ioctl", 0, unix.TIOCLINUX, ptr), eperm},
		{"fcntl F_SETLEASE", strict, sys("fcntl", 3, unix.F_SETLEASE, unix.F_RDLCK), eperm},

		// metadata confined by the mounts of an own mount namespace
		{"chmod path in the minimal root", layered, sys("chmod", ptr, 0o644), Allow},
		{"fchmodat path in the minimal root", layered, sys("fchmodat", cwd, ptr, 0o600), Allow},
		{"fchmodat2 in the minimal root", layered, sys("fchmodat2", 3, ptr, 0o600, unix.AT_SYMLINK_NOFOLLOW), Allow},
		{"fchmod in the minimal root, read scope", layered, sys("fchmod", 3, 0o600), Allow},
		{"chmod setuid in the minimal root", layered, sys("chmod", ptr, 0o4755), eperm},
		{"fchmodat setgid in the minimal root", layered, sys("fchmodat", cwd, ptr, 0o2755), eperm},
		{"fchmodat2 setuid in the minimal root", layered, sys("fchmodat2", 3, ptr, 0o4755, 0), eperm},
		{"fchmod setuid in the minimal root", layered, sys("fchmod", 3, 0o4755), eperm},
		{"chmod 0777 in the minimal root", layered, sys("chmod", ptr, 0o777), eperm},
		{"chmod 1777 in the minimal root", layered, sys("chmod", ptr, 0o1777), eperm},
		{"chmod 0775 in the minimal root", layered, sys("chmod", ptr, 0o775), Allow},
		{"fchmodat 0666 in the minimal root", layered, sys("fchmodat", cwd, ptr, 0o666), eperm},
		{"fchmodat2 0002 in the minimal root", layered, sys("fchmodat2", 3, ptr, 0o002, unix.AT_EMPTY_PATH), eperm},
		{"fchmod 0777 in the minimal root", layered, sys("fchmod", 3, 0o777), eperm},
		{"utimensat path in the minimal root", layered, sys("utimensat", cwd, ptr, ptr, 0), Allow},
		{"utimes in the minimal root", layered, sys("utimes", ptr, ptr), Allow},
		{"getxattr in the minimal root", layered, sys("getxattr", ptr, ptr, ptr, 64), Allow},
		{"setxattr in the minimal root", layered, sys("setxattr", ptr, ptr, ptr, 4, 0), eperm},
		{"ACL in the minimal root", layered, sys("fsetxattr", 3, ptr, ptr, 44, 0), eperm},
		{"fchown in the minimal root", layered, sys("fchown", 3, 0, 0), eperm},
		{"chown in the minimal root", layered, sys("chown", ptr, 0, 0), eperm},
		{"file_setattr in the minimal root", layered, sys("file_setattr", 3, ptr, ptr, 24, 0), eperm},

		// code outside the runtime
		{"memfd plain", strict, sys("memfd_create", ptr, unix.MFD_CLOEXEC), eperm},
		{"memfd exec", strict, sys("memfd_create", ptr, unix.MFD_CLOEXEC|unix.MFD_EXEC), eperm},
		{"memfd exec and noexec", strict, sys("memfd_create", ptr, unix.MFD_EXEC|unix.MFD_NOEXEC_SEAL), eperm},
		{"memfd noexec seal", strict, sys("memfd_create", ptr, noexecMFD), Allow},
		{"memfd noexec seal on huge pages", layered, sys("memfd_create", ptr, noexecMFD|unix.MFD_HUGETLB), Errno(unix.ENOMEM)},
		{"shmget huge pages in an own ipc namespace", layered, sys("shmget", 0, 2<<20, unix.IPC_CREAT|0o600|0o4000), Errno(unix.ENOMEM)},
		{"shmget in an own ipc namespace", layered, sys("shmget", 0, 4096, unix.IPC_CREAT|0o600), Allow},
		{"shmget without an ipc namespace", strict, sys("shmget", 0, 4096, unix.IPC_CREAT|0o600), eperm},
		{"mmap huge pages", strict, sys("mmap", 0, 2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB, ^uint64(0), 0), Errno(unix.ENOMEM)},
		{"mmap huge pages of 1 GiB", layered, sys("mmap", 0, 1<<30, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|30<<unix.MAP_HUGE_SHIFT, ^uint64(0), 0), Errno(unix.ENOMEM)},
		{"mmap junk above the flags", strict, sys("mmap", 0, 4096, unix.PROT_READ, hi|unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0), Allow},
		{"execveat empty path", strict, sys("execveat", 3, ptr, ptr, ptr, unix.AT_EMPTY_PATH), eacces},
		{"execveat empty path + nofollow", strict, sys("execveat", 3, ptr, ptr, ptr, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW), eacces},
		{"personality read implies exec", strict, sys("personality", 0x0400000), eperm},
		{"personality no aslr", strict, sys("personality", 0x0040000), eperm},

		// other processes
		{"prlimit64 other", strict, sys("prlimit64", 1, unix.RLIMIT_NOFILE, ptr, 0), eperm},
		{"setpriority self", strict, sys("setpriority", prioProcess, 0, 10), Allow},
		{"setpriority own group", strict, sys("setpriority", prioPgrp, 0, 10), Allow},
		{"setpriority other", strict, sys("setpriority", prioProcess, 1, 19), eperm},
		{"setpriority user", strict, sys("setpriority", 2, 0, 19), eperm},
		{"sched_setscheduler other", strict, sys("sched_setscheduler", 1, 3, ptr), eperm},
		{"sched_setscheduler self", strict, sys("sched_setscheduler", 0, 3, ptr), Allow},
		{"sched_setparam other", strict, sys("sched_setparam", 1, ptr), eperm},
		{"sched_setaffinity other", strict, sys("sched_setaffinity", 1, 8, ptr), eperm},
		{"sched_setaffinity self", strict, sys("sched_setaffinity", 0, 8, ptr), Allow},
		{"sched_setattr other", strict, sys("sched_setattr", 1, ptr, 0), eperm},
		{"ioprio_set self", strict, sys("ioprio_set", ioprioWhoProcess, 0, 0), Allow},
		{"ioprio_set other", strict, sys("ioprio_set", ioprioWhoProcess, 1, 0), eperm},
		{"ioprio_set user", strict, sys("ioprio_set", 3, 0, 0), eperm},
		{"process_vm_readv", strict, sys("process_vm_readv", 1, ptr, 1, ptr, 1, 0), eperm},
		{"process_vm_writev", strict, sys("process_vm_writev", 1, ptr, 1, ptr, 1, 0), eperm},
		{"ptrace", strict, sys("ptrace", unix.PTRACE_ATTACH, 1), eperm},
		{"kcmp", strict, sys("kcmp", 1, 2, 0), eperm},
		{"pidfd_getfd", strict, sys("pidfd_getfd", 3, 3, 0), eperm},
		{"process_madvise", strict, sys("process_madvise", 3, ptr, 1, 0, 0), eperm},
		{"migrate_pages", strict, sys("migrate_pages", 1, 8, ptr, ptr), eperm},
		{"move_pages", strict, sys("move_pages", 1, 1, ptr, ptr, ptr, 0), eperm},
		{"msgget without ipc ns", strict, sys("msgget", 0x1234, 0), eperm},
		{"shmget without ipc ns", strict, sys("shmget", 0x1234, 4096, 0), eperm},
		{"shmat without ipc ns", strict, sys("shmat", 1, 0, 0), eperm},
		{"semget without ipc ns", strict, sys("semget", 0x1234, 1, 0), eperm},
		{"mq_open without ipc ns", strict, sys("mq_open", ptr, 0, 0, 0), eperm},
		{"msgget in own ipc ns", layered, sys("msgget", 0x1234, 0), Allow},
		{"mq_open in own ipc ns", layered, sys("mq_open", ptr, 0, 0, 0), Allow},
		{"inotify watch without mount ns", strict, sys("inotify_add_watch", 3, ptr, unix.IN_CREATE), eperm},
		{"inotify watch in own mount ns", layered, sys("inotify_add_watch", 3, ptr, unix.IN_CREATE), Allow},
		{"io_setup", strict, sys("io_setup", 64, ptr), enosys},
		{"io_setup in every layer", Options{IPCNamespace: true, MountNamespace: true, DedicatedUID: true, OwnUserCounters: true, WriteScope: true}, sys("io_setup", 1, ptr), enosys},
		{"io_submit", layered, sys("io_submit", 1, 1, ptr), enosys},
		{"io_getevents", layered, sys("io_getevents", 1, 1, 1, ptr, 0), enosys},
		{"inotify_init1 without own per-user counters", strict, sys("inotify_init1", unix.IN_CLOEXEC), eperm},
		{"inotify_init without own per-user counters", layered, sys("inotify_init"), eperm},
		{"inotify_init1 with own per-user counters", Options{OwnUserCounters: true}, sys("inotify_init1", unix.IN_CLOEXEC), Allow},
		{"fanotify_mark", layered, sys("fanotify_mark", 3, 0, 0, 0, ptr), eperm},
	}
	for _, a := range Arches {
		for _, tt := range tests {
			t.Run(a.Name+"/"+tt.name, func(t *testing.T) {
				f := build(t, a, tt.o)
				d, ok := tt.c.data(t, a)
				if tt.c.name == "nr-460-unused" {
					d, ok = Data{Nr: unusedNr(a), Arch: a.AuditArch}, true
				}
				if !ok {
					t.Skipf("%s has no %s", a.Name, tt.c.name)
				}
				if got := decide(t, f, d); got != tt.want {
					t.Errorf("%s%v: got %s, want %s", tt.c.name, tt.c.args, actionName(got), actionName(tt.want))
				}
			})
		}
	}
}

func maxNr(a *Arch) uint32 { return a.newest() }

// unusedNr is a syscall number inside the ABI's range that has no name.
func unusedNr(a *Arch) uint32 {
	used := map[uint32]bool{}
	for _, sc := range a.Syscalls {
		used[sc.Nr] = true
	}
	for nr := uint32(1); ; nr++ {
		if !used[nr] {
			return nr
		}
	}
}

func actionName(a Action) string {
	if a == Allow {
		return "ALLOW"
	}
	if uint32(a)&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO {
		return unix.ErrnoName(unix.Errno(uint32(a) & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("action %#x", uint32(a))
}

// TestForeignABIs: i386/AArch32 and x32 syscalls are denied, whatever the
// number and options.
func TestForeignABIs(t *testing.T) {
	loose := Options{WriteScope: true, AllowIOUring: true, AllowUDP: true, AllowListen: true, IPCNamespace: true, MountNamespace: true, DedicatedUID: true}
	foreign := []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, unix.AUDIT_ARCH_X86_64 ^ 1, 0}
	for _, a := range Arches {
		f := build(t, a, loose)
		for _, arch := range append(foreign, otherArch(a)) {
			for _, nr := range []uint32{0, 1, 3, 11, 59, 120, 221, 0x40000000 | 1} {
				if got := decide(t, f, Data{Nr: nr, Arch: arch}); got != Foreign {
					t.Errorf("%s filter, arch %#x nr %d: %s", a.Name, arch, nr, actionName(got))
				}
			}
		}
		if a.ForeignNr != 0 {
			for _, name := range []string{"read", "openat", "execve", "io_uring_setup"} {
				nr, _ := a.Nr(name)
				if got := decide(t, f, Data{Nr: a.ForeignNr | nr, Arch: a.AuditArch}); got != Foreign {
					t.Errorf("%s: x32 %s: %s", a.Name, name, actionName(got))
				}
			}
		}
	}
}

func otherArch(a *Arch) uint32 {
	for _, b := range Arches {
		if b != a {
			return b.AuditArch
		}
	}
	return 0
}

// TestEveryNameExists catches a misspelt syscall in the policy: each name
// must exist on at least one supported ABI, and the core ones on all.
func TestEveryNameExists(t *testing.T) {
	names := append([]string(nil), allowed...)
	for _, o := range []Options{{}, {WriteScope: true, DedicatedUID: true}} {
		for _, g := range rules(o) {
			names = append(names, g.names...)
		}
	}
	for _, n := range names {
		found := false
		for _, a := range Arches {
			if _, ok := a.Nr(n); ok {
				found = true
			}
		}
		if !found {
			t.Errorf("%s is no syscall of any supported ABI", n)
		}
	}
	for _, n := range []string{"openat", "clone", "clone3", "unshare", "socket", "sendto", "sendmsg", "memfd_create", "execveat", "fchmodat", "fchmodat2", "utimensat", "setxattr", "prlimit64", "io_uring_setup", "mknodat"} {
		for _, a := range Arches {
			if _, ok := a.Nr(n); !ok {
				t.Errorf("%s lacks %s", a.Name, n)
			}
		}
	}
}

// TestDefaultDenies: every syscall number of each ABI that neither the
// allowlist nor a rule names gets the default errno; numbers past the
// table get ENOSYS.
func TestDefaultDenies(t *testing.T) {
	for _, a := range Arches {
		f := build(t, a, Options{})
		named := map[string]bool{}
		for _, n := range allowed {
			named[n] = true
		}
		for _, g := range rules(Options{}) {
			for _, n := range g.names {
				named[n] = true
			}
		}
		for _, sc := range a.Syscalls {
			if named[sc.Name] {
				continue
			}
			if got := decide(t, f, Data{Nr: sc.Nr, Arch: a.AuditArch}); got != Default {
				t.Errorf("%s %s (%d): %s, want the default", a.Name, sc.Name, sc.Nr, actionName(got))
			}
		}
		for _, nr := range []uint32{maxNr(a) + 1, 1000, 0x3fffffff, 0x7fffffff, 0xffffffff} {
			want := Unknown
			if a.ForeignNr != 0 && nr >= a.ForeignNr {
				want = Foreign
			}
			if got := decide(t, f, Data{Nr: nr, Arch: a.AuditArch}); got != want {
				t.Errorf("%s nr %#x: %s", a.Name, nr, actionName(got))
			}
		}
	}
}

// TestNativeTableMatchesXSys: the generated table of this build's ABI says
// what golang.org/x/sys says (regenerate with make generate after an
// x/sys upgrade).
func TestNativeTableMatchesXSys(t *testing.T) {
	for name, nr := range map[string]uint32{
		"read": unix.SYS_READ, "openat": unix.SYS_OPENAT, "clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3,
		"unshare": unix.SYS_UNSHARE, "socket": unix.SYS_SOCKET, "sendmmsg": unix.SYS_SENDMMSG,
		"memfd_create": unix.SYS_MEMFD_CREATE, "execveat": unix.SYS_EXECVEAT, "fchmodat2": unix.SYS_FCHMODAT2,
		"setxattrat": unix.SYS_SETXATTRAT, "file_setattr": unix.SYS_FILE_SETATTR, "io_uring_setup": unix.SYS_IO_URING_SETUP,
		"prlimit64": unix.SYS_PRLIMIT64, "mknodat": unix.SYS_MKNODAT,
	} {
		if got, ok := Native.Nr(name); !ok || got != nr {
			t.Errorf("%s: table %d (%v), x/sys %d", name, got, ok, nr)
		}
	}
}

func TestSummary(t *testing.T) {
	f := build(t, X86_64, Options{})
	s := f.Summary()
	if s.Arch != "x86_64" || s.Default != "EPERM" || s.Allowed < 200 || s.Checked < 20 || s.Instructions != len(f.Program) {
		t.Fatalf("summary %+v", s)
	}
	for _, c := range []string{CheckNamespaces, CheckFastOpen, CheckSetID, CheckMetadata, CheckMemfd, CheckIOUring, CheckOtherProcs, CheckIPC, CheckWatches} {
		if !contains(s.Checks, c) {
			t.Errorf("check %s missing from %v", c, s.Checks)
		}
	}
	if len(s.Relaxed) != 0 {
		t.Errorf("strict filter relaxed: %v", s.Relaxed)
	}
	loose := build(t, X86_64, Options{AllowIOUring: true, IPCNamespace: true, MountNamespace: true, OwnUserCounters: true}).Summary()
	for _, c := range []string{CheckIOUring, CheckIPC, CheckWatches} {
		if contains(loose.Checks, c) {
			t.Errorf("check %s reported although lifted: %v", c, loose.Checks)
		}
	}
	if len(loose.Relaxed) != 4 { // io_uring, ipc, the mount namespace's watches and metadata, inotify instances
		t.Errorf("relaxed %v", loose.Relaxed)
	}
}

func TestBuildWithoutTable(t *testing.T) {
	if _, err := Build(nil, Options{}); err == nil {
		t.Fatal("built a filter for an unknown architecture")
	}
}

// TestAssemblerTrampolines: jumps further than 255 instructions get `ja`
// trampolines, and the program still decides as written.
func TestAssemblerTrampolines(t *testing.T) {
	e7 := Errno(7)
	progs := []struct {
		name  string
		build func(a *asm, far, far2 label)
		want  map[uint32]Action
	}{
		{"far true, fall through false", func(a *asm, far, _ label) { a.jeq(1, far, next); a.ret(uint32(e7)) }, map[uint32]Action{1: Allow, 2: e7}},
		{"fall through true, far false", func(a *asm, far, _ label) { a.jeq(2, next, far); a.ret(uint32(e7)) }, map[uint32]Action{2: e7, 3: Allow}},
		{"both far", func(a *asm, far, far2 label) { a.jeq(3, far, far2) }, map[uint32]Action{3: Allow, 4: eacces}},
		{"chain of far jumps", func(a *asm, far, far2 label) { a.jge(10, far2, next); a.jeq(5, far, next); a.jset(1, far2, next) }, map[uint32]Action{5: Allow, 11: eacces, 3: eacces, 2: Errno(1)}},
	}
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			var a asm
			far, far2 := a.newLabel(), a.newLabel()
			a.ld(offNr)
			p.build(&a, far, far2)
			for i := 0; i < 300; i++ {
				a.ret(uint32(Errno(unix.Errno(i%100 + 1))))
			}
			a.bind(far)
			a.ret(uint32(Allow))
			a.bind(far2)
			a.ret(uint32(eacces))
			prog, err := a.assemble()
			if err != nil {
				t.Fatal(err)
			}
			for nr, want := range p.want {
				got, err := Eval(prog, Data{Nr: nr})
				if err != nil {
					t.Fatal(err)
				}
				if Action(got) != want {
					t.Errorf("nr %d: got %#x, want %#x", nr, got, want)
				}
				if ref := refEval(t, prog, Data{Nr: nr}); ref != want {
					t.Errorf("nr %d: x/net/bpf got %#x", nr, ref)
				}
			}
		})
	}
}

// TestBuiltProgramsNeedNoTrampolines: the layout keeps every conditional
// jump within reach, so the relaxation pass is a safety net only.
func TestBuiltProgramsNeedNoTrampolines(t *testing.T) {
	for _, a := range Arches {
		f := build(t, a, Options{WriteScope: true, AllowUDP: true})
		for i, in := range f.Program {
			if in.Code == opJa {
				if j := i + 1 + int(in.K); f.Program[j].Code == opJa {
					t.Errorf("%s: ja at %d lands on another ja (a trampoline)", a.Name, i)
				}
			}
		}
	}
}

func TestEvalRefusesBadPrograms(t *testing.T) {
	for name, prog := range map[string][]unix.SockFilter{
		"empty":             nil,
		"no return":         {{Code: opLdAbs, K: 0}},
		"load out of range": {{Code: opLdAbs, K: 64}, {Code: opRet}},
		"unaligned load":    {{Code: opLdAbs, K: 2}, {Code: opRet}},
		"jump past end":     {{Code: opJeq, Jt: 5, Jf: 5}, {Code: opRet}},
		"ja past end":       {{Code: opJa, K: 1 << 31}, {Code: opRet}},
		"unknown op":        {{Code: unix.BPF_LDX | unix.BPF_W | unix.BPF_IND}, {Code: opRet}},
	} {
		if _, err := Eval(prog, Data{}); !errors.Is(err, ErrBadProgram) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// FuzzFilter: for any seccomp_data and options, the evaluator never panics
// nor errs on a built filter, agrees with x/net/bpf, a foreign arch is
// always denied, and the invariants of each check hold.
func FuzzFilter(f *testing.F) {
	f.Add(uint32(0), uint32(unix.AUDIT_ARCH_X86_64), uint32(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint8(0), false)
	f.Add(uint32(56), uint32(unix.AUDIT_ARCH_X86_64), uint32(0), uint64(unix.CLONE_NEWUSER), uint64(0), uint64(0), uint64(0), uint64(0), uint8(0), false)
	f.Add(uint32(41), uint32(unix.AUDIT_ARCH_X86_64), uint32(0), uint64(unix.AF_INET), uint64(unix.SOCK_STREAM), uint64(unix.IPPROTO_MPTCP), uint64(0), uint64(0), uint8(0xff), true)
	f.Add(uint32(220), uint32(unix.AUDIT_ARCH_AARCH64), uint32(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint8(3), true)
	f.Add(uint32(3), uint32(unix.AUDIT_ARCH_I386), uint32(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint8(0xff), false)
	f.Fuzz(func(t *testing.T, nr, arch, ip32 uint32, a0, a1, a2, a3, a4 uint64, opts uint8, arm bool) {
		abi := X86_64
		if arm {
			abi = AArch64
		}
		o := Options{
			WriteScope: opts&1 != 0, AllowIOUring: opts&2 != 0, AllowUDP: opts&4 != 0, AllowListen: opts&8 != 0,
			IPCNamespace: opts&16 != 0, MountNamespace: opts&32 != 0, DedicatedUID: opts&64 != 0, PIDNamespace: opts&128 != 0,
		}
		flt := cachedBuild(t, abi, o)
		d := Data{Nr: nr, Arch: arch, IP: uint64(ip32), Args: [6]uint64{a0, a1, a2, a3, a4, a0 ^ a1}}
		got := decide(t, flt, d)
		if arch != abi.AuditArch || (abi.ForeignNr != 0 && nr >= abi.ForeignNr) {
			if got != Foreign {
				t.Fatalf("foreign syscall %+v: %s", d, actionName(got))
			}
			return
		}
		if got != Allow {
			return
		}
		name := nameOf(abi, nr)
		lo := func(x uint64) uint32 { return uint32(x) }
		switch name {
		case "":
			t.Fatalf("unnamed syscall %d allowed", nr)
		case "clone":
			if lo(a0)&cloneNS != 0 {
				t.Fatalf("clone %#x allowed", a0)
			}
		case "unshare":
			if lo(a0)&unshareNS != 0 {
				t.Fatalf("unshare %#x allowed", a0)
			}
		case "setns", "clone3", "openat2", "chown", "fchown", "lchown", "fchownat",
			"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
			"removexattrat", "file_setattr", "ptrace", "process_vm_readv", "process_vm_writev", "bpf":
			t.Fatalf("%s allowed", name)
		case "chmod", "fchmodat", "fchmodat2":
			mode := map[string]uint64{"chmod": a1, "fchmodat": a2, "fchmodat2": a2}[name]
			if !o.MountNamespace || lo(mode)&(setIDBits|othersWrite) != 0 {
				t.Fatalf("%s mode %#o allowed with %+v", name, mode, o)
			}
		case "utimes", "utime", "futimesat", "getxattr", "lgetxattr", "listxattr", "llistxattr", "getxattrat", "listxattrat":
			if !o.MountNamespace {
				t.Fatalf("%s allowed without a mount namespace", name)
			}
		case "socket":
			dom, typ, proto := lo(a0), lo(a1)&0xf, lo(a2)
			tcp := (dom == unix.AF_INET || dom == unix.AF_INET6) && typ == unix.SOCK_STREAM && (proto == 0 || proto == unix.IPPROTO_TCP)
			udp := o.AllowUDP && (dom == unix.AF_INET || dom == unix.AF_INET6) && typ == unix.SOCK_DGRAM && (proto == 0 || proto == unix.IPPROTO_UDP)
			nl := dom == unix.AF_NETLINK && proto == unix.NETLINK_ROUTE
			if !tcp && !udp && !nl {
				t.Fatalf("socket(%d, %d, %d) allowed", dom, typ, proto)
			}
		case "socketpair":
			if lo(a0) != unix.AF_UNIX || (lo(a1)&0xf != unix.SOCK_STREAM && lo(a1)&0xf != unix.SOCK_SEQPACKET) {
				t.Fatalf("socketpair(%d, %d) allowed", lo(a0), lo(a1))
			}
		case "sendto", "sendmmsg":
			if lo(a3)&unix.MSG_FASTOPEN != 0 {
				t.Fatalf("%s with MSG_FASTOPEN allowed", name)
			}
		case "sendmsg":
			if lo(a2)&unix.MSG_FASTOPEN != 0 {
				t.Fatal("sendmsg with MSG_FASTOPEN allowed")
			}
		case "listen":
			if !o.AllowListen {
				t.Fatal("listen allowed without a bind grant")
			}
		case "io_uring_setup", "io_uring_enter", "io_uring_register":
			if !o.AllowIOUring {
				t.Fatalf("%s allowed", name)
			}
		case "openat", "open", "creat", "mknod", "mknodat":
			mode := map[string]uint64{"openat": a3, "open": a2, "creat": a1, "mknod": a1, "mknodat": a2}[name]
			if lo(mode)&setIDBits != 0 {
				t.Fatalf("%s with mode %#o allowed", name, mode)
			}
		case "fchmod":
			if !(o.MountNamespace || o.WriteScope && o.DedicatedUID) || lo(a1)&(setIDBits|othersWrite) != 0 {
				t.Fatalf("fchmod %#o allowed with %+v", a1, o)
			}
		case "utimensat":
			if !o.MountNamespace && (!o.WriteScope || !o.DedicatedUID || a1 != 0) {
				t.Fatalf("utimensat path %#x allowed with %+v", a1, o)
			}
		case "mmap":
			if lo(a3)&unix.MAP_HUGETLB != 0 {
				t.Fatalf("mmap flags %#x allowed: the host's huge page pool", a3)
			}
		case "memfd_create":
			if lo(a1)&unix.MFD_NOEXEC_SEAL == 0 || lo(a1)&unix.MFD_EXEC != 0 || lo(a1)&unix.MFD_HUGETLB != 0 {
				t.Fatalf("memfd_create flags %#x allowed", a1)
			}
		case "execveat":
			if lo(a4)&unix.AT_EMPTY_PATH != 0 {
				t.Fatal("execveat AT_EMPTY_PATH allowed")
			}
		case "prlimit64", "sched_setscheduler", "sched_setparam", "sched_setaffinity", "sched_setattr":
			if lo(a0) != 0 {
				t.Fatalf("%s on pid %d allowed", name, lo(a0))
			}
		case "setpriority", "ioprio_set":
			own := map[string][2]uint32{"setpriority": {prioProcess, prioPgrp}, "ioprio_set": {ioprioWhoProcess, ioprioWhoPgrp}}[name]
			if lo(a1) != 0 || (lo(a0) != own[0] && lo(a0) != own[1]) {
				t.Fatalf("%s(%d, %d) allowed", name, lo(a0), lo(a1))
			}
		case "msgget", "shmget", "semget", "shmat", "mq_open":
			if !o.IPCNamespace {
				t.Fatalf("%s allowed without an ipc namespace", name)
			}
			if name == "shmget" && lo(a2)&0o4000 != 0 {
				t.Fatal("shmget SHM_HUGETLB allowed: the host's huge page pool")
			}
		case "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents":
			t.Fatalf("%s allowed: Linux AIO spends one budget of the whole host", name)
		case "inotify_init", "inotify_init1":
			if !o.OwnUserCounters {
				t.Fatalf("%s allowed without the run's own per-user counters", name)
			}
		case "inotify_add_watch":
			if !o.MountNamespace {
				t.Fatal("inotify_add_watch allowed without a mount namespace")
			}
		case "ioctl":
			if !slices.Contains(IoctlAllowed, lo(a1)) && !(o.PIDNamespace && lo(a1)&0xffff == pidfdGetInfo) {
				t.Fatalf("ioctl %#x allowed: not on the allowlist", lo(a1))
			}
			switch lo(a1) {
			case unix.TIOCSTI, unix.TIOCLINUX, fsIocSetflags, fsIoc32Setflags, fsIocFssetxattr, fsIocEnableVerity, fsIocSetversion, fsIoc32Setversion:
				t.Fatalf("ioctl %#x allowed", lo(a1))
			}
			if c := lo(a1); c&0xff00 == 0x9400 && c != ficlone && c != ficlonerange && c != unix.FIDEDUPERANGE {
				t.Fatalf("btrfs ioctl %#x allowed", c)
			}
			switch lo(a1) & 0xffff {
			case fsIocSetEncPol, fsIocAddEncKey, fsIocRmEncKey, fsIocRmEncKeyAU:
				t.Fatalf("fscrypt ioctl %#x allowed", lo(a1))
			}
			if lo(a1)&0xffff == pidfdGetInfo && !o.PIDNamespace {
				t.Fatalf("ioctl PIDFD_GET_INFO %#x allowed without a pid namespace", lo(a1))
			}
		case "bind":
			if !o.AllowUDP && !o.AllowListen && lo(a2) != 12 {
				t.Fatalf("bind addrlen %d allowed without a network grant", lo(a2))
			}
		case "landlock_restrict_self":
			if lo(a1)&landlockLogOff != 0 {
				t.Fatalf("landlock_restrict_self flags %#x allowed: a nested domain would hide its denials", lo(a1))
			}
		case "umask":
			if lo(a0)&othersWrite == 0 {
				t.Fatalf("umask %#o ran: the server could let others write what it creates", lo(a0))
			}
		case "renameat2":
			if lo(a4)&unix.RENAME_WHITEOUT != 0 {
				t.Fatal("renameat2 RENAME_WHITEOUT allowed")
			}
		}
	})
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*Filter{}
)

func cachedBuild(t testing.TB, a *Arch, o Options) *Filter {
	k := fmt.Sprintf("%s %+v", a.Name, o)
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if f, ok := cache[k]; ok {
		return f
	}
	f := build(t, a, o)
	cache[k] = f
	return f
}

func nameOf(a *Arch, nr uint32) string {
	for _, sc := range a.Syscalls {
		if sc.Nr == nr {
			return sc.Name
		}
	}
	return ""
}
