package seccomp

import (
	"slices"

	"golang.org/x/sys/unix"
)

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
	// MountNamespace: the run sees only a minimal root in which nothing
	// but the scope's write paths and the private /tmp is writable (the
	// runtime and read paths are read-only mounts) and the rest of the host
	// is absent. Inotify watches then learn nothing about the host, and
	// modes and times by path reach only what the mounts let change
	// (set-id bits, owners and xattrs stay refused).
	MountNamespace bool `json:"mount_namespace,omitempty"`
	// DedicatedUID: the server runs as a uid that owns no host file (a
	// dedicated uid, or uid 0 of its own user namespace). Only then may a
	// write scope change modes and times through descriptors: Landlock does
	// not check fchmod or futimens, and a server running as the owner of
	// the runtime's files could otherwise change them through a read-only
	// descriptor.
	DedicatedUID bool `json:"dedicated_uid,omitempty"`
	// OwnUserCounters: the kernel's per-user counters that a process in a
	// user namespace also charges to the namespace's owner (inotify
	// instances and watches) count against a uid no other process has:
	// the dedicated uid, owner of the server's user namespace. Only then
	// are inotify instances allowed: otherwise they come out of the
	// launching user's (or host root's) 128, and a server holding them
	// all leaves that user's other processes without any.
	OwnUserCounters bool `json:"own_user_counters,omitempty"`
	// PIDNamespace: the run has its own pid namespace, so a pidfd names
	// only a process of the run. Only then does PIDFD_GET_INFO answer:
	// otherwise it tells the parent, uids and cgroup of any host process,
	// which the fence keeps /proc/PID of from the server.
	PIDNamespace bool `json:"pid_namespace,omitempty"`
}

// Action is a seccomp filter's return value.
type Action uint32

// Allow lets the syscall run.
const Allow = Action(unix.SECCOMP_RET_ALLOW)

// Errno fails the syscall with e, without running it.
func Errno(e unix.Errno) Action {
	return Action(unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA)
}

// Errno values the filter returns (constants, so that the policy tables
// below are static data: nothing is built at start-up).
const (
	eperm      = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	eacces     = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	enosys     = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	eopnotsupp = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EOPNOTSUPP))
	enomem     = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOMEM))
	einval     = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EINVAL))
	enotty     = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOTTY))
	// retZero answers a call without running it: SECCOMP_RET_ERRNO with
	// data 0 makes the syscall return 0.
	retZero = Action(unix.SECCOMP_RET_ERRNO)
)

// Default is what a syscall outside the allowlist gets.
const Default = eperm

// Unknown is what a syscall number past the newest one in the table gets.
const Unknown = enosys

// Foreign is what a syscall of another ABI (i386 int 0x80, x32, AArch32)
// gets.
const Foreign = enosys

// Cond is one comparison on a syscall argument:
// (32-bit half of Args[Arg] & Mask) == Value, or != Value when Not.
// Mask 0 means all 32 bits.
//
// Syscall arguments typed int, unsigned int, umode_t or pid_t are
// truncated by the kernel to their low 32 (or 16) bits, so only the low
// half is compared; pointers compare both halves.
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
	// plain allow).
	Check string
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
	CheckWatches       = "inotify"               // inotify watches without a mount namespace, instances without own per-user counters
	CheckIoctl         = "ioctl"                 // an allowlist of requests (IoctlAllowed), ENOTTY for the rest
	CheckFcntl         = "fcntl"                 // F_SETLEASE
	CheckPersonality   = "personality"           // no READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...
	CheckFallbackCalls = "enosys-fallbacks"      // clone3, openat2: ENOSYS so libc uses the checkable call
	CheckAIO           = "no-aio"                // Linux AIO: ENOSYS, one host-wide budget (fs.aio-max-nr)
	CheckHugetlb       = "no-hugetlb"            // MAP_HUGETLB, MFD_HUGETLB: the host's reserved huge page pool
	CheckWhiteout      = "no-whiteout"           // renameat2 RENAME_WHITEOUT: a device node left in the workspace
	CheckBind          = "bind-needs-grant"      // bind() without a network grant: netlink addresses only
	CheckLandlockLogs  = "landlock-records-stay" // landlock_restrict_self may not turn off denial records
	CheckOthersWrite   = "no-others-write"       // chmod family with S_IWOTH (or set-id bits); umask clearing S_IWOTH
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

