/*
 * One batch through the GPU engine. See engine.h for the contract.
 *
 * For each sample, in order:
 *   window   the rectangle the resize taps reach, from the plan's axes
 *   route    hardware engines if nvJPEG says they take it (with the window
 *            as region of interest, else the whole image), else the GPU
 *            hybrid backend, else the CPU: a rule of the sample
 *   block    one pool block for its decoded region, the horizontal pass's
 *            planes and both coefficient tables. Over the per-sample cap:
 *            the CPU (a rule of the sample). No room now: this sample and
 *            every later one are SL_GPU_AGAIN (the caller resubmits them
 *            after the call, when its blocks are free; the first sample of
 *            a call always has the pool to itself but for nvJPEG's buffers)
 * then the hybrid samples one by one, the hardware samples in batched
 * calls (one; a failed call is bisected on the hardware backend,
 * sl__gpu_bisect, so a bad file costs only itself and the others stay on
 * the backend their rule gave them), and the resize kernels for every
 * sample the GPU decoded, all on the engine's stream.
 *
 * Ownership: a sample's block is held from routing until sl__gpu_wait,
 * whatever became of the sample (a failed call may still write it);
 * work[i].block says which.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "gpu/engine_impl.h"
#include "gpu/split.h"
#include "ops/resize.h"

#define ALIGN 256u
#define MAX_SIDE 65535u /* the hardware decoder's and the grid's limit */

int sl__gpu_item_from_plan(const sl__plan *p, const sl_image_info *info, uint32_t pos, sl__gpu_item *it,
                           char *reason, size_t rlen) {
    const char *why = NULL;
    if (info->format != SL_FORMAT_JPEG) why = "not a JPEG";
    else if (info->progressive) why = "progressive JPEG";
    else if (info->channels != 1 && info->channels != 3) why = "CMYK or other 4-component JPEG";
    else if (info->bit_depth != 8) why = "not an 8-bit JPEG";
    else if (p->preset != SL_PRESET_TRAIN && p->preset != SL_PRESET_VAL) why = "no preset (whole image wanted)";
    else if (p->orient != 1) why = "EXIF orientation to apply";
    else if (p->channels != 3) why = "alpha kept (4 channels)";
    else if (p->ax.filter != SL_INTERP_BILINEAR || p->ay.filter != SL_INTERP_BILINEAR)
        why = "bicubic (the GPU kernels resize bilinear only)";
    if (why) {
        sl__msg(reason, rlen, "for the CPU: %s", why);
        return SL_EUNSUPPORTED;
    }
    *it = (sl__gpu_item){pos, info->width, info->height, p->ax, p->ay, p->flip, SL_GPU_HW_ASK};
    return 0;
}

void sl__gpu_work_release(sl__gpu_engine *e, sl__gpu_work *w) {
    if (w->block) sl__pool_free(&e->dpool, w->block);
    w->block = 0;
}

/* reasons[i] = the formatted reason, when there are reasons. */
static void say(char (*reasons)[SL_GPU_REASON], uint32_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char (*reasons)[SL_GPU_REASON], uint32_t i, const char *fmt, ...) {
    if (!reasons) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reasons[i], SL_GPU_REASON, fmt, ap);
    va_end(ap);
}

/* ---- window and layout ------------------------------------------------------ */

/* [r0, r0+rn): the source pixels axis a's taps may reach inside [0, full),
 * as axis_build clamps them. SL_EINVAL for an axis no plan makes. */
static int tap_range(const sl__axis_spec *a, uint32_t full, uint32_t *r0, uint32_t *rn) {
    if (!isfinite(a->lo) || !isfinite(a->hi) || !isfinite(a->in0) || !isfinite(a->in1) || a->in1 < a->in0 ||
        !a->n || !a->total || a->n > 16384 || full > MAX_SIDE)
        return SL_EINVAL;
    double lo = floor(a->lo), hi = ceil(a->hi - 1e-9);
    if (lo < 0) lo = 0;
    if (hi > full) hi = full;
    if (!(hi > lo)) return SL_EINVAL;
    *r0 = (uint32_t)lo;
    *rn = (uint32_t)(hi - lo);
    return 0;
}

