/*
 * A fixed region carved into blocks: the allocator behind the GPU engine's
 * device memory and pinned staging. The region (device or pinned host
 * memory) is taken once at create by the caller and never grows; this
 * module only does the arithmetic over offsets, so it runs and is tested
 * without a GPU.
 *
 * Invariants
 *  - The extents tile [0, size) exactly: sorted by offset, each free or
 *    used, no two free ones adjacent (frees merge with their neighbours).
 *  - used <= size; peak is the high-water mark of used.
 *  - Every block starts at a multiple of align (a power of two) and its
 *    length is a multiple of align; requests are rounded up to it.
 *  - The extent table is fixed at create (max_blocks entries, from the
 *    host budget): an allocation that would need one more extent than
 *    that fails like one that does not fit. Nothing here allocates after
 *    create.
 *  - mu protects everything below it; nvJPEG may call the allocator hooks
 *    from any thread.
 */
#ifndef SL_GPU_POOL_H
#define SL_GPU_POOL_H

#include <pthread.h>
#include <stdint.h>

#include "base/mem.h"

typedef struct sl__pool_ext {
    uint64_t off, len;
    int used;
} sl__pool_ext;

typedef struct sl__pool {
    uint64_t base;          /* address of the region (device or host), opaque here */
    uint64_t size, align;
    pthread_mutex_t mu;
    sl__pool_ext *ext;      /* extents by offset, n of cap */
    uint32_t n, cap;
    uint64_t used, peak;
    uint64_t fails;         /* allocations refused (full or fragmented) */
    sl__budget *host;       /* the table's budget */
} sl__pool;

/* Set up a pool over [base, base+size) with up to max_blocks blocks; the
 * table is counted in host under SL_MEM_OTHER. 0, SL_EINVAL (base 0,
 * align not a power of two, size 0 or not a multiple of align, max_blocks < 1),
 * SL_EBUDGET/SL_ENOMEM (the table), SL_ESYS (mutex). */
int sl__pool_init(sl__pool *p, sl__budget *host, uint64_t base, uint64_t size, uint64_t align,
                  uint32_t max_blocks);
/* Free the table (the region itself is the caller's). Blocks still in use
 * are simply forgotten. */
void sl__pool_fini(sl__pool *p);

/* First fit: address of a block of at least n bytes (rounded up to align),
 * or 0 when nothing fits (counted in fails). n = 0 is refused (0). */
uint64_t sl__pool_alloc(sl__pool *p, uint64_t n);
/* Give a block back (merging with free neighbours). 0, or SL_EINVAL when
 * addr is not the start of a used block (nothing changes then). */
int sl__pool_free(sl__pool *p, uint64_t addr);

/* Snapshot of the counters. */
typedef struct sl__pool_stats {
    uint64_t used, peak, largest_free, fails;
    uint32_t blocks; /* in use */
} sl__pool_stats;
void sl__pool_stats_get(sl__pool *p, sl__pool_stats *out);

#endif
