/* ctest: tsan */
/*
 * The budget and its accounting allocator (src/core/mem.c): try, wait and
 * release; first-come first-served waits; close; the headroom refusal;
 * high-water marks and categories; what the allocator counts; allocation
 * failure injection; a concurrent stress that never sees the limit
 * passed; children drawing on a root; live limits (growth lets waiters
 * through in FIFO order, a governor's shrink parks a request that no
 * longer fits without holding up the queue and gives it up after
 * stall_ns, a user's shrink refuses it at once, never below the fixed
 * part) and consumers asked to give back what is over.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "threads.h"
#include "base/mem.h"
#include "base/util.h"
#include "budget_fixture.h"

static uint64_t used(sl__budget *b) { return atomic_load(&b->used); }

TEST(try_and_release) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 600, SL_MEM_SCRATCH));
    CHECK_EQ(used(&b), 600);
    CHECK_EQ(sl__budget_try(&b, 401, SL_MEM_SCRATCH), SL_EBUDGET); /* would pass the limit */
    CHECK_EQ(used(&b), 600);                                       /* a refusal counts nothing */
    CHECK_OK(sl__budget_try(&b, 400, SL_MEM_BATCHES));             /* exactly to the limit */
    CHECK_EQ(used(&b), 1000);
    CHECK_EQ(sl__budget_try(&b, 1, SL_MEM_SCRATCH), SL_EBUDGET);
    CHECK_EQ(sl__budget_try(&b, UINT64_MAX, SL_MEM_SCRATCH), SL_EBUDGET); /* no wrap-around */
    sl__budget_release(&b, 600, SL_MEM_SCRATCH);
    sl__budget_release(&b, 400, SL_MEM_BATCHES);
    CHECK_EQ(used(&b), 0);
    CHECK_OK(sl__budget_wait(&b, 1000, SL_MEM_SCRATCH)); /* fits: no waiting */
    sl__budget_release(&b, 1000, SL_MEM_SCRATCH);
    sl__budget_release(&b, 0, SL_MEM_SCRATCH);
    bf_end(&b);
}

TEST(peak_and_categories) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    CHECK_OK(sl__budget_try(&b, 100, SL_MEM_INDEX));
    CHECK_OK(sl__budget_try(&b, 300, SL_MEM_SCRATCH));
    CHECK_OK(sl__budget_try(&b, 50, SL_MEM_DECODER));
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_INDEX]), 100);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_SCRATCH]), 300);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_DECODER]), 50);
    CHECK_EQ(atomic_load(&b.peak), 450);
    sl__budget_release(&b, 300, SL_MEM_SCRATCH);
    CHECK_OK(sl__budget_try(&b, 10, SL_MEM_SCRATCH));
    CHECK_EQ(used(&b), 160);
    CHECK_EQ(atomic_load(&b.peak), 450); /* high-water mark stays */
    CHECK_EQ(atomic_load(&b.cat_peak[SL_MEM_SCRATCH]), 300);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_SCRATCH]), 10);
    /* recat moves counted bytes, total unchanged, destination peak noted */
    sl__budget_recat(&b, 40, SL_MEM_INDEX, SL_MEM_OTHER);
    CHECK_EQ(used(&b), 160);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_INDEX]), 60);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_OTHER]), 40);
    CHECK_EQ(atomic_load(&b.cat_peak[SL_MEM_OTHER]), 40);
    uint64_t sum = 0;
    for (int c = 0; c < SL_MEM__COUNT; c++) sum += atomic_load(&b.cat[c]);
    CHECK_EQ(sum, used(&b));
    for (int c = 0; c < SL_MEM__COUNT; c++) CHECK(strcmp(sl_mem_category_name(c), "unknown") != 0);
    CHECK(strcmp(sl_mem_category_name(SL_MEM__COUNT), "unknown") == 0);
    sl__budget_release(&b, 60, SL_MEM_INDEX);
    sl__budget_release(&b, 40, SL_MEM_OTHER);
    sl__budget_release(&b, 10, SL_MEM_SCRATCH);
    sl__budget_release(&b, 50, SL_MEM_DECODER);
    bf_end(&b);
}

