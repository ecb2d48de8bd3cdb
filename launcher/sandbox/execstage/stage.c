/*
 * mcpwarden-exec: the run's init (init.c, started as "mcpwarden-init") and
 * its exec stage (stage_main below, a fork of the init). The init forks
 * the stage, already in the server's user namespace and identity when
 * there is one, with the plan in memory (handover.h), a status pipe to the
 * init on fd 4 and the prepared Landlock ruleset on fd 5. Once the init
 * says the run is set up, it waits for the launcher's go byte on fd 3, and
 * then, on its single thread: enters the working directory, sets the
 * resource limits, empties the capability bounding set, becomes the
 * server's uid and gid, sets no_new_privs, enforces the Landlock ruleset
 * and the seccomp filter, clears its capabilities, asks to die with the
 * init and execs the server.
 *
 * It reports to the init as the Go helper reports to the launcher: one
 * JSON status line per failure; EOF (fd 4 is close-on-exec) means the
 * server was exec'd. A failure is a status line naming the stage and exit
 * status 127; nothing was exec'd. Being C and single-threaded, it changes
 * credentials with one system call each, where a Go program stops every
 * thread for each.
 */
#define _GNU_SOURCE
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* putjson appends s, escaped as a JSON string, to the buffer b of size n at *at. */
static void putjson(char *b, size_t n, size_t *at, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	for (; *s != 0 && *at + 7 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) {
			b[(*at)++] = '\\';
			b[(*at)++] = 'u';
			b[(*at)++] = '0';
			b[(*at)++] = '0';
			b[(*at)++] = hex[c >> 4];
			b[(*at)++] = hex[c & 15];
		} else {
			b[(*at)++] = (char)c;
		}
	}
}

static void putraw(char *b, size_t n, size_t *at, const char *s)
{
	for (; *s != 0 && *at + 1 < n; s++)
		b[(*at)++] = *s;
}

/* status writes one status line on fd 4. */
void status(const char *stage, int err, const char *path, const char *msg)
{
	char b[8192];
	size_t at = 0;
	char num[32];
	putraw(b, sizeof(b), &at, "{\"stage\":\"");
	putraw(b, sizeof(b), &at, stage);
	putraw(b, sizeof(b), &at, "\"");
	if (err != 0) {
		snprintf(num, sizeof(num), ",\"errno\":%d", err);
		putraw(b, sizeof(b), &at, num);
	}
	if (path != NULL && *path != 0) {
		putraw(b, sizeof(b), &at, ",\"path\":\"");
		putjson(b, sizeof(b) - 32, &at, path);
		putraw(b, sizeof(b), &at, "\"");
	}
	if (msg != NULL) {
		putraw(b, sizeof(b), &at, ",\"message\":\"");
		putjson(b, sizeof(b) - 16, &at, msg);
		if (err != 0) {
			putjson(b, sizeof(b) - 16, &at, ": ");
			putjson(b, sizeof(b) - 16, &at, strerror(err));
		}
		putraw(b, sizeof(b), &at, "\"");
	}
	putraw(b, sizeof(b), &at, "}\n");
	writeall(HO_STATUS_FD, b, at);
}

/* writeall writes the n bytes at b on fd, or as many as fd takes. */
void writeall(int fd, const char *b, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		b += w;
		n -= (size_t)w;
	}
}

/* clear_caps empties the permitted, effective and inheritable capability
 * sets of this process; it returns capset's result. */
int clear_caps(void)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	return (int)syscall(SYS_capset, &hdr, data);
}

int fail(const char *stage, int err, const char *path, const char *msg)
{
	status(stage, err, path, msg);
	return 127;
}

/* readfull reads exactly n bytes; 0 on success, -1 on EOF or error. */
int readfull(int fd, unsigned char *b, size_t n)
{
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int has_cap(int cap)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) != 0)
		return 0;
	return (data[cap / 32].effective >> (cap % 32)) & 1;
}

/* drop_bounding empties the ambient set and the bounding set; without
 * CAP_SETPCAP (not root in this user namespace) there is nothing to drop:
 * no_new_privs already stops file capabilities and set-id bits. */
