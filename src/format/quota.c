/*
 * The per-sample quota: what a decode may allocate. With an arena (the
 * usual case) the arena enforces the cap on its extent; without one, the
 * blocks come from malloc and carry their size so free and realloc can
 * settle the count.
 */
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/util.h"
#include "format/decode.h"

typedef struct qhdr {
    uint64_t size;
    uint64_t pad;
} qhdr;

static void note_arena(sl__quota *q) {
    q->used = q->arena->top;
    if (q->used > q->peak) q->peak = q->used;
}

void *sl__quota_alloc(sl__quota *q, size_t n) {
    if (q->arena) {
        void *p = sl__arena_alloc(q->arena, n);
        note_arena(q);
        return p;
    }
    uint64_t total;
    if (sl__add(n, sizeof(qhdr), &total) || sl__add(q->used, total, &total) || total > q->cap) return NULL;
    qhdr *h = malloc(n + sizeof(qhdr));
    if (!h) return NULL;
    h->size = n + sizeof(qhdr);
    q->used += h->size;
    if (q->used > q->peak) q->peak = q->used;
    return h + 1;
}

void *sl__quota_calloc(sl__quota *q, size_t count, size_t size) {
    if (q->arena) {
        void *p = sl__arena_calloc(q->arena, count, size);
        note_arena(q);
        return p;
    }
    uint64_t n;
    if (sl__mul(count, size, &n) || n > SIZE_MAX) return NULL;
    void *p = sl__quota_alloc(q, (size_t)n);
    if (p) memset(p, 0, (size_t)n);
    return p;
}

void sl__quota_free(sl__quota *q, void *p) {
    if (!p) return;
    if (q->arena) {
        sl__arena_free(q->arena, p);
        note_arena(q);
        return;
    }
    qhdr *h = (qhdr *)p - 1;
    q->used -= h->size;
    free(h);
}

void *sl__quota_realloc(sl__quota *q, void *p, size_t n) {
    if (q->arena) {
        void *r = sl__arena_realloc(q->arena, p, n);
        note_arena(q);
        return r;
    }
    if (!p) return sl__quota_alloc(q, n);
    qhdr *h = (qhdr *)p - 1;
    uint64_t old = h->size, total;
    if (sl__add(n, sizeof(qhdr), &total)) return NULL;
    if (total > old && (q->used + (total - old) > q->cap)) return NULL;
    qhdr *nh = realloc(h, (size_t)total);
    if (!nh) return NULL;
    q->used = q->used - old + total;
    if (q->used > q->peak) q->peak = q->used;
    nh->size = total;
    return nh + 1;
}
