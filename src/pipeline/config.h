/*
 * The loader's configuration: what create settles before anything runs.
 * The caller's sl_config (checked, its strings copied), the budget
 * everything is counted in, the source's index, the schema, the slot
 * layout, the sampler and the sizes that follow from them.
 *
 * Ownership. config.c writes every field, during create (steps 1 and 2 of
 * sl_loader_create, one thread, before any other exists; the GPU stage's
 * output flag through sl__conf_device, also at create), and frees them at
 * destroy. In between it is read-only: every module reads it without a
 * lock, through the const pointer it was given. One exception: the
 * sampler's resumed span (sampler.h, sl__sampler_resume), which the
 * engine sets at a reset, under its lock, while nothing reads the sampler
 * (no claim or commit in flight).
 */
#ifndef SL_PIPELINE_CONFIG_H
#define SL_PIPELINE_CONFIG_H

#include <stdint.h>

#include "base/mem.h"
#include "fields/field.h"
#include "pipeline/collate.h"
#include "pipeline/sampler.h"
#include "sluice.h"
#include "source/source.h"

/* sl_config.worker_nice's default: at nice 10 a worker weighs about a
 * ninth of a nice-0 thread in the scheduler, so the training loop sharing
 * its core runs when it is ready (bench/nice_sim.py). */
#define SL_WORKER_NICE 10

typedef struct sl__conf {
    sl_config cfg;           /* the caller's over the defaults; source and fields point at the copies */
    char *source_path;       /* the configuration's strings, copied */
    char *fields_json;
    sl_image_recipe recipe;  /* the recipe cfg.recipe points at, copied */
    sl__budget *budget;      /* everything the loader holds is counted here (&own_budget) */
    sl__budget own_budget;   /* with cfg.shared_budget, a child of the shared one */
    int shared;              /* own_budget is a child of cfg.shared_budget's (we hold a reference) */
    sl__source *src;         /* a remote one owns its I/O engine (io/engine.h), which locks itself */
    sl__schema schema;       /* the fields (fields/field.h) */
    sl__layout layout;       /* where each output lives in a slot */
    sl__sampler sampler;
    uint32_t B;              /* batch size */
    uint64_t nbatches;       /* nominal batches per epoch */
    uint32_t nworkers;       /* workers started: a fixed count, or the tuner's ceiling (a default
                                one lowered at sizing to what the budget holds) */
    uint32_t cpu_workers;    /* nworkers as init set it, before sizing lowered a default ceiling */
    int tuned;               /* cfg.workers = SL_WORKERS_AUTO: the tuner moves them (tuner.h) */
    uint32_t cores;          /* with the tuner: this rank's share of the node's CPUs (base/cpus.h) */
    uint32_t node_cpus;      /* with the tuner and local ranks (> 1): the node's CPUs, which its
                                ranks' tuned loaders share by demand (base/node.h); 0: not shared */
    uint64_t sample_cap;     /* most scratch growth one sample may have (admit.c) */
    double index_seconds;
} sl__conf;

/* The most growth one sample may have: a quarter of the budget (admit.c
 * says why). */
static inline uint64_t sl__sample_cap(uint64_t budget) { return budget / 4; }

/* Step 1. The budget for the checked configuration cfg and the recipe it
 * asks for (both copied into c; c->cfg.recipe points at the copy):
 * its own, or a child of cfg->shared_budget capped at what that has left
 * (cfg.budget then says so). 0, or SL_ESYS with err. */
int sl__conf_budget(sl__conf *c, const sl_config *cfg, const sl_image_recipe *recipe, char *err, size_t errlen);
/* Give back the budget (after everything counted in it is freed). */
void sl__conf_budget_fini(sl__conf *c);
/* Step 1, once the loader's own struct is counted: the per-sample room,
 * the worker count (worker_bytes: what one worker holds for life, which
 * bounds the workers a node-shared tuner adds past its rank's share), the
 * batch size, the copies of the strings. 0, or SL_EBUDGET / SL_ENOMEM with
 * err. */
int sl__conf_init(sl__conf *c, uint64_t worker_bytes, char *err, size_t errlen);
/* Step 2: schema, index, layout, sampler. 0, or the failure with err. */
int sl__conf_index(sl__conf *c, char *err, size_t errlen);
/* Step 4, workers = SL_WORKERS_AUTO without workers_max (the defaults):
 * the tuner's ceiling as init set it, but no more workers than room holds
 * at per_worker bytes each, and at least one; a count or a ceiling the
 * caller chose is kept. A default is never the reason a budget is refused
 * that fewer workers fit (docs/memory.md). */
void sl__conf_fit_workers(sl__conf *c, uint64_t room, uint64_t per_worker);
/* Free what init and index made (the budget stays). */
void sl__conf_free(sl__conf *c);

/* Output out of the layout is delivered from device memory (on) or not:
 * the GPU stage, at create. */
void sl__conf_device(sl__conf *c, uint32_t out, int on);

/* An allocation of n bytes came back NULL at create: SL_EBUDGET when the
 * budget could not hold it, else SL_ENOMEM (the system refused). */
int sl__conf_alloc_fail(const sl__conf *c, uint64_t n);
/* With a shared budget, say in err that the budget that was short is what
 * the shared one had left. */
void sl__conf_shared_reason(const sl__conf *c, char *err, size_t errlen);

#endif
