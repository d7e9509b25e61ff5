/*
 * The GPU stage: the loader's scheduler feeds the GPU decode engine beside
 * its CPU workers (issue 13; docs/gpu.md). See gpustage.h for the data's
 * way and who owns what; the rules kept here:
 *
 * Same batches. Workers read every sample, probe it and plan it with the
 * CPU path's code (the image kind, fields/image.c), so the batch's samples,
 * their order, crop boxes and flips do not depend on which engine decodes
 * a sample; only its pixels may (docs/gpu.md bounds the difference). A
 * sample the GPU cannot take (sl__gpu_item_from_plan), or that the split
 * gives the CPU, is decoded by the worker as before.
 *
 * Which engine decodes a sample. decode=gpu and prefer-gpu: every sample
 * the GPU can take goes to it, by rules of the sample only (its plan and
 * format, max_pixels, a whole JPEG, at most half the staging; the engine's
 * own rules, engine.h): a worker waits for staging room, the GPU thread
 * resubmits what found no device room (SL_GPU_AGAIN), never hands it to
 * the CPU for it, so the bytes do not depend on worker count, timing or
 * load. decode=auto: sl__gpu_split over the one position in hand, the
 * GPU's queue (samples taken, not yet decoded) against the CPU's (its
 * workers, each with a sample in hand), at the measured rates, so that
 * both finish together: faster where both sides are busy, not
 * reproducible.
 *
 * Completion. A position is done (its pending count drops) when its pixels
 * are written: the GPU thread's after its call returned (the engine waited
 * for the stream), on the device; a worker's CPU decode in the slot's host
 * block, marked host_only. The committer, which alone settles a batch,
 * uploads a batch's host_only positions (runs of neighbours, one lane,
 * one wait: sl__gstage_flush) before anything else of the commit, so a
 * batch is READY exactly as on the CPU path, and the device batch is
 * complete for any stream then. (One thread's few copies a batch, from
 * page-locked slots, where a copy and a wait from every worker for every
 * sample held the CUDA driver's locks thousands of times a second against
 * the training loop's launches: bench/README.md, "GPU host, 2026-11-27,
 * third session".) A video clip the worker decodes is uploaded by it.
 *
 * Handbacks. What the engine hands back (not a JPEG it takes,
 * corrupt data, pool full) is claimed by workers before any other work and
 * decoded on the CPU from the file: a corrupt file becomes the CPU path's
 * error record.
 *
 * Locks. The queue, the handbacks and the GPU thread's wakeups are under
 * the engine's lock (engine.c runs the GPU thread's loop); the staging
 * count under smu, which is taken alone or after it. The GPU thread counts
 * as a claim in flight while its call runs, so a reset waits for it; items
 * of an older generation are dropped, never written.
 *
 * Ownership of a staging block: the worker that took the sample, until it
 * is queued (sl__gstage_push) or the fill fails (freed); then the queue;
 * then the GPU thread's call, which frees it when the call has returned.
 *
 * Host memory. What the CUDA driver, nvJPEG and NVRTC take outside every
 * hook is measured at open (the process's resident growth over the open,
 * less what the budget counted meanwhile; at least HOST_FLOOR) and counted
 * in the budget's fixed part under SL_MEM_GPU_HOST: sizing holds it
 * (sl__gstage_host_pending), so a budget that cannot is refused naming the
 * minimum, or with decode=auto/prefer-gpu the CPU path is sized instead,
 * still counting what the attempt left resident (docs/gpu.md, "Memory").
 *
 * A video field (issue 23). The device is the GPU video engine (NVDEC
 * sessions, gpu/video.c) and there is no queue: the worker that planned a
 * clip decodes it on a session itself (offer_clip), straight into the
 * position's device memory, and the position completes as any CPU sample
 * does. decode=gpu and prefer-gpu wait for a session, so every clip NVDEC
 * takes goes to it whatever the timing (the bytes do not depend on the
 * worker count); decode=auto gives the CPU the clips that find every
 * session busy. A clip the GPU cannot take ("for the CPU: ...": codec,
 * profile, rotation, a stream NVDEC refuses or fails on) is decoded by the
 * worker on the CPU and uploaded, so a corrupt stream becomes the CPU
 * path's record.
 */
#define _GNU_SOURCE
#include "pipeline/gpustage.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/hash.h"
#include "base/thread.h"
#include "base/util.h"
#include "gpu/split.h"

#define DEFAULT_GPU_BUDGET ((uint64_t)512 << 20)
#define DEFAULT_STAGING ((uint64_t)64 << 20)
#define MIN_STAGING ((uint64_t)1 << 20)
#define BOUNCE_MAX ((uint64_t)8 << 20) /* the flush's bounce block: at most this, a quarter of the staging */
#define GATHER_NS 1000000u /* a call waits at most this long for more samples (SLUICE_GPU_GATHER) */
/* Counted at least, whatever the measurement says (a process where torch made the context): the
 * driver's per-thread state of the workers that copy, nvJPEG's host buffers growing with the
 * first large images after open. What plan counts, which opens nothing. */
#define HOST_FLOOR ((uint64_t)16 << 20)
/* Video: each NVDEC session's device memory, its surfaces (a 1080p H.264
 * stream's decoder needs 50 to 90 MiB) and its share of the pool (a 1080p
 * val clip's boxes and passes) */
#define VIDEO_SESSION_CAP ((uint64_t)160 << 20)
#define VIDEO_SESSION_POOL ((uint64_t)16 << 20)
/* What plan and the default modes' rule count for the libraries' host memory before anything is
 * opened: the most measured at open in a process without a CUDA context (184 MiB on the H200
 * host: driver context, nvJPEG, kernels), rounded up. A rule of the configuration, so whether
 * decode=prefer-gpu or auto take the GPU does not follow a measurement (docs/gpu.md, "Memory"). */
#define HOST_RESERVE ((uint64_t)192 << 20)

typedef unsigned long long ull;

/* ---- choosing the engine -------------------------------------------------- */

/* The first image field the engine decodes, else the first video field
 * (*video set): NULL with *fi set, else why none is. */
static const char *gpu_field(const sl__conf *c, uint32_t *fi, int *video) {
    const char *why = "the schema has no image or video field";
    *video = 0;
    for (uint32_t i = 0; i < c->schema.nfields; i++) {
        const sl__field *f = &c->schema.fields[i];
        if (f->kind->id != SL_KIND_IMAGE) continue;
        const sl__recipe *r = &f->recipe;
        if (r->preset != SL_PRESET_TRAIN && r->preset != SL_PRESET_VAL) why = "its image field has no preset";
        else if (r->interp != SL_INTERP_BILINEAR) why = "bicubic (the GPU kernels resize bilinear)";
        else if (r->flags & SL_FLAG_KEEP_ALPHA) why = "keep_alpha (the GPU writes RGB)";
        else {
            *fi = i;
            return NULL;
        }
    }
    for (uint32_t i = 0; i < c->schema.nfields; i++) {
        if (c->schema.fields[i].kind->id != SL_KIND_VIDEO) continue;
        *fi = i;
        *video = 1;
        return NULL;
    }
    return why;
}

