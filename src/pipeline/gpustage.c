/*
 * The GPU stage: the loader's scheduler feeds the GPU decode engine beside
 * its CPU workers (issue 13; docs/gpu.md). See sl__gstage in loader_impl.h
 * for the data's way; the rules kept here:
 *
 * Same batches. Workers read every sample, probe it and plan it with the
 * CPU path's code (the image kind, fields/image.c), so the batch's samples,
 * their order, crop boxes and flips do not depend on which engine decodes
 * a sample; only its pixels may (docs/gpu.md bounds the difference). A
 * sample the GPU cannot take (sl__gpu_item_from_plan), or that the split
 * gives the CPU, is decoded by the worker as before.
 *
 * The split, per sample. sl__gpu_split over the one position in hand: the
 * GPU's queue (samples taken, not yet decoded) against the CPU's (its
 * workers, each with a sample in hand), at the measured rates, so that
 * both finish together. decode=gpu sends every sample the GPU can take to
 * it (a deterministic split): a worker then waits for staging room.
 *
 * Completion. A position is done (its pending count drops) when its pixels
 * are on the device: the GPU thread after its call returned (the engine
 * waited for the stream), a worker after its synchronous upload. So a batch
 * is READY exactly as on the CPU path, and the device batch is complete
 * for any stream then. What the engine hands back (not a JPEG it takes,
 * corrupt data, pool full) is claimed by workers before any other work and
 * decoded on the CPU from the file: a corrupt file becomes the CPU path's
 * error record.
 *
 * Locks. The queue, the handbacks and the GPU thread's wakeups are under
 * ld->mu; the staging count under smu, which is taken alone or after mu.
 * The GPU thread counts in ld->active while its call runs, so a reset
 * waits for it; items of an older generation are dropped, never written.
 *
 * Ownership of a staging block: the worker that took the sample, until it
 * is queued (sl__gstage_push) or the fill fails (freed); then the queue;
 * then the GPU thread's call, which frees it when the call has returned.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "gpu/split.h"
#include "pipeline/loader_impl.h"

#define DEFAULT_GPU_BUDGET ((uint64_t)512 << 20)
#define DEFAULT_STAGING ((uint64_t)64 << 20)
#define MIN_STAGING ((uint64_t)1 << 20)
#define GATHER_NS 1000000u /* a call waits at most this long for more samples */

typedef unsigned long long ull;

/* ---- choosing the engine -------------------------------------------------- */

/* The first image field the engine decodes: NULL with *fi set, else why
 * none is. */
