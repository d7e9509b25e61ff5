/*
 * The loader: the modules of src/pipeline/ composed into one handle, its
 * life (create: validate the configuration, parse the schema, index the
 * source, lay out slots, size the pipeline against the budget, carve the
 * slots, start the workers; destroy), and the public calls, which check
 * the handle and hand over to the module that owns what they touch.
 *
 * Create runs in named steps. sl_loader_plan runs the same steps up to the
 * sizing and stops, so what it reports is what create would do.
 *
 * The modules, each writing only its own struct (docs/engine.md has the
 * map): config.c the configuration; errlog.c the error records; guard.c
 * the failure guard; lcache.c the sample cache front; readahead.c the
 * read-ahead of remote files; gpustage.c the GPU
 * stage; worker.c the workers; slot.c and refill.c a slot's block and its
 * refill rounds; engine.c the slots, dispatch, commit and delivery (see
 * engine.c for the pipeline's invariants). Live loaders are in the fork
 * registry (base/fork.c), with shared budgets.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/budget.h"
#include "base/fork.h"
#include "base/util.h"
#include "io/engine.h"
#include "pipeline/admit.h"
#include "pipeline/config.h"
#include "pipeline/engine.h"
#include "pipeline/errlog.h"
#include "pipeline/gpustage.h"
#include "pipeline/guard.h"
#include "pipeline/lcache.h"
#include "pipeline/readahead.h"
#include "pipeline/slot.h"
#include "pipeline/state.h"
#include "pipeline/worker.h"

/* Ownership: loader.c writes counted_self (at create); base/fork.c the
 * registry entry; each embedded module's struct is written by its module
 * only. */
struct sl_loader {
    sl__handle reg;          /* in the fork registry while live (base/fork.h): reg.forked in a
                                child of fork() */
    int counted_self;        /* sizeof(sl_loader) is reserved in the budget */
    sl__conf conf;           /* the configuration: read-only after create */
    sl__errlog log;          /* the error records */
    sl__guard guard;         /* the failure guard and poisoning (the engine's lock) */
    sl__lcache cache;        /* the sample cache */
    sl__rahead ra;           /* read-ahead of remote files */
    sl__gstage gs;           /* the GPU stage */
    sl__workers workers;     /* the worker threads */
    sl__engine eng;          /* the slots, dispatch, commit, delivery */
};

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
    if (c->workers_max > 1024) BAD("workers_max %u over 1024", c->workers_max);
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
    if (c->decode < SL_DECODE_CPU || c->decode > SL_DECODE_PREFER_GPU)
        BAD("decode %d is none of SL_DECODE_CPU, SL_DECODE_AUTO, SL_DECODE_GPU, SL_DECODE_PREFER_GPU", c->decode);
    if (c->gpu_device < 0) BAD("gpu_device %d is negative", c->gpu_device);
    if (c->worker_nice < 0 || c->worker_nice > 19) BAD("worker_nice %d out of range 0..19", c->worker_nice);
    if ((c->order_begin || c->order_end) && c->order_begin >= c->order_end)
        BAD("order range [%llu, %llu) is empty (0, 0: the whole order)", (ull)c->order_begin, (ull)c->order_end);
    if (c->io_requests > SL__IO_REQUESTS_MAX) BAD("io_requests %u over %d", c->io_requests, SL__IO_REQUESTS_MAX);
    if (c->io_hedge != 0 && c->io_hedge != -1) BAD("io_hedge %d is neither 0 (hedge slow reads) nor -1 (never)", c->io_hedge);
    if (c->io_retries > 100) BAD("io_retries %u over 100", c->io_retries);
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

/* The engine's lock and condition variables, then the error records'
 * lock. 0, or SL_ESYS with none left. */
static int init_sync(sl_loader *ld) {
    if (sl__engine_sync_init(&ld->eng)) return SL_ESYS;
    if (sl__errlog_sync_init(&ld->log) == 0) return 0;
    sl__engine_sync_fini(&ld->eng);
    return SL_ESYS;
}

/* Undo what step_new did before the locks exist. */
static void free_new(sl_loader *ld) {
    if (ld->counted_self) sl__budget_release(ld->conf.budget, sizeof *ld, SL_MEM_OTHER);
    sl__conf_budget_fini(&ld->conf);
    free(ld);
}

