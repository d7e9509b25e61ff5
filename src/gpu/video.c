/*
 * Video clips on the GPU. See video.h for the contract.
 *
 * Create order (free undoes it backwards; a failure frees what the steps
 * before took): context -> kernels (resize, NV12 -> RGB) -> pool -> host
 * tables -> sessions (stream, descriptor block, NVDEC session each).
 *
 * One clip: a free session; the plan's geometry (ops/yuv.c) in one pool
 * block: the luma box and the chroma box each laid out the way the image
 * path lays out a sample (batch.c: the packed pixels, the resize's passes
 * and tables), then the resized planes; then the passes of
 * video_decode.c with this file's sink: for each needed frame, NVDEC's
 * NV12 surface -> both boxes packed (sl_nv12_pack) -> the resize kernels
 * (both boxes, one call) -> RGB into each clip position the frame fills
 * (sl_yuv_rgb), all on the session's stream, waited for before the frame
 * goes back to the decoder.
 *
 * Locks: mu protects the free sessions, the pool's waiters and the stats
 * (the pool locks itself). A session belongs to the clip that took it.
 */
#include "gpu/video.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "gpu/engine_impl.h"
#include "ops/ops.h"

#define POOL_ALIGN 256u
#define DESC_BYTES (((uint64_t)2 * sizeof(sl__gpu_desc) + POOL_ALIGN - 1) & ~(uint64_t)(POOL_ALIGN - 1))
#define MAX_SESSIONS 256

/* The kernels of the NV12 side, ops/yuv.c's sl__yuv_pack_row and
 * sl__yuv_rgb line for line (keep them together): the box's luma as
 * (Y, Y, Y) pixels and its chroma as (U, V, V), for the resize kernels;
 * then the resized planes to RGB. Parameters by value (layouts checked on
 * both sides). */
typedef struct sl__gpu_pack {
    uint64_t y, uv;                 /* NVDEC's surface: luma, interleaved chroma */
    uint64_t luma, chroma;          /* packed boxes (pitch 3 w, 3 cw) */
    uint32_t pitch_y, pitch_uv;
    uint32_t x, y0, w, h;           /* luma box, frame pixels */
    uint32_t cx, cy, cw, ch;        /* chroma box, chroma samples */
} sl__gpu_pack;
#define SL_GPU_PACK_SIZE 72
_Static_assert(sizeof(sl__gpu_pack) == SL_GPU_PACK_SIZE, "kernel parameter layout");

typedef struct sl__gpu_conv {
    uint64_t ys, uv, dst;           /* resized luma (plane 0), chroma (planes 0, 1); RGB planes out */
    uint32_t n;                     /* pixels of a plane */
    int32_t cy, oy, crv, cbu, cgu, cgv; /* sl__yuv_coefs */
} sl__gpu_conv;
#define SL_GPU_CONV_SIZE 56
_Static_assert(sizeof(sl__gpu_conv) == SL_GPU_CONV_SIZE, "kernel parameter layout");

