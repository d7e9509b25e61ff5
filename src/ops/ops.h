/*
 * Ops: what happens to a sample between its bytes and its batch slot.
 *
 *   sl__plan()       from the header alone: which window to decode, what
 *                    output, flip; the bytes the whole sample will need
 *   sl__run()        decode that window straight into a resampler that
 *                    writes the output (CHW, flipped) into the caller's slot
 *
 * Resampling is Pillow's/torchvision's antialiased bilinear (a triangle
 * filter widened by the downscale factor; separable, horizontal pass then
 * vertical, 22-bit fixed point, uint8 between passes), so outputs match
 * Resize(antialias=True) on the same pixels.
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include <stdint.h>

#include "../format/decode.h"
#include "sluice.h"

/* Deterministic per-sample randomness: depends only on (seed, epoch,
 * index), never on which worker runs the sample or when. */
typedef struct sl__rng {
    uint64_t s[4];
} sl__rng;
void sl__rng_init(sl__rng *r, uint64_t seed, uint64_t epoch, uint64_t index);
uint64_t sl__rng_next(sl__rng *r);
double sl__rng_uniform(sl__rng *r); /* [0, 1) */
uint64_t sl__rng_below(sl__rng *r, uint64_t n); /* [0, n), unbiased */

/* One axis of a resize: outputs [first, first+n) of a resize of the box
 * [in0, in1) (source pixels) to total outputs, taps limited to [lo, hi). */
typedef struct sl__axis_spec {
    double in0, in1;
    double lo, hi;
    uint32_t total, first, n;
} sl__axis_spec;

typedef struct sl__plan {
    int preset;              /* SL_PRESET_TRAIN, SL_PRESET_VAL, SL_TRANSFORM_NONE */
    sl__decode_req req;      /* window to decode (source pixels) */
    sl__axis_spec ax, ay;    /* resize (presets) */
    uint32_t out_w, out_h, channels;
    int flip;
    int orient;              /* EXIF orientation to apply (1: none) */
    uint32_t box[4];         /* train: the crop (x, y, w, h) */
    uint64_t mem;            /* bytes the sample needs beyond the input bytes */
} sl__plan;

typedef struct sl__plan_params {
    int preset;
    uint32_t size;
    uint64_t seed, epoch, index;
    uint32_t flags;          /* SL_FLAG_EXIF, SL_FLAG_KEEP_ALPHA */
} sl__plan_params;

/* Plan from the header. 0 or SL_EOVERFLOW/SL_EINVAL with a reason. */
int sl__plan_sample(const sl_image_info *info, const sl__plan_params *pp, sl__plan *p, char *reason,
                    size_t rlen);

/* An upper bound of sl__plan_sample()'s mem for this header over every
 * epoch and index (the train crop varies; see bound.c). 0 if the header
 * cannot be planned. */
uint64_t sl__plan_mem_bound(const sl_image_info *info, const sl__plan_params *pp);

/* Decode and transform into dst (presets: CHW out_h x out_w; NONE: HWC).
 * Allocates only from q (which must hold p->mem). */
int sl__run(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
            const sl__plan *p, sl__quota *q, uint8_t *dst, char *reason, size_t rlen);

/* The per-sample limits, checked before anything is allocated: encoded
 * size (from fstat or the buffer's length) and pixels (from the header).
 * 0 or SL_ELIMIT with a reason; a limit of 0 means none. */
int sl__check_bytes(uint64_t bytes, uint64_t max_bytes, char *reason, size_t rlen);
int sl__check_pixels(const sl_image_info *info, uint64_t max_pixels, char *reason, size_t rlen);

/* RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3) box, torchvision's algorithm. */
void sl__rrc_box(uint32_t width, uint32_t height, sl__rng *r, uint32_t box[4]);

#endif
