/*
 * The sample cache in the loader (lcache.c says how): its keys, its
 * next-use oracle, its place in the budget and the governor's first lever,
 * and a field's load through it. The cache itself is src/cache/.
 *
 * Ownership. lcache.c writes every field, at create and destroy (one
 * thread); in between the fields are read-only and the cache and the
 * oracle lock themselves, so any worker loads through it without a lock
 * of the loader's. io's counters are atomics that every worker's loads add
 * to (fields/field.h).
 */
#ifndef SL_PIPELINE_LCACHE_H
#define SL_PIPELINE_LCACHE_H

#include <stdint.h>

#include "cache/cache.h"
#include "fields/field.h"
#include "pipeline/config.h"
#include "pipeline/nextuse.h"

enum { SL__CM_NONE = 0, SL__CM_FILES, SL__CM_OUTPUT };

typedef struct sl__lcache {
    const sl__conf *conf;
    sl__cache *cache;              /* NULL: none */
    sl__nextuse nu;                /* its next-use oracle */
    uint32_t keys_per_sample;      /* F: sample k's keys are [k * F, k * F + F) */
    uint32_t key[SL__MAX_FIELDS];  /* field i's first key within its sample's */
    uint8_t mode[SL__MAX_FIELDS];  /* SL__CM_*: what field i's keys hold */
    uint64_t values;               /* value bytes allowed at create */
    sl__consumer consumer;         /* the governor's first lever (a private cache) */
    int consumer_on;
    sl__fileio io;                 /* lookups and storage reads, every worker's */
} sl__lcache;

/* Bytes create must keep free of the pipeline for the cache of conf: its
 * oracle and handle, and a private cache's capacity. 0 without a cache. */
uint64_t sl__lcache_reserve(const sl__conf *conf);
/* Make the cache of cfg.cache bytes (nothing without one): keys, oracle,
 * cache (private, or the node's segment, created or attached), the
 * governor's consumer. 0, or SL_EINVAL / SL_EBUDGET / SL_ENOMEM / SL_ESYS
 * / SL_ESTATE (a node cache made with other settings) with a sentence;
 * what was made is undone by sl__lcache_destroy. */
int sl__lcache_create(sl__lcache *lc, const sl__conf *conf, char *err, size_t errlen);
/* Free the cache (the last process of a node cache unlinks it) and the
 * oracle. Safe on a loader without one. */
void sl__lcache_destroy(sl__lcache *lc);
/* Epoch's order is about to be dispatched: hold its next uses. */
void sl__lcache_epoch(sl__lcache *lc, uint64_t epoch);
/* Dispatch jumps to position pos of epoch (set_epoch, set_state):
 * recompute every entry's next use from there. */
void sl__lcache_jump(sl__lcache *lc, uint64_t epoch, uint64_t pos);
/* Load field i of the sample L describes (L->index, L->now set) into dst,
 * through the cache by the field's mode. As sl__kind.load, with reason
 * holding SL_REASON_MAX bytes. */
int sl__lcache_load(sl__lcache *lc, sl__load *L, uint32_t i, uint8_t *dst, int64_t *len, char *reason);
/* The cache's part of sl_stats. */
void sl__lcache_stats(sl__lcache *lc, sl_stats *o);

#endif
