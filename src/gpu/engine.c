/*
 * The GPU engine's life cycle: context, pools, kernels, nvJPEG handles.
 * See engine.h for the contract and engine_impl.h for who owns what.
 *
 * Create order (free undoes it backwards; every step is checked and a
 * failure frees what the steps before took; sl__gpu_engine_free releases
 * whatever exists, each thing in one place):
 *   context -> stream, events -> kernels -> device pool -> pinned region
 *   (host budget first) and its two pools -> host tables (one block) ->
 *   descriptor buffers -> nvJPEG hardware handle/state/streams/params ->
 *   nvJPEG hybrid handle/decoder/state/buffers -> the first decode.
 * The process's resident memory is read between the steps
 * (sl__gpu_stats.host_rss_*).
 * nvJPEG allocates only through the hooks below, from the device pool and
 * its pinned pool; so its handles must be destroyed before the pools go.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "gpu/engine_impl.h"

#define POOL_ALIGN 256u
#define NVJ_PADDING ((size_t)1 << 20) /* nvJPEG grows its buffers in steps this size */
#define MIN_DEVICE_FREE ((uint64_t)32 << 20)
#define MIN_PINNED_FREE ((uint64_t)16 << 20)

int sl__gpu_available(char *why, size_t len) {
    return sl__cuda_api_get(why, len) != NULL;
}

uint64_t sl__gpu_rss_now(void) {
    FILE *f = fopen("/proc/self/statm", "re");
    unsigned long long size = 0, resident = 0;
    int ok = f && fscanf(f, "%llu %llu", &size, &resident) == 2;
    if (f) fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return ok && page > 0 ? resident * (uint64_t)page : 0;
}

/* RSS growth since *mark, and the mark moved to now. */
static int64_t rss_step(uint64_t *mark) {
    uint64_t now = sl__gpu_rss_now();
    int64_t d = (int64_t)(now - *mark);
    *mark = now;
    return d;
}

static uint64_t desc_bytes(uint32_t max_batch) {
    return ((uint64_t)max_batch * sizeof(sl__gpu_desc) + POOL_ALIGN - 1) & ~(uint64_t)(POOL_ALIGN - 1);
}

/* The descriptors plus room for nvJPEG's own buffers and one batch of
 * small images; measured needs are in docs/gpu.md. */
uint64_t sl__gpu_min_device(uint32_t max_batch) { return desc_bytes(max_batch) + MIN_DEVICE_FREE; }
uint64_t sl__gpu_min_pinned(uint32_t max_batch) { return desc_bytes(max_batch) + MIN_PINNED_FREE; }

/* ---- nvJPEG's allocator hooks: the pools, never the driver ------------- */
static int hook_alloc(sl__pool *p, void **ptr, size_t size) {
    uint64_t a = sl__pool_alloc(p, size ? size : 1);
    *ptr = (void *)(uintptr_t)a;
    return a ? 0 : 1;
}

/* A buffer may still be read by work queued on s: let that finish first,
 * so the block is never handed out while in use. */
static int hook_free(sl__gpu_engine *e, sl__pool *p, void *ptr, sl_CUstream s) {
    if (!ptr) return 0;
    if (s) e->cu->cuStreamSynchronize(s);
    return sl__pool_free(p, (uint64_t)(uintptr_t)ptr) ? 1 : 0;
}

static int dev_malloc(void *ctx, void **ptr, size_t size, sl_CUstream s) {
    return hook_alloc(&((sl__gpu_engine *)ctx)->dpool, ptr, size);
}
static int dev_free(void *ctx, void *ptr, size_t size, sl_CUstream s) {
    return hook_free(ctx, &((sl__gpu_engine *)ctx)->dpool, ptr, s);
}
static int pin_malloc(void *ctx, void **ptr, size_t size, sl_CUstream s) {
    return hook_alloc(&((sl__gpu_engine *)ctx)->ppool, ptr, size);
}
static int pin_free(void *ctx, void *ptr, size_t size, sl_CUstream s) {
    return hook_free(ctx, &((sl__gpu_engine *)ctx)->ppool, ptr, s);
}

