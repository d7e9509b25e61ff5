/*
 * The loader's life: create (validate the configuration, parse the schema,
 * index the source, lay out slots, size the pipeline against the budget,
 * carve the slots, start the workers), the public accessors, and destroy.
 * The slot machinery is in engine.c, one sample's load in worker.c; see
 * engine.c for the pipeline's invariants.
 *
 * Create runs in named steps. sl_loader_plan runs the same steps up to the
 * sizing and stops, so what it reports is what create would do.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/abi.h"
#include "base/budget.h"
#include "base/cpus.h"
#include "base/util.h"
#include "pipeline/loader_impl.h"

#define DEFAULT_BUDGET ((uint64_t)512 << 20)
#define DEFAULT_MAX_PIXELS (1ull << 26)
#define DEFAULT_MAX_BYTES ((uint64_t)64 << 20)

typedef unsigned long long ull;

void sl_config_init_sized(sl_config *c, size_t struct_size) {
    sl_config d;
    memset(&d, 0, sizeof d);
    d.struct_size = struct_size;
    d.batch_size = 256;
    d.size = 224;
    d.preset = SL_PRESET_TRAIN;
    d.shuffle = 1;
    d.world_size = 1;
    d.min_slots = 1;
    d.budget = DEFAULT_BUDGET;
    d.on_error = SL_ON_ERROR_SKIP;
    d.max_pixels = DEFAULT_MAX_PIXELS;
    d.max_bytes = DEFAULT_MAX_BYTES;
    d.max_error_records = 1000;
    d.max_error_rate = 0.1;
    d.worker_nice = SL_WORKER_NICE;
    sl__abi_out(c, struct_size, &d, sizeof d);
}

/* ---- step 1: the configuration ---------------------------------------------- */

static int validate(const sl_config *c, char *err, size_t errlen) {
#define BAD(...) do { sl__msg(err, errlen, __VA_ARGS__); return SL_EINVAL; } while (0)
    if (!c->source || !*c->source) BAD("source is empty");
    if (c->batch_size == 0 || c->batch_size > (1u << 20)) BAD("batch_size %u out of range 1..1048576", c->batch_size);
    if (c->size == 0 || c->size > 16384) BAD("size %u out of range 1..16384", c->size);
    if (c->preset != SL_PRESET_TRAIN && c->preset != SL_PRESET_VAL) BAD("preset %d is neither train nor val", c->preset);
    if (c->world_size == 0) BAD("world_size is 0");
    if (c->rank >= c->world_size) BAD("rank %u is not below world_size %u", c->rank, c->world_size);
    if (c->on_error != SL_ON_ERROR_SKIP && c->on_error != SL_ON_ERROR_RAISE) BAD("on_error %d unknown", c->on_error);
    if (c->workers > 1024) BAD("workers %u over 1024", c->workers);
    if (c->prefetch > 1024) BAD("prefetch %u over 1024", c->prefetch);
    if (c->min_slots > 1024) BAD("min_slots %u over 1024", c->min_slots);
    if (c->budget == 0 && !c->shared_budget) BAD("budget is 0");
    if (c->flags & ~(SL_FLAG_CHECKSUM | SL_FLAG_EXIF | SL_FLAG_KEEP_ALPHA | SL_FLAG_FAST)) BAD("unknown flags 0x%x", c->flags);
    sl__recipe recipe;
    int rc = sl__recipe_from_config(c, &recipe, err, errlen);
    if (rc) return rc;
    if (c->max_error_records > (1u << 20)) BAD("max_error_records over 1048576");
    if (!(c->max_error_rate >= 0)) BAD("max_error_rate %g is not a fraction >= 0 (1 = never stop)", c->max_error_rate);
    if (c->cache_share != SL_CACHE_PRIVATE && c->cache_share != SL_CACHE_NODE)
        BAD("cache_share %d is neither private (0) nor node (1)", c->cache_share);
    if (c->cache_what != SL_CACHE_ENCODED && c->cache_what != SL_CACHE_DECODED)
        BAD("cache_what %d is neither encoded (0) nor decoded (1)", c->cache_what);
    if (c->decode != SL_DECODE_CPU && c->decode != SL_DECODE_AUTO && c->decode != SL_DECODE_GPU)
        BAD("decode %d is none of SL_DECODE_CPU, SL_DECODE_AUTO, SL_DECODE_GPU", c->decode);
    if (c->gpu_device < 0) BAD("gpu_device %d is negative", c->gpu_device);
    if (c->worker_nice < 0 || c->worker_nice > 19) BAD("worker_nice %d out of range 0..19", c->worker_nice);
    if ((c->order_begin || c->order_end) && c->order_begin >= c->order_end)
        BAD("order range [%llu, %llu) is empty (0, 0: the whole order)", (ull)c->order_begin, (ull)c->order_end);
    return 0;
#undef BAD
}

/* Copy the caller's configuration over the defaults (a caller built with
 * an older header leaves the newer fields at their defaults); dst->recipe
 * points at *recipe, the recipe it asks for. */
