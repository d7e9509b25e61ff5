/*
 * The index's storage (see index.h): the chunk arrays every index is made
 * of, the sort of their records, and the small helpers every indexer uses.
 */
#include "source/index.h"

#include <errno.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#include "base/util.h"

/* ---- chunk arrays ------------------------------------------------------ */

int sl__nomem_code(const sl__budget *b, uint64_t want) {
    uint64_t used = atomic_load(&((sl__budget *)b)->used), need;
    if (sl__add(used, sl__alloc_cost(want), &need) || need > sl__budget_limit(b)) return SL_EBUDGET;
    return SL_ENOMEM;
}

const char *sl__index_room(const sl__budget *b, uint64_t done, uint64_t total, char *buf, size_t len) {
    char held[32], lim[32], all[32];
    uint64_t h = atomic_load(&((sl__budget *)b)->cat[SL_MEM_INDEX]);
    int n = snprintf(buf, len, "the index holds %s of a %s budget", sl__fmt_bytes(h, held, sizeof held),
                     sl__fmt_bytes(sl__budget_limit(b), lim, sizeof lim));
    if (done && total > done && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", %.0f%% through: about %s for all of it", 100.0 * (double)done / (double)total,
                 sl__fmt_bytes((uint64_t)((double)h * (double)total / (double)done), all, sizeof all));
    return buf;
}

/* Make room for need elements of size sz in *p (capacity *cap), doubling.
 * On failure *p is untouched and still owned by the caller. */
static int grow(sl__budget *b, void **p, uint64_t *cap, uint64_t need, size_t sz, uint64_t first) {
    if (need <= *cap) return 0;
    uint64_t nc = *cap ? *cap : first, bytes;
    while (nc < need) {
        if (sl__mul(nc, 2, &nc)) return SL_EOVERFLOW;
    }
    if (sl__mul(nc, sz, &bytes) || bytes > SIZE_MAX / 2) return SL_EOVERFLOW;
    void *q = sl__realloc(b, *p, (size_t)bytes, SL_MEM_INDEX);
    if (!q) return sl__nomem_code(b, bytes);
    *p = q;
    *cap = nc;
    return 0;
}

int sl__chunk_put(sl__budget *b, sl__chunk *c, const char *p, size_t n, uint64_t *off) {
    uint64_t need;
    if (sl__add(c->arena_len, n, &need)) return SL_EOVERFLOW;
    int rc = grow(b, (void **)&c->arena, &c->arena_cap, need, 1, 1024);
    if (rc) return rc;
    if (n) memcpy(c->arena + c->arena_len, p, n);
    *off = c->arena_len;
    c->arena_len = need;
    return 0;
}

int sl__chunk_add_rec(sl__budget *b, sl__chunk *c, uint64_t off, uint32_t len, uint32_t dir) {
    int rc = grow(b, (void **)&c->recs, &c->rec_cap, c->nrec + 1, sizeof(sl__rec), 64);
    if (rc) return rc;
    c->recs[c->nrec++] = (sl__rec){off, len, dir};
    return 0;
}

int sl__chunk_add_dir(sl__budget *b, sl__chunk *c, uint64_t off, uint32_t len, uint32_t parent) {
    if (c->ndir >= SL__DIR_NONE) return SL_EOVERFLOW;
    int rc = grow(b, (void **)&c->dirs, &c->dir_cap, c->ndir + 1, sizeof(sl__rec), 4);
    if (rc) return rc;
    c->dirs[c->ndir++] = (sl__rec){off, len, parent};
    return 0;
}

int sl__chunk_add_label(sl__budget *b, sl__chunk *c, int64_t label) {
    int rc = grow(b, (void **)&c->labels, &c->label_cap, c->nrec + 1, sizeof(int64_t), 64);
    if (rc) return rc;
    c->labels[c->nrec] = label; /* added before its record: index nrec */
    return 0;
}

/* Shrink *p to n elements when more than an eighth (and a page) is slack.
 * Failing to shrink is harmless: the larger block stays. */
static void shrink(sl__budget *b, void **p, uint64_t *cap, uint64_t n, size_t sz) {
    if (!*p || *cap - n <= *cap / 8 || (*cap - n) * sz < 4096) return;
    if (n == 0) {
        sl__free(b, *p);
        *p = NULL;
        *cap = 0;
        return;
    }
    void *q = sl__realloc(b, *p, (size_t)(n * sz), SL_MEM_INDEX);
    if (q) {
        *p = q;
        *cap = n;
    }
}

