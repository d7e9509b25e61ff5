/*
 * The sample cache (src/cache) in one process: the hit rate against the
 * cache/dataset optimum over shuffled epochs with an LRU of the same size
 * beside it, the admission rule, variable sizes, shrinking, exact budget
 * accounting, pins across eviction, every error path of create, and
 * allocation failure injection. The node cache's processes are in
 * test_cache_shm.c, threads in test_cache_mt.c.
 */
#define _GNU_SOURCE
#include "fixture.h"

#include <stdio.h>

#include "cache_fixture.h"

static void report(const char *what, cf_result r) {
    printf("%s: fraction %.3f  sluice hit %.4f (bytes %.4f)  LRU hit %.4f (bytes %.4f)\n", what, r.fraction,
           r.hit_rate, r.byte_hit_rate, r.lru_hit_rate, r.lru_byte_hit_rate);
}

/* From the second epoch on the hit rate reaches 0.95 x min(1, cache /
 * dataset) at every fraction, where LRU falls to about fraction^2 / 2. */
TEST(hit_rate_vs_fraction) {
    const double fr[] = {0.05, 0.17, 0.5, 1.0};
    for (int i = 0; i < 4; i++) {
        cf_result r = cf_run(4000, (cf_sizes){1000, 1000}, fr[i], 5, 11 + i);
        report("fixed 1000 B", r);
        double best = r.fraction < 1 ? r.fraction : 1;
        if (r.hit_rate < 0.95 * best) SL_FAIL("fraction %.2f: hit rate %.4f < 0.95 x %.4f", fr[i], r.hit_rate, best);
        if (fr[i] < 1 && r.lru_hit_rate > 0.75 * r.hit_rate)
            SL_FAIL("fraction %.2f: LRU %.4f is not far below %.4f: is the reference right?", fr[i], r.lru_hit_rate,
                    r.hit_rate);
    }
}

/* Sizes from 200 B to 40 KB: the share of requested bytes served from the
 * cache reaches 0.95 x the capacity's share of the dataset's bytes. */
TEST(hit_rate_variable_sizes) {
    const double fr[] = {0.05, 0.17, 0.5, 1.0};
    for (int i = 0; i < 4; i++) {
        cf_result r = cf_run(3000, (cf_sizes){200, 40000}, fr[i], 5, 21 + i);
        report("200 B..40 KB", r);
        double best = r.fraction < 1 ? r.fraction : 1;
        if (r.byte_hit_rate < 0.95 * best)
            SL_FAIL("fraction %.2f: byte hit rate %.4f < 0.95 x %.4f", fr[i], r.byte_hit_rate, best);
        if (fr[i] < 1) CHECK(r.lru_byte_hit_rate < 0.75 * r.byte_hit_rate);
    }
}

/* ---- a scripted future: each key's next use is a fixed time ---------------- */

typedef struct script {
    uint64_t next[16];
} script;

static int script_fn(void *ctx, uint32_t k, uint64_t now, uint64_t *next) {
    (void)now;
    *next = ((script *)ctx)->next[k];
    return 0;
}

typedef struct small {
    sl__budget b;
    script s;
    sl__cache *c;
} small;

/* A private cache of room for `fit` values of 100 bytes. */
static void small_make(small *m, uint32_t fit) {
    CHECK_OK(sl__budget_init(&m->b, 1 << 24));
    sl__cache_opts o = {.capacity = 1 << 20, .keys = 16, .next_use = script_fn, .ctx = &m->s};
    char err[200];
    CHECK_OK(sl__cache_create(&m->b, &o, &m->c, err, sizeof err));
    CHECK_OK(sl__cache_set_capacity(m->c, fit * cf_counted(100)));
}

static int put(small *m, uint32_t k) {
    uint8_t v[100];
    cf_fill(v, sizeof v, k);
    return sl__cache_insert(m->c, k, 0, v, sizeof v);
}

static int has(small *m, uint32_t k) {
    sl__cache_ref ref;
    if (!sl__cache_lookup(m->c, k, 0, &ref)) return 0;
    sl__cache_release(m->c, &ref);
    return 1;
}

static void small_free(small *m) {
    sl__cache_destroy(m->c);
    CHECK_EQ(atomic_load(&m->b.used), 0);
    sl__budget_fini(&m->b);
}

/* Never evict an entry used as soon as or sooner than the newcomer; evict
 * the farthest one otherwise. */