static int drop_bounding(void)
{
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
		return fail("privileges", errno, NULL, "clear ambient capabilities");
	for (int c = 0; c < 64; c++) {
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == 0)
			continue;
		/* EINVAL: past the kernel's last capability (the kernel checks
		 * CAP_SETPCAP first, then that the capability exists; they are
		 * numbered without gaps), and so is every one after it. */
		if (errno == EINVAL)
			break;
		if (errno == EPERM && c == 0 && !has_cap(CAP_SETPCAP))
			return 0;
		return fail("privileges", errno, NULL, "drop a capability from the bounding set");
	}
	return 0;
}

/* become switches to uid and gid with no supplementary groups, then sets
 * the parent-death signal again (a change of credentials clears it). */
static int become(uint32_t uid, uint32_t gid)
{
	int sig = 0;
	if (prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0) != 0)
		sig = 0;
	if (syscall(SYS_setgroups, 0, NULL) != 0)
		return fail("privileges", errno, NULL, "drop supplementary groups");
	if (syscall(SYS_setresgid, gid, gid, gid) != 0)
		return fail("privileges", errno, NULL, "switch gid");
	if (syscall(SYS_setresuid, uid, uid, uid) != 0)
		return fail("privileges", errno, NULL, "switch uid");
	if (sig != 0 && prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0)
		return fail("privileges", errno, NULL, "set the parent-death signal again");
	return 0;
}

static int apply(const struct handover *h)
{
	if (h->dir != NULL && chdir(h->dir) != 0)
		return fail("privileges", errno, h->dir, "enter the working directory");
	if (!(h->flags & HO_F_ENFORCE))
		return 0;
	struct rlimit zero = {0, 0};
	if (setrlimit(RLIMIT_CORE, &zero) != 0)
		return fail("privileges", errno, NULL, "set RLIMIT_CORE");
	/* No real-time scheduling and no nice below the default, whatever the
	 * launcher was given (a unit's LimitRTPRIO=, an @audio rtprio line). */
	if (setrlimit(RLIMIT_RTPRIO, &zero) != 0)
		return fail("privileges", errno, NULL, "set RLIMIT_RTPRIO");
	if (setrlimit(RLIMIT_NICE, &zero) != 0)
		return fail("privileges", errno, NULL, "set RLIMIT_NICE");
	if (h->flags & HO_F_FSIZE) {
		struct rlimit fs = {h->fsize, h->fsize};
		if (setrlimit(RLIMIT_FSIZE, &fs) != 0)
			return fail("privileges", errno, NULL, "set RLIMIT_FSIZE");
		/* An ignored signal stays ignored across execve: a write past the
		 * limit fails with EFBIG instead of killing the writer. */
		signal(SIGXFSZ, SIG_IGN);
	}
	if (h->flags & HO_F_NOFILE) {
		/* The host's file table is one budget for every process: a run
		 * holds at most its process limit times this many open files. */
		struct rlimit nf;
		if (getrlimit(RLIMIT_NOFILE, &nf) != 0)
			return fail("privileges", errno, NULL, "read RLIMIT_NOFILE");
		if (nf.rlim_max > h->nofile)
			nf.rlim_max = h->nofile;
		if (nf.rlim_cur > nf.rlim_max)
			nf.rlim_cur = nf.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &nf) != 0)
			return fail("privileges", errno, NULL, "set RLIMIT_NOFILE");
	}
	int rc;
	/* Others never get write through a creation mode: S_IWOTH joins the
	 * inherited umask (022 or 077 stay as they are, 0 or 020 gain it), and
	 * the seccomp filter answers a umask() that would clear it without
	 * running it. */
	umask(umask(0) | S_IWOTH);
	if ((h->flags & HO_F_DROP_CAPS) && (rc = drop_bounding()) != 0)
		return rc;
	if ((h->flags & HO_F_IDENTITY) && (rc = become(h->uid, h->gid)) != 0)
		return rc;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return fail("privileges", errno, NULL, "set no_new_privs");
	if (h->flags & HO_F_LANDLOCK) {
		if (syscall(SYS_landlock_restrict_self, HO_RULESET_FD, h->landlock_flags) != 0)
			return fail("landlock", errno, NULL, "landlock_restrict_self");
		close(HO_RULESET_FD);
	}
	if (h->flags & HO_F_SECCOMP) {
		struct sock_fprog prog = {.len = (unsigned short)h->filter_len, .filter = (struct sock_filter *)h->filter};
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
			return fail("seccomp", errno, NULL, "install seccomp filter");
	}
	if ((h->flags & HO_F_DROP_CAPS) && clear_caps() != 0)
		return fail("privileges", errno, NULL, "clear capabilities");
	return 0;
}

