/* The decode arena. See arena.h for the invariants. */
#define _GNU_SOURCE /* mremap */
#include "base/arena.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/mem.h"
#include "base/util.h"
#include "sluice.h"

#if defined(__SANITIZE_ADDRESS__)
#define SL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_ASAN 1
#endif
#endif

#ifdef SL_ASAN
#include <sanitizer/asan_interface.h>
/* Headers and free space are poisoned; the allocator's own reads and
 * writes of them must not be checked. */
#define SL_NO_ASAN __attribute__((no_sanitize_address))
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SL_NO_ASAN
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#if defined(__SANITIZE_THREAD__)
#define SL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SL_TSAN 1
#endif
#endif

#define MAGIC 0x61726e61u
#define MIN_BLOCK (SL_ARENA_HDR + SL_ARENA_ALIGN) /* a free block holds its links */

struct sl__ablk {
    size_t size;   /* whole block, header included; a multiple of SL_ARENA_ALIGN */
    size_t prev;   /* size of the block just below; 0 for the first */
    size_t req;    /* bytes asked for (live blocks) */
    uint32_t used;
    uint32_t magic;
};
_Static_assert(sizeof(sl__ablk) == SL_ARENA_HDR, "arena header size");

/* A free block's links live in its payload. */
typedef struct links {
    sl__ablk *next, *prev;
} links;
_Static_assert(sizeof(links) <= SL_ARENA_ALIGN, "free links fit the smallest payload");
#define L(b) ((links *)((b) + 1))

size_t sl__arena_cost(size_t bytes) { return sl__map_cost(bytes); }

void sl__arena_init(sl__arena *a) { memset(a, 0, sizeof *a); }

static void unmap_all(sl__arena *a) {
    if (a->base) {
        UNPOISON(a->base, a->mapped); /* the addresses may be mapped again by others */
        munmap(a->base, a->mapped);
    }
    a->base = NULL;
    a->mapped = a->limit = a->top = a->last = a->dirty = 0;
    a->free = NULL;
}

void sl__arena_fini(sl__arena *a) {
    unmap_all(a);
    a->live = 0;
}

int sl__arena_reserve(sl__arena *a, size_t bytes) {
    if (a->live) return SL_ESTATE;
    size_t want = sl__arena_cost(bytes);
    if (want == SIZE_MAX) return SL_ENOMEM;
    if (want == 0) {
        unmap_all(a);
        return 0;
    }
    if (want != a->mapped) {
        void *m;
#ifdef SL_TSAN
        /* TSan does not intercept mremap: a region moved by it keeps the
         * shadow of whatever thread last used its new addresses, which TSan
         * then reports as a race. Nothing is live here, so map afresh. */
        unmap_all(a);
#endif
        if (a->base) {
            UNPOISON(a->base, a->mapped);
            m = mremap(a->base, a->mapped, want, MREMAP_MAYMOVE);
        } else {
            m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        }
        if (m == MAP_FAILED) {
            if (a->base) POISON(a->base, a->mapped);
            return SL_ENOMEM;
        }
        a->base = m;
        if (a->dirty > want) a->dirty = want;
        a->mapped = want;
        POISON(a->base, a->mapped);
    }
    /* pages are counted whole: the limit stays inside the counted bytes */
    a->limit = bytes / sl__page_size() * sl__page_size();
    a->top = a->last = 0;
    a->free = NULL;
    return 0;
}

void sl__arena_trim(sl__arena *a, size_t bytes) {
    if (a->live) return; /* blocks live: the caller's bug; keep them valid */
    size_t keep = bytes / sl__page_size() * sl__page_size();
    if (keep >= a->mapped) return;
    if (keep == 0) {
        unmap_all(a);
        return;
    }
    UNPOISON(a->base + keep, a->mapped - keep);
    munmap(a->base + keep, a->mapped - keep);
    a->mapped = keep;
    if (a->limit > keep) a->limit = keep;
    if (a->dirty > keep) a->dirty = keep;
    a->top = a->last = 0;
    a->free = NULL;
}

size_t sl__arena_peak(const sl__arena *a) { return a->peak; }
void sl__arena_peak_reset(sl__arena *a) { a->peak = a->top; }

/* ---- blocks ---------------------------------------------------------------- */

static size_t off_of(const sl__arena *a, const sl__ablk *b) { return (size_t)((const uint8_t *)b - a->base); }

SL_NO_ASAN static sl__ablk *next_of(const sl__arena *a, sl__ablk *b) {
    size_t end = off_of(a, b) + b->size;
    return end < a->top ? (sl__ablk *)(a->base + end) : NULL;
}

SL_NO_ASAN static sl__ablk *prev_of(sl__ablk *b) { return b->prev ? (sl__ablk *)((uint8_t *)b - b->prev) : NULL; }

SL_NO_ASAN static void list_remove(sl__arena *a, sl__ablk *b) {
    links *l = L(b);
    if (l->prev) L(l->prev)->next = l->next;
    else a->free = l->next;
    if (l->next) L(l->next)->prev = l->prev;
    l->next = l->prev = NULL;
}