/* A new loader holding its configuration, budget and locks; nothing else. */
static int step_new(const sl_config *cfg, sl_loader **out, char *err, size_t errlen) {
    sl_config c;
    sl_image_recipe recipe;
    int rc = copy_config(&c, &recipe, cfg, err, errlen);
    if (rc) return rc;
    /* a budget inherited across fork(): its locks may be held by the parent's threads */
    if (c.shared_budget && (rc = sl_budget_poisoned(c.shared_budget, err, errlen))) return rc;
    sl_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return SL_ENOMEM;
    if ((rc = sl__conf_budget(&ld->conf, &c, &recipe, err, errlen))) {
        free(ld);
        return rc;
    }
    /* the loader's own struct (schema, layout, counters) is counted too */
    if (sl__budget_try(ld->conf.budget, sizeof *ld, SL_MEM_OTHER)) {
        char b1[32], b2[32];
        sl__msg(err, errlen, "budget of %s cannot hold the loader's own state (%s)",
                sl__fmt_bytes(ld->conf.cfg.budget, b1, sizeof b1), sl__fmt_bytes(sizeof *ld, b2, sizeof b2));
        sl__conf_shared_reason(&ld->conf, err, errlen);
        free_new(ld);
        return SL_EBUDGET;
    }
    ld->counted_self = 1;
    if ((rc = init_sync(ld))) {
        free_new(ld);
        sl__msg(err, errlen, "could not make the loader's locks");
        return rc;
    }
    sl__guard_init(&ld->guard, ld->conf.cfg.max_error_rate);
    sl__engine_init(&ld->eng, ld, &ld->conf, &ld->conf.sampler, &ld->workers, &ld->gs, &ld->cache, &ld->ra,
                    &ld->log, &ld->guard);
    *out = ld;
    return sl__conf_init(&ld->conf, SL_WORKER_BYTES, err, errlen);
}

/* ---- step 3: order buffers, error records, worker table (fixed) ------------------ */