/* A request larger than limit - fixed can never be granted: SL_EBUDGET at
 * once, never a wait. */
TEST(headroom_refusal) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 700, SL_MEM_BATCHES));
    CHECK_OK(sl__budget_fix(&b, 700));
    CHECK_EQ(sl__budget_headroom(&b), 300);
    CHECK_EQ(sl__budget_wait(&b, 301, SL_MEM_SCRATCH), SL_EBUDGET);
    CHECK_EQ(used(&b), 700);
    CHECK_OK(sl__budget_wait(&b, 300, SL_MEM_SCRATCH));
    sl__budget_release(&b, 300, SL_MEM_SCRATCH);
    sl__budget_unfix(&b, 700);
    CHECK_EQ(sl__budget_headroom(&b), 1000);
    sl__budget_release(&b, 700, SL_MEM_BATCHES);
    sl__budget_fini(&b);
}

TEST(wait_blocks_until_release) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 900, SL_MEM_BATCHES));
    bf_waiter w;
    bf_wait_start(&w, &b, 500);
    bf_until_waiters(&b, 1);
    bx_sleep_ms(20);
    CHECK_EQ(atomic_load(&w.done), 0); /* still waiting: 500 does not fit */
    /* while anyone waits, try-requests fail even where they would fit */
    CHECK_EQ(sl__budget_try(&b, 50, SL_MEM_SCRATCH), SL_EBUDGET);
    CHECK(sl__budget_has_waiters(&b));
    sl__budget_release(&b, 500, SL_MEM_BATCHES);
    bf_wait_join(&w);
    CHECK_OK(w.rc);
    CHECK_EQ(used(&b), 900);
    CHECK(!sl__budget_has_waiters(&b));
    CHECK(atomic_load(&b.wait_ns) > 0);
    sl__budget_release(&b, 500, SL_MEM_SCRATCH);
    sl__budget_release(&b, 400, SL_MEM_BATCHES);
    sl__budget_fini(&b);
}

/* First come, first served: a large waiter queued first is served before a
 * small one behind it, even when room for the small one appears first. */
TEST(fifo_waits) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 1000, SL_MEM_BATCHES));
    bf_waiter big, small;
    bf_wait_start(&big, &b, 800);
    bf_until_waiters(&b, 1);
    bf_wait_start(&small, &b, 100);
    bf_until_waiters(&b, 2);
    sl__budget_release(&b, 200, SL_MEM_BATCHES); /* room for small, not for big */
    bx_sleep_ms(50);
    CHECK_EQ(atomic_load(&small.done), 0); /* not served past the head */
    CHECK_EQ(atomic_load(&big.done), 0);
    CHECK_EQ(used(&b), 800);
    sl__budget_release(&b, 600, SL_MEM_BATCHES); /* 200 used: big fits, and then small does not */
    bf_wait_join(&big);
    CHECK_OK(big.rc);
    CHECK_EQ(used(&b), 1000);
    bx_sleep_ms(20);
    CHECK_EQ(atomic_load(&small.done), 0);
    sl__budget_release(&b, 100, SL_MEM_BATCHES); /* now small */
    bf_wait_join(&small);
    CHECK_OK(small.rc);
    CHECK_EQ(big.place, 0);
    CHECK_EQ(small.place, 1);
    CHECK_EQ(used(&b), 1000);
    CHECK_EQ(atomic_load(&b.peak), 1000);
    sl__budget_release(&b, 900, SL_MEM_SCRATCH);
    sl__budget_release(&b, 100, SL_MEM_BATCHES);
    bf_end(&b);
}

