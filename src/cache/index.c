/*
 * The cache's index, common to the private cache and the node cache: the
 * region's layout, its formatting and the eviction heap (freeing a record
 * and the lock, which may reach the node's blocks and recovery, are in
 * shm.c). See segment.h for the layout and its invariants.
 */
#include <errno.h>
#include <string.h>

#include "base/util.h"
#include "cache/index.h"

/* ---- the region ------------------------------------------------------------ */

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Every term is below 2^53 (keys and entries < 2^32 of at most 48 bytes,
 * blocks < 2^32 of at most 2^20 bytes), so the sums cannot overflow. */
int sl__seg_layout(sl__chdr *h, uint32_t keys, uint32_t max_entries, uint64_t nblocks, uint32_t block_size,
                   int shared) {
    if (nblocks > SL_CACHE_MAX_BLOCKS) return SL_EOVERFLOW;
    uint64_t off = align_up(sizeof(sl__chdr), 64), E = max_entries;
    h->off_keys = off, off = align_up(off + 4ull * keys, 64);
    h->off_recs = off, off = align_up(off + E * sizeof(sl__crec), 64);
    h->off_heap = off, off = align_up(off + 4 * E, 64);
    h->off_frec = off, off = align_up(off + 4 * E, 64);
    if (shared) {
        h->off_links = off, off = align_up(off + 4 * nblocks, 64);
        h->off_warm = off, off = align_up(off + 4 * nblocks, 64);
        h->off_cold = off, off = align_up(off + 4 * nblocks, 64);
        h->off_procs = off, off = align_up(off + SL_CACHE_PROCS * sizeof(sl__cproc), 64);
    }
    h->index_bytes = off;
    if (shared) {
        h->off_blocks = align_up(off, block_size);
        off = h->off_blocks + nblocks * block_size;
    }
    h->region_bytes = off;
    h->keys = keys;
    h->max_entries = max_entries;
    h->nblocks = nblocks;
    h->block_size = block_size;
    h->procs = shared ? SL_CACHE_PROCS : 0;
    h->shared = (uint32_t)shared;
    h->version = SL_CACHE_VERSION;
    h->crec_size = sizeof(sl__crec);
    h->cproc_size = sizeof(sl__cproc);
    return 0;
}

void sl__seg_format(sl__chdr *h) {
    uint32_t *keys = sl__ckeys(h), *frec = sl__cfrec(h);
    for (uint64_t k = 0; k < h->keys; k++) keys[k] = SL_NONE;
    memset(sl__crecs(h), 0, (size_t)h->max_entries * sizeof(sl__crec));
    for (uint32_t i = 0; i < h->max_entries; i++) frec[i] = h->max_entries - 1 - i; /* record 0 on top */
    h->nfrec = h->max_entries;
    h->heap_len = h->entries = 0;
    h->charged = 0;
    if (h->shared) {
        uint32_t *links = sl__clinks(h), *warm = sl__cwarm(h);
        for (uint64_t i = 0; i < h->nblocks; i++) {
            links[i] = BLK_WARM;
            warm[i] = (uint32_t)(h->nblocks - 1 - i);
        }
        h->nwarm = h->nblocks;
        h->ncold = 0;
        memset(sl__cprocs(h), 0, SL_CACHE_PROCS * sizeof(sl__cproc));
    }
}

/* ---- the eviction heap (a max-heap on next_use), mu held ---------------- */

static void heap_put(sl__chdr *h, uint32_t pos, uint32_t r) {
    sl__cheap(h)[pos] = r;
    sl__crecs(h)[r].heap_pos = pos;
}

static void sift_up(sl__chdr *h, uint32_t pos) {
    uint32_t *heap = sl__cheap(h), r = heap[pos];
    sl__crec *R = sl__crecs(h);
    while (pos > 0) {
        uint32_t up = (pos - 1) / 2;
        if (R[heap[up]].next_use >= R[r].next_use) break;
        heap_put(h, pos, heap[up]);
        pos = up;
    }
    heap_put(h, pos, r);
}

static void sift_down(sl__chdr *h, uint32_t pos) {
    uint32_t *heap = sl__cheap(h), r = heap[pos], n = h->heap_len;
    sl__crec *R = sl__crecs(h);
    for (;;) {
        uint64_t kid = 2ull * pos + 1;
        if (kid >= n) break;
        if (kid + 1 < n && R[heap[kid + 1]].next_use > R[heap[kid]].next_use) kid++;
        if (R[heap[kid]].next_use <= R[r].next_use) break;
        heap_put(h, pos, heap[kid]);
        pos = (uint32_t)kid;
    }
    heap_put(h, pos, r);
}

void sl__seg_heap_push(sl__chdr *h, uint32_t r) {
    heap_put(h, h->heap_len++, r);
    sift_up(h, h->heap_len - 1);
}

void sl__seg_heap_remove(sl__chdr *h, uint32_t r) {
    uint32_t pos = sl__crecs(h)[r].heap_pos, last = sl__cheap(h)[--h->heap_len];
    if (last == r) return;
    heap_put(h, pos, last);
    sift_up(h, pos);
    sift_down(h, sl__crecs(h)[last].heap_pos);
}

void sl__seg_heap_fix(sl__chdr *h, uint32_t r) {
    sift_up(h, sl__crecs(h)[r].heap_pos);
    sift_down(h, sl__crecs(h)[r].heap_pos);
}

void sl__seg_heap_build(sl__chdr *h) {
    for (uint32_t i = 0; i < h->heap_len; i++) sl__crecs(h)[sl__cheap(h)[i]].heap_pos = i;
    for (uint32_t i = h->heap_len / 2; i-- > 0;) sift_down(h, i);
}