static const char yuv_src[] =
    "struct sl_pack {\n"
    "  unsigned long long y, uv, luma, chroma;\n"
    "  unsigned pitch_y, pitch_uv, x, y0, w, h, cx, cy, cw, ch;\n"
    "};\n"
    "static_assert(sizeof(sl_pack) == 72, \"kernel parameter layout\");\n"
    "struct sl_conv {\n"
    "  unsigned long long ys, uv, dst;\n"
    "  unsigned n;\n"
    "  int cy, oy, crv, cbu, cgu, cgv;\n"
    "};\n"
    "static_assert(sizeof(sl_conv) == 56, \"kernel parameter layout\");\n"
    /* z 0: luma pixel (k, r) of the box; z 1: chroma sample (k, r) */
    "extern \"C\" __global__ void sl_nv12_pack(sl_pack p) {\n"
    "  unsigned k = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  if (blockIdx.z == 0) {\n"
    "    if (k >= p.w || r >= p.h) return;\n"
    "    unsigned char v = ((const unsigned char *)p.y)[(unsigned long long)(p.y0 + r) * p.pitch_y + p.x + k];\n"
    "    unsigned char *o = (unsigned char *)p.luma + ((unsigned long long)r * p.w + k) * 3;\n"
    "    o[0] = o[1] = o[2] = v;\n"
    "  } else {\n"
    "    if (k >= p.cw || r >= p.ch) return;\n"
    "    const unsigned char *c = (const unsigned char *)p.uv + (unsigned long long)(p.cy + r) * p.pitch_uv + 2ull * (p.cx + k);\n"
    "    unsigned char *o = (unsigned char *)p.chroma + ((unsigned long long)r * p.cw + k) * 3;\n"
    "    o[0] = c[0];\n"
    "    o[1] = o[2] = c[1];\n"
    "  }\n"
    "}\n"
    "__device__ unsigned char out8(long long v) {\n"
    "  v += 1ll << 15;\n"
    "  return (unsigned char)(v < 0 ? 0 : (v >> 16) > 255 ? 255 : v >> 16);\n"
    "}\n"
    "extern \"C\" __global__ void sl_yuv_rgb(sl_conv p) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i >= p.n) return;\n"
    "  const unsigned char *y = (const unsigned char *)p.ys, *u = (const unsigned char *)p.uv;\n"
    "  long long L = (long long)p.cy * ((long long)y[i] - p.oy), U = (long long)u[i] - 128, V = (long long)u[p.n + i] - 128;\n"
    "  unsigned char *o = (unsigned char *)p.dst;\n"
    "  o[i] = out8(L + (long long)p.crv * V);\n"
    "  o[p.n + i] = out8(L - (long long)p.cgu * U - (long long)p.cgv * V);\n"
    "  o[2ull * p.n + i] = out8(L + (long long)p.cbu * U);\n"
    "}\n";

typedef struct session {
    sl_CUstream stream;
    sl_CUdeviceptr desc;    /* the clip's two resize descriptors (pool) */
    sl__video_hw *hw;
    uint64_t kept_bytes;    /* host bytes counted for the decoder it keeps */
    int busy;
} session;

struct sl__gpu_video {
    const sl__cuda_api *cu;
    sl__budget *host;
    sl__gpu_video_config cfg;
    sl_CUdevice dev;
    sl_CUcontext ctx;       /* the device's primary context, retained */
    sl__gpu_kernels k;      /* the resize kernels (kernels.c) */
    sl_CUmodule ymod;
    sl_CUfunction pack, conv;
    sl_CUdeviceptr base;    /* the pool's region */
    sl__pool pool;
    int pool_ok;
    session *s;             /* cfg.sessions (host budget) */
    _Atomic int poisoned;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a session or pool room came free */
    int sync_ok;
    sl__gpu_video_stats st; /* mu */
};

uint64_t sl__gpu_video_min_pool(uint32_t sessions) {
    /* a 1280x720 clip's boxes with their passes (~6 bytes a pixel) beside the descriptors */
    return (uint64_t)sessions * DESC_BYTES + ((uint64_t)1280 * 720 * 6 + ((uint64_t)1 << 20));
}

uint64_t sl__gpu_video_device_bytes(const sl__gpu_video_config *cfg) {
    return cfg->pool_bytes + (uint64_t)cfg->sessions * cfg->session_cap;
}

int sl__gpu_video_available(char *why, size_t len) {
    if (!sl__cuda_api_get(why, len)) return 0;
    return sl__video_hw_available(why, len);
}

/* ---- create and free ------------------------------------------------------------ */

static int cu_fail(sl__gpu_video *v, sl_CUresult r, int code, const char *what, char *err, size_t errlen) {
    sl__msg(err, errlen, "%s: %s", what, sl__cu_errname(v->cu, r));
    return code;
}

