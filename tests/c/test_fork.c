/*
 * fork() with a running loader (issue 9) and a shared budget with its
 * governor. In the child the workers and the governor do not exist and
 * any lock they held at the fork stays held: every call on an inherited
 * loader or budget must return SL_ESTATE at once, a loader on an
 * inherited budget is refused, destroy must free only the child's copy
 * (never joining a parent's thread), and nothing may hang. A loader or a
 * budget made after the fork works. Not under TSan (which does not follow
 * a multi-threaded fork).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "fixture.h"
#include "procs.h"
#include "sluice.h"
#include "threads.h"

/* GCC 12's libasan has no fork handler for its allocator: a child that
 * allocates deadlocks in malloc when a parent thread was inside malloc at
 * the fork (seen: a size class's lock held by a worker's decode). Under
 * ASan, fork only once the workers are idle (every slot decoded, and a
 * moment for the last commit to settle); plain builds fork while they run,
 * which is what the library must survive. */
static void quiesce_for_asan(sl_loader *ld) {
#if defined(__SANITIZE_ADDRESS__)
    struct timespec ts = {0, 5 * 1000 * 1000};
    sl_stats st;
    do {
        nanosleep(&ts, NULL);
        CHECK_OK(sl_loader_stats(ld, &st));
    } while (st.slots_ready + st.slots_held < st.slots);
    ts.tv_nsec = 100 * 1000 * 1000;
    nanosleep(&ts, NULL);
#else
    (void)ld;
#endif
}

/* In a child: a call that did not return code sets `bad` (the child's exit status). */
#define EXPECT(expr, code)                                                                            \
    do {                                                                                              \
        int rc_ = (expr);                                                                             \
        if (rc_ != (code)) {                                                                          \
            fprintf(stderr, "child: %s returned %d, expected %d\n", #expr, rc_, code);                \
            bad = 1;                                                                                  \
        }                                                                                             \
    } while (0)

/* In the child: every call on the inherited loader, at once. */
static int child_calls(sl_loader *ld, sl_batch *held) {
    int bad = 0;
    sl_batch *b = (sl_batch *)1;
    EXPECT(sl_loader_next(ld, &b), SL_ESTATE);
    if (b != NULL) bad = 1;
    EXPECT(sl_loader_next_timeout(ld, &b, 1000), SL_ESTATE);
    EXPECT(sl_loader_set_epoch(ld, 5), SL_ESTATE);
    sl_state st;
    EXPECT(sl_loader_get_state(ld, &st), SL_ESTATE);
    EXPECT(sl_loader_set_state(ld, &st), SL_ESTATE);
    sl_stats s;
    EXPECT(sl_loader_stats(ld, &s), SL_ESTATE);
    sl_error_record e;
    EXPECT(sl_loader_last_error(ld, &e), SL_ESTATE);
    EXPECT((int)sl_loader_errors(ld, 0, &e, 1), 0);
    char why[400];
    EXPECT(sl_loader_poisoned(ld, why, sizeof why), SL_ESTATE);
    char pid[32];
    snprintf(pid, sizeof pid, "this is process %ld", (long)getpid());
    if (!strstr(why, "fork()") || !strstr(why, pid) || !strstr(why, "create a new loader after the fork")) {
        fprintf(stderr, "child: poisoned says: %s\n", why);
        bad = 1;
    }
    /* immutable facts still answer */
    if (sl_loader_len(ld) == 0) bad = 1;
    sl_loader_release(ld, held); /* nothing to give back in the child */
    sl_loader_destroy(ld);       /* the child's copy only */
    return bad;
}

TEST(fork_child_gets_estate_never_hangs) {
    fx_dataset *d = fx_new(200, 0, 96, 400);
    sl_config c;
    sl_config_init(&c);
    c.source = d->root;
    c.batch_size = 4;
    c.size = 64;
    c.workers = 4;
    c.budget = 64u << 20;
    sl_loader *ld = fx_open(&c);
    sl_batch *held;
    CHECK_OK(sl_loader_next(ld, &held));
    /* fork again and again while the workers fill slots: some forks find
     * a lock taken (the loader's, the budget's, malloc's) */
    for (int i = 0; i < 20; i++) {
        sl_batch *b;
        if (i % 2) {
            CHECK_OK(sl_loader_next(ld, &b));
            sl_loader_release(ld, b);
        }
        quiesce_for_asan(ld);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child_calls(ld, held));
        CHECK_EQ(wait_child(pid, 20), 0);
    }
    /* the parent's loader is untouched */
    sl_loader_release(ld, held);
    sl_batch *b;
    int rc, n = 0;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        n++;
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    CHECK(n > 0);
    CHECK_EQ(sl_loader_poisoned(ld, NULL, 0), 0);
    sl_loader_destroy(ld);
    free(d);
}

/* A loader made in the child after the fork is a loader like any other. */
TEST(fork_child_makes_its_own_loader) {
    fx_dataset *d = fx_new(24, 0, 48, 96);
    sl_config c;
    sl_config_init(&c);
    c.source = d->root;
    c.batch_size = 8;
    c.size = 32;
    c.workers = 2;
    c.budget = 32u << 20;
    sl_loader *ld = fx_open(&c);
    quiesce_for_asan(ld);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sl_loader_destroy(ld);
        sl_loader *own = NULL;
        if (sl_loader_create(&c, &own, NULL, 0)) _exit(2);
        sl_batch *b;
        int rc, n = 0;
        while ((rc = sl_loader_next(own, &b)) == 0) {
            n += (int)sl_batch_len(b);
            sl_loader_release(own, b);
        }
        sl_loader_destroy(own);
        _exit(rc == SL_EEND && n == 24 ? 0 : 1);
    }
    CHECK_EQ(wait_child(pid, 60), 0);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- shared budgets ------------------------------------------------------------ */

