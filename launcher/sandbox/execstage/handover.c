/* The init's reader of the plan (handover.h). It makes no system call: the
 * test driver (check.c) runs it on arbitrary input. */
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

/* grow makes room for one more element of size elem in *arr of *n, bounded
 * by HO_MAX_STRINGS. */
static int grow(void **arr, size_t n, size_t *cap, size_t elem)
{
	if (n >= HO_MAX_STRINGS)
		return -1;
	if (n + 1 > *cap) {
		size_t c = *cap < 16 ? 16 : 2 * *cap;
		void *a = realloc(*arr, c * elem);
		if (a == NULL)
			return -1;
		*arr = a;
		*cap = c;
	}
	return 0;
}

int ho_clean(const char *s)
{
	size_t n = strlen(s);
	if (n < 2 || n > HO_MAX_PATH || s[0] != '/' || s[n - 1] == '/')
		return 0;
	for (const char *c = s; *c != 0;) {
		/* c is at a '/': the component after it */
		const char *e = strchr(c + 1, '/');
		size_t l = e == NULL ? strlen(c + 1) : (size_t)(e - c - 1);
		if (l == 0 || (l == 1 && c[1] == '.') || (l == 2 && c[1] == '.' && c[2] == '.'))
			return 0;
		if (e == NULL)
			break;
		c = e;
	}
	return 1;
}

/* dirpath copies a path record that must be clean and absolute. */
static char *dirpath(const unsigned char *v, uint32_t n)
{
	if (n > HO_MAX_PATH)
		return NULL;
	char *s = dupstr(v, n);
	if (s != NULL && !ho_clean(s)) {
		free(s);
		return NULL;
	}
	return s;
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
	free(h->hostname);
	free(h->staging);
	for (size_t i = 0; i < h->nmounts; i++)
		free(h->mounts[i].path);
	free(h->mounts);
	for (size_t i = 0; i < h->nlinks; i++) {
		free(h->links[i].path);
		free(h->links[i].target);
	}
	free(h->links);
	freelist(h->dirs, h->ndirs);
	free(h->tmp);
	for (size_t i = 0; i < h->nrules; i++)
		free(h->rules[i].path);
	free(h->rules);
	free(h->ports);
	memset(h, 0, sizeof(*h));
}