int sl__gpu_layout(sl__gpu_work *w, const sl__gpu_item *it, uint64_t *size) {
    sl__gpu_desc *d = &w->desc;
    uint64_t W = it->ax.n, H = it->ay.n, off = 0, part;
    uint64_t ksx = sl__axis_ksize(it->ax.in0, it->ax.in1, it->ax.total, SL_INTERP_BILINEAR);
    uint64_t ksy = sl__axis_ksize(it->ay.in0, it->ay.in1, it->ay.total, SL_INTERP_BILINEAR);
    d->how = sl__resample_vertical_first(&it->ax, &it->ay) ? SL_GPU_VFIRST : 0;
    int vfirst = (d->how & SL_GPU_VFIRST) != 0;
    uint64_t tmp_w = vfirst ? d->reg_w : W, tmp_h = vfirst ? H : d->reg_h; /* one pass's planes */
    uint64_t parts[8][2] = {{(uint64_t)w->dw * 3, w->dh}, {3 * tmp_w, tmp_h}, {W * 4, ksx}, {W, 4}, {W, 4},
                            {H * 4, ksy},                 {H, 4},             {H, 4}};
    uint64_t *fields[8] = {&d->src, &d->tmp, &d->kx, &d->minx, &d->cntx, &d->ky, &d->miny, &d->cnty};
    for (int i = 0; i < 8; i++) {
        if (sl__mul(parts[i][0], parts[i][1], &part) || part > (1ull << 40)) return SL_EOVERFLOW;
        *fields[i] = off;
        off += (part + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
    }
    d->ax = (sl__gpu_axis){it->ax.in0, it->ax.in1, it->ax.lo, it->ax.hi, it->ax.total, it->ax.first, it->ax.n,
                           (uint32_t)ksx};
    d->ay = (sl__gpu_axis){it->ay.in0, it->ay.in1, it->ay.lo, it->ay.hi, it->ay.total, it->ay.first, it->ay.n,
                           (uint32_t)ksy};
    if (sl__gpu_tile_bytes(d) != UINT32_MAX) d->how |= SL_GPU_TILED; /* tmp stays: SLUICE_GPU_RESIZE=passes */
    *size = off;
    return 0;
}

void sl__gpu_desc_place(sl__gpu_work *w, uint64_t dst) {
    sl__gpu_desc *d = &w->desc;
    uint64_t b = w->block;
    d->pitch = (uint64_t)w->dw * 3;
    d->src = b + d->src + ((uint64_t)(d->reg_y - w->dy) * w->dw + (d->reg_x - w->dx)) * 3;
    d->tmp += b, d->kx += b, d->minx += b, d->cntx += b, d->ky += b, d->miny += b, d->cnty += b;
    d->dst = dst;
}

enum { TAKE_OK = 0, TAKE_CPU = 1, TAKE_AGAIN = 2 };

/* Block and descriptor of sample i whose decoded region (dx..) is set:
 * TAKE_OK; TAKE_CPU with a reason (over the per-sample cap; or the pool
 * is full with nothing of this call in it: nvJPEG's own buffers fill it);
 * TAKE_AGAIN (the call's other samples hold the room it needs). */
static int take_block(sl__gpu_engine *e, sl__gpu_work *w, const sl__gpu_item *it, uint64_t dst,
                      char (*reasons)[SL_GPU_REASON], uint32_t i) {
    uint64_t size;
    char b1[16], b2[16];
    if (sl__gpu_layout(w, it, &size)) {
        say(reasons, i, "for the CPU: sizes overflow");
        return TAKE_CPU;
    }
    if (size > e->sample_cap) {
        say(reasons, i, "for the CPU: needs %s of device memory, over the %s a sample may have (a quarter of the pool)",
            sl__fmt_bytes(size, b1, sizeof b1), sl__fmt_bytes(e->sample_cap, b2, sizeof b2));
        return TAKE_CPU;
    }
    if (e->held) { /* beside the call's other samples: leave nvJPEG room to grow its buffers during the call */
        sl__pool_stats ps;
        sl__pool_stats_get(&e->dpool, &ps);
        if (ps.used + size + e->sample_cap / 2 > e->dpool.size) return TAKE_AGAIN;
    }
    w->block = sl__pool_alloc(&e->dpool, size);
    if (!w->block && e->held) return TAKE_AGAIN;
    if (!w->block) {
        sl__pool_stats ps;
        sl__pool_stats_get(&e->dpool, &ps);
        say(reasons, i, "for the CPU: device pool full (%s needed; nvJPEG's buffers hold %s of it)",
            sl__fmt_bytes(size, b1, sizeof b1), sl__fmt_bytes(ps.used, b2, sizeof b2));
        return TAKE_CPU;
    }
    e->held++;
    if (e->cfg.flags & SL_GPU_RESIZE_PASSES) w->desc.how &= ~SL_GPU_TILED;
    sl__gpu_desc_place(w, dst);
    return TAKE_OK;
}

/* ---- routing ------------------------------------------------------------------ */

int sl__gpu_window(const sl__gpu_item *it, sl__gpu_desc *d) {
    if (tap_range(&it->ax, it->full_w, &d->reg_x, &d->reg_w) || tap_range(&it->ay, it->full_h, &d->reg_y, &d->reg_h))
        return SL_EINVAL;
    d->full_w = it->full_w, d->full_h = it->full_h;
    return 0;
}

/* jp's region: the window (SL_GPU_HW_ROI) or the whole image. */
static int set_region(const sl__cuda_api *cu, sl_nvjParams jp, int hw, const sl__gpu_desc *d) {
    return hw == SL_GPU_HW_ROI ? cu->nvjpegDecodeParamsSetROI(jp, (int)d->reg_x, (int)d->reg_y, (int)d->reg_w, (int)d->reg_h)
                               : cu->nvjpegDecodeParamsSetROI(jp, 0, 0, -1, -1);
}

/* Whether the hardware backend takes the sample: with the window d as
 * region of interest (unless the engine decodes whole images), else whole,
 * else not (SL_GPU_HW_*), asked with js and jp (the asking thread's own;
 * jp keeps the region answered). A rule of the sample: whichever thread
 * asks, the same question on the same bytes. */
static int ask_hw(const sl__gpu_engine *e, sl_nvjStream js, sl_nvjParams jp, const uint8_t *data, size_t len,
                  const sl__gpu_desc *d) {
    const sl__cuda_api *cu = e->cu;
    int sup = 1;
    if (cu->nvjpegJpegStreamParseHeader(e->hw, data, len, js)) return SL_GPU_HW_NO;
    if (!(e->cfg.flags & SL_GPU_NO_ROI) && !set_region(cu, jp, SL_GPU_HW_ROI, d) &&
        !cu->nvjpegDecodeBatchedSupportedEx(e->hw, js, jp, &sup) && sup == 0)
        return SL_GPU_HW_ROI;
    if (!set_region(cu, jp, SL_GPU_HW_WHOLE, d) && !cu->nvjpegDecodeBatchedSupportedEx(e->hw, js, jp, &sup) &&
        sup == 0)
        return SL_GPU_HW_WHOLE;
    return SL_GPU_HW_NO;
}

/* The cap on a sample's pixels (a rule of the sample). */
static uint64_t pixel_cap(const sl__gpu_engine *e) { return e->cfg.max_pixels ? e->cfg.max_pixels : SL_GPU_MAX_PIXELS; }

int sl__gpu_ask(sl__gpu_asker *a, const uint8_t *data, size_t len, const sl__gpu_item *it) {
    sl__gpu_desc d;
    if (!a || !data || !len || sl__gpu_window(it, &d) || (uint64_t)it->full_w * it->full_h > pixel_cap(a->e))
        return SL_GPU_HW_ASK; /* the engine's route says why it is the CPU's */
    return ask_hw(a->e, a->js, a->jp, data, len, &d);
}

/* The region w decodes: its window (roi), else the whole image. */
static void decode_region(sl__gpu_work *w, int roi) {
    const sl__gpu_desc *d = &w->desc;
    w->dx = roi ? d->reg_x : 0, w->dy = roi ? d->reg_y : 0;
    w->dw = roi ? d->reg_w : d->full_w, w->dh = roi ? d->reg_h : d->full_h;
}

/* Route sample i and take its block: TAKE_OK (GPU), TAKE_CPU (reason
 * said), TAKE_AGAIN. The hardware's answer: the item's, asked by the
 * thread that staged it, else asked here with the engine's own objects;
 * either way e->hw_params[i] holds the region for the batched call. */
static int route(sl__gpu_engine *e, uint32_t i, const uint8_t *data, size_t len, const sl__gpu_item *it,
                 uint64_t dst, uint64_t stride, char (*reasons)[SL_GPU_REASON]) {
    sl__gpu_work *w = &e->work[i];
    memset(w, 0, sizeof *w);
    sl__gpu_desc *d = &w->desc;
    uint64_t out;
    if (sl__mul((uint64_t)it->ax.n * it->ay.n, 3, &out) || out > stride || !data || !len) {
        say(reasons, i, "for the CPU: item larger than the batch stride");
        return TAKE_CPU;
    }
    if (sl__gpu_window(it, d)) {
        say(reasons, i, "for the CPU: item outside its image");
        return TAKE_CPU;
    }
    d->flip = it->flip != 0;
    if ((uint64_t)it->full_w * it->full_h > pixel_cap(e)) {
        say(reasons, i, "for the CPU: image over the GPU engine's max_pixels");
        return TAKE_CPU;
    }
    int hw = SL_GPU_HW_NO;
    if (e->hw && !e->force_hybrid) {
        hw = it->hw;
        if (hw == SL_GPU_HW_ASK) hw = ask_hw(e, e->hw_streams[i], e->hw_params[i], data, len, d);
        else if (hw != SL_GPU_HW_NO && set_region(e->cu, e->hw_params[i], hw, d)) hw = SL_GPU_HW_NO;
    }
    if (hw == SL_GPU_HW_ROI || hw == SL_GPU_HW_WHOLE) {
        w->route = ROUTE_HW;
        decode_region(w, hw == SL_GPU_HW_ROI);
    } else if (e->hyb) {
        w->route = ROUTE_HYBRID; /* support is asked when it is decoded */
        decode_region(w, !(e->cfg.flags & SL_GPU_NO_ROI));
    } else {
        say(reasons, i, "for the CPU: the hardware JPEG decoder refuses this file");
        return TAKE_CPU;
    }
    int rc = take_block(e, w, it, dst + (uint64_t)it->pos * stride, reasons, i);
    if (rc != TAKE_OK) w->route = ROUTE_CPU;
    return rc;
}

/* ---- decoding ----------------------------------------------------------------- */

static sl_nvjImage out_image(const sl__gpu_work *w) {
    sl_nvjImage im;
    memset(&im, 0, sizeof im);
    im.channel[0] = (unsigned char *)(uintptr_t)w->block; /* the decoded region starts the block */
    im.pitch[0] = (size_t)w->dw * 3;
    return im;
}

/* One image through the GPU hybrid backend, finished before the next
 * (one pinned buffer): SL_GPU_DONE; SL_GPU_CPU with *why (the sample goes
 * to the CPU); SL_GPU_AGAIN (nvJPEG's allocator found no room in the
 * pools: a resource, not the sample, so it is decoded in a later call). */
static int decode_hybrid(sl__gpu_engine *e, const uint8_t *data, size_t len, const sl__gpu_work *w, const char **why) {
    const sl__cuda_api *cu = e->cu;
    int sup = 1;
    sl_nvjStatus s;
    if (cu->nvjpegJpegStreamParse(e->gh, data, len, 0, 0, e->hyb_stream)) {
        *why = "nvJPEG cannot parse it";
        return SL_GPU_CPU;
    }
    if (cu->nvjpegDecodeParamsSetROI(e->hyb_params, (int)w->dx, (int)w->dy, (int)w->dw, (int)w->dh) ||
        cu->nvjpegDecoderJpegSupported(e->hyb, e->hyb_stream, e->hyb_params, &sup) || sup != 0) {
        *why = "no GPU decoder takes this JPEG";
        return SL_GPU_CPU;
    }
    sl_nvjImage im = out_image(w);
    if ((s = cu->nvjpegDecodeJpegHost(e->gh, e->hyb, e->hyb_state, e->hyb_params, e->hyb_stream)) ||
        (s = cu->nvjpegDecodeJpegTransferToDevice(e->gh, e->hyb, e->hyb_state, e->hyb_stream, e->stream)) ||
        (s = cu->nvjpegDecodeJpegDevice(e->gh, e->hyb, e->hyb_state, &im, e->stream))) {
        *why = "the GPU hybrid decoder fails on it";
        return s == SL_NVJ_STATUS_ALLOCATOR_FAILURE ? SL_GPU_AGAIN : SL_GPU_CPU;
    }
    if (cu->cuStreamSynchronize(e->stream)) {
        *why = "CUDA error in the hybrid decode";
        return SL_GPU_CPU;
    }
    return SL_GPU_DONE;
}

static void run_hybrid(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len, int *status,
                       char (*reasons)[SL_GPU_REASON]) {
    for (uint32_t i = 0; i < n; i++) {
        sl__gpu_work *w = &e->work[i];
        if (w->route != ROUTE_HYBRID) continue;
        const char *why = NULL;
        status[i] = decode_hybrid(e, data[i], len[i], w, &why);
        if (status[i] == SL_GPU_CPU) say(reasons, i, "for the CPU: %s", why);
        if (status[i] == SL_GPU_AGAIN) say(reasons, i, "nvJPEG's pools full now: in the next call");
        if (status[i] != SL_GPU_DONE) w->route = ROUTE_CPU; /* its block stays held until sl__gpu_wait */
    }
}

/* ---- the hardware's two modes ------------------------------------------------ */

/* With both hardware handles open (engine_impl.h: nvJPEG's pipelined
 * batched decode and the one without) the calls take the handle the
 * measure picks (split.h, sl__hw_modes). Alone on the GPU the pipeline is
 * faster (one H100: 59 against 73 us a sample), beside a training loop the
 * other (137 against 101, 156 against 79, or even: 112 against 114). Both
 * decode the same bytes (test_gpu): only the speed moves. */

/* Whether the next call takes hw2. */
static int pick_hw2(const sl__gpu_engine *e) {
    if (!e->hw2) return 0;
    return e->force_hw2 || sl__hw_modes_pick(&e->modes);
}

/* After a batch's wait: its hardware seconds s over its n hardware
 * samples. */
static void mode_account(sl__gpu_engine *e, double s, uint64_t n) {
    sl__hw_verdict v;
    if (!e->hw2 || !sl__hw_modes_account(&e->modes, e->call_hw2, s, n, &v)) return;
    pthread_mutex_lock(&e->stats_mu);
    e->st.hw_mode_switches += v.moved;
    e->st.hw_us_pipelined = v.us_piped; /* the window's, a sample */
    e->st.hw_us_unpipelined = v.us_unpiped;
    pthread_mutex_unlock(&e->stats_mu);
}

/* One batched hardware call over the samples idx[0, m) of the batch, on
 * the handle the batch took (call_hw2). */
typedef struct hw_call {
    sl__gpu_engine *e;
    const uint8_t *const *data;
    const size_t *len;
} hw_call;

static int hw_run(void *ctx, const uint32_t *idx, uint32_t m) {
    hw_call *c = ctx;
    sl__gpu_engine *e = c->e;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t i = idx[j];
        e->hw_data[j] = c->data[i];
        e->hw_len[j] = c->len[i];
        e->hw_out[j] = out_image(&e->work[i]);
        e->hw_batch_params[j] = e->hw_params[i];
    }
    sl_nvjHandle h = e->call_hw2 ? e->hw2 : e->hw;
    sl_nvjState st = e->call_hw2 ? e->hw2_state : e->hw_state;
    sl_nvjStatus s = e->cu->nvjpegDecodeBatchedInitialize(h, st, (int)m, 1, SL_NVJ_OUTPUT_RGBI);
    if (!s) s = e->cu->nvjpegDecodeBatchedEx(h, st, e->hw_data, e->hw_len, e->hw_out, e->hw_batch_params, e->stream);
    e->hw_calls++;
    e->hw_failed_calls += s != 0;
    if (s == SL_NVJ_STATUS_ALLOCATOR_FAILURE) return SL_BISECT_LATER; /* the pools, not the samples */
    return s ? SL_BISECT_FAILED : SL_BISECT_OK;
}