/* close wakes every waiter with SL_ESTATE; later waits fail at once. */
TEST(close_wakes_waiters) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 1000, SL_MEM_BATCHES));
    bf_waiter w[3];
    for (int i = 0; i < 3; i++) bf_wait_start(&w[i], &b, 100u * (i + 1));
    bf_until_waiters(&b, 3);
    sl__budget_close(&b);
    for (int i = 0; i < 3; i++) {
        bf_wait_join(&w[i]);
        CHECK_EQ(w[i].rc, SL_ESTATE);
    }
    CHECK_EQ(used(&b), 1000); /* nothing granted */
    sl__budget_release(&b, 500, SL_MEM_BATCHES);
    /* closed: a wait that would have to queue fails at once */
    CHECK_OK(sl__budget_try(&b, 100, SL_MEM_SCRATCH));
    bf_waiter late;
    bf_wait_start(&late, &b, 900);
    bf_wait_join(&late);
    CHECK_EQ(late.rc, SL_ESTATE);
    sl__budget_release(&b, 100, SL_MEM_SCRATCH);
    sl__budget_release(&b, 500, SL_MEM_BATCHES);
    bf_end(&b);
}

/* What the allocator counts: small blocks at least n + header (usable
 * size), large ones page-rounded mappings; free gives back exactly that. */
TEST(alloc_counts_and_frees) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 8 << 20));
    void *p = sl__alloc(&b, 100, SL_MEM_OTHER);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p & 15) == 0);
    uint64_t u1 = used(&b);
    CHECK(u1 >= sl__alloc_cost(100));
    CHECK(u1 >= 100);
    memset(p, 0xab, 100);
    size_t big = (1 << 20) + 3;
    uint8_t *q = sl__alloc(&b, big, SL_MEM_BATCHES);
    CHECK(q != NULL);
    long ps = sysconf(_SC_PAGESIZE);
    CHECK_EQ(used(&b) - u1, sl__alloc_cost(big));
    CHECK_EQ(sl__alloc_cost(big) % (size_t)ps, 0);
    CHECK(sl__alloc_cost(big) >= big);
    q[0] = 1, q[big - 1] = 2;
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_BATCHES]), sl__alloc_cost(big));
    sl__free(&b, q);
    CHECK_EQ(used(&b), u1);
    /* realloc keeps the content */
    p = sl__realloc(&b, p, 200000, SL_MEM_OTHER);
    CHECK(p != NULL);
    for (int i = 0; i < 100; i++) CHECK_EQ(((uint8_t *)p)[i], 0xab);
    CHECK_EQ(used(&b), sl__alloc_cost(200000));
    /* calloc zeroes and refuses an overflowing product */
    uint32_t *z = sl__calloc(&b, 1000, 4, SL_MEM_INDEX);
    CHECK(z != NULL);
    for (int i = 0; i < 1000; i++) CHECK_EQ(z[i], 0);
    uint64_t before = used(&b);
    CHECK(sl__calloc(&b, SIZE_MAX / 2, 3, SL_MEM_INDEX) == NULL);
    CHECK(sl__alloc(&b, SIZE_MAX - 10, SL_MEM_INDEX) == NULL);
    CHECK_EQ(used(&b), before);
    char *s = sl__strdup(&b, "sluice", SL_MEM_OTHER);
    CHECK(s && strcmp(s, "sluice") == 0);
    sl__free(&b, s);
    sl__free(&b, z);
    sl__free(&b, p);
    sl__free(&b, NULL);
    CHECK_EQ(used(&b), 0);
    for (int c = 0; c < SL_MEM__COUNT; c++) CHECK_EQ(atomic_load(&b.cat[c]), 0);
    sl__budget_fini(&b);
}

/* An allocation over the budget is refused and counts nothing. */
TEST(alloc_over_budget) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    void *p = sl__alloc(&b, 700 << 10, SL_MEM_BATCHES);
    CHECK(p != NULL);
    uint64_t u = used(&b);
    CHECK(sl__alloc(&b, 400 << 10, SL_MEM_BATCHES) == NULL);
    CHECK(sl__alloc(&b, 1 << 20, SL_MEM_BATCHES) == NULL);
    CHECK_EQ(used(&b), u);
    CHECK_LE(atomic_load(&b.peak), 1 << 20);
    sl__free(&b, p);
    bf_end(&b);
}

