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
 * next (advanced wherever an epoch's order is made: sl__order_for); a
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
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/util.h"
#include "pipeline/loader_impl.h"

typedef unsigned long long ull;

uint64_t sl__lcache_reserve(const sl_loader *ld) {
    if (!ld->cfg.cache) return 0;
    uint64_t oracle = 2 * (uint64_t)sl__alloc_cost((size_t)ld->sampler.n * sizeof(uint32_t));
    return oracle + 4096 + (ld->cfg.cache_share == SL_CACHE_PRIVATE ? ld->cfg.cache : 0);
}

/* A sample's keys: F and each field's first key and mode. */
static int layout_keys(sl_loader *ld, char *err, size_t errlen) {
    uint64_t F = 0;
    for (uint32_t i = 0; i < ld->schema.nfields; i++) {
        const sl__field *f = &ld->schema.fields[i];
        int vt = f->kind->value_type;
        ld->cache_mode[i] = SL__CM_NONE;
        if (vt != SL__VAL_FILE && vt != SL__VAL_FILES) continue;
        int fixed = f->kind->fixed_output && f->kind->fixed_output(f) && !f->has_len;
        ld->cache_mode[i] = ld->cfg.cache_what == SL_CACHE_DECODED && fixed ? SL__CM_OUTPUT : SL__CM_FILES;
        ld->cache_key[i] = (uint32_t)F;
        F += vt == SL__VAL_FILES ? f->count : 1;
    }
    if (F == 0) {
        sl__msg(err, errlen, "cache: no field of the schema reads a file (nothing to cache)");
        return SL_EINVAL;
    }
    if (ld->sampler.n * F >= UINT32_MAX) {
        sl__msg(err, errlen, "cache: %llu samples x %llu files a sample is more than 2^32-1 keys",
                (ull)ld->sampler.n, (ull)F);
        return SL_EINVAL;
    }
    ld->keys_per_sample = (uint32_t)F;
    return 0;
}

/* The node's ranks: [rank - local_rank, + local_world_size), from the
 * configuration, else torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE, else the
 * whole world on one node. */
static int node_ranks(const sl_loader *ld, uint32_t *lo, uint32_t *n, char *err, size_t errlen) {
    const sl_config *c = &ld->cfg;
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
static int shm_name(const sl_loader *ld, char *name, size_t len, char *err, size_t errlen) {
    const sl_config *c = &ld->cfg;
    uint64_t h = sl__hash64(c->fields ? c->fields : "", c->fields ? strlen(c->fields) : 0, ld->keys_per_sample);
    if (c->cache_what == SL_CACHE_DECODED) {
        uint64_t geo[4] = {c->size, (uint64_t)c->preset, c->flags, c->max_scans};
        h = sl__hash64(geo, sizeof geo, h);
        if (c->recipe) h = sl__hash64(c->recipe, sizeof *c->recipe, h);
    }
    char variant[80];
    snprintf(variant, sizeof variant, "%s;F=%u;%016llx", c->cache_what == SL_CACHE_DECODED ? "decoded" : "encoded",
             ld->keys_per_sample, (ull)h);
    return sl__cache_shm_name(name, len, c->source, c->seed, variant, err, errlen);
}

static int next_use(void *ctx, uint32_t key, uint64_t now, uint64_t *next) {
    sl_loader *ld = ctx;
    return sl__nextuse_query(&ld->nu, key / ld->keys_per_sample, now, next);
}

/* ---- the governor's lever (private cache) ------------------------------------------- */

/* Value bytes the cache may hold: its capacity less what the root's live
 * limit stands under its ceiling. */
static uint64_t cache_target(const sl_loader *ld) {
    const sl__budget *r = ld->budget->parent ? ld->budget->parent : ld->budget;
    uint64_t ceiling = atomic_load(&r->ceiling), limit = atomic_load(&r->limit);
    uint64_t deficit = ceiling > limit ? ceiling - limit : 0;
    return ld->cache_values > deficit ? ld->cache_values - deficit : 0;
}

static uint64_t cache_give_back(void *ctx, uint64_t want) {
    sl_loader *ld = ctx;
    sl__cache_stats st;
    sl__cache_stats_get(ld->cache, &st);
    uint64_t keep = st.bytes > want ? st.bytes - want : 0, target = cache_target(ld);
    sl__cache_set_capacity(ld->cache, SL_MIN(keep, target));
    uint64_t before = st.budget_bytes;
    sl__cache_stats_get(ld->cache, &st);
    return before > st.budget_bytes ? before - st.budget_bytes : 0;
}

static void cache_room(void *ctx) {
    sl_loader *ld = ctx;
    sl__cache_set_capacity(ld->cache, cache_target(ld));
}

/* ---- life ------------------------------------------------------------------------ */

int sl__lcache_create(sl_loader *ld, char *err, size_t errlen) {
    const sl_config *c = &ld->cfg;
    if (!c->cache) return 0;
    int node = c->cache_share == SL_CACHE_NODE;
    uint32_t lo = c->rank, ranks = 1;
    char name[96];
    int rc;
    if ((rc = layout_keys(ld, err, errlen)) || (node && (rc = node_ranks(ld, &lo, &ranks, err, errlen))) ||
        (node && (rc = shm_name(ld, name, sizeof name, err, errlen))))
        return rc;
    if ((rc = sl__nextuse_init(&ld->nu, ld->budget, &ld->sampler, lo, ranks))) {
        sl__msg(err, errlen, "cache: no room for the next-use order of %llu samples (%s)", (ull)ld->sampler.n,
                sl_strerror(rc));
        return rc;
    }
    sl__cache_opts o = {.capacity = c->cache,
                        .keys = (uint32_t)(ld->sampler.n * ld->keys_per_sample),
                        .epoch_len = ld->sampler.total,
                        .next_use = next_use,
                        .ctx = ld,
                        .shm_name = node ? name : NULL};
    char why[400];
    if ((rc = sl__cache_create(ld->budget, &o, &ld->cache, why, sizeof why))) {
        sl__msg(err, errlen, "cache: %s", why);
        return rc;
    }
    sl__cache_stats st;
    sl__cache_stats_get(ld->cache, &st);
    ld->cache_values = st.capacity;
    if (!node) {
        ld->cache_consumer = (sl__consumer){.give_back = cache_give_back, .room = cache_room, .ctx = ld,
                                            .shed_first = 1};
        sl__budget_add_consumer(ld->budget, &ld->cache_consumer);
        ld->cache_consumer_on = 1;
    }
    return 0;
}

void sl__lcache_destroy(sl_loader *ld) {
    if (ld->cache_consumer_on) sl__budget_remove_consumer(ld->budget, &ld->cache_consumer);
    ld->cache_consumer_on = 0;
    sl__cache_destroy(ld->cache);
    ld->cache = NULL;
    sl__nextuse_fini(&ld->nu);
}

void sl__lcache_epoch(sl_loader *ld, uint64_t epoch) {
    if (ld->cache) sl__nextuse_advance(&ld->nu, epoch);
}

void sl__lcache_jump(sl_loader *ld, uint64_t epoch, uint64_t pos) {
    if (!ld->cache) return;
    sl__nextuse_advance(&ld->nu, epoch);
    uint64_t t = sl__sampler_time(&ld->sampler, epoch, pos);
    sl__cache_refresh(ld->cache, t ? t - 1 : 0);
}

/* ---- a field's load ---------------------------------------------------------------- */

int sl__lcache_load(sl_loader *ld, sl__load *L, uint32_t i, uint8_t *dst, int64_t *len, char *reason) {
    const sl__field *f = &ld->schema.fields[i];
    int mode = ld->cache ? ld->cache_mode[i] : SL__CM_NONE;
    L->cache = mode == SL__CM_FILES ? ld->cache : NULL;
    L->key = ld->cache ? (uint32_t)(L->index * ld->keys_per_sample) + ld->cache_key[i] : 0;
    if (mode != SL__CM_OUTPUT) return f->kind->load(L, f, dst, len, reason, SL_REASON_LEN);
    size_t got = 0;
    int hit = sl__cache_get(ld->cache, L->key, L->now, dst, (size_t)f->sample_bytes, &got);
    atomic_fetch_add_explicit(hit == 1 ? &ld->fileio.hits : &ld->fileio.misses, 1, memory_order_relaxed);
    if (hit == 1 && got == f->sample_bytes) return 0;
    int rc = f->kind->load(L, f, dst, len, reason, SL_REASON_LEN);
    if (rc == 0) sl__cache_insert(ld->cache, L->key, L->now, dst, (size_t)f->sample_bytes);
    return rc;
}

void sl__lcache_stats(const sl_loader *ld, sl_stats *o) {
    sl_loader *m = (sl_loader *)ld; /* counters are atomics */
    o->cache_hits = atomic_load(&m->fileio.hits);
    o->cache_misses = atomic_load(&m->fileio.misses);
    o->storage_bytes_read = atomic_load(&m->fileio.storage);
    uint64_t looked = o->cache_hits + o->cache_misses;
    o->cache_hit_rate = looked ? (double)o->cache_hits / (double)looked : 0;
    if (!ld->cache) return;
    sl__cache_stats st;
    sl__cache_stats_get(ld->cache, &st);
    o->cache_bytes = st.bytes;
    o->cache_capacity = st.capacity;
    o->cache_evictions = st.evictions;
    o->cache_entries = st.entries;
    o->cache_shared = st.shared;
    o->cache_processes = st.processes;
}