/* ---- create, step by step ----------------------------------------------- */
static int cu_fail(sl__gpu_engine *e, sl_CUresult r, int code, const char *what, char *err, size_t errlen) {
    sl__msg(err, errlen, "%s: %s", what, sl__cu_errname(e->cu, r));
    return code;
}

static int nvj_fail(sl_nvjStatus s, const char *what, char *err, size_t errlen) {
    sl__msg(err, errlen, "nvJPEG %s: %s (status %d)", what, sl__nvj_errname(s), s);
    return s == SL_NVJ_STATUS_ALLOCATOR_FAILURE ? SL_EBUDGET : SL_EIO;
}

static int open_context(sl__gpu_engine *e, char *err, size_t errlen) {
    const sl__cuda_api *cu = e->cu;
    int rc = sl__cu_primary(cu, e->cfg.device, &e->dev, &e->ctx, e->st.device_name, sizeof e->st.device_name, err,
                            errlen);
    if (rc) return rc;
    sl_CUresult r;
    int prio = e->cfg.flags & (SL_GPU_LOW_PRIORITY | SL_GPU_HIGH_PRIORITY)
                   ? sl__cu_priority(cu, (e->cfg.flags & SL_GPU_HIGH_PRIORITY) != 0)
                   : 0;
    if ((r = cu->cuStreamCreateWithPriority(&e->stream, SL_CU_STREAM_NON_BLOCKING, prio))) {
        e->stream = NULL;
        return cu_fail(e, r, SL_EIO, "cuStreamCreateWithPriority", err, errlen);
    }
    sl_CUevent *ev[4] = {&e->ev0, &e->ev_hyb, &e->ev_hw, &e->ev1};
    for (int i = 0; i < 4; i++)
        /* the end event is what sl__gpu_wait sleeps on: blocking, so the GPU thread does not spin
         * in the driver beside the training loop's launches (docs/gpu.md) */
        if ((r = cu->cuEventCreate(ev[i], i == 3 ? SL_CU_EVENT_BLOCKING_SYNC : SL_CU_EVENT_DEFAULT))) {
            *ev[i] = NULL;
            return cu_fail(e, r, SL_EIO, "cuEventCreate", err, errlen);
        }
    return 0;
}

/* A quarter of the device pool, less the descriptors: room for nvJPEG's
 * buffers and for samples to share a call. */
static uint64_t sample_cap(uint64_t pool, uint32_t max_batch) { return (pool - desc_bytes(max_batch)) / 4; }

static int open_pools(sl__gpu_engine *e, char *err, size_t errlen) {
    const sl__cuda_api *cu = e->cu;
    uint64_t dsize = e->cfg.gpu_budget & ~(uint64_t)(POOL_ALIGN - 1);
    uint64_t psize = e->cfg.pinned_bytes & ~(uint64_t)(POOL_ALIGN - 1);
    uint64_t ssize = e->cfg.staging_bytes & ~(uint64_t)(POOL_ALIGN - 1);
    uint32_t max_blocks = e->cfg.max_batch * 4 + 4096; /* samples, nvJPEG's buffers, slack */
    sl_CUresult r = cu->cuMemAlloc(&e->dev_base, dsize);
    if (r) {
        e->dev_base = 0;
        return cu_fail(e, r, SL_ENOMEM, "taking the device pool", err, errlen);
    }
    uint64_t pcost = sl__map_cost(psize + ssize);
    int rc = sl__budget_try(e->host, pcost, SL_MEM_PINNED);
    if (!rc && (rc = sl__budget_fix(e->host, pcost))) /* the limit was lowered meanwhile */
        sl__budget_release(e->host, pcost, SL_MEM_PINNED);
    if (rc) {
        char b[16];
        sl__msg(err, errlen, "the host budget cannot hold the %s pinned pool", sl__fmt_bytes(pcost, b, sizeof b));
        return SL_EBUDGET;
    }
    e->pin_counted = pcost;
    if ((r = cu->cuMemHostAlloc(&e->pin_base, psize + ssize, 0))) {
        e->pin_base = NULL;
        return cu_fail(e, r, SL_ENOMEM, "taking the pinned pool", err, errlen);
    }
    uint64_t pin = (uint64_t)(uintptr_t)e->pin_base;
    /* the staging pool's table: one extent per staged block and one per gap, enough for blocks
     * of 16 KiB on average; past it a block waits for room as when the pool is full (with
     * nothing staged the pool is one extent, so a block always fits then) */
    uint32_t sblocks = (uint32_t)SL_MIN(ssize / 8192 + 64, (uint64_t)1 << 20);
    rc = sl__pool_init(&e->dpool, e->host, e->dev_base, dsize, POOL_ALIGN, max_blocks);
    e->dpool_ok = rc == 0;
    if (!rc) e->ppool_ok = (rc = sl__pool_init(&e->ppool, e->host, pin, psize, POOL_ALIGN, max_blocks)) == 0;
    if (!rc && ssize) e->spool_ok = (rc = sl__pool_init(&e->spool, e->host, pin + psize, ssize, POOL_ALIGN, sblocks)) == 0;
    if (rc) {
        sl__msg(err, errlen, "the host budget cannot hold the pools' tables");
        return rc;
    }
    e->st.device_pool_bytes = dsize;
    e->st.pinned_pool_bytes = psize + ssize;
    e->sample_cap = sample_cap(dsize, e->cfg.max_batch);
    return 0;
}