static int step_tables(sl_loader *ld, char *err, size_t errlen) {
    const sl_config *cfg = &ld->conf.cfg;
    uint64_t N = ld->conf.sampler.n;
    uint64_t orders_refused = sl__engine_orders(&ld->eng);
    uint64_t errs_refused = sl__errlog_alloc(&ld->log, ld->conf.budget, cfg->max_error_records);
    uint64_t workers_refused = sl__workers_alloc(&ld->workers, ld->conf.budget, ld->conf.nworkers);
    if (!orders_refused && !errs_refused && !workers_refused) return 0;
    /* the budget is to blame only if the smallest refused block did not fit */
    uint64_t want = UINT64_MAX;
    if (orders_refused) want = SL_MIN(want, orders_refused);
    if (errs_refused) want = SL_MIN(want, errs_refused);
    if (workers_refused) want = SL_MIN(want, workers_refused);
    int rc = sl__conf_alloc_fail(&ld->conf, want);
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
    uint64_t ps = sl__page_size(), stride = ld->conf.layout.stride;
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
    const sl__conf *c = &ld->conf;
    const sl_config *cfg = &c->cfg;
    uint64_t pitch = slot_pitch(ld);
    uint64_t per_worker = SL_WORKER_BYTES;
    uint64_t used = atomic_load(&c->budget->used) + sl__gstage_host_pending(&ld->gs); /* counted by step_slots */
    uint64_t min_slots = SL_MAX(cfg->min_slots, cfg->prefetch ? cfg->prefetch : 1);
    uint64_t slot_cost = pitch + sizeof(sl_batch);
    /* kept free of the pipeline: the sample cache (lcache.c), read-ahead of remote files (readahead.c) */
    uint64_t lcache = sl__lcache_reserve(c), ahead = sl__rahead_reserve(c), cache = lcache + ahead;
    /* the default ceiling: no more workers than the fixed part's room beside the rest of the minimum */
    uint64_t rest = used + slots_cost(pitch, min_slots) + 4096 + cache, fixed_max = cfg->budget - c->sample_cap;
    sl__conf_fit_workers(&ld->conf, fixed_max > rest ? fixed_max - rest : 0, per_worker);
    sl__workers_trim(&ld->workers, c->nworkers);
    uint64_t workers_b = per_worker * c->nworkers;
    uint64_t fixed_min = used + workers_b + slots_cost(pitch, min_slots) + 4096;
    uint64_t minimum = min_budget_for(fixed_min + cache);
    /* the GPU stage's default staging grows with the budget: the minimum named holds its own staging
     * (a fixed point; each round adds about a sixth of the last, the staging is capped) */
    for (uint64_t m; (m = min_budget_for(fixed_min + cache + sl__gstage_more_at(&ld->gs, minimum))) > minimum;)
        minimum = m;
    memset(p, 0, sizeof *p);
    p->dataset_size = c->sampler.n;
    p->samples_per_rank = c->sampler.per_rank;
    p->batches = c->nbatches;
    p->workers = c->nworkers;
    p->num_fields = c->layout.nout;
    p->sample_bytes = c->layout.sample_bytes;
    p->slot_bytes = slot_cost;
    p->worker_bytes = per_worker;
    p->index_bytes = used;
    p->min_budget = minimum;
    p->index_seconds = c->index_seconds;
    if (lcache && fixed_min + ahead + c->sample_cap <= cfg->budget &&
        fixed_min + cache + c->sample_cap > cfg->budget) { /* the cache is what does not fit */
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        p->slots = (uint32_t)min_slots;
        p->fixed_bytes = fixed_min;
        sl__msg(err, errlen,
                "budget %s cannot hold the sample cache of %s (with its next-use order, %s in all) beside the "
                "pipeline's minimum working set of %s; raise the budget to at least %s, give the cache less, or "
                "share a node cache (cache_share=node: its own /dev/shm segment, outside the budget)",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), sl__fmt_bytes(cfg->cache, b2, sizeof b2),
                sl__fmt_bytes(lcache, b3, sizeof b3),
                sl__fmt_bytes(min_budget_for(fixed_min + ahead), b4, sizeof b4),
                sl__fmt_bytes(minimum, b5, sizeof b5));
        return SL_EBUDGET;
    }
    if (fixed_min + cache + c->sample_cap > cfg->budget || fixed_min + cache > cfg->budget) {
        char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32], b8[32];
        uint64_t gpu = sl__gstage_fixed(&ld->gs); /* inside used */
        const char *kept = lcache && ahead ? " + the sample cache's and read-ahead's "
                           : lcache        ? " + the sample cache's "
                           : ahead         ? " + read-ahead's "
                                           : "";
        p->slots = (uint32_t)min_slots;
        p->fixed_bytes = fixed_min;
        sl__msg(err, errlen,
                "budget %s is below the minimum working set of %s for this pipeline: %llu batch slot(s) of %s "
                "(batch %u x %s a sample) + %u workers x %s scratch + %s index%s%s%s%s%s, with a quarter of the "
                "budget kept for one sample's decode; raise the budget to at least %s or lower the batch size, "
                "sample size or workers%s%s",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), sl__fmt_bytes(minimum, b2, sizeof b2), (ull)min_slots,
                sl__fmt_bytes(pitch, b3, sizeof b3), c->B, sl__fmt_bytes(c->layout.sample_bytes, b5, sizeof b5),
                c->nworkers, sl__fmt_bytes(per_worker, b4, sizeof b4), sl__fmt_bytes(used - gpu, b6, sizeof b6),
                gpu ? " + " : "", gpu ? sl__fmt_bytes(gpu, b8, sizeof b8) : "",
                gpu ? " for GPU decode (pinned staging, an eighth of the budget up to 64 MiB unless gpu_staging says, and "
                      "the host memory of the GPU engine's libraries)" : "",
                kept, cache ? sl__fmt_bytes(cache, b7, sizeof b7) : "", sl__fmt_bytes(minimum, b2, sizeof b2),
                lcache ? ", or the cache" : "", ahead ? ", or io_readahead" : "");
        return SL_EBUDGET;
    }
    uint32_t nslots;
    if (cfg->prefetch) {
        nslots = cfg->prefetch;
    } else {
        /* as many as fit, leaving a sample's room (a quarter) for scratch
         * to grow, at most max(4, 4 * workers / batch) */
        uint64_t room = cfg->budget - used - workers_b - 4096 - c->sample_cap - cache;
        uint64_t fit = room / slot_cost;
        uint64_t cap = SL_MAX(4, (4ull * c->nworkers + c->B - 1) / c->B);
        nslots = (uint32_t)SL_MAX(SL_MIN(fit, cap), min_slots);
        while (nslots > min_slots &&
               used + workers_b + slots_cost(pitch, nslots) + 4096 + c->sample_cap + cache > cfg->budget)
            nslots--;
    }
    p->slots = nslots;
    p->fixed_bytes = used + workers_b + slots_cost(pitch, nslots);
    return 0;
}

