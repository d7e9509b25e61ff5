/*
 * Fuzz the single-image path end to end on one input: sl_image_probe, then
 * sl_image_output_size + sl_image_decode with each preset (a full decode,
 * NONE, under a 4 Mpx limit so the fuzzer never allocates huge buffers;
 * val; train, flipped and not; recipes: bicubic, non-square, extreme crop
 * ranges, crop_pct, fast). Neither may crash, read outside the input,
 * leak, or write outside the output; every failure must be a negative SL_E*
 * code with a reason; a success must fill exactly the size announced.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define FUZZ_MAX_PIXELS ((uint64_t)4 << 20)
#define FUZZ_MAX_BYTES ((uint64_t)1 << 20)

static void decode_one(const uint8_t *data, size_t size, int preset, uint32_t out_side, uint64_t index,
                       uint32_t flags, const sl_image_recipe *recipe) {
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.recipe = recipe;
    o.preset = preset;
    o.size = out_side;
    o.seed = 1;
    o.index = index;
    o.max_pixels = FUZZ_MAX_PIXELS;
    o.max_bytes = FUZZ_MAX_BYTES;
    o.flags = flags;
    uint32_t w = 0, h = 0, c = 0;
    int rc = sl_image_output_size(data, size, &o, &w, &h, &c);
    if (rc < 0) return;
    if (rc > 0) abort(); /* only 0 or a negative code */
    if (c != 3 && c != 4) abort();
    if ((uint64_t)w * h > FUZZ_MAX_PIXELS && preset == SL_TRANSFORM_NONE) abort();
    uint32_t want_w = recipe && recipe->width ? recipe->width : out_side;
    uint32_t want_h = recipe && recipe->height ? recipe->height : out_side;
    if (preset != SL_TRANSFORM_NONE && (w != want_w || h != want_h)) abort();
    size_t n = (size_t)w * h * c;
    /* one guard byte past the end: the decoder must not touch it */
    uint8_t *out = malloc(n + 1);
    if (!out) return;
    out[n] = 0xA5;
    char why[128];
    why[0] = 0;
    rc = sl_image_decode(data, size, &o, out, n, why, sizeof why);
    if (rc > 0) abort();
    if (rc < 0) {
        if (why[0] == 0 || !memchr(why, 0, sizeof why)) abort(); /* a failure names its reason */
        if (rc < SL_ESYS) abort();
    } else {
        /* touch every output byte so MSan/ASan see uninitialised or
         * out-of-range writes */
        volatile unsigned sum = 0;
        for (size_t i = 0; i < n; i++) sum += out[i];
        (void)sum;
    }
    if (out[n] != 0xA5) abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_image_info info;
    int rc = sl_image_probe(data, size, &info);
    if (rc > 0) abort();
    if (rc == 0) {
        if (info.width == 0 || info.height == 0) abort();
        if (info.format != SL_FORMAT_JPEG && info.format != SL_FORMAT_PNG && info.format != SL_FORMAT_WEBP) abort();
        if (info.channels < 1 || info.channels > 4) abort();
    }
    /* Decoding runs even where probe failed: it must fail the same way. */
    decode_one(data, size, SL_TRANSFORM_NONE, 0, 0, 0, NULL);
    decode_one(data, size, SL_TRANSFORM_NONE, 0, 0, SL_FLAG_KEEP_ALPHA | SL_FLAG_EXIF, NULL);
    decode_one(data, size, SL_PRESET_VAL, 64, 0, 0, NULL);
    decode_one(data, size, SL_PRESET_TRAIN, 32, 0, 0, NULL);
    decode_one(data, size, SL_PRESET_TRAIN, 48, 7, SL_FLAG_KEEP_ALPHA, NULL);
    /* recipes: bicubic, non-square (vertical-first passes), extreme crop
     * ranges, timm's crop_pct, DCT scaling down to the output */
    const sl_image_recipe tall = {.struct_size = sizeof tall, .height = 40, .width = 12, .interpolation = SL_INTERP_BICUBIC, .scale_min = 0.01,
                                  .scale_max = 1.0, .ratio_min = 0.05, .ratio_max = 20.0, .hflip = 1.0};
    const sl_image_recipe timm = {.struct_size = sizeof timm, .height = 24, .width = 36,
                                  .interpolation = SL_INTERP_BICUBIC, .crop_pct = 0.95};
    decode_one(data, size, SL_PRESET_TRAIN, 32, 3, SL_FLAG_FAST, &tall);
    decode_one(data, size, SL_PRESET_VAL, 32, 0, 0, &timm);
    return 0;
}
