/*
 * chdb-listen serves a current ClickHouse release on the native protocol, so
 * mcpwarden's collector, migrations and canned queries can be tested against
 * it through clickhouse-go exactly as against clickhouse-server.
 *
 * Why this exists: Debian ships only ClickHouse 18.16 and no container engine
 * runs on the test machines, but npm carries chDB's libchdb.so, which is the
 * ClickHouse engine (26.7 at the pinned version) built as a library.
 * ClickHouse 26.x lets clickhouse-local open listeners with
 * `SYSTEM START LISTEN TCP`; chDB's command-line entry point is
 * clickhouse-local, so one call starts the listener and then keeps the
 * session (and with it the listener) alive with a query that never ends.
 *
 * Why the relay: clickhouse-local installs an error handler that terminates
 * the process on any exception escaping a connection thread, and a client
 * that resets its connection (a process killed, or exiting with unread
 * packets) raises one. clickhouse-server logs and carries on. So ClickHouse
 * listens on a private loopback port and this program relays the public
 * port to it, ending every connection towards ClickHouse the orderly way: a
 * FIN, then draining what ClickHouse still sends, then close.
 *
 * Usage: chdb-listen --path=DIR --tcp_port=PORT [clickhouse-local options]
 * The listener has no authentication (clickhouse-local's default user), so
 * it binds 127.0.0.1 only; --listen_host and --query are refused.
 *
 * Build: see scripts/test-env.sh (gcc, linked against the npm libchdb.so).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The chDB v2 C API, declared here so the build needs only libchdb.so. */
typedef struct { void *internal_data; } chdb_result;
extern chdb_result *chdb_query_cmdline(int argc, char **argv);
extern const char *chdb_result_error(chdb_result *result);

static const char serve_query[] =
	"SYSTEM START LISTEN TCP; "
	/* One row a second from an endless source: the session lives until the
	 * process is signalled. function_sleep_max_microseconds_per_block=0
	 * lifts the per-block sleep cap that would otherwise end it. */
	"SELECT sleepEachRow(1) FROM system.numbers "
	"SETTINGS max_block_size = 1, function_sleep_max_microseconds_per_block = 0 "
	"FORMAT Null";

static int backend_port;

static int has_prefix(const char *s, const char *prefix) {
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static struct sockaddr_in loopback(int port) {
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* free_loopback_port asks the kernel for a port nobody holds right now. */
static int free_loopback_port(void) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		perror("chdb-listen: pick a private port");
		exit(71);
	}
	close(fd);
	return ntohs(a.sin_port);
}

/* copy's outcomes: moved some bytes, the reading side ended (EOF or error),
 * or the writing side failed (its peer is gone). */
enum copied { MOVED, FROM_ENDED, TO_FAILED };

/* copy moves what is readable on from to to. */
static enum copied copy(int from, int to) {
	char buf[65536];
	ssize_t n = read(from, buf, sizeof buf);
	if (n <= 0) return FROM_ENDED;
	for (ssize_t off = 0; off < n;) {
		ssize_t w = write(to, buf + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR) continue;
		if (w <= 0) return TO_FAILED;
		off += w;
	}
	return MOVED;
}

/* drain reads and drops what ClickHouse still sends after our FIN, so the
 * final close carries no unread data (which would turn it into a reset). */
static void drain(int fd) {
	char buf[65536];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (poll(&p, 1, 30000) > 0 && read(fd, buf, sizeof buf) > 0) {
	}
}

/* no_delay turns Nagle's algorithm off on fd, as ClickHouse does on its own
 * sockets: the relay forwards each of the server's packets as it comes, and
 * with Nagle a small packet behind an unacknowledged one would wait for the
 * peer's delayed ACK (40 ms on Linux), adding that to every query. */
