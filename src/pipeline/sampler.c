#include "pipeline/sampler.h"

#include "ops/ops.h"
#include "sluice.h"

int sl__sampler_init(sl__sampler *s, uint64_t n, uint32_t rank, uint32_t world, int shuffle, int drop_last,
                     uint64_t seed) {
    if (world == 0 || rank >= world || n == 0 || n > UINT32_MAX) return SL_EINVAL;
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->shuffle = shuffle;
    s->seed = seed;
    s->per_rank = drop_last ? n / world : (n + world - 1) / world;
    s->total = s->per_rank * world;
    return s->per_rank ? 0 : SL_EEMPTY;
}

/* The permutation of [0, n) for epoch into a (Fisher-Yates). */
static void permute(const sl__sampler *s, uint64_t epoch, uint32_t *a) {
    for (uint64_t i = 0; i < s->n; i++) a[i] = (uint32_t)i;
    if (!s->shuffle) return;
    sl__rng r;
    sl__rng_init(&r, s->seed, epoch, UINT64_MAX); /* a stream no sample index uses */
    for (uint64_t i = s->n - 1; i > 0; i--) {
        uint64_t j = sl__rng_below(&r, i + 1);
        uint32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void sl__sampler_fill(const sl__sampler *s, uint64_t epoch, uint32_t *seq, uint32_t *tmp) {
    if (s->world == 1) {
        /* per_rank == n: the permutation itself */
        permute(s, epoch, seq);
        return;
    }
    permute(s, epoch, tmp);
    /* pad by wrapping (never more than n-1 per round; repeat if world > n) */
    for (uint64_t i = s->n; i < s->total; i++) tmp[i] = tmp[(i - s->n) % s->n];
    for (uint64_t i = 0; i < s->per_rank; i++) seq[i] = tmp[s->rank + i * s->world];
}

/* Invert the permutation a of [0, n) in place, cycle by cycle; bit 31
 * marks entries already holding their inverse (n < 2^31). */
static void invert_in_place(uint32_t *a, uint64_t n) {
    const uint32_t done = 1u << 31;
    for (uint64_t i = 0; i < n; i++) {
        if (a[i] & done) continue;
        /* the cycle i -> a[i] -> ...: write inv[a[j]] = j along it */
        uint32_t prev = (uint32_t)i, cur = a[i];
        while (!(a[cur] & done) && cur != i) {
            uint32_t next = a[cur];
            a[cur] = prev | done;
            prev = cur;
            cur = next;
        }
        a[i] = prev | done; /* cur == i: close the cycle (a fixed point too) */
    }
    for (uint64_t i = 0; i < n; i++) a[i] &= ~done;
}

int sl__sampler_inverse(const sl__sampler *s, uint64_t epoch, uint32_t *inv) {
    if (s->n >= (1ull << 31)) return SL_EINVAL;
    permute(s, epoch, inv);
    invert_in_place(inv, s->n);
    return 0;
}

uint64_t sl__sampler_next_position(const sl__sampler *s, const uint32_t *inv, uint32_t k, uint64_t from,
                                   uint32_t rank_lo, uint32_t ranks) {
    uint64_t p = inv[k];
    if (from > p) p += (from - p + s->n - 1) / s->n * s->n; /* first of p + j*n at or past from */
    for (; p < s->total; p += s->n) {
        uint64_t r = p % s->world;
        if (r >= rank_lo && r - rank_lo < ranks) return p;
    }
    return UINT64_MAX;
}