int sl__chunk_shrink(sl__budget *b, sl__chunk *c) {
    shrink(b, (void **)&c->arena, &c->arena_cap, c->arena_len, 1);
    shrink(b, (void **)&c->recs, &c->rec_cap, c->nrec, sizeof(sl__rec));
    shrink(b, (void **)&c->dirs, &c->dir_cap, c->ndir, sizeof(sl__rec));
    if (c->labels) shrink(b, (void **)&c->labels, &c->label_cap, c->nrec, sizeof(int64_t));
    return 0;
}

void sl__chunk_free(sl__budget *b, sl__chunk *c) {
    sl__free(b, c->arena);
    sl__free(b, c->recs);
    sl__free(b, c->dirs);
    sl__free(b, c->labels);
    memset(c, 0, sizeof *c);
}

/* ---- sorting ----------------------------------------------------------- */

/* Introsort (quicksort, median of three, insertion sort below 16, heapsort
 * when the depth passes 2 log n): in place, no allocation, and no
 * quadratic case a hostile folder could force. */
typedef struct rec_cmp {
    const char *arena;
    int by_dir;
} rec_cmp;

static inline int rec_less(const rec_cmp *k, const sl__rec *a, const sl__rec *b) {
    if (k->by_dir && a->dir != b->dir) return a->dir < b->dir;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(k->arena + a->off, k->arena + b->off, n);
    if (c) return c < 0;
    return a->len < b->len;
}

static inline void rec_swap(sl__rec *a, sl__rec *b) {
    sl__rec t = *a;
    *a = *b;
    *b = t;
}

static void sift_down(const rec_cmp *k, sl__rec *r, uint64_t i, uint64_t n) {
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && rec_less(k, &r[c], &r[c + 1])) c++;
        if (!rec_less(k, &r[i], &r[c])) return;
        rec_swap(&r[i], &r[c]);
        i = c;
    }
}

static void heap_sort(const rec_cmp *k, sl__rec *r, uint64_t n) {
    for (uint64_t i = n / 2; i-- > 0;) sift_down(k, r, i, n);
    for (uint64_t e = n; e-- > 1;) {
        rec_swap(&r[0], &r[e]);
        sift_down(k, r, 0, e);
    }
}

static void insertion_sort(const rec_cmp *k, sl__rec *r, uint64_t n) {
    for (uint64_t i = 1; i < n; i++) {
        sl__rec t = r[i];
        uint64_t j = i;
        while (j > 0 && rec_less(k, &t, &r[j - 1])) {
            r[j] = r[j - 1];
            j--;
        }
        r[j] = t;
    }
}

static void intro_sort(const rec_cmp *k, sl__rec *r, uint64_t n, int depth) {
    while (n > 16) {
        if (depth-- == 0) {
            heap_sort(k, r, n);
            return;
        }
        /* Median of three to r[0], then Hoare partition around it. */
        uint64_t m = n / 2;
        if (rec_less(k, &r[m], &r[0])) rec_swap(&r[m], &r[0]);
        if (rec_less(k, &r[n - 1], &r[0])) rec_swap(&r[n - 1], &r[0]);
        if (rec_less(k, &r[n - 1], &r[m])) rec_swap(&r[n - 1], &r[m]);
        rec_swap(&r[0], &r[m]); /* pivot (the median) at 0 */
        uint64_t i = 0, j = n;
        for (;;) {
            do i++; while (i < n && rec_less(k, &r[i], &r[0]));
            do j--; while (rec_less(k, &r[0], &r[j]));
            if (i >= j) break;
            rec_swap(&r[i], &r[j]);
        }
        rec_swap(&r[0], &r[j]);
        /* Recurse into the smaller side, loop on the larger. */
        if (j < n - j - 1) {
            intro_sort(k, r, j, depth);
            r += j + 1;
            n -= j + 1;
        } else {
            intro_sort(k, r + j + 1, n - j - 1, depth);
            n = j;
        }
    }
    insertion_sort(k, r, n);
}

void sl__recs_sort(sl__rec *r, uint64_t n, const char *arena, int by_dir) {
    rec_cmp k = {arena, by_dir};
    int depth = 0;
    for (uint64_t m = n; m > 1; m >>= 1) depth += 2;
    intro_sort(&k, r, n, depth);
}

/* ---- helpers ----------------------------------------------------------- */

int sl__transient(int e) {
    return e == EMFILE || e == ENFILE || e == EAGAIN || e == EINTR || e == ENOMEM || e == ENOBUFS;
}

int sl__parse_int(const char *s, size_t n, int64_t *out) {
    size_t i = 0;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    if (i == n) return -1;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (lim - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}
