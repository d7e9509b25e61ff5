/*
 * The CUDA device behind the loader's GPU stage (device.h): the engines,
 * the copy lanes' streams (copy_streams), the batch slots' region. Every
 * call makes the engines' context (the device's primary context) current
 * on the calling thread first: worker threads never had it. Engine 0 holds
 * the staging pool; every engine reads staged samples from it (host
 * memory). For a video field the video engine (NVDEC sessions) stands in
 * for the engines, on the same context.
 */
#include "gpu/device.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "gpu/engine_impl.h"

typedef struct cuda_dev {
    const sl__cuda_api *cu;
    sl__budget *host;
    sl_CUcontext ctx;   /* the engines' (the device's primary context) */
    sl__gpu_engine *e;  /* engine 0: the staging */
    sl__gpu_engine *engines[SL_GPU_MAX_ENGINES];
    uint32_t nengines;
    sl_CUstream *lanes; /* nlanes entries, counted in host: lane i copies on stream i % nstreams, the
                           first nstreams entries the streams it owns */
    sl_CUevent *lane_ev; /* one blocking event per lane: a copy's end, slept on */
    sl__gpu_asker **askers; /* one per lane on engine 0's handle (NULL: no hardware backend; an entry
                               NULL: the engine asks about that lane's samples) */
    uint32_t nlanes, nstreams;
    sl_CUdeviceptr region;
    void *pinned;       /* the host memory pin page-locked, or NULL */
    sl__gpu_video *v;   /* or video: the NVDEC sessions */
} cuda_dev;

static sl__gpu_dev_open_fn override_open;

void sl__gpu_dev_override(sl__gpu_dev_open_fn fn) { override_open = fn; }

int sl__gpu_dev_available(char *why, size_t len) {
    if (override_open) {
        sl__msg(why, len, "%s", "");
        return 1;
    }
    return sl__gpu_available(why, len);
}

int sl__gpu_dev_video_available(char *why, size_t len) {
    if (override_open) {
        sl__msg(why, len, "%s", "");
        return 1;
    }
    return sl__gpu_video_available(why, len);
}

static int dev_decode(void *ctx, uint32_t engine, uint32_t n, const uint8_t *const *data, const size_t *len,
                      const sl__gpu_item *items, uint64_t dst, uint64_t stride, int *status,
                      char (*reasons)[SL_GPU_REASON], char *err, size_t errlen) {
    cuda_dev *d = ctx;
    if (engine >= d->nengines) return SL_EINVAL;
    sl__gpu_engine *e = d->engines[engine];
    int rc = sl__gpu_decode_batch(e, n, data, len, items, dst, stride, status, reasons);
    if (rc) {
        sl__msg(err, errlen, "GPU decode of %u samples: %s", n, sl_strerror(rc));
        for (uint32_t i = 0; i < n; i++) status[i] = SL_GPU_CPU;
        return SL_EIO;
    }
    if ((rc = sl__gpu_wait(e, err, errlen))) {
        for (uint32_t i = 0; i < n; i++) status[i] = SL_GPU_CPU; /* not written */
        return SL_EIO;
    }
    return 0;
}

static int dev_region(void *ctx, uint64_t bytes, uint64_t *base, char *err, size_t errlen) {
    cuda_dev *d = ctx;
    sl_CUresult r;
    if (d->region || !bytes) return SL_EINVAL;
    if ((r = d->cu->cuCtxSetCurrent(d->ctx)) || (r = d->cu->cuMemAlloc(&d->region, bytes))) {
        char b[16];
        d->region = 0;
        sl__msg(err, errlen, "device memory for the batch slots (%s): %s", sl__fmt_bytes(bytes, b, sizeof b),
                sl__cu_errname(d->cu, r));
        return SL_ENOMEM;
    }
    *base = d->region;
    return 0;
}

enum { COPY_HTOD, COPY_DTOD, COPY_DTOH };

/* Wait for what the lane's stream holds (r: the queueing's result). */
static int lane_wait(cuda_dev *d, uint32_t lane, sl_CUresult r) {
    if (!r) r = d->cu->cuEventRecord(d->lane_ev[lane], d->lanes[lane]);
    if (!r) r = d->cu->cuEventSynchronize(d->lane_ev[lane]); /* sleeps: no spinning beside the model's launches */
    return r ? SL_EIO : 0;
}