// btrfs's ioctls share the type 0x94 with three generic ones, FICLONE,
// FICLONERANGE and FIDEDUPERANGE, which need a descriptor open for writing
// (or, for dedupe, the owner's identical data) and stay. Every other one is
// refused: BTRFS_IOC_SUBVOL_CREATE(_V2) and BTRFS_IOC_SNAP_CREATE(_V2) make
// a directory through a descriptor Landlock let the server open read-only
// (Landlock checks mkdir, not this ioctl), BTRFS_IOC_SUBVOL_SETFLAGS makes a
// subvolume read-only for its owner, BTRFS_IOC_SNAP_DESTROY(_V2) removes one
// where the mount allows users to. fscrypt's FS_IOC_SET_ENCRYPTION_POLICY
// sets an encryption policy on an empty directory the caller owns (a read
// scope's, through a read-only descriptor, under --no-namespaces as root),
// and FS_IOC_ADD/REMOVE_ENCRYPTION_KEY* change the file system's keyring:
// matched by type and number (0x66, 19 and 23-25), any size.
const (
	ioctlTypeMask   = 0xff00
	btrfsIoctlType  = 0x9400
	ficlone         = 0x40049409 // FICLONE (BTRFS_IOC_CLONE)
	ficlonerange    = 0x4020940d // FICLONERANGE
	fsIoc32Getflags = 0x80046601 // FS_IOC32_GETFLAGS
	fsIocFiemap     = 0xc020660b // FS_IOC_FIEMAP
	fsIocFsgetxattr = 0x801c581f // FS_IOC_FSGETXATTR
	fionbio         = 0x5421     // FIONBIO (asm-generic/ioctls.h, x86_64 and arm64 alike)
	fionclex        = 0x5450     // FIONCLEX
	fioclex         = 0x5451     // FIOCLEX
	fionread        = 0x541b     // FIONREAD
	figetbsz        = 2          // FIGETBSZ
	fsIocSetEncPol  = 0x6613     // FS_IOC_SET_ENCRYPTION_POLICY, type and number
	fsIocAddEncKey  = 0x6617     // FS_IOC_ADD_ENCRYPTION_KEY
	fsIocRmEncKey   = 0x6618     // FS_IOC_REMOVE_ENCRYPTION_KEY
	fsIocRmEncKeyAU = 0x6619     // FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS
)

// shmHugetlb is SHM_HUGETLB (linux/shm.h).
const shmHugetlb = 0o4000

// pidfdGetInfo is PIDFD_GET_INFO (_IOWR(PIDFS_IOCTL_MAGIC, 11, struct
// pidfd_info)) without its direction and size bits: the kernel takes any
// size of the extensible struct, so only the type and number are matched.
const (
	pidfdGetInfo    = 0xff0b
	ioctlTypeNrMask = 0xffff
	renameWhiteout  = 1 << 2 // RENAME_WHITEOUT (linux/fs.h)
	// landlockLogOff is LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF |
	// LANDLOCK_RESTRICT_SELF_LOG_SUBDOMAINS_OFF (linux/landlock.h, ABI 7).
	landlockLogOff   = 1<<0 | 1<<2
	sizeofSockaddrNl = 12 // sizeof(struct sockaddr_nl), on every ABI
)

