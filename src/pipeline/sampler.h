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

/*
 * Next use (for the sample cache). Time is the position in the global
 * order, counted across epochs: the p-th entry (0 <= p < total) of epoch
 * e's padded permutation is used at time e * total + p, by rank p % world.
 * Rank r's i-th sample of epoch e is at sl__sampler_time(s, e, i). All
 * ranks share one permutation per epoch and advance in lock step, so the
 * times of the ranks of a node, merged, are the node's order.
 */
static inline uint64_t sl__sampler_time(const sl__sampler *s, uint64_t epoch, uint64_t i) {
    return epoch * s->total + s->rank + i * s->world;
}

/* The inverse permutation of epoch: inv[k] = the first position of sample
 * k in the epoch's global order (its further positions, from padding, are
 * inv[k] + j * n below total). inv holds n entries; requires n < 2^31
 * (SL_EINVAL otherwise). Allocates nothing. */
int sl__sampler_inverse(const sl__sampler *s, uint64_t epoch, uint32_t *inv);

/* The first position p >= from of sample k in an epoch whose inverse is
 * inv, used by one of the ranks [rank_lo, rank_lo + ranks), or UINT64_MAX
 * if there is none before total. */
uint64_t sl__sampler_next_position(const sl__sampler *s, const uint32_t *inv, uint32_t k, uint64_t from,
                                   uint32_t rank_lo, uint32_t ranks);

#endif