/* Step 4 with GPU decode: the engine and its pinned staging are counted
 * before sizing, so the minimum working set holds them. decode=prefer-gpu
 * and auto decide by a rule of the configuration first (the stage counted
 * with its reserve, nothing loaded): a budget that cannot hold it sizes the
 * CPU path, a default never the reason a job dies (docs/gpu.md, "Memory").
 * Then the device opens and what it measured is sized; with those modes a
 * measurement past the reserve still falls back to the CPU. */
static int step_gpu_size(sl_loader *ld, sl_plan *plan, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    const _Atomic int *cancel = sl__engine_cancel(&ld->eng);
    int rc;
    if (sl__gstage_decides(&ld->conf)) {
        if ((rc = sl__gstage_open(g, &ld->conf, cancel, SL_GSTAGE_DECIDE, err, errlen))) return rc;
        rc = step_size(ld, plan, err, errlen);
        if (rc == SL_EBUDGET && sl__gstage_give_up(g, plan->min_budget)) return step_size(ld, plan, err, errlen);
        if (rc || !sl__gstage_planned(g)) return rc; /* refused, or the CPU path already (no image field, ...) */
        sl__gstage_close(g, 0);
    }
    if ((rc = sl__gstage_open(g, &ld->conf, cancel, SL_GSTAGE_OPEN, err, errlen))) return rc;
    if ((rc = step_size(ld, plan, err, errlen)) == SL_EBUDGET && sl__gstage_give_up(g, plan->min_budget))
        rc = step_size(ld, plan, err, errlen);
    return rc;
}

/* ---- step 5: slots and workers ------------------------------------------------- */

/* The region: one private mapping of nslots blocks of pitch bytes,
 * counted under SL_MEM_BATCHES. Slots past min_slots are elastic: counted,
 * not fixed (step_workers), so a lowered limit can retire them (engine.c). */
static int step_slots(sl_loader *ld, const sl_plan *p, char *err, size_t errlen) {
    char b1[32], b2[32], b3[32];
    uint64_t pitch = slot_pitch(ld);
    int rc = sl__engine_slots(&ld->eng, p->slots, pitch);
    if (rc) {
        if (rc == SL_EBUDGET)
            sl__msg(err, errlen, "budget %s cannot hold %u batch slots of %s (prefetch): minimum working set is %s",
                    sl__fmt_bytes(ld->conf.cfg.budget, b1, sizeof b1), p->slots, sl__fmt_bytes(pitch, b2, sizeof b2),
                    sl__fmt_bytes(p->min_budget, b3, sizeof b3));
        else
            sl__msg(err, errlen, "out of memory for %u batch slots of %s", p->slots,
                    sl__fmt_bytes(pitch, b2, sizeof b2));
        return rc;
    }
    rc = sl__gstage_slots(&ld->gs, p->slots, err, errlen); /* their device memory, with GPU decode */
    if (!rc && sl__gstage_on(&ld->gs)) sl__conf_device(&ld->conf, ld->gs.out, 1); /* delivered from there */
    return rc;
}

static void stop_workers(sl_loader *ld, uint32_t n) {
    sl__engine_stop(&ld->eng);
    sl__budget_close(ld->conf.budget);
    sl__source_cancel_io(ld->conf.src); /* a worker waiting on a remote read returns now */
    sl__workers_join(&ld->workers, n);
    sl__engine_stop_gpu(&ld->eng);
}

/* Worker baselines (fixed for life), the first epoch's order, the threads;
 * returns once every worker runs. */