const (
	setIDBits = unix.S_ISUID | unix.S_ISGID
	// othersWrite is S_IWOTH: a mode with it lets every local user write
	// where the scope granted only the server.
	othersWrite = unix.S_IWOTH
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
	"getdents", "getdents64", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
	"link", "linkat", "symlink", "symlinkat", "truncate", "ftruncate", "fallocate", "fsync", "fdatasync", "sync",
	"syncfs", "sync_file_range", "flock", "fadvise64", "readahead", "copy_file_range", "sendfile", "splice", "tee",
	"vmsplice", "name_to_handle_at", "fgetxattr", "flistxattr", "cachestat", "pipe", "pipe2",
	"inotify_rm_watch",
	// memory (mmap/mprotect with PROT_EXEC stay: JIT runtimes need them)
	"brk", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2", "mlockall",
	"munlock", "munlockall", "remap_file_pages", "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect",
	"mseal", "map_shadow_stack",
	// threads, processes, signals (signals are scoped by Landlock)
	"execve", "fork", "vfork", "exit", "exit_group", "wait4", "waitid", "kill", "tkill", "tgkill",
	"pidfd_open", "pidfd_send_signal", "rt_sigaction", "rt_sigprocmask", "rt_sigpending", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
	"signalfd4", "pause", "restart_syscall", "set_tid_address", "set_robust_list", "get_robust_list", "rseq",
	"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "arch_prctl", "set_thread_area",
	"get_thread_area", "prctl", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
	"uretprobe", // landlock_restrict_self: see CheckLandlockLogs
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
	// sockets, once socket() let one be made (connect/bind are checked by Landlock)
	"connect", "accept", "accept4", "recvfrom", "recvmsg", "recvmmsg", "getsockname", "getpeername",
	"getsockopt", "shutdown",
	// the rest of the system, read only
	"uname", "sysinfo", "getrandom",
}

// group is one rule for a set of syscalls.
type group struct {
	names []string
	rule  Rule
}

