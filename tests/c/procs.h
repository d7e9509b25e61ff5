/*
 * Helpers for tests that run parts in other processes: one byte at a time
 * through a pipe (a child's "ready", a parent's "go"), and a PID namespace
 * of a child's own (`unshare --pid --fork --mount-proc`). Include after
 * defining _GNU_SOURCE.
 */
#ifndef SL_TEST_PROCS_H
#define SL_TEST_PROCS_H

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

static inline void put_byte(int fd, char x) {
    if (write(fd, &x, 1) != 1) _exit(90);
}

/* The next byte, or 0 at end of file (the writer died). */
static inline char get_byte(int fd) {
    char x = 0;
    return read(fd, &x, 1) == 1 ? x : 0;
}

/* Unshare the PID (and mount) namespace: the next child forked is pid 1 of
 * a new one, with the same /dev/shm. NULL, or why not (no root, no
 * namespaces). */
static inline const char *enter_pid_namespace(void) {
    static char why[160];
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) {
        snprintf(why, sizeof why, "unshare(CLONE_NEWPID | CLONE_NEWNS): %s", strerror(errno));
        return why;
    }
    return NULL;
}

/* In that child: a /proc of its own namespace. NULL, or why not. */
static inline const char *mount_own_proc(void) {
    static char why[160];
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        snprintf(why, sizeof why, "mounting a /proc for the namespace: %s", strerror(errno));
        return why;
    }
    return NULL;
}

#endif
