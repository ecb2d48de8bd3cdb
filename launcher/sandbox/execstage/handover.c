/* The exec stage's reader of the handover (handover.h). It makes no system
 * call: the test driver (check.c) runs it on arbitrary input. */
#include "handover.h"

#include <stdlib.h>
#include <string.h>

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

const char *ho_header(const unsigned char *hdr, uint32_t *len)
{
	if (memcmp(hdr, HO_MAGIC, 4) != 0)
		return "not a handover (bad magic)";
	if (get16(hdr + 4) != HO_VERSION)
		return "unknown handover version";
	if (get16(hdr + 6) != 0)
		return "reserved header bits set";
	*len = get32(hdr + 8);
	if (*len > HO_MAX_BODY)
		return "handover too large";
	return NULL;
}

/* dupstr copies a string record; NULL when it holds a NUL byte or memory is out. */
static char *dupstr(const unsigned char *v, uint32_t n)
{
	if (memchr(v, 0, n) != NULL)
		return NULL;
	char *s = malloc((size_t)n + 1);
	if (s == NULL)
		return NULL;
	memcpy(s, v, n);
	s[n] = 0;
	return s;
}

/* push appends s to the NULL-terminated list *list of *n strings, of
 * room for *cap pointers. */
static int push(char ***list, size_t *n, size_t *cap, char *s)
{
	if (*n >= HO_MAX_STRINGS)
		return -1;
	if (*n + 2 > *cap) {
		size_t c = *cap < 16 ? 16 : 2 * *cap;
		char **l = realloc(*list, c * sizeof(char *));
		if (l == NULL)
			return -1;
		*list = l;
		*cap = c;
	}
	(*list)[(*n)++] = s;
	(*list)[*n] = NULL;
	return 0;
}

static void freelist(char **l, size_t n)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(l[i]);
	free(l);
}

void ho_free(struct handover *h)
{
	free(h->filter);
	free(h->dir);
	free(h->exe);
	freelist(h->argv, h->argc);
	freelist(h->envp, h->envc);
	memset(h, 0, sizeof(*h));
}

static const char *parse(const unsigned char *b, size_t n, struct handover *h)
{
	size_t off = 0;
	unsigned last = 0;
	int have_flags = 0;
	unsigned seen = 0;
	size_t argcap = 0, envcap = 0;
	while (off < n) {
		if (n - off < 6)
			return "truncated record header";
		unsigned tag = get16(b + off);
		uint32_t len = get32(b + off + 2);
		off += 6;
		if (len > n - off)
			return "record longer than the handover";
		const unsigned char *v = b + off;
		off += len;
		if (tag < last || (tag == last && tag != HO_ARG && tag != HO_ENV))
			return "records out of order or repeated";
		last = tag;
		if (tag < 32)
			seen |= 1u << tag;
		if (tag != HO_FLAGS && !have_flags)
			return "the flags record must come first";
		char *s;
		switch (tag) {
		case HO_FLAGS:
			if (len != 4)
				return "flags record of the wrong size";
			h->flags = get32(v);
			if (h->flags & ~HO_F_ALL)
				return "unknown flags";
			if (!(h->flags & HO_F_ENFORCE) && h->flags != 0)
				return "fence flags without enforce";
			have_flags = 1;
			break;
		case HO_IDENTITY:
			if (len != 8)
				return "identity record of the wrong size";
			if (!(h->flags & HO_F_IDENTITY))
				return "identity record without its flag";
			h->uid = get32(v);
			h->gid = get32(v + 4);
			/* -1 means "unchanged" to setresuid/setresgid: a partial drop. */
			if (h->uid == UINT32_MAX || h->gid == UINT32_MAX)
				return "identity -1";
			break;
		case HO_FSIZE:
			if (len != 8)
				return "file size record of the wrong size";
			if (!(h->flags & HO_F_FSIZE))
				return "file size record without its flag";
			h->fsize = get64(v);
			if (h->fsize == 0)
				return "file size limit 0";
			break;
		case HO_LANDLOCK:
			if (len != 4)
				return "landlock record of the wrong size";
			if (!(h->flags & HO_F_LANDLOCK))
				return "landlock record without its flag";
			h->landlock_flags = get32(v);
			break;
		case HO_SECCOMP:
			if (!(h->flags & HO_F_SECCOMP))
				return "seccomp record without its flag";
			if (len == 0 || len % 8 != 0 || len / 8 > HO_MAX_FILTER)
				return "seccomp program of the wrong size";
			h->filter_len = len / 8;
			h->filter = calloc(h->filter_len, sizeof(*h->filter));
			if (h->filter == NULL)
				return "out of memory";
			for (size_t i = 0; i < h->filter_len; i++) {
				const unsigned char *p = v + 8 * i;
				h->filter[i].code = get16(p);
				h->filter[i].jt = p[2];
				h->filter[i].jf = p[3];
				h->filter[i].k = get32(p + 4);
			}
			break;
		case HO_DIR:
			if (len == 0 || v[0] != '/')
				return "working directory not absolute";
			if ((h->dir = dupstr(v, len)) == NULL)
				return "working directory holds a NUL byte";
			break;
		case HO_EXE:
			if (len == 0)
				return "empty executable";
			if ((h->exe = dupstr(v, len)) == NULL)
				return "executable holds a NUL byte";
			break;
		case HO_ARG:
		case HO_ENV:
			if ((s = dupstr(v, len)) == NULL)
				return "argument or environment string holds a NUL byte";
			if (tag == HO_ARG ? push(&h->argv, &h->argc, &argcap, s) : push(&h->envp, &h->envc, &envcap, s)) {
				free(s);
				return "too many arguments or environment strings";
			}
			break;
		default:
			return "unknown record";
		}
	}
	if (!have_flags)
		return "no flags record";
	static const struct {
		uint32_t flag;
		unsigned tag;
		const char *err;
	} need[] = {
		{HO_F_IDENTITY, HO_IDENTITY, "identity flag without its record"},
		{HO_F_FSIZE, HO_FSIZE, "file size flag without its record"},
		{HO_F_LANDLOCK, HO_LANDLOCK, "landlock flag without its record"},
		{HO_F_SECCOMP, HO_SECCOMP, "seccomp flag without its record"},
	};
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if ((h->flags & need[i].flag) && !(seen & 1u << need[i].tag))
			return need[i].err;
	if (h->exe == NULL)
		return "no executable";
	if (h->argc == 0)
		return "no argv";
	if (h->envp == NULL && (h->envp = calloc(1, sizeof(char *))) == NULL)
		return "out of memory";
	return NULL;
}

const char *ho_parse(const unsigned char *body, size_t body_len, struct handover *h)
{
	memset(h, 0, sizeof(*h));
	const char *err = parse(body, body_len, h);
	if (err != NULL)
		ho_free(h);
	return err;
}
