/*
 * One batch through the GPU engine. See engine.h for the contract.
 *
 * For each sample, in order:
 *   window   the rectangle the resize taps reach, from the plan's axes
 *   route    hardware engines if nvJPEG says they take it (with the window
 *            as region of interest, else the whole image), else the GPU
 *            hybrid backend, else the CPU
 *   block    one pool block for its decoded region, the horizontal pass's
 *            planes and both coefficient tables; none free: the CPU
 * then the hybrid samples one by one, the hardware samples in one batched
 * call (a failed call sends its samples through the hybrid backend one by
 * one, so one bad file costs only itself), and the resize kernels for every
 * sample the GPU decoded, all on the engine's stream.
 *
 * Ownership: a sample's block is held from routing until sl__gpu_wait (or
 * until the sample is handed to the CPU); work[i].block says which.
 */
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "gpu/engine_impl.h"
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
    *it = (sl__gpu_item){pos, info->width, info->height, p->ax, p->ay, p->flip};
    return 0;
}

void sl__gpu_work_release(sl__gpu_engine *e, sl__gpu_work *w) {
    if (w->block) sl__pool_free(&e->dpool, w->block);
    w->block = 0;
}

static void say(char (*reasons)[SL_GPU_REASON], uint32_t i, const char *fmt, const char *arg) {
    if (reasons) snprintf(reasons[i], SL_GPU_REASON, fmt, arg);
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

/* Offsets of a sample's buffers inside its block, in desc's fields (as
 * offsets; made addresses by desc_place), and the block's size. */
static int layout(sl__gpu_work *w, const sl__gpu_item *it, uint64_t *size) {
    sl__gpu_desc *d = &w->desc;
    uint64_t W = it->ax.n, H = it->ay.n, off = 0, part;
    uint64_t ksx = sl__axis_ksize(it->ax.in0, it->ax.in1, it->ax.total, SL_INTERP_BILINEAR);
    uint64_t ksy = sl__axis_ksize(it->ay.in0, it->ay.in1, it->ay.total, SL_INTERP_BILINEAR);
    d->vfirst = (uint32_t)sl__resample_vertical_first(&it->ax, &it->ay);
    uint64_t tmp_w = d->vfirst ? d->reg_w : W, tmp_h = d->vfirst ? H : d->reg_h; /* one pass's planes */
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
    *size = off;
    return 0;
}

/* Offsets -> device addresses in block; src points at the tap window
 * inside the decoded region. */
static void desc_place(sl__gpu_work *w, uint64_t dst) {
    sl__gpu_desc *d = &w->desc;
    uint64_t b = w->block;
    d->pitch = (uint64_t)w->dw * 3;
    d->src = b + d->src + ((uint64_t)(d->reg_y - w->dy) * w->dw + (d->reg_x - w->dx)) * 3;
    d->tmp += b, d->kx += b, d->minx += b, d->cntx += b, d->ky += b, d->miny += b, d->cnty += b;
    d->dst = dst;
}

/* Window, block and descriptor of sample i whose decoded region (dx..) is
 * set: 0, or 1 with a reason (the sample goes to the CPU). */
static int take_block(sl__gpu_engine *e, sl__gpu_work *w, const sl__gpu_item *it, uint64_t dst,
                      char (*reasons)[SL_GPU_REASON], uint32_t i) {
    uint64_t size;
    if (layout(w, it, &size)) {
        say(reasons, i, "for the CPU: %s", "sizes overflow");
        return 1;
    }
    w->block = sl__pool_alloc(&e->dpool, size);
    if (!w->block) {
        char b[16];
        say(reasons, i, "for the CPU: device pool full (%s needed)", sl__fmt_bytes(size, b, sizeof b));
        return 1;
    }
    desc_place(w, dst);
    return 0;
}

/* ---- routing ------------------------------------------------------------------ */

/* Hardware engines: with the window as ROI, else the whole image. */
static int route_hw(sl__gpu_engine *e, uint32_t i, const uint8_t *data, size_t len, sl__gpu_work *w) {
    const sl__cuda_api *cu = e->cu;
    int sup = 1;
    if (cu->nvjpegJpegStreamParseHeader(e->hw, data, len, e->hw_streams[i])) return 0;
    const sl__gpu_desc *d = &w->desc;
    if (!(e->cfg.flags & SL_GPU_NO_ROI) &&
        !cu->nvjpegDecodeParamsSetROI(e->hw_params[i], (int)d->reg_x, (int)d->reg_y, (int)d->reg_w, (int)d->reg_h) &&
        !cu->nvjpegDecodeBatchedSupportedEx(e->hw, e->hw_streams[i], e->hw_params[i], &sup) && sup == 0) {
        w->dx = d->reg_x, w->dy = d->reg_y, w->dw = d->reg_w, w->dh = d->reg_h;
        return 1;
    }
    if (!cu->nvjpegDecodeParamsSetROI(e->hw_params[i], 0, 0, -1, -1) &&
        !cu->nvjpegDecodeBatchedSupportedEx(e->hw, e->hw_streams[i], e->hw_params[i], &sup) && sup == 0) {
        w->dx = 0, w->dy = 0, w->dw = d->full_w, w->dh = d->full_h;
        return 1;
    }
    return 0;
}

/* Route sample i and take its block. 0: GPU; 1: CPU (reason said). */
static int route(sl__gpu_engine *e, uint32_t i, const uint8_t *data, size_t len, const sl__gpu_item *it,
                 uint64_t dst, uint64_t stride, char (*reasons)[SL_GPU_REASON]) {
    sl__gpu_work *w = &e->work[i];
    memset(w, 0, sizeof *w);
    sl__gpu_desc *d = &w->desc;
    uint64_t out;
    if (sl__mul((uint64_t)it->ax.n * it->ay.n, 3, &out) || out > stride || !data || !len) {
        say(reasons, i, "for the CPU: %s", "item larger than the batch stride");
        return 1;
    }
    if (tap_range(&it->ax, it->full_w, &d->reg_x, &d->reg_w) || tap_range(&it->ay, it->full_h, &d->reg_y, &d->reg_h)) {
        say(reasons, i, "for the CPU: %s", "item outside its image");
        return 1;
    }
    d->full_w = it->full_w, d->full_h = it->full_h, d->flip = it->flip != 0;
    uint64_t cap = e->cfg.max_pixels ? e->cfg.max_pixels : SL_GPU_MAX_PIXELS;
    if ((uint64_t)it->full_w * it->full_h > cap) {
        say(reasons, i, "for the CPU: %s", "image over the GPU engine's max_pixels");
        return 1;
    }
    if (e->hw && route_hw(e, i, data, len, w)) w->route = ROUTE_HW;
    else if (e->hyb) {
        w->route = ROUTE_HYBRID; /* support is asked when it is decoded */
        int roi = !(e->cfg.flags & SL_GPU_NO_ROI);
        w->dx = roi ? d->reg_x : 0, w->dy = roi ? d->reg_y : 0;
        w->dw = roi ? d->reg_w : d->full_w, w->dh = roi ? d->reg_h : d->full_h;
    } else {
        say(reasons, i, "for the CPU: %s", "the hardware JPEG decoder refuses this file");
        return 1;
    }
    if (take_block(e, w, it, dst + (uint64_t)it->pos * stride, reasons, i)) {
        w->route = ROUTE_CPU;
        return 1;
    }
    return 0;
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
 * (one pinned buffer). 0, or a reason (the sample goes to the CPU). */
static const char *decode_hybrid(sl__gpu_engine *e, const uint8_t *data, size_t len, const sl__gpu_work *w) {
    const sl__cuda_api *cu = e->cu;
    int sup = 1;
    if (cu->nvjpegJpegStreamParse(e->gh, data, len, 0, 0, e->hyb_stream)) return "nvJPEG cannot parse it";
    if (cu->nvjpegDecodeParamsSetROI(e->hyb_params, (int)w->dx, (int)w->dy, (int)w->dw, (int)w->dh) ||
        cu->nvjpegDecoderJpegSupported(e->hyb, e->hyb_stream, e->hyb_params, &sup) || sup != 0)
        return "no GPU decoder takes this JPEG";
    sl_nvjImage im = out_image(w);
    if (cu->nvjpegDecodeJpegHost(e->gh, e->hyb, e->hyb_state, e->hyb_params, e->hyb_stream) ||
        cu->nvjpegDecodeJpegTransferToDevice(e->gh, e->hyb, e->hyb_state, e->hyb_stream, e->stream) ||
        cu->nvjpegDecodeJpegDevice(e->gh, e->hyb, e->hyb_state, &im, e->stream))
        return "the GPU hybrid decoder failed on it";
    return cu->cuStreamSynchronize(e->stream) ? "CUDA error in the hybrid decode" : NULL;
}

static void run_hybrid(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len, int *status,
                       char (*reasons)[SL_GPU_REASON]) {
    for (uint32_t i = 0; i < n; i++) {
        sl__gpu_work *w = &e->work[i];
        if (w->route != ROUTE_HYBRID) continue;
        const char *why = e->hyb ? decode_hybrid(e, data[i], len[i], w) : "hardware batch decode failed";
        if (why) {
            say(reasons, i, "for the CPU: %s", why);
            w->route = ROUTE_CPU;
            sl__gpu_work_release(e, w);
        } else {
            status[i] = SL_GPU_DONE;
        }
    }
}

/* The hardware samples in one call. On failure they are rerouted through
 * the hybrid backend (returns 1: run_hybrid again). */
static int run_hw(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len, int *status) {
    const sl__cuda_api *cu = e->cu;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        sl__gpu_work *w = &e->work[i];
        if (w->route != ROUTE_HW) continue;
        e->hw_idx[m] = i;
        e->hw_data[m] = data[i];
        e->hw_len[m] = len[i];
        e->hw_out[m] = out_image(w);
        e->hw_batch_params[m] = e->hw_params[i];
        m++;
    }
    if (!m) return 0;
    sl_nvjStatus s = cu->nvjpegDecodeBatchedInitialize(e->hw, e->hw_state, (int)m, 1, SL_NVJ_OUTPUT_RGBI);
    if (!s)
        s = cu->nvjpegDecodeBatchedEx(e->hw, e->hw_state, e->hw_data, e->hw_len, e->hw_out, e->hw_batch_params,
                                      e->stream);
    for (uint32_t j = 0; j < m; j++) {
        sl__gpu_work *w = &e->work[e->hw_idx[j]];
        if (s) w->route = ROUTE_HYBRID;
        else status[e->hw_idx[j]] = SL_GPU_DONE;
    }
    return s != 0;
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
        if (status[i] == SL_GPU_DONE) say(reasons, i, "for the CPU: %s", "CUDA error, GPU engine stopped");
        status[i] = SL_GPU_CPU;
    }
}