static int copy_config(sl_config *dst, sl_image_recipe *recipe, const sl_config *cfg, char *err, size_t errlen) {
    int rc = sl__config_import(dst, recipe, cfg, err, errlen);
    if (rc) return rc;
    if (dst->max_pixels == 0) dst->max_pixels = DEFAULT_MAX_PIXELS;
    if (dst->max_bytes == 0) dst->max_bytes = DEFAULT_MAX_BYTES;
    if (dst->min_slots == 0) dst->min_slots = 1;
    return validate(dst, err, errlen);
}

/* An allocation of n bytes came back NULL at create (one thread): the
 * budget could not hold it (SL_EBUDGET) or the system refused (SL_ENOMEM). */
static int alloc_fail_code(const sl_loader *ld, uint64_t n) {
    uint64_t used = atomic_load(&ld->budget->used), need;
    if (n > SIZE_MAX || sl__add(used, sl__alloc_cost((size_t)n), &need) || need > sl__budget_limit(ld->budget))
        return SL_EBUDGET;
    return SL_ENOMEM;
}

/* mu, errmu and the condition variables (cv_ready on the monotonic clock,
 * for sl_loader_next_timeout's deadline). 0, or SL_ESYS with none left. */
static int init_sync(sl_loader *ld) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return SL_ESYS;
    int n = 0; /* objects made, in this order */
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_mutex_init(&ld->mu, NULL) == 0 && ++n &&
        pthread_mutex_init(&ld->errmu, NULL) == 0 && ++n && pthread_cond_init(&ld->cv_work, NULL) == 0 && ++n &&
        pthread_cond_init(&ld->cv_ready, &ca) == 0 && ++n && pthread_cond_init(&ld->cv_quiet, NULL) == 0)
        ld->sync_init = 1;
    pthread_condattr_destroy(&ca);
    if (ld->sync_init) return 0;
    if (n > 3) pthread_cond_destroy(&ld->cv_ready);
    if (n > 2) pthread_cond_destroy(&ld->cv_work);
    if (n > 1) pthread_mutex_destroy(&ld->errmu);
    if (n > 0) pthread_mutex_destroy(&ld->mu);
    return SL_ESYS;
}

/* A shared budget (sl_budget): the loader's own budget becomes a child of
 * the shared one. While the loader is created it is capped at what the
 * shared budget has left, so the sizing below and its messages read as for
 * a private budget of that size; once it runs the cap is lifted
 * (sl__budget_unbind_limit) and only the shared limit binds. */
static void attach_shared(sl_loader *ld) {
    sl__budget *core = sl__shared_core(ld->cfg.shared_budget);
    uint64_t limit = sl__budget_limit(core), used = atomic_load(&core->used);
    uint64_t left = limit > used ? limit - used : 0;
    atomic_store(&ld->own_budget.limit, left);
    atomic_store(&ld->own_budget.ceiling, left);
    ld->cfg.budget = left;
    sl__budget_attach(&ld->own_budget, core);
    sl__shared_ref(ld->cfg.shared_budget);
    ld->shared = 1;
}

/* Say that the budget that was short is what a shared budget had left. */
static void shared_reason(sl_loader *ld, char *err, size_t errlen) {
    if (!ld->shared || !err || !errlen) return;
    char tmp[512], x[32];
    sl__budget *core = sl__shared_core(ld->cfg.shared_budget);
    snprintf(tmp, sizeof tmp, "shared budget of %s (what its other loaders leave): %s",
             sl__fmt_bytes(sl__budget_limit(core), x, sizeof x), err);
    snprintf(err, errlen, "%s", tmp);
}

/* Undo what step_new did before the locks exist. */
static void free_new(sl_loader *ld) {
    if (ld->counted_self) sl__budget_release(ld->budget, sizeof *ld, SL_MEM_OTHER);
    sl__budget_fini(&ld->own_budget);
    if (ld->shared) sl__shared_unref(ld->cfg.shared_budget);
    free(ld);
}

/* A new loader holding its configuration, budget and locks; nothing else. */
static int step_new(const sl_config *cfg, sl_loader **out, char *err, size_t errlen) {
    sl_config c;
    sl_image_recipe recipe;
    int rc = copy_config(&c, &recipe, cfg, err, errlen);
    if (rc) return rc;
    sl_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return SL_ENOMEM;
    ld->cfg = c;
    ld->recipe = recipe;
    ld->cfg.recipe = &ld->recipe;
    ld->budget = &ld->own_budget;
    if ((rc = sl__budget_init(ld->budget, c.budget))) {
        free(ld);
        sl__msg(err, errlen, "could not make the budget's lock");
        return rc;
    }
    if (c.shared_budget) attach_shared(ld); /* sized against what the shared budget has left */
    /* the loader's own struct (schema, layout, counters) is counted too */
    if (sl__budget_try(ld->budget, sizeof *ld, SL_MEM_OTHER)) {
        char b1[32], b2[32];
        sl__msg(err, errlen, "budget of %s cannot hold the loader's own state (%s)",
                sl__fmt_bytes(ld->cfg.budget, b1, sizeof b1), sl__fmt_bytes(sizeof *ld, b2, sizeof b2));
        shared_reason(ld, err, errlen);
        free_new(ld);
        return SL_EBUDGET;
    }
    ld->counted_self = 1;
    if ((rc = init_sync(ld))) {
        free_new(ld);
        sl__msg(err, errlen, "could not make the loader's locks");
        return rc;
    }
    ld->owner_pid = (long)getpid();
    ld->sample_cap = sl__sample_cap(ld->cfg.budget);
    sl__budget_set_room(ld->budget, ld->sample_cap); /* the governor keeps this above the fixed part */
    ld->nworkers = c.workers ? c.workers : sl__local_share_cpus(); /* a rank's share of its CPUs */
    ld->B = c.batch_size;
    *out = ld;
    /* the strings the configuration points at are the caller's: copy them */
    ld->source_path = sl__strdup(ld->budget, c.source, SL_MEM_INDEX);
    ld->fields_json = c.fields ? sl__strdup(ld->budget, c.fields, SL_MEM_INDEX) : NULL;
    ld->cfg.source = ld->source_path;
    ld->cfg.fields = ld->fields_json;
    if (!ld->source_path || (c.fields && !ld->fields_json)) {
        char b1[32];
        rc = alloc_fail_code(ld, strlen(c.source) + (c.fields ? strlen(c.fields) : 0) + 2);
        sl__msg(err, errlen, "budget of %s cannot hold the source path and schema",
                sl__fmt_bytes(ld->cfg.budget, b1, sizeof b1));
        return rc;
    }
    return 0;
}

