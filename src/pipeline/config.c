/*
 * The loader's configuration (see config.h): the budget, the strings, the
 * schema, the index, the layout and the sampler, made by create's first
 * two steps and read-only from then on.
 */
#include "pipeline/config.h"

#include <stdio.h>
#include <string.h>

#include "base/budget.h"
#include "base/cpus.h"
#include "base/util.h"
#include "io/engine.h"

typedef unsigned long long ull;

/* A shared budget (sl_budget): the loader's own budget becomes a child of
 * the shared one. While the loader is created it is capped at what the
 * shared budget has left, so the sizing and its messages read as for a
 * private budget of that size; once it runs the cap is lifted
 * (sl__budget_unbind_limit) and only the shared limit binds. */
static void attach_shared(sl__conf *c) {
    sl__budget *core = sl__shared_core(c->cfg.shared_budget);
    uint64_t limit = sl__budget_limit(core), used = atomic_load(&core->used);
    uint64_t left = limit > used ? limit - used : 0;
    atomic_store(&c->own_budget.limit, left);
    atomic_store(&c->own_budget.ceiling, left);
    c->cfg.budget = left;
    sl__budget_attach(&c->own_budget, core);
    sl__shared_ref(c->cfg.shared_budget);
    c->shared = 1;
}

int sl__conf_budget(sl__conf *c, const sl_config *cfg, const sl_image_recipe *recipe, char *err, size_t errlen) {
    c->cfg = *cfg;
    c->recipe = *recipe;
    c->cfg.recipe = &c->recipe;
    c->budget = &c->own_budget;
    int rc = sl__budget_init(c->budget, cfg->budget);
    if (rc) {
        sl__msg(err, errlen, "could not make the budget's lock");
        return rc;
    }
    if (cfg->shared_budget) attach_shared(c); /* sized against what the shared budget has left */
    return 0;
}

void sl__conf_budget_fini(sl__conf *c) {
    sl__budget_fini(&c->own_budget);
    if (c->shared) sl__shared_unref(c->cfg.shared_budget);
}

void sl__conf_shared_reason(const sl__conf *c, char *err, size_t errlen) {
    if (!c->shared || !err || !errlen) return;
    char tmp[512], x[32];
    sl__budget *core = sl__shared_core(c->cfg.shared_budget);
    snprintf(tmp, sizeof tmp, "shared budget of %s (what its other loaders leave): %s",
             sl__fmt_bytes(sl__budget_limit(core), x, sizeof x), err);
    snprintf(err, errlen, "%s", tmp);
}

void sl__conf_fit_workers(sl__conf *c, uint64_t room, uint64_t per_worker) {
    if (!c->tuned || c->cfg.workers_max) return; /* a count or a ceiling the caller chose */
    uint64_t fit = per_worker ? room / per_worker : c->cpu_workers;
    c->nworkers = (uint32_t)SL_MAX((uint64_t)1, SL_MIN(fit, (uint64_t)c->cpu_workers));
}

int sl__conf_alloc_fail(const sl__conf *c, uint64_t n) {
    uint64_t used = atomic_load(&c->budget->used), need;
    if (n > SIZE_MAX || sl__add(used, sl__alloc_cost((size_t)n), &need) || need > sl__budget_limit(c->budget))
        return SL_EBUDGET;
    return SL_ENOMEM;
}

/* The tuner's CPUs (SL_WORKERS_AUTO): this rank's share of the node's
 * CPUs, and, with local ranks running anywhere on it, the node's CPUs its
 * ranks split by demand (docs/tuner.md; a rank pinned to CPUs of its own
 * keeps them: sl__cpu_plan). The ceiling: workers_max, else the share, else with
 * local ranks up to twice the share (a rank may take what idle ones
 * leave) but for the workers' fixed part growing past a sixteenth of the
 * budget. */
static void tuned_workers(sl__conf *c, uint64_t worker_bytes) {
    const sl_config *cfg = &c->cfg;
    sl__rank_cpus(cfg->local_world_size, &c->cores, &c->node_cpus);
    c->nworkers = cfg->workers_max ? cfg->workers_max : c->cores;
    if (!cfg->workers_max && c->node_cpus) {
        uint64_t room = worker_bytes ? cfg->budget / 16 / worker_bytes : 0;
        uint32_t extra = (uint32_t)SL_MIN((uint64_t)c->cores, room);
        c->nworkers = SL_MIN(c->node_cpus, c->cores + extra);
    }
}

