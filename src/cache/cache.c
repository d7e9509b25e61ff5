/*
 * The sample cache: the policy (farthest next use out, admission only
 * over later-used entries) and the private cache's values. It reaches the
 * index, and a node cache's segment, only through cache/segment.h (the
 * layout and its invariants; index.c and shm.c implement it). See cache.h
 * for the design.
 */
#include "cache/cache.h"

#include <errno.h>
#include <string.h>

#include "base/util.h"
#include "cache/index.h"
#include "cache/segment.h"

struct sl__cache {
    sl__budget *b;
    sl__seg seg;            /* the region (the index; a node cache's whole segment) */
    sl__next_use_fn next_use;
    void *ctx;
    _Atomic uint64_t calls; /* inserts, for periodic reaping */
};

void (*sl__cache_test_hook)(int stage);

static void hook(int stage) {
    if (sl__cache_test_hook) sl__cache_test_hook(stage);
}

/* ---- locking, records ------------------------------------------------------ */

static void lock(sl__cache *c) { sl__seg_lock(&c->seg); }
static void unlock(sl__cache *c) { sl__seg_unlock(&c->seg); }

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static uint64_t charge_for(const sl__cache *c, size_t len) {
    if (!c->seg.shared) return sl__alloc_cost(len);
    return align_up(len, c->seg.h->block_size);
}

/* Free r's value (a private allocation; a node cache's blocks go with the
 * record) and the record itself (mu held). */
static void rec_free(sl__cache *c, uint32_t r) {
    if (!c->seg.shared) sl__free(c->b, (void *)(uintptr_t)sl__crecs(c->seg.h)[r].loc);
    sl__seg_rec_free(&c->seg, r);
}

/* Take READY r out of the index; its bytes go now, or with its last pin. */
static void evict(sl__cache *c, uint32_t r) {
    sl__chdr *h = c->seg.h;
    sl__crec *rec = &sl__crecs(h)[r];
    sl__seg_heap_remove(h, r);
    sl__ckeys(h)[rec->key] = SL_NONE;
    h->entries--;
    atomic_fetch_add_explicit(&h->evictions, 1, memory_order_relaxed);
    if (rec->pins) rec->state = REC_DOOMED;
    else rec_free(c, r);
}

/* Evict, farthest next use first, until charge more bytes and a record
 * fit; only entries used strictly later than nu go. 1: room made; 0: not
 * possible without evicting an entry used as soon as the newcomer (some
 * farther ones may be gone already: they were the right ones to lose). */
static int make_room(sl__cache *c, uint64_t nu, uint64_t charge) {
    sl__chdr *h = c->seg.h;
    while (h->charged + charge > h->capacity || h->nfrec == 0) {
        if (h->heap_len == 0) return 0;
        uint32_t top = sl__cheap(h)[0];
        if (sl__crecs(h)[top].next_use <= nu) return 0;
        evict(c, top);
    }
    return 1;
}

static int oracle(sl__cache *c, uint32_t key, uint64_t now, uint64_t *nu) {
    return c->next_use(c->ctx, key, now, nu);
}

/* Recompute every resident's next use for now and rebuild the heap.
 * 0, or the oracle's code (the order is then left as it was). */
static int refresh_locked(sl__cache *c, uint64_t now) {
    sl__chdr *h = c->seg.h;
    sl__crec *R = sl__crecs(h);
    uint32_t *heap = sl__cheap(h);
    for (uint32_t i = 0; i < h->heap_len; i++) {
        uint64_t nu;
        int rc = oracle(c, R[heap[i]].key, now, &nu);
        if (rc) {
            sl__seg_heap_build(h); /* those already changed need their places */
            return rc;
        }
        R[heap[i]].next_use = nu;
    }
    sl__seg_heap_build(h);
    return 0;
}

void sl__cache_refresh(sl__cache *c, uint64_t now) {
    lock(c);
    refresh_locked(c, now);
    unlock(c);
}

/* At the first call of each epoch, refresh (entries whose predicted use
 * never came, or with no use known before, get their place back). */
