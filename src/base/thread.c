/* Library threads: one way to start them. See thread.h for the policy. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "base/thread.h"

#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>

/* Faults of the thread itself: a blocked one would kill the process
 * without its handler (or hang it), so they stay deliverable. */
static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};

/* The signals a library thread blocks: all but the synchronous ones. */
static void async_signals(sigset_t *set) {
    sigfillset(set);
    for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(set, sync_signals[i]);
}

/* What the new thread needs before it runs fn: on the starter's stack,
 * which waits (copied) until the thread has taken it. */
typedef struct start {
    void *(*fn)(void *);
    void *arg;
    char name[SL_THREAD_NAME_MAX + 1]; /* "": none */
    sem_t copied;
} start;

/* The new thread names itself before anything else runs on it, so a
 * thread that shows a library name is past its start (its mask is the
 * final one: glibc unblocks what the starter's mask allows only then). */
static void *trampoline(void *p) {
    start *s = p;
    void *(*fn)(void *) = s->fn, *arg = s->arg;
    if (s->name[0]) pthread_setname_np(pthread_self(), s->name); /* a courtesy: its failure is not the thread's */
    sem_post(&s->copied); /* s is the starter's again */
    return fn(arg);
}

int sl__thread_start(pthread_t *t, void *(*fn)(void *), void *arg, size_t stack, const char *name) {
    start s = {fn, arg, "", {{0}}};
    if (name) snprintf(s.name, sizeof s.name, "%s", name);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc) return rc;
    if (stack) rc = pthread_attr_setstacksize(&attr, stack);
    if (!rc && sem_init(&s.copied, 0, 0)) rc = errno;
    if (rc) {
        pthread_attr_destroy(&attr);
        return rc;
    }
    sigset_t async, old;
    async_signals(&async);
    pthread_sigmask(SIG_BLOCK, &async, &old); /* the new thread inherits it */
    rc = pthread_create(t, &attr, trampoline, &s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc == 0)
        while (sem_wait(&s.copied) != 0) { /* EINTR: a handler ran on this thread */
        }
    sem_destroy(&s.copied);
    return rc;
}
