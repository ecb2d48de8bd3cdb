package seccomp

import "golang.org/x/sys/unix"

// Options say what the filter allows beyond its fixed allowlist: what the
// scope grants, and which other layers of the fence are in force. The zero
// value is the strictest filter.
type Options struct {
	// What the scope grants.

	// WriteScope: the scope's access mode is write. Metadata changes on
	// descriptors are then possible (see DedicatedUID), never by path.
	WriteScope bool `json:"write_scope,omitempty"`
	// AllowIOUring permits io_uring_setup/enter/register. io_uring
	// operations are not seen by this filter, so its argument checks
	// (socket families, TCP Fast Open, ...) do not hold for them.
	AllowIOUring bool `json:"allow_io_uring,omitempty"`
	// AllowUDP permits AF_INET/AF_INET6 datagram sockets (the scope grants
	// network ports). Landlock ABI 7 cannot restrict UDP.
	AllowUDP bool `json:"allow_udp,omitempty"`
	// AllowListen permits listen(): the scope grants bind_tcp ports.
	// Without it a TCP socket could listen without bind() (autobind on an
	// ephemeral port), which Landlock's bind check never sees.
	AllowListen bool `json:"allow_listen,omitempty"`

	// Which other layers are in force, as the namespace and identity layers
	// actually created them.

	// IPCNamespace: the run has its own ipc namespace, so SysV IPC and
	// POSIX message queues reach only the run's own objects.
	IPCNamespace bool `json:"ipc_namespace,omitempty"`
	// MountNamespace: the run sees only a minimal root (runtime and scope),
	// so inotify watches cannot learn about the rest of the host.
	MountNamespace bool `json:"mount_namespace,omitempty"`
	// DedicatedUID: the server runs as a uid that owns no host file (a
	// dedicated uid, or uid 0 of its own user namespace). Only then may a
	// write scope change modes and times through descriptors: Landlock does
	// not check fchmod or futimens, and a server running as the owner of
	// the runtime's files could otherwise change them through a read-only
	// descriptor.
	DedicatedUID bool `json:"dedicated_uid,omitempty"`
}

// Action is a seccomp filter's return value.
type Action uint32

// Allow lets the syscall run.
const Allow = Action(unix.SECCOMP_RET_ALLOW)

// Errno fails the syscall with e, without running it.
func Errno(e unix.Errno) Action {
	return Action(unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA)
}

// Errno values the filter returns.
var (
	eperm      = Errno(unix.EPERM)
	eacces     = Errno(unix.EACCES)
	enosys     = Errno(unix.ENOSYS)
	eopnotsupp = Errno(unix.EOPNOTSUPP)
)

// Default is what a syscall outside the allowlist gets.
var Default = eperm

// Unknown is what a syscall number past the newest one in the table gets.
var Unknown = enosys

// Foreign is what a syscall of another ABI (i386 int 0x80, x32, AArch32)
// gets.
var Foreign = enosys

// Cond is one comparison on a syscall argument:
// (32-bit half of Args[Arg] & Mask) == Value, or != Value when Not.
// Mask 0 means all 32 bits.
type Cond struct {
	Arg   int
	High  bool // the upper half of the 64-bit argument
	Mask  uint32
	Value uint32
	Not   bool
}

// Clause fires Then when every condition holds.
type Clause struct {
	When []Cond
	Then Action
}

// Rule decides one syscall: the first clause that fires wins, else Else.
type Rule struct {
	Clauses []Clause
	Else    Action
	// Check names the argument check this rule belongs to (empty for a
	// plain allow or deny).
	Check string
}

// Argument helpers. Syscall arguments typed int, unsigned int, umode_t or
// pid_t are truncated by the kernel to their low 32 (or 16) bits, so only
// the low half is compared; pointers compare both halves.

func lowEq(arg int, v uint32) Cond         { return Cond{Arg: arg, Value: v} }
func anyBits(arg int, mask uint32) Cond    { return Cond{Arg: arg, Mask: mask, Value: 0, Not: true} }
func maskedEq(arg int, m, v uint32) Cond   { return Cond{Arg: arg, Mask: m, Value: v} }
func nullPtr(arg int) []Cond               { return []Cond{{Arg: arg}, {Arg: arg, High: true}} }
func when(a Action, c ...Cond) Clause      { return Clause{When: c, Then: a} }
func oneOf(arg int, vs ...uint32) []Clause { return oneOfThen(Allow, arg, vs...) }

func oneOfThen(a Action, arg int, vs ...uint32) []Clause {
	out := make([]Clause, len(vs))
	for i, v := range vs {
		out[i] = when(a, lowEq(arg, v))
	}
	return out
}

