/*
 * The resampler: a row sink that resizes a decoded window straight into a
 * CHW batch slot. Coefficients and fixed-point arithmetic follow Pillow's
 * Resample.c (precompute_coeffs, normalize_coeffs_8bpc, PRECISION_BITS 22,
 * bilinear and bicubic filters) so that results equal Pillow's and
 * torchvision's antialiased bilinear and bicubic.
 *
 * Ownership: every buffer comes from the sample's quota and is freed by
 * sl__resampler_fini, whatever happened before.
 */
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "ops/resize.h"

#define PRECISION_BITS 22
/* Largest window kept transposed; larger ones stream (see rs_begin). */
#define SL_WINDOW_MAX ((uint64_t)4 << 20)

static inline double tri(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's bicubic_filter: Keys' cubic convolution with a = -0.5. */
static inline double cubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* The filter's support at scale 1 (Pillow: bilinear 1.0, bicubic 2.0). */
static inline double filter_support(int filter) { return filter == SL_INTERP_BICUBIC ? 2.0 : 1.0; }

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

uint32_t sl__axis_ksize(double in0, double in1, uint32_t total, int filter) {
    double scale = (in1 - in0) / total, fs = scale < 1.0 ? 1.0 : scale;
    return (uint32_t)ceil(fs * filter_support(filter)) * 2 + 1;
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
    double support = fs * filter_support(s->filter);
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
                double t = (x + xmin - center + 0.5) * ss;
                w[x] = s->filter == SL_INTERP_BICUBIC ? cubic(t) : tri(t);
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

/* ---- vertical pass first --------------------------------------------------
 * Pillow (>= 13) runs the vertical pass first when the height shrinks, by
 * more than twice as many pixels as the width does; the uint8 rounding
 * between the passes makes the order visible, so it is followed here.
 * Rows are accumulated as they arrive: each output row owns an int32
 * accumulator over the window's columns while its taps are arriving
 * (integer sums: the order of the additions does not matter), and once its
 * last tap row is in, it is clipped to uint8 and the horizontal pass writes
 * the output row straight into the slot. Output rows' tap ranges start and
 * end in order, so the open ones are consecutive: a ring of `ring`
 * accumulators holds them, ring = the most that are ever open together. */

int sl__resample_vertical_first(const sl__axis_spec *sx, const sl__axis_spec *sy) {
    double h = sy->in1 - sy->in0, w = sx->in1 - sx->in0;
    return sy->total < h && h - sy->total > 2.0 * (w - sx->total);
}

/* Most output rows whose taps hold one input row at the same time; 0 if
 * the tap ranges do not start and end in order (axis_build makes them
 * so: centres increase and both ends are rounded and clamped alike). */
static uint32_t open_rows_max(const sl__axis *y) {
    uint32_t most = 1, first = 0;
    for (uint32_t i = 1; i < y->n; i++)
        if (y->min[i] < y->min[i - 1] || y->min[i] + y->cnt[i] < y->min[i - 1] + y->cnt[i - 1]) return 0;
    for (uint32_t i = 0; i < y->n; i++) {
        while (y->min[first] + y->cnt[first] <= y->min[i]) first++; /* closed before row i opens */
        most = SL_MAX(most, i - first + 1);
    }
    return most;
}

static int vfirst_begin(sl__resampler *rs, uint64_t X) {
    uint64_t line = X * rs->pb, acc_bytes;
    rs->ring = open_rows_max(&rs->y);
    if (!rs->ring) return SL_EINVAL;
    if (sl__mul(line * sizeof(int32_t), rs->ring, &acc_bytes)) return SL_EOVERFLOW;
    rs->vacc = sl__quota_alloc(rs->q, acc_bytes);
    rs->vrow = sl__quota_alloc(rs->q, line);
    if (!rs->vacc || !rs->vrow) return SL_EBUDGET;
    rs->next_out = 0;
    return 0;
}

/* The horizontal pass of finished output row yy (clipped, in vrow) into
 * the slot. */
static void vfirst_emit(sl__resampler *rs, uint32_t yy) {
    const uint32_t C = rs->C, pb = rs->pb, W = rs->x.n;
    const uint64_t oplane = (uint64_t)W * rs->y.n;
    const int32_t half = 1 << (PRECISION_BITS - 1);
    uint8_t *o = rs->dst + (uint64_t)yy * W;
    for (uint32_t i = 0; i < W; i++) {
        const int32_t *k = rs->x.k + (uint64_t)i * rs->x.ksize;
        const uint8_t *p = rs->vrow + (uint64_t)(rs->x.min[i] - rs->col_lo) * pb;
        int32_t sum[4] = {half, half, half, half};
        for (uint32_t t = 0; t < rs->x.cnt[i]; t++, p += pb)
            for (uint32_t c = 0; c < C; c++) sum[c] += p[c] * k[t];
        const uint32_t xo = rs->flip ? W - 1 - i : i;
        for (uint32_t c = 0; c < C; c++) o[c * oplane + xo] = clip8(sum[c]);
    }
}

SL_HOT static void accumulate(int32_t *acc, const uint8_t *row, int32_t k, uint64_t n, int first) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    if (first)
        for (uint64_t j = 0; j < n; j++) acc[j] = half + row[j] * k;
    else
        for (uint64_t j = 0; j < n; j++) acc[j] += row[j] * k;
}

static void clip_row(const int32_t *acc, uint8_t *out, uint32_t n);

/* Region row ry arrived: add it to every open output row it is a tap of;
 * emit the rows it completes. */
static void vfirst_row(sl__resampler *rs, const uint8_t *row, uint32_t ry) {
    const uint64_t line = (uint64_t)(rs->col_hi - rs->col_lo) * rs->pb;
    const uint8_t *src = row + (uint64_t)rs->col_lo * rs->pb;
    for (uint32_t yy = rs->next_out; yy < rs->y.n && rs->y.min[yy] <= ry; yy++) {
        uint32_t t = ry - rs->y.min[yy];
        if (t >= rs->y.cnt[yy]) continue;
        int32_t *acc = rs->vacc + (uint64_t)(yy % rs->ring) * line;
        accumulate(acc, src, rs->y.k[(uint64_t)yy * rs->y.ksize + t], line, t == 0);
        if (t + 1 == rs->y.cnt[yy]) {
            clip_row(acc, rs->vrow, (uint32_t)line);
            vfirst_emit(rs, yy);
            if (yy == rs->next_out) rs->next_out++;
        }
    }
    while (rs->next_out < rs->y.n && rs->y.min[rs->next_out] + rs->y.cnt[rs->next_out] <= ry) rs->next_out++;
}

static int rs_begin(sl__row_sink *sink, const sl__region *r) {
    sl__resampler *rs = sink->ctx;
    double sc = r->scale_num / 8.0;
    int rc;
    rs->C = r->channels;
    rs->pb = r->pixel_bytes ? r->pixel_bytes : r->channels;
    if (rs->pb < rs->C || rs->pb > 4) return SL_EINVAL;
    if ((rc = axis_build(&rs->x, &rs->spec_x, sc, r->full_w, r->x, r->w, rs->q))) return rc;
    if ((rc = axis_build(&rs->y, &rs->spec_y, sc, r->full_h, r->y, r->h, rs->q))) return rc;
    /* rows and columns any tap reaches (min is non-decreasing) */
    rs->row_lo = rs->y.min[0];
    rs->row_hi = 0;
    for (uint32_t i = 0; i < rs->y.n; i++) rs->row_hi = SL_MAX(rs->row_hi, rs->y.min[i] + rs->y.cnt[i]);
    rs->col_lo = rs->x.min[0];
    rs->col_hi = 0;
    for (uint32_t i = 0; i < rs->x.n; i++) rs->col_hi = SL_MAX(rs->col_hi, rs->x.min[i] + rs->x.cnt[i]);
    uint64_t R = rs->row_hi - rs->row_lo, X = rs->col_hi - rs->col_lo, n1, n2;
    rs->rows_done = 0;
    if (rs->vfirst) return vfirst_begin(rs, X);
    if (sl__mul(X * 4, R, &n1) || sl__mul((uint64_t)rs->x.n * rs->C, R, &n2)) return SL_EOVERFLOW;
    /* Small windows (all JPEG crops after DCT scaling) are kept transposed
     * for the fast horizontal pass; large ones (a big PNG) stream row by
     * row through the plain pass, holding only the output columns. */
    rs->win = n1 <= SL_WINDOW_MAX ? sl__quota_alloc(rs->q, n1) : NULL;
    rs->stream = n1 > SL_WINDOW_MAX;
    rs->tmp = sl__quota_alloc(rs->q, n2);
    rs->acc = sl__quota_alloc(rs->q, SL_MAX(R * 4, (uint64_t)rs->x.n) * sizeof(int32_t));
    rs->col = sl__quota_alloc(rs->q, R * 4);
    if ((!rs->win && !rs->stream) || !rs->tmp || !rs->acc || !rs->col) return SL_EBUDGET;
    return 0;
}

/* Rows arrive top to bottom; the window is kept transposed (column-major,
 * one RGBX/RGBA word per pixel) so that the horizontal pass runs over
 * contiguous memory like the vertical one. */
/* The plain horizontal pass of one row into row r of the planes (stream
 * mode): per output pixel, its taps over the interleaved row. */
static void hpass_row(const sl__resampler *rs, const uint8_t *in, uint32_t r) {
    const uint32_t C = rs->C, pb = rs->pb, W = rs->x.n, R = rs->row_hi - rs->row_lo;
    const uint64_t plane = (uint64_t)W * R;
    const int32_t half = 1 << (PRECISION_BITS - 1);
    uint8_t *o = rs->tmp + (uint64_t)r * W;
    for (uint32_t i = 0; i < W; i++) {
        const int32_t *k = rs->x.k + (uint64_t)i * rs->x.ksize;
        const uint8_t *p = in + (uint64_t)rs->x.min[i] * pb;
        int32_t s[4] = {half, half, half, half};
        for (uint32_t t = 0; t < rs->x.cnt[i]; t++, p += pb)
            for (uint32_t c = 0; c < C; c++) s[c] += p[c] * k[t];
        const uint32_t xo = rs->flip ? W - 1 - i : i;
        for (uint32_t c = 0; c < C; c++) o[c * plane + xo] = clip8(s[c]);
    }
}

static int rs_rows(sl__row_sink *sink, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    sl__resampler *rs = sink->ctx;
    const uint32_t R = rs->row_hi - rs->row_lo, pb = rs->pb;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ry = y + i;
        if (ry < rs->row_lo || ry >= rs->row_hi) continue;
        if (rs->vfirst) {
            vfirst_row(rs, rows[i], ry);
            rs->rows_done++;
            continue;
        }
        if (rs->stream) {
            hpass_row(rs, rows[i], ry - rs->row_lo);
            rs->rows_done++;
            continue;
        }
        const uint8_t *p = rows[i] + (uint64_t)rs->col_lo * pb;
        uint32_t *w = rs->win + (ry - rs->row_lo);
        if (pb == 4) {
            for (uint32_t x = rs->col_lo; x < rs->col_hi; x++, p += 4, w += R) memcpy(w, p, 4);
        } else {
            for (uint32_t x = rs->col_lo; x < rs->col_hi; x++, p += 3, w += R) {
                uint8_t px[4] = {p[0], p[1], p[2], 0};
                memcpy(w, px, 4);
            }
        }
        rs->rows_done++;
    }
    return 0;
}