static const char *mode_name(int decode) {
    return decode == SL_DECODE_GPU ? "gpu" : decode == SL_DECODE_AUTO ? "auto" : "prefer-gpu";
}

/* decode=auto, prefer-gpu: the CPU path, saying why (0). decode=gpu: the failure. */
static int fall_back(sl__gstage *g, int rc, const char *why, char *err, size_t errlen) {
    g->mode = SL_DECODE_CPU;
    if (g->conf->cfg.decode == SL_DECODE_GPU) {
        sl__msg(err, errlen, "decode=gpu: %s", why);
        return rc;
    }
    sl__msg(g->reason, sizeof g->reason, "decode=%s, the CPU: %s", mode_name(g->conf->cfg.decode), why);
    return 0;
}

/* Most slots step_size can carve for this configuration (its cap, with
 * the most workers sizing may leave). */
static uint32_t slots_bound(const sl__conf *conf) {
    const sl_config *c = &conf->cfg;
    uint64_t min_slots = SL_MAX(c->min_slots, c->prefetch ? c->prefetch : 1);
    uint64_t cap = c->prefetch ? c->prefetch : SL_MAX(4, (4ull * conf->cpu_workers + conf->B - 1) / conf->B);
    return (uint32_t)SL_MAX(cap, min_slots);
}

/* SLUICE_GPU_GATHER=N and SLUICE_GPU_GATHER_MS=MS (an experiment's knobs):
 * a call waits up to MS milliseconds (default 1, at most 100) after its
 * oldest sample was queued for N samples (default a quarter of a full
 * call, at most a full one); a value out of range is ignored. Timing only:
 * which engine call decodes a sample never changes its bytes. */
static void gather_conf(sl__gstage *g) {
    g->gather_min = g->max_batch / 4;
    g->gather_ns = GATHER_NS;
    const char *env = getenv("SLUICE_GPU_GATHER");
    char *end;
    unsigned long n = env ? strtoul(env, &end, 10) : 0;
    if (env && end != env && !*end && n >= 1) g->gather_min = (uint32_t)SL_MIN(n, (unsigned long)g->max_batch);
    env = getenv("SLUICE_GPU_GATHER_MS");
    double ms = env ? strtod(env, &end) : -1.0;
    if (env && end != env && !*end && ms >= 0.0 && ms <= 100.0) g->gather_ns = (uint64_t)(ms * 1e6);
}

/* Device and pinned sizes; 0, or a fall-back reason in why. */
static int size_stage(sl__gstage *g, uint64_t *budget, char *why, size_t wlen) {
    const sl__conf *conf = g->conf;
    const sl_config *c = &conf->cfg;
    char b1[16], b2[16], b3[16], b4[16];
    g->out = conf->layout.field_out[g->field];
    g->sample_bytes = conf->layout.out[g->out].sample_bytes;
    g->max_batch = SL_MIN(SL_MAX(conf->B, 32u), 256u);
    gather_conf(g);
    g->slots_max = slots_bound(conf);
    uint64_t batches, need, positions;
    *budget = c->gpu_budget ? c->gpu_budget : DEFAULT_GPU_BUDGET;
    if (sl__mul(conf->B, g->sample_bytes, &g->slot_bytes) || sl__mul(g->slots_max, g->slot_bytes, &batches) ||
        sl__add(batches, sl__gpu_min_device(g->max_batch), &need) ||
        sl__mul(g->slots_max, conf->B, &positions) || positions + g->max_batch > UINT32_MAX) {
        sl__msg(why, wlen, "%u device batch slots of %u samples overflow", g->slots_max, conf->B);
        return SL_EOVERFLOW;
    }
    if (*budget < need) {
        sl__msg(why, wlen, "gpu_budget %s cannot hold %u device batch slots of %s and the engine's minimum of %s: "
                "raise it to at least %s", sl__fmt_bytes(*budget, b1, sizeof b1), g->slots_max,
                sl__fmt_bytes(g->slot_bytes, b2, sizeof b2), sl__fmt_bytes(sl__gpu_min_device(g->max_batch), b3,
                sizeof b3), sl__fmt_bytes(need, b4, sizeof b4));
        return SL_EBUDGET;
    }
    if (g->video) { /* sessions: what the budget holds beside the slots, one a worker at most */
        uint64_t per = VIDEO_SESSION_CAP + VIDEO_SESSION_POOL, room = *budget - need;
        g->sessions = (uint32_t)SL_MIN((uint64_t)conf->nworkers, room / per);
        if (g->sessions == 0) {
            sl__msg(why, wlen, "gpu_budget %s cannot hold %u device batch slots of %s and one NVDEC session of %s: "
                    "raise it to at least %s", sl__fmt_bytes(*budget, b1, sizeof b1), g->slots_max,
                    sl__fmt_bytes(g->slot_bytes, b2, sizeof b2), sl__fmt_bytes(per, b3, sizeof b3),
                    sl__fmt_bytes(need + per, b4, sizeof b4));
            return SL_EBUDGET;
        }
        g->pool_bytes = (uint64_t)g->sessions * VIDEO_SESSION_POOL + sl__gpu_video_min_pool(g->sessions);
        g->engines = 1; /* the device config's; the device opens NVDEC sessions, no decode engine */
        return 0;
    }
    g->engines = c->gpu_engines ? c->gpu_engines : 1;
    if (g->engines > SL_GPU_MAX_ENGINES) {
        sl__msg(why, wlen, "gpu_engines %u: at most %u", g->engines, SL_GPU_MAX_ENGINES);
        return SL_EINVAL;
    }
    if ((*budget - batches) / g->engines < sl__gpu_min_device(g->max_batch)) {
        sl__msg(why, wlen, "gpu_budget %s cannot hold %u device batch slots of %s and %u engines' minimum of %s each",
                sl__fmt_bytes(*budget, b1, sizeof b1), g->slots_max, sl__fmt_bytes(g->slot_bytes, b2, sizeof b2),
                g->engines, sl__fmt_bytes(sl__gpu_min_device(g->max_batch), b3, sizeof b3));
        return SL_EBUDGET;
    }
    g->pool_bytes = *budget - batches;
    g->staging_cap = c->gpu_staging ? c->gpu_staging : SL_MIN(DEFAULT_STAGING, c->budget / 8);
    if (g->staging_cap < MIN_STAGING) {
        sl__msg(why, wlen, "%s of pinned staging for the GPU is below its minimum of %s (an eighth of the budget "
                "unless gpu_staging says)", sl__fmt_bytes(g->staging_cap, b1, sizeof b1),
                sl__fmt_bytes(MIN_STAGING, b2, sizeof b2));
        return SL_EBUDGET;
    }
    g->qcap = (uint32_t)positions + g->max_batch;
    return 0;
}

static int open_sync(sl__gstage *g) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return SL_ESYS;
    int n = 0;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_mutex_init(&g->smu, NULL) == 0 && ++n &&
        pthread_cond_init(&g->scv, &ca) == 0)
        g->sync_init = 1;
    pthread_condattr_destroy(&ca);
    if (g->sync_init) return 0;
    if (n > 0) pthread_mutex_destroy(&g->smu);
    return SL_ESYS;
}

