/*
 * The loader's sample cache (issue 12; the cache itself is src/cache/, the
 * plan docs/cache.md): its keys, its next-use oracle, its place in the
 * budget and the governor's first lever, and a field's load through it.
 *
 * Keys. A sample has F keys, one per file it may read: one for each field
 * with a file value, `count` for a sequence (one per element). Field i's
 * keys are [index * F + cache_key[i], ... + its files). Each key's value
 * is fixed by its field's mode: the file's bytes (CM_FILES), or, with
 * cache_what = decoded, the field's whole output when it depends on the
 * file alone (CM_OUTPUT, at the field's first key; its files are then
 * read past the cache). Every key of a sample shares the sample's next
 * use.
 *
 * Time. The oracle holds the order of the epoch being dispatched and the
 * next (advanced wherever an epoch's order is made: engine.c's order_for); a
 * worker looks up and inserts at its sample's position in the global
 * order. A jump (set_epoch, set_state) recomputes every entry's next use.
 *
 * Budget. A private cache is a part of the loader's budget: sizing keeps
 * cfg.cache free of the pipeline (slots, worker baselines, a sample's
 * room), so the cache never takes what the pipeline needs, and its values
 * are taken with try-requests only. The governor sheds it first: while the
 * root's live limit is d under its ceiling, the cache may hold its value
 * capacity minus d (nothing once d passes it), and a give-back takes the
 * rest from it before any other consumer is asked. A node cache is its own
 * segment, outside every budget (its handle is counted): the governor does
 * not move it.
 */
#include "pipeline/lcache.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/util.h"

typedef unsigned long long ull;

uint64_t sl__lcache_reserve(const sl__conf *conf) {
    if (!conf->cfg.cache) return 0;
    uint64_t oracle = 2 * (uint64_t)sl__alloc_cost((size_t)conf->sampler.n * sizeof(uint32_t));
    return oracle + 4096 + (conf->cfg.cache_share == SL_CACHE_PRIVATE ? conf->cfg.cache : 0);
}

/* A sample's keys: F and each field's first key and mode. */
static int layout_keys(sl__lcache *lc, char *err, size_t errlen) {
    const sl__conf *conf = lc->conf;
    uint64_t F = 0;
    for (uint32_t i = 0; i < conf->schema.nfields; i++) {
        const sl__field *f = &conf->schema.fields[i];
        int vt = f->kind->value_type;
        lc->mode[i] = SL__CM_NONE;
        if (vt != SL__VAL_FILE && vt != SL__VAL_FILES) continue;
        int fixed = f->kind->fixed_output && f->kind->fixed_output(f) && !f->has_len;
        lc->mode[i] = conf->cfg.cache_what == SL_CACHE_DECODED && fixed ? SL__CM_OUTPUT : SL__CM_FILES;
        lc->key[i] = (uint32_t)F;
        F += vt == SL__VAL_FILES ? f->count : 1;
    }
    if (F == 0) {
        sl__msg(err, errlen, "cache: no field of the schema reads a file (nothing to cache)");
        return SL_EINVAL;
    }
    if (conf->sampler.n * F >= UINT32_MAX) {
        sl__msg(err, errlen, "cache: %llu samples x %llu files a sample is more than 2^32-1 keys",
                (ull)conf->sampler.n, (ull)F);
        return SL_EINVAL;
    }
    lc->keys_per_sample = (uint32_t)F;
    return 0;
}

/* The node's ranks: [rank - local_rank, + local_world_size), from the
 * configuration, else torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE, else the
 * whole world on one node. */
static int node_ranks(const sl__conf *conf, uint32_t *lo, uint32_t *n, char *err, size_t errlen) {
    const sl_config *c = &conf->cfg;
    uint64_t lr = c->local_rank, lws = c->local_world_size;
    if (!lws) {
        const char *a = getenv("LOCAL_RANK"), *b = getenv("LOCAL_WORLD_SIZE");
        char *e1 = NULL, *e2 = NULL;
        lr = a ? strtoull(a, &e1, 10) : 0;
        lws = b ? strtoull(b, &e2, 10) : 0;
        if (!a || !b || e1 == a || *e1 || e2 == b || *e2) lr = c->rank, lws = c->world_size;
    }
    if (lws == 0 || lr >= lws || lr > c->rank || c->rank - lr + lws > c->world_size) {
        sl__msg(err, errlen, "cache_share=node: local rank %llu of %llu local ranks does not fit rank %u of "
                "world %u (set local_rank and local_world_size, or LOCAL_RANK and LOCAL_WORLD_SIZE)",
                (ull)lr, (ull)lws, c->rank, c->world_size);
        return SL_EINVAL;
    }
    *lo = c->rank - (uint32_t)lr;
    *n = (uint32_t)lws;
    return 0;
}

