//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
//
// Kernel side of mcpwarden's observation: one BTF tracepoint on the
// syscall entry and one on the syscall exit of every task (tp_btf/sys_enter,
// tp_btf/sys_exit) for the file operations a scope must see, and the
// scheduler's fork/exec/exit tracepoints to follow each run's process tree.
//
// The filter comes first and is cheap: a syscall that is not a file
// operation leaves after a few compares on its number; a file operation of a
// process outside every run (not in `watched`) after one hash lookup. Only
// runs' processes do any work.

#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "event.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define AT_FDCWD -100
#define O_WRONLY 01
#define O_CREAT 0100
#define O_TRUNC 01000
#define NAME_READ_MAX 256  /* NAME_MAX + 1 */
#define PATH_READ_MAX 4096 /* PATH_MAX */
#define WALK_DEPTH_MAX 64
#define DATA_MASK (EVENT_DATA_MAX - 1)

// Wake user space only once this many bytes wait in the ring (batched
// wake-ups); the reader also polls on a short deadline so a quiet run's last
// events are not held back. Set by the loader; 0 = wake on every record.
const volatile __u32 wakeup_bytes = 0;

// Counters, one slot per CPU so the hot path never contends.
enum stat {
	STAT_EVENTS = 0,      // records submitted
	STAT_RB_DROPS = 1,    // ring buffer full: record lost in the kernel
	STAT_INFLIGHT_FULL = 2, // no room to remember a syscall's arguments
	STAT_WATCH_FULL = 3,  // no room to follow a forked child
	STAT_TRUNCATED = 4,   // a path longer or deeper than the probes read
	STAT_MAX = 5,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// watched maps a process (tgid) to the slot of the run it belongs to.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} watched SEC(".maps");

// watched_flags has one byte per pid: non-zero when the process is in
// `watched`. It is the filter every hooked syscall of every process goes
// through, one load instead of a hash lookup. Pids from PIDS_FLAGGED up
// (kernel.pid_max raised past it) fall back to the hash. User space writes
// its bytes through a memory mapping, one byte at a time, so it never
// overwrites the kernel's own updates of neighbouring pids.
#define FLAG_BLOCK 4096
#define PIDS_FLAGGED (1 << 22) /* PID_MAX_LIMIT on 64-bit kernels */
struct flag_block {
	__u8 b[FLAG_BLOCK];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PIDS_FLAGGED / FLAG_BLOCK);
	__type(key, __u32);
	__type(value, struct flag_block);
} watched_flags SEC(".maps");

// inflight holds a watched thread's syscall arguments from enter to exit.
//
// The requested paths of calls that return no descriptor (rename, unlink,
// mkdir, link, symlink, truncate) are copied here at syscall entry, right
// before the kernel copies them itself: read at exit, another thread of the
// process would have the whole call to rewrite the string and disguise
// what was renamed or removed. Paths longer than PRE_MAX are read at exit.
#define PRE_MAX 256
struct args {
	__u64 path1;
	__u64 path2;
	__u64 flags;
	__s32 dfd1;
	__s32 dfd2;
	__u32 op;
	__u32 slot;
	__u16 n1; // bytes of p1 read at entry, NUL included; 0: read at exit
	__u16 n2;
	__u32 nr; // the syscall number, matched again at exit
	char p1[PRE_MAX];
	char p2[PRE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct args);
} inflight SEC(".maps");

// args_zero is the all-zero value a thread's first inflight entry is
// inserted from (struct args does not fit the BPF stack).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct args);
} args_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

// scratch is where a record is assembled before it is copied, at its real
// length, into the ring. The data area has room for one more full read past
// EVENT_DATA_MAX so every bounded write at an offset below it stays inside.
struct buf {
	struct event ev;
	char data[EVENT_DATA_MAX + PATH_READ_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct buf);
} scratch SEC(".maps");

// daemon_state is written by user space only: when the daemon last showed
// it was alive and whether it stopped cleanly. It is pinned with the maps
// the programs use, so a restarted daemon knows how long nobody read the
// ring and the audit stream.
struct dstate {
	__u64 alive_ns;   // wall clock, Unix ns
	__u64 stopped_ns; // set by a clean stop that left the probes attached
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dstate);
} daemon_state SEC(".maps");

