/*
 * Video clips on the GPU path, its arithmetic on the CPU (see ops.h):
 * the geometry of a clip's resize, the planes resized, the YUV -> RGB
 * conversion, and a sink that runs them (with the CPU resampler, whose
 * bytes the GPU's resize kernels equal) on frames of the software
 * decoder. src/gpu/video.c's kernels mirror sl__yuv_pack_row and
 * sl__yuv_rgb line for line: given the same decoded frames (NVDEC's and
 * libavcodec's decoders are bit-exact for H.264, HEVC and VP9), the GPU's
 * clip equals this one byte for byte, which the GPU host's tests check;
 * this one stays within the documented difference of the CPU path's
 * swscale clip (docs/video.md), which CI checks.
 *
 * What swscale does for the CPU path (YUV 4:2:0 box -> planar RGB, scaled,
 * SWS_BILINEAR): it scales the luma plane and, on their own, the chroma
 * planes (ceil(w/2) x ceil(h/2) samples of the box, their centres between
 * the luma pixels) to the output size, then converts each output pixel.
 * The GPU path does the same steps: luma and chroma resized with the
 * image path's arithmetic (Pillow's triangle filter), the chroma box being
 * the luma box in chroma samples, then converted. The resize kernels take
 * 3-channel pixels, so the planes go in as (Y, Y, Y) and (U, V, V) rows
 * (the spare channels cost a few kernel microseconds a frame).
 *
 * The conversion: swscale's coefficients of the frame's colour space
 * (sws_getCoefficients' table, the same index rules), 16-bit fixed point,
 * limited range expanded as sws_setColorspaceDetails does (luma x 255/219
 * from 16; full range: chroma x 224/255), one rounding.
 */
#include <string.h>

#include "base/util.h"
#include "ops/ops.h"
#include "ops/resize.h"

/* sws_getCoefficients: {crv, cbu, cgu, cgv} x 65536 by AVColorSpace */
static const int32_t sws_coeffs[11][4] = {
    {117489, 138438, 13975, 34925}, /* 0 (RGB): swscale's first row, BT.709's */
    {117489, 138438, 13975, 34925}, /* BT.709 */
    {104597, 132201, 25675, 53279}, /* unspecified: BT.601 */
    {104597, 132201, 25675, 53279}, /* reserved */
    {104448, 132798, 24759, 53109}, /* FCC */
    {104597, 132201, 25675, 53279}, /* BT.470BG */
    {104597, 132201, 25675, 53279}, /* SMPTE 170M */
    {117579, 136230, 16907, 35559}, /* SMPTE 240M */
    {104597, 132201, 25675, 53279}, /* YCgCo: swscale's default instead */
    {110013, 140363, 12277, 42626}, /* BT.2020 NCL */
    {110013, 140363, 12277, 42626}, /* BT.2020 CL */
};
#define SWS_CS_DEFAULT 5

void sl__yuv_coefs_of(int colorspace, int full_range, sl__yuv_coefs *c) {
    if (colorspace < 0 || colorspace > 10 || colorspace == 8) colorspace = SWS_CS_DEFAULT;
    const int32_t *t = sws_coeffs[colorspace];
    if (full_range) {
        *c = (sl__yuv_coefs){65536, 0, t[0] * 224 / 255, t[1] * 224 / 255, t[2] * 224 / 255, t[3] * 224 / 255};
    } else {
        *c = (sl__yuv_coefs){65536 * 255 / 219, 16, t[0], t[1], t[2], t[3]};
    }
}

