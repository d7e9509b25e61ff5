/*
 * Budgets in tests (base/mem.h's sl__budget), header-only: a root with two
 * children that draw on it, bytes granted and fixed, the end of a case
 * (nothing left counted), and threads blocked in sl__budget_wait, counted
 * in the order they were served. Each case is its own process, so the
 * completion counter is one per process. And a loader's creation with
 * each allocation failing in turn (base/mem.h's sl__mem_fail_after; not in
 * run.h, which test_abi includes against the shared library, where the
 * library's internals are hidden).
 */
#ifndef SL_TEST_BUDGET_FIXTURE_H
#define SL_TEST_BUDGET_FIXTURE_H

#include <pthread.h>
#include <stdatomic.h>

#include "sluice.h"

#include "base/mem.h"
#include "check.h"
#include "clock.h"

#define BF_FN static __attribute__((unused))

/* A root of limit and children a and b of the same limit attached to it,
 * their own limits unbound: the root's binds. */
BF_FN void bf_family(sl__budget *root, sl__budget *a, sl__budget *b, uint64_t limit) {
    CHECK_OK(sl__budget_init(root, limit));
    CHECK_OK(sl__budget_init(a, limit));
    CHECK_OK(sl__budget_init(b, limit));
    sl__budget_attach(a, root);
    sl__budget_attach(b, root);
    sl__budget_unbind_limit(a);
    sl__budget_unbind_limit(b);
}

/* The end of a case: everything given back, then fini. */
BF_FN void bf_end(sl__budget *b) {
    CHECK_EQ(atomic_load(&b->used), 0);
    sl__budget_fini(b);
}

/* ---- a loader's creation, every allocation failing in turn ------------------- */

/* sl_loader_create of cfg with allocation n failing, for n = 0, 1, ...
 * until it succeeds. cfg's budget must be far larger than needed: the
 * budget is never the reason, so every failure must be SL_ENOMEM with a
 * sentence, and leak nothing (ASan). each, when not NULL, is called after
 * every try with what create returned. At least 4 allocations must have
 * failed; the loader that opened is returned (the caller destroys it). */
BF_FN sl_loader *bf_open_failing_each_alloc(const sl_config *cfg, void (*each)(int rc)) {
    int failed = 0;
    for (long n = 0; n < 10000; n++) {
        sl__mem_fail_after(n);
        sl_loader *ld = NULL;
        char err[512] = "";
        int rc = sl_loader_create(cfg, &ld, err, sizeof err);
        sl__mem_fail_after(-1);
        if (each) each(rc);
        if (rc == 0) {
            CHECK(failed > 3);
            return ld;
        }
        if (rc != SL_ENOMEM)
            SL_FAIL("allocation %ld failed: %s (%s), expected %s", n, sl_strerror(rc), err, sl_strerror(SL_ENOMEM));
        CHECK(err[0] != 0);
        failed++;
    }
    SL_FAIL("sl_loader_create still failed after %d failed allocations", failed);
}

/* ---- threads in sl__budget_wait ------------------------------------------------ */

static _Atomic int bf_served; /* waits that returned so far, this process */

typedef struct bf_waiter {
    sl__budget *b;
    uint64_t n;
    int rc;          /* what the wait returned */
    _Atomic int done;
    int place;       /* which return this was: 0 first */
    pthread_t thread;
} bf_waiter;

BF_FN void *bf_wait_main(void *arg) {
    bf_waiter *w = arg;
    w->rc = sl__budget_wait(w->b, w->n, SL_MEM_SCRATCH);
    w->place = atomic_fetch_add(&bf_served, 1);
    atomic_store(&w->done, 1);
    return NULL;
}

/* A thread that waits for n bytes of b (SL_MEM_SCRATCH). */
BF_FN void bf_wait_start(bf_waiter *w, sl__budget *b, uint64_t n) {
    w->b = b;
    w->n = n;
    w->rc = -99;
    atomic_store(&w->done, 0);
    w->place = -1;
    CHECK_EQ(pthread_create(&w->thread, NULL, bf_wait_main, w), 0);
}

/* Until its wait returned. */
BF_FN void bf_wait_join(bf_waiter *w) { CHECK_EQ(pthread_join(w->thread, NULL), 0); }

/* Until n threads wait in b (at most 10 s). */
BF_FN void bf_until_waiters(sl__budget *b, int n) {
    for (int i = 0; i < 10000 && atomic_load(&b->waiters) < n; i++) bx_sleep_ms(1);
    CHECK_EQ(atomic_load(&b->waiters), n);
}

#endif