/* Run one copy on the lane's stream and wait for it. */
static int lane_copy(cuda_dev *d, uint32_t lane, int kind, uint64_t dev_dst, void *host_dst, uint64_t dev_src,
                     const void *host_src, size_t n) {
    if (lane >= d->nlanes) return SL_EINVAL;
    const sl__cuda_api *cu = d->cu;
    sl_CUstream s = d->lanes[lane];
    sl_CUresult r = cu->cuCtxSetCurrent(d->ctx);
    if (!r) r = kind == COPY_HTOD   ? cu->cuMemcpyHtoDAsync(dev_dst, host_src, n, s)
                : kind == COPY_DTOD ? cu->cuMemcpyDtoDAsync(dev_dst, dev_src, n, s)
                                    : cu->cuMemcpyDtoHAsync(host_dst, dev_src, n, s);
    return lane_wait(d, lane, r);
}

/* n copies host -> device queued on the lane's stream, one wait for all. */
static int dev_upload_runs(void *ctx, uint32_t lane, uint32_t n, const uint64_t *dst, const void *const *src,
                           const size_t *len) {
    cuda_dev *d = ctx;
    if (lane >= d->nlanes) return SL_EINVAL;
    sl_CUresult r = d->cu->cuCtxSetCurrent(d->ctx);
    for (uint32_t i = 0; i < n && !r; i++) r = d->cu->cuMemcpyHtoDAsync(dst[i], src[i], len[i], d->lanes[lane]);
    return lane_wait(d, lane, r);
}

static void dev_ask(void *ctx, uint32_t lane, const uint8_t *data, size_t len, sl__gpu_item *it) {
    cuda_dev *d = ctx;
    if (lane < d->nlanes && d->askers && d->askers[lane] && !d->cu->cuCtxSetCurrent(d->ctx))
        it->hw = sl__gpu_ask(d->askers[lane], data, len, it);
}

static int dev_upload(void *ctx, uint32_t lane, uint64_t dst, const void *src, size_t n) {
    return lane_copy(ctx, lane, COPY_HTOD, dst, NULL, 0, src, n);
}

static int dev_move(void *ctx, uint32_t lane, uint64_t dst, uint64_t src, size_t n) {
    return lane_copy(ctx, lane, COPY_DTOD, dst, NULL, src, NULL, n);
}

static int dev_download(void *ctx, uint32_t lane, void *dst, uint64_t src, size_t n) {
    return lane_copy(ctx, lane, COPY_DTOH, 0, dst, src, NULL, n);
}

static int dev_pin(void *ctx, void *host, size_t n, char *err, size_t errlen) {
    cuda_dev *d = ctx;
    if (d->pinned || !host || !n) return SL_EINVAL;
    sl_CUresult r = d->cu->cuCtxSetCurrent(d->ctx);
    if (!r) r = d->cu->cuMemHostRegister(host, n, SL_CU_MEMHOSTREGISTER_PORTABLE);
    if (r) {
        char b[16];
        sl__msg(err, errlen, "cuMemHostRegister of the %s slot region: %s", sl__fmt_bytes(n, b, sizeof b),
                sl__cu_errname(d->cu, r));
        return SL_EIO;
    }
    d->pinned = host;
    return 0;
}

