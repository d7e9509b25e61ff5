/* The resampler row sink (see resize.c). Private to ops/. */
#ifndef SL_RESIZE_H
#define SL_RESIZE_H

#include "ops.h"


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
    int stream;    /* window too large to hold: horizontal pass row by row */
    uint32_t *win; /* the window, transposed: win[(x - col_lo) * rows + (y - row_lo)], RGBX */
    uint8_t *tmp;  /* horizontal pass output: C planes of rows x n_x */
    int32_t *acc;
    uint8_t *col;  /* one output column, clipped, RGBX per row */
} sl__resampler;

void sl__resampler_init(sl__resampler *rs, const sl__axis_spec *sx, const sl__axis_spec *sy,
                        uint32_t src_w, uint32_t src_h, int flip, sl__quota *q);
/* Vertical pass into dst (CHW, C x n_y x n_x). */
int sl__resampler_finish(sl__resampler *rs, uint8_t *dst);
void sl__resampler_fini(sl__resampler *rs);
/* Upper bound of the quota bytes for a window of cols x rows (decoded at full scale). */
uint64_t sl__resampler_mem(const sl__axis_spec *sx, const sl__axis_spec *sy, uint32_t cols, uint32_t rows,
                           uint32_t C);
uint32_t sl__axis_ksize(double in0, double in1, uint32_t total);

#endif
