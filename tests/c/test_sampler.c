/*
 * The sampler (src/core/sampler.c) on its own: each epoch a permutation,
 * fixed by (seed, epoch); ranks as torch's DistributedSampler (pad by
 * wrapping to equal length, or cut with drop_last), disjoint apart from the
 * padding and together complete; edge sizes.
 */
#include "check.h"
#include "pipeline/sampler.h"
#include "sluice.h"

typedef struct order {
    uint64_t per_rank, total;
    uint32_t *seq;
} order;

static order make(uint64_t n, uint32_t rank, uint32_t world, int shuffle, int drop_last, uint64_t seed,
                  uint64_t epoch) {
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, n, rank, world, shuffle, drop_last, seed));
    order o = {s.per_rank, s.total, calloc(s.per_rank ? s.per_rank : 1, 4)};
    uint32_t *tmp = calloc(s.total > n ? s.total : n, 4);
    CHECK(o.seq && tmp);
    sl__sampler_fill(&s, epoch, o.seq, world == 1 ? NULL : tmp);
    free(tmp);
    return o;
}

static int is_perm(const uint32_t *a, uint64_t n) {
    uint8_t *seen = calloc(n, 1);
    CHECK(seen != NULL);
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) {
        if (a[i] >= n || seen[a[i]]) ok = 0;
        else seen[a[i]] = 1;
    }
    free(seen);
    return ok;
}

TEST(permutation_per_epoch) {
    const uint64_t ns[] = {1, 2, 3, 10, 257, 10000};
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
        uint64_t n = ns[t];
        order e0 = make(n, 0, 1, 1, 0, 42, 0), e0b = make(n, 0, 1, 1, 0, 42, 0), e1 = make(n, 0, 1, 1, 0, 42, 1),
              s2 = make(n, 0, 1, 1, 0, 43, 0);
        CHECK_EQ(e0.per_rank, n);
        CHECK(is_perm(e0.seq, n));
        CHECK(is_perm(e1.seq, n));
        CHECK(memcmp(e0.seq, e0b.seq, n * 4) == 0); /* same (seed, epoch): same order */
        if (n >= 10) {
            CHECK(memcmp(e0.seq, e1.seq, n * 4) != 0); /* another epoch: another order */
            CHECK(memcmp(e0.seq, s2.seq, n * 4) != 0); /* another seed: another order */
            uint64_t fixed = 0;                        /* and really shuffled */
            for (uint64_t i = 0; i < n; i++) fixed += e0.seq[i] == i;
            CHECK(fixed < n / 2);
        }
        free(e0.seq), free(e0b.seq), free(e1.seq), free(s2.seq);
    }
}

TEST(no_shuffle_is_identity) {
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        order o = make(100, 0, 1, 0, 0, 9, epoch);
        for (uint64_t i = 0; i < 100; i++) CHECK_EQ(o.seq[i], i);
        free(o.seq);
        /* ranks of an unshuffled order: r, r+w, r+2w, ... wrapping */
        order r = make(10, 1, 4, 0, 0, 9, epoch);
        CHECK_EQ(r.per_rank, 3);
        CHECK_EQ(r.seq[0], 1);
        CHECK_EQ(r.seq[1], 5);
        CHECK_EQ(r.seq[2], 9);
        free(r.seq);
        order last = make(10, 3, 4, 0, 0, 9, epoch); /* 3, 7, then 11 wraps to 1 */
        CHECK_EQ(last.seq[2], 1);
        free(last.seq);
    }
}

/* Over all ranks: the multiset is the permutation plus its first
 * (total - n) entries again (padding), or the permutation's first total
 * entries with drop_last. Rank r holds positions r, r+world, ... */