/* sl__mem_fail_after(n): the n+1-th allocation fails (the budget left
 * unchanged), and the ones after succeed again. */
TEST(fail_injection) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 64 << 20));
    void *a[4];
    sl__mem_fail_after(2);
    a[0] = sl__alloc(&b, 64, SL_MEM_OTHER);
    a[1] = sl__alloc(&b, 1 << 20, SL_MEM_OTHER);
    uint64_t u = used(&b);
    a[2] = sl__alloc(&b, 64, SL_MEM_OTHER);
    CHECK(a[0] && a[1]);
    CHECK(a[2] == NULL);
    CHECK_EQ(used(&b), u);
    a[3] = sl__alloc(&b, 64, SL_MEM_OTHER);
    CHECK(a[3] != NULL);
    /* prepaid mappings are injectable too */
    sl__mem_fail_after(0);
    CHECK(sl__map_prepaid(1 << 20) == NULL);
    void *m = sl__map_prepaid(1 << 20);
    CHECK(m != NULL);
    sl__unmap_prepaid(m, 1 << 20);
    /* alloc_wait under injection: gives up with SL_ENOMEM, budget unchanged */
    sl__mem_fail_after(0);
    int err = 0;
    u = used(&b);
    CHECK(sl__alloc_wait(&b, 128, SL_MEM_SCRATCH, &err) == NULL);
    CHECK_EQ(err, SL_ENOMEM);
    CHECK_EQ(used(&b), u);
    sl__mem_fail_after(-1);
    sl__free(&b, a[0]);
    sl__free(&b, a[1]);
    sl__free(&b, a[3]);
    bf_end(&b);
}

typedef struct aw {
    sl__budget *b;
    size_t n;
    void *p;
    int err;
} aw;

static void *alloc_wait_thread(void *arg) {
    aw *a = arg;
    a->p = sl__alloc_wait(a->b, a->n, SL_MEM_SCRATCH, &a->err);
    return NULL;
}

TEST(alloc_wait) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    int err = 0;
    CHECK(sl__alloc_wait(&b, SIZE_MAX, SL_MEM_SCRATCH, &err) == NULL);
    CHECK_EQ(err, SL_EOVERFLOW);
    CHECK(sl__alloc_wait(&b, 2 << 20, SL_MEM_SCRATCH, &err) == NULL); /* can never fit */
    CHECK_EQ(err, SL_EBUDGET);
    void *hold = sl__alloc(&b, 900 << 10, SL_MEM_BATCHES);
    CHECK(hold != NULL);
    aw a = {&b, 300 << 10, NULL, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, alloc_wait_thread, &a), 0);
    bf_until_waiters(&b, 1);
    sl__free(&b, hold);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(a.p != NULL);
    CHECK_EQ(used(&b), sl__alloc_cost(300 << 10));
    sl__free(&b, a.p);
    bf_end(&b);
}

/* Threads take and give back random amounts with try and wait while an
 * observer samples the count: used never passes the limit, and everything
 * comes back. */
typedef struct stress {
    sl__budget *b;
    uint64_t seed;
    _Atomic int *stop;
    uint64_t granted;
} stress;

static void *stress_thread(void *arg) {
    stress *s = arg;
    uint64_t x = s->seed;
    for (int i = 0; i < 3000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t n = 1 + (x >> 33) % 400;
        int cat = (int)((x >> 20) % SL_MEM__COUNT);
        int rc = (x >> 40) & 1 ? sl__budget_try(s->b, n, cat) : sl__budget_wait(s->b, n, cat);
        if (rc == 0) {
            s->granted++;
            if (((x >> 45) & 7) == 0) sched_yield();
            sl__budget_release(s->b, n, cat);
        } else {
            CHECK_EQ(rc, SL_EBUDGET);
        }
    }
    return NULL;
}