static void maybe_refresh(sl__cache *c, uint64_t now) {
    sl__chdr *h = c->seg.h;
    if (!h->epoch_len) return;
    uint64_t e = now / h->epoch_len;
    uint64_t seen = atomic_load_explicit(&h->refresh_epoch, memory_order_acquire);
    if (seen != SL_CACHE_NEVER && seen >= e) return;
    lock(c);
    seen = atomic_load_explicit(&h->refresh_epoch, memory_order_relaxed);
    if ((seen == SL_CACHE_NEVER || seen < e) && refresh_locked(c, now) == 0)
        atomic_store_explicit(&h->refresh_epoch, e, memory_order_release);
    unlock(c);
}

/* ---- lookup ------------------------------------------------------------------- */

int sl__cache_lookup(sl__cache *c, uint32_t key, uint64_t now, sl__cache_ref *ref) {
    sl__chdr *h = c->seg.h;
    if (key >= h->keys) return 0;
    uint64_t nu;
    int known = oracle(c, key, now, &nu) == 0;
    lock(c);
    uint32_t r = sl__ckeys(h)[key], pin = SL_NONE;
    sl__crec *rec = r == SL_NONE ? NULL : &sl__crecs(h)[r];
    if (rec && rec->state == REC_READY && c->seg.shared) pin = sl__seg_pin_add(&c->seg, r);
    if (!rec || rec->state != REC_READY || (c->seg.shared && pin == SL_NONE)) {
        unlock(c);
        atomic_fetch_add_explicit(&h->misses, 1, memory_order_relaxed);
        return 0;
    }
    rec->pins++;
    if (known) {
        rec->next_use = nu;
        sl__seg_heap_fix(h, r);
    }
    *ref = (sl__cache_ref){r, pin, rec->size, c->seg.shared ? NULL : (const void *)(uintptr_t)rec->loc};
    unlock(c);
    atomic_fetch_add_explicit(&h->hits, 1, memory_order_relaxed);
    return 1;
}

int sl__cache_holds(sl__cache *c, uint32_t key) {
    sl__chdr *h = c->seg.h;
    if (key >= h->keys) return 0;
    lock(c);
    uint32_t r = sl__ckeys(h)[key];
    int held = r != SL_NONE && sl__crecs(h)[r].state == REC_READY;
    unlock(c);
    return held;
}

/* The chain's links were written under mu before the entry was published,
 * and stay unchanged while it is pinned: reading them needs no lock. */
void sl__cache_read(const sl__cache *c, const sl__cache_ref *ref, void *dst) {
    if (!c->seg.shared) {
        memcpy(dst, ref->data, ref->size);
        return;
    }
    sl__chdr *h = c->seg.h;
    uint64_t blk = sl__crecs(h)[ref->rec].loc, off = 0;
    while (off < ref->size) {
        uint64_t n = SL_MIN((uint64_t)h->block_size, ref->size - off);
        memcpy((uint8_t *)dst + off, sl__cblock(h, blk), n);
        off += n;
        blk = sl__clinks(h)[blk];
    }
}

void sl__cache_release(sl__cache *c, sl__cache_ref *ref) {
    lock(c);
    sl__crec *rec = &sl__crecs(c->seg.h)[ref->rec];
    /* a node cache's recovery drops the pins of records it found damaged:
     * then our table no longer names the record, and there is nothing to give */
    int held = !c->seg.shared || sl__seg_pin_holds(&c->seg, ref->pin, ref->rec);
    if (held) {
        rec->pins--;
        if (c->seg.shared) sl__seg_pin_drop(&c->seg, ref->pin);
        if (rec->state == REC_DOOMED && rec->pins == 0) rec_free(c, ref->rec);
    }
    unlock(c);
}

int sl__cache_get(sl__cache *c, uint32_t key, uint64_t now, void *dst, size_t cap, size_t *len) {
    sl__cache_ref ref;
    if (!sl__cache_lookup(c, key, now, &ref)) return 0;
    *len = (size_t)ref.size;
    int rc = ref.size <= cap ? 1 : SL_EOVERFLOW;
    if (rc == 1) sl__cache_read(c, &ref, dst);
    sl__cache_release(c, &ref);
    return rc;
}

/* ---- insert --------------------------------------------------------------------- */

/* Reserve room and a WRITING record for key (mu held). 1: reserved
 * (*out); 0: not admitted; -1: key is cached or being cached already. */