static void *dev_stage_alloc(void *ctx, size_t n) { return sl__gpu_stage_alloc(((cuda_dev *)ctx)->e, n); }
static void dev_stage_free(void *ctx, void *p) { sl__gpu_stage_free(((cuda_dev *)ctx)->e, p); }
/* Engine 0's stats with every other engine's counts and times added. */
static void dev_stats(void *ctx, sl__gpu_stats *out) {
    cuda_dev *d = ctx;
    sl__gpu_engine_stats(d->engines[0], out);
    for (uint32_t k = 1; k < d->nengines; k++) {
        sl__gpu_stats o;
        sl__gpu_engine_stats(d->engines[k], &o);
        out->device_pool_bytes += o.device_pool_bytes, out->device_used += o.device_used;
        out->device_peak += o.device_peak, out->pinned_pool_bytes += o.pinned_pool_bytes;
        out->pinned_used += o.pinned_used, out->pinned_peak += o.pinned_peak, out->pool_refusals += o.pool_refusals;
        out->samples_hw += o.samples_hw, out->samples_hybrid += o.samples_hybrid, out->samples_cpu += o.samples_cpu;
        out->samples_again += o.samples_again, out->batches += o.batches, out->hw_calls += o.hw_calls;
        out->hw_failed_calls += o.hw_failed_calls, out->busy_s += o.busy_s, out->rate += o.rate;
        out->hw_calls_unpipelined += o.hw_calls_unpipelined, out->hw_mode_switches += o.hw_mode_switches;
        out->hw_us_pipelined = SL_MAX(out->hw_us_pipelined, o.hw_us_pipelined); /* the slowest engine's */
        out->hw_us_unpipelined = SL_MAX(out->hw_us_unpipelined, o.hw_us_unpipelined);
        out->gpu_hybrid_s += o.gpu_hybrid_s, out->gpu_hw_s += o.gpu_hw_s, out->gpu_resize_s += o.gpu_resize_s;
        out->thread_route_s += o.thread_route_s, out->thread_hybrid_s += o.thread_hybrid_s;
        out->thread_hw_s += o.thread_hw_s, out->thread_launch_s += o.thread_launch_s;
        out->thread_wait_s += o.thread_wait_s;
        out->host_rss_context += o.host_rss_context, out->host_rss_kernels += o.host_rss_kernels;
        out->host_rss_pinned += o.host_rss_pinned, out->host_rss_nvjpeg += o.host_rss_nvjpeg;
        out->host_rss_warmup += o.host_rss_warmup;
    }
}

static int dev_clip(void *ctx, uint32_t lane, const sl__sample_file *f, const sl__video_info *info,
                    const sl__clip_plan *plan, sl__quota *q, const _Atomic int *cancel, int wait, uint64_t dst,
                    char *reason, size_t rlen) {
    (void)lane; /* the clip runs on its session's stream */
    return sl__gpu_video_clip(((cuda_dev *)ctx)->v, f, info, plan, q, cancel, wait, dst, reason, rlen);
}

/* The video engine's counters in the image engine's terms. */
static void video_stats(void *ctx, sl__gpu_stats *out) {
    sl__gpu_video_stats vs;
    sl__gpu_video_stats_get(((cuda_dev *)ctx)->v, &vs);
    memset(out, 0, sizeof *out);
    out->device_pool_bytes = vs.pool_bytes;
    out->device_used = vs.pool_used;
    out->device_peak = vs.pool_peak;
    out->samples_hw = vs.clips;
    out->samples_cpu = vs.to_cpu;
    snprintf(out->device_name, sizeof out->device_name, "%s", vs.device_name);
    snprintf(out->backends, sizeof out->backends, "NVDEC x%u", vs.sessions);
    snprintf(out->kernels, sizeof out->kernels, "%s", vs.kernels);
}

static void dev_close(void *ctx) {
    cuda_dev *d = ctx;
    if (!d) return;
    const sl__cuda_api *cu = d->cu;
    if (d->ctx) cu->cuCtxSetCurrent(d->ctx);
    for (uint32_t i = 0; d->lanes && i < d->nstreams; i++) {
        if (!d->lanes[i]) continue;
        cu->cuStreamSynchronize(d->lanes[i]);
        cu->cuStreamDestroy(d->lanes[i]);
    }
    for (uint32_t i = 0; d->lane_ev && i < d->nlanes; i++)
        if (d->lane_ev[i]) cu->cuEventDestroy(d->lane_ev[i]);
    if (d->region) cu->cuMemFree(d->region);
    if (d->pinned) cu->cuMemHostUnregister(d->pinned); /* the lanes are idle: no copy reads it */
    for (uint32_t i = 0; d->askers && i < d->nlanes; i++) sl__gpu_asker_free(d->askers[i]); /* before engine 0 */
    sl__free(d->host, d->askers);
    sl__free(d->host, d->lanes);
    sl__free(d->host, d->lane_ev);
    for (uint32_t k = d->nengines; k-- > 0;) sl__gpu_engine_free(d->engines[k]); /* engine 0 last: the context */
    sl__gpu_video_free(d->v);                                                     /* or the video engine's */
    sl__free(d->host, d);
}

/* The engines' and the lanes' stream priority: the device's least (the
 * default streams' too: a model's stream of greater priority goes first),
 * or its greatest with SLUICE_GPU_STREAM_PRIORITY=greatest (the decode's
 * kernels go ahead of a model on a default stream: an experiment's knob,
 * docs/gpu.md "Sharing the GPU with the model"). */