/* The queue, the handbacks and every call's arrays: one block of the host
 * budget, freed in one place (free_tables). */
static int open_tables(sl__gstage *g) {
    uint32_t m = g->max_batch, E = g->engines;
    sl__part parts[9 + 8 * SL_GPU_MAX_ENGINES] = {{&g->q, g->qcap, sizeof *g->q},
                                                  {&g->back, g->qcap, sizeof *g->back},
                                                  {&g->host_only, g->qcap, sizeof *g->host_only},
                                                  {&g->fl_dst, g->conf->B, sizeof *g->fl_dst},
                                                  {&g->fl_src, g->conf->B, sizeof *g->fl_src},
                                                  {&g->fl_len, g->conf->B, sizeof *g->fl_len},
                                                  {&g->bb_dst, g->conf->B, sizeof *g->bb_dst},
                                                  {&g->bb_src, g->conf->B, sizeof *g->bb_src},
                                                  {&g->bb_len, g->conf->B, sizeof *g->bb_len}};
    size_t np = 9;
    for (uint32_t k = 0; k < E; k++) {
        sl__gcall *c = &g->calls[k];
        const sl__part call[8] = {{&c->cur, m, sizeof *c->cur},      {&c->status, m, sizeof *c->status},
                                  {&c->which, m, sizeof *c->which},  {&c->data, m, sizeof *c->data},
                                  {&c->len, m, sizeof *c->len},      {&c->items, m, sizeof *c->items},
                                  {&c->cstatus, m, sizeof *c->cstatus}, {&c->reasons, m, sizeof *c->reasons}};
        memcpy(parts + np, call, sizeof call);
        np += 8;
    }
    return sl__alloc_parts(g->conf->budget, parts, np, SL_MEM_OTHER, &g->tables);
}

static void free_tables(sl__gstage *g) {
    sl__free(g->conf->budget, g->tables);
    g->tables = NULL;
    g->q = g->back = NULL;
    g->host_only = NULL;
    g->fl_dst = NULL, g->fl_src = NULL, g->fl_len = NULL;
    g->bb_dst = NULL, g->bb_src = NULL, g->bb_len = NULL;
    for (uint32_t k = 0; k < SL_GPU_MAX_ENGINES; k++) {
        sl__gcall *c = &g->calls[k];
        c->cur = NULL, c->status = c->cstatus = NULL, c->which = NULL, c->data = NULL, c->len = NULL;
        c->items = NULL, c->reasons = NULL;
    }
}

/* Plan, decide: count the pinned pool the device would take, open
 * nothing; the engine's host memory is HOST_RESERVE (nothing measured). */
static int plan_pinned(sl__gstage *g, char *err, size_t errlen) {
    if (g->video) { /* no staging */
        g->host_pending = HOST_RESERVE;
        g->mode = SL_DECODE_GPU;
        return 0;
    }
    uint64_t n = sl__map_cost(sl__gpu_min_pinned(g->max_batch) + g->staging_cap) + /* engine 0's, the others' */
                 (uint64_t)(g->engines - 1) * sl__map_cost(sl__gpu_min_pinned(g->max_batch));
    if (sl__budget_try(g->conf->budget, n, SL_MEM_PINNED)) {
        char b[16], why[80];
        sl__msg(why, sizeof why, "the budget cannot hold %s of pinned staging", sl__fmt_bytes(n, b, sizeof b));
        return fall_back(g, SL_EBUDGET, why, err, errlen);
    }
    g->planned_pinned = n;
    g->opened = n;
    g->host_pending = HOST_RESERVE;
    g->mode = SL_DECODE_GPU;
    return 0;
}

/* The host memory the open added outside the budget's count, at least
 * HOST_FLOOR, page-rounded: pending until the slots step counts it. */
static void measure_host(sl__gstage *g) {
    uint64_t grown = sl__gpu_rss_now() - g->rss0, counted = atomic_load(&g->conf->budget->used) - g->used0;
    uint64_t n = grown > counted && grown - counted < ((uint64_t)1 << 40) ? grown - counted : 0;
    g->host_pending = sl__map_cost(SL_MAX(n, HOST_FLOOR));
}

static int open_device(sl__gstage *g, uint64_t budget, char *err, size_t errlen) {
    const sl__conf *conf = g->conf;
    const sl_config *c = &conf->cfg;
    char why[300] = "";
    if (open_sync(g)) return fall_back(g, SL_ESYS, "could not make the GPU stage's locks", err, errlen);
    sl__gpu_dev_config dc = {c->gpu_device,      g->pool_bytes,          g->staging_cap, g->max_batch,
                             c->gpu_max_pixels, conf->cpu_workers + 1, g->engines,     g->video,
                             g->sessions,       VIDEO_SESSION_CAP}; /* lanes: sizing may lower nworkers */
    int rc = sl__gpu_dev_open(&dc, conf->budget, &g->dev, why, sizeof why);
    if (rc) {
        memset(&g->dev, 0, sizeof g->dev);
        return fall_back(g, rc, why, err, errlen);
    }
    g->engines = SL_MIN(g->engines, g->dev.engines); /* one GPU thread per engine the device opened (video: none) */
    if (!g->video && (rc = open_tables(g))) {
        free_tables(g);
        g->dev.close(g->dev.ctx);
        memset(&g->dev, 0, sizeof g->dev);
        return fall_back(g, rc, rc == SL_EBUDGET ? "the budget cannot hold the GPU stage's queue"
                                                 : "out of memory for the GPU stage's queue", err, errlen);
    }
    measure_host(g);
    g->opened = atomic_load(&conf->budget->used) - g->used0;
    sl__gpu_stats st;
    g->dev.stats(g->dev.ctx, &st);
    char b1[16], b2[16];
    if (g->video) /* short: the clips handed to the CPU and why are said after it (sl__gstage_mode) */
        sl__msg(g->reason, sizeof g->reason, "decode=%s: %u NVDEC sessions on %s (%s of device memory, %s of host "
                "memory)", mode_name(c->decode), g->sessions, st.device_name[0] ? st.device_name : "the device",
                sl__fmt_bytes(budget, b1, sizeof b1), sl__fmt_bytes(g->host_pending, b2, sizeof b2));
    else /* (the CPU workers beside it: sl_stats.workers; sizing may still lower a default count) */
        sl__msg(g->reason, sizeof g->reason, "decode=%s: %u GPU engine%s on %s (%s of device memory, %s of host "
                "memory their libraries hold)", mode_name(c->decode), g->engines, g->engines > 1 ? "s" : "",
                st.device_name[0] ? st.device_name : "the device", sl__fmt_bytes(budget, b1, sizeof b1),
                sl__fmt_bytes(g->host_pending, b2, sizeof b2));
    g->on = 1;
    g->mode = SL_DECODE_GPU;
    return 0;
}

