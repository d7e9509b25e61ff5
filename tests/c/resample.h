/*
 * The CPU resampler over a whole RGB image in memory (w x h, HWC), as the
 * loader resizes once a sample is decoded: the reference the GPU kernels
 * and the windowed decode are held to.
 */
#ifndef SL_TEST_RESAMPLE_H
#define SL_TEST_RESAMPLE_H

#include <stdint.h>

#include "ops/resize.h"

/* rgb resized by ax, ay (and flipped) into out, the resampler's memory
 * taken from a quota of cap bytes. 0, or the resampler's error. */
static inline int fx_resample(const uint8_t *rgb, uint32_t w, uint32_t h, const sl__axis_spec *ax,
                              const sl__axis_spec *ay, int flip, uint64_t cap, uint8_t *out) {
    sl__quota q = {.cap = cap};
    sl__resampler rs;
    sl__resampler_init(&rs, ax, ay, w, h, flip, &q, out);
    sl__region reg = {8, w, h, 0, 0, w, h, 3, 3};
    int rc = rs.sink.begin(&rs.sink, &reg);
    for (uint32_t y = 0; y < h && !rc; y++) {
        const uint8_t *row = rgb + (uint64_t)y * w * 3;
        rc = rs.sink.rows(&rs.sink, &row, y, 1);
    }
    if (!rc) rc = sl__resampler_finish(&rs);
    sl__resampler_fini(&rs);
    return rc;
}

#endif
