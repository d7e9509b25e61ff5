/*
 * The resampler: a row sink that resizes a decoded window straight into a
 * CHW batch slot. Coefficients and fixed-point arithmetic follow Pillow's
 * Resample.c (precompute_coeffs, normalize_coeffs_8bpc, PRECISION_BITS 22)
 * so that results equal Pillow's and torchvision's antialiased bilinear.
 *
 * Ownership: every buffer comes from the sample's quota and is freed by
 * sl__resampler_fini, whatever happened before.
 */
#include <math.h>
#include <string.h>

#include "../core/util.h"
#include "resize.h"

#define PRECISION_BITS 22

static inline double tri(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

uint32_t sl__axis_ksize(double in0, double in1, uint32_t total) {
    double scale = (in1 - in0) / total, fs = scale < 1.0 ? 1.0 : scale;
    return (uint32_t)ceil(fs) * 2 + 1;
}

/* Build one axis at decode scale sc (the box scales with it exactly), for a
 * region [reg0, reg0+regn) of a decoded image of size full. */
static int axis_build(sl__axis *a, const sl__axis_spec *s, double sc, uint32_t full, uint32_t reg0,
                      uint32_t regn, sl__quota *q) {
    double lo = floor(s->lo * sc), hi = ceil(s->hi * sc - 1e-9);
    if (hi > full) hi = full;
    double in0 = s->in0 * sc, in1 = s->in1 * sc;
    if (lo < reg0) lo = reg0;
    if (hi > (double)reg0 + regn) hi = (double)reg0 + regn;
    if (hi <= lo || s->n == 0 || s->total == 0) return SL_EINVAL;
    int64_t in_size = (int64_t)(hi - lo);
    double c0 = in0 - lo;
    double scale = (in1 - in0) / s->total;
    double fs = scale < 1.0 ? 1.0 : scale;
    double support = fs; /* bilinear support 1.0 */
    uint32_t ksize = (uint32_t)ceil(support) * 2 + 1;
    uint64_t nk;
    if (sl__mul(s->n, ksize, &nk)) return SL_EOVERFLOW;
    a->n = s->n;
    a->ksize = ksize;
    a->k = sl__quota_alloc(q, nk * sizeof(int32_t));
    a->min = sl__quota_alloc(q, s->n * sizeof(uint32_t));
    a->cnt = sl__quota_alloc(q, s->n * sizeof(uint32_t));
    double *w = sl__quota_alloc(q, ksize * sizeof(double));
    if (!a->k || !a->min || !a->cnt || !w) {
        sl__quota_free(q, w);
        return SL_EBUDGET;
    }
    double ss = 1.0 / fs;
    for (uint32_t i = 0; i < s->n; i++) {
        double center = c0 + (s->first + i + 0.5) * scale;
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax <= 0) { /* degenerate: nearest pixel */
            xmin = (int64_t)center;
            if (xmin >= in_size) xmin = in_size - 1;
            if (xmin < 0) xmin = 0;
            xmax = 1;
            w[0] = 1.0;
        } else {
            if (xmax > ksize) xmax = ksize;
            double ww = 0.0;
            for (int64_t x = 0; x < xmax; x++) {
                w[x] = tri((x + xmin - center + 0.5) * ss);
                ww += w[x];
            }
            for (int64_t x = 0; x < xmax; x++)
                if (ww != 0.0) w[x] /= ww;
        }
        int32_t *k = a->k + (uint64_t)i * ksize;
        for (uint32_t x = 0; x < ksize; x++) {
            double v = x < xmax ? w[x] : 0.0;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS)) : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        a->min[i] = (uint32_t)(lo - reg0 + xmin);
        a->cnt[i] = (uint32_t)xmax;
    }
    sl__quota_free(q, w);
    return 0;
}

static void axis_free(sl__axis *a, sl__quota *q) {
    sl__quota_free(q, a->k);
    sl__quota_free(q, a->min);
    sl__quota_free(q, a->cnt);
    memset(a, 0, sizeof *a);
}

