/* ctest: tsan */
/*
 * A budget shared by loaders, live limits, and the governor's decisions.
 *
 *  - Budget side (src/base/mem.c): children draw on a root; the limit moves
 *    under waiters (growth lets them through in FIFO order; a governor's
 *    shrink parks a request that no longer fits without holding up the
 *    queue, and gives it up after stall_ns; a user's shrink refuses it at
 *    once); consumers are asked to give back what is over; never below
 *    the fixed part.
 *  - Loaders (sl_config.shared_budget): two draw on one budget and never
 *    pass it together; a third whose minimum does not fit what is left is
 *    refused with the numbers; per-loader use adds up.
 *  - The governor's policy (sl__gov_decide), on readings made up here.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>

#include "fixture.h"
#include "base/governor.h"
#include "base/util.h"
#include "base/mem.h"

#define MIB ((uint64_t)1 << 20)

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t used(sl__budget *b) { return atomic_load(&b->used); }

/* ---- budget side ------------------------------------------------------------ */

TEST(children_draw_on_their_root) {
    sl__budget root, a, b;
    CHECK_OK(sl__budget_init(&root, 1000));
    CHECK_OK(sl__budget_init(&a, 1000));
    CHECK_OK(sl__budget_init(&b, 1000));
    sl__budget_attach(&a, &root);
    sl__budget_attach(&b, &root);
    sl__budget_unbind_limit(&a);
    sl__budget_unbind_limit(&b);
    CHECK_OK(sl__budget_try(&a, 600, SL_MEM_BATCHES));
    sl__budget_fix(&a, 600);
    CHECK_EQ(atomic_load(&root.fixed), 600);
    CHECK_EQ(sl__budget_try(&b, 401, SL_MEM_SCRATCH), SL_EBUDGET); /* the root binds */
    CHECK_OK(sl__budget_try(&b, 400, SL_MEM_SCRATCH));
    CHECK_EQ(used(&root), 1000);
    CHECK_EQ(used(&a), 600);
    CHECK_EQ(used(&b), 400);
    CHECK_EQ(sl__budget_headroom(&b), 400); /* limit - everyone's fixed */
    CHECK_EQ(sl__budget_wait(&b, 401, SL_MEM_SCRATCH), SL_EBUDGET);
    CHECK_EQ(sl__budget_limit(&b), 1000);
    sl__budget_recat(&b, 100, SL_MEM_SCRATCH, SL_MEM_DECODER);
    CHECK_EQ(atomic_load(&root.cat[SL_MEM_DECODER]), 100);
    sl__budget_release(&b, 300, SL_MEM_SCRATCH);
    sl__budget_release(&b, 100, SL_MEM_DECODER);
    CHECK_EQ(used(&root), 600);
    sl__budget_fini(&a); /* a leaves: its fixed part and what it held go with it */
    CHECK_EQ(atomic_load(&root.fixed), 0);
    CHECK_EQ(used(&root), 0);
    sl__budget_fini(&b);
    sl__budget_fini(&root);
}

/* A child's own limit binds too while set (a loader being created sees
 * exactly what was left). */
TEST(child_limit_binds_until_unbound) {
    sl__budget root, a;
    CHECK_OK(sl__budget_init(&root, 1000));
    CHECK_OK(sl__budget_init(&a, 300));
    sl__budget_attach(&a, &root);
    CHECK_EQ(sl__budget_try(&a, 301, SL_MEM_OTHER), SL_EBUDGET);
    CHECK_EQ(used(&root), 0); /* refused by the child: the root's share went back */
    CHECK_EQ(sl__budget_headroom(&a), 300);
    sl__budget_unbind_limit(&a);
    CHECK_OK(sl__budget_try(&a, 301, SL_MEM_OTHER));
    sl__budget_release(&a, 301, SL_MEM_OTHER);
    sl__budget_fini(&a);
    sl__budget_fini(&root);
}

typedef struct waiter {
    sl__budget *b;
    uint64_t n;
    int rc;
    _Atomic int done;
    _Atomic int *order;
    int place;
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    w->rc = sl__budget_wait(w->b, w->n, SL_MEM_SCRATCH);
    w->place = atomic_fetch_add(w->order, 1);
    atomic_store(&w->done, 1);
    return NULL;
}

