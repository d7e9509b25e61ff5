/*
 * Helpers for the cache tests, header-only: deterministic sample values,
 * the real next-use oracle over a real sampler, an LRU of the same
 * capacity as the reference the policy is held against, and the shuffled
 * multi-epoch run that measures a hit rate.
 */
#ifndef SL_CACHE_FIXTURE_H
#define SL_CACHE_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cache/cache.h"
#include "check.h"
#include "pipeline/nextuse.h"
#include "pipeline/sampler.h"

#define CF_FN static __attribute__((unused))

CF_FN uint64_t cf_mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Size of sample k: fixed, or variable in [lo, hi]. */
typedef struct cf_sizes {
    uint32_t lo, hi;
} cf_sizes;

CF_FN size_t cf_size(cf_sizes s, uint32_t k) {
    return s.lo == s.hi ? s.lo : s.lo + (size_t)(cf_mix(k * 7919u + 3) % (s.hi - s.lo + 1));
}

/* The bytes of sample k (every byte depends on k and its offset). */
CF_FN void cf_fill(uint8_t *p, size_t n, uint32_t k) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = cf_mix(((uint64_t)k << 32) ^ i);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

CF_FN int cf_check(const uint8_t *p, size_t n, uint32_t k) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = cf_mix(((uint64_t)k << 32) ^ i);
        if (memcmp(p + i, &v, n - i < 8 ? n - i : 8) != 0) return 0;
    }
    return 1;
}

/* What a private cache charges for a value of n bytes: the budget's count
 * of an allocation of n (sl__alloc_cost: header and malloc's rounding). */
CF_FN uint64_t cf_counted(size_t n) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, (uint64_t)1 << 40));
    void *p = sl__alloc(&b, n, SL_MEM_CACHE);
    CHECK(p != NULL);
    uint64_t c = sl__alloc_counted(p);
    sl__free(&b, p);
    sl__budget_fini(&b);
    return c;
}

/* ---- an oracle over a sampler --------------------------------------------- */

typedef struct cf_order {
    sl__budget b;
    sl__sampler s;
    sl__nextuse nu;
    uint32_t *seq; /* this rank's order of the current epoch */
} cf_order;

/* Rank `rank` of `world`, uses counted for ranks [lo, lo + cnt). */
CF_FN void cf_order_init(cf_order *o, uint32_t n, uint32_t rank, uint32_t world, uint32_t lo, uint32_t cnt,
                         uint64_t seed) {
    CHECK_OK(sl__budget_init(&o->b, (uint64_t)1 << 34));
    CHECK_OK(sl__sampler_init(&o->s, n, rank, world, 1, 0, seed));
    CHECK_OK(sl__nextuse_init(&o->nu, &o->b, &o->s, lo, cnt));
    o->seq = malloc((size_t)o->s.per_rank * 4);
    CHECK(o->seq != NULL);
}

/* Start epoch e: the oracle holds e and e+1, seq is this rank's order. */
CF_FN void cf_order_epoch(cf_order *o, uint64_t e) {
    sl__nextuse_advance(&o->nu, e);
    uint32_t *tmp = o->s.world > 1 ? malloc((size_t)o->s.total * 4 + (size_t)o->s.n * 4) : NULL;
    sl__sampler_fill(&o->s, e, o->seq, tmp);
    free(tmp);
}

CF_FN void cf_order_fini(cf_order *o) {
    sl__nextuse_fini(&o->nu);
    free(o->seq);
    sl__budget_fini(&o->b);
}

/* ---- LRU of the same capacity (the reference) ----------------------------------- */

typedef struct cf_lru {
    uint64_t cap, used;
    uint32_t n, head, tail; /* most recent at head; n = none */
    uint32_t *prev, *next;
    uint8_t *in;
} cf_lru;

CF_FN void cf_lru_init(cf_lru *l, uint32_t n, uint64_t cap) {
    memset(l, 0, sizeof *l);
    l->cap = cap;
    l->n = n;
    l->head = l->tail = n;
    l->prev = malloc(n * 4ull);
    l->next = malloc(n * 4ull);
    l->in = calloc(n, 1);
    CHECK(l->prev && l->next && l->in);
}

CF_FN void cf_lru_unlink(cf_lru *l, uint32_t k) {
    if (l->prev[k] != l->n) l->next[l->prev[k]] = l->next[k];
    else l->head = l->next[k];
    if (l->next[k] != l->n) l->prev[l->next[k]] = l->prev[k];
    else l->tail = l->prev[k];
}

