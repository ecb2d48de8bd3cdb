/* Shared by the exec stage (stage.c) and the run's init (init.c), which are
 * one program: mcpwarden-exec, started as "mcpwarden-init" for the init,
 * which forks the stage. */
#ifndef MCPWARDEN_INIT_H
#define MCPWARDEN_INIT_H

#include "handover.h"

#define INIT_NAME "mcpwarden-init"

void status(const char *stage, int err, const char *path, const char *msg);
void writeall(int fd, const char *b, size_t n);
int clear_caps(void);
int fail(const char *stage, int err, const char *path, const char *msg);
int die_with_init(void);
int init_main(int argc, char **argv);
int stage_main(const struct handover *h);
int readfull(int fd, unsigned char *b, size_t n);

#endif