static void *observer(void *arg) {
    stress *s = arg;
    while (!atomic_load(s->stop)) {
        uint64_t u = atomic_load(&s->b->used);
        if (u > s->b->limit) SL_FAIL("used %llu over limit %llu", (unsigned long long)u, (unsigned long long)s->b->limit);
    }
    return NULL;
}

TEST(concurrent_never_over_limit) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    _Atomic int stop = 0;
    stress s[4], obs = {&b, 0, &stop, 0};
    pthread_t t[4], to;
    CHECK_EQ(pthread_create(&to, NULL, observer, &obs), 0);
    for (int i = 0; i < 4; i++) {
        s[i] = (stress){&b, (uint64_t)i * 7919 + 1, &stop, 0};
        CHECK_EQ(pthread_create(&t[i], NULL, stress_thread, &s[i]), 0);
    }
    uint64_t granted = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(pthread_join(t[i], NULL), 0);
        granted += s[i].granted;
    }
    atomic_store(&stop, 1);
    CHECK_EQ(pthread_join(to, NULL), 0);
    CHECK(granted > 0);
    CHECK_EQ(used(&b), 0);
    CHECK_LE(atomic_load(&b.peak), 1000);
    for (int c = 0; c < SL_MEM__COUNT; c++) {
        CHECK_EQ(atomic_load(&b.cat[c]), 0);
        CHECK_LE(atomic_load(&b.cat_peak[c]), 1000);
    }
    CHECK(!sl__budget_has_waiters(&b));
    sl__budget_fini(&b);
}

/* ---- children, live limits, consumers ------------------------------------------ */

TEST(children_draw_on_their_root) {
    sl__budget root, a, b;
    bf_family(&root, &a, &b, 1000);
    CHECK_OK(sl__budget_try(&a, 600, SL_MEM_BATCHES));
    CHECK_OK(sl__budget_fix(&a, 600));
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

/* The governor's floor: the fixed parts plus the largest room a child
 * keeps for one sample's growth, never above the ceiling; a child that
 * leaves takes its room with it. */
TEST(floor_is_fixed_plus_the_largest_room) {
    sl__budget root, a, b;
    bf_family(&root, &a, &b, 1000);
    CHECK_OK(sl__budget_try(&a, 300, SL_MEM_BATCHES));
    CHECK_OK(sl__budget_fix(&a, 300));
    CHECK_OK(sl__budget_try(&b, 100, SL_MEM_BATCHES));
    CHECK_OK(sl__budget_fix(&b, 100));
    CHECK_EQ(sl__budget_floor(&root), 400);
    sl__budget_set_room(&a, 250);
    sl__budget_set_room(&b, 150);
    CHECK_EQ(sl__budget_floor(&root), 650); /* 400 fixed + the larger room */
    CHECK_EQ(sl__budget_floor(&b), 650);    /* a child answers for its root */
    CHECK_OK(sl__budget_set_limit(&root, 600, 1, NULL, 0)); /* the user may go lower ... */
    CHECK_EQ(sl__budget_floor(&root), 600);                 /* ... and the floor stays under the ceiling */
    CHECK_OK(sl__budget_set_limit(&root, 1000, 1, NULL, 0));
    sl__budget_fini(&a); /* its fixed part, what it held and its room go with it */
    CHECK_EQ(sl__budget_floor(&root), 250); /* 100 fixed + b's 150 */
    sl__budget_fini(&b);
    CHECK_EQ(sl__budget_floor(&root), 0);
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

TEST(growth_lets_waiters_through_in_order) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 800, SL_MEM_BATCHES));
    bf_waiter big, small;
    bf_wait_start(&big, &r, 300);
    bf_until_waiters(&r, 1);
    bf_wait_start(&small, &r, 100); /* fits now, but big came first */
    bf_until_waiters(&r, 2);
    bx_sleep_ms(20);
    CHECK_EQ(atomic_load(&small.done), 0);
    CHECK_OK(sl__budget_set_limit(&r, 1100, 1, NULL, 0)); /* room for one of them: the first */
    bf_wait_join(&big);
    CHECK_OK(big.rc);
    bx_sleep_ms(20);
    CHECK_EQ(atomic_load(&small.done), 0);
    CHECK_OK(sl__budget_set_limit(&r, 1200, 1, NULL, 0));
    bf_wait_join(&small);
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
    CHECK_OK(sl__budget_fix(&r, 200));
    CHECK_OK(sl__budget_try(&r, 700, SL_MEM_SCRATCH)); /* growth someone holds */
    CHECK_OK(sl__budget_set_limit(&r, 500, 0, NULL, 0)); /* governor: ceiling stays 1000 */
    CHECK_EQ(atomic_load(&r.ceiling), 1000);
    CHECK(sl__budget_has_waiters(&r)); /* over its limit: holders must give back */
    bf_waiter big, small;
    bf_wait_start(&big, &r, 500); /* 500 > 500 - 200: parked */
    bf_until_waiters(&r, 1);
    bf_wait_start(&small, &r, 100);
    bf_until_waiters(&r, 2);
    sl__budget_release(&r, 700, SL_MEM_SCRATCH); /* under the limit again */
    bf_wait_join(&small);                        /* the small one was not held up */
    CHECK_OK(small.rc);
    bx_sleep_ms(30);
    CHECK_EQ(atomic_load(&big.done), 0);
    CHECK_OK(sl__budget_set_limit(&r, 1000, 0, NULL, 0));
    bf_wait_join(&big);
    CHECK_OK(big.rc);
    CHECK_EQ(used(&r), 800);
    sl__budget_fini(&r);
}