static int open_context(sl__gpu_video *v, char *err, size_t errlen) {
    const sl__cuda_api *cu = v->cu;
    sl_CUresult r;
    int rc = sl__cu_primary(cu, v->cfg.device, &v->dev, &v->ctx, v->st.device_name, sizeof v->st.device_name, err,
                            errlen);
    char kw[192] = "", yw[192] = "";
    if (!rc) rc = sl__gpu_kernels_load(cu, v->dev, v->host, &v->k, kw, sizeof kw, err, errlen);
    if (!rc) rc = sl__gpu_module_load(cu, v->dev, v->host, yuv_src, "nv12", &v->ymod, yw, sizeof yw, err, errlen);
    snprintf(v->st.kernels, sizeof v->st.kernels, "resize: %.85s; nv12: %.85s", kw, yw);
    if (!rc && ((r = cu->cuModuleGetFunction(&v->pack, v->ymod, "sl_nv12_pack")) ||
                (r = cu->cuModuleGetFunction(&v->conv, v->ymod, "sl_yuv_rgb"))))
        rc = cu_fail(v, r, SL_EUNSUPPORTED, "the NV12 kernels", err, errlen);
    return rc;
}

static int open_pool(sl__gpu_video *v, char *err, size_t errlen) {
    uint64_t size = v->cfg.pool_bytes & ~(uint64_t)(POOL_ALIGN - 1);
    sl_CUresult r = v->cu->cuMemAlloc(&v->base, size);
    if (r) {
        v->base = 0;
        return cu_fail(v, r, SL_ENOMEM, "taking the video device pool", err, errlen);
    }
    int rc = sl__pool_init(&v->pool, v->host, v->base, size, POOL_ALIGN, 4 * v->cfg.sessions + 64);
    if (rc) return rc;
    v->pool_ok = 1;
    v->st.pool_bytes = size;
    return 0;
}