// Force BTF for the record type so bpf2go generates its Go twin.
const struct event *unused_event __attribute__((unused));

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
}

// flag_of returns the watched flag byte of tgid, or 0 beyond the flagged pids.
static __always_inline __u8 *flag_of(__u32 tgid)
{
	if (tgid >= PIDS_FLAGGED)
		return 0;
	__u32 block = tgid / FLAG_BLOCK;
	struct flag_block *fb = bpf_map_lookup_elem(&watched_flags, &block);
	if (!fb)
		return 0;
	return &fb->b[tgid & (FLAG_BLOCK - 1)];
}

// is_watched is the cheap filter: the flag byte, or the hash for pids
// beyond the flags.
static __always_inline bool is_watched(__u32 tgid)
{
	__u8 *f = flag_of(tgid);
	if (f)
		return *f != 0;
	return bpf_map_lookup_elem(&watched, &tgid) != 0;
}

static __always_inline void set_flag(__u32 tgid, __u8 v)
{
	__u8 *f = flag_of(tgid);
	if (f)
		*f = v;
}

static __always_inline __u32 *watched_slot(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	return bpf_map_lookup_elem(&watched, &tgid);
}

static __always_inline bool is_open(__u32 op)
{
	return op == OP_OPEN || op == OP_OPENAT || op == OP_OPENAT2 || op == OP_CREAT || op == OP_OPEN_BY_HANDLE_AT;
}

static __always_inline void pre_read(char *dst, __u16 *n, __u64 uptr)
{
	*n = 0;
	if (!uptr)
		return;
	long r = bpf_probe_read_user_str(dst, PRE_MAX, (const void *)uptr);
	if (r > 0 && r < PRE_MAX)
		*n = r;
}

static __always_inline int enter(__u32 *slot, __u32 nr, __u32 op, __s32 dfd1, __u64 path1, __s32 dfd2, __u64 path2, __u64 flags)
{
	// A thread's entry is reused in place from one syscall to the next:
	// lookups are lock-free, inserts and deletes take a bucket lock. It is
	// deleted when the thread exits (sched_exit) or its run is unwatched.
	__u64 id = bpf_get_current_pid_tgid();
	struct args *a = bpf_map_lookup_elem(&inflight, &id);
	if (!a) {
		__u32 zero = 0;
		struct args *z = bpf_map_lookup_elem(&args_zero, &zero);
		if (!z)
			return 0;
		if (bpf_map_update_elem(&inflight, &id, z, BPF_NOEXIST)) {
			count(STAT_INFLIGHT_FULL);
			return 0;
		}
		a = bpf_map_lookup_elem(&inflight, &id);
		if (!a)
			return 0;
	}
	a->path1 = path1;
	a->path2 = path2;
	a->flags = flags;
	a->dfd1 = dfd1;
	a->dfd2 = dfd2;
	a->slot = *slot;
	a->n1 = 0;
	a->n2 = 0;
	if (!is_open(op) && op != OP_IO_URING_SETUP) {
		pre_read(a->p1, &a->n1, path1);
		pre_read(a->p2, &a->n2, path2);
	}
	a->nr = nr;
	a->op = op; // last: marks the entry as a call in flight
	return 0;
}

// The probes read kernel structures with direct loads through BTF-typed
// pointers rather than one bpf_probe_read_kernel call per field: a dentry
// walk costs a few loads per component instead of several helper calls.
// bpf_rdonly_cast (a kfunc the verifier turns into a plain move) types a
// saved address again; loads through it are fault-safe (PROBE_MEM).
extern void *bpf_rdonly_cast(const void *obj__ign, __u32 btf_id__k) __ksym;
#define KCAST(type, p) ((type *)bpf_rdonly_cast((const void *)(p), bpf_core_type_id_kernel(type)))