/* The hardware samples in batched calls: one, bisected where it fails
 * (sl__gpu_bisect). A sample that fails alone goes to the CPU, whose
 * decoder reports it; one whose call found nvJPEG's pools full is decoded
 * in a later call (SL_GPU_AGAIN); every other one by the hardware. */
static void run_hw(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len, int *status,
                   char (*reasons)[SL_GPU_REASON]) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (e->work[i].route == ROUTE_HW) e->hw_idx[m++] = i;
    if (!m) return;
    hw_call c = {e, data, len};
    sl__gpu_bisect(e->hw_idx, m, hw_run, &c, e->hw_bad);
    for (uint32_t j = 0; j < m; j++) {
        uint32_t i = e->hw_idx[j];
        if (e->hw_bad[j] == SL_BISECT_OK) {
            status[i] = SL_GPU_DONE;
            continue;
        }
        status[i] = e->hw_bad[j] == SL_BISECT_LATER ? SL_GPU_AGAIN : SL_GPU_CPU;
        if (status[i] == SL_GPU_AGAIN) say(reasons, i, "nvJPEG's pools full now: in the next call");
        else say(reasons, i, "for the CPU: the hardware JPEG decoder fails on it");
        e->work[i].route = ROUTE_CPU; /* its block stays held until sl__gpu_wait */
    }
}