static int reserve(sl__cache *c, uint32_t key, uint64_t nu, uint64_t len, uint64_t charge, uint32_t *out) {
    sl__chdr *h = c->seg.h;
    uint32_t *keys = sl__ckeys(h);
    if (keys[key] != SL_NONE && c->seg.shared && sl__crecs(h)[keys[key]].state == REC_WRITING &&
        sl__seg_owner_dead(&c->seg, sl__crecs(h)[keys[key]].owner))
        sl__seg_reap(&c->seg); /* its writer died before publishing */
    if (keys[key] != SL_NONE) return -1;
    if (charge > h->capacity || !make_room(c, nu, charge)) return 0;
    uint32_t r = sl__cfrec(h)[--h->nfrec];
    sl__crec *rec = &sl__crecs(h)[r];
    *rec = (sl__crec){.next_use = nu, .loc = c->seg.shared ? BLK_END : 0, .size = len, .charge = charge,
                      .key = key, .state = REC_WRITING, .owner = c->seg.proc};
    h->charged += charge;
    keys[key] = r;
    hook(SL_CACHE_HOOK_RESERVED);
    if (c->seg.shared && charge) {
        uint64_t first;
        if (sl__seg_blocks_take(&c->seg, charge / h->block_size, &first)) {
            keys[key] = SL_NONE;
            rec_free(c, r);
            return 0;
        }
        rec->loc = first;
    }
    *out = r;
    return 1;
}

static void write_value(sl__cache *c, uint32_t r, const void *data, size_t len) {
    sl__chdr *h = c->seg.h;
    uint64_t blk = sl__crecs(h)[r].loc, off = 0; /* ours while WRITING */
    while (off < len) {
        uint64_t n = SL_MIN((uint64_t)h->block_size, len - off);
        memcpy(sl__cblock(h, blk), (const uint8_t *)data + off, n);
        off += n;
        blk = sl__clinks(h)[blk];
    }
}

/* Make our WRITING r visible (mu held). 0 if a recovery took it from us
 * meanwhile (it cannot, unless the index was damaged: then the bytes are
 * simply not cached). */
static int publish(sl__cache *c, uint32_t r, uint32_t key) {
    sl__chdr *h = c->seg.h;
    sl__crec *rec = &sl__crecs(h)[r];
    if (rec->state != REC_WRITING || rec->key != key || (c->seg.shared && rec->owner != c->seg.proc)) return 0;
    rec->state = REC_READY;
    sl__seg_heap_push(h, r);
    h->entries++;
    return 1;
}

/* Private: allocate and fill the value outside mu, then publish at its
 * real cost. 0: the budget refused (the reservation is undone). */
static int fill_private(sl__cache *c, uint32_t r, const void *data, size_t len) {
    sl__chdr *h = c->seg.h;
    void *p = sl__alloc(c->b, len, SL_MEM_CACHE);
    if (p) {
        memcpy(p, data, len);
        hook(SL_CACHE_HOOK_WRITTEN);
    }
    lock(c);
    sl__crec *rec = &sl__crecs(h)[r];
    if (!p) {
        sl__ckeys(h)[rec->key] = SL_NONE;
        rec_free(c, r); /* loc 0: frees no value */
    } else {
        uint64_t counted = sl__alloc_counted(p); /* the budget's count of the block, past len */
        h->charged += counted - rec->charge;
        rec->charge = counted;
        rec->loc = (uint64_t)(uintptr_t)p;
        publish(c, r, rec->key);
    }
    unlock(c);
    return p != NULL;
}

int sl__cache_insert(sl__cache *c, uint32_t key, uint64_t now, const void *data, size_t len) {
    sl__chdr *h = c->seg.h;
    if (key >= h->keys) return 0;
    maybe_refresh(c, now);
    if (c->seg.shared && (atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed) & 4095) == 4095) {
        lock(c); /* now and then: writers and readers that died outside the mutex */
        sl__seg_reap(&c->seg);
        unlock(c);
    }
    uint64_t nu, charge = charge_for(c, len);
    uint32_t r = SL_NONE;
    int ok = oracle(c, key, now, &nu) == 0 && nu != SL_CACHE_NEVER && charge != SIZE_MAX;
    if (ok) {
        lock(c);
        ok = reserve(c, key, nu, len, charge, &r);
        unlock(c);
    }
    if (ok < 0) return 0; /* not a refusal: the cache has it */
    if (ok && !c->seg.shared) ok = fill_private(c, r, data, len);
    else if (ok) {
        write_value(c, r, data, len);
        hook(SL_CACHE_HOOK_WRITTEN);
        lock(c);
        ok = publish(c, r, key);
        unlock(c);
    }
    atomic_fetch_add_explicit(ok ? &h->admitted : &h->refused, 1, memory_order_relaxed);
    return ok;
}