// walk_state carries a dentry walk from one bpf_loop step to the next. A
// callback is verified once, however deep the walk goes, where an unrolled
// or bounded loop here exceeds the verifier's budget. Addresses are kept as
// plain numbers and typed again with KCAST in each step.
struct walk_state {
	__u64 mnt;    // struct mount *
	__u64 dentry; // struct dentry *
	__u64 root;   // the mount's root dentry
	__u64 top_mnt;    // the task's root directory (fs->root): the walk
	__u64 top_dentry; // ends there, as the task sees its paths
	__u32 off;
	__u32 done;
	__u32 truncated;
};

static long walk_step(__u32 i, struct walk_state *w)
{
	if (w->dentry == w->top_dentry && w->mnt == w->top_mnt) {
		w->done = 1; // the task's root (after chroot or pivot_root, its own)
		return 1;
	}
	struct dentry *dentry = KCAST(struct dentry, w->dentry);
	__u64 parent = (__u64)dentry->d_parent;
	if (w->dentry == w->root || w->dentry == parent) {
		struct mount *mnt = KCAST(struct mount, w->mnt);
		struct mount *mparent = mnt->mnt_parent;
		if (w->dentry != w->root || (__u64)mparent == w->mnt || !mparent) {
			w->done = 1; // the root of the mount tree (or of a pseudo fs)
			return 1;
		}
		w->dentry = (__u64)mnt->mnt_mountpoint;
		w->mnt = (__u64)mparent;
		w->root = (__u64)mparent->mnt.mnt_root;
		return 0;
	}
	__u32 zero = 0;
	struct buf *b = bpf_map_lookup_elem(&scratch, &zero);
	if (!b)
		return 1;
	__u32 off = w->off;
	if (off >= EVENT_DATA_MAX - NAME_READ_MAX) {
		w->truncated = 1;
		return 1;
	}
	long n = bpf_probe_read_kernel_str(&b->data[off & DATA_MASK], NAME_READ_MAX, dentry->d_name.name);
	if (n <= 0) {
		w->truncated = 1;
		return 1;
	}
	w->off = off + n;
	w->dentry = parent;
	return 0;
}

// walk writes the path of (vfsmnt, dentry) into b->data at *off: components
// from the leaf up, each NUL-terminated, crossing mount points up to the
// task's root directory, as d_path does: a server in a minimal root
// (pivot_root) or a container names its files as it sees them. A file
// outside that root (a descriptor from before the chroot) is named from the
// root of the mount tree instead. Returns the bytes written.
static __always_inline __u32 walk(struct buf *b, __u32 *off, __u64 vfsmnt, __u64 dentry)
{
	struct vfsmount *vm = KCAST(struct vfsmount, vfsmnt);
	struct task_struct *task = bpf_get_current_task_btf();
	struct fs_struct *fs = task->fs;
	__u64 top_mnt = 0, top_dentry = 0;
	if (fs) {
		top_mnt = (__u64)fs->root.mnt - bpf_core_field_offset(struct mount, mnt);
		top_dentry = (__u64)fs->root.dentry;
	}
	struct walk_state w = {
		.mnt = vfsmnt - bpf_core_field_offset(struct mount, mnt),
		.dentry = dentry,
		.root = (__u64)vm->mnt_root,
		.top_mnt = top_mnt,
		.top_dentry = top_dentry,
		.off = *off,
	};
	bpf_loop(WALK_DEPTH_MAX, walk_step, &w, 0);
	if (!w.done || w.truncated)
		b->ev.ev_flags |= EVF_TRUNCATED;
	__u32 n = w.off - *off;
	*off = w.off;
	return n;
}

// walk_fd walks the path of descriptor fd, or the cwd for AT_FDCWD.
static __always_inline __u32 walk_fd(struct buf *b, __u32 *off, int fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 mnt = 0, dentry = 0;
	if (fd == AT_FDCWD) {
		struct fs_struct *fs = task->fs;
		if (fs) {
			mnt = (__u64)fs->pwd.mnt;
			dentry = (__u64)fs->pwd.dentry;
		}
	} else if (fd >= 0) {
		struct fdtable *fdt = task->files->fdt;
		if (fdt && (unsigned int)fd < fdt->max_fds) {
			struct file **fds = fdt->fd;
			__u64 fp = 0;
			bpf_probe_read_kernel(&fp, sizeof(fp), &fds[fd]);
			if (fp) {
				struct file *f = KCAST(struct file, fp);
				mnt = (__u64)f->f_path.mnt;
				dentry = (__u64)f->f_path.dentry;
			}
		}
	}
	if (!mnt || !dentry) {
		b->ev.ev_flags |= EVF_NO_DIR;
		return 0;
	}
	return walk(b, off, mnt, dentry);
}