/* The host tables in one block (freed by sl__gpu_engine_free), then the
 * descriptors' pinned and device buffers. */
static int open_tables(sl__gpu_engine *e, char *err, size_t errlen) {
    uint32_t n = e->cfg.max_batch;
    const sl__part parts[] = {{&e->work, n, sizeof *e->work},
                              {&e->hw_streams, n, sizeof *e->hw_streams},
                              {&e->hw_params, n, sizeof *e->hw_params},
                              {&e->hw_data, n, sizeof *e->hw_data},
                              {&e->hw_len, n, sizeof *e->hw_len},
                              {&e->hw_out, n, sizeof *e->hw_out},
                              {&e->hw_batch_params, n, sizeof *e->hw_batch_params},
                              {&e->hw_idx, n, sizeof *e->hw_idx},
                              {&e->hw_bad, n, sizeof *e->hw_bad}};
    int rc = sl__alloc_parts(e->host, parts, sizeof parts / sizeof parts[0], SL_MEM_OTHER, &e->tables);
    if (rc) {
        sl__msg(err, errlen, "%s for the GPU engine's tables of %u samples",
                rc == SL_EBUDGET ? "the host budget has no room" : "out of memory", n);
        return rc;
    }
    uint64_t db = desc_bytes(n);
    e->pin_desc = (sl__gpu_desc *)(uintptr_t)sl__pool_alloc(&e->ppool, db);
    e->dev_desc = sl__pool_alloc(&e->dpool, db);
    if (e->pin_desc && e->dev_desc) return 0;
    sl__msg(err, errlen, "the pools cannot hold the descriptors of %u samples", n);
    return SL_EBUDGET;
}

/* A hardware handle in one mode with its state, its buffers for a full
 * batch of typical images taken now (nvJPEG's allocations come from the
 * pools). 0, or nvJPEG's status (*h NULL: no JPEG engines). */
static sl_nvjStatus open_hw_handle(sl__gpu_engine *e, int unpipelined, sl_nvjHandle *h, sl_nvjState *st) {
    const sl__cuda_api *cu = e->cu;
    sl_nvjStatus s = cu->nvjpegCreateExV2(SL_NVJ_BACKEND_HARDWARE, &e->dalloc, &e->palloc,
                                          unpipelined ? SL_NVJ_FLAGS_HW_DECODE_NO_PIPELINE : 0, h);
    if (s) {
        *h = NULL;
        return s;
    }
    cu->nvjpegSetDeviceMemoryPadding(NVJ_PADDING, *h);
    cu->nvjpegSetPinnedMemoryPadding(NVJ_PADDING, *h);
    if ((s = cu->nvjpegJpegStateCreate(*h, st))) {
        *st = NULL;
        return s;
    }
    if (!cu->nvjpegDecodeBatchedPreAllocate) return 0;
    int w = e->cfg.hint_w ? (int)e->cfg.hint_w : 512, hh = e->cfg.hint_h ? (int)e->cfg.hint_h : 512;
    return cu->nvjpegDecodeBatchedPreAllocate(*h, *st, (int)e->cfg.max_batch, w, hh, SL_NVJ_CSS_444,
                                              SL_NVJ_OUTPUT_RGBI);
}