/* SLUICE_GPU_SHARE=p (an experiment's knob, 0 < p < 1): in decode=gpu and
 * prefer-gpu only the samples whose hash of (seed, index) falls in the
 * first p of the range go to the GPU, the others to the CPU workers: a
 * rule of the sample, so the bytes still follow the seed, not timing. */
static uint64_t share_cut(void) {
    const char *env = getenv("SLUICE_GPU_SHARE");
    char *end;
    double p = env ? strtod(env, &end) : 1.0;
    if (!env || end == env || !(p >= 0.0) || p >= 1.0) return UINT64_MAX;
    return (uint64_t)(p * 18446744073709551616.0);
}

static int share_gpu(const sl__gstage *g, uint64_t sample) {
    return g->share_cut == UINT64_MAX || sl__hash64(&sample, sizeof sample, g->conf->cfg.seed) < g->share_cut;
}

int sl__gstage_open(sl__gstage *g, const sl__conf *conf, const _Atomic int *cancel, int how, char *err,
                    size_t errlen) {
    const sl_config *c = &conf->cfg;
    g->conf = conf;
    g->cancel = cancel;
    g->mode = SL_DECODE_CPU;
    g->host_pending = g->opened = 0; /* a rule's count, after its close */
    g->gpu_only = c->decode == SL_DECODE_GPU || c->decode == SL_DECODE_PREFER_GPU;
    g->share_cut = share_cut();
    if (c->decode == SL_DECODE_CPU) {
        sl__msg(g->reason, sizeof g->reason, "decode=cpu");
        return 0;
    }
    char why[300];
    const char *none = gpu_field(conf, &g->field, &g->video);
    if (none) {
        sl__msg(why, sizeof why, "no image or video field the GPU decodes (%s)", none);
        return fall_back(g, SL_EUNSUPPORTED, why, err, errlen);
    }
    g->rss0 = how == SL_GSTAGE_OPEN ? sl__gpu_rss_now() : 0; /* before the driver is loaded: part of the growth */
    g->used0 = atomic_load(&conf->budget->used);
    /* the rule loads no driver: a budget too small for the stage never pays for one */
    if (how != SL_GSTAGE_DECIDE &&
        !(g->video ? sl__gpu_dev_video_available(why, sizeof why) : sl__gpu_dev_available(why, sizeof why)))
        return fall_back(g, SL_EUNSUPPORTED, why, err, errlen);
    uint64_t budget;
    int rc = size_stage(g, &budget, why, sizeof why);
    if (rc) return fall_back(g, rc, why, err, errlen);
    return how == SL_GSTAGE_OPEN ? open_device(g, budget, err, errlen) : plan_pinned(g, err, errlen);
}

uint64_t sl__gstage_host_pending(const sl__gstage *g) { return g->host_pending; }

uint64_t sl__gstage_fixed(const sl__gstage *g) {
    return (g->mode == SL_DECODE_GPU ? g->opened : 0) + g->host_pending + g->host_counted;
}

uint64_t sl__gstage_more_at(const sl__gstage *g, uint64_t b) {
    if (g->mode != SL_DECODE_GPU || g->video || g->conf->cfg.gpu_staging) return 0;
    uint64_t s = SL_MIN(DEFAULT_STAGING, b / 8), pin = sl__gpu_min_pinned(g->max_batch);
    return s > g->staging_cap ? sl__map_cost(pin + s) - sl__map_cost(pin + g->staging_cap) : 0;
}

int sl__gstage_decides(const sl__conf *conf) {
    return conf->cfg.decode == SL_DECODE_PREFER_GPU || conf->cfg.decode == SL_DECODE_AUTO;
}

int sl__gstage_planned(const sl__gstage *g) { return g->mode == SL_DECODE_GPU && !g->on; }

int sl__gstage_give_up(sl__gstage *g, uint64_t min_budget) {
    const sl__conf *conf = g->conf;
    if (g->mode != SL_DECODE_GPU || conf->cfg.decode == SL_DECODE_GPU) return 0;
    int opened = g->rss0 != 0; /* an open measured from rss0; plan and the rule loaded nothing */
    sl__gstage_close(g, 0);
    /* what the attempt left resident (the driver, once loaded, stays) */
    g->host_pending = 0;
    if (opened) {
        uint64_t grown = sl__gpu_rss_now() - g->rss0, counted = atomic_load(&conf->budget->used) - g->used0;
        if (grown > counted && grown - counted < ((uint64_t)1 << 40)) g->host_pending = sl__map_cost(grown - counted);
    }
    char b1[16], b2[16];
    sl__msg(g->reason, sizeof g->reason, "decode=%s, the CPU: budget %s cannot hold the GPU stage (with it the "
            "minimum is %s)", mode_name(conf->cfg.decode), sl__fmt_bytes(sl__budget_limit(conf->budget), b1, sizeof b1),
            sl__fmt_bytes(min_budget, b2, sizeof b2));
    g->mode = SL_DECODE_CPU;
    return 1;
}

/* The host memory measured at open (pending in the sizing), counted. */
static int count_host(sl__gstage *g, char *err, size_t errlen) {
    sl__budget *b = g->conf->budget;
    uint64_t n = g->host_pending;
    if (!n) return 0;
    /* sizing kept it: a refusal means a shared budget moved meanwhile */
    int rc = sl__budget_try(b, n, SL_MEM_GPU_HOST);
    if (!rc && (rc = sl__budget_fix(b, n))) sl__budget_release(b, n, SL_MEM_GPU_HOST);
    if (rc) {
        char b1[16];
        sl__msg(err, errlen, "the budget cannot hold the %s of host memory the GPU engine's libraries hold",
                sl__fmt_bytes(n, b1, sizeof b1));
        return SL_EBUDGET;
    }
    g->host_counted = n;
    g->host_pending = 0;
    return 0;
}

int sl__gstage_slots(sl__gstage *g, uint32_t nslots, char *err, size_t errlen) {
    char why[300] = "";
    int rc = count_host(g, why, sizeof why);
    if (rc) {
        if (!g->on || g->conf->cfg.decode == SL_DECODE_GPU) {
            sl__msg(err, errlen, "%s", why);
            return rc;
        }
        sl__gstage_close(g, 0); /* a shared budget moved since sizing: the CPU path */
        return fall_back(g, rc, why, err, errlen);
    }
    if (!g->on) return 0;
    rc = SL_EINVAL;
    uint64_t bytes = (uint64_t)nslots * g->slot_bytes;
    if (nslots > g->slots_max) sl__msg(why, sizeof why, "%u slots, over the %u sized for", nslots, g->slots_max);
    else rc = g->dev.region(g->dev.ctx, bytes, &g->region, why, sizeof why);
    if (!rc) {
        g->region_bytes = bytes;
        return 0;
    }
    sl__gstage_close(g, 0);
    return fall_back(g, rc, why, err, errlen);
}

/* How the slots' CPU-decoded images reach the device (SLUICE_GPU_PIN_SLOTS):
 * through a pinned bounce block, the slots pageable (unset or "bounce", the
 * default: only the images waiting for their upload are resident), from
 * the slots page-locked for life ("1"), or from them pageable ("0"). */
