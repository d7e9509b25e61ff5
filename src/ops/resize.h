/* The resampler row sink (see resize.c). Private to ops/. */
#ifndef SL_RESIZE_H
#define SL_RESIZE_H

#include "ops/ops.h"


typedef struct sl__axis {
    uint32_t n, ksize;
    int32_t *k;    /* n x ksize weights, fixed point */
    uint32_t *min; /* first tap, relative to the region */
    uint32_t *cnt; /* taps */
} sl__axis;

typedef struct sl__resampler {
    sl__row_sink sink;
    sl__axis_spec spec_x, spec_y;
    uint32_t src_w, src_h;
    int flip;
    sl__quota *q;
    uint32_t C;
    uint32_t pb;    /* bytes per pixel in pushed rows (3 or 4) */
    sl__axis x, y;
    uint32_t row_lo, row_hi, rows_done; /* region rows the taps reach */
    uint32_t col_lo, col_hi;            /* region columns the taps reach */
    uint8_t *dst;  /* the output, CHW: C x n_y x n_x (owned by the caller) */
    int vfirst;    /* vertical pass first (sl__resample_vertical_first) */
    uint32_t ring, next_out; /* vfirst: accumulators, first output row not written */
    int32_t *vacc; /* vfirst: ring x window columns x pb accumulators */
    uint8_t *vrow; /* vfirst: a finished output row, clipped, before its horizontal pass */
    int stream;    /* window too large to hold: horizontal pass row by row */
    uint32_t *win; /* the window, transposed: win[(x - col_lo) * rows + (y - row_lo)], RGBX */
    uint8_t *tmp;  /* horizontal pass output: C planes of rows x n_x */
    int32_t *acc;
    uint8_t *col;  /* one output column, clipped, RGBX per row */
} sl__resampler;

/* A row sink that resizes into dst (CHW, C x sy->n x sx->n), flipped
 * horizontally when flip. Allocates from q in begin; sl__resampler_fini
 * frees everything, whatever happened. */
void sl__resampler_init(sl__resampler *rs, const sl__axis_spec *sx, const sl__axis_spec *sy,
                        uint32_t src_w, uint32_t src_h, int flip, sl__quota *q, uint8_t *dst);
/* After the last row: the remaining pass into dst. 0, or SL_ECORRUPT when
 * rows the taps need never arrived. */
int sl__resampler_finish(sl__resampler *rs);
/* Does Pillow run this resize's vertical pass first (Pillow >= 13: the
 * height shrinks, by more than twice the pixels the width does)? */
int sl__resample_vertical_first(const sl__axis_spec *sx, const sl__axis_spec *sy);
void sl__resampler_fini(sl__resampler *rs);
/* Upper bound of the quota bytes for a window of cols x rows (decoded at full scale). */
uint64_t sl__resampler_mem(const sl__axis_spec *sx, const sl__axis_spec *sy, uint32_t cols, uint32_t rows,
                           uint32_t C);
/* Taps a filter (SL_INTERP_*) needs per output when [in0, in1) becomes total. */
uint32_t sl__axis_ksize(double in0, double in1, uint32_t total, int filter);

#endif