static int step_workers(sl_loader *ld, char *err, size_t errlen) {
    const sl__conf *c = &ld->conf;
    int rc = sl__workers_init(&ld->workers, c, &ld->cache, &ld->ra, &ld->gs, sl__engine_cancel(&ld->eng), err,
                              errlen);
    if (rc) return rc;
    /* everything held now is fixed for life but the elastic slots (the GPU
     * engine fixed its pinned pool already) */
    uint64_t fix = atomic_load(&c->budget->used) - atomic_load(&c->budget->fixed) - sl__engine_elastic_bytes(&ld->eng);
    if (sl__budget_fix(c->budget, fix)) { /* a shared budget's limit moved under it meanwhile */
        char b1[32], b2[32];
        sl__msg(err, errlen, "budget %s: the limit was lowered under the loader's minimum working set while it was "
                "created (%s more to hold for life)",
                sl__fmt_bytes(sl__budget_limit(c->budget), b1, sizeof b1), sl__fmt_bytes(fix, b2, sizeof b2));
        return SL_EBUDGET;
    }
    if (sl__budget_headroom(c->budget) < c->sample_cap) { /* allocation rounding ate into it */
        char b1[32], b2[32];
        sl__msg(err, errlen, "budget %s: the fixed part of %s leaves less than a quarter for one sample; raise it",
                sl__fmt_bytes(c->cfg.budget, b1, sizeof b1),
                sl__fmt_bytes(atomic_load(&c->budget->fixed), b2, sizeof b2));
        return SL_EBUDGET;
    }
    if ((rc = sl__admit_check(c, &ld->workers.w[0], err, errlen))) return rc;
    if (sl__gstage_wants_pin(&ld->gs)) { /* CPU-decoded samples reach the GPU by DMA (gpu/device.h: pin) */
        void *base;
        size_t len;
        if (sl__engine_pin(&ld->eng, &base, &len) == 0) sl__gstage_pin(&ld->gs, base, len); /* slots fixed for life */
    } else {
        sl__gstage_bounce(&ld->gs); /* the default: pageable slots, pinned uploads */
    }
    sl__engine_tune(&ld->eng, c->tuned, c->nworkers, c->cores); /* every worker takes work until it moves */
    sl__gstage_workers(&ld->gs, &ld->eng.tuner.active);
    sl__engine_open(&ld->eng); /* the first epoch's order */

    uint32_t started;
    if ((rc = sl__workers_start(&ld->workers, sl__engine_run, &ld->eng, &started, err, errlen))) {
        stop_workers(ld, started);
        return rc;
    }
    /* handshake: return only once every worker runs */
    sl__engine_wait_started(&ld->eng, c->nworkers);
    if ((rc = sl__gstage_start(&ld->gs, sl__engine_gpu_main, &ld->eng, err, errlen)))
        stop_workers(ld, c->nworkers);
    return rc;
}

/* Free what the loader allocated. In a child of fork() the decoders are
 * left alone: a decode may have been mid-call in the parent at the fork. */
static void free_memory(sl_loader *ld, int in_child) {
    sl__budget *b = ld->conf.budget;
    sl__gstage_close(&ld->gs, in_child);
    /* The cache first (its values are counted in b). In a child of fork()
     * it is left alone: a node cache's process slot is the parent's, and
     * its locks may have been held by the parent's threads at the fork. */
    if (!in_child) sl__lcache_destroy(&ld->cache);
    sl__rahead_destroy(&ld->ra, in_child);
    sl__workers_fini(&ld->workers, b, in_child);
    sl__engine_free(&ld->eng); /* slots, region, orders */
    sl__errlog_free(&ld->log, b);
    sl__conf_free(&ld->conf);
    if (ld->counted_self) sl__budget_release(b, sizeof *ld, SL_MEM_OTHER);
}

static void free_all(sl_loader *ld) {
    sl__tuner_fini(&ld->eng.tuner); /* its status file */
    free_memory(ld, 0);
    sl__engine_sync_fini(&ld->eng);
    sl__errlog_sync_fini(&ld->log);
    sl__conf_budget_fini(&ld->conf);
    free(ld);
}