CF_FN void cf_lru_front(cf_lru *l, uint32_t k) {
    l->prev[k] = l->n;
    l->next[k] = l->head;
    if (l->head != l->n) l->prev[l->head] = k;
    l->head = k;
    if (l->tail == l->n) l->tail = k;
}

/* Access k of charge bytes: 1 on a hit. */
CF_FN int cf_lru_access(cf_lru *l, uint32_t k, uint64_t charge, const uint64_t *charges) {
    if (l->in[k]) {
        cf_lru_unlink(l, k);
        cf_lru_front(l, k);
        return 1;
    }
    if (charge > l->cap) return 0;
    while (l->used + charge > l->cap) {
        uint32_t v = l->tail;
        cf_lru_unlink(l, v);
        l->in[v] = 0;
        l->used -= charges[v];
    }
    cf_lru_front(l, k);
    l->in[k] = 1;
    l->used += charge;
    return 0;
}

CF_FN void cf_lru_fini(cf_lru *l) { free(l->prev), free(l->next), free(l->in); }

/* ---- a shuffled multi-epoch run --------------------------------------------------- */

typedef struct cf_result {
    double hit_rate, byte_hit_rate;         /* the cache, epochs 1.. */
    double lru_hit_rate, lru_byte_hit_rate; /* the LRU reference, same capacity */
    double fraction;                        /* value capacity / dataset bytes (charged) */
} cf_result;

/* One rank, n samples, `epochs` shuffled epochs; a private cache whose
 * value capacity is fraction x the dataset's charged bytes. Every hit's
 * bytes are checked. */
CF_FN cf_result cf_run(uint32_t n, cf_sizes sz, double fraction, uint32_t epochs, uint64_t seed) {
    cf_order o;
    cf_order_init(&o, n, 0, 1, 0, 1, seed);
    uint64_t *charge = malloc(n * 8ull), total = 0;
    CHECK(charge != NULL);
    for (uint32_t k = 0; k < n; k++) total += charge[k] = cf_counted(cf_size(sz, k));
    uint64_t cap = (uint64_t)(fraction * (double)total);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, (uint64_t)1 << 34));
    sl__cache_opts opts = {.capacity = cap * 2 + ((uint64_t)1 << 20), .keys = n, .max_entries = n,
                           .epoch_len = o.s.total, .next_use = sl__nextuse_fn, .ctx = &o.nu};
    sl__cache *c;
    char err[256];
    CHECK_OK(sl__cache_create(&b, &opts, &c, err, sizeof err));
    CHECK_OK(sl__cache_set_capacity(c, cap));
    cf_lru lru;
    cf_lru_init(&lru, n, cap);
    uint8_t *buf = malloc(sz.hi);
    CHECK(buf != NULL);
    uint64_t hits = 0, lru_hits = 0, bytes = 0, hit_bytes = 0, lru_hit_bytes = 0, uses = 0;
    for (uint32_t e = 0; e < epochs; e++) {
        cf_order_epoch(&o, e);
        for (uint64_t i = 0; i < o.s.per_rank; i++) {
            uint32_t k = o.seq[i];
            size_t len = cf_size(sz, k), got = 0;
            uint64_t t = sl__sampler_time(&o.s, e, i);
            int hit = sl__cache_get(c, k, t, buf, sz.hi, &got);
            CHECK(hit >= 0);
            if (hit) {
                CHECK_EQ(got, len);
                if (!cf_check(buf, len, k)) SL_FAIL("sample %u: cached bytes differ", k);
            } else {
                cf_fill(buf, len, k);
                sl__cache_insert(c, k, t, buf, len);
            }
            int lhit = cf_lru_access(&lru, k, charge[k], charge);
            if (e == 0) continue;
            uses++, bytes += len;
            if (hit) hits++, hit_bytes += len;
            if (lhit) lru_hits++, lru_hit_bytes += len;
        }
    }
    cf_result r = {(double)hits / uses, (double)hit_bytes / bytes, (double)lru_hits / uses,
                   (double)lru_hit_bytes / bytes, (double)cap / total};
    free(buf);
    free(charge);
    cf_lru_fini(&lru);
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    cf_order_fini(&o);
    return r;
}

#endif