/* ---- step 2: schema, index, layout, sampler ------------------------------------- */

static int step_index(sl_loader *ld, char *err, size_t errlen) {
    const sl_config *cfg = &ld->cfg;
    int rc = sl__schema_parse(cfg, &ld->schema, err, errlen);
    if (rc) return rc;
    sl__colreq req[SL__MAX_FIELDS];
    uint32_t nreq = sl__schema_columns(&ld->schema, req);
    uint64_t t0 = sl__now_ns();
    rc = sl__source_open_cols(ld->budget, cfg->source, ld->nworkers, cfg->fields ? req : NULL, cfg->fields ? nreq : 0,
                              &ld->src, err, errlen);
    if (rc) return rc;
    ld->index_seconds = (double)(sl__now_ns() - t0) / 1e9;
    if ((rc = sl__schema_resolve(&ld->schema, ld->src, err, errlen))) return rc;
    if ((rc = sl__layout_build(&ld->layout, &ld->schema, ld->B))) {
        sl__msg(err, errlen, "a batch of %u samples of %llu bytes overflows", ld->B, (ull)ld->layout.sample_bytes);
        return rc;
    }
    uint64_t N = sl__source_count(ld->src);
    if (N > UINT32_MAX) {
        sl__msg(err, errlen, "dataset has %llu samples, more than 2^32-1", (ull)N);
        return SL_EINVAL;
    }
    rc = sl__sampler_init(&ld->sampler, N, cfg->rank, cfg->world_size, cfg->shuffle, cfg->drop_last, cfg->seed);
    if (rc) {
        sl__msg(err, errlen, "dataset of %llu samples leaves rank %u of %u nothing", (ull)N, cfg->rank, cfg->world_size);
        return rc;
    }
    if (cfg->order_end && (rc = sl__sampler_range(&ld->sampler, cfg->order_begin, cfg->order_end))) {
        if (rc == SL_EINVAL)
            sl__msg(err, errlen, "order range [%llu, %llu) is not inside the dataset's order of %llu samples",
                    (ull)cfg->order_begin, (ull)cfg->order_end, (ull)N);
        else
            sl__msg(err, errlen, "order range [%llu, %llu) leaves rank %u of %u nothing", (ull)cfg->order_begin,
                    (ull)cfg->order_end, cfg->rank, cfg->world_size);
        return rc;
    }
    uint64_t per = ld->sampler.per_rank;
    ld->nbatches = cfg->drop_last ? per / ld->B : (per + ld->B - 1) / ld->B;
    if (ld->nbatches == 0) {
        sl__msg(err, errlen, "%llu samples per rank is less than one batch of %u with drop_last", (ull)per, ld->B);
        return SL_EEMPTY;
    }
    return 0;
}

/* ---- step 3: order buffers, error records, worker table (fixed) ------------------ */

static int step_tables(sl_loader *ld, char *err, size_t errlen) {
    const sl_config *cfg = &ld->cfg;
    uint64_t N = ld->sampler.n, per = ld->sampler.per_rank;
    size_t seqb = (size_t)per * sizeof(uint32_t);
    ld->seq[0] = sl__alloc(ld->budget, seqb, SL_MEM_INDEX);
    ld->seq[1] = sl__alloc(ld->budget, seqb, SL_MEM_INDEX);
    int tmp = cfg->world_size > 1 || per < N; /* seq cannot hold the permutation: ranks, an order range */
    if (tmp) ld->seq_tmp = sl__alloc(ld->budget, (size_t)N * sizeof(uint32_t), SL_MEM_INDEX);
    ld->errs = sl__calloc(ld->budget, SL_MAX(cfg->max_error_records, 1), sizeof(sl__error), SL_MEM_OTHER);
    ld->workers = sl__calloc(ld->budget, ld->nworkers, sizeof(sl__worker), SL_MEM_OTHER);
    if (ld->seq[0] && ld->seq[1] && (!tmp || ld->seq_tmp) && ld->errs && ld->workers) return 0;
    /* the budget is to blame only if the smallest refused block did not fit */
    uint64_t want = UINT64_MAX;
    if (!ld->seq[0] || !ld->seq[1]) want = SL_MIN(want, seqb);
    if (tmp && !ld->seq_tmp) want = SL_MIN(want, N * 4);
    if (!ld->errs) want = SL_MIN(want, (uint64_t)SL_MAX(cfg->max_error_records, 1) * sizeof(sl__error));
    if (!ld->workers) want = SL_MIN(want, (uint64_t)ld->nworkers * sizeof(sl__worker));
    int rc = alloc_fail_code(ld, want);
    char b1[32];
    if (rc == SL_EBUDGET)
        sl__msg(err, errlen, "budget of %s cannot hold the sample order and bookkeeping for %llu samples",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), (ull)N);
    else
        sl__msg(err, errlen, "out of memory for the sample order and bookkeeping of %llu samples", (ull)N);
    return rc;
}