int sl__conf_init(sl__conf *c, uint64_t worker_bytes, char *err, size_t errlen) {
    c->sample_cap = sl__sample_cap(c->cfg.budget);
    sl__budget_set_room(c->budget, c->sample_cap); /* the governor keeps this above the fixed part */
    c->tuned = c->cfg.workers == SL_WORKERS_AUTO;
    if (c->tuned) tuned_workers(c, worker_bytes);
    else c->nworkers = c->cfg.workers;
    c->cpu_workers = c->nworkers;
    c->B = c->cfg.batch_size;
    /* the strings the configuration points at are the caller's: copy them */
    const char *source = c->cfg.source, *fields = c->cfg.fields;
    c->source_path = sl__strdup(c->budget, source, SL_MEM_INDEX);
    c->fields_json = fields ? sl__strdup(c->budget, fields, SL_MEM_INDEX) : NULL;
    c->cfg.source = c->source_path;
    c->cfg.fields = c->fields_json;
    if (!c->source_path || (fields && !c->fields_json)) {
        char b1[32];
        int rc = sl__conf_alloc_fail(c, strlen(source) + (fields ? strlen(fields) : 0) + 2);
        sl__msg(err, errlen, "budget of %s cannot hold the source path and schema",
                sl__fmt_bytes(c->cfg.budget, b1, sizeof b1));
        return rc;
    }
    return 0;
}

int sl__conf_index(sl__conf *c, char *err, size_t errlen) {
    const sl_config *cfg = &c->cfg;
    int rc = sl__schema_parse(cfg, &c->schema, err, errlen);
    if (rc) return rc;
    sl__colreq req[SL__MAX_FIELDS];
    uint32_t nreq = sl__schema_columns(&c->schema, req);
    uint64_t t0 = sl__now_ns();
    sl__io_opts io = {.requests = cfg->io_requests, .timeout_ms = cfg->io_timeout_ms, .retries = cfg->io_retries,
                      .no_hedge = cfg->io_hedge == -1};
    rc = sl__source_open_io(c->budget, cfg->source, c->nworkers, cfg->fields ? req : NULL, cfg->fields ? nreq : 0,
                            &io, &c->src, err, errlen);
    if (rc) return rc;
    c->index_seconds = (double)(sl__now_ns() - t0) / 1e9;
    if ((rc = sl__schema_resolve(&c->schema, c->src, err, errlen))) return rc;
    if ((rc = sl__layout_build(&c->layout, &c->schema, c->B))) {
        sl__msg(err, errlen, "a batch of %u samples of %llu bytes overflows", c->B, (ull)c->layout.sample_bytes);
        return rc;
    }
    uint64_t N = sl__source_count(c->src);
    if (N > UINT32_MAX) {
        sl__msg(err, errlen, "dataset has %llu samples, more than 2^32-1", (ull)N);
        return SL_EINVAL;
    }
    rc = sl__sampler_init(&c->sampler, N, cfg->rank, cfg->world_size, cfg->shuffle, cfg->drop_last, cfg->seed);
    if (rc) {
        sl__msg(err, errlen, "dataset of %llu samples leaves rank %u of %u nothing", (ull)N, cfg->rank,
                cfg->world_size);
        return rc;
    }
    if (cfg->order_end && (rc = sl__sampler_range(&c->sampler, cfg->order_begin, cfg->order_end))) {
        if (rc == SL_EINVAL)
            sl__msg(err, errlen, "order range [%llu, %llu) is not inside the dataset's order of %llu samples",
                    (ull)cfg->order_begin, (ull)cfg->order_end, (ull)N);
        else
            sl__msg(err, errlen, "order range [%llu, %llu) leaves rank %u of %u nothing", (ull)cfg->order_begin,
                    (ull)cfg->order_end, cfg->rank, cfg->world_size);
        return rc;
    }
    uint64_t per = c->sampler.per_rank;
    c->nbatches = cfg->drop_last ? per / c->B : (per + c->B - 1) / c->B;
    if (c->nbatches == 0) {
        sl__msg(err, errlen, "%llu samples per rank is less than one batch of %u with drop_last", (ull)per, c->B);
        return SL_EEMPTY;
    }
    return 0;
}

void sl__conf_device(sl__conf *c, uint32_t out, int on) { c->layout.out[out].device = on; }

void sl__conf_free(sl__conf *c) {
    sl__free(c->budget, c->source_path);
    sl__free(c->budget, c->fields_json);
    c->source_path = c->fields_json = NULL;
    if (c->src) sl__source_close(c->src);
    c->src = NULL;
    sl__schema_fini(&c->schema);
}