/* acc[j] = half + sum_t src_t[j] * k[t], j < n: contiguous, vectorizes. */
SL_HOT static void taps(const uint8_t *src, uint64_t stride, const int32_t *k, uint32_t cnt, int32_t *acc,
                        uint32_t n) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (uint32_t j = 0; j < n; j++) acc[j] = half;
    for (uint32_t t = 0; t < cnt; t++) {
        const int32_t kt = k[t];
        const uint8_t *row = src + (uint64_t)t * stride;
        for (uint32_t j = 0; j < n; j++) acc[j] += row[j] * kt;
    }
}

static void clip_row_c(const int32_t *acc, uint8_t *out, uint32_t n) {
    for (uint32_t x = 0; x < n; x++) {
        int32_t v = acc[x] >> PRECISION_BITS;
        out[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 32 at a time: shift, saturate to 16 then to 8 bits (the same clamp to
 * 0..255), and undo the packs' lane interleaving. */
__attribute__((target("avx2"))) static void clip_row_avx2(const int32_t *acc, uint8_t *out, uint32_t n) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    uint32_t x = 0;
    for (; x + 32 <= n; x += 32) {
        __m256i a0 = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(acc + x)), PRECISION_BITS);
        __m256i a1 = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(acc + x + 8)), PRECISION_BITS);
        __m256i a2 = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(acc + x + 16)), PRECISION_BITS);
        __m256i a3 = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(acc + x + 24)), PRECISION_BITS);
        __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(out + x), _mm256_permutevar8x32_epi32(b, order));
    }
    clip_row_c(acc + x, out + x, n - x);
}