TEST(admission_rule) {
    small m;
    memset(&m.s, 0, sizeof m.s);
    small_make(&m, 2);
    m.s.next[1] = 10, m.s.next[2] = 20, m.s.next[3] = 30, m.s.next[4] = 15, m.s.next[5] = 15;
    m.s.next[6] = SL_CACHE_NEVER;
    CHECK_EQ(put(&m, 1), 1);
    CHECK_EQ(put(&m, 2), 1);
    CHECK_EQ(put(&m, 3), 0); /* farther than every resident: not admitted */
    CHECK(has(&m, 1) && has(&m, 2) && !has(&m, 3));
    CHECK_EQ(put(&m, 4), 1); /* sooner than 2: 2 (the farthest) goes */
    CHECK(has(&m, 1) && !has(&m, 2) && has(&m, 4));
    CHECK_EQ(put(&m, 5), 0); /* as soon as 4, the farthest now: not admitted */
    CHECK_EQ(put(&m, 6), 0); /* never used again: not admitted, even with room */
    CHECK_EQ(put(&m, 1), 0); /* already cached */
    sl__cache_stats st;
    sl__cache_stats_get(m.c, &st);
    CHECK_EQ(st.admitted, 3);
    CHECK_EQ(st.refused, 3);
    CHECK_EQ(st.evictions, 1);
    CHECK_EQ(st.entries, 2);
    small_free(&m);
}

/* A newcomer larger than several residents evicts them farthest first,
 * and stops at the first one used sooner than itself (not admitted then;
 * the farther ones it evicted were the right ones to lose anyway). */
TEST(variable_size_admission) {
    sl__budget b;
    script s = {{0}};
    CHECK_OK(sl__budget_init(&b, 1 << 24));
    sl__cache_opts o = {.capacity = 1 << 20, .keys = 16, .next_use = script_fn, .ctx = &s};
    sl__cache *c;
    CHECK_OK(sl__cache_create(&b, &o, &c, NULL, 0));
    CHECK_OK(sl__cache_set_capacity(c, 3 * cf_counted(100)));
    uint8_t v[300];
    s.next[1] = 10, s.next[2] = 40, s.next[3] = 50, s.next[4] = 30, s.next[5] = 5;
    for (uint32_t k = 1; k <= 3; k++) {
        cf_fill(v, 100, k);
        CHECK_EQ(sl__cache_insert(c, k, 0, v, 100), 1);
    }
    cf_fill(v, 200, 4); /* needs two places: 3 (50) and 2 (40) go, both farther than 30 */
    CHECK_EQ(sl__cache_insert(c, 4, 0, v, 200), 1);
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.evictions, 2);
    CHECK_EQ(st.entries, 2);
    s.next[5] = 20; /* needs all three places: 4 (30) goes, then 1 (10) is sooner: refused */
    cf_fill(v, 300, 5);
    CHECK_EQ(sl__cache_insert(c, 5, 0, v, 300), 0);
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.evictions, 3);
    CHECK_EQ(st.entries, 1);
    size_t got;
    CHECK_EQ(sl__cache_get(c, 1, 0, v, sizeof v, &got), 1);
    CHECK(cf_check(v, 100, 1));
    s.next[6] = 5; /* sooner than 1: 1 goes, 6 comes in */
    cf_fill(v, 300, 6);
    CHECK_EQ(sl__cache_insert(c, 6, 0, v, 300), 1);
    CHECK_EQ(sl__cache_get(c, 6, 0, v, sizeof v, &got), 1);
    CHECK_EQ(got, 300);
    CHECK(cf_check(v, 300, 6));
    CHECK_EQ(sl__cache_get(c, 1, 0, v, sizeof v, &got), 0);
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* Shrinking evicts farthest first down to the new capacity, and gives
 * the bytes back to the budget; growing again admits again. */