/* Stage the descriptors of the samples the GPU decoded and launch the
 * kernels. Counts the samples in *m. */
static int launch(sl__gpu_engine *e, uint32_t n, const int *status, uint32_t *m, char *err, size_t errlen) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (status[i] != SL_GPU_DONE) continue;
        e->pin_desc[k++] = e->work[i].desc;
    }
    *m = k;
    if (!k) return 0;
    sl_CUresult r = e->cu->cuMemcpyHtoDAsync(e->dev_desc, e->pin_desc, (size_t)k * sizeof *e->pin_desc, e->stream);
    if (r) {
        sl__msg(err, errlen, "copying descriptors: %s", sl__cu_errname(e->cu, r));
        return SL_EIO;
    }
    return sl__gpu_kernels_run(e->cu, &e->k, e->stream, e->dev_desc, e->pin_desc, k, err, errlen);
}

static void poison(sl__gpu_engine *e, uint32_t n, int *status, char (*reasons)[SL_GPU_REASON]) {
    e->poisoned = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (status[i] != SL_GPU_CPU) say(reasons, i, "for the CPU: CUDA error, GPU engine stopped");
        status[i] = SL_GPU_CPU;
    }
}

static int enter(sl__gpu_engine *e) {
    if (e->poisoned || e->inflight) return SL_ESTATE;
    return e->cu->cuCtxSetCurrent(e->ctx) ? SL_EIO : 0;
}