/* The hardware backend: absent on GPUs without JPEG engines (then 0,
 * e->hw NULL). The first handle is the mode without nvJPEG's pipeline
 * unless SL_GPU_HW_PIPELINED alone: beside a training loop it is the faster (the
 * measure starts on it, docs/gpu.md "The hardware's two modes"); an nvJPEG
 * that will not make it gets the pipelined one. The second mode's handle
 * is an option: where it cannot be opened (the pools too small for both)
 * the engine runs on the first. */
static int open_hardware(sl__gpu_engine *e, char *err, size_t errlen) {
    const sl__cuda_api *cu = e->cu;
    if (e->cfg.flags & SL_GPU_NO_HARDWARE) return 0;
    int one_mode = (e->cfg.flags & (SL_GPU_HW_PIPELINED | SL_GPU_HW_UNPIPELINED)) != 0;
    e->hw_unpipelined = (e->cfg.flags & SL_GPU_HW_UNPIPELINED) || !(e->cfg.flags & SL_GPU_HW_PIPELINED);
    sl_nvjStatus s = open_hw_handle(e, e->hw_unpipelined, &e->hw, &e->hw_state);
    if (!e->hw && !one_mode) s = open_hw_handle(e, e->hw_unpipelined = 0, &e->hw, &e->hw_state);
    sl__hw_modes_init(&e->modes, e->hw_unpipelined);
    if (!e->hw) return 0; /* no JPEG engines on this GPU */
    if (s) return nvj_fail(s, "hardware state or preallocation (the pools are too small for a batch)", err, errlen);
    for (uint32_t i = 0; i < e->cfg.max_batch; i++) {
        if ((s = cu->nvjpegJpegStreamCreate(e->hw, &e->hw_streams[i]))) return nvj_fail(s, "stream", err, errlen);
        if ((s = cu->nvjpegDecodeParamsCreate(e->hw, &e->hw_params[i]))) return nvj_fail(s, "params", err, errlen);
        if ((s = cu->nvjpegDecodeParamsSetOutputFormat(e->hw_params[i], SL_NVJ_OUTPUT_RGBI)))
            return nvj_fail(s, "output format", err, errlen);
    }
    if (cu->nvjpegGetHardwareDecoderInfo)
        cu->nvjpegGetHardwareDecoderInfo(e->hw, &e->st.hw_engines, &e->st.hw_cores);
    if (!one_mode && open_hw_handle(e, !e->hw_unpipelined, &e->hw2, &e->hw2_state)) {
        if (e->hw2_state) cu->nvjpegJpegStateDestroy(e->hw2_state);
        if (e->hw2) cu->nvjpegDestroy(e->hw2);
        e->hw2 = NULL, e->hw2_state = NULL;
    }
    return 0;
}