/* ---- capacity, stats -------------------------------------------------------------- */

int sl__cache_set_capacity(sl__cache *c, uint64_t value_bytes) {
    sl__chdr *h = c->seg.h;
    if (value_bytes > h->cap_max) return SL_EINVAL;
    if (c->seg.shared) pthread_mutex_lock(&c->seg.punch_mu);
    lock(c);
    h->capacity = value_bytes;
    while (h->charged > h->capacity && h->heap_len) evict(c, sl__cheap(h)[0]);
    uint64_t punch = c->seg.shared ? sl__seg_punch_mark(&c->seg) : BLK_END;
    unlock(c);
    if (punch != BLK_END) { /* the freed pages go back to the system without the node's mutex */
        hook(SL_CACHE_HOOK_PUNCHING);
        sl__seg_punch(&c->seg, punch);
        lock(c);
        sl__seg_punch_done(&c->seg);
        unlock(c);
    }
    if (c->seg.shared) pthread_mutex_unlock(&c->seg.punch_mu);
    return 0;
}

void sl__cache_note_read(sl__cache *c, uint64_t bytes) {
    atomic_fetch_add_explicit(&c->seg.h->storage_read, bytes, memory_order_relaxed);
}

void sl__cache_stats_get(const sl__cache *c, sl__cache_stats *out) {
    sl__cache *m = (sl__cache *)c; /* the lock is not part of the observable state */
    sl__chdr *h = m->seg.h;
    memset(out, 0, sizeof *out);
    lock(m);
    out->bytes = h->charged;
    out->entries = h->entries;
    out->capacity = h->capacity;
    out->processes = c->seg.shared ? sl__seg_processes(&m->seg) : 1;
    unlock(m);
    out->index_bytes = c->seg.shared ? h->index_bytes : sl__alloc_counted(h) + sl__alloc_counted(c);
    out->budget_bytes = c->seg.shared ? sl__alloc_counted(c) : out->bytes + out->index_bytes;
    out->shared = (uint32_t)c->seg.shared;
    out->hits = atomic_load(&h->hits);
    out->misses = atomic_load(&h->misses);
    out->admitted = atomic_load(&h->admitted);
    out->refused = atomic_load(&h->refused);
    out->evictions = atomic_load(&h->evictions);
    out->storage_bytes_read = atomic_load(&h->storage_read);
    out->recoveries = atomic_load(&h->recoveries);
    out->reaped = atomic_load(&h->reaped);
}

/* ---- create, destroy ---------------------------------------------------------------- */

static int check_opts(const sl__cache_opts *o, uint32_t *bs, char *err, size_t errlen) {
    *bs = o->block_size ? o->block_size : 4096;
    if (!o->keys || !o->capacity || !o->next_use) {
        sl__msg(err, errlen, "cache needs a capacity (%llu), a key count (%u) and a next-use oracle",
                (unsigned long long)o->capacity, o->keys);
        return SL_EINVAL;
    }
    if (*bs < 512 || *bs > (1u << 20) || (*bs & (*bs - 1))) {
        sl__msg(err, errlen, "cache block size %u is not a power of two in 512..1048576", *bs);
        return SL_EINVAL;
    }
    return 0;
}

static uint32_t entries_for(const sl__cache_opts *o) {
    if (o->max_entries) return SL_MIN(o->max_entries, o->keys);
    return (uint32_t)SL_MIN((uint64_t)o->keys, o->capacity / 1024 + 64);
}

/* The index must leave at least half the capacity for values. */
static int index_fits(uint64_t index, const sl__cache_opts *o, uint32_t entries, char *err, size_t errlen) {
    if (index <= o->capacity / 2) return 0;
    char a[32], b[32];
    sl__msg(err, errlen, "a cache of %s cannot hold its index for %u samples and %u entries (%s): "
            "give it at least %llu bytes", sl__fmt_bytes(o->capacity, a, sizeof a), o->keys, entries,
            sl__fmt_bytes(index, b, sizeof b), (unsigned long long)index * 2);
    return SL_EINVAL;
}