// user_path copies a requested path; when it is relative, the walk of the
// directory it is resolved against follows it.
static __always_inline void user_path(struct buf *b, __u32 *off, int field, __u64 uptr, int dfd, const char *pre, __u16 npre)
{
	if (*off >= EVENT_DATA_MAX - PATH_READ_MAX) {
		b->ev.ev_flags |= EVF_TRUNCATED;
		return;
	}
	__u32 at = *off & DATA_MASK;
	long n;
	if (npre > 0) {
		// the copy taken at syscall entry
		n = npre & (PRE_MAX - 1);
		if (bpf_probe_read_kernel(&b->data[at], n, pre))
			n = -1;
	} else {
		n = bpf_probe_read_user_str(&b->data[at], PATH_READ_MAX, (const void *)uptr);
	}
	if (n <= 0) {
		b->ev.ev_flags |= EVF_FAULT;
		return;
	}
	*off += n;
	b->ev.field_len[field] = n;
	if (b->data[at] != '/')
		b->ev.field_len[field + 1] = walk_fd(b, off, dfd);
}


// ns_nr is a struct pid's number in its innermost pid namespace (the
// task's own, the one its /proc names it by); numbers[] has level+1 entries.
static __always_inline __u32 ns_nr(struct pid *pid)
{
	if (!pid)
		return 0;
	__u32 level = pid->level;
	if (level > 32)
		return 0;
	__u64 at = (__u64)pid + bpf_core_field_offset(struct pid, numbers) + (__u64)level * bpf_core_type_size(struct upid);
	int nr = 0;
	bpf_probe_read_kernel(&nr, sizeof(nr), (void *)at);
	return nr;
}

static __always_inline struct buf *new_buf(__u32 op, __u32 slot)
{
	__u32 zero = 0;
	struct buf *b = bpf_map_lookup_elem(&scratch, &zero);
	if (!b)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	b->ev.ktime_ns = bpf_ktime_get_ns();
	b->ev.tgid = id >> 32;
	b->ev.pid = (__u32)id;
	b->ev.slot = slot;
	b->ev.op = op;
	b->ev.ret = 0;
	b->ev.flags = 0;
	b->ev.ev_flags = 0;
	for (int i = 0; i < EVENT_FIELDS; i++)
		b->ev.field_len[i] = 0;
	bpf_get_current_comm(b->ev.comm, sizeof(b->ev.comm));
	struct task_struct *task = bpf_get_current_task_btf();
	b->ev.ns_pid = ns_nr(task->thread_pid);
	b->ev.ns_tgid = ns_nr(task->group_leader->thread_pid);
	return b;
}

static __always_inline void submit(struct buf *b, __u32 len)
{
	if (b->ev.ev_flags & EVF_TRUNCATED)
		count(STAT_TRUNCATED);
	if (len > EVENT_DATA_MAX)
		len = EVENT_DATA_MAX;
	__u64 flags = 0;
	if (wakeup_bytes) {
		__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
		flags = avail + sizeof(b->ev) + len >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	}
	if (bpf_ringbuf_output(&events, b, sizeof(b->ev) + len, flags)) {
		count(STAT_RB_DROPS);
		return;
	}
	count(STAT_EVENTS);
}