// fixed are the rules that hold whatever the options.
var fixed = []group{
	// Privilege: new namespaces are where a process regains capabilities.
	{[]string{"clone"}, Rule{Check: CheckNamespaces, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 0, Mask: cloneNS, Not: true}}, eperm}}}},
	{[]string{"unshare"}, Rule{Check: CheckNamespaces, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 0, Mask: unshareNS, Not: true}}, eperm}}}},
	{[]string{"setns"}, Rule{Check: CheckNamespaces, Else: eperm}},
	// clone3 and openat2 pass their flags in memory the filter cannot read:
	// ENOSYS makes glibc fall back to clone and openat, which it can.
	{[]string{"clone3", "openat2"}, Rule{Check: CheckFallbackCalls, Else: enosys}},

	// Network.
	{[]string{"socketpair"}, Rule{Check: CheckSocketpair, Else: eperm, Clauses: []Clause{
		{[]Cond{{Arg: 0, Value: unix.AF_UNIX}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_UNIX}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_SEQPACKET}}, Allow}}}},
	{[]string{"sendto", "sendmmsg"}, Rule{Check: CheckFastOpen, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 3, Mask: unix.MSG_FASTOPEN, Not: true}}, eacces}}}},
	{[]string{"sendmsg"}, Rule{Check: CheckFastOpen, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 2, Mask: unix.MSG_FASTOPEN, Not: true}}, eacces}}}},
	{[]string{"setsockopt"}, Rule{Check: CheckFastOpen, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 1, Value: unix.IPPROTO_TCP}, {Arg: 2, Value: unix.TCP_FASTOPEN_CONNECT}}, eacces},
		{[]Cond{{Arg: 1, Value: unix.IPPROTO_TCP}, {Arg: 2, Value: unix.TCP_FASTOPEN}}, eacces}}}},

	// Set-id bits on files the server creates.
	{[]string{"creat", "mknod"}, Rule{Check: CheckSetID, Else: Allow, Clauses: []Clause{{[]Cond{{Arg: 1, Mask: setIDBits, Not: true}}, eperm}}}},
	{[]string{"open", "mknodat"}, Rule{Check: CheckSetID, Else: Allow, Clauses: []Clause{{[]Cond{{Arg: 2, Mask: setIDBits, Not: true}}, eperm}}}},
	{[]string{"openat"}, Rule{Check: CheckSetID, Else: Allow, Clauses: []Clause{{[]Cond{{Arg: 3, Mask: setIDBits, Not: true}}, eperm}}}},

	// Metadata that no layer confines: ownership (without capabilities
	// only a change of group among the server's own), and every xattr
	// write (a filter cannot read the attribute's name, and
	// system.posix_acl_access is in effect a chmod). The rest of the
	// metadata calls depend on the layers in force (see rules).
	{[]string{"chown", "lchown", "fchownat", "fchown",
		"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
		"setxattrat", "removexattrat", "file_setattr"}, Rule{Check: CheckMetadata, Else: eperm}},

	// The host's pool of reserved huge pages (vm.nr_hugepages) is one for
	// every process and no limit of the run bounds it (the run's cgroup
	// sets no hugetlb limit): a server mapping MAP_HUGETLB until ENOMEM
	// left the database or VM the pool was reserved for without it.
	// ENOMEM, as from an empty pool; runtimes fall back to normal pages.
	{[]string{"mmap"}, Rule{Check: CheckHugetlb, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 3, Mask: unix.MAP_HUGETLB, Not: true}}, enomem}}}},

	// RENAME_WHITEOUT leaves a whiteout, a character device (0:0), where
	// the file was: Landlock checks the rename, not the device it makes
	// (mknod of one needs LANDLOCK_ACCESS_FS_MAKE_CHAR). EINVAL, as from a
	// file system without whiteouts; only overlay file systems use them.
	{[]string{"renameat2"}, Rule{Check: CheckWhiteout, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 4, Mask: renameWhiteout, Not: true}}, einval}}}},

	// A Landlock domain of the server's own (nested in the run's) with
	// LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF is the youngest layer to deny
	// whatever it and the run's domain both deny, and its denials are not
	// logged: a server that made one handling every access and then tried
	// paths outside the scope left no Landlock denial record (the daemon's
	// view of escape attempts). LOG_SUBDOMAINS_OFF does the same for every
	// domain nested later. Both are refused; nested domains that keep their
	// records (flags 0, LOG_NEW_EXEC_ON) stay.
	{[]string{"landlock_restrict_self"}, Rule{Check: CheckLandlockLogs, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 1, Mask: landlockLogOff, Not: true}}, eperm}}}},

	// umask never lets others write. The exec stage starts the server with
	// S_IWOTH in its mask; a umask() that would clear it is answered 0
	// without running, so the mask stays and every creation mode (open,
	// creat, mkdir, mknod, O_TMPFILE) keeps others from writing. Not
	// EPERM: umask cannot fail, so libc returns -1 as the mask 0o777 and
	// the usual read of it, old = umask(0); umask(old), would then set
	// 0o777 (python raises, node rejects the value). Answered 0, that
	// read sees 0, leaves the mask as it was, and a mode computed from
	// it with others' write is refused by chmod below.
	{[]string{"umask"}, Rule{Check: CheckOthersWrite, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 0, Mask: othersWrite, Value: 0}}, retZero}}}},

	// Code that is not in the runtime (and no huge pages, as above).
	{[]string{"memfd_create"}, Rule{Check: CheckMemfd, Else: eperm, Clauses: []Clause{
		{[]Cond{{Arg: 1, Mask: unix.MFD_HUGETLB, Not: true}}, enomem},
		{[]Cond{{Arg: 1, Mask: unix.MFD_EXEC, Not: true}}, eperm},
		{[]Cond{{Arg: 1, Mask: unix.MFD_NOEXEC_SEAL, Not: true}}, Allow}}}},
	{[]string{"execveat"}, Rule{Check: CheckExecFD, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 4, Mask: unix.AT_EMPTY_PATH, Not: true}}, eacces}}}},

	// Processes outside the run: only the caller itself (pid 0).
	{[]string{"prlimit64", "sched_setscheduler", "sched_setparam", "sched_setaffinity", "sched_setattr"},
		Rule{Check: CheckOtherProcs, Else: eperm, Clauses: []Clause{{[]Cond{{Arg: 0, Value: 0}}, Allow}}}},
	{[]string{"setpriority"}, Rule{Check: CheckOtherProcs, Else: eperm, Clauses: []Clause{
		{[]Cond{{Arg: 0, Value: prioProcess}, {Arg: 1, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: prioPgrp}, {Arg: 1, Value: 0}}, Allow}}}},
	{[]string{"ioprio_set"}, Rule{Check: CheckOtherProcs, Else: eperm, Clauses: []Clause{
		{[]Cond{{Arg: 0, Value: ioprioWhoProcess}, {Arg: 1, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: ioprioWhoPgrp}, {Arg: 1, Value: 0}}, Allow}}}},
	{[]string{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
		"process_madvise", "process_mrelease", "migrate_pages", "move_pages"}, Rule{Check: CheckOtherProcs, Else: eperm}},

	// Linux AIO: every context comes out of one budget for the whole host
	// (fs.aio-max-nr, 65536 events), which no limit of the run bounds.
	// ENOSYS, as from a kernel built without AIO: libaio users fall back.
	{[]string{"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents"},
		Rule{Check: CheckAIO, Else: enosys}},

	// Requests on descriptors.
	// (ioctl: see ioctlRule, which the options choose.)
	{[]string{"fcntl"}, Rule{Check: CheckFcntl, Else: Allow, Clauses: []Clause{
		{[]Cond{{Arg: 1, Value: unix.F_SETLEASE}}, eperm}}}},
	// Linux personalities only (as Docker): no READ_IMPLIES_EXEC, no
	// ADDR_NO_RANDOMIZE. 0xffffffff queries.
	{[]string{"personality"}, Rule{Check: CheckPersonality, Else: eperm, Clauses: []Clause{
		{[]Cond{{Arg: 0, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: 0x0008}}, Allow},
		{[]Cond{{Arg: 0, Value: 0x20000}}, Allow},
		{[]Cond{{Arg: 0, Value: 0x20008}}, Allow},
		{[]Cond{{Arg: 0, Value: 0xffffffff}}, Allow}}}},
}