/* ---- step 4: sizing -------------------------------------------------------------- */

/* The smallest budget b whose fixed part can be `fixed` with a quarter of
 * b (sl__sample_cap) left for one sample: b - b/4 >= fixed. */
static uint64_t min_budget_for(uint64_t fixed) {
    if (fixed > UINT64_MAX / 2) return UINT64_MAX;
    uint64_t b = fixed + fixed / 3;
    while (b - sl__sample_cap(b) < fixed) b++;
    while (b > 0 && (b - 1) - sl__sample_cap(b - 1) >= fixed) b--;
    return b;
}

/* A slot's block in the region: the layout's stride rounded up to pages,
 * so a retired slot gives its own pages back (engine.c). */
static uint64_t slot_pitch(const sl_loader *ld) {
    uint64_t ps = sl__page_size(), stride = ld->layout.stride;
    return stride > UINT64_MAX / 4 ? UINT64_MAX / 4 : (stride + ps - 1) / ps * ps;
}

/* What n slots count: their blocks and their sl_batch entries (saturating
 * far above any budget). */
static uint64_t slots_cost(uint64_t pitch, uint64_t n) {
    uint64_t per = pitch + sizeof(sl_batch);
    return n && per > (UINT64_MAX / 4) / n ? UINT64_MAX / 4 : per * n;
}

/* The pipeline's sizes for this budget: what plan reports and create
 * carves. The minimum working set is max(min_slots, prefetch) batch slots
 * + the worker baselines + what is held already (index, orders, records),
 * and it must leave a quarter of the budget for one sample's growth
 * (admit.c): the minimum budget is that x 4/3. (Of the slots carved, only
 * min_slots are fixed for life: step_workers.) */
static int step_size(sl_loader *ld, sl_plan *p, char *err, size_t errlen) {
    const sl_config *cfg = &ld->cfg;
    uint64_t pitch = slot_pitch(ld);
    uint64_t per_worker = sl__alloc_cost(SL_WORKER_READ_BASE) + SL_WORKER_DEC_BASE + SL_WORKER_STACK;
    uint64_t workers_b = per_worker * ld->nworkers, used = atomic_load(&ld->budget->used);
    uint64_t min_slots = SL_MAX(cfg->min_slots, cfg->prefetch ? cfg->prefetch : 1);
    uint64_t slot_cost = pitch + sizeof(sl_batch);
    uint64_t fixed_min = used + workers_b + slots_cost(pitch, min_slots) + 4096;
    uint64_t cache = sl__lcache_reserve(ld); /* kept free of the pipeline (lcache.c) */
    uint64_t minimum = min_budget_for(fixed_min + cache);
    memset(p, 0, sizeof *p);
    p->dataset_size = ld->sampler.n;
    p->samples_per_rank = ld->sampler.per_rank;
    p->batches = ld->nbatches;
    p->workers = ld->nworkers;
    p->num_fields = ld->layout.nout;
    p->sample_bytes = ld->layout.sample_bytes;
    p->slot_bytes = slot_cost;
    p->worker_bytes = per_worker;
    p->index_bytes = used;
    p->min_budget = minimum;
    p->index_seconds = ld->index_seconds;
    if (cache && fixed_min + ld->sample_cap <= cfg->budget && fixed_min + cache + ld->sample_cap > cfg->budget) {
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        p->slots = (uint32_t)min_slots;
        p->fixed_bytes = fixed_min;
        sl__msg(err, errlen,
                "budget %s cannot hold the sample cache of %s (with its next-use order, %s in all) beside the "
                "pipeline's minimum working set of %s; raise the budget to at least %s, give the cache less, or "
                "share a node cache (cache_share=node: its own /dev/shm segment, outside the budget)",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), sl__fmt_bytes(cfg->cache, b2, sizeof b2),
                sl__fmt_bytes(cache, b3, sizeof b3), sl__fmt_bytes(min_budget_for(fixed_min), b4, sizeof b4),
                sl__fmt_bytes(minimum, b5, sizeof b5));
        return SL_EBUDGET;
    }
    if (fixed_min + cache + ld->sample_cap > cfg->budget || fixed_min + cache > cfg->budget) {
        char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32];
        p->slots = (uint32_t)min_slots;
        p->fixed_bytes = fixed_min;
        sl__msg(err, errlen,
                "budget %s is below the minimum working set of %s for this pipeline: %llu batch slot(s) of %s "
                "(batch %u x %s a sample) + %u workers x %s scratch + %s index%s%s, with a quarter of the budget "
                "kept for one sample's decode; raise the budget to at least %s or lower the batch size, sample "
                "size or workers%s",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), sl__fmt_bytes(minimum, b2, sizeof b2), (ull)min_slots,
                sl__fmt_bytes(pitch, b3, sizeof b3), ld->B, sl__fmt_bytes(ld->layout.sample_bytes, b5, sizeof b5),
                ld->nworkers, sl__fmt_bytes(per_worker, b4, sizeof b4), sl__fmt_bytes(used, b6, sizeof b6),
                cache ? " + the sample cache's " : "", cache ? sl__fmt_bytes(cache, b7, sizeof b7) : "",
                sl__fmt_bytes(minimum, b2, sizeof b2), cache ? ", or the cache" : "");
        return SL_EBUDGET;
    }
    uint32_t nslots;
    if (cfg->prefetch) {
        nslots = cfg->prefetch;
    } else {
        /* as many as fit, leaving a sample's room (a quarter) for scratch
         * to grow, at most max(4, 4 * workers / batch) */
        uint64_t room = cfg->budget - used - workers_b - 4096 - ld->sample_cap - cache;
        uint64_t fit = room / slot_cost;
        uint64_t cap = SL_MAX(4, (4ull * ld->nworkers + ld->B - 1) / ld->B);
        nslots = (uint32_t)SL_MAX(SL_MIN(fit, cap), min_slots);
        while (nslots > min_slots && used + workers_b + slots_cost(pitch, nslots) + 4096 + ld->sample_cap + cache > cfg->budget)
            nslots--;
    }
    p->slots = nslots;
    p->fixed_bytes = used + workers_b + slots_cost(pitch, nslots);
    return 0;
}

