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
 * Why the Hello check: the same handler aborts the process when ClickHouse
 * throws on a client that does not speak the native protocol at all (a port
 * probe sending a newline, an HTTP request: "Unexpected packet from
 * client"). So the relay reads the client's first packet itself, and only a
 * well-formed Hello (packet 0, client name, version, revision, database, a
 * non-empty user, password, each string within bounds) opens a connection to
 * ClickHouse; anything else, or a client that sends no complete Hello
 * within 60 s, is dropped without ClickHouse ever seeing it. What a client
 * sends after a valid Hello is not checked: a client that speaks the
 * protocol wrongly past its Hello can still abort the engine.
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
#include <time.h>
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

/* write_all writes b[0:n] to fd. */
static int write_all(int fd, const unsigned char *b, size_t n) {
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, b + off, n - off);
		if (w < 0 && errno == EINTR) continue;
		if (w <= 0) return -1;
		off += (size_t)w;
	}
	return 0;
}

/* copy moves what is readable on from to to. */
static enum copied copy(int from, int to) {
	unsigned char buf[65536];
	ssize_t n = read(from, buf, sizeof buf);
	if (n <= 0) return FROM_ENDED;
	return write_all(to, buf, (size_t)n) == 0 ? MOVED : TO_FAILED;
}

/* end_backend ends a connection towards ClickHouse the orderly way: a FIN,
 * then reading and dropping what ClickHouse still sends, so the final close
 * carries no unread data (which would turn it into a reset). */
static void end_backend(int fd) {
	char buf[65536];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	shutdown(fd, SHUT_WR);
	while (poll(&p, 1, 30000) > 0 && read(fd, buf, sizeof buf) > 0) {
	}
	close(fd);
}

/* no_delay turns Nagle's algorithm off on fd, as ClickHouse does on its own
 * sockets: the relay forwards each of the server's packets as it comes, and
 * with Nagle a small packet behind an unacknowledged one would wait for the
 * peer's delayed ACK (40 ms on Linux), adding that to every query. */
static int no_delay(int fd) {
	int one = 1;
	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* The bounds of a Hello: no string of it longer than HELLO_MAX_STRING, the
 * whole packet within HELLO_MAX (clickhouse-go's is about 60 bytes). */
#define HELLO_MAX 65536
#define HELLO_MAX_STRING 16384
#define HELLO_TIMEOUT_MS 60000

/* hello_parse's outcomes: a whole valid Hello, more bytes needed, or not a
 * Hello. */
enum hello { HELLO_OK, HELLO_MORE, HELLO_BAD };

/* varuint reads a LEB128 unsigned integer (ClickHouse's VarUInt, at most 9
 * bytes) at *off in b[0:n]. */
static enum hello varuint(const unsigned char *b, size_t n, size_t *off, uint64_t *v) {
	*v = 0;
	for (int i = 0; i < 9; i++) {
		if (*off >= n) return HELLO_MORE;
		unsigned char c = b[(*off)++];
		*v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) return HELLO_OK;
	}
	return HELLO_BAD;
}

/* string skips a length-prefixed string at *off; *len is its length. */
static enum hello string(const unsigned char *b, size_t n, size_t *off, uint64_t *len) {
	enum hello h = varuint(b, n, off, len);
	if (h != HELLO_OK) return h;
	if (*len > HELLO_MAX_STRING) return HELLO_BAD;
	if (n - *off < *len) return HELLO_MORE;
	*off += *len;
	return HELLO_OK;
}

/* hello_parse checks that b[0:n] starts with a whole, well-formed client
 * Hello: packet type 0, client name, major, minor, protocol revision,
 * database, user (not empty), password. */
static enum hello hello_parse(const unsigned char *b, size_t n) {
	size_t off = 0;
	uint64_t v, user_len = 0;
	enum hello h;
	if ((h = varuint(b, n, &off, &v)) != HELLO_OK) return h;
	if (v != 0) return HELLO_BAD;
	if ((h = string(b, n, &off, &v)) != HELLO_OK) return h; /* client name */
	for (int i = 0; i < 3; i++)                              /* major, minor, revision */
		if ((h = varuint(b, n, &off, &v)) != HELLO_OK) return h;
	if ((h = string(b, n, &off, &v)) != HELLO_OK) return h; /* database */
	if ((h = string(b, n, &off, &user_len)) != HELLO_OK) return h;
	if ((h = string(b, n, &off, &v)) != HELLO_OK) return h; /* password */
	return user_len > 0 ? HELLO_OK : HELLO_BAD;
}

/* read_hello reads from client into b until it holds a whole valid Hello;
 * it returns the bytes read (the Hello and anything after it), or -1 when
 * the client sent something else, ended, or took longer than
 * HELLO_TIMEOUT_MS in all. */
static ssize_t read_hello(int client, unsigned char *b) {
	size_t n = 0;
	struct pollfd p = {.fd = client, .events = POLLIN};
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = HELLO_TIMEOUT_MS - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
		if (left <= 0) return -1;
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) return -1;
		ssize_t got = read(client, b + n, HELLO_MAX - n);
		if (got < 0 && errno == EINTR) continue;
		if (got <= 0) return -1;
		n += (size_t)got;
		enum hello h = hello_parse(b, n);
		if (h == HELLO_OK) return (ssize_t)n;
		if (h == HELLO_BAD || n == HELLO_MAX) return -1;
	}
}

static void *relay(void *arg) {
	int client = (int)(intptr_t)arg;
	unsigned char *hello = malloc(HELLO_MAX);
	ssize_t hn = hello ? read_hello(client, hello) : -1;
	if (hn < 0) {
		/* Not a native-protocol client: ClickHouse never sees it. */
		free(hello);
		close(client);
		return NULL;
	}
	int backend = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = loopback(backend_port);
	if (backend < 0 || no_delay(client) != 0 || no_delay(backend) != 0 ||
	    connect(backend, (struct sockaddr *)&a, sizeof a) != 0 ||
	    write_all(backend, hello, (size_t)hn) != 0) {
		free(hello);
		close(client);
		if (backend >= 0) end_backend(backend);
		return NULL;
	}
	free(hello);
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
	end_backend(backend);
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