static uint32_t stream_priority(void) {
    const char *env = getenv("SLUICE_GPU_STREAM_PRIORITY");
    return env && strcmp(env, "greatest") == 0 ? SL_GPU_HIGH_PRIORITY : SL_GPU_LOW_PRIORITY;
}

/* SLUICE_GPU_HYBRID=0: no hybrid backend, so the JPEGs the hardware
 * engines refuse go to the CPU workers, not through the GPU thread one at a
 * time (a rule of the sample still: the same bytes in every run with it).
 * An experiment's knob, as the priority's. */
static uint32_t hybrid_flag(void) {
    const char *env = getenv("SLUICE_GPU_HYBRID");
    return env && strcmp(env, "0") == 0 ? SL_GPU_NO_HYBRID : 0;
}

/* SLUICE_GPU_HW_PIPELINE=1 or 0: only nvJPEG's pipelined hardware mode,
 * or only the one without; unset, both, the calls on the one the engine's
 * measure chose (batch.c). An experiment's knob: the same bytes either way. */
static uint32_t hw_mode_flag(void) {
    const char *env = getenv("SLUICE_GPU_HW_PIPELINE");
    if (!env) return 0;
    return strcmp(env, "1") == 0 ? SL_GPU_HW_PIPELINED : strcmp(env, "0") == 0 ? SL_GPU_HW_UNPIPELINED : 0;
}

/* SLUICE_GPU_RESIZE=passes: the resize's two-pass kernels for every
 * sample, as before the tiled kernel (an experiment's knob, to measure
 * that kernel against them: the same bytes). */
static uint32_t resize_flag(void) {
    const char *env = getenv("SLUICE_GPU_RESIZE");
    return env && strcmp(env, "passes") == 0 ? SL_GPU_RESIZE_PASSES : 0;
}

/* SLUICE_GPU_ASK=engine: the engine's thread asks nvJPEG about every
 * sample in its call, as before askers (an experiment's knob: the same
 * answers, the same bytes). */
static int ask_in_engine(void) {
    const char *env = getenv("SLUICE_GPU_ASK");
    return env && strcmp(env, "engine") == 0;
}

/* One asker per lane on engine 0, which has the hardware backend (none
 * where there is none). A lane without one leaves its samples to the
 * engine to ask about, so a failure here costs speed, never the device. */
static void open_askers(cuda_dev *d) {
    if (!d->e->hw || ask_in_engine()) return;
    d->askers = sl__calloc(d->host, d->nlanes, sizeof *d->askers, SL_MEM_OTHER);
    for (uint32_t i = 0; d->askers && i < d->nlanes; i++) sl__gpu_asker_new(d->e, &d->askers[i]); /* NULL on failure */
}

/* How many streams the n copy lanes share: one each, or N with
 * SLUICE_GPU_COPY_STREAMS=N (1..n; an experiment's knob: the same bytes).
 * A lane's copy waits on its own event, so a shared stream adds at most the
 * other lanes' copies queued before it. Each stream takes a place in one
 * of the device's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): fewer
 * streams share fewer queues with NCCL's all-reduce, but under DDP on two
 * H200s one stream fed no faster than 17 (docs/gpu.md, "CUDA's hardware
 * queues"). */
static uint32_t copy_streams(uint32_t n) {
    const char *env = getenv("SLUICE_GPU_COPY_STREAMS");
    long v = env ? strtol(env, NULL, 10) : 0;
    return v > 0 && v <= (long)n ? (uint32_t)v : n;
}

/* The lanes' streams (copy_streams of them), at the engines' priority
 * (prio_flag), and one event per lane. */