// Requests on descriptors: an allowlist (as Chromium's and gVisor's
// sandboxes), every other request ENOTTY — what a descriptor that does
// not implement it answers, which callers handle. The list is what the
// runtimes were measured using under the fence (strace -f of
// TestRealServersUnderTheFilter and internal/compat: node, CPython in a
// venv, git, Go servers: TCGETS, TIOCGWINSZ, FIONBIO, FIOCLEX, nothing
// else) and their documented neighbours: the other descriptor-flag and
// queue-size requests, copy-on-write copies (libuv's copyfile, cp
// --reflink), file flags and extents read back, the interface queries
// glibc and older runtimes make by ioctl rather than netlink. Device
// ioctls are Landlock's (ioctl_dev, on the few devices the profile
// grants). A few refusals keep the errno they had before the allowlist
// (TIOCSTI's EPERM, fscrypt's EOPNOTSUPP). PIDFD_GET_INFO is allowed only
// in the run's own pid namespace: without it pidfd_open reaches every host
// process and PIDFD_GET_INFO reads what /proc/PID would (ENOTTY, as from a
// kernel before 6.13: callers fall back to /proc, which Landlock decides).
var (
	ioctlRefused = []Clause{
		{[]Cond{{Arg: 1, Value: unix.TIOCSTI}}, eperm},
		{[]Cond{{Arg: 1, Value: unix.TIOCLINUX}}, eperm},
		{[]Cond{{Arg: 1, Value: fsIocSetflags}}, eperm},
		{[]Cond{{Arg: 1, Value: fsIoc32Setflags}}, eperm},
		{[]Cond{{Arg: 1, Value: fsIocSetversion}}, eperm},
		{[]Cond{{Arg: 1, Value: fsIoc32Setversion}}, eperm},
		{[]Cond{{Arg: 1, Value: fsIocFssetxattr}}, eperm},
		{[]Cond{{Arg: 1, Value: fsIocEnableVerity}}, eperm},
		{[]Cond{{Arg: 1, Mask: ioctlTypeNrMask, Value: fsIocSetEncPol}}, eopnotsupp}, // as without fscrypt
		{[]Cond{{Arg: 1, Mask: ioctlTypeNrMask, Value: fsIocAddEncKey}}, eopnotsupp},
		{[]Cond{{Arg: 1, Mask: ioctlTypeNrMask, Value: fsIocRmEncKey}}, eopnotsupp},
		{[]Cond{{Arg: 1, Mask: ioctlTypeNrMask, Value: fsIocRmEncKeyAU}}, eopnotsupp}}
	// IoctlAllowed are the requests the filter lets through (the low 32
	// bits the kernel reads), exported for the tests and `scope check`.
	IoctlAllowed = []uint32{
		unix.TCGETS, unix.TIOCGWINSZ, unix.TIOCGPGRP, // terminal queries (isatty, its size, its group)
		fionbio, fioclex, fionclex, fionread, unix.TIOCOUTQ, // descriptor flags, queue sizes
		ficlone, ficlonerange, unix.FIDEDUPERANGE, // copy-on-write copies (need a descriptor open for writing)
		unix.FS_IOC_GETFLAGS, fsIoc32Getflags, fsIocFsgetxattr, fsIocFiemap, figetbsz, // file flags and extents, read
		unix.SIOCGIFNAME, unix.SIOCGIFCONF, unix.SIOCGIFFLAGS, unix.SIOCGIFADDR, unix.SIOCGIFNETMASK,
		unix.SIOCGIFMTU, unix.SIOCGIFHWADDR, unix.SIOCGIFINDEX, // interface queries (what netlink tells too)
	}
	ioctlRule        = Rule{Check: CheckIoctl, Else: enotty, Clauses: ioctlClauses(true)}
	ioctlRuleNoPIDNS = Rule{Check: CheckIoctl, Else: enotty, Clauses: ioctlClauses(false)}
)