TEST(parked_request_gives_up_after_the_stall) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    r.stall_ns = 200 * 1000000ull;
    CHECK_OK(sl__budget_set_limit(&r, 300, 0, NULL, 0));
    bf_waiter w;
    double t0 = bx_now_s();
    bf_wait_start(&w, &r, 600);
    bf_wait_join(&w);
    double s = bx_now_s() - t0;
    CHECK_EQ(w.rc, SL_EBUDGET);
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
    bf_waiter w;
    bf_wait_start(&w, &r, 600);
    bf_until_waiters(&r, 1);
    CHECK_OK(sl__budget_set_limit(&r, 500, 1, NULL, 0));
    bf_wait_join(&w);
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
    CHECK_OK(sl__budget_fix(&r, 400));
    char err[256] = "";
    CHECK_EQ(sl__budget_set_limit(&r, 399, 1, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "minimum working sets");
    CHECK_STR_CONTAINS(err, "399 B");
    CHECK_EQ(atomic_load(&r.limit), 1000);
    CHECK_OK(sl__budget_set_limit(&r, 400, 1, err, sizeof err));
    sl__budget_release(&r, 400, SL_MEM_BATCHES);
    sl__budget_fini(&r);
}

/* Bytes granted before a shrink are not fixed past the new limit (a loader
 * being created while the limit moves is refused, not fixed over it);
 * pages that cannot be given back are, and the limit then stays over them. */
