/*
 * The sampler (src/core/sampler.c) on its own: each epoch a permutation,
 * fixed by (seed, epoch); ranks as torch's DistributedSampler (pad by
 * wrapping to equal length, or cut with drop_last), disjoint apart from the
 * padding and together complete; edge sizes.
 */
#include "check.h"
#include "pipeline/sampler.h"
#include "sluice.h"

typedef unsigned long long ull;

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

/* ---- spans: order ranges and what an earlier world left ------------------------------ */

/* A span drawn from r: [lo, hi) of [0, n) less a random subset (never all). */
typedef struct span_case {
    uint64_t lo, hi, ngone;
    uint32_t gone[64];
} span_case;

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void draw_span(span_case *c, uint64_t n, uint64_t r) {
    c->lo = mix(r) % n;
    c->hi = c->lo + 1 + mix(r + 1) % (n - c->lo);
    c->ngone = 0;
    for (uint64_t p = c->lo; p < c->hi && c->ngone < 64; p++)
        if (mix(r * 977 + p) % 3 == 0 && c->ngone + 1 < c->hi - c->lo) c->gone[c->ngone++] = (uint32_t)p;
}

/* The span's entries by brute force: positions of [lo, hi) not gone. */
static uint64_t entries(const span_case *c, uint32_t *out) {
    uint64_t m = 0;
    for (uint64_t p = c->lo; p < c->hi; p++) {
        int gone = 0;
        for (uint64_t g = 0; g < c->ngone; g++) gone |= c->gone[g] == p;
        if (!gone) out[m++] = (uint32_t)p;
    }
    return m;
}

/* Every rank's order over a span (an elastic resume's epoch, or an order
 * range) is entries r, r + world, ... of the span, padded by wrapping or
 * cut, mapped through the epoch's permutation. */
TEST(fill_over_spans) {
    const uint64_t n = 61;
    order whole = make(n, 0, 1, 1, 0, 3, 5);
    uint32_t L[61], seq[61], tmp[61];
    for (uint64_t t = 0; t < 300; t++) {
        span_case c;
        draw_span(&c, n, t);
        uint64_t m = entries(&c, L);
        uint32_t world = 1 + (uint32_t)(t % 5);
        int drop_last = (t / 5) % 2;
        for (uint32_t r = 0; r < world; r++) {
            sl__sampler s;
            CHECK_OK(sl__sampler_init(&s, n, r, world, 1, drop_last, 3));
            sl__span sp;
            CHECK_OK(sl__span_shape(&sp, c.lo, c.hi, c.gone, c.ngone, world, drop_last));
            CHECK_EQ(sp.m, m);
            CHECK_EQ(sp.per_rank, drop_last ? m / world : (m + world - 1) / world);
            sl__sampler_resume(&s, 5, &sp);
            CHECK_EQ(sl__sampler_span(&s, 4)->m, n); /* only its epoch */
            sl__sampler_fill(&s, 5, seq, tmp);
            for (uint64_t i = 0; i < sp.per_rank; i++) CHECK_EQ(seq[i], whole.seq[L[(r + i * world) % m]]);
            for (uint64_t j = 0; j < m; j++) CHECK_EQ(sl__span_index(&sp, L[j]), j);
            for (uint64_t g = 0; g < c.ngone; g++) CHECK_EQ(sl__span_index(&sp, c.gone[g]), UINT64_MAX);
            if (c.lo) CHECK_EQ(sl__span_index(&sp, c.lo - 1), UINT64_MAX);
            CHECK_EQ(sl__span_index(&sp, c.hi), UINT64_MAX);
            /* world 1 over the range as the configured order range (seq of per_rank, tmp of n) */
            if (c.ngone == 0 && (sp.per_rank || !drop_last)) {
                sl__sampler q;
                CHECK_OK(sl__sampler_init(&q, n, r, world, 1, drop_last, 3));
                int rc = sl__sampler_range(&q, c.lo, c.hi);
                if (sp.per_rank == 0) {
                    CHECK_EQ(rc, SL_EEMPTY);
                    continue;
                }
                CHECK_OK(rc);
                CHECK_EQ(q.per_rank, sp.per_rank);
                uint32_t seq2[61];
                sl__sampler_fill(&q, 9, seq2, tmp);
                order w9 = make(n, 0, 1, 1, 0, 3, 9);
                for (uint64_t i = 0; i < q.per_rank; i++) CHECK_EQ(seq2[i], w9.seq[L[(r + i * world) % m]]);
                free(w9.seq);
            }
        }
    }
    /* world 1, whole order: in place in seq (no tmp), the resumed span too */
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, n, 0, 1, 1, 0, 3));
    span_case c = {.lo = 2, .hi = 50, .ngone = 3, .gone = {7, 8, 40}};
    uint64_t m = entries(&c, L);
    sl__span sp;
    CHECK_OK(sl__span_shape(&sp, c.lo, c.hi, c.gone, c.ngone, 1, 0));
    sl__sampler_resume(&s, 5, &sp);
    sl__sampler_fill(&s, 5, seq, NULL);
    for (uint64_t i = 0; i < m; i++) CHECK_EQ(seq[i], whole.seq[L[i]]);
    sl__sampler_resume(&s, 5, NULL);
    sl__sampler_fill(&s, 5, seq, NULL);
    CHECK(memcmp(seq, whole.seq, n * 4) == 0);
    free(whole.seq);
}

/* A span is hostile input when it comes from a state: bounds and the gone
 * list are checked before use. */