/* The node cache's name: the dataset, the seed, and what a key holds
 * (the schema and, for outputs, the recipe), so that only loaders whose
 * keys mean the same bytes share a segment. */
static int shm_name(const sl__lcache *lc, char *name, size_t len, char *err, size_t errlen) {
    const sl_config *c = &lc->conf->cfg;
    uint64_t h = sl__hash64(c->fields ? c->fields : "", c->fields ? strlen(c->fields) : 0, lc->keys_per_sample);
    if (c->cache_what == SL_CACHE_DECODED) {
        uint64_t geo[4] = {c->size, (uint64_t)c->preset, c->flags, c->max_scans};
        h = sl__hash64(geo, sizeof geo, h);
        if (c->recipe) h = sl__hash64(c->recipe, sizeof *c->recipe, h);
    }
    char variant[100];
    snprintf(variant, sizeof variant, "%s;F=%u;%016llx;%016llx",
             c->cache_what == SL_CACHE_DECODED ? "decoded" : "encoded", lc->keys_per_sample, (ull)h,
             (ull)sl__source_version(lc->conf->src)); /* a remote source's objects' ETags */
    return sl__cache_shm_name(name, len, c->source, c->seed, variant, err, errlen);
}

static int next_use(void *ctx, uint32_t key, uint64_t now, uint64_t *next) {
    sl__lcache *lc = ctx;
    return sl__nextuse_query(&lc->nu, key / lc->keys_per_sample, now, next);
}

/* ---- the governor's lever (private cache) ------------------------------------------- */

/* Value bytes the cache may hold: its capacity less what the root's live
 * limit stands under its ceiling. */
static uint64_t cache_target(const sl__lcache *lc) {
    const sl__budget *b = lc->conf->budget, *r = b->parent ? b->parent : b;
    uint64_t ceiling = atomic_load(&r->ceiling), limit = atomic_load(&r->limit);
    uint64_t deficit = ceiling > limit ? ceiling - limit : 0;
    return lc->values > deficit ? lc->values - deficit : 0;
}

static uint64_t cache_give_back(void *ctx, uint64_t want) {
    sl__lcache *lc = ctx;
    sl__cache_stats st;
    sl__cache_stats_get(lc->cache, &st);
    uint64_t keep = st.bytes > want ? st.bytes - want : 0, target = cache_target(lc);
    sl__cache_set_capacity(lc->cache, SL_MIN(keep, target));
    uint64_t before = st.budget_bytes;
    sl__cache_stats_get(lc->cache, &st);
    return before > st.budget_bytes ? before - st.budget_bytes : 0;
}

static void cache_room(void *ctx) {
    sl__lcache *lc = ctx;
    sl__cache_set_capacity(lc->cache, cache_target(lc));
}

/* ---- life ------------------------------------------------------------------------ */

