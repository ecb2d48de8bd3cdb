/*
 * The handover: what the run's init (launcher/sandbox, Go) gives the exec
 * stage (stage.c) on fd 3, in a compact, versioned binary form. The Go
 * encoder is launcher/sandbox/handover.go; both sides must agree on every
 * constant here.
 *
 *   header:  "MWXS"  u16 version (1)  u16 zero  u32 body length
 *   body:    records, each u16 tag, u32 length, that many bytes
 *
 * Integers are little-endian. Records come in increasing tag order; only
 * ARG and ENV repeat. Every record is checked, and the whole handover is
 * read and checked before anything is applied: a malformed one is refused
 * as a whole, never applied in part.
 */
#ifndef MCPWARDEN_HANDOVER_H
#define MCPWARDEN_HANDOVER_H

#include <stddef.h>
#include <stdint.h>

#define HO_MAGIC "MWXS"
#define HO_VERSION 1
#define HO_HEADER_SIZE 12
#define HO_MAX_BODY (4u << 20)
#define HO_MAX_STRINGS 65536
#define HO_MAX_FILTER 4096 /* BPF_MAXINSNS */

enum ho_tag {
	HO_FLAGS = 1,    /* u32 HO_F_* */
	HO_IDENTITY = 2, /* u32 uid, u32 gid: become them (setgroups, setresgid, setresuid) */
	HO_FSIZE = 3,    /* u64 RLIMIT_FSIZE, > 0 */
	HO_LANDLOCK = 4, /* u32 landlock_restrict_self flags; the ruleset is fd HO_RULESET_FD */
	HO_SECCOMP = 5,  /* struct sock_filter[], 1..HO_MAX_FILTER instructions */
	HO_DIR = 6,      /* the working directory, absolute */
	HO_EXE = 7,      /* the executable to exec */
	HO_ARG = 8,      /* argv, one record each, at least one */
	HO_ENV = 9,      /* envp, one record each */
};

enum ho_flag {
	HO_F_ENFORCE = 1u << 0,  /* apply the fence (audit mode: only chdir and exec) */
	HO_F_DROP_CAPS = 1u << 1, /* empty the bounding, ambient and other capability sets */
	HO_F_LANDLOCK = 1u << 2,
	HO_F_SECCOMP = 1u << 3,
	HO_F_IDENTITY = 1u << 4,
	HO_F_FSIZE = 1u << 5,
	HO_F_ALL = (1u << 6) - 1,
};

/* Descriptors of the exec stage. */
#define HO_IN_FD 3      /* the handover, then one go byte */
#define HO_STATUS_FD 4  /* JSON status lines to the init */
#define HO_RULESET_FD 5 /* the Landlock ruleset, when HO_F_LANDLOCK */
#define HO_GO_BYTE 'x'

struct ho_filter_insn {
	uint16_t code;
	uint8_t jt, jf;
	uint32_t k;
};

struct handover {
	uint32_t flags;
	uint32_t uid, gid;
	uint64_t fsize;
	uint32_t landlock_flags;
	struct ho_filter_insn *filter;
	size_t filter_len;
	char *dir; /* NULL: none */
	char *exe;
	char **argv; /* NULL-terminated */
	size_t argc;
	char **envp; /* NULL-terminated */
	size_t envc;
};

/*
 * ho_parse reads body (the bytes after the header, body_len of them) into
 * h. It returns NULL when the body is valid, or a constant message saying
 * what is wrong; then h holds nothing (ho_free was called).
 */
const char *ho_parse(const unsigned char *body, size_t body_len, struct handover *h);

/* ho_header checks the 12-byte header and returns the body length in *len. */
const char *ho_header(const unsigned char *hdr, uint32_t *len);

void ho_free(struct handover *h);

#endif