/* Every budget call in the child, at once; a loader on the inherited
 * budget is refused the same way. Then the budget and the loader are
 * destroyed (first one, then the other: loader_first) without a hang:
 * the last reference frees the child's copy and never joins the parent's
 * governor thread. */
static int child_budget_calls(sl_budget *b, sl_loader *ld, const sl_config *c, int loader_first) {
    int bad = 0;
#define EXPECT_SAYS(buf)                                                                              \
    do {                                                                                              \
        char pid_[64];                                                                                \
        snprintf(pid_, sizeof pid_, "this is process %ld, a child of fork()", (long)getpid());        \
        if (!strstr(buf, pid_) || !strstr(buf, "create the budget") || !strstr(buf, "after the fork")) { \
            fprintf(stderr, "child: the reason says: %s\n", buf);                                     \
            bad = 1;                                                                                  \
        }                                                                                             \
    } while (0)
    char why[512] = "";
    EXPECT(sl_budget_poisoned(b, why, sizeof why), SL_ESTATE);
    EXPECT_SAYS(why);
    why[0] = 0;
    EXPECT(sl_budget_set_limit(b, 1u << 30, why, sizeof why), SL_ESTATE);
    EXPECT_SAYS(why);
    sl_budget_info st;
    EXPECT(sl_budget_stats(b, &st), SL_ESTATE);
    sl_budget_event ev[4];
    EXPECT((int)sl_budget_events(b, 0, ev, 4), 0);
    sl_governor_opts o;
    sl_governor_opts_init(&o);
    EXPECT(sl_budget_govern(b, &o, why, sizeof why), SL_ESTATE);
    /* a loader on it: refused before it touches the budget's locks */
    sl_loader *nu = (sl_loader *)1;
    why[0] = 0;
    EXPECT(sl_loader_create(c, &nu, why, sizeof why), SL_ESTATE);
    EXPECT_SAYS(why);
    if (nu != NULL) bad = 1;
    sl_plan plan;
    EXPECT(sl_loader_plan(c, &plan, why, sizeof why), SL_ESTATE);
    /* the inherited loader is refused as ever */
    sl_batch *bt;
    EXPECT(sl_loader_next(ld, &bt), SL_ESTATE);
    if (loader_first) {
        sl_loader_destroy(ld);
        sl_budget_destroy(b); /* the last reference: the child's copy, no join */
    } else {
        sl_budget_destroy(b);
        sl_loader_destroy(ld); /* the last reference */
    }
    /* a budget and a loader made here are ordinary ones */
    sl_budget *own;
    EXPECT(sl_budget_create(64u << 20, &own), 0);
    EXPECT(sl_budget_poisoned(own, why, sizeof why), 0);
    sl_config oc = *c;
    oc.shared_budget = own;
    sl_loader *mine = NULL;
    EXPECT(sl_loader_create(&oc, &mine, why, sizeof why), 0);
    if (mine) {
        int rc, n = 0;
        while ((rc = sl_loader_next(mine, &bt)) == 0) {
            n += (int)sl_batch_len(bt);
            sl_loader_release(mine, bt);
        }
        EXPECT(rc, SL_EEND);
        if (n != (int)sl_loader_num_samples(mine)) bad = 1;
        sl_loader_destroy(mine);
    }
    EXPECT(sl_budget_stats(own, &st), 0);
    if (st.loaders != 0 || st.used != 0) bad = 1;
    sl_budget_destroy(own);
    return bad;
#undef EXPECT_SAYS
}

TEST(fork_child_budget_gets_estate_never_hangs) {
    fx_dataset *d = fx_new(48, 0, 96, 400);
#if defined(__SANITIZE_ADDRESS__)
    uint32_t period_ms = 60000; /* idle at the forks (quiesce_for_asan: libasan's malloc and fork) */
#else
    uint32_t period_ms = 1; /* forks find it anywhere in its loop, its lock taken or not */
#endif
    sl_budget *b;
    sl_config c;
    sl_loader *ld = tx_governed_loader(d, period_ms, 3, &b, &c);
    for (int i = 0; i < 12; i++) {
        sl_batch *bt;
        CHECK_OK(sl_loader_next(ld, &bt));
        sl_loader_release(ld, bt);
        quiesce_for_asan(ld);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child_budget_calls(b, ld, &c, i % 2));
        CHECK_EQ(wait_child(pid, 30), 0);
    }
    /* the parent's budget, governor and loader are untouched */
    CHECK_EQ(sl_budget_poisoned(b, NULL, 0), 0);
    sl_budget_info st;
    CHECK_OK(sl_budget_stats(b, &st));
    CHECK_EQ(st.loaders, 1);
    CHECK(st.governor);
    char err[512] = "";
    CHECK_OK(sl_budget_set_limit(b, 60u << 20, err, sizeof err));
    sl_batch *bt;
    int rc;
    while ((rc = sl_loader_next(ld, &bt)) == 0) sl_loader_release(ld, bt);
    CHECK_EQ(rc, SL_EEND);
    sl_budget_destroy(b);
    sl_loader_destroy(ld); /* the last reference: the governor is joined here */
    free(d);
}
