/*
 * The plan: what the launcher (launcher/sandbox, Go: plan.go) gives the
 * run's C init (init.c) on fd 3, in a compact, versioned binary form: the
 * whole run's set-up, computed by the launcher, which the init performs in
 * a fixed order without deciding anything. The Go encoder is
 * launcher/sandbox/handover.go and plan.go; both sides must agree on every
 * constant here.
 *
 *   header:  "MWXS"  u16 version (2)  u16 zero  u32 body length
 *   body:    records, each u16 tag, u32 length, that many bytes
 *
 * Integers are little-endian. Records come in increasing tag order; only
 * ARG, ENV, MOUNT, LINK, MKDIR, RULE and PORT repeat. Every record is
 * checked, and the whole plan is read and checked before anything is
 * applied: a malformed one is refused as a whole, never applied in part.
 */
#ifndef MCPWARDEN_HANDOVER_H
#define MCPWARDEN_HANDOVER_H

#include <stddef.h>
#include <stdint.h>

#define HO_MAGIC "MWXS"
#define HO_VERSION 2
#define HO_HEADER_SIZE 12
#define HO_MAX_BODY (4u << 20)
#define HO_MAX_STRINGS 65536
#define HO_MAX_FILTER 4096 /* BPF_MAXINSNS */
#define HO_MAX_PATH 4095   /* PATH_MAX less its NUL */
#define HO_MAX_HOSTNAME 64 /* HOST_NAME_MAX */

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
	/* The run's set-up, done by the init before the stage applies the above. */
	HO_NS = 10,       /* u32 HO_NS_*: what the init sets up in its namespaces */
	HO_HOSTNAME = 11, /* the uts namespace's host name, 1..64 bytes */
	HO_SERVER = 12,   /* u32 inside uid, gid, host uid, gid: the stage's own user namespace */
	HO_INIT_ID = 13,  /* u32 uid, gid the init becomes (none: it keeps its ids, drops every capability) */
	HO_RULESET = 14,  /* u64 handled fs, net, scoped: the Landlock ruleset (with HO_F_LANDLOCK) */
	HO_STAGING = 15,  /* the empty directory the new root is built on */
	HO_MOUNT = 16,    /* u32 HO_M_*, path: one bind of a host path onto the same path inside */
	HO_LINK = 17,     /* u32 path length, path, target: a symlink inside */
	HO_MKDIR = 18,    /* path: an empty directory inside */
	HO_TMP = 19,      /* u64 size, u32 uid, u32 gid, path: the private TMPDIR's tmpfs */
	HO_RULE = 20,     /* u64 access, u32 HO_R_*, path: a Landlock path rule */
	HO_PORT = 21,     /* u64 access, u16 port: a Landlock TCP port rule */
	HO_NOFILE = 22,   /* u64 RLIMIT_NOFILE ceiling, > 0: soft and hard are lowered to it (with HO_F_NOFILE; last, as tags go in order) */
};

enum ho_ns_flag {
	HO_NS_NET = 1u << 0,       /* bring up loopback */
	HO_NS_MEMFD_NOEXEC = 1u << 1, /* vm.memfd_noexec=2 in the run's /proc */
	HO_NS_NO_USERNS = 1u << 2, /* user.max_user_namespaces=0 in the run's /proc */
	HO_NS_ALL = (1u << 3) - 1,
};

enum ho_mount_flag {
	HO_M_DIR = 1u << 0,   /* a directory (else a file or device) */
	HO_M_WRITE = 1u << 1, /* writable (else read-only) */
	HO_M_EXEC = 1u << 2,  /* executable (else noexec) */
	HO_M_DEV = 1u << 3,   /* a character device, openable (else nodev) */
	HO_M_IDMAP = 1u << 4, /* idmapped to the stage's user namespace (HO_SERVER) */
	HO_M_MASK = 1u << 5,  /* not a bind: an empty, mode-000, read-only file or directory over the path */
	HO_M_ALL = (1u << 6) - 1,
};

enum ho_rule_flag {
	HO_R_SELF = 1u << 0, /* the path is below the server's own /proc entry: /proc/PID + path */
	HO_R_PIN = 1u << 1,  /* hold the path open for the run (a procfs entry) */
	HO_R_ALL = (1u << 2) - 1,
};

enum ho_flag {
	HO_F_ENFORCE = 1u << 0,  /* apply the fence (audit mode: only chdir and exec) */
	HO_F_DROP_CAPS = 1u << 1, /* empty the bounding, ambient and other capability sets */
	HO_F_LANDLOCK = 1u << 2,
	HO_F_SECCOMP = 1u << 3,
	HO_F_IDENTITY = 1u << 4,
	HO_F_FSIZE = 1u << 5,
	HO_F_NOFILE = 1u << 6,
	HO_F_ALL = (1u << 7) - 1,
};

/* Descriptors: of the init, the launcher's; of the stage after its fork. */
#define HO_IN_FD 3      /* the plan, then one go byte (the stage reads the byte) */
#define HO_STATUS_FD 4  /* JSON status lines: the init's to the launcher, the stage's to the init */
#define HO_RULESET_FD 5 /* the stage's Landlock ruleset, when HO_F_LANDLOCK */
#define HO_PREPARED_FD 6 /* the stage's: one byte from the init once the run is set up */
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
	uint64_t nofile;
	uint32_t landlock_flags;
	struct ho_filter_insn *filter;
	size_t filter_len;
	char *dir; /* NULL: none */
	char *exe;
	char **argv; /* NULL-terminated */
	size_t argc;
	char **envp; /* NULL-terminated */
	size_t envc;

	uint32_t ns;
	char *hostname;       /* NULL: none */
	int have_server;      /* the stage's own user namespace: */
	uint32_t srv_in_uid, srv_in_gid, srv_host_uid, srv_host_gid;
	int have_init_id;     /* else: keep the ids, drop every capability */
	uint32_t init_uid, init_gid;
	uint64_t handled_fs, handled_net, scoped;
	char *staging;
	struct ho_mount {
		uint32_t flags;
		char *path;
	} *mounts;
	size_t nmounts;
	struct ho_link {
		char *path, *target;
	} *links;
	size_t nlinks;
	char **dirs;
	size_t ndirs;
	int have_tmp;
	uint64_t tmp_size;
	uint32_t tmp_uid, tmp_gid;
	char *tmp;
	struct ho_rule {
		uint64_t access;
		uint32_t flags;
		char *path;
	} *rules;
	size_t nrules;
	struct ho_port {
		uint64_t access;
		uint16_t port;
	} *ports;
	size_t nports;
};

/*
 * ho_parse reads body (the bytes after the header, body_len of them) into
 * h. It returns NULL when the body is valid, or a constant message saying
 * what is wrong; then h holds nothing (ho_free was called).
 */
const char *ho_parse(const unsigned char *body, size_t body_len, struct handover *h);

/* ho_clean reports whether s is a clean absolute path below "/": no
 * empty, "." or ".." component, no trailing slash. */
int ho_clean(const char *s);

/* ho_header checks the 12-byte header and returns the body length in *len. */
const char *ho_header(const unsigned char *hdr, uint32_t *len);

void ho_free(struct handover *h);

#endif
