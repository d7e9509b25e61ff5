/*
 * The index of a cache region (segment.h): its layout, its formatting and
 * the eviction heap; pure functions of the region, implemented by index.c,
 * for the policy (cache.c) and the node segment (shm.c).
 */
#ifndef SL_CACHE_INDEX_H
#define SL_CACHE_INDEX_H

#include "cache/segment.h"

/* Offsets and sizes of a region for these parameters into h (not yet
 * initialized otherwise). SL_EOVERFLOW if they do not fit 64 bits. */
int sl__seg_layout(sl__chdr *h, uint32_t keys, uint32_t max_entries, uint64_t nblocks, uint32_t block_size,
                   int shared);
/* Clear the index to empty (every record free, every block warm). */
void sl__seg_format(sl__chdr *h);

/* The eviction heap (a max-heap on next_use over the READY records), mu held. */
void sl__seg_heap_push(sl__chdr *h, uint32_t r);
void sl__seg_heap_remove(sl__chdr *h, uint32_t r);
void sl__seg_heap_fix(sl__chdr *h, uint32_t r); /* after r's next_use changed */
void sl__seg_heap_build(sl__chdr *h);           /* from heap[0, heap_len) */

#endif