enum { UPLOAD_PINNED, UPLOAD_PAGEABLE, UPLOAD_BOUNCE };
static int upload_mode(void) {
    const char *env = getenv("SLUICE_GPU_PIN_SLOTS");
    return !env ? UPLOAD_BOUNCE : !strcmp(env, "0") ? UPLOAD_PAGEABLE : !strcmp(env, "1") ? UPLOAD_PINNED
                                                                                          : UPLOAD_BOUNCE;
}

int sl__gstage_wants_pin(const sl__gstage *g) { return g->on && g->dev.pin && upload_mode() == UPLOAD_PINNED; }

void sl__gstage_bounce(sl__gstage *g) {
    if (!g->on || g->video || upload_mode() != UPLOAD_BOUNCE) return;
    uint64_t n = SL_MIN(SL_MIN(g->staging_cap / 4, BOUNCE_MAX), (uint64_t)g->conf->B * g->sample_bytes);
    void *p = n ? g->dev.stage_alloc(g->dev.ctx, (size_t)n) : NULL;
    size_t at = strlen(g->reason);
    char b[16];
    if (!p) {
        snprintf(g->reason + at, sizeof g->reason - at, "; uploads pageable: no staging room for a bounce block");
        return;
    }
    g->bounce = p, g->bounce_len = (size_t)n;
    snprintf(g->reason + at, sizeof g->reason - at, "; uploads through a pinned bounce block of %s",
             sl__fmt_bytes(n, b, sizeof b));
}

void sl__gstage_pin(sl__gstage *g, void *base, size_t len) {
    char why[200];
    if (g->dev.pin(g->dev.ctx, base, len, why, sizeof why)) { /* stats' decode_reason says it (no thread runs yet) */
        size_t at = strlen(g->reason);
        snprintf(g->reason + at, sizeof g->reason - at, "; uploads pageable: %s", why);
    }
}

/* ---- staging --------------------------------------------------------------- */

/* A staging block for n bytes, or NULL: the CPU decodes the sample. With
 * gpu_only, waits for room (samples over half the staging never fit:
 * the CPU, whatever the timing). */
static void *stage_take(sl__gstage *g, size_t n) {
    if (n == 0 || n > g->staging_cap / 2) return NULL;
    void *p = NULL;
    pthread_mutex_lock(&g->smu);
    for (;;) {
        if (g->staged + n <= g->staging_cap - g->bounce_len && (p = g->dev.stage_alloc(g->dev.ctx, n))) {
            g->staged += n;
            if (g->staged > g->staged_peak) g->staged_peak = g->staged;
            break;
        }
        if (!g->gpu_only || g->staged == 0 || atomic_load(g->cancel) || atomic_load(&g->failed)) break;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += 10000000; /* look at cancel now and then */
        if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->scv, &g->smu, &dl);
    }
    pthread_mutex_unlock(&g->smu);
    return p;
}

static void stage_release(sl__gstage *g, sl__gitem *it) {
    if (!it->data) return;
    g->dev.stage_free(g->dev.ctx, it->data);
    it->data = NULL;
    pthread_mutex_lock(&g->smu);
    g->staged -= it->len;
    pthread_cond_broadcast(&g->scv);
    pthread_mutex_unlock(&g->smu);
}

/* ---- the worker's side ----------------------------------------------------- */

/* Should the sample in hand go to the GPU? (not decode=gpu) */
static int want_gpu(sl__gstage *g) {
    uint32_t workers = g->active ? atomic_load_explicit(g->active, memory_order_relaxed) : g->conf->nworkers;
    double rg = (double)atomic_load(&g->gpu_rate_mhz) / 1000.0;
    uint64_t ns = atomic_load(&g->cpu_ns);
    double rc = ns ? (double)workers * 1e9 / (double)ns : 0;
    uint32_t q = atomic_load(&g->queued);
    if (rg <= 0) return q < 2 * g->max_batch; /* measure the GPU first, the CPU busy beside it */
    if (rc <= 0) return q < g->max_batch;     /* and the CPU */
    uint8_t one = 1, to = 0;
    sl__split_in in = {1, &one, rg, rc, (double)q, (double)workers, 0};
    return sl__gpu_split(&in, &to) == 1;
}

/* Does the JPEG end with its end-of-image marker (trailing padding
 * allowed)? A truncated file does not: nvJPEG may decode the part it has
 * without complaint where libjpeg-turbo reports it, so the CPU takes it
 * and the error record is the CPU path's. */
static int ends_whole(const uint8_t *data, size_t len) {
    size_t stop = len > 64 ? len - 64 : 0;
    for (size_t i = len; i >= stop + 2; i--)
        if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) return 1;
    return 0;
}

static sl__ghand *hand_of(sl__defer *d) { return (sl__ghand *)(void *)((char *)d - offsetof(sl__ghand, defer)); }

static int offer(sl__defer *d, const sl__field *f, const uint8_t *data, size_t len, const sl_image_info *info,
                 const sl__plan *plan) {
    sl__ghand *h = hand_of(d);
    sl__gstage *g = h->g;
    const sl__conf *conf = g->conf;
    if (h->cpu_only || h->taken || f != &conf->schema.fields[g->field] || atomic_load(&g->failed)) return 0;
    sl__gpu_item it;
    if (sl__gpu_item_from_plan(plan, info, h->slot_id * conf->B + h->pos, &it, NULL, 0)) return 0;
    uint64_t cap = conf->cfg.gpu_max_pixels ? conf->cfg.gpu_max_pixels : SL_GPU_MAX_PIXELS;
    if ((uint64_t)info->width * info->height > cap || !ends_whole(data, len)) return 0;
    if (g->gpu_only ? !share_gpu(g, h->sample) : !want_gpu(g)) return 0;
    void *blk = stage_take(g, len);
    if (!blk) return 0;
    memcpy(blk, data, len);
    if (g->dev.ask) g->dev.ask(g->dev.ctx, h->lane, data, len, &it); /* off the engine's thread */
    h->item = (sl__gitem){
        .slot = h->slot, .pos = h->pos, .sample = h->sample, .epoch = h->epoch, .data = blk, .len = len, .item = it};
    h->taken = 1;
    atomic_fetch_add(&g->queued, 1);
    return 1;
}

static uint64_t dev_addr(const sl__gstage *g, uint32_t slot_id, uint32_t j) {
    return g->region + (uint64_t)slot_id * g->slot_bytes + (uint64_t)j * g->sample_bytes;
}

/* Slot slot_id's host_only marks, by position (images only). */
static uint8_t *marks(const sl__gstage *g, uint32_t slot_id) { return g->host_only + (size_t)slot_id * g->conf->B; }

/* A video field's clip, planned by the worker: decoded on an NVDEC
 * session into its position's device memory (1), or back to the worker
 * (0) with the engine's reason left in the stage's counters. */