static int open_hybrid(sl__gpu_engine *e, char *err, size_t errlen) {
    const sl__cuda_api *cu = e->cu;
    if (e->cfg.flags & SL_GPU_NO_HYBRID) return 0;
    sl_nvjStatus s = cu->nvjpegCreateExV2(SL_NVJ_BACKEND_DEFAULT, &e->dalloc, &e->palloc, 0, &e->gh);
    if (s) {
        e->gh = NULL;
        return nvj_fail(s, "handle", err, errlen);
    }
    cu->nvjpegSetDeviceMemoryPadding(NVJ_PADDING, e->gh);
    cu->nvjpegSetPinnedMemoryPadding(NVJ_PADDING, e->gh);
    if ((s = cu->nvjpegDecoderCreate(e->gh, SL_NVJ_BACKEND_GPU_HYBRID, &e->hyb))) {
        e->hyb = NULL;
        return nvj_fail(s, "GPU hybrid decoder", err, errlen);
    }
    if ((s = cu->nvjpegDecoderStateCreate(e->gh, e->hyb, &e->hyb_state))) {
        e->hyb_state = NULL;
        return nvj_fail(s, "hybrid state", err, errlen);
    }
    if ((s = cu->nvjpegBufferPinnedCreateV2(e->gh, &e->palloc, &e->hyb_pin))) {
        e->hyb_pin = NULL;
        return nvj_fail(s, "pinned buffer", err, errlen);
    }
    if ((s = cu->nvjpegBufferDeviceCreateV2(e->gh, &e->dalloc, &e->hyb_dev))) {
        e->hyb_dev = NULL;
        return nvj_fail(s, "device buffer", err, errlen);
    }
    if ((s = cu->nvjpegStateAttachPinnedBuffer(e->hyb_state, e->hyb_pin)) ||
        (s = cu->nvjpegStateAttachDeviceBuffer(e->hyb_state, e->hyb_dev)))
        return nvj_fail(s, "attaching buffers", err, errlen);
    if ((s = cu->nvjpegJpegStreamCreate(e->gh, &e->hyb_stream))) {
        e->hyb_stream = NULL;
        return nvj_fail(s, "stream", err, errlen);
    }
    if ((s = cu->nvjpegDecodeParamsCreate(e->gh, &e->hyb_params))) {
        e->hyb_params = NULL;
        return nvj_fail(s, "params", err, errlen);
    }
    if ((s = cu->nvjpegDecodeParamsSetOutputFormat(e->hyb_params, SL_NVJ_OUTPUT_RGBI)))
        return nvj_fail(s, "output format", err, errlen);
    return 0;
}

static int check_config(const sl__gpu_config *c, char *err, size_t errlen) {
    char b1[16], b2[16];
    if (c->max_batch < 1 || c->max_batch > 65535) {
        sl__msg(err, errlen, "max_batch %u out of range 1..65535", c->max_batch);
        return SL_EINVAL;
    }
    if (c->gpu_budget < sl__gpu_min_device(c->max_batch)) {
        sl__msg(err, errlen, "gpu_budget %s is below the minimum of %s for batches of %u",
                sl__fmt_bytes(c->gpu_budget, b1, sizeof b1), sl__fmt_bytes(sl__gpu_min_device(c->max_batch), b2, sizeof b2),
                c->max_batch);
        return SL_EBUDGET;
    }
    if (c->pinned_bytes < sl__gpu_min_pinned(c->max_batch)) {
        sl__msg(err, errlen, "pinned_bytes %s is below the minimum of %s for batches of %u",
                sl__fmt_bytes(c->pinned_bytes, b1, sizeof b1),
                sl__fmt_bytes(sl__gpu_min_pinned(c->max_batch), b2, sizeof b2), c->max_batch);
        return SL_EBUDGET;
    }
    if (c->staging_bytes > UINT64_MAX / 4 || c->pinned_bytes > UINT64_MAX / 4) {
        sl__msg(err, errlen, "pinned_bytes + staging_bytes overflow");
        return SL_EINVAL;
    }
    if ((c->flags & SL_GPU_NO_HARDWARE) && (c->flags & SL_GPU_NO_HYBRID)) {
        sl__msg(err, errlen, "both nvJPEG backends switched off");
        return SL_EINVAL;
    }
    return 0;
}