static void until_waiters(sl__budget *r, int n) {
    for (int i = 0; i < 10000 && atomic_load(&r->waiters) < n; i++) sleep_ms(1);
    CHECK_EQ(atomic_load(&r->waiters), n);
}

static void start(pthread_t *t, waiter *w) { CHECK_EQ(pthread_create(t, NULL, wait_thread, w), 0); }

TEST(growth_lets_waiters_through_in_order) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 800, SL_MEM_BATCHES));
    _Atomic int order = 0;
    waiter big = {&r, 300, -99, 0, &order, -1}, small = {&r, 100, -99, 0, &order, -1};
    pthread_t tb, ts;
    start(&tb, &big);
    until_waiters(&r, 1);
    start(&ts, &small); /* fits now, but big came first */
    until_waiters(&r, 2);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&small.done), 0);
    CHECK_OK(sl__budget_set_limit(&r, 1100, 1, NULL, 0)); /* room for one of them: the first */
    CHECK_EQ(pthread_join(tb, NULL), 0);
    CHECK_OK(big.rc);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&small.done), 0);
    CHECK_OK(sl__budget_set_limit(&r, 1200, 1, NULL, 0));
    CHECK_EQ(pthread_join(ts, NULL), 0);
    CHECK_OK(small.rc);
    CHECK_EQ(used(&r), 1200);
    sl__budget_fini(&r);
}

/* The governor lowers the limit under a waiter: it parks (does not hold up
 * a smaller one behind it), and goes through when the limit grows back. */
TEST(governor_shrink_parks_a_request_until_growth) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 200, SL_MEM_BATCHES));
    sl__budget_fix(&r, 200);
    CHECK_OK(sl__budget_try(&r, 700, SL_MEM_SCRATCH)); /* growth someone holds */
    CHECK_OK(sl__budget_set_limit(&r, 500, 0, NULL, 0)); /* governor: ceiling stays 1000 */
    CHECK_EQ(atomic_load(&r.ceiling), 1000);
    CHECK(sl__budget_has_waiters(&r)); /* over its limit: holders must give back */
    _Atomic int order = 0;
    waiter big = {&r, 500, -99, 0, &order, -1}, small = {&r, 100, -99, 0, &order, -1};
    pthread_t tb, ts;
    start(&tb, &big); /* 500 > 500 - 200: parked */
    until_waiters(&r, 1);
    start(&ts, &small);
    until_waiters(&r, 2);
    sl__budget_release(&r, 700, SL_MEM_SCRATCH); /* under the limit again */
    CHECK_EQ(pthread_join(ts, NULL), 0);        /* the small one was not held up */
    CHECK_OK(small.rc);
    sleep_ms(30);
    CHECK_EQ(atomic_load(&big.done), 0);
    CHECK_OK(sl__budget_set_limit(&r, 1000, 0, NULL, 0));
    CHECK_EQ(pthread_join(tb, NULL), 0);
    CHECK_OK(big.rc);
    CHECK_EQ(used(&r), 800);
    sl__budget_fini(&r);
}

TEST(parked_request_gives_up_after_the_stall) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    r.stall_ns = 200 * 1000000ull;
    CHECK_OK(sl__budget_set_limit(&r, 300, 0, NULL, 0));
    _Atomic int order = 0;
    waiter w = {&r, 600, -99, 0, &order, -1};
    pthread_t t;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    start(&t, &w);
    CHECK_EQ(pthread_join(t, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK_EQ(w.rc, SL_EBUDGET);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    CHECK(s >= 0.19); /* waited for growth, then gave up: never forever */
    CHECK_EQ(atomic_load(&r.waiters), 0);
    sl__budget_fini(&r);
}

/* The user's own shrink is the new ceiling: a request that can never fit
 * under it is refused at once, a waiting one too. */
TEST(user_shrink_refuses_what_can_never_fit) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 900, SL_MEM_SCRATCH));
    _Atomic int order = 0;
    waiter w = {&r, 600, -99, 0, &order, -1};
    pthread_t t;
    start(&t, &w);
    until_waiters(&r, 1);
    CHECK_OK(sl__budget_set_limit(&r, 500, 1, NULL, 0));
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(w.rc, SL_EBUDGET);
    CHECK_EQ(sl__budget_wait(&r, 501, SL_MEM_SCRATCH), SL_EBUDGET);
    sl__budget_release(&r, 900, SL_MEM_SCRATCH);
    CHECK_OK(sl__budget_wait(&r, 500, SL_MEM_SCRATCH));
    sl__budget_release(&r, 500, SL_MEM_SCRATCH);
    sl__budget_fini(&r);
}

