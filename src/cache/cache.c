/*
 * The sample cache: the index, the policy (farthest next use out,
 * admission only over later-used entries) and the private cache. The node
 * cache's segment, blocks, processes and recovery are in shm.c. See
 * cache.h for the design and cache_impl.h for the region's invariants.
 */
#include "cache/cache_impl.h"

#include <errno.h>
#include <string.h>

#include "base/util.h"

void (*sl__cache_test_hook)(int stage);

static void hook(int stage) {
    if (sl__cache_test_hook) sl__cache_test_hook(stage);
}

/* ---- the region ------------------------------------------------------------ */

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Every term is below 2^53 (keys and entries < 2^32 of at most 48 bytes,
 * blocks < 2^32 of at most 2^20 bytes), so the sums cannot overflow. */
int sl__cache_layout(sl__chdr *h, uint32_t keys, uint32_t max_entries, uint64_t nblocks, uint32_t block_size,
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

void sl__cache_format(sl__chdr *h) {
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

static void heap_push(sl__chdr *h, uint32_t r) {
    heap_put(h, h->heap_len++, r);
    sift_up(h, h->heap_len - 1);
}

static void heap_remove(sl__chdr *h, uint32_t r) {
    uint32_t pos = sl__crecs(h)[r].heap_pos, last = sl__cheap(h)[--h->heap_len];
    if (last == r) return;
    heap_put(h, pos, last);
    sift_up(h, pos);
    sift_down(h, sl__crecs(h)[last].heap_pos);
}

static void heap_fix(sl__chdr *h, uint32_t r) {
    sift_up(h, sl__crecs(h)[r].heap_pos);
    sift_down(h, sl__crecs(h)[r].heap_pos);
}

void sl__cache_heap_build(sl__chdr *h) {
    for (uint32_t i = 0; i < h->heap_len; i++) sl__crecs(h)[sl__cheap(h)[i]].heap_pos = i;
    for (uint32_t i = h->heap_len / 2; i-- > 0;) sift_down(h, i);
}

/* ---- locking ---------------------------------------------------------------- */

void sl__cache_lock(sl__cache *c) {
    int rc = pthread_mutex_lock(&c->h->mu);
    if (rc == EOWNERDEAD) { /* a process died holding it: the index may be half-changed */
        sl__shm_recover(c);
        pthread_mutex_consistent(&c->h->mu);
    }
}

void sl__cache_unlock(sl__cache *c) { pthread_mutex_unlock(&c->h->mu); }

/* ---- records and values, mu held ------------------------------------------- */

static uint64_t charge_for(const sl__cache *c, size_t len) {
    if (!c->shared) return sl__alloc_cost(len);
    return align_up(len, c->h->block_size);
}

/* Free r's value and the record itself. The state goes first: a node
 * cache's recovery must never see a half-cleared record as live. */
void sl__cache_rec_free(sl__cache *c, uint32_t r) {
    sl__chdr *h = c->h;
    sl__crec *rec = &sl__crecs(h)[r];
    if (c->shared) {
        if (rec->loc != BLK_END) sl__shm_blocks_give(c, rec->loc);
    } else {
        sl__free(c->b, (void *)(uintptr_t)rec->loc);
    }
    h->charged -= rec->charge;
    rec->state = REC_FREE;
    atomic_thread_fence(memory_order_seq_cst);
    memset(rec, 0, sizeof *rec);
    sl__cfrec(h)[h->nfrec++] = r;
}

/* Take READY r out of the index; its bytes go now, or with its last pin. */
static void evict(sl__cache *c, uint32_t r) {
    sl__chdr *h = c->h;
    sl__crec *rec = &sl__crecs(h)[r];
    heap_remove(h, r);
    sl__ckeys(h)[rec->key] = SL_NONE;
    h->entries--;
    atomic_fetch_add_explicit(&h->evictions, 1, memory_order_relaxed);
    if (rec->pins) rec->state = REC_DOOMED;
    else sl__cache_rec_free(c, r);
}

/* Evict, farthest next use first, until charge more bytes and a record
 * fit; only entries used strictly later than nu go. 1: room made; 0: not
 * possible without evicting an entry used as soon as the newcomer (some
 * farther ones may be gone already: they were the right ones to lose). */
static int make_room(sl__cache *c, uint64_t nu, uint64_t charge) {
    sl__chdr *h = c->h;
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
    sl__chdr *h = c->h;
    sl__crec *R = sl__crecs(h);
    uint32_t *heap = sl__cheap(h);
    for (uint32_t i = 0; i < h->heap_len; i++) {
        uint64_t nu;
        int rc = oracle(c, R[heap[i]].key, now, &nu);
        if (rc) {
            sl__cache_heap_build(h); /* those already changed need their places */
            return rc;
        }
        R[heap[i]].next_use = nu;
    }
    sl__cache_heap_build(h);
    return 0;
}

void sl__cache_refresh(sl__cache *c, uint64_t now) {
    sl__cache_lock(c);
    refresh_locked(c, now);
    sl__cache_unlock(c);
}

/* At the first call of each epoch, refresh (entries whose predicted use
 * never came, or with no use known before, get their place back). */
static void maybe_refresh(sl__cache *c, uint64_t now) {
    sl__chdr *h = c->h;
    if (!h->epoch_len) return;
    uint64_t e = now / h->epoch_len;
    uint64_t seen = atomic_load_explicit(&h->refresh_epoch, memory_order_acquire);
    if (seen != SL_CACHE_NEVER && seen >= e) return;
    sl__cache_lock(c);
    seen = atomic_load_explicit(&h->refresh_epoch, memory_order_relaxed);
    if ((seen == SL_CACHE_NEVER || seen < e) && refresh_locked(c, now) == 0)
        atomic_store_explicit(&h->refresh_epoch, e, memory_order_release);
    sl__cache_unlock(c);
}

/* ---- lookup ------------------------------------------------------------------- */

int sl__cache_lookup(sl__cache *c, uint32_t key, uint64_t now, sl__cache_ref *ref) {
    sl__chdr *h = c->h;
    if (key >= h->keys) return 0;
    uint64_t nu;
    int known = oracle(c, key, now, &nu) == 0;
    sl__cache_lock(c);
    uint32_t r = sl__ckeys(h)[key], pin = SL_NONE;
    sl__crec *rec = r == SL_NONE ? NULL : &sl__crecs(h)[r];
    if (rec && rec->state == REC_READY && c->shared) pin = sl__shm_pin_add(c, r);
    if (!rec || rec->state != REC_READY || (c->shared && pin == SL_NONE)) {
        sl__cache_unlock(c);
        atomic_fetch_add_explicit(&h->misses, 1, memory_order_relaxed);
        return 0;
    }
    rec->pins++;
    if (known) {
        rec->next_use = nu;
        heap_fix(h, r);
    }
    *ref = (sl__cache_ref){r, pin, rec->size, c->shared ? NULL : (const void *)(uintptr_t)rec->loc};
    sl__cache_unlock(c);
    atomic_fetch_add_explicit(&h->hits, 1, memory_order_relaxed);
    return 1;
}

/* The chain's links were written under mu before the entry was published,
 * and stay unchanged while it is pinned: reading them needs no lock. */
void sl__cache_read(const sl__cache *c, const sl__cache_ref *ref, void *dst) {
    if (!c->shared) {
        memcpy(dst, ref->data, ref->size);
        return;
    }
    sl__chdr *h = c->h;
    uint64_t blk = sl__crecs(h)[ref->rec].loc, off = 0;
    while (off < ref->size) {
        uint64_t n = SL_MIN((uint64_t)h->block_size, ref->size - off);
        memcpy((uint8_t *)dst + off, sl__cblock(h, blk), n);
        off += n;
        blk = sl__clinks(h)[blk];
    }
}

void sl__cache_release(sl__cache *c, sl__cache_ref *ref) {
    sl__cache_lock(c);
    sl__crec *rec = &sl__crecs(c->h)[ref->rec];
    /* a node cache's recovery drops the pins of records it found damaged:
     * then our table no longer names the record, and there is nothing to give */
    int held = !c->shared || sl__shm_pin_holds(c, ref->pin, ref->rec);
    if (held) {
        rec->pins--;
        if (c->shared) sl__shm_pin_drop(c, ref->pin);
        if (rec->state == REC_DOOMED && rec->pins == 0) sl__cache_rec_free(c, ref->rec);
    }
    sl__cache_unlock(c);
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
    sl__chdr *h = c->h;
    uint32_t *keys = sl__ckeys(h);
    if (keys[key] != SL_NONE && c->shared && sl__crecs(h)[keys[key]].state == REC_WRITING &&
        sl__shm_owner_dead(c, sl__crecs(h)[keys[key]].owner))
        sl__shm_reap(c); /* its writer died before publishing */
    if (keys[key] != SL_NONE) return -1;
    if (charge > h->capacity || !make_room(c, nu, charge)) return 0;
    uint32_t r = sl__cfrec(h)[--h->nfrec];
    sl__crec *rec = &sl__crecs(h)[r];
    *rec = (sl__crec){.next_use = nu, .loc = c->shared ? BLK_END : 0, .size = len, .charge = charge,
                      .key = key, .state = REC_WRITING, .owner = c->proc};
    h->charged += charge;
    keys[key] = r;
    hook(SL_CACHE_HOOK_RESERVED);
    if (c->shared && charge) {
        uint64_t first;
        if (sl__shm_blocks_take(c, charge / h->block_size, &first)) {
            keys[key] = SL_NONE;
            sl__cache_rec_free(c, r);
            return 0;
        }
        rec->loc = first;
    }
    *out = r;
    return 1;
}

static void write_value(sl__cache *c, uint32_t r, const void *data, size_t len) {
    sl__chdr *h = c->h;
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
    sl__chdr *h = c->h;
    sl__crec *rec = &sl__crecs(h)[r];
    if (rec->state != REC_WRITING || rec->key != key || (c->shared && rec->owner != c->proc)) return 0;
    rec->state = REC_READY;
    heap_push(h, r);
    h->entries++;
    return 1;
}

/* Private: allocate and fill the value outside mu, then publish at its
 * real cost. 0: the budget refused (the reservation is undone). */
static int fill_private(sl__cache *c, uint32_t r, const void *data, size_t len) {
    sl__chdr *h = c->h;
    void *p = sl__alloc(c->b, len, SL_MEM_CACHE);
    if (p) {
        memcpy(p, data, len);
        hook(SL_CACHE_HOOK_WRITTEN);
    }
    sl__cache_lock(c);
    sl__crec *rec = &sl__crecs(h)[r];
    if (!p) {
        sl__ckeys(h)[rec->key] = SL_NONE;
        sl__cache_rec_free(c, r); /* loc 0: frees no value */
    } else {
        uint64_t counted = sl__alloc_counted(p); /* the budget's count of the block, past len */
        h->charged += counted - rec->charge;
        rec->charge = counted;
        rec->loc = (uint64_t)(uintptr_t)p;
        publish(c, r, rec->key);
    }
    sl__cache_unlock(c);
    return p != NULL;
}

int sl__cache_insert(sl__cache *c, uint32_t key, uint64_t now, const void *data, size_t len) {
    sl__chdr *h = c->h;
    if (key >= h->keys) return 0;
    maybe_refresh(c, now);
    if (c->shared && (atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed) & 4095) == 4095) {
        sl__cache_lock(c); /* now and then: writers and readers that died outside the mutex */
        sl__shm_reap(c);
        sl__cache_unlock(c);
    }
    uint64_t nu, charge = charge_for(c, len);
    uint32_t r = SL_NONE;
    int ok = oracle(c, key, now, &nu) == 0 && nu != SL_CACHE_NEVER && charge != SIZE_MAX;
    if (ok) {
        sl__cache_lock(c);
        ok = reserve(c, key, nu, len, charge, &r);
        sl__cache_unlock(c);
    }
    if (ok < 0) return 0; /* not a refusal: the cache has it */
    if (ok && !c->shared) ok = fill_private(c, r, data, len);
    else if (ok) {
        write_value(c, r, data, len);
        hook(SL_CACHE_HOOK_WRITTEN);
        sl__cache_lock(c);
        ok = publish(c, r, key);
        sl__cache_unlock(c);
    }
    atomic_fetch_add_explicit(ok ? &h->admitted : &h->refused, 1, memory_order_relaxed);
    return ok;
}

/* ---- capacity, stats -------------------------------------------------------------- */

int sl__cache_set_capacity(sl__cache *c, uint64_t value_bytes) {
    sl__chdr *h = c->h;
    if (value_bytes > h->cap_max) return SL_EINVAL;
    sl__cache_lock(c);
    h->capacity = value_bytes;
    while (h->charged > h->capacity && h->heap_len) evict(c, sl__cheap(h)[0]);
    if (c->shared) sl__shm_punch_free(c);
    sl__cache_unlock(c);
    return 0;
}

void sl__cache_note_read(sl__cache *c, uint64_t bytes) {
    atomic_fetch_add_explicit(&c->h->storage_read, bytes, memory_order_relaxed);
}

void sl__cache_stats_get(const sl__cache *c, sl__cache_stats *out) {
    sl__cache *m = (sl__cache *)c; /* the lock is not part of the observable state */
    sl__chdr *h = m->h;
    memset(out, 0, sizeof *out);
    sl__cache_lock(m);
    out->bytes = h->charged;
    out->entries = h->entries;
    out->capacity = h->capacity;
    out->processes = c->shared ? sl__shm_processes(m) : 1;
    sl__cache_unlock(m);
    out->index_bytes = c->shared ? h->index_bytes : sl__alloc_counted(h) + sl__alloc_counted(c);
    out->budget_bytes = c->shared ? sl__alloc_counted(c) : out->bytes + out->index_bytes;
    out->shared = (uint32_t)c->shared;
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
    int rc = sl__cache_layout(&t, o->keys, E, 0, 1, 0);
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
    c->h = h;
    sl__cache_format(h);
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
    sl__cache_layout(&t, o->keys, E, 0, bs, 1);
    int rc = index_fits(t.index_bytes + bs, o, E, err, errlen);
    if (rc) return rc;
    uint64_t n = (o->capacity - t.index_bytes - bs) / ((uint64_t)bs + 12);
    n = SL_MIN(n, SL_CACHE_MAX_BLOCKS);
    while (n && (sl__cache_layout(&t, o->keys, E, n, bs, 1) || t.region_bytes > o->capacity)) n--;
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
    c->fd = -1;
    c->shared = o->shm_name != NULL;
    if (!c->shared) {
        rc = create_private(c, o, err, errlen);
    } else {
        uint64_t nblocks = 0;
        uint32_t E = entries_for(o);
        rc = shared_geometry(o, bs, E, &nblocks, err, errlen);
        if (rc == 0) rc = sl__shm_attach(c, o, E, nblocks, bs, err, errlen);
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
    if (c->shared) {
        sl__shm_detach(c);
    } else {
        sl__chdr *h = c->h;
        for (uint32_t i = 0; i < h->heap_len; i++) sl__free(c->b, (void *)(uintptr_t)sl__crecs(h)[sl__cheap(h)[i]].loc);
        pthread_mutex_destroy(&h->mu);
        sl__free(c->b, h);
    }
    sl__free(c->b, c);
}