static void check_shards(uint64_t n, uint32_t world, int drop_last, uint64_t epoch) {
    order whole = make(n, 0, 1, 1, 0, 5, epoch);
    uint64_t per = drop_last ? n / world : (n + world - 1) / world;
    uint32_t *count = calloc(n, sizeof *count), *want = calloc(n, sizeof *want);
    CHECK(count && want);
    for (uint32_t r = 0; r < world; r++) {
        order o = make(n, r, world, 1, drop_last, 5, epoch);
        CHECK_EQ(o.per_rank, per);
        CHECK_EQ(o.total, per * world);
        for (uint64_t i = 0; i < per; i++) {
            uint64_t pos = r + i * world;
            CHECK_EQ(o.seq[i], whole.seq[pos % n]);
            count[o.seq[i]]++;
        }
        free(o.seq);
    }
    for (uint64_t p = 0; p < per * world; p++) want[whole.seq[p % n]]++;
    for (uint64_t i = 0; i < n; i++) {
        if (count[i] != want[i]) SL_FAIL("n %llu world %u: sample %llu seen %u times, expected %u", (unsigned long long)n, world, (unsigned long long)i, count[i], want[i]);
        if (!drop_last) CHECK(count[i] >= 1); /* complete */
        if (drop_last) CHECK_LE(count[i], 1); /* disjoint */
        if (!drop_last && n >= world) CHECK_LE(count[i], 2);
    }
    free(count), free(want), free(whole.seq);
}

TEST(shards_padded_and_dropped) {
    const uint64_t ns[] = {1, 2, 5, 7, 22, 100, 101, 1000};
    const uint32_t ws[] = {1, 2, 3, 4, 7, 8};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ws / sizeof *ws; b++)
            for (uint64_t epoch = 0; epoch < 2; epoch++) {
                check_shards(ns[a], ws[b], 0, epoch);
                if (ns[a] >= ws[b]) check_shards(ns[a], ws[b], 1, epoch);
            }
}

/* More ranks than samples: without drop_last every rank gets one (wrapping
 * round the permutation more than once); with drop_last a rank gets none. */
TEST(world_larger_than_dataset) {
    check_shards(3, 8, 0, 0);
    order o = make(3, 7, 8, 1, 0, 5, 0);
    CHECK_EQ(o.per_rank, 1);
    CHECK(o.seq[0] < 3);
    free(o.seq);
    sl__sampler s;
    CHECK_EQ(sl__sampler_init(&s, 3, 7, 8, 1, 1, 5), SL_EEMPTY);
}

TEST(init_rejects) {
    sl__sampler s;
    CHECK_EQ(sl__sampler_init(&s, 0, 0, 1, 1, 0, 0), SL_EINVAL);
    CHECK_EQ(sl__sampler_init(&s, 10, 0, 0, 1, 0, 0), SL_EINVAL);
    CHECK_EQ(sl__sampler_init(&s, 10, 2, 2, 1, 0, 0), SL_EINVAL);
    CHECK_EQ(sl__sampler_init(&s, (uint64_t)UINT32_MAX + 1, 0, 1, 1, 0, 0), SL_EINVAL);
    CHECK_OK(sl__sampler_init(&s, UINT32_MAX, 0, 1, 1, 0, 0)); /* init alone allocates nothing */
    CHECK_EQ(s.per_rank, UINT32_MAX);
}

/* Shuffle quality, coarsely: over many epochs every sample visits every
 * position about equally often (a broken Fisher-Yates shows up at once). */
TEST(positions_uniform) {
    enum { N = 8, EPOCHS = 8000 };
    uint32_t hits[N][N] = {{0}};
    for (uint64_t e = 0; e < EPOCHS; e++) {
        order o = make(N, 0, 1, 1, 0, 77, e);
        for (int p = 0; p < N; p++) hits[o.seq[p]][p]++;
        free(o.seq);
    }
    for (int i = 0; i < N; i++)
        for (int p = 0; p < N; p++) {
            /* expected 1000; 5 sigma is about 150 */
            if (hits[i][p] < 800 || hits[i][p] > 1200) SL_FAIL("sample %d at position %d %u times of %d", i, p, hits[i][p], EPOCHS);
        }
}
