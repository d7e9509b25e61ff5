/*
 * A decode arena: one worker's scratch memory, for one sample at a time.
 *
 * Why. Decoder memory used to come from malloc, whose per-thread arenas
 * and raised mmap threshold keep what was freed: the budget counted a
 * decode's bytes while the process kept them resident long after. An
 * arena is one private anonymous mapping the caller has counted in its
 * budget, so what it can make resident is bounded by what is counted.
 *
 * Invariants
 *  - mapped (the mapping's length) is what the owner has counted; the
 *    owner grows it (sl__arena_reserve) only after counting more, and
 *    shrinks it (sl__arena_trim) before giving counted bytes back. So the
 *    arena's resident memory never exceeds its counted bytes.
 *  - every block lies in [0, top) and top <= limit <= mapped: an
 *    allocation that would move top past limit fails (returns NULL). The
 *    bound is the arena's extent, not the sum of live blocks, so it holds
 *    whatever the fragmentation.
 *  - blocks are 16-byte aligned (as malloc's) and carry a 32-byte header
 *    in front; free blocks are coalesced with free neighbours, and a free
 *    block at the end lowers top.
 *  - reserve and trim need an empty arena (no live block): they run
 *    between samples.
 *  - single-threaded: one arena, one worker.
 *
 * Under AddressSanitizer every byte outside a live block's requested size
 * is poisoned (headers, free blocks, the unused end), so overflows and
 * use-after-free inside the arena are still reported.
 */
#ifndef SL_ARENA_H
#define SL_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl__ablk sl__ablk;

typedef struct sl__arena {
    uint8_t *base;      /* the mapping; NULL while nothing is mapped */
    size_t mapped;      /* its length, a page multiple */
    size_t limit;       /* top may not pass this (<= mapped) */
    size_t top;         /* end of the last block */
    size_t last;        /* size of the block ending at top (0: none) */
    size_t peak;        /* highest top since sl__arena_peak_reset */
    size_t dirty;       /* bytes from base possibly non-zero; beyond: fresh zero pages */
    size_t live;        /* blocks allocated and not freed */
    sl__ablk *free;     /* free blocks below top, unordered */
} sl__arena;

#define SL_ARENA_ALIGN 16
#define SL_ARENA_HDR 32
/* Most bytes a block costs beyond what was asked: header and rounding. */
#define SL_ARENA_OVERHEAD (SL_ARENA_HDR + SL_ARENA_ALIGN - 1)

/* An empty arena with nothing mapped. Cannot fail. */
void sl__arena_init(sl__arena *a);
/* Unmap everything. The arena must be empty (a live block is a bug the
 * caller made: the memory goes anyway). */
void sl__arena_fini(sl__arena *a);

/* Make the mapping at least `bytes` long (page-rounded) and set the limit
 * to `bytes`: 0, SL_ENOMEM (the system refused; the arena is unchanged) or
 * SL_ESTATE (blocks are live). The caller has counted the page-rounded
 * length (sl__arena_cost) before calling. */
int sl__arena_reserve(sl__arena *a, size_t bytes);
/* Shrink the mapping to at most `bytes` (rounded down to pages) and the
 * limit with it; pages kept stay mapped. The arena must be empty. After
 * it returns the caller may give back what it counted beyond `bytes`. */
void sl__arena_trim(sl__arena *a, size_t bytes);
/* Bytes a mapping of `bytes` takes (page-rounded); SIZE_MAX on overflow. */
size_t sl__arena_cost(size_t bytes);

/* Allocate n bytes, 16-byte aligned: NULL when the limit refuses (or n is
 * absurd). calloc zeroes only what may be dirty. realloc keeps the
 * contents up to the smaller size; on failure the old block stays valid.
 * free takes NULL. */
void *sl__arena_alloc(sl__arena *a, size_t n);
void *sl__arena_calloc(sl__arena *a, size_t count, size_t size);
void *sl__arena_realloc(sl__arena *a, void *p, size_t n);
void sl__arena_free(sl__arena *a, void *p);

/* Highest extent reached since the last reset (for tests and bounds). */
size_t sl__arena_peak(const sl__arena *a);
void sl__arena_peak_reset(sl__arena *a);

#endif