TEST(limit_never_below_fixed) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 400, SL_MEM_BATCHES));
    sl__budget_fix(&r, 400);
    char err[256] = "";
    CHECK_EQ(sl__budget_set_limit(&r, 399, 1, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "minimum working sets");
    CHECK_STR_CONTAINS(err, "399 B");
    CHECK_EQ(atomic_load(&r.limit), 1000);
    CHECK_OK(sl__budget_set_limit(&r, 400, 1, err, sizeof err));
    sl__budget_release(&r, 400, SL_MEM_BATCHES);
    sl__budget_fini(&r);
}

/* Consumers holding give-back-able bytes, as loaders (free slots) and a
 * cache would. */
typedef struct consumer {
    sl__consumer c;
    sl__budget *b;
    uint64_t held;      /* bytes it holds */
    uint64_t now_max;   /* how much it can give back at once */
    int asked, told;
} consumer;

static uint64_t give_back(void *ctx, uint64_t want) {
    consumer *k = ctx;
    k->asked++;
    uint64_t n = SL_MIN(SL_MIN(want, k->held), k->now_max);
    sl__budget_release(k->b, n, SL_MEM_BATCHES);
    k->held -= n;
    return n;
}
static void room(void *ctx) { ((consumer *)ctx)->told++; }

TEST(shrink_asks_consumers_to_give_back) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    consumer a = {{give_back, room, NULL, NULL}, &r, 300, 100, 0, 0};
    consumer b = {{give_back, room, NULL, NULL}, &r, 400, 1000, 0, 0};
    a.c.ctx = &a;
    b.c.ctx = &b;
    CHECK_OK(sl__budget_try(&r, 700, SL_MEM_BATCHES));
    sl__budget_add_consumer(&r, &a.c);
    sl__budget_add_consumer(&r, &b.c);
    CHECK_OK(sl__budget_set_limit(&r, 500, 1, NULL, 0));
    CHECK_LE(used(&r), 500); /* at once */
    CHECK_EQ(a.held + b.held, used(&r));
    CHECK_OK(sl__budget_set_limit(&r, 400, 1, NULL, 0));
    CHECK_LE(used(&r), 400);
    CHECK(a.asked + b.asked >= 2);
    CHECK_OK(sl__budget_set_limit(&r, 900, 1, NULL, 0)); /* room: both told */
    CHECK_EQ(a.told, 1);
    CHECK_EQ(b.told, 1);
    int asked = a.asked + b.asked;
    CHECK_OK(sl__budget_set_limit(&r, 800, 1, NULL, 0)); /* under it already: nobody asked */
    CHECK_EQ(a.asked + b.asked, asked);
    sl__budget_remove_consumer(&r, &a.c);
    sl__budget_remove_consumer(&r, &b.c);
    sl__budget_release(&r, a.held + b.held, SL_MEM_BATCHES);
    CHECK_EQ(used(&r), 0);
    sl__budget_fini(&r);
}

/* ---- loaders on one budget ----------------------------------------------------- */

static sl_config small_cfg(const fx_dataset *d, sl_budget *b, uint32_t workers) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = d->root;
    cfg.batch_size = 4;
    cfg.size = 64;
    cfg.workers = workers;
    cfg.shared_budget = b;
    cfg.budget = 0; /* ignored with a shared budget */
    return cfg;
}

typedef struct observe {
    sl_budget *b;
    _Atomic int stop;
    uint64_t max_used;
} observe;

static void *observer(void *arg) {
    observe *o = arg;
    while (!atomic_load(&o->stop)) {
        sl_budget_info st;
        CHECK_OK(sl_budget_stats(o->b, &st));
        if (st.used > st.limit) SL_FAIL("shared used %llu over limit %llu", (unsigned long long)st.used, (unsigned long long)st.limit);
        if (st.used > o->max_used) o->max_used = st.used;
    }
    return NULL;
}

