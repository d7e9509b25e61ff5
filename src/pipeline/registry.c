/*
 * The registry of live loaders, process-wide.
 *
 * Two jobs:
 *  - fork(). The child of a fork has only the thread that forked; the
 *    loader's workers are gone and any lock they held stays held forever in
 *    the child's copy. A pthread_atfork child handler marks every loader
 *    registered at the fork as forked; every call that would take a lock
 *    checks the mark first (a plain read: it is written only in the child,
 *    before the child can run anything else) and returns SL_ESTATE, and
 *    sl_loader_destroy frees only the child's copy without touching a lock.
 *  - calls on a destroyed loader. sl_loader_release(ld, b) after
 *    sl_loader_destroy(ld) would read freed memory; it asks the registry
 *    first and does nothing for a loader that is not live.
 *
 * The registry is an intrusive list through sl_loader.reg_next under one
 * mutex, taken for create, destroy and release (not per sample). The
 * mutex is held across fork() (prepare handler) so the child's copy of the
 * list is consistent; the child handler unlocks it.
 */
#include <pthread.h>
#include <unistd.h>

#include "pipeline/loader_impl.h"

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sl_loader *reg_head; /* reg_mu */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void on_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void on_parent(void) { pthread_mutex_unlock(&reg_mu); }

static void on_child(void) {
    for (sl_loader *ld = reg_head; ld; ld = ld->reg_next) ld->forked = 1;
    pthread_mutex_unlock(&reg_mu);
}

static void install(void) { pthread_atfork(on_prepare, on_parent, on_child); }

void sl__registry_add(sl_loader *ld) {
    pthread_once(&reg_once, install);
    ld->owner_pid = (long)getpid();
    pthread_mutex_lock(&reg_mu);
    ld->reg_next = reg_head;
    reg_head = ld;
    pthread_mutex_unlock(&reg_mu);
}

int sl__registry_remove(sl_loader *ld) {
    int found = 0;
    pthread_mutex_lock(&reg_mu);
    for (sl_loader **pp = &reg_head; *pp; pp = &(*pp)->reg_next)
        if (*pp == ld) {
            *pp = ld->reg_next;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    return found;
}

int sl__registry_enter(const sl_loader *ld) {
    pthread_mutex_lock(&reg_mu);
    for (const sl_loader *p = reg_head; p; p = p->reg_next)
        if (p == ld) return 1;
    pthread_mutex_unlock(&reg_mu);
    return 0;
}

void sl__registry_leave(void) { pthread_mutex_unlock(&reg_mu); }