static int open_sessions(sl__gpu_video *v, char *err, size_t errlen) {
    v->s = sl__calloc(v->host, v->cfg.sessions, sizeof *v->s, SL_MEM_OTHER);
    if (!v->s) {
        sl__msg(err, errlen, "the host budget cannot hold %u NVDEC sessions' tables", v->cfg.sessions);
        return SL_EBUDGET;
    }
    int least = sl__cu_priority(v->cu, 0); /* as the image engine's by default: a model's stream goes first */
    for (uint32_t i = 0; i < v->cfg.sessions; i++) {
        session *s = &v->s[i];
        sl_CUresult r = v->cu->cuStreamCreateWithPriority(&s->stream, SL_CU_STREAM_NON_BLOCKING, least);
        if (r) {
            s->stream = NULL;
            return cu_fail(v, r, SL_EIO, "cuStreamCreateWithPriority", err, errlen);
        }
        if (!(s->desc = sl__pool_alloc(&v->pool, DESC_BYTES))) {
            sl__msg(err, errlen, "the video pool cannot hold %u sessions' descriptors", v->cfg.sessions);
            return SL_EBUDGET;
        }
        int rc = sl__video_hw_open(v->ctx, s->stream, v->cfg.session_cap, v->cfg.keep, &s->hw, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static int check_config(const sl__gpu_video_config *c, char *err, size_t errlen) {
    char b1[16], b2[16];
    if (c->sessions < 1 || c->sessions > MAX_SESSIONS) {
        sl__msg(err, errlen, "%u NVDEC sessions: 1 to %u", c->sessions, MAX_SESSIONS);
        return SL_EINVAL;
    }
    if (c->pool_bytes < sl__gpu_video_min_pool(c->sessions)) {
        sl__msg(err, errlen, "video device pool %s is below the minimum of %s for %u sessions",
                sl__fmt_bytes(c->pool_bytes, b1, sizeof b1),
                sl__fmt_bytes(sl__gpu_video_min_pool(c->sessions), b2, sizeof b2), c->sessions);
        return SL_EBUDGET;
    }
    return 0;
}

int sl__gpu_video_new(const sl__gpu_video_config *cfg, sl__budget *host, sl__gpu_video **out, char *err,
                      size_t errlen) {
    if (!cfg || !host || !out) return SL_EINVAL;
    *out = NULL;
    int rc = check_config(cfg, err, errlen);
    if (rc) return rc;
    const sl__cuda_api *cu = sl__cuda_api_get(err, errlen);
    if (!cu) return SL_EUNSUPPORTED;
    if (!sl__video_hw_available(err, errlen)) return SL_EUNSUPPORTED;
    sl__gpu_video *v = sl__calloc(host, 1, sizeof *v, SL_MEM_OTHER);
    if (!v) return SL_EBUDGET;
    v->cu = cu;
    v->host = host;
    v->cfg = *cfg;
    v->st.sessions = cfg->sessions;
    v->st.session_cap = cfg->session_cap;
    if (pthread_mutex_init(&v->mu, NULL) == 0) {
        if (pthread_cond_init(&v->cv, NULL) == 0) v->sync_ok = 1;
        else pthread_mutex_destroy(&v->mu);
    }
    if (!v->sync_ok) {
        sl__free(host, v);
        return SL_ESYS;
    }
    if ((rc = open_context(v, err, errlen)) || (rc = open_pool(v, err, errlen)) ||
        (rc = open_sessions(v, err, errlen))) {
        sl__gpu_video_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* The host bytes a session's kept decoder is counted for go back. */
static void unkeep(sl__gpu_video *v, session *s) {
    if (!s->kept_bytes) return;
    sl__budget_release(v->host, s->kept_bytes, SL_MEM_DECODER);
    s->kept_bytes = 0;
}

void sl__gpu_video_free(sl__gpu_video *v) {
    if (!v) return;
    const sl__cuda_api *cu = v->cu;
    if (v->ctx) cu->cuCtxSetCurrent(v->ctx);
    for (uint32_t i = 0; v->s && i < v->cfg.sessions; i++) {
        session *s = &v->s[i];
        if (s->stream) cu->cuStreamSynchronize(s->stream);
        sl__video_hw_close(s->hw); /* its decoder and NVDEC's surfaces */
        unkeep(v, s);
        if (s->stream) cu->cuStreamDestroy(s->stream);
    }
    sl__free(v->host, v->s);
    if (v->pool_ok) sl__pool_fini(&v->pool);
    if (v->base) cu->cuMemFree(v->base);
    if (v->ymod) cu->cuModuleUnload(v->ymod);
    sl__gpu_kernels_unload(cu, &v->k);
    if (v->ctx) cu->cuDevicePrimaryCtxRelease(v->dev);
    pthread_cond_destroy(&v->cv);
    pthread_mutex_destroy(&v->mu);
    sl__free(v->host, v);
}

void sl__gpu_video_stats_get(sl__gpu_video *v, sl__gpu_video_stats *out) {
    pthread_mutex_lock(&v->mu);
    *out = v->st;
    out->decoders = out->reused = out->surface_bytes = out->soft_resets = out->flushes = 0;
    for (uint32_t i = 0; i < v->cfg.sessions; i++) {
        sl__video_hw_stats hs;
        sl__video_hw_stats_get(v->s[i].hw, &hs);
        out->decoders += hs.decoders;
        out->reused += hs.reused;
        out->soft_resets += hs.soft_resets;
        out->flushes += hs.flushes;
        out->surface_bytes += hs.surface_bytes;
    }
    pthread_mutex_unlock(&v->mu);
    sl__pool_stats ps;
    sl__pool_stats_get(&v->pool, &ps);
    out->pool_used = ps.used;
    out->pool_peak = ps.peak;
}

/* ---- one clip ------------------------------------------------------------------ */

typedef struct clip {
    sl__gpu_video *v;
    session *s;
    uint64_t block;          /* the clip's pool block: both boxes' layouts, then the resized planes */
    sl__gpu_work wl, wc;     /* luma and chroma boxes (batch.c's layout inside block) */
    uint64_t off_c;          /* where the chroma box's part starts in block */
    uint64_t ys, uv;         /* resized luma (3 planes, plane 0 read), chroma (U, V, spare) */
    sl__gpu_desc descs[2];
    sl__clip_geom g;
    uint64_t dst, frame_bytes;
    uint64_t frames;
    uint64_t sink_ns, syncs; /* the sink's share of the clip's time, its stream waits */
} clip;

static int poison(sl__gpu_video *v, sl_CUresult r, const char *what, char *reason, size_t rlen) {
    atomic_store(&v->poisoned, 1);
    sl__msg(reason, rlen, "CUDA error %s: %s (the GPU video engine stopped)", what, sl__cu_errname(v->cu, r));
    return SL_EIO;
}

static uint32_t blocks(uint32_t n, uint32_t per) { return n ? (n + per - 1) / per : 1; }

/* The sink: frame fr (NVDEC's surface) into clip positions pos[0..n). */
static int gpu_frame(void *ctx, const sl__video_frame *fr, const uint32_t *pos, uint32_t n, char *reason,
                     size_t rlen) {
    clip *c = ctx;
    sl__gpu_video *v = c->v;
    const sl__cuda_api *cu = v->cu;
    const sl__clip_geom *g = &c->g;
    uint64_t t0 = sl__now_ns();
    if (fr->layout != SL__FRAME_NV12) {
        sl__msg(reason, rlen, "for the CPU: a frame not in NVDEC's NV12");
        return SL_EUNSUPPORTED;
    }
    sl__gpu_pack pk = {fr->plane[0], fr->plane[1], c->wl.desc.src, c->wc.desc.src, (uint32_t)fr->linesize[0],
                       (uint32_t)fr->linesize[1], g->x, g->y, g->w, g->h, g->cx, g->cy, g->cw, g->ch};
    void *pargs[] = {&pk};
    sl_CUresult r = cu->cuLaunchKernel(v->pack, blocks(g->w, 32), blocks(g->h, 8), 2, 32, 8, 1, 0, c->s->stream,
                                       pargs, NULL);
    if (r) return poison(v, r, "launching the NV12 kernel", reason, rlen);
    char err[160] = "";
    if (sl__gpu_kernels_run(cu, &v->k, c->s->stream, c->s->desc, c->descs, 2, err, sizeof err)) {
        atomic_store(&v->poisoned, 1);
        sl__msg(reason, rlen, "%s (the GPU video engine stopped)", err);
        return SL_EIO;
    }
    sl__yuv_coefs k;
    sl__yuv_coefs_of(fr->colorspace, fr->full_range, &k);
    uint32_t px = (uint32_t)(c->frame_bytes / 3);
    for (uint32_t i = 0; i < n; i++) {
        sl__gpu_conv cv = {c->ys, c->uv, c->dst + (uint64_t)pos[i] * c->frame_bytes, px, k.cy, k.oy, k.crv, k.cbu,
                           k.cgu, k.cgv};
        void *cargs[] = {&cv};
        if ((r = cu->cuLaunchKernel(v->conv, blocks(px, 256), 1, 1, 256, 1, 1, 0, c->s->stream, cargs, NULL)))
            return poison(v, r, "launching the RGB kernel", reason, rlen);
    }
    /* the surface goes back to NVDEC after this call: read it first */
    r = cu->cuStreamSynchronize(c->s->stream);
    c->syncs++, c->sink_ns += sl__now_ns() - t0;
    if (r) return poison(v, r, "running the clip's kernels", reason, rlen);
    c->frames++;
    return 0;
}

/* The clip's boxes laid out in one block: luma, chroma (each as the image
 * path lays out a sample whose decoded region is its packed box), then
 * the two resized planes' triples. Offsets into the block; *size. */
static int clip_layout(clip *c, const sl__video_info *info, int flip, uint64_t *size) {
    const sl__clip_geom *g = &c->g;
    sl__gpu_work *w[2] = {&c->wl, &c->wc};
    uint64_t part[2], out = (c->frame_bytes + 255) & ~(uint64_t)255;
    for (int i = 0; i < 2; i++) {
        sl__gpu_desc *d = &w[i]->desc;
        uint32_t x = i ? g->cx : g->x, y = i ? g->cy : g->y, bw = i ? g->cw : g->w, bh = i ? g->ch : g->h;
        d->reg_x = x, d->reg_y = y, d->reg_w = bw, d->reg_h = bh, d->flip = flip != 0;
        d->full_w = i ? (info->coded_width + 1) / 2 : info->coded_width;
        d->full_h = i ? (info->coded_height + 1) / 2 : info->coded_height;
        w[i]->dx = x, w[i]->dy = y, w[i]->dw = bw, w[i]->dh = bh;
        sl__gpu_item it = {0, d->full_w, d->full_h, i ? g->bx : g->ax, i ? g->by : g->ay, flip, SL_GPU_HW_NO};
        if (sl__gpu_layout(w[i], &it, &part[i])) return SL_EOVERFLOW;
    }
    c->off_c = part[0];
    c->ys = part[0] + part[1];
    c->uv = c->ys + out;
    *size = c->uv + out;
    return 0;
}

/* Offsets -> addresses in the clip's block; the descriptors to the device. */
static int clip_place(clip *c, char *reason, size_t rlen) {
    c->wl.block = c->block;
    c->wc.block = c->block + c->off_c;
    c->ys += c->block, c->uv += c->block;
    sl__gpu_desc_place(&c->wl, c->ys);
    sl__gpu_desc_place(&c->wc, c->uv);
    c->descs[0] = c->wl.desc, c->descs[1] = c->wc.desc;
    /* pageable source: staged before the call returns */
    sl_CUresult r = c->v->cu->cuMemcpyHtoDAsync(c->s->desc, c->descs, sizeof c->descs, c->s->stream);
    return r ? poison(c->v, r, "copying descriptors", reason, rlen) : 0;
}

/* Wait on cv for up to 10 ms (mu held), so cancel is seen. */
static void nap(sl__gpu_video *v) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += 10000000;
    if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&v->cv, &v->mu, &dl);
}

/* A free session and the clip's pool block, or a reason for the CPU.
 * With wait: waits while another clip holds what is missing. */
static int take(sl__gpu_video *v, clip *c, uint64_t size, const _Atomic int *cancel, int wait, char *reason,
                size_t rlen) {
    int waited = 0, rc = 0;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        uint32_t busy = 0;
        c->s = NULL;
        for (uint32_t i = 0; i < v->cfg.sessions; i++) {
            if (!v->s[i].busy && !c->s) c->s = &v->s[i];
            busy += v->s[i].busy;
        }
        if (c->s && (c->block = sl__pool_alloc(&v->pool, size))) {
            c->s->busy = 1;
            break;
        }
        char b[16];
        if (!wait || (c->s && busy == 0)) { /* nothing to wait for: it never fits */
            if (c->s) sl__msg(reason, rlen, "for the CPU: GPU video pool full (%s needed)", sl__fmt_bytes(size, b, sizeof b));
            else sl__msg(reason, rlen, "for the CPU: no NVDEC session free now");
            rc = SL_EUNSUPPORTED;
            break;
        }
        if (cancel && atomic_load(cancel)) {
            sl__msg(reason, rlen, "video decode cancelled");
            rc = SL_ESTATE;
            break;
        }
        waited = 1;
        nap(v);
    }
    v->st.waits += waited;
    pthread_mutex_unlock(&v->mu);
    return rc;
}

static void give(sl__gpu_video *v, clip *c) {
    pthread_mutex_lock(&v->mu);
    if (c->block) sl__pool_free(&v->pool, c->block);
    c->block = 0;
    if (c->s) c->s->busy = 0;
    pthread_cond_broadcast(&v->cv);
    pthread_mutex_unlock(&v->mu);
}

/* After a clip: count the decoder the session keeps in the host budget,
 * or let it go when the budget has no room for it. */
static void settle_keep(sl__gpu_video *v, session *s, const sl__video_info *info) {
    if (!v->cfg.keep) return;
    uint64_t need = sl__video_hw_keep_bytes(info);
    if (!sl__video_hw_keeping(s->hw)) need = 0;
    if (need == s->kept_bytes) return;
    unkeep(v, s);
    if (!need) return;
    if (sl__budget_try(v->host, need, SL_MEM_DECODER)) sl__video_hw_drop(s->hw);
    else s->kept_bytes = need;
}

int sl__gpu_video_clip(sl__gpu_video *v, const sl__sample_file *f, const sl__video_info *info,
                       const sl__clip_plan *plan, sl__quota *q, const _Atomic int *cancel, int wait, uint64_t dst,
                       char *reason, size_t rlen) {
    clip cl, *c = &cl;
    memset(c, 0, sizeof *c);
    c->v = v, c->dst = dst, c->frame_bytes = (uint64_t)3 * plan->out_w * plan->out_h;
    int rc = 0;
    uint64_t size = 0;
    /* NVDEC's surfaces are checked against the session's cap when the
     * decoder is about to be made (video_hw.c's get_format) */
    if (atomic_load(&v->poisoned)) {
        sl__msg(reason, rlen, "for the CPU: the GPU video engine stopped after a CUDA error");
        rc = SL_EUNSUPPORTED;
    } else if (!sl__video_hw_takes(info, reason, rlen) || sl__clip_geometry(info, plan, &c->g, reason, rlen)) {
        rc = SL_EUNSUPPORTED;
    } else if (clip_layout(c, info, plan->flip, &size)) {
        sl__msg(reason, rlen, "for the CPU: the clip's GPU buffers overflow");
        rc = SL_EUNSUPPORTED;
    }
    uint64_t t0 = sl__now_ns(), t1 = 0, t2 = 0;
    if (!rc) rc = take(v, c, size, cancel, wait, reason, rlen);
    if (!rc) {
        t1 = sl__now_ns();
        sl_CUresult r = v->cu->cuCtxSetCurrent(v->ctx);
        if (r) rc = poison(v, r, "making the context current", reason, rlen);
        if (!rc) rc = clip_place(c, reason, rlen);
        sl__video_sink sink = {c, gpu_frame};
        if (!rc) rc = sl__video_decode_into(f, info, plan, q, cancel, c->s->hw, &sink, reason, rlen);
        t2 = sl__now_ns();
        if (rc == SL_EUNSUPPORTED && atomic_load(&v->poisoned)) rc = SL_EIO; /* the sink's CUDA error, re-worded */
        /* whatever happened, nothing of the clip runs on the stream now */
        if ((r = v->cu->cuStreamSynchronize(c->s->stream)) && !rc) rc = poison(v, r, "finishing the clip", reason, rlen);
        settle_keep(v, c->s, info);
        give(v, c);
    }
    pthread_mutex_lock(&v->mu);
    if (t1) {
        v->st.wait_ns += t1 - t0, v->st.decode_ns += t2 - t1;
        v->st.sink_ns += c->sink_ns, v->st.syncs += c->syncs;
    }
    if (rc == 0) v->st.clips++, v->st.frames += c->frames;
    else if (rc == SL_EUNSUPPORTED) v->st.to_cpu++;
    pthread_mutex_unlock(&v->mu);
    return rc;
}