int sl__clip_geometry(const sl__video_info *info, const sl__clip_plan *p, sl__clip_geom *g, char *reason,
                      size_t rlen) {
    memset(g, 0, sizeof *g);
    if (info->rotation) {
        sl__msg(reason, rlen, "for the CPU: rotated stream (%d degrees)", info->rotation);
        return SL_EUNSUPPORTED;
    }
    uint32_t W = info->coded_width, H = info->coded_height;
    /* the CPU path's box: origin down to the 4:2:0 chroma grid */
    uint32_t x = p->box[0] & ~1u, y = p->box[1] & ~1u, w = p->box[2], h = p->box[3];
    if (!w || !h || x + w > W || y + h > H || !p->scaled_w || !p->scaled_h || p->win_x + p->out_w > p->scaled_w ||
        p->win_y + p->out_h > p->scaled_h) {
        sl__msg(reason, rlen, "clip box %u,%u %ux%u outside its %ux%u frame", x, y, w, h, W, H);
        return SL_EINVAL;
    }
    /* the box scaled to scaled_w x scaled_h, outputs [win, win + out) of
     * it, taps inside the box (val: the box is the frame); the chroma box
     * is swscale's: ceil(w/2) x ceil(h/2) samples from (x/2, y/2) */
    g->x = x, g->y = y, g->w = w, g->h = h;
    g->cx = x / 2, g->cy = y / 2, g->cw = (w + 1) / 2, g->ch = (h + 1) / 2;
    g->ax = (sl__axis_spec){x, (double)x + w, x, (double)x + w, p->scaled_w, p->win_x, p->out_w, SL_INTERP_BILINEAR};
    g->ay = (sl__axis_spec){y, (double)y + h, y, (double)y + h, p->scaled_h, p->win_y, p->out_h, SL_INTERP_BILINEAR};
    g->bx = (sl__axis_spec){g->cx, (double)g->cx + g->cw, g->cx, (double)g->cx + g->cw, p->scaled_w, p->win_x, p->out_w,
                            SL_INTERP_BILINEAR};
    g->by = (sl__axis_spec){g->cy, (double)g->cy + g->ch, g->cy, (double)g->cy + g->ch, p->scaled_h, p->win_y, p->out_h,
                            SL_INTERP_BILINEAR};
    return 0;
}

void sl__yuv_pack_row(const sl__video_frame *fr, int chroma, uint32_t x0, uint32_t y, uint32_t n, uint8_t *px) {
    const int nv12 = fr->layout == SL__FRAME_NV12;
    if (!chroma) {
        const uint8_t *Y = (const uint8_t *)(uintptr_t)fr->plane[0] + (size_t)y * fr->linesize[0] + x0;
        for (uint32_t k = 0; k < n; k++) px[3 * k] = px[3 * k + 1] = px[3 * k + 2] = Y[k];
        return;
    }
    const uint8_t *u = (const uint8_t *)(uintptr_t)fr->plane[1] + (size_t)y * fr->linesize[1];
    const uint8_t *v = nv12 ? u + 1 : (const uint8_t *)(uintptr_t)fr->plane[2] + (size_t)y * fr->linesize[2];
    const uint32_t step = nv12 ? 2 : 1;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (x0 + k) * step;
        px[3 * k] = u[i];
        px[3 * k + 1] = px[3 * k + 2] = v[i];
    }
}

static inline uint8_t out8(int64_t v) {
    v += (int64_t)1 << 15;
    return (uint8_t)(v < 0 ? 0 : (v >> 16) > 255 ? 255 : v >> 16);
}

void sl__yuv_rgb(const uint8_t *y, const uint8_t *u, const uint8_t *v, size_t n, const sl__yuv_coefs *c, uint8_t *r,
                 uint8_t *g, uint8_t *b) {
    for (size_t i = 0; i < n; i++) {
        int64_t L = (int64_t)c->cy * ((int64_t)y[i] - c->oy), U = (int64_t)u[i] - 128, V = (int64_t)v[i] - 128;
        r[i] = out8(L + (int64_t)c->crv * V);
        g[i] = out8(L - (int64_t)c->cgu * U - (int64_t)c->cgv * V);
        b[i] = out8(L + (int64_t)c->cbu * U);
    }
}

/* ---- the GPU path on the CPU, as a sink ------------------------------------- */