TEST(shrink) {
    small m;
    for (int k = 0; k < 16; k++) m.s.next[k] = 100 + (uint64_t)k * 10;
    small_make(&m, 8);
    for (uint32_t k = 0; k < 8; k++) CHECK_EQ(put(&m, k), 1);
    uint64_t before = atomic_load(&m.b.cat[SL_MEM_CACHE]);
    CHECK_OK(sl__cache_set_capacity(m.c, 3 * cf_counted(100)));
    for (uint32_t k = 0; k < 8; k++) CHECK_EQ(has(&m, k), k < 3); /* 0, 1, 2: the soonest used */
    sl__cache_stats st;
    sl__cache_stats_get(m.c, &st);
    CHECK_LE(st.bytes, st.capacity);
    CHECK_EQ(st.evictions, 5);
    CHECK_EQ(before - atomic_load(&m.b.cat[SL_MEM_CACHE]), 5 * cf_counted(100));
    CHECK_EQ(sl__cache_set_capacity(m.c, UINT64_MAX), SL_EINVAL); /* above creation */
    CHECK_OK(sl__cache_set_capacity(m.c, 0));
    CHECK(!has(&m, 0));
    CHECK_EQ(put(&m, 0), 0); /* no room at all */
    CHECK_OK(sl__cache_set_capacity(m.c, 8 * cf_counted(100)));
    CHECK_EQ(put(&m, 0), 1);
    small_free(&m);
}

/* The budget counts exactly what the cache holds: its handle, its index
 * and each value at the allocator's cost (small ones from malloc, large
 * ones page-rounded mappings). */
TEST(budget_exact) {
    sl__budget b;
    script s;
    for (int k = 0; k < 16; k++) s.next[k] = 1000 - (uint64_t)k;
    CHECK_OK(sl__budget_init(&b, 1 << 26));
    sl__cache_opts o = {.capacity = 8 << 20, .keys = 16, .next_use = script_fn, .ctx = &s};
    sl__cache *c;
    CHECK_OK(sl__cache_create(&b, &o, &c, NULL, 0));
    static uint8_t v[300000];
    const size_t sizes[] = {1, 100, 4000, 65536, 100000, 300000, 0, 77};
    for (uint32_t k = 0; k < 8; k++) {
        cf_fill(v, sizes[k], k);
        CHECK_EQ(sl__cache_insert(c, k, 0, v, sizes[k]), 1);
        sl__cache_stats st;
        sl__cache_stats_get(c, &st);
        CHECK_EQ(atomic_load(&b.cat[SL_MEM_CACHE]), st.bytes + st.index_bytes);
        CHECK_EQ(st.budget_bytes, st.bytes + st.index_bytes);
        CHECK_EQ(atomic_load(&b.used), atomic_load(&b.cat[SL_MEM_CACHE]));
    }
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    uint64_t values = 0;
    for (int k = 0; k < 8; k++) values += sl__alloc_cost(sizes[k]);
    CHECK_LE(values, st.bytes);             /* at least what was asked */
    CHECK_LE(st.bytes, values + 8 * 16);    /* malloc's rounding at most */
    CHECK_EQ(st.entries, 8);
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_CACHE]), 0);
    sl__budget_fini(&b);
}

/* A full budget refuses admission (counted), takes nothing, and the cache
 * goes on; a budget that cannot hold the index refuses the create. */
TEST(budget_full) {
    sl__budget b;
    script s = {{0}};
    CHECK_OK(sl__budget_init(&b, 256 << 10));
    sl__cache_opts o = {.capacity = 64 << 10, .keys = 16, .next_use = script_fn, .ctx = &s};
    sl__cache *c;
    CHECK_OK(sl__cache_create(&b, &o, &c, NULL, 0));
    uint64_t rest = b.limit - atomic_load(&b.used);
    CHECK_OK(sl__budget_try(&b, rest - 50, SL_MEM_BATCHES)); /* leave 50 bytes */
    uint8_t v[100];
    cf_fill(v, sizeof v, 3);
    CHECK_EQ(sl__cache_insert(c, 3, 0, v, sizeof v), 0);
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.refused, 1);
    CHECK_EQ(st.bytes, 0);
    sl__budget_release(&b, rest - 50, SL_MEM_BATCHES);
    CHECK_EQ(sl__cache_insert(c, 3, 0, v, sizeof v), 1);
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);

    char err[256] = "";
    sl__budget tiny;
    CHECK_OK(sl__budget_init(&tiny, 4096));
    o.keys = 4000; /* a key table of 16 KB */
    o.capacity = 1 << 20;
    CHECK_EQ(sl__cache_create(&tiny, &o, &c, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "budget has no room");
    CHECK_EQ(atomic_load(&tiny.used), 0);
    sl__budget_fini(&tiny);
    sl__budget_fini(&b);
}

/* An evicted entry that is pinned stays readable and intact until its
 * release, which frees it; it is out of the index at once. */
