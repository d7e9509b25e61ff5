#include "sampler.h"

#include "../ops/ops.h"
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
