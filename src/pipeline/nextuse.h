/*
 * The next-use oracle: "when is sample k next used after time t", for the
 * sample cache's eviction (farthest next use first) and admission.
 *
 * It holds the inverse permutations of two epochs (4 bytes x n each, 8n
 * bytes in all, counted under SL_MEM_INDEX in the budget given at init):
 * the epoch being consumed and the next. Time is the global position
 * across epochs (sampler.h). Uses count only when made by a rank of
 * [rank_lo, rank_lo + ranks): one rank (the rank's own cache), the ranks
 * of one node (a node cache: rank_lo = RANK - LOCAL_RANK, ranks =
 * LOCAL_WORLD_SIZE), or the whole world.
 *
 * Threads. Queries take a read lock and may run from any number of
 * threads; advance computes a retired epoch's slot outside the lock while
 * that slot is marked empty, so queries never wait for a permutation to be
 * made, only for the brief tag updates.
 */
#ifndef SL_NEXTUSE_H
#define SL_NEXTUSE_H

#include <pthread.h>
#include <stdint.h>

#include "base/mem.h"
#include "pipeline/sampler.h"

#define SL_NEXTUSE_NEVER UINT64_MAX
#define SL_NEXTUSE_NO_EPOCH UINT64_MAX

typedef struct sl__nextuse {
    const sl__sampler *s;   /* the order (the loader's: a resumed span changes only while
                               no query runs, with its pipeline quiet) */
    uint32_t rank_lo, ranks;
    sl__budget *b;
    pthread_rwlock_t lk;    /* protects epoch[] (the tags); inv[i] is read
                               only while epoch[i] is a held epoch */
    uint64_t epoch[2];      /* epoch whose inverse inv[i] holds, or NO_EPOCH */
    uint32_t *inv[2];       /* n entries each, allocated at init */
    pthread_mutex_t advance_mu; /* one advance at a time */
} sl__nextuse;

/* Allocate the two inverse buffers (8n bytes, SL_MEM_INDEX) and hold
 * nothing yet; s must outlive the oracle (queries return SL_ESTATE until the first advance).
 * Returns 0, SL_EINVAL (n >= 2^31, or an empty rank range), SL_EBUDGET or
 * SL_ENOMEM (nothing held then), SL_ESYS. */
int sl__nextuse_init(sl__nextuse *o, sl__budget *b, const sl__sampler *s, uint32_t rank_lo, uint32_t ranks);
void sl__nextuse_fini(sl__nextuse *o);

/* Hold epochs `epoch` and `epoch + 1`, computing what is not held yet
 * (a Fisher-Yates shuffle and an inversion of n entries each). Call it
 * before the first sample of `epoch` is dispatched. Cannot fail. */
void sl__nextuse_advance(sl__nextuse *o, uint64_t epoch);

/* The time of sample k's first use after time now, by the ranks of the
 * range, within the held epochs: *next is a time > now, or
 * SL_NEXTUSE_NEVER when none of the held epochs from now's on uses it
 * again. Queries for a time before the oldest held epoch answer from the
 * oldest held epoch on. Returns 0, or SL_ESTATE when now lies past the
 * held epochs (nothing can be said: the caller treats it as unknown). */
int sl__nextuse_query(sl__nextuse *o, uint32_t k, uint64_t now, uint64_t *next);

/* sl__nextuse_query with the oracle as a void pointer: the cache's
 * sl__next_use_fn (opts.next_use = sl__nextuse_fn, opts.ctx = o). */
int sl__nextuse_fn(void *o, uint32_t k, uint64_t now, uint64_t *next);

/* Bytes held (8n): what the budget counts for it. */
uint64_t sl__nextuse_bytes(const sl__nextuse *o);

#endif