// leave builds the record of the call in flight on this thread, if it is
// the syscall nr that is ending.
static __always_inline int leave(long nr, long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct args *a = bpf_map_lookup_elem(&inflight, &id);
	if (!a || !a->op || a->nr != (__u32)nr)
		return 0;
	__u32 op = a->op;

	struct buf *b = new_buf(op, a->slot);
	if (!b) {
		a->op = 0;
		return 0;
	}
	b->ev.ret = ret;
	b->ev.flags = a->flags;
	__u32 off = 0;
	if (op == OP_IO_URING_SETUP || (op == OP_OPEN_BY_HANDLE_AT && ret < 0)) {
		// no path: a failed open_by_handle_at names a file handle, not a path
		if (op == OP_OPEN_BY_HANDLE_AT)
			b->ev.ev_flags |= EVF_FAULT;
	} else if (is_open(op) && ret >= 0) {
		b->ev.ev_flags |= EVF_FD_RESOLVED;
		b->ev.field_len[1] = walk_fd(b, &off, (int)ret);
	} else {
		user_path(b, &off, 0, a->path1, a->dfd1, a->p1, a->n1);
		if (a->path2)
			user_path(b, &off, 2, a->path2, a->dfd2, a->p2, a->n2);
	}
	a->op = 0; // consumed; the entry stays for the thread's next call
	submit(b, off);
	return 0;
}

// Syscall numbers of the hooked operations, per ABI: sysops[nr] holds the
// native op in its low byte and, on x86_64, the i386 (compat) op of the same
// number in its high byte. The numbers differ between architectures and
// between native and compat syscalls; the op numbering (enum op) does not.
// A table in .rodata is one bounds check and one load per syscall.
#define SYSOPS_MAX 512
#define N(op) (op)
#define C(op) ((op) << 8)
#if defined(__TARGET_ARCH_x86)
static const __u16 sysops[SYSOPS_MAX] = {
	/* x86_64 */
	[2] = N(OP_OPEN), [257] = N(OP_OPENAT), [437] = N(OP_OPENAT2) | C(OP_OPENAT2), [85] = N(OP_CREAT),
	[82] = N(OP_RENAME), [264] = N(OP_RENAMEAT), [316] = N(OP_RENAMEAT2),
	[87] = N(OP_UNLINK), [263] = N(OP_UNLINKAT), [84] = N(OP_RMDIR), [83] = N(OP_MKDIR) | C(OP_SYMLINK),
	[258] = N(OP_MKDIRAT), [76] = N(OP_TRUNCATE), [86] = N(OP_LINK), [265] = N(OP_LINKAT),
	[88] = N(OP_SYMLINK), [266] = N(OP_SYMLINKAT), [304] = N(OP_OPEN_BY_HANDLE_AT) | C(OP_SYMLINKAT),
	[425] = N(OP_IO_URING_SETUP) | C(OP_IO_URING_SETUP),
	/* i386 (int 0x80, sysenter) of a 64-bit process or a 32-bit binary */
	[5] = C(OP_OPEN), [295] = C(OP_OPENAT), [8] = C(OP_CREAT),
	[38] = C(OP_RENAME), [302] = C(OP_RENAMEAT), [353] = C(OP_RENAMEAT2),
	[10] = C(OP_UNLINK), [301] = C(OP_UNLINKAT), [40] = C(OP_RMDIR), [39] = C(OP_MKDIR),
	[296] = C(OP_MKDIRAT), [92] = C(OP_TRUNCATE), [193] = C(OP_TRUNCATE) /* truncate64 */,
	[9] = C(OP_LINK), [303] = C(OP_LINKAT), [342] = C(OP_OPEN_BY_HANDLE_AT),
};

#define X32_SYSCALL_BIT 0x40000000

// sysop_of returns the table entry of a syscall number (0: not hooked).
// x32 syscalls use the native numbers with bit 30 set.
static __always_inline __u16 sysop_of(long nr)
{
	__u64 n = (__u64)nr & ~(__u64)X32_SYSCALL_BIT;
	if (n >= SYSOPS_MAX)
		return 0;
	return sysops[n];
}

// op_of picks the op of the calling task's ABI from a table entry.
static __always_inline __u32 op_of(__u16 v, bool *compat)
{
	struct task_struct *task = bpf_get_current_task_btf();
	*compat = (task->thread_info.status & TS_COMPAT) != 0;
	return *compat ? v >> 8 : v & 0xff;
}

