/*
 * File values through the sample cache (field.h, "file values"). The one
 * place a kind's whole-file read meets the cache: a hit pins the entry
 * until close (a private cache's bytes are then read in place, a node
 * cache's copied into the caller's buffer); a miss opens the file, and the
 * first read from storage is offered to the cache.
 */
#include <string.h>

#include "base/util.h"
#include "fields/field.h"

int sl__fileval_open(sl__load *L, const sl__field *f, sl__fileval *v, char *reason, size_t rlen) {
    memset(v, 0, sizeof *v);
    v->sf.fd = -1;
    if (L->cache) {
        int hit = sl__cache_lookup(L->cache, L->key + L->elem, L->now, &v->ref);
        if (L->io) atomic_fetch_add_explicit(hit ? &L->io->hits : &L->io->misses, 1, memory_order_relaxed);
        if (hit) {
            v->hit = 1;
            v->size = v->ref.size;
            return 0;
        }
    }
    if (L->ra && sl__ra_take(L->ra, L->ra_key, &v->ra)) { /* read ahead: the bytes are here */
        sl__ra_data(v->ra, &v->size);
        return 0;
    }
    int rc = sl__source_open_file(L->src, L->index, (uint32_t)f->col, L->elem, &v->sf, reason, rlen);
    if (rc) {
        v->sf.fd = -1;
        return rc;
    }
    v->size = v->sf.size;
    return 0;
}

int sl__fileval_read(sl__load *L, sl__fileval *v, uint8_t *buf, const uint8_t **data, char *reason, size_t rlen) {
    if (v->hit) {
        if (v->ref.data) { /* a private cache: its bytes stay put while pinned */
            *data = v->ref.data;
            return 0;
        }
        sl__cache_read(L->cache, &v->ref, buf);
        *data = buf;
        return 0;
    }
    int rc = 0;
    if (v->ra) {
        uint64_t n;
        const uint8_t *p = sl__ra_data(v->ra, &n);
        if (n) memcpy(buf, p, (size_t)n);
    } else {
        rc = sl__sample_read(&v->sf, buf, reason, rlen);
    }
    if (rc) return rc;
    if (L->io) atomic_fetch_add_explicit(&L->io->storage, v->size, memory_order_relaxed);
    if (L->cache) sl__cache_note_read(L->cache, v->size);
    if (L->cache && !v->offered) {
        v->offered = 1;
        sl__cache_insert(L->cache, L->key + L->elem, L->now, buf, (size_t)v->size);
    }
    *data = buf;
    return 0;
}

void sl__fileval_close(sl__load *L, sl__fileval *v) {
    if (v->hit) sl__cache_release(L->cache, &v->ref);
    else if (v->ra) sl__ra_release(L->ra, v->ra);
    else if (sl__sample_is_open(&v->sf)) sl__sample_close(&v->sf);
    v->hit = 0;
    v->ra = NULL;
    v->sf.fd = -1;
}