static int no_delay(int fd) {
	int one = 1;
	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void *relay(void *arg) {
	int client = (int)(intptr_t)arg;
	int backend = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = loopback(backend_port);
	if (backend < 0 || no_delay(client) != 0 || no_delay(backend) != 0 ||
	    connect(backend, (struct sockaddr *)&a, sizeof a) != 0) {
		close(client);
		if (backend >= 0) close(backend);
		return NULL;
	}
	struct pollfd p[2] = {{.fd = client, .events = POLLIN}, {.fd = backend, .events = POLLIN}};
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR) continue;
			break;
		}
		/* The client is gone (it ended, reset, or can no longer take
		 * what ClickHouse sends): end towards ClickHouse the orderly way. */
		if (p[0].revents && copy(client, backend) != MOVED) break;
		if (p[1].revents) {
			enum copied c = copy(backend, client);
			if (c == TO_FAILED) break;
			if (c == FROM_ENDED) { /* ClickHouse closed: nothing left to read */
				close(client);
				close(backend);
				return NULL;
			}
		}
	}
	close(client);
	shutdown(backend, SHUT_WR);
	drain(backend);
	close(backend);
	return NULL;
}

/* wait_for_backend returns once ClickHouse accepts connections, so the
 * public port refuses clients until the server can answer them. */
static void wait_for_backend(void) {
	for (int i = 0; i < 2400; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = loopback(backend_port);
		int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
		if (fd >= 0) close(fd);
		if (ok) return;
		usleep(50000);
	}
	fprintf(stderr, "chdb-listen: ClickHouse did not listen on its private port within 120 s\n");
	exit(69);
}

static void *accept_loop(void *arg) {
	int listener = (int)(intptr_t)arg;
	wait_for_backend();
	if (listen(listener, 128) != 0) {
		perror("chdb-listen: listen");
		exit(71);
	}
	for (;;) {
		int c = accept(listener, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED) continue;
			perror("chdb-listen: accept");
			exit(71);
		}
		pthread_t t;
		if (pthread_create(&t, NULL, relay, (void *)(intptr_t)c) != 0) {
			close(c);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

int main(int argc, char **argv) {
	int public_port = 0, have_path = 0;
	for (int i = 1; i < argc; i++) {
		if (has_prefix(argv[i], "--path=")) have_path = 1;
		if (has_prefix(argv[i], "--tcp_port=")) public_port = atoi(argv[i] + strlen("--tcp_port="));
		if (has_prefix(argv[i], "--query") || has_prefix(argv[i], "-q") ||
		    has_prefix(argv[i], "--listen_host")) {
			fprintf(stderr, "chdb-listen: %s is not accepted: the serving query is fixed and the "
			                "listener (which has no authentication) binds 127.0.0.1 only\n", argv[i]);
			return 64;
		}
	}
	if (!have_path || public_port <= 0 || public_port > 65535) {
		fprintf(stderr, "usage: chdb-listen --path=DIR --tcp_port=PORT [clickhouse-local options]\n"
		                "  both --path (the data directory) and --tcp_port (1-65535) are required\n");
		return 64;
	}
	signal(SIGPIPE, SIG_IGN);

	int listener = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	struct sockaddr_in a = loopback(public_port);
	if (listener < 0 || setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
	    bind(listener, (struct sockaddr *)&a, sizeof a) != 0) {
		fprintf(stderr, "chdb-listen: cannot listen on 127.0.0.1:%d: %s\n", public_port, strerror(errno));
		return 69;
	}
	backend_port = free_loopback_port();

	/* argv for clickhouse-local: the caller's options with the private port
	 * in place of the public one, then the fixed ones. */
	char port_arg[32], **args = calloc((size_t)argc + 4, sizeof(char *));
	if (args == NULL) return 71;
	snprintf(port_arg, sizeof port_arg, "--tcp_port=%d", backend_port);
	int n = 0;
	args[n++] = "clickhouse-local"; /* chDB skips args[0], like main's argv */
	for (int i = 1; i < argc; i++) args[n++] = has_prefix(argv[i], "--tcp_port=") ? port_arg : argv[i];
	args[n++] = "--listen_host=127.0.0.1";
	args[n++] = "--query";
	args[n++] = (char *)serve_query;
	args[n] = NULL;

	pthread_t t;
	if (pthread_create(&t, NULL, accept_loop, (void *)(intptr_t)listener) != 0) return 71;

	chdb_result *result = chdb_query_cmdline(n, args);
	const char *err = result ? chdb_result_error(result) : "chdb_query_cmdline returned no result";
	fprintf(stderr, "chdb-listen: %s\n", err ? err : "serving query ended unexpectedly");
	return 70;
}