/* In a child of fork(): free this process's copy of the loader without
 * touching a lock or a condition variable (the parent's threads may have
 * held any of them at the fork, and they do not exist here, so waiting or
 * destroying could hang forever). */
static void destroy_in_child(sl_loader *ld) {
    sl__budget_forget_waiters(ld->conf.budget); /* they were the parent's threads: nobody to wake */
    sl__engine_consumer_forget(&ld->eng);
    sl__tuner_forget(&ld->eng.tuner); /* the node's share: the parent's slot stays the parent's */
    free_memory(ld, 1);
    if (ld->conf.shared) sl__shared_unref(ld->conf.cfg.shared_budget); /* the child's copy too, with the last reference */
    free(ld);
}

/* ---- public: create, plan, destroy ------------------------------------------- */

int sl_loader_create(const sl_config *cfg, sl_loader **out, char *err, size_t errlen) {
    if (!cfg || !out) return SL_EINVAL;
    *out = NULL;
    sl_loader *ld = NULL;
    sl_plan plan;
    int rc = step_new(cfg, &ld, err, errlen);
    if (!rc) rc = sl__conf_index(&ld->conf, err, errlen); /* schema, index, layout, sampler */
    if (!rc) rc = step_tables(ld, err, errlen);
    if (!rc) rc = step_gpu_size(ld, &plan, err, errlen); /* GPU decode (the engine, its staging), then sizing */
    if (!rc) rc = step_slots(ld, &plan, err, errlen);
    if (!rc) rc = sl__lcache_create(&ld->cache, &ld->conf, err, errlen); /* the sample cache: sizing kept its room */
    if (!rc) rc = sl__rahead_create(&ld->ra, &ld->conf, &ld->cache, err, errlen); /* read-ahead: the same */
    if (!rc) rc = step_workers(ld, err, errlen);
    if (rc) {
        if (ld && rc == SL_EBUDGET) sl__conf_shared_reason(&ld->conf, err, errlen);
        if (ld) free_all(ld);
        return rc;
    }
    if (ld->conf.shared) sl__budget_unbind_limit(ld->conf.budget);
    /* from here a moved limit retires or brings back elastic slots */
    sl__engine_consumer_on(&ld->eng);
    sl__fork_track(&ld->reg);
    *out = ld;
    return 0;
}

int sl_loader_plan_sized(const sl_config *cfg, sl_plan *out, size_t out_size, char *err, size_t errlen) {
    if (!cfg || !out || out_size == 0) return SL_EINVAL;
    sl_loader *ld = NULL;
    sl_plan plan;
    memset(&plan, 0, sizeof plan);
    int rc = step_new(cfg, &ld, err, errlen);
    if (!rc) rc = sl__conf_index(&ld->conf, err, errlen); /* schema, index, layout, sampler */
    if (!rc) rc = step_tables(ld, err, errlen);
    if (!rc) rc = sl__gstage_open(&ld->gs, &ld->conf, sl__engine_cancel(&ld->eng), SL_GSTAGE_PLAN, err, errlen);
    if (!rc) {
        rc = step_size(ld, &plan, err, errlen);
        if (rc == SL_EBUDGET && sl__gstage_give_up(&ld->gs, plan.min_budget)) rc = step_size(ld, &plan, err, errlen);
        if (rc == SL_EBUDGET) rc = 0; /* plan.min_budget says what is needed */
    }
    if (ld) free_all(ld);
    if (!rc) memcpy(out, &plan, SL_MIN(out_size, sizeof plan));
    return rc;
}

void sl_loader_destroy(sl_loader *ld) {
    if (!ld || !sl__fork_untrack(&ld->reg)) return; /* NULL, or not a live loader (destroyed already) */
    if (ld->reg.forked) {
        destroy_in_child(ld);
        return;
    }
    /* first: no limit move may reach the loader while it goes (this waits
     * for a notification in progress) */
    sl__engine_consumer_off(&ld->eng);
    stop_workers(ld, ld->conf.nworkers);
    free_all(ld);
}

uint64_t sl_loader_len(const sl_loader *ld) { return ld ? ld->conf.nbatches : 0; }
uint64_t sl_loader_num_samples(const sl_loader *ld) { return ld ? ld->conf.sampler.per_rank : 0; }
uint64_t sl_loader_dataset_size(const sl_loader *ld) { return ld ? ld->conf.sampler.n : 0; }