static int offer_clip(sl__defer *d, const sl__field *f, const sl__sample_file *sf, const sl__video_info *info,
                      const sl__clip_plan *plan, sl__quota *q) {
    sl__ghand *h = hand_of(d);
    sl__gstage *g = h->g;
    if (!g->video || h->cpu_only || f != &g->conf->schema.fields[g->field] || atomic_load(&g->failed)) return 0;
    char why[200] = "";
    uint64_t dst = dev_addr(g, h->slot_id, h->pos);
    int rc = g->dev.clip(g->dev.ctx, h->lane, sf, info, plan, q, g->cancel, g->gpu_only, dst, why, sizeof why);
    if (rc == 0) {
        h->done = 1;
        return 1;
    }
    if (rc == SL_ESTATE) return SL_ESTATE;
    pthread_mutex_lock(&g->smu);
    if (rc == SL_EIO && !atomic_exchange(&g->failed, 1)) /* the CPU decodes from here */
        sl__msg(g->reason, sizeof g->reason, "the GPU video engine stopped (the CPU decodes from here): %s", why);
    sl__msg(g->back_reason, sizeof g->back_reason, "%s", strncmp(why, "for the CPU: ", 13) ? why : why + 13);
    pthread_mutex_unlock(&g->smu);
    atomic_fetch_add(&g->handed_back, 1);
    return 0;
}

/* The hand's taken sample does not go to the GPU after all. */
static void untake(sl__ghand *h) {
    sl__gstage *g = h->g;
    stage_release(g, &h->item);
    h->taken = 0;
    atomic_fetch_sub(&g->queued, 1);
}

void sl__gstage_hand_init(sl__ghand *h, sl__gstage *g, uint32_t lane) {
    memset(h, 0, sizeof *h);
    h->g = g;
    h->lane = lane;
}

void sl__gstage_begin(sl__ghand *h, sl_batch *s, uint32_t slot_id, uint32_t j, uint64_t sample, uint64_t epoch,
                      int cpu_only) {
    if (!h->g->on) return;
    if (h->taken) untake(h); /* an earlier attempt at this sample (transient failure, retried) */
    h->done = 0;
    h->defer.offer = offer;
    h->defer.clip = offer_clip;
    h->slot = s;
    h->slot_id = slot_id;
    h->pos = j;
    h->sample = sample;
    h->epoch = epoch;
    h->cpu_only = cpu_only;
}

int sl__gstage_end(sl__ghand *h, int *rc, uint64_t t0_ns, uint8_t *base, char *reason) {
    sl__gstage *g = h->g;
    if (!g->on) return 0;
    if (h->taken) {
        if (*rc == 0) return 1;
        untake(h);
        return 0;
    }
    if (h->done) { /* the clip is on the device already */
        h->done = 0;
        if (*rc == 0) atomic_fetch_add(&g->gpu_samples, 1);
        return 0;
    }
    if (*rc) return 0;
    uint32_t j = h->pos;
    if (!g->video) {
        marks(g, h->slot_id)[j] = 1; /* the commit's flush uploads it */
    } else {
        const sl__layout *L = &g->conf->layout;
        uint64_t c0 = sl__now_ns();
        int up = g->dev.upload(g->dev.ctx, h->lane, dev_addr(g, h->slot_id, j), sl__layout_at(L, base, g->out, j),
                               g->sample_bytes);
        atomic_fetch_add(&g->copy_ns, sl__now_ns() - c0);
        if (up) {
            sl__msg(reason, SL_REASON_MAX, "copying the decoded clip to the GPU failed");
            *rc = SL_EIO;
            return 0;
        }
    }
    atomic_fetch_add(&g->cpu_samples, 1);
    uint64_t dt = sl__now_ns() - t0_ns, old = atomic_load(&g->cpu_ns);
    atomic_store(&g->cpu_ns, old ? (old * 7 + dt) / 8 : dt); /* a lost update between workers is harmless */
    return 0;
}

void sl__gstage_push(sl__gstage *g, sl__ghand *h, uint64_t gen, uint64_t rank) {
    sl__gitem *it = &h->item;
    it->gen = gen; /* the claim's: no reset completes while this worker is active */
    it->t_ns = sl__now_ns();
    it->rank = rank;
    g->q[(g->qhead + g->qlen) % g->qcap] = *it; /* qcap covers every position of every slot */
    g->qlen++;
    h->taken = 0;
}

int sl__gstage_take_back(sl__gstage *g, uint64_t gen, sl_batch **s, uint32_t *j, uint64_t *sample, uint64_t *epoch) {
    while (g->on && g->blen) {
        sl__gitem *it = &g->back[g->bhead];
        g->bhead = (g->bhead + 1) % g->qcap;
        g->blen--;
        if (it->gen != gen) continue;
        *s = it->slot, *j = it->pos, *sample = it->sample, *epoch = it->epoch;
        return 1;
    }
    return 0;
}

/* Drop every queued sample and handback (mu held, or no thread left). */
static void drain(sl__gstage *g) {
    for (; g->qlen; g->qlen--, g->qhead = (g->qhead + 1) % g->qcap) stage_release(g, &g->q[g->qhead]);
    g->blen = 0;
}

void sl__gstage_reset(sl__gstage *g) {
    if (!g->on) return;
    drain(g);
    atomic_store(&g->queued, 0); /* nothing in the GPU's call, no worker holds a sample */
}

void sl__gstage_move(sl__gstage *g, uint32_t slot_id, uint32_t a, uint32_t b) {
    if (!g->on) return;
    if (!g->video) {
        uint8_t *mark = marks(g, slot_id);
        int host = mark[a];
        mark[b] = mark[a], mark[a] = 0;
        if (host) return; /* the host block's move carried it: the flush uploads it from b */
    }
    uint64_t c0 = sl__now_ns();
    if (g->dev.move(g->dev.ctx, g->conf->nworkers, dev_addr(g, slot_id, b), dev_addr(g, slot_id, a), g->sample_bytes))
        atomic_store(&g->failed, 1);
    atomic_fetch_add(&g->copy_ns, sl__now_ns() - c0);
}

/* The whole pages inside [p, p + n) back to the system (read as zeros after). */
static void drop_pages(const void *p, size_t n) {
    uintptr_t ps = sl__page_size(), a = ((uintptr_t)p + ps - 1) & ~(ps - 1), e = ((uintptr_t)p + n) & ~(ps - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED); /* a refusal only leaves them resident */
}

/* The flush's runs through the bounce block, a block's worth a call (each
 * complete on return, so the block is free again), each run's pages given
 * back once copied out: no other thread writes a committed batch's
 * positions, and the device copy is the one read from here on. */
static int upload_bounced(sl__gstage *g, uint32_t lane, uint32_t runs) {
    uint32_t k = 0;
    size_t used = 0;
    for (uint32_t i = 0; i < runs; i++) {
        const uint8_t *src = g->fl_src[i];
        for (size_t off = 0; off < g->fl_len[i];) {
            if (used == g->bounce_len) {
                if (g->dev.upload_runs(g->dev.ctx, lane, k, g->bb_dst, g->bb_src, g->bb_len)) return SL_EIO;
                k = 0, used = 0;
            }
            size_t take = SL_MIN(g->fl_len[i] - off, g->bounce_len - used);
            memcpy(g->bounce + used, src + off, take);
            g->bb_dst[k] = g->fl_dst[i] + off, g->bb_src[k] = g->bounce + used, g->bb_len[k++] = take; /* k <= runs */
            used += take, off += take;
        }
        drop_pages(src, g->fl_len[i]);
    }
    return k && g->dev.upload_runs(g->dev.ctx, lane, k, g->bb_dst, g->bb_src, g->bb_len) ? SL_EIO : 0;
}