/* Route every sample; from the first that must wait for room on, every
 * later one waits too (the call's order is kept). */
static void route_all(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len,
                      const sl__gpu_item *items, uint64_t dst, uint64_t stride, int *status,
                      char (*reasons)[SL_GPU_REASON]) {
    int again = 0;
    e->held = 0;
    for (uint32_t i = 0; i < n; i++) {
        status[i] = SL_GPU_CPU;
        if (reasons) reasons[i][0] = 0;
        if (again) {
            memset(&e->work[i], 0, sizeof e->work[i]);
        } else if (route(e, i, data[i], len[i], &items[i], dst, stride, reasons) == TAKE_AGAIN) {
            again = 1;
        }
        if (again) {
            status[i] = SL_GPU_AGAIN;
            say(reasons, i, "device pool full now: in the next call");
        }
    }
}

int sl__gpu_decode_batch(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len,
                         const sl__gpu_item *items, uint64_t dst, uint64_t stride, int *status,
                         char (*reasons)[SL_GPU_REASON]) {
    if (!e || (n && (!data || !len || !items || !status)) || n > e->cfg.max_batch) return SL_EINVAL;
    int rc = enter(e);
    if (rc) return rc;
    const sl__cuda_api *cu = e->cu;
    uint64_t t0 = sl__now_ns();
    uint32_t m = 0;
    e->hw_calls = e->hw_failed_calls = 0;
    e->call_hw2 = pick_hw2(e);
    cu->cuEventRecord(e->ev0, e->stream);
    route_all(e, n, data, len, items, dst, stride, status, reasons);
    uint64_t t_route = sl__now_ns();
    run_hybrid(e, n, data, len, status, reasons);
    cu->cuEventRecord(e->ev_hyb, e->stream);
    uint64_t t_hyb = sl__now_ns();
    run_hw(e, n, data, len, status, reasons);
    cu->cuEventRecord(e->ev_hw, e->stream);
    uint64_t t_hw = sl__now_ns();
    sl_CUresult r;
    if ((rc = launch(e, n, status, &m, e->fault, sizeof e->fault)) == 0 && (r = cu->cuEventRecord(e->ev1, e->stream))) {
        sl__msg(e->fault, sizeof e->fault, "recording the call's event: %s", sl__cu_errname(cu, r));
        rc = SL_EIO;
    }
    e->ev1_set = rc == 0;
    uint64_t hw = 0, hyb = 0, again = 0;
    for (uint32_t i = 0; i < n; i++) {
        hw += status[i] == SL_GPU_DONE && e->work[i].route == ROUTE_HW;
        hyb += status[i] == SL_GPU_DONE && e->work[i].route == ROUTE_HYBRID;
        again += status[i] == SL_GPU_AGAIN;
    }
    e->inflight = 1;
    e->inflight_gpu = m;
    e->call_hw_ns = t_hw - t_hyb;
    e->call_hw_n = hw;
    e->t_issue_ns = t0;
    uint64_t t_end = sl__now_ns();
    e->issue_ns = t_end - t0;
    pthread_mutex_lock(&e->stats_mu);
    e->st.thread_route_s += (double)(t_route - t0) * 1e-9;
    e->st.thread_hybrid_s += (double)(t_hyb - t_route) * 1e-9;
    e->st.thread_hw_s += (double)(t_hw - t_hyb) * 1e-9;
    e->st.thread_launch_s += (double)(t_end - t_hw) * 1e-9;
    e->st.samples_hw += hw;
    e->st.samples_hybrid += hyb;
    e->st.samples_cpu += n - hw - hyb - again;
    e->st.samples_again += again;
    e->st.hw_calls += e->hw_calls;
    e->st.hw_calls_unpipelined += (e->call_hw2 ? !e->hw_unpipelined : e->hw_unpipelined) ? e->hw_calls : 0;
    e->st.hw_failed_calls += e->hw_failed_calls;
    e->st.batches++;
    pthread_mutex_unlock(&e->stats_mu);
    if (rc) {
        poison(e, n, status, reasons);
        return SL_EIO;
    }
    return 0;
}

