//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
//
// Kernel side of mcpwarden's observation: syscall tracepoints on the file
// operations a scope must see, and the scheduler's fork/exec/exit tracepoints
// to follow each run's process tree. Only processes in the `watched` map (a
// run's tree) produce events; every other process leaves after one hash lookup.

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
	__u32 pad;
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

// Force BTF for the record type so bpf2go generates its Go twin.
const struct event *unused_event __attribute__((unused));

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
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

static __always_inline int enter(__u32 op, __s32 dfd1, __u64 path1, __s32 dfd2, __u64 path2, __u64 flags)
{
	__u32 *slot = watched_slot();
	if (!slot)
		return 0;
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
	__u32 off;
	__u32 done;
	__u32 truncated;
};

static long walk_step(__u32 i, struct walk_state *w)
{
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
// root of the mount tree. Returns the bytes written.
static __always_inline __u32 walk(struct buf *b, __u32 *off, __u64 vfsmnt, __u64 dentry)
{
	struct vfsmount *vm = KCAST(struct vfsmount, vfsmnt);
	struct walk_state w = {
		.mnt = vfsmnt - bpf_core_field_offset(struct mount, mnt),
		.dentry = dentry,
		.root = (__u64)vm->mnt_root,
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

static __always_inline int leave(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct args *a = bpf_map_lookup_elem(&inflight, &id);
	if (!a || !a->op)
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

#define ENTER(name) SEC("tracepoint/syscalls/sys_enter_" #name) int enter_##name(struct syscall_enter_ctx *ctx)
#define EXIT(name)                                                              \
	SEC("tracepoint/syscalls/sys_exit_" #name) int exit_##name(struct syscall_exit_ctx *ctx) \
	{                                                                       \
		return leave(ctx->ret);                                         \
	}
#define A(i) (ctx->args[i])
#define FD(i) ((__s32)ctx->args[i])

ENTER(open) { return enter(OP_OPEN, AT_FDCWD, A(0), 0, 0, A(1)); }
EXIT(open)
ENTER(openat) { return enter(OP_OPENAT, FD(0), A(1), 0, 0, A(2)); }
EXIT(openat)
ENTER(openat2)
{
	__u32 *slot = watched_slot();
	if (!slot)
		return 0;
	struct open_how how = {};
	bpf_probe_read_user(&how, sizeof(how), (void *)A(2));
	return enter(OP_OPENAT2, FD(0), A(1), 0, 0, how.flags);
}
EXIT(openat2)
ENTER(creat) { return enter(OP_CREAT, AT_FDCWD, A(0), 0, 0, O_CREAT | O_WRONLY | O_TRUNC); }
EXIT(creat)
ENTER(rename) { return enter(OP_RENAME, AT_FDCWD, A(0), AT_FDCWD, A(1), 0); }
EXIT(rename)
ENTER(renameat) { return enter(OP_RENAMEAT, FD(0), A(1), FD(2), A(3), 0); }
EXIT(renameat)
ENTER(renameat2) { return enter(OP_RENAMEAT2, FD(0), A(1), FD(2), A(3), A(4)); }
EXIT(renameat2)
ENTER(unlink) { return enter(OP_UNLINK, AT_FDCWD, A(0), 0, 0, 0); }
EXIT(unlink)
ENTER(unlinkat) { return enter(OP_UNLINKAT, FD(0), A(1), 0, 0, A(2)); }
EXIT(unlinkat)
ENTER(rmdir) { return enter(OP_RMDIR, AT_FDCWD, A(0), 0, 0, 0); }
EXIT(rmdir)
ENTER(mkdir) { return enter(OP_MKDIR, AT_FDCWD, A(0), 0, 0, 0); }
EXIT(mkdir)
ENTER(mkdirat) { return enter(OP_MKDIRAT, FD(0), A(1), 0, 0, 0); }
EXIT(mkdirat)
ENTER(truncate) { return enter(OP_TRUNCATE, AT_FDCWD, A(0), 0, 0, 0); }
EXIT(truncate)
ENTER(link) { return enter(OP_LINK, AT_FDCWD, A(0), AT_FDCWD, A(1), 0); }
EXIT(link)
ENTER(linkat) { return enter(OP_LINKAT, FD(0), A(1), FD(2), A(3), A(4)); }
EXIT(linkat)
// symlink's target is only a string stored in the link; what matters to a
// scope is where the link is created (following it later is an open).
ENTER(symlink) { return enter(OP_SYMLINK, AT_FDCWD, A(1), 0, 0, 0); }
EXIT(symlink)
ENTER(symlinkat) { return enter(OP_SYMLINKAT, FD(1), A(2), 0, 0, 0); }
EXIT(symlinkat)
// open_by_handle_at opens by file handle, not by path: only the returned
// descriptor says what was opened.
ENTER(open_by_handle_at) { return enter(OP_OPEN_BY_HANDLE_AT, 0, 0, 0, 0, A(2)); }
EXIT(open_by_handle_at)
// io_uring submits file operations no syscall tracepoint sees: setting one
// up in a watched tree is itself the finding.
ENTER(io_uring_setup) { return enter(OP_IO_URING_SETUP, 0, 0, 0, 0, A(1)); }
EXIT(io_uring_setup)

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
SEC("raw_tracepoint/sched_process_fork")
int sched_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (void *)ctx->args[0];
	struct task_struct *child = (void *)ctx->args[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 *slot = bpf_map_lookup_elem(&watched, &ptgid);
	if (!slot)
		return 0;
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	if (ctgid == ptgid)
		return 0;
	__u32 s = *slot;
	if (bpf_map_update_elem(&watched, &ctgid, &s, BPF_ANY)) {
		count(STAT_WATCH_FULL);
		return 0;
	}
	proc_event(OP_FORK, s, ctgid);
	return 0;
}

SEC("raw_tracepoint/sched_process_exec")
int sched_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 *slot = watched_slot();
	if (!slot)
		return 0;
	proc_event(OP_EXEC, *slot, 0);
	return 0;
}

// Every exiting thread of a watched process frees its inflight entry; the
// process leaves its run when its last thread exits (signal->live has
// dropped to zero by the time the tracepoint fires).
SEC("raw_tracepoint/sched_process_exit")
int sched_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 *slot = bpf_map_lookup_elem(&watched, &tgid);
	if (!slot)
		return 0;
	bpf_map_delete_elem(&inflight, &id); // this thread's argument slot
	struct task_struct *task = (void *)bpf_get_current_task();
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	__u32 s = *slot;
	bpf_map_delete_elem(&watched, &tgid);
	proc_event(OP_EXIT, s, BPF_CORE_READ(task, exit_code));
	return 0;
}