/* Stats once the workers have gone quiet (every slot filled: they idle
 * and give their growth back), so the sums can be compared. */
static void settled(sl_budget *b, sl_budget_info *st) {
    uint64_t last = UINT64_MAX;
    for (int i = 0; i < 500; i++) {
        CHECK_OK(sl_budget_stats(b, st));
        uint64_t sum = 0;
        for (uint32_t k = 0; k < st->loaders && k < SL_BUDGET_STATS_LOADERS; k++) sum += st->loader_used[k];
        if (sum == st->used && st->used == last) return;
        last = st->used;
        sleep_ms(10);
    }
    SL_FAIL("shared budget use did not settle");
}

static void run_epoch(sl_loader *ld) {
    sl_batch *bt;
    int rc;
    while ((rc = sl_loader_next(ld, &bt)) == 0) sl_loader_release(ld, bt);
    CHECK_EQ(rc, SL_EEND);
}

TEST(two_loaders_one_budget) {
    fx_dataset d;
    fx_simple(&d, 24, 0, 200, 900);
    sl_budget *b;
    CHECK_OK(sl_budget_create(48 * MIB, &b));
    sl_config cfg = small_cfg(&d, b, 2);
    sl_loader *train, *val;
    char err[512] = "";
    int rc = sl_loader_create(&cfg, &train, err, sizeof err);
    if (rc) SL_FAIL("train: %s", err);
    cfg.preset = SL_PRESET_VAL;
    rc = sl_loader_create(&cfg, &val, err, sizeof err);
    if (rc) SL_FAIL("val: %s", err);
    sl_budget_destroy(b); /* the loaders keep it alive */
    observe o = {b, 0, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, observer, &o), 0);
    run_epoch(train);
    run_epoch(val);
    sl_stats s1, s2;
    CHECK_OK(sl_loader_stats(train, &s1));
    CHECK_OK(sl_loader_stats(val, &s2));
    CHECK_EQ(s1.budget_bytes, 48 * MIB);
    CHECK_EQ(s1.samples + s2.samples, 48);
    sl_budget_info st;
    settled(b, &st);
    CHECK_EQ(st.loaders, 2);
    CHECK_EQ(st.loader_fixed[0], s1.fixed_bytes);
    CHECK_EQ(st.loader_fixed[1], s2.fixed_bytes);
    CHECK_EQ(st.fixed, s1.fixed_bytes + s2.fixed_bytes);
    CHECK_LE(st.peak, st.limit);
    atomic_store(&o.stop, 1);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(o.max_used > s1.fixed_bytes);
    sl_loader_destroy(train);
    settled(b, &st); /* val still holds it */
    CHECK_EQ(st.loaders, 1);
    CHECK_EQ(st.fixed, s2.fixed_bytes);
    sl_loader_destroy(val); /* the last reference: freed (ASan would see a leak) */
}

TEST(loader_over_what_is_left_is_refused_with_numbers) {
    fx_dataset d;
    fx_simple(&d, 8, 0, 64, 128);
    sl_config cfg = small_cfg(&d, NULL, 2);
    cfg.budget = 1ull << 30;
    cfg.shared_budget = NULL;
    uint64_t min = fx_min_budget(cfg);
    sl_budget *b;
    CHECK_OK(sl_budget_create(min + min / 2, &b)); /* one fits, two do not */
    cfg = small_cfg(&d, b, 2);
    sl_loader *one, *two = NULL;
    char err[512] = "";
    CHECK_OK(sl_loader_create(&cfg, &one, err, sizeof err));
    CHECK_EQ(sl_loader_create(&cfg, &two, err, sizeof err), SL_EBUDGET);
    CHECK(two == NULL);
    CHECK_STR_CONTAINS(err, "shared budget of");
    CHECK_STR_CONTAINS(err, "minimum working set");
    sl_budget_info st;
    CHECK_OK(sl_budget_stats(b, &st));
    CHECK_EQ(st.loaders, 1); /* the refused one left nothing behind */
    char err2[256] = "";
    CHECK_EQ(sl_budget_set_limit(b, st.fixed - 1, err2, sizeof err2), SL_EBUDGET);
    sl_loader_destroy(one);
    CHECK_OK(sl_loader_create(&cfg, &two, err, sizeof err)); /* room again */
    sl_loader_destroy(two);
    sl_budget_destroy(b);
    CHECK_EQ(sl_budget_create(0, &b), SL_EINVAL);
}