/* Milliseconds between two events of the batch in flight (0 when unknown). */
static double elapsed_s(const sl__cuda_api *cu, sl_CUevent a, sl_CUevent b) {
    float ms = 0;
    return cu->cuEventElapsedTime(&ms, a, b) == 0 && ms > 0 ? ms * 1e-3 : 0;
}

int sl__gpu_wait(sl__gpu_engine *e, char *err, size_t errlen) {
    if (!e || !e->inflight) return 0;
    const sl__cuda_api *cu = e->cu;
    cu->cuCtxSetCurrent(e->ctx);
    /* ev1 is the stream's last work: sleep on it (a blocking event) rather than spin */
    uint64_t t0 = sl__now_ns();
    sl_CUresult r = e->ev1_set ? cu->cuEventSynchronize(e->ev1) : cu->cuStreamSynchronize(e->stream);
    double t_wait = (double)(sl__now_ns() - t0) * 1e-9;
    e->ev1_set = 0;
    double t_hyb = 0, t_hw = 0, t_resize = 0;
    if (!r && e->inflight_gpu) {
        t_hyb = elapsed_s(cu, e->ev0, e->ev_hyb);
        t_hw = elapsed_s(cu, e->ev_hyb, e->ev_hw);
        t_resize = elapsed_s(cu, e->ev_hw, e->ev1);
    }
    for (uint32_t i = 0; i < e->cfg.max_batch; i++) sl__gpu_work_release(e, &e->work[i]);
    e->inflight = 0;
    e->held = 0;
    if (r) {
        e->poisoned = 1;
        sl__msg(err, errlen, "GPU batch failed: %s", sl__cu_errname(cu, r));
        return SL_EIO;
    }
    mode_account(e, (double)e->call_hw_ns * 1e-9 + t_wait, e->call_hw_n);
    double busy = SL_MAX(e->issue_ns * 1e-9, t_hyb + t_hw + t_resize);
    pthread_mutex_lock(&e->stats_mu);
    e->st.thread_wait_s += t_wait;
    e->st.busy_s += busy;
    e->st.gpu_hybrid_s += t_hyb;
    e->st.gpu_hw_s += t_hw;
    e->st.gpu_resize_s += t_resize;
    if (e->inflight_gpu && busy > 0) {
        double rate = e->inflight_gpu / busy;
        e->st.rate = e->st.rate > 0 ? 0.8 * e->st.rate + 0.2 * rate : rate;
    }
    pthread_mutex_unlock(&e->stats_mu);
    return 0;
}