/* The steps, each checked; the RSS each added goes to the stats. */
static int open_all(sl__gpu_engine *e, char *err, size_t errlen) {
    uint64_t mark = sl__gpu_rss_now();
    int rc = open_context(e, err, errlen);
    e->st.host_rss_context = rss_step(&mark);
    if (!rc) rc = sl__gpu_kernels_load(e->cu, e->dev, e->host, &e->k, e->st.kernels, sizeof e->st.kernels, err, errlen);
    e->st.host_rss_kernels = rss_step(&mark);
    if (!rc) rc = open_pools(e, err, errlen);
    e->st.host_rss_pinned = rss_step(&mark);
    if (!rc) rc = open_tables(e, err, errlen);
    if (!rc) rc = open_hardware(e, err, errlen);
    if (!rc) rc = open_hybrid(e, err, errlen);
    e->st.host_rss_nvjpeg = rss_step(&mark);
    if (!rc && !e->hw && !e->hyb) {
        sl__msg(err, errlen, "no nvJPEG backend could be created on %s", e->st.device_name);
        rc = SL_EUNSUPPORTED;
    }
    if (!rc) rc = sl__gpu_warm_up(e, err, errlen);
    e->st.host_rss_warmup = rss_step(&mark);
    return rc;
}

int sl__gpu_engine_new(const sl__gpu_config *cfg, sl__budget *host, sl__gpu_engine **out, char *err,
                       size_t errlen) {
    if (!cfg || !host || !out) return SL_EINVAL;
    *out = NULL;
    int rc = check_config(cfg, err, errlen);
    if (rc) return rc;
    const sl__cuda_api *cu = sl__cuda_api_get(err, errlen);
    if (!cu) return SL_EUNSUPPORTED;
    sl__gpu_engine *e = sl__calloc(host, 1, sizeof *e, SL_MEM_OTHER);
    if (!e) {
        sl__msg(err, errlen, "the host budget cannot hold the GPU engine");
        return SL_EBUDGET;
    }
    e->cu = cu;
    e->host = host;
    e->cfg = *cfg;
    e->dalloc = (sl_nvjDevAllocV2){dev_malloc, dev_free, e};
    e->palloc = (sl_nvjPinnedAllocV2){pin_malloc, pin_free, e};
    if (pthread_mutex_init(&e->stats_mu, NULL)) {
        sl__free(host, e);
        return SL_ESYS;
    }
    if ((rc = open_all(e, err, errlen))) {
        sl__gpu_engine_free(e);
        return rc;
    }
    snprintf(e->st.backends, sizeof e->st.backends, "%s%s%s%s", e->hw ? "hardware" : "",
             !e->hw ? "" : e->hw2 ? " (both modes)" : e->hw_unpipelined ? " (unpipelined)" : " (pipelined)",
             e->hw && e->hyb ? "+" : "", e->hyb ? "hybrid" : "");
    *out = e;
    return 0;
}

/* ---- askers ---------------------------------------------------------------- */

int sl__gpu_asker_new(sl__gpu_engine *e, sl__gpu_asker **out) {
    *out = NULL;
    if (!e || !e->hw) return SL_EUNSUPPORTED;
    const sl__cuda_api *cu = e->cu;
    sl__gpu_asker *a = sl__calloc(e->host, 1, sizeof *a, SL_MEM_OTHER);
    if (!a) return SL_EBUDGET;
    a->e = e;
    if (cu->nvjpegJpegStreamCreate(e->hw, &a->js) || cu->nvjpegDecodeParamsCreate(e->hw, &a->jp) ||
        cu->nvjpegDecodeParamsSetOutputFormat(a->jp, SL_NVJ_OUTPUT_RGBI)) {
        sl__gpu_asker_free(a);
        return SL_EIO;
    }
    *out = a;
    return 0;
}

void sl__gpu_asker_free(sl__gpu_asker *a) {
    if (!a) return;
    const sl__cuda_api *cu = a->e->cu;
    if (a->jp) cu->nvjpegDecodeParamsDestroy(a->jp);
    if (a->js) cu->nvjpegJpegStreamDestroy(a->js);
    sl__free(a->e->host, a);
}