static int rs_begin(sl__row_sink *sink, const sl__region *r) {
    sl__resampler *rs = sink->ctx;
    double sc = r->scale_num / 8.0;
    int rc;
    rs->C = r->channels;
    rs->pb = r->pixel_bytes ? r->pixel_bytes : r->channels;
    rs->in_w = r->w;
    if (rs->pb < rs->C || rs->pb > 4) return SL_EINVAL;
    if ((rc = axis_build(&rs->x, &rs->spec_x, sc, r->full_w, r->x, r->w, rs->q))) return rc;
    if ((rc = axis_build(&rs->y, &rs->spec_y, sc, r->full_h, r->y, r->h, rs->q))) return rc;
    rs->row_lo = rs->y.min[0];
    rs->row_hi = rs->y.min[0] + rs->y.cnt[0];
    for (uint32_t i = 1; i < rs->y.n; i++) {
        if (rs->y.min[i] < rs->row_lo) rs->row_lo = rs->y.min[i];
        if (rs->y.min[i] + rs->y.cnt[i] > rs->row_hi) rs->row_hi = rs->y.min[i] + rs->y.cnt[i];
    }
    uint64_t line = (uint64_t)rs->x.n * rs->C, n;
    if (sl__mul(line, rs->row_hi - rs->row_lo, &n)) return SL_EOVERFLOW;
    rs->tmp = sl__quota_alloc(rs->q, n);
    rs->acc = sl__quota_alloc(rs->q, (uint64_t)rs->x.n * sizeof(int32_t));
    if (!rs->tmp || !rs->acc) return SL_EBUDGET;
    rs->rows_done = 0;
    return 0;
}

/* Hot loops get an AVX2 build beside the baseline one, chosen at load
 * time (the arithmetic, and so the result, is identical). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) && !defined(SL_NO_CLONES)
#define SL_HOT __attribute__((target_clones("avx2", "default"), optimize("O3")))
#elif defined(__GNUC__) && !defined(__clang__)
#define SL_HOT __attribute__((optimize("O3")))
#else
#define SL_HOT
#endif



/* Horizontal pass of one region row into row r of each channel plane of
 * tmp (planes of rows x n_x). Flipping happens here: output i lands at
 * column n_x-1-i, so the vertical pass runs over contiguous memory. */
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint8_t v4u8 __attribute__((vector_size(4)));

SL_HOT static void hpass(const sl__resampler *rs, const uint8_t *in, uint8_t *tmp, uint64_t plane) {
    const uint32_t C = rs->C, ks = rs->x.ksize, W = rs->x.n, pb = rs->pb;
    const int32_t half = 1 << (PRECISION_BITS - 1);
    if (pb == 4) {
        /* RGBX or RGBA: one 4-lane multiply-add per tap */
        for (uint32_t i = 0; i < W; i++) {
            const int32_t *k = rs->x.k + (uint64_t)i * ks;
            const uint8_t *p = in + (uint64_t)rs->x.min[i] * 4;
            const uint32_t cnt = rs->x.cnt[i];
            const uint32_t xo = rs->flip ? W - 1 - i : i;
            v4i acc = {half, half, half, half};
            for (uint32_t t = 0; t < cnt; t++, p += 4) {
                v4u8 b;
                memcpy(&b, p, 4);
                acc += __builtin_convertvector(b, v4i) * k[t];
            }
            for (uint32_t c = 0; c < C; c++) tmp[c * plane + xo] = clip8(acc[c]);
        }
        return;
    }
    for (uint32_t i = 0; i < W; i++) {
        const int32_t *k = rs->x.k + (uint64_t)i * ks;
        const uint8_t *p = in + (uint64_t)rs->x.min[i] * pb;
        const uint32_t cnt = rs->x.cnt[i];
        const uint32_t xo = rs->flip ? W - 1 - i : i;
        int32_t s0 = half, s1 = half, s2 = half;
        for (uint32_t t = 0; t < cnt; t++, p += 3) {
            s0 += p[0] * k[t];
            s1 += p[1] * k[t];
            s2 += p[2] * k[t];
        }
        tmp[xo] = clip8(s0);
        tmp[plane + xo] = clip8(s1);
        tmp[2 * plane + xo] = clip8(s2);
    }
}