void sl__gstage_flush(sl__gstage *g, uint32_t slot_id, uint8_t *base, const uint8_t *ok, uint32_t n,
                      void (*lost)(void *ctx, uint32_t j), void *ctx) {
    if (!g->on || g->video) return;
    const sl__layout *L = &g->conf->layout;
    uint8_t *mark = marks(g, slot_id);
    uint32_t runs = 0;
    for (uint32_t j = 0; j < n; j++) {
        if (!mark[j] || !ok[j]) continue;
        uint64_t at = dev_addr(g, slot_id, j);
        if (runs && g->fl_dst[runs - 1] + g->fl_len[runs - 1] == at) {
            g->fl_len[runs - 1] += g->sample_bytes;
        } else {
            g->fl_dst[runs] = at, g->fl_src[runs] = sl__layout_at(L, base, g->out, j);
            g->fl_len[runs++] = g->sample_bytes;
        }
    }
    uint64_t c0 = sl__now_ns();
    uint32_t lane = g->conf->nworkers; /* the committer's */
    if (runs && (g->bounce ? upload_bounced(g, lane, runs)
                           : g->dev.upload_runs(g->dev.ctx, lane, runs, g->fl_dst, g->fl_src, g->fl_len))) {
        atomic_store(&g->failed, 1); /* the device is gone: nothing more is offered */
        for (uint32_t j = 0; j < n; j++)
            if (mark[j] && ok[j]) lost(ctx, j);
    }
    atomic_fetch_add(&g->copy_ns, sl__now_ns() - c0);
    memset(mark, 0, n);
}

int sl__gstage_checksum(sl__gstage *g, uint32_t slot_id, uint8_t *base, uint64_t *hash, uint32_t n) {
    if (!g->on || !n) return 0;
    const sl__layout *L = &g->conf->layout;
    uint8_t *host = sl__layout_at(L, base, g->out, 0); /* the field's n positions, as on the device */
    uint64_t c0 = sl__now_ns();
    int down = g->dev.download(g->dev.ctx, g->conf->nworkers, host, dev_addr(g, slot_id, 0), (size_t)n * g->sample_bytes);
    atomic_fetch_add(&g->copy_ns, sl__now_ns() - c0);
    if (down) {
        atomic_store(&g->failed, 1);
        return SL_EIO;
    }
    for (uint32_t j = 0; j < n; j++) hash[j] = sl__hash64(sl__layout_at(L, base, g->out, j), g->sample_bytes, hash[j]);
    if (g->bounce) drop_pages(host, (size_t)n * g->sample_bytes); /* as the flush leaves them */
    return 0;
}

uint64_t sl__gstage_data(const sl__gstage *g, uint32_t slot_id, uint32_t k, int *device_type, int *device_id) {
    if (!g->on || k != g->out) return 0;
    *device_type = g->dev.device_type;
    *device_id = g->dev.device_id;
    return dev_addr(g, slot_id, 0);
}

/* ---- the GPU threads' steps (engine.c runs the loop) ----------------------------- */

uint64_t sl__gstage_gather_ns(const sl__gstage *g) {
    if (!g->qlen || g->qlen >= g->gather_min) return 0;
    uint64_t age = sl__now_ns() - g->q[g->qhead].t_ns;
    return age >= g->gather_ns ? 0 : g->gather_ns - age;
}

/* The rank up to which a call of max_batch takes the queue's samples of
 * generation gen, and how many of that rank it takes (*last). The queue
 * is nearly in rank order (workers claim the oldest batch's positions
 * first), so this walks it once a rank the call reaches, one or two. */
static uint64_t take_cut(const sl__gstage *g, uint64_t gen, uint32_t *last) {
    uint64_t cut = 0;
    uint32_t want = g->max_batch;
    int first = 1;
    for (;;) {
        uint64_t low = UINT64_MAX;
        uint32_t count = 0;
        for (uint32_t i = 0; i < g->qlen; i++) {
            const sl__gitem *it = &g->q[(g->qhead + i) % g->qcap];
            if (it->gen != gen || (!first && it->rank <= cut)) continue;
            if (it->rank < low) low = it->rank, count = 0;
            if (it->rank == low) count++;
        }
        if (!count) { /* every sample of the generation fits */
            *last = UINT32_MAX;
            return cut;
        }
        cut = low, first = 0;
        if (count >= want) {
            *last = want;
            return cut;
        }
        want -= count;
    }
}

/* Samples a worker queued late (a stall of a few milliseconds, while the
 * others queue several calls' worth of later batches) would otherwise hold
 * their batch, the one the consumer waits for, behind all of those. */
uint32_t sl__gstage_take(sl__gstage *g, sl__gcall *c, uint64_t gen) {
    uint32_t n = 0, last, kept = 0, len = g->qlen;
    uint64_t cut = take_cut(g, gen, &last);
    for (uint32_t i = 0; i < len; i++) {
        sl__gitem *it = &g->q[(g->qhead + i) % g->qcap];
        if (it->gen != gen) {
            stage_release(g, it);
            atomic_fetch_sub(&g->queued, 1);
        } else if (n < g->max_batch && (it->rank < cut || (it->rank == cut && last && last--))) {
            c->cur[n++] = *it;
        } else { /* stays, in its order: never ahead of the one read (kept <= i) */
            g->q[(g->qhead + kept++) % g->qcap] = *it;
        }
    }
    g->qlen = kept;
    return n;
}

int sl__gstage_run(sl__gstage *g, sl__gcall *c, uint32_t n, char *why, size_t wlen) {
    uint32_t pending = n, alone = 0;
    for (uint32_t i = 0; i < n; i++) c->which[i] = i;
    int rc = 0;
    while (pending && !rc) {
        uint32_t m = alone ? 1 : pending;
        for (uint32_t k = 0; k < m; k++) {
            const sl__gitem *it = &c->cur[c->which[k]];
            c->data[k] = it->data, c->len[k] = it->len, c->items[k] = it->item;
        }
        rc = g->dev.decode(g->dev.ctx, c->engine, m, c->data, c->len, c->items, g->region, g->sample_bytes,
                           c->cstatus, c->reasons, why, wlen);
        uint32_t left = 0;
        for (uint32_t k = 0; k < pending; k++) { /* the waiting ones, in order, to the front */
            int st = k >= m ? SL_GPU_AGAIN : rc ? SL_GPU_CPU : c->cstatus[k];
            if (st == SL_GPU_AGAIN) c->which[left++] = c->which[k];
            else c->status[c->which[k]] = st;
        }
        if (left == pending && alone) { /* not even alone: the CPU, whatever the engine says */
            c->status[c->which[0]] = SL_GPU_CPU;
            memmove(c->which, c->which + 1, (size_t)--left * sizeof *c->which);
        }
        alone = left == pending;
        pending = left;
    }
    for (uint32_t k = 0; k < pending; k++) c->status[c->which[k]] = SL_GPU_CPU; /* the device stopped */
    sl__gpu_stats st;
    g->dev.stats(g->dev.ctx, &st);
    atomic_store(&g->gpu_rate_mhz, (uint64_t)(st.rate * 1000.0));
    return rc;
}