TEST(span_shape_rejects) {
    sl__span sp;
    uint32_t up[] = {3, 5}, down[] = {5, 3}, dup[] = {3, 3}, out[] = {3, 12}, below[] = {1};
    CHECK_OK(sl__span_shape(&sp, 2, 10, up, 2, 3, 0));
    CHECK_EQ(sp.m, 6);
    CHECK_EQ(sp.per_rank, 2);
    CHECK_EQ(sl__span_shape(&sp, 2, 10, down, 2, 3, 0), SL_EINVAL);
    CHECK_EQ(sl__span_shape(&sp, 2, 10, dup, 2, 3, 0), SL_EINVAL);
    CHECK_EQ(sl__span_shape(&sp, 2, 10, out, 2, 3, 0), SL_EINVAL);
    CHECK_EQ(sl__span_shape(&sp, 2, 10, below, 1, 3, 0), SL_EINVAL);
    CHECK_EQ(sl__span_shape(&sp, 2, 10, NULL, 2, 3, 0), SL_EINVAL);
    CHECK_EQ(sl__span_shape(&sp, 5, 5, NULL, 0, 3, 0), SL_EINVAL);  /* empty */
    CHECK_EQ(sl__span_shape(&sp, 6, 5, NULL, 0, 3, 0), SL_EINVAL);
    uint32_t all[] = {2, 3};
    CHECK_EQ(sl__span_shape(&sp, 2, 4, all, 2, 1, 0), SL_EINVAL);   /* nothing left */
    CHECK_EQ(sl__span_shape(&sp, 0, (1ull << 32) + 1, NULL, 0, 1, 0), SL_EINVAL);
    CHECK_EQ(sl__span_shape(&sp, 0, 4, NULL, 0, 0, 0), SL_EINVAL); /* no ranks */
    CHECK_OK(sl__span_shape(&sp, 0, 2, NULL, 0, 3, 1));             /* drop_last: nothing a rank */
    CHECK_EQ(sp.per_rank, 0);
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, 10, 0, 2, 1, 0, 0));
    CHECK_EQ(sl__sampler_range(&s, 3, 11), SL_EINVAL);
    CHECK_EQ(sl__sampler_range(&s, 3, 3), SL_EINVAL);
    CHECK_OK(sl__sampler_range(&s, 3, 4));
    CHECK_EQ(s.per_rank, 1); /* padded: both ranks get position 3 */
    CHECK_OK(sl__sampler_init(&s, 10, 0, 2, 1, 1, 0));
    CHECK_EQ(sl__sampler_range(&s, 3, 4), SL_EEMPTY);
}

/* What ranks leave of a span, against brute force: every entry of a
 * rank's stride below batch * B or from tail on is used, entries past m
 * (padding) leave nothing, the rest is left, as [lo, hi) less gone. */
typedef struct prog {
    uint64_t batch[8], tail[8];
} prog;

static void progress_of(const void *ctx, uint32_t r, uint64_t *batch, uint64_t *tail) {
    const prog *p = ctx;
    *batch = p->batch[r];
    *tail = p->tail[r];
}

TEST(span_left_matches_brute_force) {
    const uint64_t n = 90;
    uint32_t L[90], gone[90];
    for (uint64_t t = 0; t < 2000; t++) {
        span_case c;
        draw_span(&c, n, t * 7 + 1);
        uint64_t m = entries(&c, L);
        uint32_t world = 1 + (uint32_t)(mix(t) % 6), B = 1 + (uint32_t)(mix(t + 9) % 4);
        int drop_last = mix(t + 3) % 4 == 0;
        sl__span sp;
        CHECK_OK(sl__span_shape(&sp, c.lo, c.hi, c.gone, c.ngone, world, drop_last));
        if (sp.per_rank == 0) continue;
        uint64_t nb = drop_last ? sp.per_rank / B : (sp.per_rank + B - 1) / B;
        if (nb == 0) continue;
        prog pg;
        for (uint32_t r = 0; r < world; r++) { /* a reachable (batch, tail) */
            pg.batch[r] = mix(t * 31 + r) % nb;
            uint64_t min = pg.batch[r] * B + (drop_last ? B : 1);
            if (!drop_last && min > sp.per_rank) min = sp.per_rank;
            pg.tail[r] = min + mix(t * 37 + r) % (sp.per_rank - min + 1);
        }
        uint8_t left[90] = {0};
        uint64_t want = 0;
        for (uint64_t j = 0; j < m; j++) {
            uint64_t r = j % world, i = j / world;
            int used = j < sp.total && (i < pg.batch[r] * B || i >= pg.tail[r]);
            if (!used) left[L[j]] = 1, want++;
        }
        uint64_t lo, hi, ng;
        uint64_t got = sl__span_left(&sp, world, B, progress_of, &pg, &lo, &hi, gone, 90, &ng);
        CHECK_EQ(got, want);
        if (!want) {
            CHECK_EQ(lo, 0);
            CHECK_EQ(hi, 0);
            continue;
        }
        CHECK(left[lo] && left[hi - 1]);
        uint64_t seen = 0, g = 0;
        for (uint64_t p = 0; p < n; p++) {
            int in = p >= lo && p < hi && !(g < ng && gone[g] == p);
            if (p >= lo && p < hi && g < ng && gone[g] == p) g++;
            if (in != left[p]) SL_FAIL("case %llu: position %llu left %d, merged says %d", (ull)t, (ull)p, left[p], in);
            seen += in;
        }
        CHECK_EQ(g, ng);
        CHECK_EQ(seen, want);
        /* too little room: the count, nothing written past it */
        if (ng) {
            uint32_t small[90];
            small[ng - 1] = 12345;
            uint64_t ng2;
            CHECK_EQ(sl__span_left(&sp, world, B, progress_of, &pg, &lo, &hi, small, ng - 1, &ng2), want);
            CHECK_EQ(ng2, ng);
            CHECK_EQ(small[ng - 1], 12345);
        }
    }
}