TEST(fix_never_passes_the_limit) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 800, SL_MEM_BATCHES));
    CHECK_OK(sl__budget_set_limit(&r, 500, 1, NULL, 0)); /* nothing fixed yet: allowed, 800 stand over it */
    CHECK_EQ(sl__budget_fix(&r, 800), SL_EBUDGET);
    CHECK_EQ(atomic_load(&r.fixed), 0);
    CHECK_OK(sl__budget_fix(&r, 500));
    CHECK_EQ(sl__budget_fix(&r, 1), SL_EBUDGET);
    CHECK_EQ(sl__budget_fix(&r, UINT64_MAX), SL_EBUDGET); /* no wrap-around */
    CHECK_EQ(atomic_load(&r.fixed), 500);
    CHECK_EQ(sl__budget_set_limit(&r, 499, 1, NULL, 0), SL_EBUDGET);
    sl__budget_fix_stuck(&r, 300); /* locked pages */
    CHECK_EQ(atomic_load(&r.fixed), 800);
    CHECK_EQ(sl__budget_set_limit(&r, 799, 1, NULL, 0), SL_EBUDGET);
    CHECK_OK(sl__budget_set_limit(&r, 800, 1, NULL, 0));
    sl__budget_unfix(&r, 800);
    sl__budget_release(&r, 800, SL_MEM_BATCHES);
    /* through a child: the root's limit binds */
    sl__budget c;
    CHECK_OK(sl__budget_init(&c, 1000));
    sl__budget_attach(&c, &r);
    sl__budget_unbind_limit(&c);
    CHECK_OK(sl__budget_set_limit(&r, 1000, 1, NULL, 0));
    CHECK_OK(sl__budget_try(&c, 600, SL_MEM_BATCHES));
    CHECK_OK(sl__budget_set_limit(&r, 400, 1, NULL, 0));
    CHECK_EQ(sl__budget_fix(&c, 600), SL_EBUDGET);
    CHECK_EQ(atomic_load(&c.fixed), 0);
    CHECK_EQ(atomic_load(&r.fixed), 0);
    CHECK_OK(sl__budget_fix(&c, 400));
    CHECK_EQ(atomic_load(&r.fixed), 400);
    sl__budget_fini(&c); /* its fixed part and use leave with it */
    CHECK_EQ(atomic_load(&r.fixed), 0);
    CHECK_EQ(used(&r), 0);
    sl__budget_fini(&r);
}

/* Fix and unfix take the root's lock, the one set_limit checks fixed and
 * stores the limit under, so no fix lands between that check and that
 * store. Shown without a clock: with the lock held here, a thread that
 * called fix goes to sleep (state S, blocked on the lock) and has not
 * returned; once the lock is released it returns. */
typedef struct fix_call {
    sl__budget *b;
    int unfix;
    _Atomic long tid;
    _Atomic int entered, done;
} fix_call;

static void *fix_call_thread(void *arg) {
    fix_call *c = arg;
    atomic_store(&c->tid, (long)gettid());
    atomic_store(&c->entered, 1);
    if (c->unfix) sl__budget_unfix(c->b, 100);
    else CHECK_OK(sl__budget_fix(c->b, 100));
    atomic_store(&c->done, 1);
    return NULL;
}

TEST(fix_waits_for_the_lock_set_limit_holds) {
    sl__budget r;
    CHECK_OK(sl__budget_init(&r, 1000));
    CHECK_OK(sl__budget_try(&r, 100, SL_MEM_BATCHES));
    for (int unfix = 0; unfix < 2; unfix++) {
        fix_call c = {&r, unfix, 0, 0, 0};
        pthread_mutex_lock(&r.mu);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, fix_call_thread, &c), 0);
        while (!atomic_load(&c.entered)) sched_yield();
        for (;;) { /* blocked on the lock, or through without it */
            if (atomic_load(&c.done)) SL_FAIL("%s returned without the lock", unfix ? "unfix" : "fix");
            if (tx_state(atomic_load(&c.tid)) == 'S') break;
            sched_yield();
        }
        pthread_mutex_unlock(&r.mu);
        CHECK_EQ(pthread_join(t, NULL), 0);
        CHECK(atomic_load(&c.done));
        CHECK_EQ(atomic_load(&r.fixed), unfix ? 0 : 100);
    }
    sl__budget_release(&r, 100, SL_MEM_BATCHES);
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
    consumer a = {{give_back, room, NULL, NULL, 0}, &r, 300, 100, 0, 0};
    consumer b = {{give_back, room, NULL, NULL, 0}, &r, 400, 1000, 0, 0};
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
    bf_end(&r);
}