static const char *parse(const unsigned char *b, size_t n, struct handover *h)
{
	size_t off = 0;
	unsigned last = 0;
	int have_flags = 0;
	unsigned seen = 0;
	size_t argcap = 0, envcap = 0, mcap = 0, lcap = 0, dcap = 0, rcap = 0, pcap = 0;
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
		int repeats = tag == HO_ARG || tag == HO_ENV || tag == HO_MOUNT || tag == HO_LINK || tag == HO_MKDIR ||
			      tag == HO_RULE || tag == HO_PORT;
		if (tag < last || (tag == last && !repeats))
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
		case HO_NOFILE:
			if (len != 8)
				return "open files record of the wrong size";
			if (!(h->flags & HO_F_NOFILE))
				return "open files record without its flag";
			h->nofile = get64(v);
			if (h->nofile == 0)
				return "open files limit 0";
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
		case HO_NS:
			if (len != 4)
				return "namespaces record of the wrong size";
			h->ns = get32(v);
			if (h->ns & ~HO_NS_ALL)
				return "unknown namespace flags";
			break;
		case HO_HOSTNAME:
			if (len == 0 || len > HO_MAX_HOSTNAME)
				return "host name of the wrong size";
			if ((h->hostname = dupstr(v, len)) == NULL)
				return "host name holds a NUL byte";
			break;
		case HO_SERVER:
			if (len != 16)
				return "server user namespace record of the wrong size";
			h->srv_in_uid = get32(v);
			h->srv_in_gid = get32(v + 4);
			h->srv_host_uid = get32(v + 8);
			h->srv_host_gid = get32(v + 12);
			if (h->srv_in_uid == UINT32_MAX || h->srv_in_gid == UINT32_MAX)
				return "server identity -1";
			if (h->srv_host_uid == 0 || h->srv_host_gid == 0 || h->srv_host_uid == UINT32_MAX ||
			    h->srv_host_gid == UINT32_MAX)
				return "the server's dedicated host ids must not be root or -1";
			h->have_server = 1;
			break;
		case HO_INIT_ID:
			if (len != 8)
				return "init identity record of the wrong size";
			h->init_uid = get32(v);
			h->init_gid = get32(v + 4);
			if (h->init_uid == UINT32_MAX || h->init_gid == UINT32_MAX)
				return "init identity -1";
			h->have_init_id = 1;
			break;
		case HO_RULESET:
			if (len != 24)
				return "ruleset record of the wrong size";
			if (!(h->flags & HO_F_LANDLOCK))
				return "ruleset record without the landlock flag";
			h->handled_fs = get64(v);
			h->handled_net = get64(v + 8);
			h->scoped = get64(v + 16);
			break;
		case HO_STAGING:
			if ((h->staging = dirpath(v, len)) == NULL)
				return "staging directory not a clean absolute path";
			break;
		case HO_MOUNT: {
			if (len < 4)
				return "mount record of the wrong size";
			if (grow((void **)&h->mounts, h->nmounts, &mcap, sizeof(*h->mounts)) != 0)
				return "too many mounts";
			struct ho_mount *m = &h->mounts[h->nmounts];
			m->flags = get32(v);
			if (m->flags & ~HO_M_ALL)
				return "unknown mount flags";
			if ((m->flags & HO_M_IDMAP) && !h->have_server)
				return "idmapped mount without the server's user namespace";
			if ((m->flags & HO_M_DEV) && (m->flags & HO_M_DIR))
				return "device mount of a directory";
			if ((m->flags & HO_M_MASK) && (m->flags & (HO_M_WRITE | HO_M_EXEC | HO_M_DEV | HO_M_IDMAP)))
				return "a mask must be read-only, noexec, nodev and not idmapped";
			if ((m->path = dirpath(v + 4, len - 4)) == NULL)
				return "mount path not a clean absolute path";
			h->nmounts++;
			break;
		}
		case HO_LINK: {
			if (len < 4)
				return "link record of the wrong size";
			uint32_t pl = get32(v);
			if (pl > len - 4 || len - 4 - pl == 0 || len - 4 - pl > HO_MAX_PATH)
				return "link record of the wrong size";
			if (grow((void **)&h->links, h->nlinks, &lcap, sizeof(*h->links)) != 0)
				return "too many links";
			struct ho_link *l = &h->links[h->nlinks];
			l->path = dirpath(v + 4, pl);
			l->target = l->path == NULL ? NULL : dupstr(v + 4 + pl, len - 4 - pl);
			if (l->path == NULL || l->target == NULL) {
				free(l->path);
				return "link path not clean or target holds a NUL byte";
			}
			h->nlinks++;
			break;
		}
		case HO_MKDIR:
			if ((s = dirpath(v, len)) == NULL)
				return "directory not a clean absolute path";
			if (push(&h->dirs, &h->ndirs, &dcap, s)) {
				free(s);
				return "too many directories";
			}
			break;
		case HO_TMP:
			if (len < 16)
				return "tmp record of the wrong size";
			h->tmp_size = get64(v);
			h->tmp_uid = get32(v + 8);
			h->tmp_gid = get32(v + 12);
			if (h->tmp_size == 0)
				return "tmp size 0";
			if (h->tmp_uid == UINT32_MAX || h->tmp_gid == UINT32_MAX)
				return "tmp owner -1";
			if ((h->tmp = dirpath(v + 16, len - 16)) == NULL)
				return "tmp path not a clean absolute path";
			h->have_tmp = 1;
			break;
		case HO_RULE: {
			if (len < 12)
				return "rule record of the wrong size";
			if (!(seen & 1u << HO_RULESET))
				return "rule without a ruleset";
			if (grow((void **)&h->rules, h->nrules, &rcap, sizeof(*h->rules)) != 0)
				return "too many rules";
			struct ho_rule *r = &h->rules[h->nrules];
			r->access = get64(v);
			r->flags = get32(v + 8);
			if (r->access == 0 || (r->access & ~h->handled_fs))
				return "rule access not handled by the ruleset";
			if (r->flags & ~HO_R_ALL)
				return "unknown rule flags";
			if ((r->flags & HO_R_SELF) && len == 12) {
				r->path = dupstr(v, 0); /* the server's /proc entry itself */
				if (r->path == NULL)
					return "out of memory";
			} else if ((r->path = dirpath(v + 12, len - 12)) == NULL) {
				return "rule path not a clean absolute path";
			}
			h->nrules++;
			break;
		}
		case HO_PORT: {
			if (len != 10)
				return "port record of the wrong size";
			if (!(seen & 1u << HO_RULESET))
				return "port rule without a ruleset";
			if (grow((void **)&h->ports, h->nports, &pcap, sizeof(*h->ports)) != 0)
				return "too many port rules";
			struct ho_port *pr = &h->ports[h->nports];
			pr->access = get64(v);
			pr->port = get16(v + 8);
			if (pr->access == 0 || (pr->access & ~h->handled_net))
				return "port access not handled by the ruleset";
			h->nports++;
			break;
		}
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
		{HO_F_NOFILE, HO_NOFILE, "open files flag without its record"},
		{HO_F_LANDLOCK, HO_LANDLOCK, "landlock flag without its record"},
		{HO_F_SECCOMP, HO_SECCOMP, "seccomp flag without its record"},
		{HO_F_LANDLOCK, HO_RULESET, "landlock flag without its ruleset"},
	};
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if ((h->flags & need[i].flag) && !(seen & 1u << need[i].tag))
			return need[i].err;
	if (h->exe == NULL)
		return "no executable";
	if ((h->flags & HO_F_IDENTITY) && h->have_server)
		return "an identity and the server's user namespace";
	if (h->argc == 0)
		return "no argv";
	if (!(seen & 1u << HO_NS))
		return "no namespaces record";
	if (h->staging == NULL)
		return "no staging directory";

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