/* die_with_init asks for SIGKILL when the init's thread that started this
 * process dies, then checks the init is still there: its read end of the
 * status pipe is open until exec, and a pipe without readers polls POLLERR. */
int die_with_init(void)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		return fail("privileges", errno, NULL, "set the parent-death signal");
	struct pollfd p = {.fd = HO_STATUS_FD, .events = POLLOUT};
	while (poll(&p, 1, 0) < 0) {
		if (errno != EINTR)
			return fail("privileges", errno, NULL, "poll the status pipe");
	}
	if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
		return fail("privileges", 0, NULL, "the launcher is gone");
	return 0;
}

/* next_in_chain returns the "#!" interpreter named by head, or NULL. */
static char *next_in_chain(char *head, ssize_t n)
{
	if (n <= 2 || head[0] != '#' || head[1] != '!')
		return NULL;
	head[n] = 0;
	char *p = head + 2;
	while (*p == ' ' || *p == '\t')
		p++;
	char *end = p;
	while (*end != 0 && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
		end++;
	if (end == p)
		return NULL;
	*end = 0;
	return p;
}

/* denied_exec_path finds the first file of the exec chain (the executable,
 * "#!" interpreters) that cannot be opened from inside the fence. */
static const char *denied_exec_path(const char *exe)
{
	static char chain[8][257];
	snprintf(chain[0], sizeof(chain[0]), "%s", exe);
	for (int i = 0; i < 8; i++) {
		int fd = open(chain[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return chain[i];
		char head[257];
		ssize_t n = read(fd, head, 256);
		close(fd);
		char *next = next_in_chain(head, n);
		if (next == NULL || i == 7)
			return NULL;
		for (int j = 0; j <= i; j++)
			if (strcmp(chain[j], next) == 0)
				return NULL;
		snprintf(chain[i + 1], sizeof(chain[i + 1]), "%s", next);
	}
	return NULL;
}

/* stage_main is the exec stage, forked by the init (init.c) with the
 * plan h, once the run is set up: it waits for the launcher's go-ahead on
 * fd 3, applies the fence and execs the server. */
int stage_main(const struct handover *h)
{
	if ((h->flags & HO_F_LANDLOCK) && fcntl(HO_RULESET_FD, F_GETFD) < 0)
		return fail("landlock", errno, NULL, "no Landlock ruleset on fd 5");
	unsigned char go;
	if (readfull(HO_IN_FD, &go, 1) != 0 || go != HO_GO_BYTE) {
		static const char refused[] = "{\"stage\":\"refused\"}\n";
		writeall(HO_STATUS_FD, refused, sizeof(refused) - 1);
		return 0; /* the launcher refused the run: exec nothing */
	}
	int rc = apply(h);
	if (rc != 0)
		return rc;
	if ((rc = die_with_init()) != 0)
		return rc;
	/* Everything but stdio is closed by execve, the status pipe too: its
	 * EOF tells the init that exec succeeded. */
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
		return fail("privileges", errno, NULL, "mark descriptors close-on-exec");
	execve(h->exe, h->argv, h->envp);
	int e = errno;
	const char *path = h->exe;
	if (e == EACCES || e == ENOENT) {
		const char *p = denied_exec_path(h->exe);
		if (p != NULL)
			path = p;
	}
	return fail("exec", e, path, "exec");
}

int main(int argc, char **argv)
{
	if (argc > 0 && strcmp(argv[0], INIT_NAME) == 0)
		return init_main(argc, argv);
	static const char msg[] = "mcpwarden-exec: this is the run's init of 'mcpwarden run', which starts it in the run's namespaces with a plan on fd 3 and a status pipe on fd 4; it is not run by hand\n";
	writeall(2, msg, sizeof(msg) - 1);
	return 2;
}