static int enter(sl__gpu_engine *e) {
    if (e->poisoned || e->inflight) return SL_ESTATE;
    return e->cu->cuCtxSetCurrent(e->ctx) ? SL_EIO : 0;
}

int sl__gpu_decode_batch(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len,
                         const sl__gpu_item *items, uint64_t dst, uint64_t stride, int *status,
                         char (*reasons)[SL_GPU_REASON]) {
    if (!e || (n && (!data || !len || !items || !status)) || n > e->cfg.max_batch) return SL_EINVAL;
    int rc = enter(e);
    if (rc) return rc;
    uint64_t t0 = sl__now_ns();
    e->cu->cuEventRecord(e->ev0, e->stream);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        status[i] = SL_GPU_CPU;
        if (reasons) reasons[i][0] = 0;
        route(e, i, data[i], len[i], &items[i], dst, stride, reasons);
    }
    run_hybrid(e, n, data, len, status, reasons);
    if (run_hw(e, n, data, len, status)) run_hybrid(e, n, data, len, status, reasons);
    if ((rc = launch(e, n, status, &m, NULL, 0)) == 0 && e->cu->cuEventRecord(e->ev1, e->stream)) rc = SL_EIO;
    uint64_t hw = 0, hyb = 0;
    for (uint32_t i = 0; i < n; i++) {
        hw += status[i] == SL_GPU_DONE && e->work[i].route == ROUTE_HW;
        hyb += status[i] == SL_GPU_DONE && e->work[i].route == ROUTE_HYBRID;
    }
    e->inflight = 1;
    e->inflight_gpu = m;
    e->t_issue_ns = t0;
    e->issue_ns = sl__now_ns() - t0;
    pthread_mutex_lock(&e->stats_mu);
    e->st.samples_hw += hw;
    e->st.samples_hybrid += hyb;
    e->st.samples_cpu += n - hw - hyb;
    e->st.batches++;
    pthread_mutex_unlock(&e->stats_mu);
    if (rc) {
        poison(e, n, status, reasons);
        return SL_EIO;
    }
    return 0;
}