static int rs_rows(sl__row_sink *sink, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    sl__resampler *rs = sink->ctx;
    uint64_t plane = (uint64_t)rs->x.n * (rs->row_hi - rs->row_lo);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ry = y + i;
        if (ry < rs->row_lo || ry >= rs->row_hi) continue;
        hpass(rs, rows[i], rs->tmp + (uint64_t)(ry - rs->row_lo) * rs->x.n, plane);
        rs->rows_done++;
    }
    return 0;
}

/* One output row of one plane: contiguous, vectorizes. */
SL_HOT static void vrow(const uint8_t *src, uint64_t stride, const int32_t *k, uint32_t cnt, int32_t *acc,
                        uint8_t *out, uint32_t W) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (uint32_t x = 0; x < W; x++) acc[x] = half;
    for (uint32_t t = 0; t < cnt; t++) {
        const int32_t kt = k[t];
        const uint8_t *row = src + (uint64_t)t * stride;
        for (uint32_t x = 0; x < W; x++) acc[x] += row[x] * kt;
    }
    for (uint32_t x = 0; x < W; x++) {
        int32_t v = acc[x] >> PRECISION_BITS;
        out[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

int sl__resampler_finish(sl__resampler *rs, uint8_t *dst) {
    if (rs->rows_done != rs->row_hi - rs->row_lo) return SL_ECORRUPT;
    const uint32_t C = rs->C, W = rs->x.n, H = rs->y.n, ks = rs->y.ksize;
    const uint64_t tplane = (uint64_t)W * (rs->row_hi - rs->row_lo), oplane = (uint64_t)W * H;
    for (uint32_t c = 0; c < C; c++)
        for (uint32_t yy = 0; yy < H; yy++)
            vrow(rs->tmp + c * tplane + (uint64_t)(rs->y.min[yy] - rs->row_lo) * W, W, rs->y.k + (uint64_t)yy * ks,
                 rs->y.cnt[yy], rs->acc, dst + c * oplane + (uint64_t)yy * W, W);
    return 0;
}

void sl__resampler_init(sl__resampler *rs, const sl__axis_spec *sx, const sl__axis_spec *sy,
                        uint32_t src_w, uint32_t src_h, int flip, sl__quota *q) {
    memset(rs, 0, sizeof *rs);
    rs->spec_x = *sx;
    rs->spec_y = *sy;
    rs->src_w = src_w;
    rs->src_h = src_h;
    rs->flip = flip;
    rs->q = q;
    rs->sink.begin = rs_begin;
    rs->sink.rows = rs_rows;
    rs->sink.ctx = rs;
}

void sl__resampler_fini(sl__resampler *rs) {
    axis_free(&rs->x, rs->q);
    axis_free(&rs->y, rs->q);
    sl__quota_free(rs->q, rs->tmp);
    sl__quota_free(rs->q, rs->acc);
    rs->tmp = NULL;
    rs->acc = NULL;
}

uint64_t sl__resampler_mem(const sl__axis_spec *sx, const sl__axis_spec *sy, uint32_t rows, uint32_t C) {
    uint64_t kx = sl__axis_ksize(sx->in0, sx->in1, sx->total), ky = sl__axis_ksize(sy->in0, sy->in1, sy->total);
    uint64_t m = 0;
    m += (uint64_t)sx->n * (kx * 4 + 8) + kx * 8 + 64;
    m += (uint64_t)sy->n * (ky * 4 + 8) + ky * 8 + 64;
    m += (uint64_t)sx->n * C * ((uint64_t)rows + 2); /* tmp */
    m += (uint64_t)sx->n * C * 4;                    /* acc */
    return m + 8 * 32;                                /* quota headers */
}
