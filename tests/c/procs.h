/*
 * Helpers for tests that run parts in other processes: a bounded wait for a
 * child, one byte at a time
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* Wait for pid at most secs; a child still running then is killed and the
 * case fails: a hang. Returns its wait status. */
static inline int wait_child_status(pid_t pid, int secs) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    for (int i = 0; i < secs * 100; i++) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    SL_FAIL("the child hung for %d s", secs);
}

/* The same, as its exit code, or 128 + the signal that ended it. */
static inline int wait_child(pid_t pid, int secs) {
    int st = wait_child_status(pid, secs);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

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

/* Fork a child that becomes pid 1 of a PID namespace of its own (with a
 * /proc of its own when own_proc) and runs fn(arg) there; fn exits, and
 * its exit status is the child's. Where the namespace cannot be made (no
 * root, no namespaces) the child writes 's' and why on report (a pipe's
 * write end) and exits 0. Returns the child's pid. */
static inline pid_t fork_in_pid_namespace(int own_proc, int report, void (*fn)(void *), void *arg) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    const char *why = enter_pid_namespace();
    pid_t inner = why ? -1 : fork();
    if (inner == 0) {
        if (own_proc) why = mount_own_proc();
        if (!why) {
            fn(arg);
            _exit(0);
        }
    }
    if (why) {
        char line[200];
        int n = snprintf(line, sizeof line, "s%s\n", why);
        if (write(report, line, (size_t)n) != n) _exit(93);
        _exit(0);
    }
    int st;
    _exit(waitpid(inner, &st, 0) == inner && WIFEXITED(st) ? WEXITSTATUS(st) : 94);
}

/* The first byte that child wrote on fd (the read end), or 0 when it was
 * skipped: then "skipped: why" is printed and the child waited for. */
static inline char first_report(int fd, pid_t pid) {
    char first = get_byte(fd);
    if (first != 's') return first;
    char why[200] = "";
    ssize_t n = read(fd, why, sizeof why - 1);
    why[n > 0 ? n : 0] = 0;
    printf("skipped: %s", why);
    waitpid(pid, NULL, 0);
    return 0;
}

#endif