int sl__gpu_wait(sl__gpu_engine *e, char *err, size_t errlen) {
    if (!e || !e->inflight) return 0;
    const sl__cuda_api *cu = e->cu;
    cu->cuCtxSetCurrent(e->ctx);
    sl_CUresult r = cu->cuStreamSynchronize(e->stream);
    float ms = 0;
    if (!r && e->inflight_gpu) cu->cuEventElapsedTime(&ms, e->ev0, e->ev1);
    for (uint32_t i = 0; i < e->cfg.max_batch; i++) sl__gpu_work_release(e, &e->work[i]);
    e->inflight = 0;
    if (r) {
        e->poisoned = 1;
        sl__msg(err, errlen, "GPU batch failed: %s", sl__cu_errname(cu, r));
        return SL_EIO;
    }
    double busy = SL_MAX(e->issue_ns * 1e-9, ms * 1e-3);
    pthread_mutex_lock(&e->stats_mu);
    e->st.busy_s += busy;
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
        if (tap_range(&items[i].ax, items[i].full_w, &d->reg_x, &d->reg_w) ||
            tap_range(&items[i].ay, items[i].full_h, &d->reg_y, &d->reg_h)) {
            rc = SL_EINVAL;
            break;
        }
        d->full_w = items[i].full_w, d->full_h = items[i].full_h, d->flip = items[i].flip != 0;
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
    int wrc = sl__gpu_wait(e, rc ? NULL : err, errlen);
    if (rc == SL_EBUDGET) sl__msg(err, errlen, "device pool full");
    return rc ? rc : wrc;
}
