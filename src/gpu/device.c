/*
 * The CUDA device behind the loader's GPU stage (device.h): the engine,
 * one stream per copy lane, the batch slots' region. Every call makes the
 * engine's context (the device's primary context) current on the calling
 * thread first: worker threads never had it.
 */
#include "gpu/device.h"

#include <string.h>

#include "base/util.h"
#include "gpu/engine_impl.h"

typedef struct cuda_dev {
    const sl__cuda_api *cu;
    sl__budget *host;
    sl__gpu_engine *e;
    sl_CUstream *lanes; /* nlanes streams, counted in host */
    uint32_t nlanes;
    sl_CUdeviceptr region;
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

static int dev_decode(void *ctx, uint32_t n, const uint8_t *const *data, const size_t *len, const sl__gpu_item *items,
                      uint64_t dst, uint64_t stride, int *status, char (*reasons)[SL_GPU_REASON], char *err,
                      size_t errlen) {
    cuda_dev *d = ctx;
    int rc = sl__gpu_decode_batch(d->e, n, data, len, items, dst, stride, status, reasons);
    if (rc) {
        sl__msg(err, errlen, "GPU decode of %u samples: %s", n, sl_strerror(rc));
        for (uint32_t i = 0; i < n; i++) status[i] = SL_GPU_CPU;
        return SL_EIO;
    }
    if ((rc = sl__gpu_wait(d->e, err, errlen))) {
        for (uint32_t i = 0; i < n; i++) status[i] = SL_GPU_CPU; /* not written */
        return SL_EIO;
    }
    return 0;
}

static int dev_region(void *ctx, uint64_t bytes, uint64_t *base, char *err, size_t errlen) {
    cuda_dev *d = ctx;
    sl_CUresult r;
    if (d->region || !bytes) return SL_EINVAL;
    if ((r = d->cu->cuCtxSetCurrent(d->e->ctx)) || (r = d->cu->cuMemAlloc(&d->region, bytes))) {
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

/* Run one copy on the lane's stream and wait for it. */
static int lane_copy(cuda_dev *d, uint32_t lane, int kind, uint64_t dev_dst, void *host_dst, uint64_t dev_src,
                     const void *host_src, size_t n) {
    if (lane >= d->nlanes) return SL_EINVAL;
    const sl__cuda_api *cu = d->cu;
    sl_CUstream s = d->lanes[lane];
    sl_CUresult r = cu->cuCtxSetCurrent(d->e->ctx);
    if (!r) r = kind == COPY_HTOD   ? cu->cuMemcpyHtoDAsync(dev_dst, host_src, n, s)
                : kind == COPY_DTOD ? cu->cuMemcpyDtoDAsync(dev_dst, dev_src, n, s)
                                    : cu->cuMemcpyDtoHAsync(host_dst, dev_src, n, s);
    if (!r) r = cu->cuStreamSynchronize(s);
    return r ? SL_EIO : 0;
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

static void *dev_stage_alloc(void *ctx, size_t n) { return sl__gpu_stage_alloc(((cuda_dev *)ctx)->e, n); }
static void dev_stage_free(void *ctx, void *p) { sl__gpu_stage_free(((cuda_dev *)ctx)->e, p); }
static void dev_stats(void *ctx, sl__gpu_stats *out) { sl__gpu_engine_stats(((cuda_dev *)ctx)->e, out); }

static void dev_close(void *ctx) {
    cuda_dev *d = ctx;
    if (!d) return;
    const sl__cuda_api *cu = d->cu;
    if (d->e) cu->cuCtxSetCurrent(d->e->ctx);
    for (uint32_t i = 0; d->lanes && i < d->nlanes; i++) {
        if (!d->lanes[i]) continue;
        cu->cuStreamSynchronize(d->lanes[i]);
        cu->cuStreamDestroy(d->lanes[i]);
    }
    if (d->region) cu->cuMemFree(d->region);
    sl__free(d->host, d->lanes);
    sl__gpu_engine_free(d->e); /* last: it releases the context */
    sl__free(d->host, d);
}

/* One stream per lane, at the lowest priority (copies of decoded images
 * wait behind a model's kernels, as the engine's stream does). */
static int open_lanes(cuda_dev *d, uint32_t n, char *err, size_t errlen) {
    d->lanes = sl__calloc(d->host, n, sizeof *d->lanes, SL_MEM_OTHER);
    if (!d->lanes) {
        sl__msg(err, errlen, "the host budget cannot hold %u copy streams", n);
        return SL_EBUDGET;
    }
    d->nlanes = n;
    int least = 0, greatest = 0;
    if (d->cu->cuCtxGetStreamPriorityRange(&least, &greatest)) least = 0;
    for (uint32_t i = 0; i < n; i++) {
        sl_CUresult r = d->cu->cuStreamCreateWithPriority(&d->lanes[i], SL_CU_STREAM_NON_BLOCKING, least);
        if (r) {
            d->lanes[i] = NULL;
            sl__msg(err, errlen, "cuStreamCreateWithPriority: %s", sl__cu_errname(d->cu, r));
            return SL_EIO;
        }
    }
    return 0;
}

int sl__gpu_dev_open(const sl__gpu_dev_config *cfg, sl__budget *host, sl__gpu_dev *out, char *err, size_t errlen) {
    if (!cfg || !host || !out || cfg->lanes == 0) return SL_EINVAL;
    memset(out, 0, sizeof *out);
    if (override_open) return override_open(cfg, host, out, err, errlen);
    const sl__cuda_api *cu = sl__cuda_api_get(err, errlen);
    if (!cu) return SL_EUNSUPPORTED;
    sl__gpu_config ec = {cfg->device,  cfg->pool_bytes,     sl__gpu_min_pinned(cfg->max_batch),
                         cfg->max_batch, 0, 0, SL_GPU_LOW_PRIORITY, cfg->max_pixels, cfg->staging_bytes};
    cuda_dev *d = sl__calloc(host, 1, sizeof *d, SL_MEM_OTHER);
    if (!d) {
        sl__msg(err, errlen, "the host budget cannot hold the GPU device's state");
        return SL_EBUDGET;
    }
    d->cu = cu;
    d->host = host;
    int rc = sl__gpu_engine_new(&ec, host, &d->e, err, errlen);
    if (!rc) rc = open_lanes(d, cfg->lanes, err, errlen); /* the engine left its context current */
    if (rc) {
        dev_close(d);
        return rc;
    }
    *out = (sl__gpu_dev){d,          SL_DEVICE_CUDA,  cfg->device,    dev_decode, dev_region, dev_upload, dev_move,
                         dev_download, dev_stage_alloc, dev_stage_free, dev_stats, dev_close};
    return 0;
}