const char *sl_loader_sample_path(const sl_loader *ld, uint64_t index, char *buf, size_t len) {
    if (!ld || !buf || index >= ld->conf.sampler.n) return NULL;
    return sl__source_path(ld->conf.src, index, buf, len) >= 0 ? buf : NULL;
}

int sl_loader_slot_region(const sl_loader *cld, void **base, size_t *len) {
    if (!cld || !base || !len) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->reg.forked) return SL_ESTATE;
    return sl__engine_pin(&ld->eng, base, len);
}

/* ---- batches -------------------------------------------------------------- */

int sl_batch_num_fields(const sl_batch *b) { return b ? (int)b->ld->conf.layout.nout : 0; }

int sl_batch_field_sized(const sl_batch *b, int i, sl_field *out, size_t out_size) {
    if (!b || !out || out_size == 0 || i < 0 || (uint32_t)i >= b->ld->conf.layout.nout) return SL_EINVAL;
    sl_field f;
    sl__layout_field(&b->ld->conf.layout, b->base, (uint32_t)i, b->n, &f);
    int dtype, did;
    uint64_t dev = sl__gstage_data(&b->ld->gs, b->id, (uint32_t)i, &dtype, &did);
    if (dev) { /* decoded into device memory (GPU decode) */
        f.data = (void *)(uintptr_t)dev;
        f.device_type = dtype;
        f.device_id = did;
    }
    memcpy(out, &f, SL_MIN(out_size, sizeof f));
    return 0;
}

int sl_batch_find_sized(const sl_batch *b, const char *name, sl_field *out, size_t out_size) {
    if (!b || !name) return SL_EINVAL;
    for (uint32_t i = 0; i < b->ld->conf.layout.nout; i++)
        if (!strcmp(b->ld->conf.layout.out[i].name, name)) return sl_batch_field_sized(b, (int)i, out, out_size);
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
    if (ld->reg.forked) return SL_ESTATE;
    sl__engine_stats(&ld->eng, o); /* delivery, slots, errors, the GPU stage's mode */
    o->samples_per_s = o->seconds > 0 ? (double)o->samples / o->seconds : 0;
    sl__workers_stats(&ld->workers, o);
    o->budget_wait_s = (double)atomic_load(&ld->conf.budget->wait_ns) / 1e9;
    o->budget_bytes = sl__budget_limit(ld->conf.budget);
    o->accounted_bytes = atomic_load(&ld->conf.budget->used);
    o->peak_accounted_bytes = atomic_load(&ld->conf.budget->peak);
    o->fixed_bytes = atomic_load(&ld->conf.budget->fixed);
    o->mem_count = SL_MEM__COUNT;
    for (int c = 0; c < SL_MEM__COUNT; c++) {
        o->mem[c] = atomic_load(&ld->conf.budget->cat[c]);
        o->mem_peak[c] = atomic_load(&ld->conf.budget->cat_peak[c]);
    }
    memcpy(o->reserved_0_1_mem, o->mem, sizeof o->reserved_0_1_mem); /* 0.1's arrays, where its callers look */
    memcpy(o->reserved_0_1_mem_peak, o->mem_peak, sizeof o->reserved_0_1_mem_peak);
    o->index_seconds = ld->conf.index_seconds;
    sl__lcache_stats(&ld->cache, o);
    sl__gstage_stats(&ld->gs, o);
    sl__rahead_stats(&ld->ra, o); /* the source's I/O engine and the read-ahead */
    sl__abi_out(out, out_size, o, sizeof *o);
    return 0;
}

size_t sl_loader_errors_sized(const sl_loader *cld, size_t first, sl_error_record *out, size_t max,
                              size_t elem_size) {
    if (!cld || !out || !elem_size || cld->reg.forked) return 0;
    sl_loader *ld = (sl_loader *)cld;
    return sl__errlog_list(&ld->log, first, out, max, elem_size);
}

/* ---- state (state.c) ------------------------------------------------------- */