/* ---- the resize alone (tests) -------------------------------------------------- */

/* Copy the tap window of an HWC image into sample i's block. */
static int upload_window(sl__gpu_engine *e, const uint8_t *rgb, const sl__gpu_item *it, sl__gpu_work *w) {
    for (uint32_t y = 0; y < w->dh; y++) {
        const uint8_t *row = rgb + (((uint64_t)(w->dy + y) * it->full_w) + w->dx) * 3;
        if (e->cu->cuMemcpyHtoDAsync(w->block + (uint64_t)y * w->dw * 3, row, (size_t)w->dw * 3, e->stream))
            return SL_EIO;
    }
    return 0;
}

int sl__gpu_resize_host(sl__gpu_engine *e, uint32_t n, const uint8_t *const *rgb, const sl__gpu_item *items,
                        uint64_t dst, uint64_t stride, char *err, size_t errlen) {
    if (!e || (n && (!rgb || !items)) || n > e->cfg.max_batch) return SL_EINVAL;
    int rc = enter(e);
    if (rc) return rc;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        sl__gpu_work *w = &e->work[i];
        memset(w, 0, sizeof *w);
        sl__gpu_desc *d = &w->desc;
        if (sl__gpu_window(&items[i], d)) {
            rc = SL_EINVAL;
            break;
        }
        d->flip = items[i].flip != 0;
        w->dx = d->reg_x, w->dy = d->reg_y, w->dw = d->reg_w, w->dh = d->reg_h;
        if (take_block(e, w, &items[i], dst + (uint64_t)items[i].pos * stride, NULL, i)) rc = SL_EBUDGET;
        else if (upload_window(e, rgb[i], &items[i], w)) rc = SL_EIO;
        e->pin_desc[m++] = w->desc;
    }
    if (!rc) {
        if (e->cu->cuMemcpyHtoDAsync(e->dev_desc, e->pin_desc, (size_t)m * sizeof *e->pin_desc, e->stream)) rc = SL_EIO;
        else rc = sl__gpu_kernels_run(e->cu, &e->k, e->stream, e->dev_desc, e->pin_desc, m, err, errlen);
    }
    e->inflight = 1;
    e->inflight_gpu = 0;
    e->issue_ns = 0;
    e->call_hw_ns = e->call_hw_n = 0; /* no hardware call: not in the modes' measure */
    int wrc = sl__gpu_wait(e, rc ? NULL : err, errlen);
    if (rc == SL_EBUDGET) sl__msg(err, errlen, "device pool full");
    return rc ? rc : wrc;
}

/* ---- the first decode ------------------------------------------------------------ */

