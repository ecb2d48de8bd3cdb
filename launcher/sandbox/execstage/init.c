/*
 * The run's init: the launcher clones this program (as "mcpwarden-init",
 * argv[1] "plan") straight into the run's new mount, pid, ipc, uts (and
 * network) namespaces and its cgroup, as pid 1. It reads the plan the
 * launcher computed (handover.h) on fd 3, checks it whole, and then
 * performs it with plain system calls in a fixed order, deciding nothing:
 *
 *   1. the run's /proc (the mount tree made private first), the host name,
 *      loopback; the Landlock ruleset (empty);
 *   2. the exec stage: a fork of this process, in the server's own user
 *      namespace when the plan has one (its uid and gid maps written here),
 *      which holds the ruleset and waits;
 *   3. the minimal root: a tmpfs on the staging directory, each mount of
 *      the plan in its order (a bind of the host path, opened with
 *      RESOLVE_NO_SYMLINKS, idmapped to the stage's user namespace where
 *      the plan says so; or a mask: an empty, mode-000, read-only file or
 *      directory over a secret of the scope), the links, directories, the
 *      private TMPDIR, the run's /proc and its sysctls, pivot_root, the
 *      root made read-only;
 *   4. the /proc pins and the ruleset's rules (each path opened with
 *      RESOLVE_NO_SYMLINKS: a symlink swapped in refuses the run);
 *   5. its own privileges given up (one system call each), then the stage
 *      told the run is set up;
 *   6. the stage reads the launcher's go-ahead itself (fd 3), applies the
 *      fence (stage.c) and execs the server; this process reports "ready"
 *      and "started" in one write (the stage's status pipe closed on
 *      exec), or "ready" and the stage's failure, then reaps every process of the run, forwards signals to
 *      the server, and exits with its status, which ends every other
 *      process of the run with it.
 *
 * Any failure is one status line on fd 4 naming the step and, where there
 * is one, the path (never a file's content), and exit status 127: nothing
 * of the server ran.
 *
 *   fds: 0-2 the server's stdio, 3 the launcher's plan pipe (then the go
 *        byte), 4 the launcher's status pipe, 5 this program's file
 *        (closed at once).
 */
#define _GNU_SOURCE
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROOT_TMPFS_OPTIONS "mode=0755,size=4m,nr_inodes=16384" /* directories, mount points and links only */
#define SECBIT_NO_SETUID_FIXUP_ (1 << 2)
#define PIN_FLOOR 200

/* Landlock's structures, as the kernel takes them (ABI 6; the C library's
 * headers may predate the network and scope fields). */
struct ll_ruleset_attr {
	uint64_t handled_access_fs, handled_access_net, scoped;
};
struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));
struct ll_net_port_attr {
	uint64_t allowed_access, port;
};
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2

static volatile pid_t server = 0;

static void forward(int sig)
{
	int e = errno;
	if (server > 0)
		kill(server, sig);
	errno = e;
}

/* rootfail reports a failed step of the root for path, with errno. */
static int rootfail(const char *path, const char *what)
{
	return fail("root", errno, path, what);
}