uint64_t sl__clip_ref_mem(const sl__clip_geom *g, uint32_t out_w, uint32_t out_h) {
    uint64_t luma = sl__resampler_mem(&g->ax, &g->ay, g->w, g->h, 3);
    uint64_t chroma = sl__resampler_mem(&g->bx, &g->by, g->cw, g->ch, 3);
    return SL_MAX(luma, chroma) + (uint64_t)g->w * 3 + 6ull * out_w * out_h + 8 * SL_QUOTA_BLOCK_OVERHEAD;
}

/* One plane (luma or the chroma pair) of the box resized into out (three
 * planes of out_w x out_h, the spare channels included). */
static int resize_plane(sl__clip_ref *r, const sl__video_frame *fr, int chroma, uint8_t *row, uint8_t *out) {
    const sl__clip_geom *g = &r->geom;
    const sl__axis_spec *ax = chroma ? &g->bx : &g->ax, *ay = chroma ? &g->by : &g->ay;
    uint32_t x = chroma ? g->cx : g->x, y = chroma ? g->cy : g->y, w = chroma ? g->cw : g->w, h = chroma ? g->ch : g->h;
    uint32_t fw = chroma ? (fr->width + 1) / 2 : fr->width, fh = chroma ? (fr->height + 1) / 2 : fr->height;
    sl__resampler rs;
    sl__resampler_init(&rs, ax, ay, fw, fh, r->flip, r->q, out);
    sl__region reg = {8, fw, fh, x, y, w, h, 3, 3};
    int rc = rs.sink.begin(&rs.sink, &reg);
    for (uint32_t k = 0; rc == 0 && k < h; k++) {
        const uint8_t *rp = row;
        sl__yuv_pack_row(fr, chroma, x, y + k, w, row);
        rc = rs.sink.rows(&rs.sink, &rp, k, 1);
    }
    if (rc == 0) rc = sl__resampler_finish(&rs);
    sl__resampler_fini(&rs);
    return rc;
}

static int ref_frame(void *ctx, const sl__video_frame *fr, const uint32_t *pos, uint32_t n, char *reason,
                     size_t rlen) {
    sl__clip_ref *r = ctx;
    if (fr->layout == SL__FRAME_NV12) { /* host frames only: the software decoder's */
        sl__msg(reason, rlen, "the CPU reference takes frames in host memory");
        return SL_EINVAL;
    }
    const uint64_t plane = r->frame_bytes / 3;
    sl__yuv_coefs c;
    sl__yuv_coefs_of(fr->colorspace, fr->full_range, &c);
    uint8_t *row = sl__quota_alloc(r->q, (size_t)r->geom.w * 3), *ys = sl__quota_alloc(r->q, r->frame_bytes),
            *uv = sl__quota_alloc(r->q, r->frame_bytes);
    int rc = row && ys && uv ? 0 : SL_EBUDGET;
    if (rc == 0) rc = resize_plane(r, fr, 0, row, ys);
    if (rc == 0) rc = resize_plane(r, fr, 1, row, uv);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        uint8_t *o = r->dst + (size_t)pos[i] * r->frame_bytes;
        sl__yuv_rgb(ys, uv, uv + plane, plane, &c, o, o + plane, o + 2 * plane);
    }
    sl__quota_free(r->q, row);
    sl__quota_free(r->q, ys);
    sl__quota_free(r->q, uv);
    if (rc) sl__msg(reason, rlen, "resizing the frame: %s", sl_strerror(rc));
    return rc;
}

int sl__clip_ref_init(sl__clip_ref *r, const sl__video_info *info, const sl__clip_plan *p, sl__quota *q,
                      uint8_t *dst, char *reason, size_t rlen) {
    memset(r, 0, sizeof *r);
    int rc = sl__clip_geometry(info, p, &r->geom, reason, rlen);
    if (rc) return rc;
    r->q = q;
    r->dst = dst;
    r->flip = p->flip;
    r->frame_bytes = (uint64_t)3 * p->out_w * p->out_h;
    r->mem = sl__clip_ref_mem(&r->geom, p->out_w, p->out_h);
    r->sink = (sl__video_sink){r, ref_frame};
    return 0;
}
