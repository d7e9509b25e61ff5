/*
 * Read-ahead (readahead.h): remote files fetched before a worker
 * asks for them, along the order the sampler knows.
 *
 * A table of `entries` records, each free or holding one file: its key,
 * its time in the order, its read (an engine request) and its buffer. A
 * buffer is counted under SL_MEM_IO with a try-request, and all of them
 * together stay under `cap` bytes: read-ahead never waits for budget and
 * never takes what the pipeline needs (the loader keeps cap free of it at
 * create, as it does a private cache's capacity). A worker takes the entry
 * of the file it needs (waiting for its read if it is still on the way),
 * copies the bytes, and releases it; entries nobody took (their sample was
 * refilled, the order jumped) are dropped by time.
 *
 * Locks: mu protects the records' states and keys and the byte count; a
 * read in flight is waited for or abandoned outside mu. Lock order: a
 * caller's locks, mu, the engine's.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/engine.h"
#include "io/object.h"
#include "io/readahead.h"
#include "io/url.h"

/* E_START: claimed by sl__ra_start, its request not yet submitted (no one
 * else touches it); E_FETCH: submitted, a worker may take it; E_TAKEN: a
 * worker's (or a drop's) alone */
enum { E_FREE = 0, E_START, E_FETCH, E_TAKEN };

struct sl__ra_entry {
    int state;
    uint64_t key, t;
    uint64_t size;      /* bytes (known at start, or once the read has the size) */
    uint64_t counted;   /* budget held for buf */
    uint8_t *buf;
    sl__io_req req;
    sl__obj obj;        /* a manifest's file: its name below */
    char name[SL__URL_MAX];
    struct sl__ra *ra;
};

struct sl__ra {
    sl__budget *b;
    sl__io *io;
    pthread_mutex_t mu;
    sl__ra_entry *e;
    uint32_t n;
    uint64_t cap, held;        /* bytes allowed, held by buffers and reads whose size is unknown */
    uint64_t table_bytes;
    _Atomic uint64_t started, hits, dropped, dropped_bytes, failed;
};

uint64_t sl__ra_table_bytes(uint32_t entries) {
    return sl__alloc_cost(sizeof(struct sl__ra)) + sl__alloc_cost((size_t)entries * sizeof(sl__ra_entry));
}

int sl__ra_new(sl__budget *b, sl__io *io, uint32_t entries, uint64_t cap, sl__ra **out) {
    *out = NULL;
    sl__ra *ra = sl__calloc(b, 1, sizeof *ra, SL_MEM_IO);
    if (!ra) return SL_EBUDGET;
    if (!(ra->e = sl__calloc(b, entries, sizeof(sl__ra_entry), SL_MEM_IO)) || pthread_mutex_init(&ra->mu, NULL)) {
        sl__free(b, ra->e);
        sl__free(b, ra);
        return SL_EBUDGET;
    }
    ra->b = b;
    ra->io = io;
    ra->n = entries;
    ra->cap = cap;
    for (uint32_t i = 0; i < entries; i++) ra->e[i].ra = ra;
    *out = ra;
    return 0;
}

/* The buffer of a read whose size was unknown: called on the I/O thread. */
static uint8_t *entry_alloc(void *ctx, uint64_t n) {
    sl__ra_entry *e = ctx;
    sl__ra *ra = e->ra;
    uint64_t cost = sl__alloc_cost((size_t)SL_MIN(n, (uint64_t)SIZE_MAX / 2));
    pthread_mutex_lock(&ra->mu);
    /* the estimate held at start becomes the real cost */
    int fits = n < SIZE_MAX / 2 && ra->held - e->counted + cost <= ra->cap;
    if (fits) ra->held = ra->held - e->counted + cost, e->counted = cost;
    pthread_mutex_unlock(&ra->mu);
    if (!fits) return NULL;
    e->buf = sl__alloc(ra->b, (size_t)n, SL_MEM_IO);
    e->size = n;
    return e->buf;
}

/* Free e's buffer and record (mu held; e's read is done). */
static void entry_clear(sl__ra *ra, sl__ra_entry *e) {
    sl__free(ra->b, e->buf);
    ra->held -= e->counted;
    e->buf = NULL;
    e->counted = 0;
    e->state = E_FREE;
}

#define UNKNOWN_HOLD ((uint64_t)256 << 10) /* held for a read of unknown size until it has one */