// Names of the argument checks, as reported in the filter's summary.
const (
	CheckNamespaces    = "no-new-namespaces"     // clone/unshare CLONE_NEW*, setns
	CheckSockets       = "socket-families"       // TCP, UDP when granted, NETLINK_ROUTE only
	CheckSocketpair    = "socketpair-stream"     // no unix datagram pairs (sendto a pathname socket)
	CheckFastOpen      = "no-tcp-fast-open"      // MSG_FASTOPEN, TCP_FASTOPEN(_CONNECT)
	CheckListen        = "listen-needs-bind"     // listen() only when bind_tcp is granted
	CheckSetID         = "no-set-id-bits"        // open/creat/mknod/fchmod with S_ISUID/S_ISGID
	CheckMetadata      = "metadata"              // chmod/chown/utimes/xattr writes
	CheckMemfd         = "memfd-noexec"          // memfd_create needs MFD_NOEXEC_SEAL
	CheckExecFD        = "no-exec-of-descriptor" // execveat(AT_EMPTY_PATH)
	CheckIOUring       = "io_uring"              // io_uring unless granted
	CheckOtherProcs    = "own-processes-only"    // prlimit64/sched_*/setpriority/ioprio_set on self only
	CheckIPC           = "sysv-ipc"              // SysV IPC and mqueues without an ipc namespace
	CheckWatches       = "inotify"               // inotify watches without a mount namespace
	CheckIoctl         = "ioctl"                 // TIOCSTI, TIOCLINUX, file attribute ioctls
	CheckFcntl         = "fcntl"                 // F_SETLEASE
	CheckPersonality   = "personality"           // no READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...
	CheckFallbackCalls = "enosys-fallbacks"      // clone3, openat2: ENOSYS so libc uses the checkable call
)

// ioctl requests refused whatever the scope.
const (
	fsIocSetflags     = 0x40086602 // FS_IOC_SETFLAGS (chattr)
	fsIoc32Setflags   = 0x40046602 // FS_IOC32_SETFLAGS
	fsIocSetversion   = 0x40087602 // FS_IOC_SETVERSION
	fsIoc32Setversion = 0x40047602 // FS_IOC32_SETVERSION
	fsIocFssetxattr   = 0x401c5820 // FS_IOC_FSSETXATTR (project id, flags)
	fsIocEnableVerity = 0x40806685 // FS_IOC_ENABLE_VERITY (makes the file immutable)
)

const (
	setIDBits = unix.S_ISUID | unix.S_ISGID
	// cloneNS is every CLONE_NEW* flag clone() takes (CLONE_NEWTIME shares
	// its bit with the exit signal there and is only valid for unshare).
	cloneNS   = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareNS = cloneNS | unix.CLONE_NEWTIME

	prioProcess      = 0 // PRIO_PROCESS
	prioPgrp         = 1 // PRIO_PGRP
	ioprioWhoProcess = 1 // IOPRIO_WHO_PROCESS
	ioprioWhoPgrp    = 2 // IOPRIO_WHO_PGRP
)

// allowed are the syscalls every run may make without an argument check:
// Docker's default profile for a process without capabilities, minus what
// the fence closes (see rules for the checked and refused ones).
var allowed = []string{
	// files, by descriptor or checked by Landlock by path
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
	"close", "close_range", "dup", "dup2", "dup3", "lseek", "fstat", "stat", "lstat", "newfstatat", "statx",
	"statfs", "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getcwd", "chdir", "fchdir",
	"getdents", "getdents64", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
	"link", "linkat", "symlink", "symlinkat", "truncate", "ftruncate", "fallocate", "fsync", "fdatasync", "sync",
	"syncfs", "sync_file_range", "flock", "fadvise64", "readahead", "copy_file_range", "sendfile", "splice", "tee",
	"vmsplice", "umask", "name_to_handle_at", "fgetxattr", "flistxattr", "cachestat", "pipe", "pipe2",
	"inotify_init", "inotify_init1", "inotify_rm_watch",
	// memory (mmap/mprotect with PROT_EXEC stay: JIT runtimes need them)
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2", "mlockall",
	"munlock", "munlockall", "remap_file_pages", "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect",
	"mseal", "map_shadow_stack",
	// threads, processes, signals (signals are scoped by Landlock)
	"execve", "fork", "vfork", "exit", "exit_group", "wait4", "waitid", "kill", "tkill", "tgkill",
	"pidfd_open", "pidfd_send_signal", "rt_sigaction", "rt_sigprocmask", "rt_sigpending", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
	"signalfd4", "pause", "restart_syscall", "set_tid_address", "set_robust_list", "get_robust_list", "rseq",
	"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "arch_prctl", "set_thread_area",
	"get_thread_area", "prctl", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
	"landlock_restrict_self", "uretprobe",
	// identity (without capabilities only among the process's own ids)
	"getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
	"getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
	"setgroups", "capget", "capset", "getpgid", "getpgrp", "setpgid", "getsid",
	// scheduling and limits, reading or on self (the setters are checked)
	"sched_yield", "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_getscheduler",
	"sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getpriority", "ioprio_get",
	"getrlimit", "setrlimit", "getrusage", "getcpu",
	// time
	"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "times",
	"adjtimex", "clock_adjtime", "alarm", "getitimer", "setitimer", "timer_create", "timer_delete",
	"timer_getoverrun", "timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	// event loops
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll",
	"select", "pselect6", "eventfd", "eventfd2",
	// AIO on descriptors already open
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
	// sockets, once socket() let one be made (connect/bind are checked by Landlock)
	"connect", "bind", "accept", "accept4", "recvfrom", "recvmsg", "recvmmsg", "getsockname", "getpeername",
	"getsockopt", "shutdown",
	// the rest of the system, read only
	"uname", "sysinfo", "getrandom",
}

