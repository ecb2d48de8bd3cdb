/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * The record the probes put on the ring buffer. daemon/kevent decodes it; its
 * layout is checked against the bpf2go-generated Go type by a test, so change
 * both together.
 */
#ifndef MCPWARDEN_EVENT_H
#define MCPWARDEN_EVENT_H

/* Operations, our own numbering (stable across architectures, unlike
 * syscall numbers). */
enum op {
	OP_OPEN = 1,
	OP_OPENAT = 2,
	OP_OPENAT2 = 3,
	OP_CREAT = 4,
	OP_RENAME = 5,
	OP_RENAMEAT = 6,
	OP_RENAMEAT2 = 7,
	OP_UNLINK = 8,
	OP_UNLINKAT = 9,
	OP_RMDIR = 10,
	OP_MKDIR = 11,
	OP_MKDIRAT = 12,
	OP_TRUNCATE = 13,
	OP_LINK = 14,
	OP_LINKAT = 15,
	OP_SYMLINK = 16,
	OP_SYMLINKAT = 17,
	OP_IO_URING_SETUP = 18,
	OP_OPEN_BY_HANDLE_AT = 19,
	/* Process tree events of watched processes. */
	OP_FORK = 64,
	OP_EXEC = 65,
	OP_EXIT = 66,
};

/* Event flags. */
enum event_flag {
	EVF_FD_RESOLVED = 1 << 0, /* field 1 is the walk of the returned fd */
	EVF_TRUNCATED = 1 << 1,   /* a path was longer or deeper than the probes read */
	EVF_FAULT = 1 << 2,       /* a user string could not be read */
	EVF_NO_DIR = 1 << 3,      /* the dirfd/cwd of a relative path could not be walked */
};

/* Number of variable-length fields after the header:
 *   0: requested path 1 (user string, NUL-terminated) — empty when EVF_FD_RESOLVED
 *   1: walked path 1: the returned fd's path (EVF_FD_RESOLVED) or the dirfd/cwd
 *      that a relative path 1 is resolved against; components leaf first, each
 *      NUL-terminated
 *   2: requested path 2 (rename/link targets)
 *   3: walked dirfd/cwd of a relative path 2
 */
#define EVENT_FIELDS 4

/* Upper bound of the data after the header. */
#define EVENT_DATA_MAX 8192

struct event {
	__u64 ktime_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u32 tgid;
	__u32 pid;      /* thread id */
	__u32 slot;     /* run slot of the watched process */
	__u32 op;       /* enum op */
	__s64 ret;      /* syscall return value; exit code for OP_EXIT; child tgid for OP_FORK; inode of the new executable for OP_EXEC */
	__u64 flags;    /* open flags / renameat2 flags / unlinkat flags; its device (kernel dev_t) for OP_EXEC */
	__u32 ev_flags; /* enum event_flag */
	__u16 field_len[EVENT_FIELDS];
	char comm[16];
	__u32 ns_tgid;  /* tgid and thread id in the task's own (innermost) pid */
	__u32 ns_pid;   /* namespace: what its /proc calls it */
};

#endif
