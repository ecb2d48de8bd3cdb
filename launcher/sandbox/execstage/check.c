/*
 * A test driver of the plan reader (handover.c), built and run by
 * launcher/sandbox's tests, never installed. It reads inputs framed as a
 * u32 little-endian length and that many bytes (a header and a body) from
 * stdin, and for each writes one line: "refused <reason>", or "ok" and
 * the parsed fields as key=hex pairs, so the Go side can compare what the
 * C reader understood with what the Go encoder meant.
 */
#include "handover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void hex(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static void str(const char *key, const char *s)
{
	printf(" %s=", key);
	hex(s, strlen(s));
}

int main(void)
{
	unsigned char lenb[4];
	while (fread(lenb, 1, 4, stdin) == 4) {
		size_t n = (size_t)lenb[0] | (size_t)lenb[1] << 8 | (size_t)lenb[2] << 16 | (size_t)lenb[3] << 24;
		unsigned char *in = malloc(n > 0 ? n : 1);
		if (in == NULL || fread(in, 1, n, stdin) != n)
			return 1;
		const char *err = NULL;
		uint32_t body = 0;
		struct handover h;
		if (n < HO_HEADER_SIZE)
			err = "short header";
		else if ((err = ho_header(in, &body)) == NULL && body != n - HO_HEADER_SIZE)
			err = "body length does not match";
		if (err == NULL) {
			/* A copy of exactly the body, so that an over-read is caught by the sanitizers. */
			unsigned char *b = malloc(body > 0 ? body : 1);
			memcpy(b, in + HO_HEADER_SIZE, body);
			err = ho_parse(b, body, &h);
			free(b);
		}
		free(in);
		if (err != NULL) {
			printf("refused %s\n", err);
		} else {
			printf("ok flags=%u uid=%u gid=%u fsize=%llu nofile=%llu landlock=%u filter=", h.flags, h.uid,
			       h.gid, (unsigned long long)h.fsize, (unsigned long long)h.nofile, h.landlock_flags);
			for (size_t i = 0; i < h.filter_len; i++)
				printf("%04x%02x%02x%08x", h.filter[i].code, h.filter[i].jt, h.filter[i].jf, h.filter[i].k);
			if (h.dir != NULL)
				str("dir", h.dir);
			str("exe", h.exe);
			for (size_t i = 0; i < h.argc; i++)
				str("arg", h.argv[i]);
			if (h.argv[h.argc] != NULL || h.envp[h.envc] != NULL)
				return 2;
			for (size_t i = 0; i < h.envc; i++)
				str("env", h.envp[i]);
			printf(" ns=%u", h.ns);
			if (h.hostname != NULL)
				str("hostname", h.hostname);
			if (h.have_server)
				printf(" server=%u,%u,%u,%u", h.srv_in_uid, h.srv_in_gid, h.srv_host_uid, h.srv_host_gid);
			if (h.have_init_id)
				printf(" initid=%u,%u", h.init_uid, h.init_gid);
			if (h.flags & HO_F_LANDLOCK)
				printf(" ruleset=%llu,%llu,%llu", (unsigned long long)h.handled_fs,
				       (unsigned long long)h.handled_net, (unsigned long long)h.scoped);
			str("staging", h.staging);
			for (size_t i = 0; i < h.nmounts; i++) {
				printf(" mount=%u:", h.mounts[i].flags);
				hex(h.mounts[i].path, strlen(h.mounts[i].path));
			}
			for (size_t i = 0; i < h.nlinks; i++) {
				printf(" link=");
				hex(h.links[i].path, strlen(h.links[i].path));
				printf(":");
				hex(h.links[i].target, strlen(h.links[i].target));
			}
			for (size_t i = 0; i < h.ndirs; i++)
				str("mkdir", h.dirs[i]);
			if (h.have_tmp) {
				printf(" tmp=%llu,%u,%u:", (unsigned long long)h.tmp_size, h.tmp_uid, h.tmp_gid);
				hex(h.tmp, strlen(h.tmp));
			}
			for (size_t i = 0; i < h.nrules; i++) {
				printf(" rule=%llu,%u:", (unsigned long long)h.rules[i].access, h.rules[i].flags);
				hex(h.rules[i].path, strlen(h.rules[i].path));
			}
			for (size_t i = 0; i < h.nports; i++)
				printf(" port=%llu,%u", (unsigned long long)h.ports[i].access, (unsigned)h.ports[i].port);
			printf("\n");
			ho_free(&h);
		}
		fflush(stdout);
	}
	return 0;
}