// rules returns the decision for every syscall the filter does not simply
// allow or refuse with the default errno.
func rules(o Options) map[string]Rule {
	r := map[string]Rule{}
	set := func(check string, names []string, rule Rule) {
		rule.Check = check
		for _, n := range names {
			if _, dup := r[n]; dup {
				panic("seccomp: two rules for " + n)
			}
			r[n] = rule
		}
	}
	deny := func(check string, a Action, names ...string) { set(check, names, Rule{Else: a}) }
	allowIf := func(check string, ok bool, a Action, names ...string) {
		if ok {
			set(check, names, Rule{Else: Allow})
		} else {
			deny(check, a, names...)
		}
	}

	// Privilege: new namespaces are where a process regains capabilities.
	set(CheckNamespaces, []string{"clone"}, Rule{Clauses: []Clause{when(eperm, anyBits(0, cloneNS))}, Else: Allow})
	set(CheckNamespaces, []string{"unshare"}, Rule{Clauses: []Clause{when(eperm, anyBits(0, unshareNS))}, Else: Allow})
	deny(CheckNamespaces, eperm, "setns")
	// clone3 and openat2 pass their flags in memory the filter cannot read:
	// ENOSYS makes glibc fall back to clone and openat, which it can.
	deny(CheckFallbackCalls, enosys, "clone3", "openat2")

	// Network.
	inet := []Clause{}
	for _, dom := range []uint32{unix.AF_INET, unix.AF_INET6} {
		for _, proto := range []uint32{0, unix.IPPROTO_TCP} {
			inet = append(inet, when(Allow, lowEq(0, dom), maskedEq(1, 0xf, unix.SOCK_STREAM), lowEq(2, proto)))
		}
		if o.AllowUDP {
			for _, proto := range []uint32{0, unix.IPPROTO_UDP} {
				inet = append(inet, when(Allow, lowEq(0, dom), maskedEq(1, 0xf, unix.SOCK_DGRAM), lowEq(2, proto)))
			}
		}
	}
	inet = append(inet,
		when(Allow, lowEq(0, unix.AF_NETLINK), lowEq(2, unix.NETLINK_ROUTE)),
		when(eperm, lowEq(0, unix.AF_UNIX)))
	set(CheckSockets, []string{"socket"}, Rule{Clauses: inet, Else: eacces})
	set(CheckSocketpair, []string{"socketpair"}, Rule{Clauses: []Clause{
		when(Allow, lowEq(0, unix.AF_UNIX), maskedEq(1, 0xf, unix.SOCK_STREAM)),
		when(Allow, lowEq(0, unix.AF_UNIX), maskedEq(1, 0xf, unix.SOCK_SEQPACKET)),
	}, Else: eperm})
	fastOpen := func(flagsArg int) Rule {
		return Rule{Clauses: []Clause{when(eacces, anyBits(flagsArg, unix.MSG_FASTOPEN))}, Else: Allow}
	}
	set(CheckFastOpen, []string{"sendto"}, fastOpen(3))
	set(CheckFastOpen, []string{"sendmsg"}, fastOpen(2))
	set(CheckFastOpen, []string{"sendmmsg"}, fastOpen(3))
	set(CheckFastOpen, []string{"setsockopt"}, Rule{Clauses: []Clause{
		when(eacces, lowEq(1, unix.IPPROTO_TCP), lowEq(2, unix.TCP_FASTOPEN_CONNECT)),
		when(eacces, lowEq(1, unix.IPPROTO_TCP), lowEq(2, unix.TCP_FASTOPEN)),
	}, Else: Allow})
	allowIf(CheckListen, o.AllowListen, eacces, "listen")
	allowIf(CheckIOUring, o.AllowIOUring, eperm, "io_uring_setup", "io_uring_enter", "io_uring_register")

	// Set-id bits on files the server creates.
	noSetID := func(modeArg int) Rule {
		return Rule{Clauses: []Clause{when(eperm, anyBits(modeArg, setIDBits))}, Else: Allow}
	}
	set(CheckSetID, []string{"open"}, noSetID(2))
	set(CheckSetID, []string{"openat"}, noSetID(3))
	set(CheckSetID, []string{"creat"}, noSetID(1))
	set(CheckSetID, []string{"mknod"}, noSetID(1))
	set(CheckSetID, []string{"mknodat"}, noSetID(2))

	// Metadata. By path never: Landlock does not check it, so a path
	// reaches files outside the scope. By descriptor only in a write scope
	// and only where the server owns no host file.
	deny(CheckMetadata, eperm, "chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "fchown",
		"utime", "utimes", "futimesat",
		"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
		"setxattrat", "removexattrat", "file_setattr")
	// Extended attributes read by path are file contents outside the
	// scope (user.* attributes); "not supported" lets tools go on.
	deny(CheckMetadata, eopnotsupp, "getxattr", "lgetxattr", "listxattr", "llistxattr", "getxattrat",
		"listxattrat", "file_getattr")
	if o.WriteScope && o.DedicatedUID {
		set(CheckSetID, []string{"fchmod"}, noSetID(1))
		set(CheckMetadata, []string{"utimensat"}, Rule{Clauses: []Clause{when(Allow, nullPtr(1)...)}, Else: eperm})
	} else {
		deny(CheckMetadata, eperm, "fchmod", "utimensat")
	}

	// Code that is not in the runtime.
	set(CheckMemfd, []string{"memfd_create"}, Rule{Clauses: []Clause{
		when(eperm, anyBits(1, unix.MFD_EXEC)),
		when(Allow, anyBits(1, unix.MFD_NOEXEC_SEAL)),
	}, Else: eperm})
	set(CheckExecFD, []string{"execveat"}, Rule{Clauses: []Clause{when(eacces, anyBits(4, unix.AT_EMPTY_PATH))}, Else: Allow})

	// Processes outside the run: only the caller itself (pid 0).
	self := func(pidArg int) Rule {
		return Rule{Clauses: []Clause{when(Allow, lowEq(pidArg, 0))}, Else: eperm}
	}
	set(CheckOtherProcs, []string{"prlimit64", "sched_setscheduler", "sched_setparam", "sched_setaffinity", "sched_setattr"}, self(0))
	set(CheckOtherProcs, []string{"setpriority"}, Rule{Clauses: []Clause{
		when(Allow, lowEq(0, prioProcess), lowEq(1, 0)),
		when(Allow, lowEq(0, prioPgrp), lowEq(1, 0)),
	}, Else: eperm})
	set(CheckOtherProcs, []string{"ioprio_set"}, Rule{Clauses: []Clause{
		when(Allow, lowEq(0, ioprioWhoProcess), lowEq(1, 0)),
		when(Allow, lowEq(0, ioprioWhoPgrp), lowEq(1, 0)),
	}, Else: eperm})
	deny(CheckOtherProcs, eperm, "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
		"process_madvise", "process_mrelease", "migrate_pages", "move_pages")
	allowIf(CheckIPC, o.IPCNamespace, eperm, "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
		"semtimedop", "semctl", "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend",
		"mq_timedreceive", "mq_notify", "mq_getsetattr")
	allowIf(CheckWatches, o.MountNamespace, eperm, "inotify_add_watch")

	// Requests on descriptors.
	set(CheckIoctl, []string{"ioctl"}, Rule{Clauses: oneOfThen(eperm, 1,
		unix.TIOCSTI, unix.TIOCLINUX, fsIocSetflags, fsIoc32Setflags, fsIocSetversion, fsIoc32Setversion,
		fsIocFssetxattr, fsIocEnableVerity), Else: Allow})
	set(CheckFcntl, []string{"fcntl"}, Rule{Clauses: []Clause{when(eperm, lowEq(1, unix.F_SETLEASE))}, Else: Allow})
	// Linux personalities only (as Docker): no READ_IMPLIES_EXEC, no
	// ADDR_NO_RANDOMIZE. 0xffffffff queries.
	set(CheckPersonality, []string{"personality"}, Rule{Clauses: oneOf(0, 0, 0x0008, 0x20000, 0x20008, 0xffffffff), Else: eperm})
	return r
}