static int open_lanes(cuda_dev *d, uint32_t n, uint32_t prio_flag, char *err, size_t errlen) {
    d->lanes = sl__calloc(d->host, n, sizeof *d->lanes, SL_MEM_OTHER);
    d->lane_ev = sl__calloc(d->host, n, sizeof *d->lane_ev, SL_MEM_OTHER);
    if (!d->lanes || !d->lane_ev) {
        sl__msg(err, errlen, "the host budget cannot hold %u copy streams", n);
        return SL_EBUDGET;
    }
    d->nlanes = n;
    d->nstreams = copy_streams(n);
    int prio = sl__cu_priority(d->cu, prio_flag == SL_GPU_HIGH_PRIORITY);
    for (uint32_t i = 0; i < d->nstreams; i++) {
        sl_CUresult r = d->cu->cuStreamCreateWithPriority(&d->lanes[i], SL_CU_STREAM_NON_BLOCKING, prio);
        if (r) {
            d->lanes[i] = NULL;
            sl__msg(err, errlen, "cuStreamCreateWithPriority: %s", sl__cu_errname(d->cu, r));
            return SL_EIO;
        }
    }
    for (uint32_t i = d->nstreams; i < n; i++) d->lanes[i] = d->lanes[i % d->nstreams];
    for (uint32_t i = 0; i < n; i++) {
        sl_CUresult r = d->cu->cuEventCreate(&d->lane_ev[i], SL_CU_EVENT_BLOCKING_SYNC | SL_CU_EVENT_DISABLE_TIMING);
        if (r) {
            d->lane_ev[i] = NULL;
            sl__msg(err, errlen, "cuEventCreate: %s", sl__cu_errname(d->cu, r));
            return SL_EIO;
        }
    }
    return 0;
}

int sl__gpu_dev_open(const sl__gpu_dev_config *cfg, sl__budget *host, sl__gpu_dev *out, char *err, size_t errlen) {
    if (!cfg || !host || !out || cfg->lanes == 0 ||
        (!cfg->video && (cfg->engines < 1 || cfg->engines > SL_GPU_MAX_ENGINES)))
        return SL_EINVAL;
    memset(out, 0, sizeof *out);
    if (override_open) return override_open(cfg, host, out, err, errlen);
    const sl__cuda_api *cu = sl__cuda_api_get(err, errlen);
    if (!cu) return SL_EUNSUPPORTED;
    cuda_dev *d = sl__calloc(host, 1, sizeof *d, SL_MEM_OTHER);
    if (!d) {
        sl__msg(err, errlen, "the host budget cannot hold the GPU device's state");
        return SL_EBUDGET;
    }
    d->cu = cu;
    d->host = host;
    int rc = 0;
    uint32_t prio_flag = stream_priority(); /* SL_GPU_LOW_PRIORITY or SL_GPU_HIGH_PRIORITY */
    if (cfg->video) {
        sl__gpu_video_config vc = {cfg->device, cfg->pool_bytes, cfg->sessions, cfg->session_cap, 1};
        rc = sl__gpu_video_new(&vc, host, &d->v, err, errlen);
        if (!rc && cu->cuCtxGetCurrent(&d->ctx)) rc = SL_EIO; /* the engine left its context current */
    }
    /* the pool shared equally; the staging on engine 0 */
    for (uint32_t k = 0; !cfg->video && k < cfg->engines && !rc; k++) {
        uint32_t flags = prio_flag | hybrid_flag() | hw_mode_flag() | resize_flag();
        sl__gpu_config ec = {cfg->device, cfg->pool_bytes / cfg->engines, sl__gpu_min_pinned(cfg->max_batch),
                             cfg->max_batch, 0, 0, flags, cfg->max_pixels, k ? 0 : cfg->staging_bytes};
        if (!(rc = sl__gpu_engine_new(&ec, host, &d->engines[k], err, errlen))) d->nengines++;
    }
    if ((d->e = d->engines[0])) d->ctx = d->e->ctx;
    if (!rc) rc = open_lanes(d, cfg->lanes, prio_flag, err, errlen); /* the engines left their context current */
    if (!rc && !cfg->video) open_askers(d);
    if (rc) {
        dev_close(d);
        return rc;
    }
    if (cfg->video) {
        *out = (sl__gpu_dev){d,        SL_DEVICE_CUDA, cfg->device, 0,    NULL,        dev_region, dev_upload,
                             dev_move, dev_download,   NULL,        NULL, video_stats, dev_close,  dev_clip, dev_pin,
                             dev_upload_runs, NULL};
        return 0;
    }
    *out = (sl__gpu_dev){d,          SL_DEVICE_CUDA,  cfg->device,    d->nengines, dev_decode, dev_region, dev_upload,
                         dev_move,   dev_download,    dev_stage_alloc, dev_stage_free, dev_stats,  dev_close, NULL,
                         dev_pin,    dev_upload_runs, d->askers ? dev_ask : NULL};
    return 0;
}
