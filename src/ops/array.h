/*
 * Array ops: from an array file's header (format/array.h) to its field's
 * fixed-shape output, reading only the bytes the output needs.
 *
 *   sl__array_out_shape()  once per field, at create: the field's output
 *                          shape and dtype (fixed, so slot sizes are known)
 *   sl__array_plan_sample() per sample, header only: the window (crop), the
 *                          row subset (points), checks against the field's
 *                          shape, the scratch bytes the read will need
 *   sl__array_read()       preads the window's bytes (nothing else) and
 *                          converts them straight into the caller's slot
 *
 * Ops, in this order:
 *  - crop [h, w]: a window at a random position over the axes named H and
 *    W in `layout`; the position draws exactly two numbers from the rng,
 *    y then x (sl__rng_below(H - h + 1), then W - w + 1), so fields of one
 *    crop group given copies of the same rng (same seed, epoch, index,
 *    group) and of the same H x W get the same window: paired data stays
 *    aligned. center_crop [h, w]: the centre window, offset
 *    round_half_even((H - h) / 2) as torchvision's CenterCrop. A crop
 *    larger than the array is an error (no implicit padding).
 *  - points N: axis 0 (the rows) becomes N rows: a uniformly random subset
 *    without replacement of the array's R rows when R > N, kept in the
 *    file's order (sorted: scans keep their ring order and the reads go
 *    forward); all R rows then zero rows when R <= N. The valid row count
 *    min(R, N) is the `<field>_len` value (sl__array_read's *len_out).
 *    Draws from the rng only when R > N.
 *  - pad shape: zero fill at the end of each axis up to this shape (after
 *    crop / points); an axis larger than the pad is an error.
 *  - dtype: cast to an SL_DTYPE_*. Integer to integer wraps modulo 2^bits
 *    and anything to float rounds to nearest, as numpy's astype; to bool
 *    is != 0. Float to integer truncates toward zero like numpy, and where
 *    numpy's result is undefined (NaN, out of range: platform-dependent)
 *    ours saturates (NaN -> 0, below the range -> its minimum, above ->
 *    its maximum). Half floats round to nearest even, from the double.
 * Input byte order (either) and order (C or Fortran) are undone on the
 * way: the output is native-endian, C order, out_shape.
 *
 * The output shape (sl__array_out_shape): the first sample's shape, with
 * H and W replaced by the crop, axis 0 by points, and everything by pad
 * when given. Axes that no op fixes must then be equal in every sample
 * (without pad) or at most the pad (with it): a sample that differs is an
 * error record, never a resize. The dtype: the spec's, or the first
 * sample's (every sample must then have that dtype: no silent cast).
 */
#ifndef SL_OPS_ARRAY_H
#define SL_OPS_ARRAY_H

#include <stdint.h>

#include "format/array.h"
#include "format/decode.h"
#include "ops/ops.h"
#include "source/source.h"

#define SL_ARRAY_CHUNK ((uint64_t)1 << 20) /* the largest read buffer */

typedef struct sl__array_spec {
    char layout[SL_ARRAY_MAX_DIMS + 1]; /* a letter per axis, "HWC", "CHW", "THWC"; "" = none */
    uint64_t crop[2];                   /* h, w of a random window; {0, 0}: none */
    uint64_t center_crop[2];            /* h, w of the centre window; {0, 0}: none */
    uint32_t pad_ndim;                  /* 0: no pad */
    uint64_t pad[SL_ARRAY_MAX_DIMS];
    uint64_t points;                    /* rows of axis 0; 0: none */
    int dtype;                          /* output SL_DTYPE_*; 0: the input's */
} sl__array_spec;

/* A field's output: dtype and shape of one sample (the batch adds an
 * axis in front; a sequence another), and its bytes. */
typedef struct sl__array_shape {
    int dtype;
    uint32_t ndim;
    uint64_t shape[SL_ARRAY_MAX_DIMS];
    uint64_t bytes;
} sl__array_shape;

/* The field's output from the spec and the first sample's header. 0, or
 * SL_EINVAL (an inconsistent spec: layout length, crop without H and W in
 * the layout, crop with points, a pad of another rank...) /
 * SL_EOVERFLOW, with a reason. */
int sl__array_out_shape(const sl__array_spec *spec, const sl__array_info *first, sl__array_shape *out,
                        char *reason, size_t rlen);

/* Per sample: what sl__array_read will do. Fixed size, no pointers. */
typedef struct sl__array_plan {
    uint32_t ndim;
    uint64_t start[SL_ARRAY_MAX_DIMS]; /* window start per axis (0 on a subset axis) */
    uint64_t take[SL_ARRAY_MAX_DIMS];  /* elements taken per axis (<= out shape) */
    sl__array_shape out;               /* the field's output */
    int subset;                        /* points: axis 0 is a random take[0]-subset of the rows */
    sl__rng subset_rng;                /* its randomness, replayed by the read */
    uint64_t rows;                     /* valid rows: the <field>_len value */
    int coalesce;                      /* read covering spans (1) or each run (0) */
    uint64_t scratch;                  /* quota bytes the read needs (0 possible) */
} sl__array_plan;

/* Plan one sample from its header (in) for the field (spec, shape from
 * sl__array_out_shape). rng: the sample's (crop group's) generator; it is
 * advanced by the draws described above. 0, or SL_EINVAL (the sample does
 * not fit the field: rank, dtype, an axis, a crop larger than the array)
 * with a reason naming both shapes. Allocates nothing. */
int sl__array_plan_sample(const sl__array_info *in, const sl__array_spec *spec, const sl__array_shape *field,
                          sl__rng *rng, sl__array_plan *p, char *reason, size_t rlen);

/* Read the planned sample from f (the array's bytes are [f->offset +
 * in->data_offset, + in->data_bytes) of f->fd) into dst, which holds
 * p->out.bytes (it may be any position in a slot, e.g. element i of a
 * sequence: dst + i * p->out.bytes; no alignment needed). Buffers come
 * from scratch (at least p->scratch bytes free) and are given back before
 * returning. *len_out (may be NULL): the valid rows. 0, or SL_EIO (a short
 * or failed read), SL_EBUDGET (scratch too small), SL_EINVAL, with a
 * reason. On failure dst holds garbage. */
int sl__array_read(const sl__sample_file *f, const sl__array_info *in, const sl__array_plan *p,
                   sl__quota *scratch, void *dst, uint64_t *len_out, char *reason, size_t rlen);

/* Convert n elements from src (dtype `from`, native order, packed) to dst
 * (dtype `to`, consecutive elements dst_stride bytes apart), with the
 * rules above. 0, or SL_EINVAL for an unknown dtype. */
int sl__array_convert(int from, int to, const void *src, void *dst, uint64_t n, uint64_t dst_stride);
/* The loop sl__array_convert uses for (from, to), NULL for an unknown
 * dtype: for callers converting many short runs. Cannot fail. */
typedef void (*sl__convert_fn)(const void *src, void *dst, uint64_t n, uint64_t dst_stride);
sl__convert_fn sl__array_converter(int from, int to);

#endif