// arg returns syscall argument i: x86_64 passes them in di, si, dx, r10,
// r8, r9; i386 in bx, cx, dx, si, di, bp (32 bits each).
static __always_inline __u64 arg(struct pt_regs *regs, int i, bool compat)
{
	if (compat) {
		switch (i) {
		case 0: return (__u32)regs->bx;
		case 1: return (__u32)regs->cx;
		case 2: return (__u32)regs->dx;
		case 3: return (__u32)regs->si;
		case 4: return (__u32)regs->di;
		}
		return (__u32)regs->bp;
	}
	switch (i) {
	case 0: return regs->di;
	case 1: return regs->si;
	case 2: return regs->dx;
	case 3: return regs->r10;
	case 4: return regs->r8;
	}
	return regs->r9;
}

static __always_inline long regs_nr(struct pt_regs *regs) { return regs->orig_ax; }

#elif defined(__TARGET_ARCH_arm64)
// arm64 has only the *at variants (asm-generic numbering). 32-bit (AArch32)
// tasks are not decoded (docs/daemon.md, Known limits).
static const __u16 sysops[SYSOPS_MAX] = {
	[56] = N(OP_OPENAT), [437] = N(OP_OPENAT2), [38] = N(OP_RENAMEAT), [276] = N(OP_RENAMEAT2),
	[35] = N(OP_UNLINKAT), [34] = N(OP_MKDIRAT), [45] = N(OP_TRUNCATE), [37] = N(OP_LINKAT),
	[36] = N(OP_SYMLINKAT), [265] = N(OP_OPEN_BY_HANDLE_AT), [425] = N(OP_IO_URING_SETUP),
};

static __always_inline __u16 sysop_of(long nr)
{
	if ((__u64)nr >= SYSOPS_MAX)
		return 0;
	return sysops[nr];
}

static __always_inline __u32 op_of(__u16 v, bool *compat)
{
	*compat = false;
	return v & 0xff;
}

static __always_inline __u64 arg(struct pt_regs *regs, int i, bool compat)
{
	return regs->regs[i & 7];
}

static __always_inline long regs_nr(struct pt_regs *regs) { return regs->syscallno; }
#endif

#define A(i) arg(regs, i, compat)
#define FD(i) ((__s32)arg(regs, i, compat))

// sys_enter runs on every syscall of every task. The filter comes first:
// the syscall number (one table load), then the process (one flag load).
SEC("tp_btf/sys_enter")
int sys_enter(__u64 *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	long nr = (long)ctx[1];
	__u16 v = sysop_of(nr);
	if (!v)
		return 0;
	if (!is_watched(bpf_get_current_pid_tgid() >> 32))
		return 0;
	__u32 *slot = watched_slot();
	if (!slot)
		return 0;
	bool compat;
	__u32 op = op_of(v, &compat);
	switch (op) {
	case OP_OPEN: return enter(slot, nr, op, AT_FDCWD, A(0), 0, 0, A(1));
	case OP_OPENAT: return enter(slot, nr, op, FD(0), A(1), 0, 0, A(2));
	case OP_OPENAT2: {
		struct open_how how = {};
		bpf_probe_read_user(&how, sizeof(how), (void *)A(2));
		return enter(slot, nr, op, FD(0), A(1), 0, 0, how.flags);
	}
	case OP_CREAT: return enter(slot, nr, op, AT_FDCWD, A(0), 0, 0, O_CREAT | O_WRONLY | O_TRUNC);
	case OP_RENAME: return enter(slot, nr, op, AT_FDCWD, A(0), AT_FDCWD, A(1), 0);
	case OP_RENAMEAT: return enter(slot, nr, op, FD(0), A(1), FD(2), A(3), 0);
	case OP_RENAMEAT2: return enter(slot, nr, op, FD(0), A(1), FD(2), A(3), A(4));
	case OP_UNLINK: return enter(slot, nr, op, AT_FDCWD, A(0), 0, 0, 0);
	case OP_UNLINKAT: return enter(slot, nr, op, FD(0), A(1), 0, 0, A(2));
	case OP_RMDIR: return enter(slot, nr, op, AT_FDCWD, A(0), 0, 0, 0);
	case OP_MKDIR: return enter(slot, nr, op, AT_FDCWD, A(0), 0, 0, 0);
	case OP_MKDIRAT: return enter(slot, nr, op, FD(0), A(1), 0, 0, 0);
	case OP_TRUNCATE: return enter(slot, nr, op, AT_FDCWD, A(0), 0, 0, 0);
	case OP_LINK: return enter(slot, nr, op, AT_FDCWD, A(0), AT_FDCWD, A(1), 0);
	case OP_LINKAT: return enter(slot, nr, op, FD(0), A(1), FD(2), A(3), A(4));
	// symlink's target is only a string stored in the link; what matters to
	// a scope is where the link is created (following it later is an open).
	case OP_SYMLINK: return enter(slot, nr, op, AT_FDCWD, A(1), 0, 0, 0);
	case OP_SYMLINKAT: return enter(slot, nr, op, FD(1), A(2), 0, 0, 0);
	// open_by_handle_at opens by file handle, not by path: only the
	// returned descriptor says what was opened.
	case OP_OPEN_BY_HANDLE_AT: return enter(slot, nr, op, 0, 0, 0, 0, A(2));
	// io_uring submits file operations no syscall hook sees: setting one up
	// in a watched tree is itself the finding.
	case OP_IO_URING_SETUP: return enter(slot, nr, op, 0, 0, 0, 0, A(1));
	}
	return 0;
}