static int create_private(sl__cache *c, const sl__cache_opts *o, char *err, size_t errlen) {
    sl__chdr t;
    memset(&t, 0, sizeof t);
    uint32_t E = entries_for(o);
    int rc = sl__seg_layout(&t, o->keys, E, 0, 1, 0);
    uint64_t cost = sl__alloc_cost((size_t)t.index_bytes);
    if (rc == 0) rc = index_fits(cost, o, E, err, errlen);
    if (rc) return rc;
    sl__chdr *h = sl__alloc(c->b, (size_t)t.index_bytes, SL_MEM_CACHE);
    if (!h) {
        char a[32];
        int budget = atomic_load(&c->b->used) + cost > sl__budget_limit(c->b);
        sl__msg(err, errlen, "%s for the cache's index of %u samples (%s)",
                budget ? "the budget has no room" : "out of memory", o->keys, sl__fmt_bytes(cost, a, sizeof a));
        return budget ? SL_EBUDGET : SL_ENOMEM;
    }
    memcpy(h, &t, sizeof t);
    if (pthread_mutex_init(&h->mu, NULL)) {
        sl__free(c->b, h);
        return SL_ESYS;
    }
    c->seg.h = h;
    sl__seg_format(h);
    h->total_capacity = o->capacity;
    h->cap_max = h->capacity = o->capacity - sl__alloc_counted(h);
    h->epoch_len = o->epoch_len;
    h->refresh_epoch = SL_CACHE_NEVER;
    atomic_store(&h->magic, SL_CACHE_MAGIC);
    return 0;
}

/* Blocks for a node cache of o->capacity bytes: what is left once the
 * index (which grows 12 bytes a block) and the alignment are paid. */
static int shared_geometry(const sl__cache_opts *o, uint32_t bs, uint32_t E, uint64_t *nblocks, char *err,
                           size_t errlen) {
    sl__chdr t;
    memset(&t, 0, sizeof t);
    sl__seg_layout(&t, o->keys, E, 0, bs, 1);
    int rc = index_fits(t.index_bytes + bs, o, E, err, errlen);
    if (rc) return rc;
    uint64_t n = (o->capacity - t.index_bytes - bs) / ((uint64_t)bs + 12);
    n = SL_MIN(n, SL_CACHE_MAX_BLOCKS);
    while (n && (sl__seg_layout(&t, o->keys, E, n, bs, 1) || t.region_bytes > o->capacity)) n--;
    if (!n) return index_fits(o->capacity, o, E, err, errlen); /* says the numbers */
    *nblocks = n;
    return 0;
}

int sl__cache_create(sl__budget *b, const sl__cache_opts *o, sl__cache **out, char *err, size_t errlen) {
    uint32_t bs;
    *out = NULL;
    int rc = check_opts(o, &bs, err, errlen);
    if (rc) return rc;
    sl__cache *c = sl__calloc(b, 1, sizeof *c, SL_MEM_CACHE);
    if (!c) {
        sl__msg(err, errlen, "no room for the cache's handle");
        return atomic_load(&b->used) + sl__alloc_cost(sizeof *c) > sl__budget_limit(b) ? SL_EBUDGET : SL_ENOMEM;
    }
    c->b = b;
    c->next_use = o->next_use;
    c->ctx = o->ctx;
    c->seg.fd = -1;
    c->seg.shared = o->shm_name != NULL;
    if (!c->seg.shared) {
        rc = create_private(c, o, err, errlen);
    } else {
        uint64_t nblocks = 0;
        uint32_t E = entries_for(o);
        rc = shared_geometry(o, bs, E, &nblocks, err, errlen);
        sl__seg_geom g = {.capacity = o->capacity, .nblocks = nblocks, .epoch_len = o->epoch_len,
                          .keys = o->keys, .entries = E, .block_size = bs};
        if (rc == 0) rc = sl__seg_attach(&c->seg, o->shm_name, &g, err, errlen);
    }
    if (rc) {
        sl__free(b, c);
        return rc;
    }
    *out = c;
    return 0;
}

void sl__cache_destroy(sl__cache *c) {
    if (!c) return;
    if (c->seg.shared) {
        sl__seg_detach(&c->seg);
    } else {
        sl__chdr *h = c->seg.h;
        for (uint32_t i = 0; i < h->heap_len; i++) sl__free(c->b, (void *)(uintptr_t)sl__crecs(h)[sl__cheap(h)[i]].loc);
        pthread_mutex_destroy(&h->mu);
        sl__free(c->b, h);
    }
    sl__free(c->b, c);
}