static const char *gpu_field(const sl_loader *ld, uint32_t *fi) {
    const char *why = "the schema has no image field";
    for (uint32_t i = 0; i < ld->schema.nfields; i++) {
        const sl__field *f = &ld->schema.fields[i];
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
    return why;
}

/* decode=auto: the CPU path, saying why (0). decode=gpu: the failure. */
static int fall_back(sl_loader *ld, int rc, const char *why, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    g->mode = SL_DECODE_CPU;
    if (ld->cfg.decode == SL_DECODE_GPU) {
        sl__msg(err, errlen, "decode=gpu: %s", why);
        return rc;
    }
    sl__msg(g->reason, sizeof g->reason, "decode=auto, the CPU: %s", why);
    return 0;
}

/* Most slots step_size can carve for this configuration (its cap). */
static uint32_t slots_bound(const sl_loader *ld) {
    const sl_config *c = &ld->cfg;
    uint64_t min_slots = SL_MAX(c->min_slots, c->prefetch ? c->prefetch : 1);
    uint64_t cap = c->prefetch ? c->prefetch : SL_MAX(4, (4ull * ld->nworkers + ld->B - 1) / ld->B);
    return (uint32_t)SL_MAX(cap, min_slots);
}

/* Device and pinned sizes; 0, or a fall-back reason in why. */
static int size_stage(sl_loader *ld, uint64_t *budget, char *why, size_t wlen) {
    sl__gstage *g = &ld->gs;
    const sl_config *c = &ld->cfg;
    char b1[16], b2[16], b3[16], b4[16];
    g->out = ld->layout.field_out[g->field];
    g->sample_bytes = ld->layout.out[g->out].sample_bytes;
    g->max_batch = SL_MIN(SL_MAX(ld->B, 32u), 256u);
    g->slots_max = slots_bound(ld);
    uint64_t batches, need, positions;
    *budget = c->gpu_budget ? c->gpu_budget : DEFAULT_GPU_BUDGET;
    if (sl__mul(ld->B, g->sample_bytes, &g->slot_bytes) || sl__mul(g->slots_max, g->slot_bytes, &batches) ||
        sl__add(batches, sl__gpu_min_device(g->max_batch), &need) ||
        sl__mul(g->slots_max, ld->B, &positions) || positions + g->max_batch > UINT32_MAX) {
        sl__msg(why, wlen, "%u device batch slots of %u samples overflow", g->slots_max, ld->B);
        return SL_EOVERFLOW;
    }
    if (*budget < need) {
        sl__msg(why, wlen, "gpu_budget %s cannot hold %u device batch slots of %s and the engine's minimum of %s: "
                "raise it to at least %s", sl__fmt_bytes(*budget, b1, sizeof b1), g->slots_max,
                sl__fmt_bytes(g->slot_bytes, b2, sizeof b2), sl__fmt_bytes(sl__gpu_min_device(g->max_batch), b3,
                sizeof b3), sl__fmt_bytes(need, b4, sizeof b4));
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
        pthread_cond_init(&g->scv, &ca) == 0 && ++n && pthread_cond_init(&g->cv, &ca) == 0)
        g->sync_init = 1;
    pthread_condattr_destroy(&ca);
    if (g->sync_init) return 0;
    if (n > 1) pthread_cond_destroy(&g->scv);
    if (n > 0) pthread_mutex_destroy(&g->smu);
    return SL_ESYS;
}

/* The queue, the handbacks and the call's arrays, from the host budget. */
static int open_tables(sl_loader *ld) {
    sl__gstage *g = &ld->gs;
    sl__budget *b = ld->budget;
    uint32_t m = g->max_batch;
    g->q = sl__calloc(b, g->qcap, sizeof *g->q, SL_MEM_OTHER);
    g->back = sl__calloc(b, g->qcap, sizeof *g->back, SL_MEM_OTHER);
    g->cur = sl__calloc(b, m, sizeof *g->cur, SL_MEM_OTHER);
    g->data = sl__calloc(b, m, sizeof *g->data, SL_MEM_OTHER);
    g->len = sl__calloc(b, m, sizeof *g->len, SL_MEM_OTHER);
    g->items = sl__calloc(b, m, sizeof *g->items, SL_MEM_OTHER);
    g->status = sl__calloc(b, m, sizeof *g->status, SL_MEM_OTHER);
    g->reasons = sl__calloc(b, m, sizeof *g->reasons, SL_MEM_OTHER);
    return g->q && g->back && g->cur && g->data && g->len && g->items && g->status && g->reasons ? 0 : SL_EBUDGET;
}

static void free_tables(sl_loader *ld) {
    sl__gstage *g = &ld->gs;
    sl__budget *b = ld->budget;
    sl__free(b, g->q);
    sl__free(b, g->back);
    sl__free(b, g->cur);
    sl__free(b, g->data);
    sl__free(b, g->len);
    sl__free(b, g->items);
    sl__free(b, g->status);
    sl__free(b, g->reasons);
    g->q = g->back = g->cur = NULL;
    g->data = NULL, g->len = NULL, g->items = NULL, g->status = NULL, g->reasons = NULL;
}

/* plan_only: count the pinned pool the device would take, open nothing. */
static int plan_pinned(sl_loader *ld, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    uint64_t n = sl__map_cost(sl__gpu_min_pinned(g->max_batch) + g->staging_cap);
    if (sl__budget_try(ld->budget, n, SL_MEM_PINNED)) {
        char b[16], why[80];
        sl__msg(why, sizeof why, "the budget cannot hold %s of pinned staging", sl__fmt_bytes(n, b, sizeof b));
        return fall_back(ld, SL_EBUDGET, why, err, errlen);
    }
    g->planned_pinned = n;
    g->mode = SL_DECODE_GPU;
    return 0;
}

static int open_device(sl_loader *ld, uint64_t budget, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    const sl_config *c = &ld->cfg;
    char why[300] = "";
    if (open_sync(g)) return fall_back(ld, SL_ESYS, "could not make the GPU stage's locks", err, errlen);
    sl__gpu_dev_config dc = {c->gpu_device, g->pool_bytes, g->staging_cap, g->max_batch, c->gpu_max_pixels,
                             ld->nworkers + 1};
    int rc = sl__gpu_dev_open(&dc, ld->budget, &g->dev, why, sizeof why);
    if (rc) {
        memset(&g->dev, 0, sizeof g->dev);
        return fall_back(ld, rc, why, err, errlen);
    }
    if (open_tables(ld)) {
        free_tables(ld);
        g->dev.close(g->dev.ctx);
        memset(&g->dev, 0, sizeof g->dev);
        return fall_back(ld, SL_EBUDGET, "the budget cannot hold the GPU stage's queue", err, errlen);
    }
    sl__gpu_stats st;
    g->dev.stats(g->dev.ctx, &st);
    char b1[16];
    sl__msg(g->reason, sizeof g->reason, "decode=%s: the GPU engine on %s (%s of device memory), beside %u CPU workers",
            g->gpu_only ? "gpu" : "auto", st.device_name[0] ? st.device_name : "the device",
            sl__fmt_bytes(budget, b1, sizeof b1), ld->nworkers);
    g->on = 1;
    g->mode = SL_DECODE_GPU;
    ld->layout.out[g->out].device = 1;
    return 0;
}

int sl__gstage_open(sl_loader *ld, int plan_only, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    const sl_config *c = &ld->cfg;
    g->mode = SL_DECODE_CPU;
    g->gpu_only = c->decode == SL_DECODE_GPU;
    if (c->decode == SL_DECODE_CPU) {
        sl__msg(g->reason, sizeof g->reason, "decode=cpu");
        return 0;
    }
    char why[300];
    const char *none = gpu_field(ld, &g->field);
    if (none) {
        sl__msg(why, sizeof why, "no image field the GPU engine decodes (%s)", none);
        return fall_back(ld, SL_EUNSUPPORTED, why, err, errlen);
    }
    if (!sl__gpu_dev_available(why, sizeof why)) return fall_back(ld, SL_EUNSUPPORTED, why, err, errlen);
    uint64_t budget;
    int rc = size_stage(ld, &budget, why, sizeof why);
    if (rc) return fall_back(ld, rc, why, err, errlen);
    return plan_only ? plan_pinned(ld, err, errlen) : open_device(ld, budget, err, errlen);
}

int sl__gstage_slots(sl_loader *ld, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    if (!g->on) return 0;
    char why[300] = "";
    int rc = SL_EINVAL;
    uint64_t bytes = (uint64_t)ld->nslots * g->slot_bytes;
    if (ld->nslots > g->slots_max) sl__msg(why, sizeof why, "%u slots, over the %u sized for", ld->nslots, g->slots_max);
    else rc = g->dev.region(g->dev.ctx, bytes, &g->region, why, sizeof why);
    if (!rc) {
        g->region_bytes = bytes;
        return 0;
    }
    sl__gstage_close(ld, 0);
    return fall_back(ld, rc, why, err, errlen);
}

/* ---- staging --------------------------------------------------------------- */

/* A staging block for n bytes, or NULL: the CPU decodes the sample. With
 * gpu_only, waits for room (samples over half the staging never fit:
 * the CPU, whatever the timing). */
static void *stage_take(sl_loader *ld, size_t n) {
    sl__gstage *g = &ld->gs;
    if (n == 0 || n > g->staging_cap / 2) return NULL;
    void *p = NULL;
    pthread_mutex_lock(&g->smu);
    for (;;) {
        if (g->staged + n <= g->staging_cap && (p = g->dev.stage_alloc(g->dev.ctx, n))) {
            g->staged += n;
            if (g->staged > g->staged_peak) g->staged_peak = g->staged;
            break;
        }
        if (!g->gpu_only || g->staged == 0 || atomic_load(&ld->cancel) || atomic_load(&g->failed)) break;
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
static int want_gpu(const sl_loader *ld) {
    const sl__gstage *g = &ld->gs;
    double rg = (double)atomic_load(&g->gpu_rate_mhz) / 1000.0;
    uint64_t ns = atomic_load(&g->cpu_ns);
    double rc = ns ? (double)ld->nworkers * 1e9 / (double)ns : 0;
    uint32_t q = atomic_load(&g->queued);
    if (rg <= 0) return q < 2 * g->max_batch; /* measure the GPU first, the CPU busy beside it */
    if (rc <= 0) return q < g->max_batch;     /* and the CPU */
    uint8_t one = 1, to = 0;
    sl__split_in in = {1, &one, rg, rc, (double)q, (double)ld->nworkers, 0};
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

static sl__worker *worker_of(sl__defer *d) { return (sl__worker *)(void *)((char *)d - offsetof(sl__worker, defer)); }

static int offer(sl__defer *d, const sl__field *f, const uint8_t *data, size_t len, const sl_image_info *info,
                 const sl__plan *plan) {
    sl__worker *w = worker_of(d);
    sl_loader *ld = w->ld;
    sl__gstage *g = &ld->gs;
    if (w->g_cpu_only || w->g_taken || f != &ld->schema.fields[g->field] || atomic_load(&g->failed)) return 0;
    sl__gpu_item it;
    if (sl__gpu_item_from_plan(plan, info, w->g_slot->id * ld->B + w->g_pos, &it, NULL, 0)) return 0;
    uint64_t cap = ld->cfg.gpu_max_pixels ? ld->cfg.gpu_max_pixels : SL_GPU_MAX_PIXELS;
    if ((uint64_t)info->width * info->height > cap || !ends_whole(data, len)) return 0;
    if (!g->gpu_only && !want_gpu(ld)) return 0;
    void *blk = stage_take(ld, len);
    if (!blk) return 0;
    memcpy(blk, data, len);
    w->g_item = (sl__gitem){w->g_slot, w->g_pos, 0, w->g_sample, w->g_epoch, blk, len, 0, it};
    w->g_taken = 1;
    atomic_fetch_add(&g->queued, 1);
    return 1;
}

/* The worker's taken sample does not go to the GPU after all. */
static void untake(sl__worker *w) {
    sl__gstage *g = &w->ld->gs;
    stage_release(g, &w->g_item);
    w->g_taken = 0;
    atomic_fetch_sub(&g->queued, 1);
}

void sl__gstage_begin(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, int cpu_only) {
    if (!w->ld->gs.on) return;
    if (w->g_taken) untake(w); /* an earlier attempt at this sample (transient failure, retried) */
    w->defer.offer = offer;
    w->g_slot = s;
    w->g_pos = j;
    w->g_sample = sample;
    w->g_epoch = epoch;
    w->g_cpu_only = cpu_only;
}

static uint64_t dev_addr(const sl__gstage *g, const sl_batch *s, uint32_t j) {
    return g->region + (uint64_t)s->id * g->slot_bytes + (uint64_t)j * g->sample_bytes;
}

int sl__gstage_end(sl__worker *w, int *rc, uint64_t t0_ns) {
    sl_loader *ld = w->ld;
    sl__gstage *g = &ld->gs;
    if (!g->on) return 0;
    if (w->g_taken) {
        if (*rc == 0) return 1;
        untake(w);
        return 0;
    }
    if (*rc) return 0;
    const sl__layout *L = &ld->layout;
    sl_batch *s = w->g_slot;
    uint32_t j = w->g_pos;
    if (g->dev.upload(g->dev.ctx, w->id, dev_addr(g, s, j), sl__layout_at(L, s->base, g->out, j), g->sample_bytes)) {
        sl__msg(s->reasons + (size_t)j * SL_REASON_LEN, SL_REASON_LEN, "copying the decoded image to the GPU failed");
        *rc = SL_EIO;
        return 0;
    }
    atomic_fetch_add(&g->cpu_samples, 1);
    uint64_t dt = sl__now_ns() - t0_ns, old = atomic_load(&g->cpu_ns);
    atomic_store(&g->cpu_ns, old ? (old * 7 + dt) / 8 : dt); /* a lost update between workers is harmless */
    return 0;
}

void sl__gstage_push(sl_loader *ld, sl__worker *w) {
    sl__gstage *g = &ld->gs;
    sl__gitem *it = &w->g_item;
    it->gen = it->slot->gen; /* the claim's: no reset completes while this worker is active */
    it->t_ns = sl__now_ns();
    g->q[(g->qhead + g->qlen) % g->qcap] = *it; /* qcap covers every position of every slot */
    g->qlen++;
    w->g_taken = 0;
    pthread_cond_signal(&g->cv);
}

int sl__gstage_take_back(sl_loader *ld, sl_batch **s, uint32_t *j, uint64_t *sample, uint64_t *epoch) {
    sl__gstage *g = &ld->gs;
    while (g->on && g->blen) {
        sl__gitem *it = &g->back[g->bhead];
        g->bhead = (g->bhead + 1) % g->qcap;
        g->blen--;
        if (it->gen != ld->gen) continue;
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

void sl__gstage_reset(sl_loader *ld) {
    sl__gstage *g = &ld->gs;
    if (!g->on) return;
    drain(g);
    atomic_store(&g->queued, 0); /* nothing in the GPU's call, no worker holds a sample */
}

void sl__gstage_move(sl_loader *ld, sl_batch *s, uint32_t a, uint32_t b) {
    sl__gstage *g = &ld->gs;
    if (!g->on) return;
    if (g->dev.move(g->dev.ctx, ld->nworkers, dev_addr(g, s, b), dev_addr(g, s, a), g->sample_bytes))
        atomic_store(&g->failed, 1);
}

uint64_t sl__gstage_data(const sl_loader *ld, const sl_batch *s, uint32_t k) {
    const sl__gstage *g = &ld->gs;
    return g->on && k == g->out ? dev_addr(g, s, 0) : 0;
}

/* ---- the GPU thread --------------------------------------------------------- */

/* Gather the next call from the queue (mu held): up to max_batch samples,
 * waiting up to GATHER_NS after the oldest was queued for a quarter of a
 * full call. Stale samples are dropped. Returns how many. */
static uint32_t take(sl_loader *ld) {
    sl__gstage *g = &ld->gs;
    while (g->qlen && g->qlen < g->max_batch / 4 && !ld->stop) {
        uint64_t age = sl__now_ns() - g->q[g->qhead].t_ns;
        if (age >= GATHER_NS) break;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += (long)(GATHER_NS - age);
        if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->cv, &ld->mu, &dl);
    }
    uint32_t n = 0;
    while (g->qlen && n < g->max_batch) {
        sl__gitem *it = &g->q[g->qhead];
        g->qhead = (g->qhead + 1) % g->qcap;
        g->qlen--;
        if (it->gen != ld->gen) {
            stage_release(g, it);
            atomic_fetch_sub(&g->queued, 1);
            continue;
        }
        g->cur[n++] = *it;
    }
    return n;
}

/* The call, outside mu. 0, or SL_EIO with why (the device stopped). */
static int run(sl_loader *ld, uint32_t n, char *why, size_t wlen) {
    sl__gstage *g = &ld->gs;
    for (uint32_t i = 0; i < n; i++) {
        g->data[i] = g->cur[i].data;
        g->len[i] = g->cur[i].len;
        g->items[i] = g->cur[i].item;
    }
    int rc = g->dev.decode(g->dev.ctx, n, g->data, g->len, g->items, g->region, g->sample_bytes, g->status, g->reasons,
                           why, wlen);
    sl__gpu_stats st;
    g->dev.stats(g->dev.ctx, &st);
    atomic_store(&g->gpu_rate_mhz, (uint64_t)(st.rate * 1000.0));
    return rc;
}

/* After the call (mu held): each position done, or handed back. */
static void settle(sl_loader *ld, uint32_t n, int rc, const char *why) {
    sl__gstage *g = &ld->gs;
    for (uint32_t i = 0; i < n; i++) {
        sl__gitem *it = &g->cur[i];
        stage_release(g, it);
        if (it->gen != ld->gen) continue; /* a reset waits for this call, then frees the slot */
        if (g->status[i] == SL_GPU_DONE) {
            atomic_fetch_add(&g->gpu_samples, 1);
            sl__position_done(ld, it->slot);
        } else {
            g->back[(g->bhead + g->blen) % g->qcap] = *it;
            g->blen++;
            atomic_fetch_add(&g->handed_back, 1);
        }
    }
    atomic_fetch_sub(&g->queued, n);
    if (rc && !atomic_load(&g->failed)) {
        atomic_store(&g->failed, 1);
        sl__msg(g->reason, sizeof g->reason, "the GPU engine stopped (the CPU decodes from here): %s", why);
    }
}

static void *gpu_main(void *arg) {
    sl_loader *ld = arg;
    sl__gstage *g = &ld->gs;
    char why[200];
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop) {
        uint32_t n = take(ld);
        if (!n) {
            pthread_cond_wait(&g->cv, &ld->mu);
            continue;
        }
        ld->active++;
        pthread_mutex_unlock(&ld->mu);
        why[0] = 0;
        int rc = run(ld, n, why, sizeof why);
        pthread_mutex_lock(&ld->mu);
        settle(ld, n, rc, why);
        ld->active--;
        pthread_cond_broadcast(&ld->cv_work); /* handbacks to claim, batches to commit */
        pthread_cond_broadcast(&ld->cv_quiet);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

int sl__gstage_start(sl_loader *ld, char *err, size_t errlen) {
    sl__gstage *g = &ld->gs;
    if (!g->on) return 0;
    sigset_t all, old; /* as the workers: signals go to the caller's threads */
    sigfillset(&all);
    static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&all, sync_signals[i]);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&g->thread, NULL, gpu_main, ld);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        sl__msg(err, errlen, "could not start the GPU thread");
        return SL_ESYS;
    }
    g->thread_on = 1;
    return 0;
}

void sl__gstage_stop(sl_loader *ld) {
    sl__gstage *g = &ld->gs;
    if (!g->thread_on) return;
    pthread_mutex_lock(&ld->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&ld->mu);
    pthread_join(g->thread, NULL);
    g->thread_on = 0;
}

void sl__gstage_close(sl_loader *ld, int in_child) {
    sl__gstage *g = &ld->gs;
    if (in_child) { /* the driver and the locks belong to the parent's threads */
        g->on = 0;
        return;
    }
    if (g->on) drain(g); /* the threads are gone: what they left queued */
    if (g->dev.close) g->dev.close(g->dev.ctx);
    memset(&g->dev, 0, sizeof g->dev);
    free_tables(ld);
    if (g->planned_pinned) sl__budget_release(ld->budget, g->planned_pinned, SL_MEM_PINNED);
    g->planned_pinned = 0;
    if (g->sync_init) {
        pthread_cond_destroy(&g->cv);
        pthread_cond_destroy(&g->scv);
        pthread_mutex_destroy(&g->smu);
        g->sync_init = 0;
    }
    if (g->on) ld->layout.out[g->out].device = 0;
    g->on = 0;
}

void sl__gstage_stats(const sl_loader *cld, sl_stats *o) {
    sl_loader *ld = (sl_loader *)cld;
    sl__gstage *g = &ld->gs;
    pthread_mutex_lock(&ld->mu);
    o->decode = g->mode;
    snprintf(o->decode_reason, sizeof o->decode_reason, "%s", g->reason);
    pthread_mutex_unlock(&ld->mu);
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
    uint64_t ns = atomic_load(&g->cpu_ns);
    o->cpu_rate = ns ? (double)ld->nworkers * 1e9 / (double)ns : 0;
    snprintf(o->gpu_device_name, sizeof o->gpu_device_name, "%s", st.device_name);
}
