/* Fixed-region block allocator. See pool.h for the invariants. */
#include "gpu/pool.h"

#include <string.h>

#include "base/util.h"

int sl__pool_init(sl__pool *p, sl__budget *host, uint64_t base, uint64_t size, uint64_t align,
                  uint32_t max_blocks) {
    memset(p, 0, sizeof *p);
    if (!base || !align || (align & (align - 1)) || !size || size % align || max_blocks < 1) return SL_EINVAL;
    p->ext = sl__calloc(host, max_blocks, sizeof *p->ext, SL_MEM_OTHER);
    if (!p->ext) return SL_EBUDGET;
    if (pthread_mutex_init(&p->mu, NULL)) {
        sl__free(host, p->ext);
        p->ext = NULL;
        return SL_ESYS;
    }
    p->host = host;
    p->base = base;
    p->size = size;
    p->align = align;
    p->cap = max_blocks;
    p->ext[0] = (sl__pool_ext){0, size, 0};
    p->n = 1;
    return 0;
}

void sl__pool_fini(sl__pool *p) {
    if (!p->ext) return;
    pthread_mutex_destroy(&p->mu);
    sl__free(p->host, p->ext);
    p->ext = NULL;
    p->n = p->cap = 0;
}

/* Remove extent i (mu held). */
static void ext_remove(sl__pool *p, uint32_t i) {
    memmove(&p->ext[i], &p->ext[i + 1], (size_t)(p->n - i - 1) * sizeof *p->ext);
    p->n--;
}

uint64_t sl__pool_alloc(sl__pool *p, uint64_t n) {
    if (!n) return 0;
    uint64_t need = n > p->size ? 0 : (n + p->align - 1) & ~(p->align - 1);
    uint64_t addr = 0;
    pthread_mutex_lock(&p->mu);
    for (uint32_t i = 0; need && i < p->n; i++) {
        sl__pool_ext *e = &p->ext[i];
        if (e->used || e->len < need) continue;
        if (e->len > need) { /* split: the rest stays free after it */
            if (p->n == p->cap) break;
            memmove(&p->ext[i + 2], &p->ext[i + 1], (size_t)(p->n - i - 1) * sizeof *p->ext);
            p->ext[i + 1] = (sl__pool_ext){e->off + need, e->len - need, 0};
            p->n++;
            e->len = need;
        }
        e->used = 1;
        p->used += need;
        if (p->used > p->peak) p->peak = p->used;
        addr = p->base + e->off;
        break;
    }
    if (!addr) p->fails++;
    pthread_mutex_unlock(&p->mu);
    return addr;
}

int sl__pool_free(sl__pool *p, uint64_t addr) {
    if (addr < p->base || addr - p->base >= p->size) return SL_EINVAL;
    uint64_t off = addr - p->base;
    int rc = SL_EINVAL;
    pthread_mutex_lock(&p->mu);
    uint32_t lo = 0, hi = p->n; /* binary search: first extent with off >= off */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->ext[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    if (lo < p->n && p->ext[lo].off == off && p->ext[lo].used) {
        uint32_t i = lo;
        p->ext[i].used = 0;
        p->used -= p->ext[i].len;
        if (i + 1 < p->n && !p->ext[i + 1].used) {
            p->ext[i].len += p->ext[i + 1].len;
            ext_remove(p, i + 1);
        }
        if (i > 0 && !p->ext[i - 1].used) {
            p->ext[i - 1].len += p->ext[i].len;
            ext_remove(p, i);
        }
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void sl__pool_stats_get(sl__pool *p, sl__pool_stats *out) {
    pthread_mutex_lock(&p->mu);
    uint64_t big = 0;
    uint32_t nb = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->ext[i].used) nb++;
        else if (p->ext[i].len > big) big = p->ext[i].len;
    }
    *out = (sl__pool_stats){p->used, p->peak, big, p->fails, nb};
    pthread_mutex_unlock(&p->mu);
}