int sl__ra_start(sl__ra *ra, uint64_t key, uint64_t t, const sl__obj *obj, const char *name, uint64_t off,
                 uint64_t size) {
    pthread_mutex_lock(&ra->mu);
    sl__ra_entry *e = NULL;
    for (uint32_t i = 0; i < ra->n; i++) {
        if (ra->e[i].state != E_FREE && ra->e[i].key == key) {
            pthread_mutex_unlock(&ra->mu);
            return 1; /* on its way already */
        }
        if (!e && ra->e[i].state == E_FREE) e = &ra->e[i];
    }
    uint64_t cost = obj ? sl__alloc_cost((size_t)SL_MIN(size, (uint64_t)SIZE_MAX / 2)) : UNKNOWN_HOLD;
    if (!e || (obj && size >= SIZE_MAX / 2) || ra->held + cost > ra->cap) {
        pthread_mutex_unlock(&ra->mu);
        return SL_EBUDGET;
    }
    e->state = E_START; /* E_FETCH once its request is submitted: none may wait on it before */
    e->key = key;
    e->t = t;
    e->counted = cost;
    ra->held += cost;
    pthread_mutex_unlock(&ra->mu);
    /* outside mu: the buffer (a try-request), the request */
    memset(&e->req, 0, sizeof e->req);
    if (obj) {
        e->size = size;
        e->buf = size ? sl__alloc(ra->b, (size_t)size, SL_MEM_IO) : NULL;
        if (size && !e->buf) {
            pthread_mutex_lock(&ra->mu);
            e->counted = 0; /* nothing was allocated */
            ra->held -= cost;
            e->state = E_FREE;
            pthread_mutex_unlock(&ra->mu);
            return SL_EBUDGET;
        }
        e->req.name = obj->name;
        e->req.etag = obj->etag;
        e->req.off = off;
        e->req.len = size;
        e->req.dst = e->buf;
    } else {
        e->size = 0;
        snprintf(e->name, sizeof e->name, "%s", name);
        e->req.name = e->name;
        e->req.len = SL__IO_TO_END;
        e->req.alloc = entry_alloc;
        e->req.ctx = e;
    }
    atomic_fetch_add_explicit(&ra->started, 1, memory_order_relaxed);
    sl__io_submit(ra->io, &e->req);
    pthread_mutex_lock(&ra->mu);
    e->state = E_FETCH;
    pthread_mutex_unlock(&ra->mu);
    return 0;
}

int sl__ra_take(sl__ra *ra, uint64_t key, sl__ra_entry **out) {
    *out = NULL;
    pthread_mutex_lock(&ra->mu);
    sl__ra_entry *e = NULL;
    for (uint32_t i = 0; i < ra->n && !e; i++)
        if (ra->e[i].state == E_FETCH && ra->e[i].key == key) e = &ra->e[i];
    if (e) e->state = E_TAKEN;
    pthread_mutex_unlock(&ra->mu);
    if (!e) return 0;
    if (sl__io_wait(ra->io, &e->req)) { /* the caller reads it itself (and meets the failure, if it lasts) */
        atomic_fetch_add_explicit(&ra->failed, 1, memory_order_relaxed);
        pthread_mutex_lock(&ra->mu);
        entry_clear(ra, e);
        pthread_mutex_unlock(&ra->mu);
        return 0;
    }
    atomic_fetch_add_explicit(&ra->hits, 1, memory_order_relaxed);
    *out = e;
    return 1;
}

const uint8_t *sl__ra_data(const sl__ra_entry *e, uint64_t *size) {
    *size = e->req.len == SL__IO_TO_END ? e->size : e->req.len;
    return e->buf;
}

void sl__ra_release(sl__ra *ra, sl__ra_entry *e) {
    pthread_mutex_lock(&ra->mu);
    entry_clear(ra, e);
    pthread_mutex_unlock(&ra->mu);
}

void sl__ra_drop(sl__ra *ra, uint64_t lo, uint64_t hi) {
    sl__ra_entry *gone[64];
    for (;;) {
        uint32_t n = 0;
        pthread_mutex_lock(&ra->mu);
        for (uint32_t i = 0; i < ra->n && n < 64; i++) {
            sl__ra_entry *e = &ra->e[i];
            if (e->state == E_FETCH && (e->t < lo || e->t > hi)) {
                e->state = E_TAKEN; /* ours now: nobody takes it while it is abandoned */
                gone[n++] = e;
            }
        }
        pthread_mutex_unlock(&ra->mu);
        for (uint32_t i = 0; i < n; i++) {
            sl__io_abandon(ra->io, &gone[i]->req);
            atomic_fetch_add_explicit(&ra->dropped, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&ra->dropped_bytes, gone[i]->req.rc ? 0 : gone[i]->size, memory_order_relaxed);
            pthread_mutex_lock(&ra->mu);
            entry_clear(ra, gone[i]);
            pthread_mutex_unlock(&ra->mu);
        }
        if (n < 64) return;
    }
}

void sl__ra_free(sl__ra *ra) {
    if (!ra) return;
    sl__ra_drop(ra, UINT64_MAX, 0); /* every entry not taken */
    sl__budget *b = ra->b;
    pthread_mutex_destroy(&ra->mu);
    sl__free(b, ra->e);
    sl__free(b, ra);
}

void sl__ra_forget(sl__ra *ra) {
    if (!ra) return;
    /* a child of fork(): the reads were the parent's engine's; give back the memory */
    sl__budget *b = ra->b;
    for (uint32_t i = 0; i < ra->n; i++) sl__free(b, ra->e[i].buf);
    sl__free(b, ra->e);
    sl__free(b, ra);
}

void sl__ra_stats(const sl__ra *cra, uint64_t *started, uint64_t *hits, uint64_t *dropped, uint64_t *held) {
    sl__ra *ra = (sl__ra *)cra;
    *started = ra ? atomic_load(&ra->started) : 0;
    *hits = ra ? atomic_load(&ra->hits) : 0;
    *dropped = ra ? atomic_load(&ra->dropped) : 0;
    if (held) {
        *held = 0;
        if (ra) {
            pthread_mutex_lock(&ra->mu);
            *held = ra->held;
            pthread_mutex_unlock(&ra->mu);
        }
    }
}