// ioctlClauses: the refusals with their own errno, then the allowlist
// (PIDFD_GET_INFO with the run's pid namespace only).
func ioctlClauses(pidNS bool) []Clause {
	c := slices.Clone(ioctlRefused)
	for _, v := range IoctlAllowed {
		c = append(c, Clause{[]Cond{{Arg: 1, Value: v}}, Allow})
	}
	if pidNS {
		c = append(c, Clause{[]Cond{{Arg: 1, Mask: ioctlTypeNrMask, Value: pidfdGetInfo}}, Allow})
	}
	return c
}

// modeChange refuses a chmod mode with S_ISUID, S_ISGID or S_IWOTH: a
// set-uid file is a shell for any local user, a mode with others' write
// opens the workspace (its own directory included) to every local user.
// Group write stays.
func modeChange(modeArg int) Rule {
	return Rule{Check: CheckOthersWrite, Else: Allow, Clauses: []Clause{{[]Cond{{Arg: modeArg, Mask: setIDBits | othersWrite, Not: true}}, eperm}}}
}

// Rules the options choose between.
var (
	// socket(): TCP, UDP when the scope grants ports, NETLINK_ROUTE;
	// AF_UNIX gets the errno of Landlock's own abstract-socket scope.
	socketTCP = Rule{Check: CheckSockets, Else: eacces, Clauses: []Clause{
		{[]Cond{{Arg: 0, Value: unix.AF_INET}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: unix.IPPROTO_TCP}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET6}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET6}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: unix.IPPROTO_TCP}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_NETLINK}, {Arg: 2, Value: unix.NETLINK_ROUTE}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_UNIX}}, eperm},
	}}
	socketTCPUDP = Rule{Check: CheckSockets, Else: eacces, Clauses: []Clause{
		{[]Cond{{Arg: 0, Value: unix.AF_INET}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: unix.IPPROTO_TCP}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET6}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET6}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_STREAM}, {Arg: 2, Value: unix.IPPROTO_TCP}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_DGRAM}, {Arg: 2, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_DGRAM}, {Arg: 2, Value: unix.IPPROTO_UDP}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET6}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_DGRAM}, {Arg: 2, Value: 0}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_INET6}, {Arg: 1, Mask: 0xf, Value: unix.SOCK_DGRAM}, {Arg: 2, Value: unix.IPPROTO_UDP}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_NETLINK}, {Arg: 2, Value: unix.NETLINK_ROUTE}}, Allow},
		{[]Cond{{Arg: 0, Value: unix.AF_UNIX}}, eperm},
	}}

	// Extended attributes read by path are file contents outside the
	// scope (user.* attributes) unless a mount namespace hides the rest of
	// the host; refused, "not supported" lets tools go on.
	xattrReads = []string{"getxattr", "lgetxattr", "listxattr", "llistxattr", "getxattrat", "listxattrat", "file_getattr"}

	ipcNames = []string{"msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
		"shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
		"mq_notify", "mq_getsetattr"}
)

