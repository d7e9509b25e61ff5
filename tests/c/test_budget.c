/* ctest: tsan */
/*
 * The budget and its accounting allocator (src/core/mem.c): try, wait and
 * release; first-come first-served waits; close; the headroom refusal;
 * high-water marks and categories; what the allocator counts; allocation
 * failure injection; and a concurrent stress that never sees the limit
 * passed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/mem.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

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
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
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
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
}

/* A request larger than limit - fixed can never be granted: SL_EBUDGET at
 * once, never a wait. */
TEST(headroom_refusal) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 700, SL_MEM_BATCHES));
    sl__budget_fix(&b, 700);
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

typedef struct waiter {
    sl__budget *b;
    uint64_t n;
    int rc;
    _Atomic int done;
    _Atomic int *order; /* global completion counter */
    int place;          /* which completion this was */
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    w->rc = sl__budget_wait(w->b, w->n, SL_MEM_SCRATCH);
    w->place = atomic_fetch_add(w->order, 1);
    atomic_store(&w->done, 1);
    return NULL;
}

static void wait_until_waiters(sl__budget *b, int n) {
    for (int i = 0; i < 10000 && atomic_load(&b->waiters) < n; i++) sleep_ms(1);
    CHECK_EQ(atomic_load(&b->waiters), n);
}

TEST(wait_blocks_until_release) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 900, SL_MEM_BATCHES));
    _Atomic int order = 0;
    waiter w = {&b, 500, -99, 0, &order, -1};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
    wait_until_waiters(&b, 1);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&w.done), 0); /* still waiting: 500 does not fit */
    /* while anyone waits, try-requests fail even where they would fit */
    CHECK_EQ(sl__budget_try(&b, 50, SL_MEM_SCRATCH), SL_EBUDGET);
    CHECK(sl__budget_has_waiters(&b));
    sl__budget_release(&b, 500, SL_MEM_BATCHES);
    CHECK_EQ(pthread_join(t, NULL), 0);
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
    _Atomic int order = 0;
    waiter big = {&b, 800, -99, 0, &order, -1}, small = {&b, 100, -99, 0, &order, -1};
    pthread_t tb, ts;
    CHECK_EQ(pthread_create(&tb, NULL, wait_thread, &big), 0);
    wait_until_waiters(&b, 1);
    CHECK_EQ(pthread_create(&ts, NULL, wait_thread, &small), 0);
    wait_until_waiters(&b, 2);
    sl__budget_release(&b, 200, SL_MEM_BATCHES); /* room for small, not for big */
    sleep_ms(50);
    CHECK_EQ(atomic_load(&small.done), 0); /* not served past the head */
    CHECK_EQ(atomic_load(&big.done), 0);
    CHECK_EQ(used(&b), 800);
    sl__budget_release(&b, 600, SL_MEM_BATCHES); /* 200 used: big fits, and then small does not */
    CHECK_EQ(pthread_join(tb, NULL), 0);
    CHECK_OK(big.rc);
    CHECK_EQ(used(&b), 1000);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&small.done), 0);
    sl__budget_release(&b, 100, SL_MEM_BATCHES); /* now small */
    CHECK_EQ(pthread_join(ts, NULL), 0);
    CHECK_OK(small.rc);
    CHECK_EQ(big.place, 0);
    CHECK_EQ(small.place, 1);
    CHECK_EQ(used(&b), 1000);
    CHECK_EQ(atomic_load(&b.peak), 1000);
    sl__budget_release(&b, 900, SL_MEM_SCRATCH);
    sl__budget_release(&b, 100, SL_MEM_BATCHES);
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
}

/* close wakes every waiter with SL_ESTATE; later waits fail at once. */
TEST(close_wakes_waiters) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1000));
    CHECK_OK(sl__budget_try(&b, 1000, SL_MEM_BATCHES));
    _Atomic int order = 0;
    waiter w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (waiter){&b, 100u * (i + 1), -99, 0, &order, -1};
        CHECK_EQ(pthread_create(&t[i], NULL, wait_thread, &w[i]), 0);
    }
    wait_until_waiters(&b, 3);
    sl__budget_close(&b);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(pthread_join(t[i], NULL), 0);
        CHECK_EQ(w[i].rc, SL_ESTATE);
    }
    CHECK_EQ(used(&b), 1000); /* nothing granted */
    sl__budget_release(&b, 500, SL_MEM_BATCHES);
    /* closed: a wait that would have to queue fails at once */
    CHECK_OK(sl__budget_try(&b, 100, SL_MEM_SCRATCH));
    waiter late = {&b, 900, -99, 0, &order, -1};
    pthread_t tl;
    CHECK_EQ(pthread_create(&tl, NULL, wait_thread, &late), 0);
    CHECK_EQ(pthread_join(tl, NULL), 0);
    CHECK_EQ(late.rc, SL_ESTATE);
    sl__budget_release(&b, 100, SL_MEM_SCRATCH);
    sl__budget_release(&b, 500, SL_MEM_BATCHES);
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
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
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
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
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
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
    wait_until_waiters(&b, 1);
    sl__free(&b, hold);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(a.p != NULL);
    CHECK_EQ(used(&b), sl__alloc_cost(300 << 10));
    sl__free(&b, a.p);
    CHECK_EQ(used(&b), 0);
    sl__budget_fini(&b);
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