/* A 32 x 32 baseline 4:2:0 JPEG (quality 50, standard tables): a gradient. */
static const uint8_t tiny_jpeg[] = {
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x10, 0x0b, 0x0c, 0x0e, 0x0c, 0x0a, 0x10,
    0x0e, 0x0d, 0x0e, 0x12, 0x11, 0x10, 0x13, 0x18, 0x28, 0x1a, 0x18, 0x16, 0x16, 0x18, 0x31, 0x23,
    0x25, 0x1d, 0x28, 0x3a, 0x33, 0x3d, 0x3c, 0x39, 0x33, 0x38, 0x37, 0x40, 0x48, 0x5c, 0x4e, 0x40,
    0x44, 0x57, 0x45, 0x37, 0x38, 0x50, 0x6d, 0x51, 0x57, 0x5f, 0x62, 0x67, 0x68, 0x67, 0x3e, 0x4d,
    0x71, 0x79, 0x70, 0x64, 0x78, 0x5c, 0x65, 0x67, 0x63, 0xff, 0xdb, 0x00, 0x43, 0x01, 0x11, 0x12,
    0x12, 0x18, 0x15, 0x18, 0x2f, 0x1a, 0x1a, 0x2f, 0x63, 0x42, 0x38, 0x42, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0xff, 0xc0,
    0x00, 0x11, 0x08, 0x00, 0x20, 0x00, 0x20, 0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11,
    0x01, 0xff, 0xc4, 0x00, 0x1f, 0x00, 0x00, 0x01, 0x05, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
    0x0a, 0x0b, 0xff, 0xc4, 0x00, 0xb5, 0x10, 0x00, 0x02, 0x01, 0x03, 0x03, 0x02, 0x04, 0x03, 0x05,
    0x05, 0x04, 0x04, 0x00, 0x00, 0x01, 0x7d, 0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21,
    0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23,
    0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0, 0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17,
    0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a,
    0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a,
    0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a,
    0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99,
    0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
    0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5,
    0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1,
    0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xff, 0xc4, 0x00, 0x1f, 0x01, 0x00, 0x03,
    0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
    0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0xff, 0xc4, 0x00, 0xb5, 0x11, 0x00,
    0x02, 0x01, 0x02, 0x04, 0x04, 0x03, 0x04, 0x07, 0x05, 0x04, 0x04, 0x00, 0x01, 0x02, 0x77, 0x00,
    0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71, 0x13,
    0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0, 0x15,
    0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26, 0x27,
    0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
    0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88,
    0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6,
    0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4,
    0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe2,
    0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9,
    0xfa, 0xff, 0xda, 0x00, 0x0c, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3f, 0x00, 0xe3,
    0x62, 0xb7, 0xf6, 0xab, 0x71, 0x5b, 0xfb, 0x55, 0xa8, 0xad, 0xfd, 0xaa, 0xdc, 0x56, 0xfe, 0xd4,
    0x26, 0x14, 0x2b, 0x95, 0xa2, 0xb7, 0xf6, 0xab, 0x71, 0x5b, 0xfb, 0x55, 0x98, 0xad, 0xfd, 0xaa,
    0xe4, 0x56, 0xfe, 0xd5, 0xaa, 0x67, 0xb9, 0x42, 0xb9, 0x46, 0x2b, 0x7f, 0x6a, 0xb9, 0x15, 0xbf,
    0xb5, 0x59, 0x8a, 0xdf, 0xda, 0xad, 0xc5, 0x6f, 0xed, 0x5c, 0xa9, 0x9f, 0x0f, 0x42, 0xb9, 0x5a,
    0x2b, 0x7f, 0x6a, 0xb7, 0x15, 0xbf, 0xb5, 0x5a, 0x8a, 0xdf, 0xda, 0xad, 0xc5, 0x6f, 0xed, 0x5a,
    0xa6, 0x7b, 0x94, 0x2b, 0x9f, 0xff, 0xd9};

int sl__gpu_warm_up(sl__gpu_engine *e, char *err, size_t errlen) {
    sl_image_info info = {32, 32, 3, SL_FORMAT_JPEG, 0, 1, 8};
    sl__recipe rcp;
    sl__plan p;
    sl__gpu_item it;
    sl__plan_params pp = {&rcp, 0, 0, 0, NULL};
    if (sl__recipe_make(SL_PRESET_VAL, 16, NULL, 0, 0, &rcp, NULL, 0) || sl__plan_sample(&info, &pp, &p, NULL, 0) ||
        sl__gpu_item_from_plan(&p, &info, 0, &it, NULL, 0)) {
        sl__msg(err, errlen, "the first decode could not be planned");
        return SL_EINVAL;
    }
    uint64_t stride = 3 * 16 * 16, dst = sl__pool_alloc(&e->dpool, stride);
    if (!dst) {
        sl__msg(err, errlen, "the device pool cannot hold the first decode");
        return SL_EBUDGET;
    }
    sl__gpu_stats saved;
    pthread_mutex_lock(&e->stats_mu);
    saved = e->st;
    pthread_mutex_unlock(&e->stats_mu);
    int rc = 0;
    for (int pass = 0; pass < 3 && !rc; pass++) { /* the route every sample takes; the hybrid; the second mode */
        if ((pass == 1 && !(e->hw && e->hyb)) || (pass == 2 && !e->hw2)) continue;
        e->force_hybrid = pass == 1;
        e->force_hw2 = pass == 2;
        const uint8_t *d = tiny_jpeg;
        size_t len = sizeof tiny_jpeg;
        int status;
        if ((rc = sl__gpu_decode_batch(e, 1, &d, &len, &it, dst, stride, &status, NULL)))
            sl__msg(err, errlen, "the first decode failed: %s (%s)", sl_strerror(rc), e->fault);
        else
            rc = sl__gpu_wait(e, err, errlen);
    }
    e->force_hybrid = e->force_hw2 = 0;
    sl__hw_modes_init(&e->modes, e->hw_unpipelined); /* the warm-up is no measure */
    sl__pool_free(&e->dpool, dst);
    pthread_mutex_lock(&e->stats_mu);
    e->st = saved; /* the warm-up is no sample */
    pthread_mutex_unlock(&e->stats_mu);
    return rc ? SL_EIO : 0;
}