int sl_loader_get_state_sized(const sl_loader *cld, sl_state *out, size_t out_size) {
    if (!cld || !out || !out_size) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->reg.forked) {
        memset(out, 0, out_size);
        return SL_ESTATE;
    }
    return sl__state_get(&ld->conf, &ld->eng, out, out_size);
}

int sl_loader_check_state_sized(const sl_loader *cld, const sl_state *st, size_t st_size, char *why, size_t len) {
    sl__msg(why, len, "%s", "");
    if (!cld || !st) {
        sl__msg(why, len, "no loader or no state");
        return SL_EINVAL;
    }
    if (cld->reg.forked) {
        sl__msg(why, len, "the loader was created in another process (a child of fork())");
        return SL_ESTATE;
    }
    return sl__state_check(&cld->conf, st, st_size, why, len);
}

int sl_loader_set_state_sized(sl_loader *ld, const sl_state *st, size_t st_size) {
    if (!ld || !st) return SL_EINVAL;
    if (ld->reg.forked) return SL_ESTATE;
    return sl__state_set(&ld->conf, &ld->eng, st, st_size);
}

/* ---- iteration (engine.c) ---------------------------------------------------- */

/* The tuner's status file for `sluice top` (tuner.c), written by the
 * consumer's thread when the engine says one is due: at a decision, and
 * at most once a second. */
static void publish(sl_loader *ld) {
    sl_stats st;
    sl_tuner_decision log[8];
    if (sl_loader_stats_sized(ld, &st, sizeof st)) return;
    size_t n = sl__engine_tuner_log(&ld->eng, log, 8);
    sl__tuner_publish(&ld->eng.tuner, &st, log, n, ld->conf.source_path);
}

static int next(sl_loader *ld, sl_batch **out, int64_t timeout_ns) {
    if (!ld || !out) return SL_EINVAL;
    *out = NULL;
    if (ld->reg.forked) return SL_ESTATE;
    int due = 0;
    int rc = sl__engine_next(&ld->eng, out, timeout_ns, &due);
    if (due) publish(ld);
    return rc;
}

int sl_loader_next_timeout(sl_loader *ld, sl_batch **out, uint32_t timeout_ms) {
    return next(ld, out, (int64_t)timeout_ms * 1000000);
}

int sl_loader_next(sl_loader *ld, sl_batch **out) { return next(ld, out, -1); }

size_t sl_loader_tuner_log_sized(const sl_loader *cld, sl_tuner_decision *out, size_t max, size_t elem_size) {
    if (!cld || !out || !elem_size || cld->reg.forked) return 0;
    sl_loader *ld = (sl_loader *)cld;
    sl_tuner_decision log[SL_TUNER_LOG];
    size_t n = sl__engine_tuner_log(&ld->eng, log, SL_MIN(max, (size_t)SL_TUNER_LOG));
    for (size_t i = 0; i < n; i++) sl__abi_out((char *)out + i * elem_size, elem_size, &log[i], sizeof log[i]);
    return n;
}

void sl_loader_release(sl_loader *ld, sl_batch *b) {
    if (!ld || !b || !sl__fork_enter(&ld->reg)) return; /* a destroyed loader: its batches went with it */
    if (!ld->reg.forked) sl__engine_release(&ld->eng, b);
    sl__fork_leave();
}

int sl_loader_poisoned(const sl_loader *cld, char *why, size_t len) {
    if (!cld) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->reg.forked) {
        sl__fork_reason(&ld->reg, "loader", "its worker threads did not survive the fork", "a new loader", why, len);
        return SL_ESTATE;
    }
    return sl__engine_poisoned(&ld->eng, why, len);
}

int sl_loader_last_error_sized(const sl_loader *cld, sl_error_record *out, size_t out_size) {
    if (!cld || !out || !out_size) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->reg.forked) return SL_ESTATE;
    sl_error_record r;
    int rc = sl__engine_last_error(&ld->eng, &r);
    if (!rc) sl__abi_out(out, out_size, &r, sizeof r);
    return rc;
}

int sl_loader_set_epoch(sl_loader *ld, uint64_t epoch) {
    if (!ld) return SL_EINVAL;
    if (ld->reg.forked) return SL_ESTATE;
    return sl__engine_set_epoch(&ld->eng, epoch);
}
