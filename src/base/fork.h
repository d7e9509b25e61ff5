/*
 * The fork registry: every live handle of the library (loaders, shared
 * budgets), process-wide, and the one fork policy they follow.
 *
 * The child of fork() has only the thread that forked. A handle's threads
 * (a loader's workers and GPU stage, a budget's governor) did not follow
 * it, and any lock they held at the fork stays held forever in the child's
 * copy. A pthread_atfork child handler marks every handle registered at
 * the fork as forked; in the child:
 *  - every call on a forked handle that would take a lock, wait for a
 *    thread or read what the parent's threads were changing returns
 *    SL_ESTATE at once, with a sentence naming both processes and saying
 *    to create the handle after the fork (sl__fork_reason);
 *  - its destroy frees only the child's copy of its memory, without a
 *    lock, a condition variable, a join or a foreign library's state (the
 *    parent's threads may have held any of them);
 *  - a handle made in the child is an ordinary handle.
 * The thread side of the policy (signals, names, stacks) is base/thread.h.
 *
 * The registry also tells a live handle from a destroyed one: a call
 * after destroy does nothing. One intrusive list under one mutex, taken
 * for create, destroy and a loader's release (never per sample); held
 * across fork() (the prepare handler) so the child's copy of the list is
 * consistent, and unlocked by the child handler.
 */
#ifndef SL_FORK_H
#define SL_FORK_H

#include <stddef.h>

/* A handle's entry, inside the handle. */
typedef struct sl__handle {
    struct sl__handle *next; /* the registry's list (its lock) */
    long owner_pid;          /* the process that made the handle */
    int forked;              /* written only by the child handler, before the child runs anything
                                else, and never in the parent: read without a lock */
} sl__handle;

/* Register h (its owner: this process). */
void sl__fork_track(sl__handle *h);
/* 1 if h was registered (and is no longer), 0 if it was not. */
int sl__fork_untrack(sl__handle *h);
/* 1 with the registry locked if h is registered, else 0 (unlocked): for
 * calls that must not touch a destroyed handle. sl__fork_leave unlocks.
 * Lock order: the registry, then the handle's own locks. */
int sl__fork_enter(const sl__handle *h);
void sl__fork_leave(void);

/* For a forked h: "this <what> was created in process P and this is
 * process C, a child of fork(): <lost>, so it cannot be used here; create
 * <remedy> after the fork" into buf (NULL is ignored). */
void sl__fork_reason(const sl__handle *h, const char *what, const char *lost, const char *remedy, char *buf,
                     size_t len);

#endif
