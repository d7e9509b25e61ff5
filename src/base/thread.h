/*
 * Every thread the library starts (loader workers, the governor, the GPU
 * stage, a folder scan's helpers) starts here, under one policy:
 *  - asynchronous signals (SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE,
 *    SIGALRM, SIGUSR1/2, real-time signals, ...) are blocked in the new
 *    thread, so the process's handlers run on the caller's threads, never
 *    in the middle of a decode; synchronous ones (SIGSEGV, SIGBUS, SIGFPE,
 *    SIGILL, SIGTRAP, SIGABRT, SIGSYS: a fault of the thread itself) stay
 *    deliverable. The mask is set around pthread_create, which the new
 *    thread inherits, and the caller's mask is put back before return;
 *  - the thread carries a name ("sl-worker-3", "sl-governor"; top -H,
 *    /proc/<pid>/task/<tid>/comm), which it sets itself before its
 *    function runs: a thread that shows a library name runs under its
 *    final mask;
 *  - its stack is the size its owner counts in its budget.
 * The fork side of the policy (what a child of fork() may do with a
 * handle whose threads did not follow it) is in base/fork.h.
 */
#ifndef SL_THREAD_H
#define SL_THREAD_H

#include <pthread.h>
#include <stddef.h>

/* Thread names: at most this many characters (the kernel's limit). */
#define SL_THREAD_NAME_MAX 15

/* Start fn(arg) on a new thread as above: stack bytes of stack (0: the
 * system's default), named name (cut to SL_THREAD_NAME_MAX; NULL: no
 * name). Returns once the thread has named itself: 0, or an error number
 * (pthread_create's; nothing started). */
int sl__thread_start(pthread_t *t, void *(*fn)(void *), void *arg, size_t stack, const char *name);

#endif