/* ---- step 5: slots and workers ------------------------------------------------- */

/* The region: one private mapping of nslots blocks of pitch bytes,
 * counted under SL_MEM_BATCHES. Slots past min_slots are elastic: counted,
 * not fixed (step_workers), so a lowered limit can retire them (engine.c). */
static int step_slots(sl_loader *ld, const sl_plan *p, char *err, size_t errlen) {
    char b1[32], b2[32], b3[32];
    uint64_t pitch = slot_pitch(ld), len;
    ld->nslots = p->slots;
    ld->pitch = (size_t)pitch;
    int rc = sl__mul(pitch, p->slots, &len) || len > SIZE_MAX / 2 ? SL_EBUDGET : sl__budget_try(ld->budget, len, SL_MEM_BATCHES);
    if (rc == 0 && !(ld->region = sl__map_prepaid((size_t)len))) {
        sl__budget_release(ld->budget, len, SL_MEM_BATCHES);
        rc = SL_ENOMEM;
    }
    if (rc == 0) { /* from here free_memory gives back live * pitch */
        ld->region_len = (size_t)len;
        ld->live = ld->nslots;
        ld->min_live = SL_MIN(ld->cfg.min_slots, ld->nslots);
        if (!(ld->slots = sl__calloc(ld->budget, ld->nslots, sizeof(sl_batch), SL_MEM_OTHER)))
            rc = alloc_fail_code(ld, (uint64_t)ld->nslots * sizeof(sl_batch));
    }
    if (rc) {
        if (rc == SL_EBUDGET)
            sl__msg(err, errlen, "budget %s cannot hold %u batch slots of %s (prefetch): minimum working set is %s",
                    sl__fmt_bytes(ld->cfg.budget, b1, sizeof b1), ld->nslots, sl__fmt_bytes(pitch, b2, sizeof b2),
                    sl__fmt_bytes(p->min_budget, b3, sizeof b3));
        else
            sl__msg(err, errlen, "out of memory for %u batch slots of %s", ld->nslots, sl__fmt_bytes(pitch, b2, sizeof b2));
        return rc;
    }
    for (uint32_t i = 0; i < ld->nslots; i++) {
        ld->slots[i].ld = ld;
        ld->slots[i].id = i;
        sl__slot_carve(ld, &ld->slots[i], ld->region + (uint64_t)i * pitch);
    }
    return sl__gstage_slots(ld, err, errlen); /* their device memory, with GPU decode */
}

static void stop_workers(sl_loader *ld, uint32_t n) {
    pthread_mutex_lock(&ld->mu);
    ld->stop = 1;
    atomic_store(&ld->cancel, 1);
    pthread_cond_broadcast(&ld->cv_work);
    pthread_cond_broadcast(&ld->cv_ready);
    pthread_mutex_unlock(&ld->mu);
    sl__budget_close(ld->budget);
    for (uint32_t i = 0; i < n; i++) pthread_join(ld->workers[i].thread, NULL);
    sl__gstage_stop(ld);
}

/* Start the workers with every asynchronous signal blocked (they inherit
 * the mask), so Ctrl-C and friends go to the caller's threads; synchronous
 * ones (a fault) stay deliverable. 0 or SL_ESYS (the started ones stopped). */