TEST(pinned_entry_outlives_eviction) {
    small m;
    memset(&m.s, 0, sizeof m.s);
    small_make(&m, 1);
    m.s.next[1] = 50, m.s.next[2] = 10;
    CHECK_EQ(put(&m, 1), 1);
    sl__cache_ref ref;
    CHECK_EQ(sl__cache_lookup(m.c, 1, 0, &ref), 1);
    uint64_t held = atomic_load(&m.b.cat[SL_MEM_CACHE]);
    CHECK_EQ(put(&m, 2), 0); /* 1 goes, but its bytes are still counted: no room yet */
    CHECK(!has(&m, 1));
    uint8_t out[100];
    sl__cache_read(m.c, &ref, out);
    CHECK(cf_check(out, 100, 1));
    CHECK(ref.data != NULL && cf_check(ref.data, 100, 1));
    CHECK_EQ(atomic_load(&m.b.cat[SL_MEM_CACHE]), held);
    sl__cache_release(m.c, &ref);
    CHECK_EQ(held - atomic_load(&m.b.cat[SL_MEM_CACHE]), cf_counted(100));
    CHECK_EQ(put(&m, 2), 1);
    small_free(&m);
}

TEST(get_into_small_buffer) {
    small m;
    memset(&m.s, 0, sizeof m.s);
    m.s.next[1] = 5;
    small_make(&m, 2);
    CHECK_EQ(put(&m, 1), 1);
    uint8_t out[100];
    size_t len = 0;
    CHECK_EQ(sl__cache_get(m.c, 1, 0, out, 99, &len), SL_EOVERFLOW);
    CHECK_EQ(len, 100);
    CHECK_EQ(sl__cache_get(m.c, 1, 0, out, 100, &len), 1);
    CHECK(cf_check(out, 100, 1));
    CHECK_EQ(sl__cache_get(m.c, 7, 0, out, 100, &len), 0);
    CHECK_EQ(sl__cache_get(m.c, 99, 0, out, 100, &len), 0); /* outside the key space: a miss */
    CHECK_EQ(sl__cache_insert(m.c, 99, 0, out, 100), 0);
    small_free(&m);
}

