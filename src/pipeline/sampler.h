/*
 * The sampler: which dataset samples a rank sees, in which order, per
 * epoch. As torch's DistributedSampler: one seeded permutation of the whole
 * dataset per epoch (the same on every rank), padded by wrapping to a
 * multiple of world_size (or cut, with drop_last), then rank r takes
 * positions r, r+world, r+2*world, ...
 */
#ifndef SL_SAMPLER_H
#define SL_SAMPLER_H

#include <stdint.h>

typedef struct sl__sampler {
    uint64_t n;        /* dataset size */
    uint64_t per_rank; /* samples per epoch for this rank */
    uint64_t total;    /* per_rank * world */
    uint32_t rank, world;
    int shuffle;
    uint64_t seed;
} sl__sampler;

int sl__sampler_init(sl__sampler *s, uint64_t n, uint32_t rank, uint32_t world, int shuffle, int drop_last,
                     uint64_t seed);
/* Fill seq[0, per_rank) for epoch. tmp holds total entries (may be NULL
 * when world == 1). */
void sl__sampler_fill(const sl__sampler *s, uint64_t epoch, uint32_t *seq, uint32_t *tmp);

#endif