static int start_workers(sl_loader *ld, char *err, size_t errlen) {
    sigset_t all, old;
    sigfillset(&all);
    static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&all, sync_signals[i]);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr)) {
        sl__msg(err, errlen, "could not make thread attributes");
        return SL_ESYS;
    }
    pthread_attr_setstacksize(&attr, SL_WORKER_STACK);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    for (uint32_t i = 0; i < ld->nworkers && !rc; i++) {
        if (pthread_create(&ld->workers[i].thread, &attr, sl__worker_main, &ld->workers[i])) {
            stop_workers(ld, i);
            sl__msg(err, errlen, "could not start worker thread %u", i);
            rc = SL_ESYS;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* Worker baselines (fixed for life), the first epoch's order, the threads;
 * returns once every worker runs. */
static int step_workers(sl_loader *ld, char *err, size_t errlen) {
    int rc;
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        if ((rc = sl__worker_init(&ld->workers[i], ld, i))) {
            for (uint32_t j = 0; j < i; j++) sl__worker_fini(&ld->workers[j]);
            memset(ld->workers, 0, sizeof(sl__worker) * ld->nworkers);
            sl__msg(err, errlen, "worker scratch: %s", sl_strerror(rc));
            return rc;
        }
    }
    /* everything held now is fixed for life but the elastic slots (the GPU
     * engine fixed its pinned pool already) */
    sl__budget_fix(ld->budget, atomic_load(&ld->budget->used) - atomic_load(&ld->budget->fixed) -
                                   (uint64_t)(ld->nslots - ld->min_live) * ld->pitch);
    if (sl__budget_headroom(ld->budget) < ld->sample_cap) { /* allocation rounding ate into it */
        char b1[32], b2[32];
        sl__msg(err, errlen, "budget %s: the fixed part of %s leaves less than a quarter for one sample; raise it",
                sl__fmt_bytes(ld->cfg.budget, b1, sizeof b1), sl__fmt_bytes(atomic_load(&ld->budget->fixed), b2, sizeof b2));
        return SL_EBUDGET;
    }
    if ((rc = sl__admit_check(ld, err, errlen))) return rc;
    uint64_t per = ld->sampler.per_rank;
    sl__order_for(ld, 0);
    ld->d_epoch = 0;
    ld->d_batch = 0;
    ld->tail = per;
    ld->d_open = 1;
    ld->cur_tail = per;

    if ((rc = start_workers(ld, err, errlen))) return rc;
    /* handshake: return only once every worker runs */
    pthread_mutex_lock(&ld->mu);
    while (ld->started < ld->nworkers) pthread_cond_wait(&ld->cv_ready, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    if ((rc = sl__gstage_start(ld, err, errlen))) stop_workers(ld, ld->nworkers);
    return rc;
}

/* Free what the loader allocated. In a child of fork() the decoders are
 * left alone: a decode may have been mid-call in the parent at the fork. */
static void free_memory(sl_loader *ld, int in_child) {
    sl__budget *b = ld->budget;
    sl__gstage_close(ld, in_child);
    /* The cache first (its values are counted in b). In a child of fork()
     * it is left alone: a node cache's process slot is the parent's, and
     * its locks may have been held by the parent's threads at the fork. */
    if (!in_child) sl__lcache_destroy(ld);
    for (uint32_t i = 0; ld->workers && i < ld->nworkers; i++) {
        sl__worker *w = &ld->workers[i];
        if (!in_child) sl__worker_fini(w);
        else if (w->ld) sl__scratch_fini(&w->scratch);
    }
    sl__free(b, ld->workers);
    sl__free(b, ld->slots);
    if (ld->region) { /* retired slots gave their bytes back already */
        sl__unmap_prepaid(ld->region, ld->region_len);
        sl__budget_release(b, (uint64_t)ld->live * ld->pitch, SL_MEM_BATCHES);
    }
    sl__free(b, ld->seq[0]);
    sl__free(b, ld->seq[1]);
    sl__free(b, ld->seq_tmp);
    sl__free(b, ld->span_gone[0]);
    sl__free(b, ld->span_gone[1]);
    sl__free(b, ld->errs);
    sl__free(b, ld->source_path);
    sl__free(b, ld->fields_json);
    if (ld->src) sl__source_close(ld->src);
    sl__schema_fini(&ld->schema);
    if (ld->counted_self) sl__budget_release(b, sizeof *ld, SL_MEM_OTHER);
}

static void free_all(sl_loader *ld) {
    free_memory(ld, 0);
    if (ld->sync_init) {
        pthread_cond_destroy(&ld->cv_work);
        pthread_cond_destroy(&ld->cv_ready);
        pthread_cond_destroy(&ld->cv_quiet);
        pthread_mutex_destroy(&ld->mu);
        pthread_mutex_destroy(&ld->errmu);
    }
    sl__budget_fini(&ld->own_budget);
    if (ld->shared) sl__shared_unref(ld->cfg.shared_budget);
    free(ld);
}

/* In a child of fork(): free this process's copy of the loader without
 * touching a lock or a condition variable (the parent's threads may have
 * held any of them at the fork, and they do not exist here, so waiting or
 * destroying could hang forever). */
static void destroy_in_child(sl_loader *ld) {
    atomic_store(&ld->budget->waiters, 0); /* they were the parent's threads: nobody to wake */
    if (ld->consumer_on) sl__budget_forget_consumer(ld->budget, &ld->consumer);
    free_memory(ld, 1);
    free(ld);
}

/* ---- public: create, plan, destroy ------------------------------------------- */

int sl_loader_create(const sl_config *cfg, sl_loader **out, char *err, size_t errlen) {
    if (!cfg || !out) return SL_EINVAL;
    *out = NULL;
    sl_loader *ld = NULL;
    sl_plan plan;
    int rc = step_new(cfg, &ld, err, errlen);
    if (!rc) rc = step_index(ld, err, errlen);
    if (!rc) rc = step_tables(ld, err, errlen);
    if (!rc) rc = sl__gstage_open(ld, 0, err, errlen); /* GPU decode: engine and pinned staging, before sizing */
    if (!rc) rc = step_size(ld, &plan, err, errlen);
    if (!rc) rc = step_slots(ld, &plan, err, errlen);
    if (!rc) rc = sl__lcache_create(ld, err, errlen); /* the sample cache: sizing kept its room */
    if (!rc) rc = step_workers(ld, err, errlen);
    if (rc) {
        if (ld && rc == SL_EBUDGET) shared_reason(ld, err, errlen);
        if (ld) free_all(ld);
        return rc;
    }
    if (ld->shared) sl__budget_unbind_limit(ld->budget);
    /* from here a moved limit retires or brings back elastic slots */
    sl__slots_consumer_init(ld);
    sl__budget_add_consumer(ld->budget, &ld->consumer);
    ld->consumer_on = 1;
    sl__registry_add(ld);
    *out = ld;
    return 0;
}

int sl_loader_plan_sized(const sl_config *cfg, sl_plan *out, size_t out_size, char *err, size_t errlen) {
    if (!cfg || !out || out_size == 0) return SL_EINVAL;
    sl_loader *ld = NULL;
    sl_plan plan;
    memset(&plan, 0, sizeof plan);
    int rc = step_new(cfg, &ld, err, errlen);
    if (!rc) rc = step_index(ld, err, errlen);
    if (!rc) rc = step_tables(ld, err, errlen);
    if (!rc) rc = sl__gstage_open(ld, 1, err, errlen);
    if (!rc) {
        rc = step_size(ld, &plan, err, errlen);
        if (rc == SL_EBUDGET) rc = 0; /* plan.min_budget says what is needed */
    }
    if (ld) free_all(ld);
    if (!rc) memcpy(out, &plan, SL_MIN(out_size, sizeof plan));
    return rc;
}

void sl_loader_destroy(sl_loader *ld) {
    if (!ld || !sl__registry_remove(ld)) return; /* NULL, or not a live loader (destroyed already) */
    if (ld->forked) {
        destroy_in_child(ld);
        return;
    }
    /* first: no limit move may reach the loader while it goes (this waits
     * for a notification in progress) */
    if (ld->consumer_on) sl__budget_remove_consumer(ld->budget, &ld->consumer);
    stop_workers(ld, ld->nworkers);
    free_all(ld);
}

uint64_t sl_loader_len(const sl_loader *ld) { return ld ? ld->nbatches : 0; }
uint64_t sl_loader_num_samples(const sl_loader *ld) { return ld ? ld->sampler.per_rank : 0; }
uint64_t sl_loader_dataset_size(const sl_loader *ld) { return ld ? ld->sampler.n : 0; }

const char *sl_loader_sample_path(const sl_loader *ld, uint64_t index, char *buf, size_t len) {
    if (!ld || !buf || index >= ld->sampler.n) return NULL;
    return sl__source_path(ld->src, index, buf, len) >= 0 ? buf : NULL;
}

int sl_loader_slot_region(const sl_loader *cld, void **base, size_t *len) {
    if (!cld || !base || !len) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->forked) return SL_ESTATE;
    int rc = sl__slots_pin(ld, NULL, 0);
    if (rc) return rc;
    *base = ld->region;
    *len = ld->region_len;
    return 0;
}

/* ---- batches -------------------------------------------------------------- */

int sl_batch_num_fields(const sl_batch *b) { return b ? (int)b->ld->layout.nout : 0; }

int sl_batch_field_sized(const sl_batch *b, int i, sl_field *out, size_t out_size) {
    if (!b || !out || out_size == 0 || i < 0 || (uint32_t)i >= b->ld->layout.nout) return SL_EINVAL;
    sl_field f;
    sl__layout_field(&b->ld->layout, b->base, (uint32_t)i, b->n, &f);
    uint64_t dev = sl__gstage_data(b->ld, b, (uint32_t)i);
    if (dev) { /* decoded into device memory (GPU decode) */
        f.data = (void *)(uintptr_t)dev;
        f.device_type = b->ld->gs.dev.device_type;
        f.device_id = b->ld->gs.dev.device_id;
    }
    memcpy(out, &f, SL_MIN(out_size, sizeof f));
    return 0;
}

int sl_batch_find_sized(const sl_batch *b, const char *name, sl_field *out, size_t out_size) {
    if (!b || !name) return SL_EINVAL;
    for (uint32_t i = 0; i < b->ld->layout.nout; i++)
        if (!strcmp(b->ld->layout.out[i].name, name)) return sl_batch_field_sized(b, (int)i, out, out_size);
    return SL_EINVAL;
}

/* The calls of callers built before sl_field grew device_type. */
#undef sl_batch_field
#undef sl_batch_find
int sl_batch_field(const sl_batch *b, int i, sl_field *f) {
    return sl_batch_field_sized(b, i, f, offsetof(sl_field, device_type));
}
int sl_batch_find(const sl_batch *b, const char *name, sl_field *f) {
    return sl_batch_find_sized(b, name, f, offsetof(sl_field, device_type));
}

uint32_t sl_batch_len(const sl_batch *b) { return b ? b->n : 0; }
uint64_t sl_batch_epoch(const sl_batch *b) { return b ? b->epoch : 0; }
uint64_t sl_batch_index(const sl_batch *b) { return b ? b->batch : 0; }
uint64_t sl_batch_checksum(const sl_batch *b) { return b ? b->checksum : 0; }

/* ---- stats, errors ------------------------------------------------------ */

int sl_loader_stats_sized(const sl_loader *cld, sl_stats *out, size_t out_size) {
    if (!cld || !out || out_size == 0) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    sl_stats st, *o = &st;
    memset(o, 0, sizeof *o);
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    o->samples = ld->samples_out;
    o->batches = ld->batches_out;
    o->epoch = ld->cur_epoch;
    o->seconds = ld->t_first_ns ? (double)(sl__now_ns() - ld->t_first_ns) / 1e9 : 0;
    o->consumer_wait_s = (double)ld->wait_ns / 1e9;
    o->slots = ld->live;
    o->slots_held = ld->held;
    o->slots_ready = ld->ready;
    o->slots_retired = ld->nslots - ld->live;
    o->slots_min = ld->min_live;
    o->slot_retirements = ld->retirements;
    o->slot_reactivations = ld->reactivations;
    o->errors = ld->nerrs_seen;
    pthread_mutex_unlock(&ld->mu);
    o->samples_per_s = o->seconds > 0 ? (double)o->samples / o->seconds : 0;
    o->workers = ld->nworkers;
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        o->worker_busy_s += (double)atomic_load(&ld->workers[i].busy_ns) / 1e9;
        o->worker_idle_s += (double)atomic_load(&ld->workers[i].idle_ns) / 1e9;
    }
    o->budget_wait_s = (double)atomic_load(&ld->budget->wait_ns) / 1e9;
    o->budget_bytes = sl__budget_limit(ld->budget);
    o->accounted_bytes = atomic_load(&ld->budget->used);
    o->peak_accounted_bytes = atomic_load(&ld->budget->peak);
    o->fixed_bytes = atomic_load(&ld->budget->fixed);
    o->mem_count = SL_MEM__COUNT;
    for (int c = 0; c < SL_MEM__COUNT; c++) {
        o->mem[c] = atomic_load(&ld->budget->cat[c]);
        o->mem_peak[c] = atomic_load(&ld->budget->cat_peak[c]);
    }
    memcpy(o->reserved_0_1_mem, o->mem, sizeof o->reserved_0_1_mem); /* 0.1's arrays, where its callers look */
    memcpy(o->reserved_0_1_mem_peak, o->mem_peak, sizeof o->reserved_0_1_mem_peak);
    o->index_seconds = ld->index_seconds;
    sl__lcache_stats(ld, o);
    sl__gstage_stats(ld, o);
    sl__abi_out(out, out_size, o, sizeof *o);
    return 0;
}

