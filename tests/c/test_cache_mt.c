/* ctest: tsan */
/*
 * The cache under threads (run under TSan too): 8 workers taking
 * positions of the order from a shared counter, as the loader's workers
 * do, looking up, checking every hit's bytes and inserting misses, while
 * another thread shrinks and grows the cache and reads its stats; for a
 * private cache and for a node cache used by threads of one process.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "cache_fixture.h"

#define N 3000
#define THREADS 8
static const cf_sizes SIZES = {100, 30000};

typedef struct run {
    sl__cache *c;
    cf_order *o;
    uint64_t epoch;
    uint64_t cap;
    _Atomic uint64_t next, hits, uses;
    _Atomic int stop;
} run;

static void *worker(void *arg) {
    run *r = arg;
    uint8_t *buf = malloc(SIZES.hi);
    CHECK(buf != NULL);
    for (uint64_t i; (i = atomic_fetch_add(&r->next, 1)) < r->o->s.per_rank;) {
        uint32_t k = r->o->seq[i];
        uint64_t t = sl__sampler_time(&r->o->s, r->epoch, i);
        size_t len = cf_size(SIZES, k), got;
        sl__cache_ref ref;
        int hit = sl__cache_lookup(r->c, k, t, &ref);
        if (hit) {
            got = (size_t)ref.size;
            sl__cache_read(r->c, &ref, buf);
            sl__cache_release(r->c, &ref);
            if (got != len || !cf_check(buf, len, k)) SL_FAIL("sample %u: cached bytes differ", k);
        } else {
            cf_fill(buf, len, k);
            sl__cache_insert(r->c, k, t, buf, len);
        }
        if (r->epoch > 0) atomic_fetch_add(&r->uses, 1), atomic_fetch_add(&r->hits, hit);
    }
    free(buf);
    return NULL;
}

/* Shrinks to a tenth and back, again and again, reading stats between. */
static void *governor(void *arg) {
    run *r = arg;
    for (int n = 0; !atomic_load(&r->stop); n++) {
        CHECK_OK(sl__cache_set_capacity(r->c, n % 2 ? r->cap / 10 : r->cap));
        sl__cache_stats st;
        sl__cache_stats_get(r->c, &st);
        CHECK(st.entries <= N);
        usleep(2000);
    }
    CHECK_OK(sl__cache_set_capacity(r->c, r->cap));
    return NULL;
}

static double epochs(run *r, int with_governor) {
    pthread_t th[THREADS], gov;
    for (uint64_t e = 0; e < 4; e++) {
        cf_order_epoch(r->o, e);
        r->epoch = e;
        atomic_store(&r->next, 0);
        atomic_store(&r->stop, 0);
        if (with_governor) CHECK_OK(pthread_create(&gov, NULL, governor, r));
        for (int i = 0; i < THREADS; i++) CHECK_OK(pthread_create(&th[i], NULL, worker, r));
        for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
        atomic_store(&r->stop, 1);
        if (with_governor) pthread_join(gov, NULL);
    }
    return (double)atomic_load(&r->hits) / (double)atomic_load(&r->uses);
}

static uint64_t dataset_bytes(uint64_t (*charge)(size_t)) {
    uint64_t t = 0;
    for (uint32_t k = 0; k < N; k++) t += charge(cf_size(SIZES, k));
    return t;
}

static uint64_t blocks_4k(size_t n) { return (n + 4095) / 4096 * 4096; }

static void private_case(int with_governor) {
    cf_order o;
    cf_order_init(&o, N, 0, 1, 0, 1, 3);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 28));
    uint64_t cap = dataset_bytes(cf_counted) / 4;
    sl__cache_opts opts = {.capacity = 2 * cap + (1 << 20), .keys = N, .epoch_len = o.s.total,
                           .next_use = sl__nextuse_fn, .ctx = &o.nu};
    run r = {.o = &o, .cap = cap};
    CHECK_OK(sl__cache_create(&b, &opts, &r.c, NULL, 0));
    CHECK_OK(sl__cache_set_capacity(r.c, cap));
    double h = epochs(&r, with_governor);
    printf("private, %d threads%s: hit rate %.4f at fraction 0.25\n", THREADS, with_governor ? ", shrinking" : "", h);
    if (!with_governor) CHECK(h >= 0.95 * 0.25 * 0.97);
    sl__cache_stats st;
    sl__cache_stats_get(r.c, &st);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_CACHE]), st.bytes + st.index_bytes);
    sl__cache_destroy(r.c);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    cf_order_fini(&o);
}

TEST(private_threads) { private_case(0); }
TEST(private_threads_shrinking) { private_case(1); }

TEST(node_cache_threads) {
    cf_order o;
    cf_order_init(&o, N, 0, 1, 0, 1, 4);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    char name[96];
    snprintf(name, sizeof name, "/sluice-cache-test-%ld-mt", (long)getpid());
    uint64_t cap = dataset_bytes(blocks_4k) / 4;
    sl__cache_opts opts = {.capacity = 2 * cap + (4 << 20), .keys = N, .epoch_len = o.s.total,
                           .next_use = sl__nextuse_fn, .ctx = &o.nu, .shm_name = name};
    run r = {.o = &o, .cap = cap};
    char err[300];
    if (sl__cache_create(&b, &opts, &r.c, err, sizeof err)) SL_FAIL("%s", err);
    CHECK_OK(sl__cache_set_capacity(r.c, cap));
    double h = epochs(&r, 1);
    printf("node cache, %d threads, shrinking: hit rate %.4f\n", THREADS, h);
    sl__cache_stats st;
    sl__cache_stats_get(r.c, &st);
    CHECK_LE(st.bytes, st.capacity);
    CHECK_EQ(st.recoveries, 0);
    sl__cache_destroy(r.c);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    cf_order_fini(&o);
}
