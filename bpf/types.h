/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Minimal kernel type definitions for watch.bpf.c.
 *
 * Instead of a multi-megabyte vmlinux.h, only the fields the probes read are
 * declared here. Every struct carries preserve_access_index, so the loader
 * (cilium/ebpf) relocates each field offset against the running kernel's BTF
 * (CO-RE); the layout below is only a name-and-type contract, not an ABI.
 */
#ifndef MCPWARDEN_TYPES_H
#define MCPWARDEN_TYPES_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* From include/uapi/linux/bpf.h. */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};
enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};
enum {
	BPF_F_MMAPABLE = 1U << 10,
};
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};
enum {
	BPF_RB_AVAIL_DATA = 0,
};

#define __pai __attribute__((preserve_access_index))

struct qstr {
	const unsigned char *name;
} __pai;

struct dentry {
	struct dentry *d_parent;
	struct qstr d_name;
} __pai;

struct vfsmount {
	struct dentry *mnt_root;
} __pai;

struct mount {
	struct mount *mnt_parent;
	struct dentry *mnt_mountpoint;
	struct vfsmount mnt;
} __pai;

struct path {
	struct vfsmount *mnt;
	struct dentry *dentry;
} __pai;

struct file {
	struct path f_path;
	struct inode *f_inode;
} __pai;

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __pai;

struct files_struct {
	struct fdtable *fdt;
} __pai;

struct fs_struct {
	struct path root;
	struct path pwd;
} __pai;

typedef struct {
	int counter;
} atomic_t;

struct signal_struct {
	atomic_t live;
} __pai;

/* x86: thread_info is embedded in task_struct; TS_COMPAT in status marks an
 * i386 (int 0x80 / sysenter) syscall in progress. */
#if defined(__TARGET_ARCH_x86)
struct thread_info {
	__u32 status;
} __pai;
#define TS_COMPAT 0x0002
#endif

struct super_block {
	__u32 s_dev; /* dev_t: MAJOR << 20 | MINOR */
} __pai;

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __pai;

struct mm_struct {
	struct file *exe_file;
} __pai;

struct upid {
	int nr;
} __pai;

struct pid {
	unsigned int level;
	struct upid numbers[1];
} __pai;

struct task_struct {
#if defined(__TARGET_ARCH_x86)
	struct thread_info thread_info;
#endif
	int pid;
	int tgid;
	struct task_struct *group_leader;
	struct pid *thread_pid;
	struct mm_struct *mm;
	int exit_code;
	struct files_struct *files;
	struct fs_struct *fs;
	struct signal_struct *signal;
} __pai;

struct open_how {
	__u64 flags;
	__u64 mode;
	__u64 resolve;
};

/* The user registers of a task in a syscall, as the sys_enter / sys_exit
 * tracepoints pass them. */
#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long bp;
	unsigned long bx;
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
} __pai;
#elif defined(__TARGET_ARCH_arm64)
struct pt_regs {
	__u64 regs[31];
	__s32 syscallno;
} __pai;
#else
#error "watch.bpf.c supports x86 and arm64: build it through bpf2go with -target amd64,arm64"
#endif

#endif