void sl__record_error(sl_loader *ld, sl_batch *s, uint64_t index, int code, const char *reason) {
    s->nerr++;
    pthread_mutex_lock(&ld->errmu);
    if (ld->nerrs_kept < ld->cfg.max_error_records) {
        sl__error *e = &ld->errs[ld->nerrs_kept++];
        e->cno = s->cno;
        e->rec.index = index;
        e->rec.epoch = s->epoch;
        e->rec.code = code;
        snprintf(e->rec.reason, sizeof e->rec.reason, "%s", reason && *reason ? reason : sl_strerror(code));
    }
    pthread_mutex_unlock(&ld->errmu);
    /* the newest one of the batch, kept whatever max_error_records says */
    s->last_err.index = index;
    s->last_err.epoch = s->epoch;
    s->last_err.code = code;
    snprintf(s->last_err.reason, sizeof s->last_err.reason, "%s", reason && *reason ? reason : sl_strerror(code));
}

size_t sl_loader_errors_sized(const sl_loader *cld, size_t first, sl_error_record *out, size_t max,
                              size_t elem_size) {
    if (!cld || !out || !elem_size || cld->forked) return 0;
    sl_loader *ld = (sl_loader *)cld;
    uint64_t seen = atomic_load(&ld->delivered_cno);
    pthread_mutex_lock(&ld->errmu);
    size_t n = 0;
    for (size_t i = first; i < ld->nerrs_kept && n < max && ld->errs[i].cno <= seen; i++, n++)
        sl__abi_out((char *)out + n * elem_size, elem_size, &ld->errs[i].rec, sizeof ld->errs[i].rec);
    pthread_mutex_unlock(&ld->errmu);
    return n;
}
