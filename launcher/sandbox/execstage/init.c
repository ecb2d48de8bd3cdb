/*
 * The run's init, second half: the Go init (launcher/sandbox, init_linux.go)
 * builds the run's root and hands the exec stage its fence, then execs this
 * program as "mcpwarden-init" (pid 1 of the run's pid namespace stays the
 * same process). Single-threaded, it gives up the init's privileges with
 * one system call each (a Go process stops every thread for each), relays
 * the stage's readiness and the launcher's go-ahead, reports the server's
 * start, and is the run's init until the server exits: it reaps every
 * process of the run, forwards signals to the server, and exits with the
 * server's status, which ends every other process of the run with it.
 *
 *   argv: mcpwarden-init STAGE_PID id UID GID   (become UID and GID)
 *         mcpwarden-init STAGE_PID caps         (keep the ids, drop every capability)
 *   fds:  3 the launcher's spec pipe (the go byte), 4 the launcher's status
 *         pipe, 5 the stage's handover pipe, 6 the stage's status pipe, and
 *         the /proc pins the Go init holds for the run.
 */
#define _GNU_SOURCE
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define INIT_STAGE_GO_FD 5
#define INIT_STAGE_STATUS_FD 6

static volatile pid_t server = 0;

static void forward(int sig)
{
	int e = errno;
	if (server > 0)
		kill(server, sig);
	errno = e;
}

static int parse_id(const char *s, uint32_t *v)
{
	char *end;
	errno = 0;
	unsigned long n = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != 0 || n >= UINT32_MAX || s[0] == '-')
		return -1;
	*v = (uint32_t)n;
	return 0;
}

/* stage_line reads the stage's next status line into b (at most n-1
 * bytes, NUL-terminated, without its newline): its length, 0 at EOF. */
static ssize_t stage_line(char *b, size_t n)
{
	size_t at = 0;
	while (at + 1 < n) {
		char c;
		ssize_t r = read(INIT_STAGE_STATUS_FD, &c, 1);
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

static void reap_stage(pid_t pid)
{
	int ws;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
}

/* stage_failed relays what the stage said instead of going on (nothing:
 * it died without a word), after it is gone, and returns 127. */
static int stage_failed(pid_t pid, const char *line, ssize_t n)
{
	kill(pid, SIGKILL);
	reap_stage(pid);
	if (n <= 1) {
		status("exec", 0, NULL, "the exec stage exited without a status");
	} else {
		writeall(HO_STATUS_FD, line, strlen(line));
		writeall(HO_STATUS_FD, "\n", 1);
	}
	return 127;
}

static int drop(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[2], "id") == 0) {
		uint32_t uid, gid;
		if (parse_id(argv[3], &uid) != 0 || parse_id(argv[4], &gid) != 0)
			return fail("namespaces", 0, NULL, "mcpwarden-init: bad identity");
		if (syscall(SYS_setgroups, 0, NULL) != 0)
			return fail("namespaces", errno, NULL, "drop the init's supplementary groups");
		if (syscall(SYS_setresgid, gid, gid, gid) != 0)
			return fail("namespaces", errno, NULL, "switch the init's gid");
		if (syscall(SYS_setresuid, uid, uid, uid) != 0)
			return fail("namespaces", errno, NULL, "switch the init's uid");
	} else if (argc == 3 && strcmp(argv[2], "caps") == 0) {
		for (int c = 0; c < 64; c++)
			if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
				return fail("namespaces", errno, NULL, "drop a capability from the init's bounding set");
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
			return fail("namespaces", errno, NULL, "clear the init's ambient capabilities");
		if (clear_caps() != 0)
			return fail("namespaces", errno, NULL, "clear the init's capabilities");
	} else {
		return fail("namespaces", 0, NULL, "mcpwarden-init: bad arguments");
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return fail("namespaces", errno, NULL, "set no_new_privs on the init");
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		return fail("namespaces", errno, NULL, "make the init not dumpable");
	return 0;
}

int init_main(int argc, char **argv)
{
	if (getpid() != 1 || argc < 3)
		return 2;
	/* Exec'd through /proc/self/fd, the process would be named after the fd. */
	prctl(PR_SET_NAME, INIT_NAME, 0, 0, 0);
	uint32_t spid;
	if (parse_id(argv[1], &spid) != 0 || spid <= 1)
		return fail("namespaces", 0, NULL, "mcpwarden-init: bad stage pid");
	pid_t stage = (pid_t)spid;
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
	server = stage;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward;
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	int rc = drop(argc, argv);
	if (rc == 0)
		rc = die_with_init();
	if (rc != 0) {
		kill(stage, SIGKILL);
		reap_stage(stage);
		return rc;
	}
	char line[8192];
	ssize_t n = stage_line(line, sizeof(line));
	if (strcmp(line, "{\"stage\":\"ready\"}") != 0 || n <= 0)
		return stage_failed(stage, line, n);
	status("ready", 0, NULL, NULL);
	unsigned char go;
	ssize_t r;
	while ((r = read(HO_IN_FD, &go, 1)) < 0 && errno == EINTR)
		;
	if (r != 1 || go != HO_GO_BYTE) {
		kill(stage, SIGKILL);
		reap_stage(stage);
		return 0; /* the launcher refused the run */
	}
	if (write(INIT_STAGE_GO_FD, &go, 1) != 1)
		return stage_failed(stage, "", 0);
	close(INIT_STAGE_GO_FD);
	/* EOF: the exec stage exec'd the server; a line: it could not. */
	if ((n = stage_line(line, sizeof(line))) > 0)
		return stage_failed(stage, line, n);
	close(INIT_STAGE_STATUS_FD);
	char msg[64];
	snprintf(msg, sizeof(msg), "{\"stage\":\"started\",\"pid\":%d}\n", (int)stage);
	writeall(HO_STATUS_FD, msg, strlen(msg));
	/* The init keeps no end of the server's stdio: the server's EOF on
	 * stdout is the launcher's sign that it is done with it. */
	close(0);
	close(1);
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
}