SL_NO_ASAN static void list_push(sl__arena *a, sl__ablk *b) {
    L(b)->prev = NULL;
    L(b)->next = a->free;
    if (a->free) L(a->free)->prev = b;
    a->free = b;
}

/* Tell the block after b (if any) how large b is now. */
SL_NO_ASAN static void link_next(sl__arena *a, sl__ablk *b) {
    sl__ablk *n = next_of(a, b);
    if (n) n->prev = b->size;
}

SL_NO_ASAN static void set_header(sl__ablk *b, size_t size, size_t prev, int used) {
    b->size = size;
    b->prev = prev;
    b->req = 0;
    b->used = (uint32_t)used;
    b->magic = MAGIC;
}

/* Bytes a block for n payload bytes takes; 0 when absurd. */
static size_t block_size(size_t n) {
    if (n > SIZE_MAX / 4) return 0;
    size_t s = (n + SL_ARENA_HDR + SL_ARENA_ALIGN - 1) / SL_ARENA_ALIGN * SL_ARENA_ALIGN;
    return s < MIN_BLOCK ? MIN_BLOCK : s;
}

/* Cut b (free, out of the list, or used) to size, the rest a free block. */
SL_NO_ASAN static void split(sl__arena *a, sl__ablk *b, size_t size) {
    if (b->size - size < MIN_BLOCK) return;
    sl__ablk *r = (sl__ablk *)((uint8_t *)b + size);
    set_header(r, b->size - size, size, 0);
    b->size = size;
    link_next(a, r);
    list_push(a, r);
}

static void note_extent(sl__arena *a) {
    if (a->top > a->peak) a->peak = a->top;
    if (a->top > a->dirty) a->dirty = a->top;
}

SL_NO_ASAN void *sl__arena_alloc(sl__arena *a, size_t n) {
    size_t need = block_size(n);
    if (!need || !a->base) return NULL;
    sl__ablk *b = a->free;
    while (b && b->size < need) b = L(b)->next;
    if (b) {
        list_remove(a, b);
        split(a, b, need);
    } else {
        if (need > a->limit - a->top) return NULL;
        b = (sl__ablk *)(a->base + a->top);
        set_header(b, need, a->last, 1);
        a->top += need;
        a->last = need;
        note_extent(a);
    }
    b->used = 1;
    b->req = n;
    a->live++;
    UNPOISON(b + 1, n);
    return b + 1;
}

SL_NO_ASAN static sl__ablk *header_of(void *p) {
    sl__ablk *b = (sl__ablk *)p - 1;
    if (b->magic != MAGIC || !b->used) abort(); /* not an arena block, or freed twice */
    return b;
}

SL_NO_ASAN void sl__arena_free(sl__arena *a, void *p) {
    if (!p) return;
    sl__ablk *b = header_of(p);
    POISON(p, b->size - SL_ARENA_HDR);
    b->used = 0;
    a->live--;
    sl__ablk *n = next_of(a, b), *pv = prev_of(b);
    if (n && !n->used) {
        list_remove(a, n);
        b->size += n->size;
        link_next(a, b);
    }
    if (pv && !pv->used) {
        list_remove(a, pv);
        pv->size += b->size;
        b = pv;
        link_next(a, b);
    }
    if (off_of(a, b) + b->size == a->top) {
        a->top = off_of(a, b); /* the end block: give its extent back */
        a->last = b->prev;     /* the block below is live, or none */
    } else {
        list_push(a, b);
    }
}

void *sl__arena_calloc(sl__arena *a, size_t count, size_t size) {
    uint64_t n;
    if (sl__mul(count, size, &n) || n > SIZE_MAX) return NULL;
    size_t dirty = a->dirty;
    uint8_t *p = sl__arena_alloc(a, (size_t)n);
    if (!p) return NULL;
    size_t off = (size_t)(p - a->base);
    if (off < dirty) memset(p, 0, SL_MIN((size_t)n, dirty - off)); /* past dirty: fresh zero pages */
    return p;
}

SL_NO_ASAN void *sl__arena_realloc(sl__arena *a, void *p, size_t n) {
    if (!p) return sl__arena_alloc(a, n);
    sl__ablk *b = header_of(p);
    size_t need = block_size(n);
    if (!need) return NULL;
    if (need > b->size) {
        sl__ablk *nx = next_of(a, b);
        if (!nx && need - b->size <= a->limit - a->top) { /* the end block: extend */
            a->top += need - b->size;
            b->size = need;
            a->last = need;
            note_extent(a);
        } else if (nx && !nx->used && b->size + nx->size >= need) { /* absorb the free neighbour */
            list_remove(a, nx);
            b->size += nx->size;
            link_next(a, b);
            split(a, b, need);
        }
    }
    if (need <= b->size) {
        POISON(p, b->size - SL_ARENA_HDR);
        UNPOISON(p, n);
        b->req = n;
        return p;
    }
    void *q = sl__arena_alloc(a, n);
    if (!q) return NULL;
    memcpy(q, p, SL_MIN(b->req, n));
    sl__arena_free(a, p);
    return q;
}