static void clip_row(const int32_t *acc, uint8_t *out, uint32_t n) {
    if (__builtin_cpu_supports("avx2")) clip_row_avx2(acc, out, n);
    else clip_row_c(acc, out, n);
}
#else
static void clip_row(const int32_t *acc, uint8_t *out, uint32_t n) { clip_row_c(acc, out, n); }
#endif

int sl__resampler_finish(sl__resampler *rs) {
    const uint32_t R = rs->row_hi - rs->row_lo;
    uint8_t *dst = rs->dst;
    if (rs->rows_done != R) return SL_ECORRUPT;
    if (rs->vfirst) return 0; /* every output row was written as it completed */
    const uint32_t C = rs->C, W = rs->x.n, H = rs->y.n;
    const uint64_t tplane = (uint64_t)W * R, oplane = (uint64_t)W * H;
    /* horizontal: one output column at a time, over the transposed window,
     * into planar tmp (flip applied by where the column lands) */
    for (uint32_t i = 0; i < W && !rs->stream; i++) {
        const uint8_t *src = (const uint8_t *)(rs->win + (uint64_t)(rs->x.min[i] - rs->col_lo) * R);
        taps(src, (uint64_t)R * 4, rs->x.k + (uint64_t)i * rs->x.ksize, rs->x.cnt[i], rs->acc, R * 4);
        const uint32_t xo = rs->flip ? W - 1 - i : i;
        uint8_t *cb = rs->col;
        clip_row(rs->acc, cb, R * 4);
        uint8_t *o0 = rs->tmp + xo, *o1 = o0 + tplane, *o2 = o1 + tplane;
        if (C == 3) {
            for (uint32_t y = 0; y < R; y++, cb += 4) {
                o0[(uint64_t)y * W] = cb[0];
                o1[(uint64_t)y * W] = cb[1];
                o2[(uint64_t)y * W] = cb[2];
            }
        } else {
            uint8_t *o3 = o2 + tplane;
            for (uint32_t y = 0; y < R; y++, cb += 4) {
                o0[(uint64_t)y * W] = cb[0];
                o1[(uint64_t)y * W] = cb[1];
                o2[(uint64_t)y * W] = cb[2];
                o3[(uint64_t)y * W] = cb[3];
            }
        }
    }
    /* vertical: contiguous rows of each plane, straight into the slot */
    for (uint32_t c = 0; c < C; c++)
        for (uint32_t yy = 0; yy < H; yy++) {
            taps(rs->tmp + c * tplane + (uint64_t)(rs->y.min[yy] - rs->row_lo) * W, W,
                 rs->y.k + (uint64_t)yy * rs->y.ksize, rs->y.cnt[yy], rs->acc, W);
            clip_row(rs->acc, dst + c * oplane + (uint64_t)yy * W, W);
        }
    return 0;
}