void sl__gstage_settle(sl__gstage *g, sl__gcall *c, uint32_t n, int rc, const char *why, uint64_t gen,
                       void (*done)(void *ctx, sl_batch *s), void *ctx) {
    for (uint32_t i = 0; i < n; i++) {
        sl__gitem *it = &c->cur[i];
        stage_release(g, it);
        if (it->gen != gen) continue; /* a reset waits for this call, then frees the slot */
        if (c->status[i] == SL_GPU_DONE) {
            g->host_only[it->item.pos] = 0; /* on the device: a mark left by a reset's fill is stale */
            atomic_fetch_add(&g->gpu_samples, 1);
            done(ctx, it->slot);
        } else {
            g->back[(g->bhead + g->blen) % g->qcap] = *it;
            g->blen++;
            atomic_fetch_add(&g->handed_back, 1);
        }
    }
    atomic_fetch_sub(&g->queued, n);
    if (rc && !atomic_load(&g->failed)) {
        atomic_store(&g->failed, 1);
        pthread_mutex_lock(&g->smu);
        sl__msg(g->reason, sizeof g->reason, "the GPU engine stopped (the CPU decodes from here): %s", why);
        pthread_mutex_unlock(&g->smu);
    }
}

int sl__gstage_start(sl__gstage *g, void *(*main)(void *), void *arg, char *err, size_t errlen) {
    if (!g->on || g->video) return 0; /* video: the workers call the sessions themselves */
    int rc = 0;
    for (uint32_t k = 0; k < g->engines && !rc; k++) {
        sl__gcall *c = &g->calls[k];
        c->owner = arg;
        c->engine = k;
        char name[32]; /* "sl-gpu-K", cut to SL_THREAD_NAME_MAX by the start */
        snprintf(name, sizeof name, "sl-gpu-%u", k);
        /* the system's default stack, as before: CUDA and nvJPEG run on it */
        if (!(rc = sl__thread_start(&c->thread, main, c, 0, name))) c->thread_on = 1;
    }
    if (rc) {
        sl__msg(err, errlen, "could not start the GPU threads");
        return SL_ESYS; /* the caller joins the ones that started (sl__gstage_join) */
    }
    return 0;
}

void sl__gstage_join(sl__gstage *g) {
    for (uint32_t k = 0; k < SL_GPU_MAX_ENGINES; k++) {
        sl__gcall *c = &g->calls[k];
        if (!c->thread_on) continue;
        pthread_join(c->thread, NULL);
        c->thread_on = 0;
    }
}

void sl__gstage_close(sl__gstage *g, int in_child) {
    if (in_child) { /* the driver and the locks belong to the parent's threads */
        g->on = 0;
        return;
    }
    if (g->on) drain(g); /* the threads are gone: what they left queued */
    if (g->bounce) g->dev.stage_free(g->dev.ctx, g->bounce);
    g->bounce = NULL, g->bounce_len = 0;
    if (g->dev.close) g->dev.close(g->dev.ctx); /* unpins the slots' host memory */
    memset(&g->dev, 0, sizeof g->dev);
    if (g->conf) free_tables(g);
    if (g->planned_pinned) sl__budget_release(g->conf->budget, g->planned_pinned, SL_MEM_PINNED);
    g->planned_pinned = 0;
    if (g->host_counted) {
        sl__budget_unfix(g->conf->budget, g->host_counted);
        sl__budget_release(g->conf->budget, g->host_counted, SL_MEM_GPU_HOST);
        g->host_counted = 0;
    }
    if (g->sync_init) {
        pthread_cond_destroy(&g->scv);
        pthread_mutex_destroy(&g->smu);
        g->sync_init = 0;
    }
    g->on = 0;
}

void sl__gstage_mode(sl__gstage *g, sl_stats *o) {
    o->decode = g->mode;
    if (g->sync_init) pthread_mutex_lock(&g->smu); /* a stopped engine writes the reason */
    snprintf(o->decode_reason, sizeof o->decode_reason, "%s", g->reason);
    if (g->video && g->back_reason[0]) { /* what the CPU took, and why, as far as it fits */
        size_t at = strlen(o->decode_reason);
        snprintf(o->decode_reason + at, sizeof o->decode_reason - at, "; %llu clips for the CPU, the last: %s",
                 (unsigned long long)atomic_load(&g->handed_back), g->back_reason);
    }
    if (g->sync_init) pthread_mutex_unlock(&g->smu);
}

void sl__gstage_stats(sl__gstage *g, sl_stats *o) {
    if (!g->on) return;
    o->gpu_samples = atomic_load(&g->gpu_samples);
    o->cpu_samples = atomic_load(&g->cpu_samples);
    o->gpu_handed_back = atomic_load(&g->handed_back);
    sl__gpu_stats st;
    g->dev.stats(g->dev.ctx, &st);
    o->gpu_pool_bytes = st.device_pool_bytes;
    o->gpu_pool_peak = st.device_peak;
    o->gpu_batch_bytes = g->region_bytes;
    o->gpu_pinned_bytes = st.pinned_pool_bytes;
    pthread_mutex_lock(&g->smu);
    o->gpu_staging_peak = g->staged_peak;
    pthread_mutex_unlock(&g->smu);
    o->gpu_rate = (double)atomic_load(&g->gpu_rate_mhz) / 1000.0;
    o->gpu_hw_s = st.gpu_hw_s, o->gpu_hybrid_s = st.gpu_hybrid_s, o->gpu_resize_s = st.gpu_resize_s;
    o->gpu_thread_route_s = st.thread_route_s, o->gpu_thread_hybrid_s = st.thread_hybrid_s;
    o->gpu_thread_hw_s = st.thread_hw_s, o->gpu_thread_launch_s = st.thread_launch_s;
    o->gpu_thread_wait_s = st.thread_wait_s;
    o->gpu_copy_s = (double)atomic_load(&g->copy_ns) * 1e-9;
    o->gpu_hw_calls = st.hw_calls, o->gpu_hw_failed_calls = st.hw_failed_calls;
    o->gpu_hw_calls_unpipelined = st.hw_calls_unpipelined, o->gpu_hw_mode_switches = st.hw_mode_switches;
    o->gpu_hw_us_pipelined = st.hw_us_pipelined, o->gpu_hw_us_unpipelined = st.hw_us_unpipelined;
    o->gpu_engines = g->engines;
    uint64_t ns = atomic_load(&g->cpu_ns);
    o->cpu_rate = ns ? (double)g->conf->nworkers * 1e9 / (double)ns : 0;
    snprintf(o->gpu_device_name, sizeof o->gpu_device_name, "%s", st.device_name);
}
