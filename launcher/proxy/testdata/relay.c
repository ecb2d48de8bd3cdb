/* relay: the physical floor of one extra process between an MCP client and
 * its server. It starts argv[1..] with two pipes and copies bytes both ways
 * with blocking reads and writes, one thread per direction: no parsing, no
 * buffering beyond one read. The proxy benchmarks build it with gcc. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

struct pipe_pair { int from, to; };

static void *copy(void *arg) {
	struct pipe_pair *p = arg;
	char buf[65536];
	ssize_t n;
	while ((n = read(p->from, buf, sizeof buf)) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(p->to, buf + off, n - off);
			if (w <= 0) return NULL;
			off += w;
		}
	}
	close(p->to); /* EOF on one side becomes EOF on the other */
	return NULL;
}

int main(int argc, char **argv) {
	int in[2], out[2];
	if (argc < 2 || pipe(in) || pipe(out)) {
		fprintf(stderr, "usage: relay SERVER [ARGS...]\n");
		return 64;
	}
	signal(SIGPIPE, SIG_IGN);
	pid_t pid = fork();
	if (pid < 0) return 71;
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]); close(in[1]); close(out[0]); close(out[1]);
		execvp(argv[1], argv + 1);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	struct pipe_pair down = {0, in[1]}, up = {out[0], 1};
	pthread_t t1, t2;
	pthread_create(&t1, NULL, copy, &down);
	pthread_create(&t2, NULL, copy, &up);
	pthread_join(t2, NULL); /* the server's stdout ended */
	int status;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