/* ---- free ------------------------------------------------------------------ */
static void close_nvjpeg(sl__gpu_engine *e) {
    const sl__cuda_api *cu = e->cu;
    for (uint32_t i = 0; e->tables && i < e->cfg.max_batch; i++) { /* the tables exist whole or not at all */
        if (e->hw_streams[i]) cu->nvjpegJpegStreamDestroy(e->hw_streams[i]);
        if (e->hw_params[i]) cu->nvjpegDecodeParamsDestroy(e->hw_params[i]);
    }
    if (e->hw_state) cu->nvjpegJpegStateDestroy(e->hw_state);
    if (e->hw) cu->nvjpegDestroy(e->hw);
    if (e->hw2_state) cu->nvjpegJpegStateDestroy(e->hw2_state);
    if (e->hw2) cu->nvjpegDestroy(e->hw2);
    if (e->hyb_params) cu->nvjpegDecodeParamsDestroy(e->hyb_params);
    if (e->hyb_stream) cu->nvjpegJpegStreamDestroy(e->hyb_stream);
    if (e->hyb_state) cu->nvjpegJpegStateDestroy(e->hyb_state);
    if (e->hyb_pin) cu->nvjpegBufferPinnedDestroy(e->hyb_pin);
    if (e->hyb_dev) cu->nvjpegBufferDeviceDestroy(e->hyb_dev);
    if (e->hyb) cu->nvjpegDecoderDestroy(e->hyb);
    if (e->gh) cu->nvjpegDestroy(e->gh);
}

void sl__gpu_engine_free(sl__gpu_engine *e) {
    if (!e) return;
    const sl__cuda_api *cu = e->cu;
    if (e->ctx) cu->cuCtxSetCurrent(e->ctx);
    if (e->inflight) sl__gpu_wait(e, NULL, 0);
    if (e->stream) cu->cuStreamSynchronize(e->stream);
    close_nvjpeg(e);
    sl__free(e->host, e->tables);
    if (e->dpool_ok) sl__pool_fini(&e->dpool);
    if (e->ppool_ok) sl__pool_fini(&e->ppool);
    if (e->spool_ok) sl__pool_fini(&e->spool);
    if (e->dev_base) cu->cuMemFree(e->dev_base);
    if (e->pin_base) cu->cuMemFreeHost(e->pin_base);
    if (e->pin_counted) {
        sl__budget_unfix(e->host, e->pin_counted);
        sl__budget_release(e->host, e->pin_counted, SL_MEM_PINNED);
    }
    sl__gpu_kernels_unload(cu, &e->k);
    sl_CUevent ev[4] = {e->ev0, e->ev_hyb, e->ev_hw, e->ev1};
    for (int i = 0; i < 4; i++)
        if (ev[i]) cu->cuEventDestroy(ev[i]);
    if (e->stream) cu->cuStreamDestroy(e->stream);
    if (e->ctx) cu->cuDevicePrimaryCtxRelease(e->dev);
    pthread_mutex_destroy(&e->stats_mu);
    sl__free(e->host, e);
}

void sl__gpu_engine_stats(const sl__gpu_engine *ce, sl__gpu_stats *out) {
    sl__gpu_engine *e = (sl__gpu_engine *)ce;
    pthread_mutex_lock(&e->stats_mu);
    *out = e->st;
    pthread_mutex_unlock(&e->stats_mu);
    sl__pool_stats d, p, s;
    memset(&s, 0, sizeof s);
    sl__pool_stats_get(&e->dpool, &d);
    sl__pool_stats_get(&e->ppool, &p);
    if (e->spool_ok) sl__pool_stats_get(&e->spool, &s);
    out->device_used = d.used;
    out->device_peak = d.peak;
    out->pinned_used = p.used;
    out->pinned_peak = p.peak;
    out->staging_used = s.used;
    out->staging_peak = s.peak;
    out->pool_refusals = d.fails + p.fails;
}

void *sl__gpu_stage_alloc(sl__gpu_engine *e, size_t n) {
    return n && e->spool_ok ? (void *)(uintptr_t)sl__pool_alloc(&e->spool, n) : NULL;
}

void sl__gpu_stage_free(sl__gpu_engine *e, void *p) {
    if (p) sl__pool_free(&e->spool, (uint64_t)(uintptr_t)p);
}