/* ---- the governor's decisions ------------------------------------------------------ */

static const uint64_t S = 1000000000ull; /* a second in ns */

TEST(governor_shrinks_at_once_and_grows_slowly) {
    sl_governor_opts o;
    sl_governor_opts_init(&o);
    o.margin = 64 * MIB;
    sl__gov_state st;
    memset(&st, 0, sizeof st);
    char why[112];
    sl__gov_budget b = {512 * MIB, 512 * MIB, 64 * MIB, 400 * MIB};
    sl__gov_reading r = {1, 1024 * MIB, 1000 * MIB, 0, 0, 0, 0, 0};
    /* working set 1000 of 1024 - 64: 40 MiB over -> used 400 - 40, at once */
    uint64_t l = sl__gov_decide(&o, &st, &b, &r, 1 * S, why, sizeof why);
    CHECK_EQ(l, 360 * MIB);
    CHECK_STR_CONTAINS(why, "cgroup working set");
    b.limit = l;
    b.used = 330 * MIB;
    r.cg_ws = 500 * MIB; /* the hog left: room for 330 + 460 */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 2 * S, why, sizeof why), l);             /* not yet */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 2 * S + S / 2, why, sizeof why), l);     /* still not */
    uint64_t up = sl__gov_decide(&o, &st, &b, &r, 3 * S + S / 10, why, sizeof why); /* held 1.1 s */
    CHECK_EQ(up, l + 32 * MIB); /* one step: ceiling / 16 */
    CHECK_STR_CONTAINS(why, "held");
    b.limit = up;
    /* a dip below the band restarts the wait */
    r.cg_ws = 950 * MIB;
    uint64_t down = sl__gov_decide(&o, &st, &b, &r, 3 * S + S / 5, why, sizeof why);
    CHECK(down < up);
    /* never below fixed, never above the ceiling */
    r.cg_ws = 4000 * MIB;
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 4 * S, why, sizeof why), b.fixed);
    b.limit = b.fixed;
    r.cg_ws = 0;
    for (uint64_t t = 5 * S; t < 20 * S; t += S / 10) {
        uint64_t n = sl__gov_decide(&o, &st, &b, &r, t, why, sizeof why);
        CHECK(n >= b.limit && n <= b.ceiling && n - b.limit <= 32 * MIB);
        b.limit = n;
    }
    CHECK_EQ(b.limit, b.ceiling);
}

TEST(governor_sheds_on_events_pressure_and_machine) {
    sl_governor_opts o;
    sl_governor_opts_init(&o);
    o.margin = 64 * MIB;
    sl__gov_state st;
    memset(&st, 0, sizeof st);
    char why[112];
    sl__gov_budget b = {800 * MIB, 800 * MIB, 0, 100 * MIB};
    sl__gov_reading r = {1, 4096 * MIB, 200 * MIB, 5, 0, 0, 0, 0};
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 1 * S, why, sizeof why), b.limit); /* first events: a baseline */
    r.cg_events = 6;                                                            /* the cgroup hit its limit */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 2 * S, why, sizeof why), 700 * MIB);
    CHECK_STR_CONTAINS(why, "oom/max");
    b.limit = 700 * MIB;
    r.has_psi = 1, r.psi_some10 = 25.0;
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 3 * S, why, sizeof why), 700 * MIB - 700 * MIB / 8);
    CHECK_STR_CONTAINS(why, "PSI");
    b.limit = 700 * MIB - 700 * MIB / 8;
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 3 * S + S / 2, why, sizeof why), b.limit); /* once a second */
    r.has_psi = 0;
    r.has_available = 1, r.mem_available = 164 * MIB; /* the machine: 100 more at most */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 5 * S, why, sizeof why), 200 * MIB);
    CHECK_STR_CONTAINS(why, "MemAvailable");
}