int sl__lcache_create(sl__lcache *lc, const sl__conf *conf, char *err, size_t errlen) {
    lc->conf = conf;
    const sl_config *c = &conf->cfg;
    if (!c->cache) return 0;
    int node = c->cache_share == SL_CACHE_NODE;
    uint32_t lo = c->rank, ranks = 1;
    char name[96];
    int rc;
    if ((rc = layout_keys(lc, err, errlen)) || (node && (rc = node_ranks(conf, &lo, &ranks, err, errlen))) ||
        (node && (rc = shm_name(lc, name, sizeof name, err, errlen))))
        return rc;
    if ((rc = sl__nextuse_init(&lc->nu, conf->budget, &conf->sampler, lo, ranks))) {
        sl__msg(err, errlen, "cache: no room for the next-use order of %llu samples (%s)", (ull)conf->sampler.n,
                sl_strerror(rc));
        return rc;
    }
    sl__cache_opts o = {.capacity = c->cache,
                        .keys = (uint32_t)(conf->sampler.n * lc->keys_per_sample),
                        .epoch_len = conf->sampler.total,
                        .next_use = next_use,
                        .ctx = lc,
                        .shm_name = node ? name : NULL};
    char why[400];
    if ((rc = sl__cache_create(conf->budget, &o, &lc->cache, why, sizeof why))) {
        sl__msg(err, errlen, "cache: %s", why);
        return rc;
    }
    sl__cache_stats st;
    sl__cache_stats_get(lc->cache, &st);
    lc->values = st.capacity;
    if (!node) {
        lc->consumer = (sl__consumer){.give_back = cache_give_back, .room = cache_room, .ctx = lc, .shed_first = 1};
        sl__budget_add_consumer(conf->budget, &lc->consumer);
        lc->consumer_on = 1;
    }
    return 0;
}

void sl__lcache_destroy(sl__lcache *lc) {
    if (lc->consumer_on) sl__budget_remove_consumer(lc->conf->budget, &lc->consumer);
    lc->consumer_on = 0;
    sl__cache_destroy(lc->cache);
    lc->cache = NULL;
    sl__nextuse_fini(&lc->nu);
}

void sl__lcache_epoch(sl__lcache *lc, uint64_t epoch) {
    if (lc->cache) sl__nextuse_advance(&lc->nu, epoch);
}

void sl__lcache_jump(sl__lcache *lc, uint64_t epoch, uint64_t pos) {
    if (!lc->cache) return;
    sl__nextuse_advance(&lc->nu, epoch);
    uint64_t t = sl__sampler_time(&lc->conf->sampler, epoch, pos);
    sl__cache_refresh(lc->cache, t ? t - 1 : 0);
}

/* ---- a field's load ---------------------------------------------------------------- */

int sl__lcache_load(sl__lcache *lc, sl__load *L, uint32_t i, uint8_t *dst, int64_t *len, char *reason) {
    const sl__field *f = &lc->conf->schema.fields[i];
    int mode = lc->cache ? lc->mode[i] : SL__CM_NONE;
    L->cache = mode == SL__CM_FILES ? lc->cache : NULL;
    L->key = lc->cache ? (uint32_t)(L->index * lc->keys_per_sample) + lc->key[i] : 0;
    if (mode != SL__CM_OUTPUT) return f->kind->load(L, f, dst, len, reason, SL_REASON_MAX);
    size_t got = 0;
    int hit = sl__cache_get(lc->cache, L->key, L->now, dst, (size_t)f->sample_bytes, &got);
    atomic_fetch_add_explicit(hit == 1 ? &lc->io.hits : &lc->io.misses, 1, memory_order_relaxed);
    if (hit == 1 && got == f->sample_bytes) return 0;
    /* the cache keeps dst's host bytes: never left to the GPU stage, whose
     * device decode writes none (gpustage.c uploads the CPU's) */
    sl__defer *defer = L->defer;
    L->defer = NULL;
    int rc = f->kind->load(L, f, dst, len, reason, SL_REASON_MAX);
    L->defer = defer;
    if (rc == 0) sl__cache_insert(lc->cache, L->key, L->now, dst, (size_t)f->sample_bytes);
    return rc;
}

void sl__lcache_stats(sl__lcache *lc, sl_stats *o) {
    o->cache_hits = atomic_load(&lc->io.hits);
    o->cache_misses = atomic_load(&lc->io.misses);
    o->storage_bytes_read = atomic_load(&lc->io.storage);
    uint64_t looked = o->cache_hits + o->cache_misses;
    o->cache_hit_rate = looked ? (double)o->cache_hits / (double)looked : 0;
    if (!lc->cache) return;
    sl__cache_stats st;
    sl__cache_stats_get(lc->cache, &st);
    o->cache_bytes = st.bytes;
    o->cache_capacity = st.capacity;
    o->cache_evictions = st.evictions;
    o->cache_entries = st.entries;
    o->cache_shared = st.shared;
    o->cache_processes = st.processes;
}