// rules returns the decision for every syscall the filter does not simply
// allow or refuse with the default errno. (A syscall named twice, here or
// here and in allowed, makes Build fail.)
func rules(o Options) []group {
	r := make([]group, 0, len(fixed)+8)
	r = append(r, fixed...)
	allowIf := func(check string, ok bool, a Action, names ...string) {
		if ok {
			r = append(r, group{names, Rule{Check: check, Else: Allow}})
		} else {
			r = append(r, group{names, Rule{Check: check, Else: a}})
		}
	}
	if o.AllowUDP {
		r = append(r, group{[]string{"socket"}, socketTCPUDP})
	} else {
		r = append(r, group{[]string{"socket"}, socketTCP})
	}
	if o.PIDNamespace {
		r = append(r, group{[]string{"ioctl"}, ioctlRule})
	} else {
		r = append(r, group{[]string{"ioctl"}, ioctlRuleNoPIDNS})
	}
	allowIf(CheckListen, o.AllowListen, eacces, "listen")
	// bind(): without a network grant nothing but a netlink socket (glibc's
	// getifaddrs, Go's net.Interfaces) has a use for it, TCP binds being
	// Landlock's to refuse. The abstract unix socket names are those of
	// the network namespace, the host's without one of the run's own: a
	// server binding one end of a socketpair to "@/tmp/.X11-unix/X0" held
	// that name from the X server that starts later (Landlock's
	// abstract-socket scope decides connect and send, not bind). The filter
	// cannot read the address, only its length: an abstract name of
	// exactly 9 bytes has a netlink address's length and still binds.
	if o.AllowUDP || o.AllowListen {
		r = append(r, group{[]string{"bind"}, Rule{Check: CheckBind, Else: Allow}})
	} else {
		r = append(r, group{[]string{"bind"}, Rule{Check: CheckBind, Else: eacces, Clauses: []Clause{
			{[]Cond{{Arg: 2, Value: sizeofSockaddrNl}}, Allow}}}})
	}
	allowIf(CheckIOUring, o.AllowIOUring, eperm, "io_uring_setup", "io_uring_enter", "io_uring_register")
	allowIf(CheckIPC, o.IPCNamespace, eperm, ipcNames...)
	// shmget as the rest of SysV IPC, but never on huge pages: the kernel
	// lets a member of vm.hugetlb_shm_group (0: a server running as root's
	// group, where the identity layer is degraded) take the host's pool.
	if o.IPCNamespace {
		r = append(r, group{[]string{"shmget"}, Rule{Check: CheckHugetlb, Else: Allow, Clauses: []Clause{
			{[]Cond{{Arg: 2, Mask: shmHugetlb, Not: true}}, enomem}}}})
	} else {
		r = append(r, group{[]string{"shmget"}, Rule{Check: CheckIPC, Else: eperm}})
	}
	allowIf(CheckWatches, o.MountNamespace, eperm, "inotify_add_watch")
	// An inotify instance is charged to the server's uid and, up the user
	// namespaces, to each namespace's owner: fs.inotify.max_user_instances
	// (128) is shared by every process of that host uid.
	allowIf(CheckWatches, o.OwnUserCounters, eperm, "inotify_init", "inotify_init1")
	// Modes and times. Landlock checks none of them. By path they reach
	// any file the server can name, so they are refused unless the mount
	// namespace confines them: in the minimal root everything but the
	// scope's write paths and the private /tmp is read-only (EROFS), and
	// the rest of the host is not there. By descriptor, besides that, in a
	// write scope where the server owns no host file (the kernel lets only
	// the owner change a mode). Set-id bits and others' write never.
	metaPath := []string{"chmod", "fchmodat", "fchmodat2", "utime", "utimes", "futimesat", "utimensat", "fchmod"}
	switch {
	case o.MountNamespace:
		r = append(r,
			group{[]string{"chmod", "fchmod"}, modeChange(1)},
			group{[]string{"fchmodat", "fchmodat2"}, modeChange(2)},
			group{metaPath[3:7], Rule{Check: CheckMetadata, Else: Allow}},
			group{xattrReads, Rule{Check: CheckMetadata, Else: Allow}})
	case o.WriteScope && o.DedicatedUID:
		r = append(r,
			group{[]string{"fchmod"}, modeChange(1)},
			group{[]string{"utimensat"}, Rule{Check: CheckMetadata, Else: eperm, Clauses: []Clause{
				{[]Cond{{Arg: 1}, {Arg: 1, High: true}}, Allow}}}},
			group{metaPath[:6], Rule{Check: CheckMetadata, Else: eperm}},
			group{xattrReads, Rule{Check: CheckMetadata, Else: eopnotsupp}})
	default:
		r = append(r,
			group{metaPath, Rule{Check: CheckMetadata, Else: eperm}},
			group{xattrReads, Rule{Check: CheckMetadata, Else: eopnotsupp}})
	}
	return r
}