/* mkdir_p makes the directory at (mode) and its parents (mode 0755). */
static int mkdir_p(const char *at, mode_t mode)
{
	char p[2 * HO_MAX_PATH + 2];
	size_t n = strlen(at);
	if (n >= sizeof(p)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	/* Its parent is usually there already (the mounts go parents first):
	 * one mkdir then, not one per component from the top. */
	if (mkdir(at, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -1;
	memcpy(p, at, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != 0)
			continue;
		char c = p[i];
		p[i] = 0;
		if (mkdir(p, i == n ? mode : 0755) != 0 && errno != EEXIST)
			return -1;
		p[i] = c;
	}
	return 0;
}

/* dirname_of writes the directory of path into b. */
static void dirname_of(const char *path, char *b, size_t n)
{
	snprintf(b, n, "%s", path);
	char *s = strrchr(b, '/');
	if (s != NULL && s != b)
		*s = 0;
}

/* mount_point makes the directory or empty file at to mount on, and its
 * parents; one already there (through a bind above it) is used as it is. */
static int mount_point(const char *at, int dir)
{
	for (int try = 0; try < 2; try++) {
		int rc;
		if (dir) {
			rc = mkdir(at, 0755);
		} else {
			rc = open(at, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
			if (rc >= 0)
				close(rc);
		}
		if (rc >= 0 || errno == EEXIST)
			return 0;
		if (errno != ENOENT || try == 1)
			return -1;
		char parent[2 * HO_MAX_PATH + 2];
		dirname_of(at, parent, sizeof(parent));
		if (mkdir_p(parent, 0755) != 0)
			return -1;
	}
	return -1;
}

static int openat2_nosym(const char *path, uint64_t flags)
{
	struct open_how how = {.flags = flags, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	return (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
}

/* bind_into bind-mounts the host path m onto the same path below top: the
 * source opened with RESOLVE_NO_SYMLINKS (the launcher sends canonical
 * paths, so a symlink means a swap since the scope was checked). */
static int bind_into(const char *top, const struct ho_mount *m, int idmap)
{
	int src = openat2_nosym(m->path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
	if (src < 0) {
		if (errno == ELOOP)
			return fail("root", 0, m->path, "bind: it became a symlink after the scope was checked; refusing to run");
		return rootfail(m->path, "bind: open");
	}
	struct stat st;
	int rc = -1;
	if (fstat(src, &st) != 0) {
		rc = rootfail(m->path, "bind: stat");
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {
		rc = fail("root", 0, m->path, "bind: it became a symlink after the scope was checked; refusing to run");
		goto out;
	}
	int dir = S_ISDIR(st.st_mode);
	if (dir != !!(m->flags & HO_M_DIR)) {
		rc = fail("root", 0, m->path, dir ? "bind: it is no longer a file" : "bind: it is no longer a directory");
		goto out;
	}
	if ((m->flags & HO_M_DEV) && !S_ISCHR(st.st_mode)) {
		rc = fail("root", 0, m->path, "bind: not a character device");
		goto out;
	}
	char at[2 * HO_MAX_PATH + 2];
	snprintf(at, sizeof(at), "%s%s", top, m->path);
	if (mount_point(at, dir) != 0) {
		rc = rootfail(m->path, "bind: make its mount point");
		goto out;
	}
	int tree = (int)syscall(SYS_open_tree, src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
	if (tree < 0) {
		rc = rootfail(m->path, "bind: clone its mount");
		goto out;
	}
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID};
	if (!(m->flags & HO_M_WRITE))
		attr.attr_set |= MOUNT_ATTR_RDONLY;
	if (!(m->flags & HO_M_EXEC))
		attr.attr_set |= MOUNT_ATTR_NOEXEC;
	if (!(m->flags & HO_M_DEV))
		attr.attr_set |= MOUNT_ATTR_NODEV;
	if (m->flags & HO_M_IDMAP) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)idmap;
	}
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
		if ((m->flags & HO_M_IDMAP) && (errno == EINVAL || errno == EPERM))
			rc = rootfail(m->path, "bind: set its mount attributes (its file system may not support idmapped mounts; --owner with the files' owner or a scope on ext4, xfs, btrfs or tmpfs avoids them)");
		else
			rc = rootfail(m->path, "bind: set its mount attributes");
	} else if (syscall(SYS_move_mount, tree, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
		rc = rootfail(m->path, "bind: attach it");
	} else {
		rc = 0;
	}
	close(tree);
out:
	close(src);
	return rc;
}

/* MASK_DIR holds, in the root's own tmpfs, the empty file and directory
 * that the masks are clones of; it is removed before pivot_root. */
#define MASK_DIR "/.mcpwarden-mask"

/* mask_into covers m->path below top with a read-only clone of the empty
 * file or directory of MASK_DIR (made on first use, *made set). The
 * target is opened beneath top without following any symlink; one gone
 * since the launcher's walk is skipped. The path of a secret is never
 * named. */
static int mask_into(const char *top, const struct ho_mount *m, int *made)
{
	char p[2 * HO_MAX_PATH + 2];
	if (!*made) {
		snprintf(p, sizeof(p), "%s" MASK_DIR, top);
		if (mkdir(p, 0) != 0)
			return fail("root", errno, NULL, "mask a secret of the scope: make the masks' source");
		snprintf(p, sizeof(p), "%s" MASK_DIR "/d", top);
		if (mkdir(p, 0) != 0)
			return fail("root", errno, NULL, "mask a secret of the scope: make the masks' source");
		snprintf(p, sizeof(p), "%s" MASK_DIR "/f", top);
		int fd = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		if (fd < 0)
			return fail("root", errno, NULL, "mask a secret of the scope: make the masks' source");
		close(fd);
		*made = 1;
	}
	int root = open(top, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return fail("root", errno, NULL, "mask a secret of the scope: open the new root");
	struct open_how how = {.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	int target = (int)syscall(SYS_openat2, root, m->path + 1, &how, sizeof(how));
	int e = errno;
	close(root);
	if (target < 0 && e == ENOENT)
		return 0; /* gone since the walk: nothing to hide */
	if (target < 0 && e == ELOOP)
		return fail("root", 0, NULL, "mask a secret of the scope: a secret's path holds a symlink since the launcher's walk; run again");
	if (target < 0)
		return fail("root", e, NULL, "mask a secret of the scope: open it");
	int rc = 0;
	struct stat st;
	if (fstat(target, &st) != 0) {
		rc = fail("root", errno, NULL, "mask a secret of the scope: stat it");
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {
		rc = fail("root", 0, NULL, "mask a secret of the scope: a secret became a symlink since the launcher's walk; run again");
		goto out;
	}
	if (!!S_ISDIR(st.st_mode) != !!(m->flags & HO_M_DIR)) {
		rc = fail("root", 0, NULL, "mask a secret of the scope: a secret changed between file and directory since the launcher's walk; run again");
		goto out;
	}
	snprintf(p, sizeof(p), "%s" MASK_DIR "/%s", top, (m->flags & HO_M_DIR) ? "d" : "f");
	int tree = (int)syscall(SYS_open_tree, AT_FDCWD, p, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0) {
		rc = fail("root", errno, NULL, "mask a secret of the scope: clone the mask");
		goto out;
	}
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC};
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0)
		rc = fail("root", errno, NULL, "mask a secret of the scope: set the mask's mount attributes");
	else if (syscall(SYS_move_mount, tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
		rc = fail("root", errno, NULL, "mask a secret of the scope: attach the mask");
	close(tree);
out:
	close(target);
	return rc;
}

/* remove_mask_sources removes MASK_DIR: the masks stay (each holds its
 * own reference), nothing of their source shows in the root. */
static int remove_mask_sources(const char *top)
{
	char p[HO_MAX_PATH + 64];
	snprintf(p, sizeof(p), "%s" MASK_DIR "/f", top);
	if (unlink(p) != 0)
		return fail("root", errno, NULL, "remove the masks' source");
	snprintf(p, sizeof(p), "%s" MASK_DIR "/d", top);
	if (rmdir(p) != 0)
		return fail("root", errno, NULL, "remove the masks' source");
	snprintf(p, sizeof(p), "%s" MASK_DIR, top);
	if (rmdir(p) != 0)
		return fail("root", errno, NULL, "remove the masks' source");
	return 0;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	size_t n = strlen(s);
	ssize_t w = write(fd, s, n);
	int e = errno;
	close(fd);
	errno = e;
	return w == (ssize_t)n ? 0 : -1;
}

/* build_root builds the minimal root on the staging directory and pivots
 * into it (step 3). idmap is the stage's user namespace, or -1. */
static int build_root(const struct handover *h, int idmap)
{
	const char *top = h->staging;
	char at[2 * HO_MAX_PATH + 2];
	if (mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_TMPFS_OPTIONS) != 0)
		return rootfail(top, "mount the new root's tmpfs on");
	int masks = 0;
	for (size_t i = 0; i < h->nmounts; i++) {
		const struct ho_mount *m = &h->mounts[i];
		int rc = (m->flags & HO_M_MASK) ? mask_into(top, m, &masks) : bind_into(top, m, idmap);
		if (rc != 0)
			return rc;
	}
	if (masks) {
		int rc = remove_mask_sources(top);
		if (rc != 0)
			return rc;
	}
	for (size_t i = 0; i < h->nlinks; i++) {
		const struct ho_link *l = &h->links[i];
		struct stat st;
		snprintf(at, sizeof(at), "%s%s", top, l->path);
		if (lstat(at, &st) == 0)
			continue; /* there already, through a bind */
		char dir[sizeof(at)];
		dirname_of(at, dir, sizeof(dir));
		if (mkdir_p(dir, 0755) != 0)
			return rootfail(l->path, "make the directory of link");
		if (symlink(l->target, at) != 0)
			return rootfail(l->path, "recreate link");
	}
	for (size_t i = 0; i < h->ndirs; i++) {
		snprintf(at, sizeof(at), "%s%s", top, h->dirs[i]);
		if (mkdir_p(at, 0755) != 0)
			return rootfail(h->dirs[i], "make directory");
	}
	if (h->have_tmp) {
		snprintf(at, sizeof(at), "%s%s", top, h->tmp);
		if (mkdir_p(at, 0755) != 0)
			return rootfail(h->tmp, "make the private TMPDIR");
		char opts[128];
		snprintf(opts, sizeof(opts), "mode=0700,size=%llu,uid=%u,gid=%u", (unsigned long long)h->tmp_size, h->tmp_uid,
			 h->tmp_gid);
		if (mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0)
			return rootfail(h->tmp, "mount the private TMPDIR's tmpfs on");
	}
	snprintf(at, sizeof(at), "%s/proc", top);
	if (mkdir_p(at, 0555) != 0)
		return rootfail("/proc", "make");
	if (mount("/proc", at, NULL, MS_MOVE, NULL) != 0)
		return rootfail("/proc", "move the run's /proc into the new root");
	if (h->ns & HO_NS_MEMFD_NOEXEC) {
		snprintf(at, sizeof(at), "%s/proc/sys/vm/memfd_noexec", top);
		if (write_file(at, "2") != 0)
			return rootfail("/proc/sys/vm/memfd_noexec", "set");
	}
	if (h->ns & HO_NS_NO_USERNS) {
		snprintf(at, sizeof(at), "%s/proc/sys/user/max_user_namespaces", top);
		if (write_file(at, "0") != 0)
			return rootfail("/proc/sys/user/max_user_namespaces", "set");
	}
	if (chdir(top) != 0)
		return rootfail(top, "enter the new root");
	/* pivot_root(".", "."): the old root ends up stacked on the new one
	 * and is detached at once; nothing of it stays reachable. */
	if (syscall(SYS_pivot_root, ".", ".") != 0)
		return rootfail(top, "pivot_root into");
	if (umount2(".", MNT_DETACH) != 0)
		return rootfail("/", "detach the old root from");
	if (chdir("/") != 0)
		return rootfail("/", "enter");
	/* The root itself holds only directories, mount points and links. */
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC};
	if (syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &attr, sizeof(attr)) != 0)
		return rootfail("/", "make the new root read-only");
	return 0;
}

/* loopback_up brings up lo, the only interface of a new network namespace. */
static int loopback_up(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

/* pin holds path open for the run, above the descriptors the stage uses. */
static int pin(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int high = fcntl(fd, F_DUPFD_CLOEXEC, PIN_FLOOR);
	int e = errno;
	close(fd);
	errno = e;
	return high < 0 ? -1 : 0;
}

/* add_rules adds the plan's rules to the ruleset (step 4); a rule below
 * the server's own /proc entry names the stage's, which becomes the
 * server at exec and keeps its pid. */
static int add_rules(const struct handover *h, int ruleset, pid_t stage)
{
	char path[HO_MAX_PATH + 32];
	for (size_t i = 0; i < h->nrules; i++) {
		const struct ho_rule *r = &h->rules[i];
		if (r->flags & HO_R_SELF)
			snprintf(path, sizeof(path), "/proc/%d%s", (int)stage, r->path);
		else
			snprintf(path, sizeof(path), "%s", r->path);
		if (r->flags & HO_R_PIN)
			(void)pin(path, O_PATH); /* a path the kernel lacks fails its rule below */
		int fd = openat2_nosym(path, O_PATH | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ELOOP)
				return fail("landlock", errno, path, "it became a symlink after the scope was checked; refusing to run");
			return fail("landlock", errno, path, "open for a Landlock rule");
		}
		struct ll_path_beneath_attr pb = {.allowed_access = r->access, .parent_fd = fd};
		long rc = syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &pb, 0);
		int e = errno;
		close(fd);
		if (rc != 0) {
			errno = e;
			return fail("landlock", errno, path, "add Landlock rule");
		}
	}
	for (size_t i = 0; i < h->nports; i++) {
		struct ll_net_port_attr np = {.allowed_access = h->ports[i].access, .port = h->ports[i].port};
		if (syscall(SYS_landlock_add_rule, ruleset, LL_RULE_NET_PORT, &np, 0) != 0) {
			char msg[64];
			snprintf(msg, sizeof(msg), "add Landlock rule for TCP port %u", (unsigned)h->ports[i].port);
			return fail("landlock", errno, NULL, msg);
		}
	}
	return 0;
}

/* drop gives up the init's privileges: the identity of the plan, or (none)
 * every capability; then no_new_privs, not dumpable, and the parent-death
 * signal again (a change of credentials clears it). */
static int drop(const struct handover *h)
{
	if (h->have_init_id) {
		if (syscall(SYS_setgroups, 0, NULL) != 0)
			return fail("namespaces", errno, NULL, "drop the init's supplementary groups");
		if (syscall(SYS_setresgid, h->init_gid, h->init_gid, h->init_gid) != 0)
			return fail("namespaces", errno, NULL, "switch the init's gid");
		if (syscall(SYS_setresuid, h->init_uid, h->init_uid, h->init_uid) != 0)
			return fail("namespaces", errno, NULL, "switch the init's uid");
	} else {
		for (int c = 0; c < 64; c++)
			if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
				return fail("namespaces", errno, NULL, "drop a capability from the init's bounding set");
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
			return fail("namespaces", errno, NULL, "clear the init's ambient capabilities");
		if (clear_caps() != 0)
			return fail("namespaces", errno, NULL, "clear the init's capabilities");
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return fail("namespaces", errno, NULL, "set no_new_privs on the init");
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		return fail("namespaces", errno, NULL, "make the init not dumpable");
	return die_with_init();
}

/* to_fd moves fd onto want (not close-on-exec). */
static int to_fd(int fd, int want)
{
	if (fd == want)
		return fcntl(fd, F_SETFD, 0);
	return dup2(fd, want) < 0 ? -1 : 0;
}

/* stage_child is the exec stage after the fork: it puts its descriptors
 * in place, waits until the init has set the run up, takes the server's
 * ids in its own user namespace, and runs the stage (stage.c). */
static void stage_child(const struct handover *h, int status_w, int ruleset, int prepared_r)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	prctl(PR_SET_NAME, "mcpwarden-exec", 0, 0, 0);
	/* The server gets every signal's default, as an exec'd stage would. */
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGPIPE};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	/* Above every descriptor it needs, then onto 4, 5 and 6. */
	int s = fcntl(status_w, F_DUPFD_CLOEXEC, 100);
	int p = fcntl(prepared_r, F_DUPFD_CLOEXEC, 100);
	int r = ruleset >= 0 ? fcntl(ruleset, F_DUPFD_CLOEXEC, 100) : -1;
	if (s < 0 || p < 0 || (ruleset >= 0 && r < 0))
		_exit(127);
	if (to_fd(s, HO_STATUS_FD) != 0 || to_fd(p, HO_PREPARED_FD) != 0 || (r >= 0 && to_fd(r, HO_RULESET_FD) != 0))
		_exit(127);
	if (r < 0)
		close(HO_RULESET_FD);
	/* Nothing else of the init's: its ends of the pipes, the plan's copies. */
	syscall(SYS_close_range, HO_PREPARED_FD + 1, ~0U, 0);
	unsigned char b;
	ssize_t n;
	while ((n = read(HO_PREPARED_FD, &b, 1)) < 0 && errno == EINTR)
		;
	if (n != 1)
		_exit(127); /* the init failed and said why */
	close(HO_PREPARED_FD);
	if (h->have_server) {
		if (syscall(SYS_setgroups, 0, NULL) != 0)
			_exit(fail("namespaces", errno, NULL, "drop the server's supplementary groups"));
		if (syscall(SYS_setresgid, h->srv_in_gid, h->srv_in_gid, h->srv_in_gid) != 0)
			_exit(fail("namespaces", errno, NULL, "take the server's gid"));
		if (syscall(SYS_setresuid, h->srv_in_uid, h->srv_in_uid, h->srv_in_uid) != 0)
			_exit(fail("namespaces", errno, NULL, "take the server's uid"));
	}
	_exit(stage_main(h));
}

/* start_stage forks the exec stage (step 2), in a user namespace of its
 * own owned by the dedicated uid when the plan has one: the kernel charges
 * the run's per-user counters (inotify, signals, message queues) to that
 * namespace's owner, which no other process shares. */
static pid_t start_stage(const struct handover *h, int ruleset, int *status_r, int *prepared_w)
{
	int st[2], pr[2];
	if (pipe2(st, O_CLOEXEC) != 0)
		return -1;
	if (pipe2(pr, O_CLOEXEC) != 0) {
		close(st[0]);
		close(st[1]);
		return -1;
	}
	long bits = 0;
	uid_t euid = geteuid();
	if (h->have_server) {
		bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
		if (bits < 0 || prctl(PR_SET_SECUREBITS, bits | SECBIT_NO_SETUID_FIXUP_, 0, 0, 0) != 0)
			return -1;
		if (syscall(SYS_setresuid, -1, h->srv_host_uid, -1) != 0)
			return -1;
	}
	pid_t pid = (pid_t)syscall(SYS_clone, (h->have_server ? CLONE_NEWUSER : 0) | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		close(st[0]);
		close(pr[1]);
		stage_child(h, st[1], ruleset, pr[0]);
	}
	int e = errno;
	int rc = pid < 0 ? -1 : 0;
	if (rc == 0 && h->have_server) {
		/* The maps, written while this process still has the namespace
		 * owner's uid and every capability. */
		char path[64], map[64];
		snprintf(map, sizeof(map), "%u %u 1\n", h->srv_in_uid, h->srv_host_uid);
		snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
		if (write_file(path, map) != 0)
			rc = -1;
		snprintf(map, sizeof(map), "%u %u 1\n", h->srv_in_gid, h->srv_host_gid);
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		if (rc == 0 && write_file(path, map) != 0)
			rc = -1;
		e = errno;
	}
	if (h->have_server) {
		if (syscall(SYS_setresuid, -1, euid, -1) != 0 || prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0 ||
		    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
			e = errno;
			rc = -1;
		}
	}
	close(st[1]);
	close(pr[0]);
	if (rc != 0) {
		if (pid > 0) {
			kill(pid, SIGKILL);
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		}
		close(st[0]);
		close(pr[1]);
		errno = e;
		return -1;
	}
	*status_r = st[0];
	*prepared_w = pr[1];
	return pid;
}

/* stage_line reads the stage's next status line into b (at most n-1
 * bytes, NUL-terminated, without its newline): its length, 0 at EOF. */
static ssize_t stage_line(int fd, char *b, size_t n)
{
	size_t at = 0;
	while (at + 1 < n) {
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (c == '\n') {
			b[at] = 0;
			return (ssize_t)at + 1;
		}
		b[at++] = c;
	}
	b[at] = 0;
	return (ssize_t)at;
}

static void reap(pid_t pid)
{
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* read_plan reads and checks the whole plan on fd 3 (step 0). */
static const char *read_plan(struct handover *h)
{
	unsigned char hdr[HO_HEADER_SIZE];
	if (readfull(HO_IN_FD, hdr, sizeof(hdr)) != 0)
		return "no plan from the launcher (it exited or refused the run)";
	uint32_t len;
	const char *err = ho_header(hdr, &len);
	if (err != NULL)
		return err;
	unsigned char *body = malloc(len > 0 ? len : 1);
	if (body == NULL)
		return "out of memory";
	if (readfull(HO_IN_FD, body, len) != 0) {
		free(body);
		return "truncated plan";
	}
	err = ho_parse(body, len, h);
	free(body);
	return err;
}

int init_main(int argc, char **argv)
{
	if (getpid() != 1 || argc != 2 || strcmp(argv[1], "plan") != 0)
		return 2;
	/* Exec'd through /proc/self/fd, the process would be named after the fd. */
	prctl(PR_SET_NAME, INIT_NAME, 0, 0, 0);
	/* The launcher passed this program's file on fd 5: nothing above 4 stays. */
	syscall(SYS_close_range, 5, ~0U, 0);
	/* Die with the launcher from the first step on: no watcher guards a run
	 * with its own pid namespace. */
	int rc = die_with_init();
	if (rc != 0)
		return rc;
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward;
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	/* A stage gone before it heard from the init is a failure the init
	 * reports (EPIPE), not a silent death; the stage restores it. */
	signal(SIGPIPE, SIG_IGN);
	struct handover h;
	const char *err = read_plan(&h);
	if (err != NULL)
		return fail("spec", 0, NULL, err);
	/* 1. The run's /proc first: the pids this process sees are the run's,
	 * and the stage's maps are written through /proc/PID. */
	if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return fail("root", errno, "/", "make the run's mounts private");
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") != 0)
		return fail("root", errno, "/proc", "mount the run's /proc");
	if (h.hostname != NULL && sethostname(h.hostname, strlen(h.hostname)) != 0)
		return fail("namespaces", errno, NULL, "set the run's host name");
	if ((h.ns & HO_NS_NET) && loopback_up() != 0)
		return fail("namespaces", errno, NULL, "bring up loopback in the run's network namespace");
	int ruleset = -1;
	if (h.flags & HO_F_LANDLOCK) {
		struct ll_ruleset_attr attr = {
			.handled_access_fs = h.handled_fs, .handled_access_net = h.handled_net, .scoped = h.scoped};
		ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
		if (ruleset < 0)
			return fail("landlock", errno, NULL, "create the Landlock ruleset");
	}
	/* 2. The exec stage. */
	int status_r, prepared_w;
	pid_t stage = start_stage(&h, ruleset, &status_r, &prepared_w);
	if (stage < 0)
		return fail("namespaces", errno, NULL, "start the exec stage");
	server = stage;
	/* 3. The root. */
	int idmap = -1;
	if (h.have_server) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)stage);
		if ((idmap = open(p, O_RDONLY | O_CLOEXEC)) < 0) {
			rc = fail("namespaces", errno, NULL, "open the server's user namespace");
			goto failed;
		}
	}
	rc = build_root(&h, idmap);
	if (idmap >= 0)
		close(idmap);
	if (rc != 0)
		goto failed;
	/* 4. Hold, for the run, the stage's entry in the run's /proc (a Landlock
	 * rule binds to an inode, and procfs makes a new one when an entry whose
	 * dentry was dropped is looked up again), then the rules. */
	char self[64];
	snprintf(self, sizeof(self), "/proc/%d", (int)stage);
	if (pin(self, O_PATH | O_DIRECTORY) != 0) {
		rc = fail("namespaces", errno, NULL, "open the server's entry in the run's /proc");
		goto failed;
	}
	if (ruleset >= 0) {
		rc = add_rules(&h, ruleset, stage);
		close(ruleset);
		if (rc != 0)
			goto failed;
	}
	/* 5. The init's own privileges, then the stage may go on. */
	if ((rc = drop(&h)) != 0)
		goto failed;
	char b = 1;
	if (write(prepared_w, &b, 1) != 1) {
		rc = fail("namespaces", errno, NULL, "tell the exec stage the run is set up");
		goto failed;
	}
	close(prepared_w);
	/* 6. EOF: the stage exec'd the server; a line: it could not, or the
	 * launcher refused the run. The init's "ready" goes to the launcher
	 * only then, with what followed it (one wake-up of the launcher, not
	 * two, while the stage and the server's start need the cores): the
	 * launcher does not wait for it before its go-ahead. */
	char line[8192];
	ssize_t n = stage_line(status_r, line, sizeof(line));
	if (n > 0) {
		status("ready", 0, NULL, NULL);
		kill(stage, SIGKILL);
		reap(stage);
		if (strcmp(line, "{\"stage\":\"refused\"}") == 0)
			return 0; /* the launcher refused the run: nothing was exec'd */
		writeall(HO_STATUS_FD, line, strlen(line));
		writeall(HO_STATUS_FD, "\n", 1);
		return 127;
	}
	close(status_r);
	char msg[96];
	snprintf(msg, sizeof(msg), "{\"stage\":\"ready\"}\n{\"stage\":\"started\",\"pid\":%d}\n", (int)stage);
	writeall(HO_STATUS_FD, msg, strlen(msg));
	/* The init keeps no end of the server's stdio nor of the launcher's
	 * plan pipe: the server's EOF on stdout is the launcher's sign that it
	 * is done with it. */
	close(0);
	close(1);
	close(HO_IN_FD);
	for (;;) {
		int ws;
		pid_t pid = waitpid(-1, &ws, 0);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0) {
			/* ECHILD: cannot happen while the server lives; say it ended. */
			static const char gone[] = "{\"stage\":\"exit\",\"code\":127}\n";
			writeall(HO_STATUS_FD, gone, sizeof(gone) - 1);
			return 127;
		}
		if (pid != stage)
			continue;
		if (WIFSIGNALED(ws)) {
			snprintf(msg, sizeof(msg), "{\"stage\":\"exit\",\"signal\":%d}\n", WTERMSIG(ws));
			writeall(HO_STATUS_FD, msg, strlen(msg));
			return 128 + WTERMSIG(ws);
		}
		snprintf(msg, sizeof(msg), "{\"stage\":\"exit\",\"code\":%d}\n", WEXITSTATUS(ws));
		writeall(HO_STATUS_FD, msg, strlen(msg));
		return WEXITSTATUS(ws);
	}
failed:
	kill(stage, SIGKILL);
	reap(stage);
	return rc;
}
