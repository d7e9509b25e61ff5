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
 * The registry is an intrusive list of the loaders' nodes (sl__reg) under one
 * mutex, taken for create, destroy and release (not per sample). The
 * mutex is held across fork() (prepare handler) so the child's copy of the
 * list is consistent; the child handler unlocks it.
 */
#include "pipeline/registry.h"

#include <pthread.h>

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sl__reg *reg_head; /* reg_mu */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void on_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void on_parent(void) { pthread_mutex_unlock(&reg_mu); }

static void on_child(void) {
    for (sl__reg *r = reg_head; r; r = r->next) r->forked = 1;
    pthread_mutex_unlock(&reg_mu);
}

static void install(void) { pthread_atfork(on_prepare, on_parent, on_child); }

void sl__registry_add(sl__reg *r) {
    pthread_once(&reg_once, install);
    pthread_mutex_lock(&reg_mu);
    r->next = reg_head;
    reg_head = r;
    pthread_mutex_unlock(&reg_mu);
}

int sl__registry_remove(sl__reg *r) {
    int found = 0;
    pthread_mutex_lock(&reg_mu);
    for (sl__reg **pp = &reg_head; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    return found;
}

int sl__registry_enter(const sl__reg *r) {
    pthread_mutex_lock(&reg_mu);
    for (const sl__reg *p = reg_head; p; p = p->next)
        if (p == r) return 1;
    pthread_mutex_unlock(&reg_mu);
    return 0;
}

void sl__registry_leave(void) { pthread_mutex_unlock(&reg_mu); }