// sys_exit: the same filter; a watched thread's call in flight is matched
// by its syscall number.
SEC("tp_btf/sys_exit")
int sys_exit(__u64 *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	long ret = (long)ctx[1];
	long nr = regs_nr(regs);
	if (!sysop_of(nr))
		return 0;
	if (!is_watched(bpf_get_current_pid_tgid() >> 32))
		return 0;
	return leave(nr, ret);
}

static __always_inline void proc_event(__u32 op, __u32 slot, __s64 ret)
{
	struct buf *b = new_buf(op, slot);
	if (!b)
		return;
	b->ev.ret = ret;
	submit(b, 0);
}

// A child of a watched process joins its parent's run. Threads share the
// parent's tgid and need no entry of their own.
SEC("tp_btf/sched_process_fork")
int sched_fork(__u64 *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 ptgid = parent->tgid;
	__u32 *slot = bpf_map_lookup_elem(&watched, &ptgid);
	if (!slot)
		return 0;
	__u32 ctgid = child->tgid;
	if (ctgid == ptgid)
		return 0;
	__u32 s = *slot;
	if (bpf_map_update_elem(&watched, &ctgid, &s, BPF_ANY)) {
		count(STAT_WATCH_FULL);
		return 0;
	}
	set_flag(ctgid, 1);
	proc_event(OP_FORK, s, ctgid);
	return 0;
}

// The exec record names the new executable by inode (ret) and device
// (flags, the kernel's dev_t): the daemon tells the launcher's fence
// helper, whose exec does not start the server, from the server.
SEC("tp_btf/sched_process_exec")
int sched_exec(__u64 *ctx)
{
	__u32 *slot = watched_slot();
	if (!slot)
		return 0;
	struct buf *b = new_buf(OP_EXEC, *slot);
	if (!b)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct mm_struct *mm = task->mm;
	if (mm && mm->exe_file) {
		struct inode *inode = mm->exe_file->f_inode;
		b->ev.ret = inode->i_ino;
		b->ev.flags = inode->i_sb->s_dev;
	}
	submit(b, 0);
	return 0;
}

// Every exiting thread of a watched process frees its inflight entry; the
// process leaves its run when its last thread exits (signal->live has
// dropped to zero by the time the tracepoint fires).
SEC("tp_btf/sched_process_exit")
int sched_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 *slot = bpf_map_lookup_elem(&watched, &tgid);
	if (!slot)
		return 0;
	bpf_map_delete_elem(&inflight, &id); // this thread's argument slot
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->signal->live.counter != 0)
		return 0;
	__u32 s = *slot;
	set_flag(tgid, 0);
	bpf_map_delete_elem(&watched, &tgid);
	proc_event(OP_EXIT, s, task->exit_code);
	return 0;
}