/* Each refusal of create, with its sentence. */
TEST(create_rejects) {
    sl__budget b;
    script s = {{0}};
    CHECK_OK(sl__budget_init(&b, 1 << 30));
    sl__cache *c = (sl__cache *)1;
    char err[256] = "";
    sl__cache_opts o = {.capacity = 1 << 20, .keys = 16, .next_use = script_fn, .ctx = &s};
    o.keys = 0;
    CHECK_EQ(sl__cache_create(&b, &o, &c, err, sizeof err), SL_EINVAL);
    CHECK(c == NULL);
    CHECK_STR_CONTAINS(err, "key count (0)");
    o.keys = 16, o.next_use = NULL;
    CHECK_EQ(sl__cache_create(&b, &o, &c, err, sizeof err), SL_EINVAL);
    o.next_use = script_fn, o.block_size = 1000;
    CHECK_EQ(sl__cache_create(&b, &o, &c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "block size 1000");
    o.block_size = 0, o.keys = 1000000, o.capacity = 1 << 20; /* a 4 MB key table in 1 MB */
    CHECK_EQ(sl__cache_create(&b, &o, &c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "cannot hold its index for 1000000 samples");
    o.keys = 16, o.shm_name = "no-slash";
    CHECK_EQ(sl__cache_create(&b, &o, &c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "is not \"/name\"");
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* Fail allocation 0, 1, 2, ... of create and of inserts: every failure is
 * a clean code or a refusal, and nothing is left counted. */
TEST(alloc_failure_injection) {
    script s;
    for (int k = 0; k < 16; k++) s.next[k] = 100 - (uint64_t)k;
    for (long n = 0; n < 40; n++) {
        sl__budget b;
        CHECK_OK(sl__budget_init(&b, 1 << 24));
        sl__cache_opts o = {.capacity = 1 << 20, .keys = 16, .next_use = script_fn, .ctx = &s};
        sl__cache *c = NULL;
        sl__mem_fail_after(n);
        int rc = sl__cache_create(&b, &o, &c, NULL, 0);
        if (rc == 0) {
            uint8_t v[5000];
            for (uint32_t k = 0; k < 16; k++) {
                cf_fill(v, 1000 + k * 200, k);
                int ok = sl__cache_insert(c, k, 0, v, 1000 + k * 200);
                CHECK(ok == 0 || ok == 1);
                size_t len;
                if (sl__cache_get(c, k, 0, v, sizeof v, &len) == 1) CHECK(cf_check(v, len, k));
                else CHECK_EQ(ok, 0);
            }
        } else {
            CHECK(rc == SL_ENOMEM || rc == SL_EBUDGET);
        }
        sl__mem_fail_after(-1);
        sl__cache_destroy(c);
        CHECK_EQ(atomic_load(&b.used), 0);
        sl__budget_fini(&b);
    }
}

/* A jump in the order (resume at a later epoch): entries kept from before
 * get next uses in the new epochs, at the first insert of the epoch. */
TEST(refresh_at_new_epoch) {
    enum { N = 200 };
    cf_order o;
    cf_order_init(&o, N, 0, 1, 0, 1, 5);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 26));
    sl__cache_opts opts = {.capacity = 4 << 20, .keys = N, .epoch_len = N, .next_use = sl__nextuse_fn, .ctx = &o.nu};
    sl__cache *c;
    CHECK_OK(sl__cache_create(&b, &opts, &c, NULL, 0));
    CHECK_OK(sl__cache_set_capacity(c, 50 * cf_counted(64)));
    uint8_t v[64];
    cf_order_epoch(&o, 0);
    for (uint32_t i = 0; i < N; i++) {
        cf_fill(v, 64, o.seq[i]);
        sl__cache_insert(c, o.seq[i], i, v, 64);
    }
    /* jump to epoch 7: without the refresh the residents' next uses would
     * lie in epochs 0-1, soonest of all, and nothing could ever get in */
    cf_order_epoch(&o, 7);
    uint64_t hits = 0;
    for (uint32_t e = 7; e < 10; e++) {
        cf_order_epoch(&o, e);
        for (uint32_t i = 0; i < N; i++) {
            uint32_t k = o.seq[i];
            size_t len;
            if (sl__cache_get(c, k, e * N + i, v, 64, &len) == 1) {
                CHECK(cf_check(v, 64, k));
                if (e > 7) hits++;
                continue;
            }
            cf_fill(v, 64, k);
            sl__cache_insert(c, k, e * N + i, v, 64);
        }
    }
    printf("hits after the jump: %llu of %d\n", (unsigned long long)hits, 2 * N);
    CHECK(hits >= (uint64_t)(0.95 * 0.25 * 2 * N));
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    cf_order_fini(&o);
}

/* Real JPEGs, good and corrupt: decoding the cached copy gives the same
 * pixels, or the same failure, as decoding the file (the cache holds the
 * file's bytes; a failure is decided by those bytes alone). */
TEST(decode_same_from_cache) {
    fx_dataset d;
    fx_simple(&d, 10, 6, 40, 300);
    sl__budget b;
    script s;
    for (int k = 0; k < 16; k++) s.next[k] = 10;
    CHECK(d.files <= 16);
    CHECK_OK(sl__budget_init(&b, 1 << 26));
    sl__cache_opts o = {.capacity = 16 << 20, .keys = 16, .next_use = script_fn, .ctx = &s};
    sl__cache *c;
    CHECK_OK(sl__cache_create(&b, &o, &c, NULL, 0));
    int failed = 0;
    for (uint32_t k = 0; k < d.files; k++) {
        char path[400];
        snprintf(path, sizeof path, "%s/%s", d.root, d.rel[k]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t file[1 << 20], cached[1 << 20], a[3 * 64 * 64], bpx[3 * 64 * 64];
        size_t n = fread(file, 1, sizeof file, f), len = 0;
        fclose(f);
        CHECK_EQ(sl__cache_insert(c, k, 0, file, n), 1);
        CHECK_EQ(sl__cache_get(c, k, 0, cached, sizeof cached, &len), 1);
        CHECK_EQ(len, n);
        sl_decode_opts opt;
        sl_decode_opts_init(&opt);
        opt.preset = SL_PRESET_TRAIN, opt.size = 64, opt.seed = 3, opt.epoch = 1, opt.index = k;
        char e1[200] = "", e2[200] = "";
        int r1 = sl_image_decode(file, n, &opt, a, sizeof a, e1, sizeof e1);
        int r2 = sl_image_decode(cached, len, &opt, bpx, sizeof bpx, e2, sizeof e2);
        CHECK_EQ(r1, r2);
        CHECK(strcmp(e1, e2) == 0);
        if (r1 == 0) CHECK(memcmp(a, bpx, sizeof a) == 0);
        failed += r1 != 0;
        CHECK_EQ(d.kind[k] != FX_GOOD, r1 != 0);
    }
    CHECK_EQ(failed, 6); /* truncated, garbage and empty files, two each */
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}