void sl__resampler_init(sl__resampler *rs, const sl__axis_spec *sx, const sl__axis_spec *sy,
                        uint32_t src_w, uint32_t src_h, int flip, sl__quota *q, uint8_t *dst) {
    memset(rs, 0, sizeof *rs);
    rs->dst = dst;
    rs->vfirst = sl__resample_vertical_first(sx, sy);
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
    sl__quota_free(rs->q, rs->win);
    sl__quota_free(rs->q, rs->col);
    sl__quota_free(rs->q, rs->vacc);
    sl__quota_free(rs->q, rs->vrow);
    rs->vacc = NULL;
    rs->vrow = NULL;
    rs->win = NULL;
    rs->col = NULL;
    rs->tmp = NULL;
    rs->acc = NULL;
}

uint64_t sl__resampler_mem(const sl__axis_spec *sx, const sl__axis_spec *sy, uint32_t cols, uint32_t rows,
                           uint32_t C) {
    uint64_t kx = sl__axis_ksize(sx->in0, sx->in1, sx->total, sx->filter);
    uint64_t ky = sl__axis_ksize(sy->in0, sy->in1, sy->total, sy->filter);
    uint64_t m = 0;
    m += (uint64_t)sx->n * (kx * 4 + 8) + kx * 8 + 64;
    m += (uint64_t)sy->n * (ky * 4 + 8) + ky * 8 + 64;
    uint64_t hfirst = 0, vfirst = 0;
    hfirst += (uint64_t)sx->n * C * ((uint64_t)rows + 2); /* tmp */
    hfirst += SL_MIN(((uint64_t)cols + 2) * ((uint64_t)rows + 2) * 4, SL_WINDOW_MAX); /* transposed window */
    hfirst += SL_MAX(((uint64_t)rows + 2) * 4, (uint64_t)sx->n) * 4; /* acc */
    hfirst += ((uint64_t)rows + 2) * 4;                          /* col */
    if (sl__resample_vertical_first(sx, sy)) {
        /* open output rows: a tap range spans 2 * support * max(1, out/in)
         * output rows (DCT scaling only lowers it), + 2 for rounding */
        double in = sy->in1 - sy->in0, up = sy->total > in ? sy->total / in : 1.0;
        uint64_t ring = (uint64_t)ceil(2.0 * filter_support(sy->filter) * up) + 2;
        vfirst = (SL_MIN(ring, (uint64_t)sy->n) * 4 + 1) * ((uint64_t)cols + 2) * 4; /* vacc, vrow */
    }
    return m + SL_MAX(hfirst, vfirst) + 16 * SL_QUOTA_BLOCK_OVERHEAD; /* quota block headers */
}
