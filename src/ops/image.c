/* Public single-image API: the loader's decode path, one image at a time. */
#include <string.h>

#include "../base/util.h"
#include "ops.h"

#define DEFAULT_MAX_PIXELS (1ull << 26)
#define DEFAULT_MAX_BYTES (64ull << 20)

int sl_image_probe(const void *data, size_t len, sl_image_info *info) {
    if (!data && len) return SL_EINVAL;
    if (!info) return SL_EINVAL;
    return sl__probe(data, len, info, NULL, 0);
}

void sl_decode_opts_init(sl_decode_opts *o) {
    memset(o, 0, sizeof *o);
    o->preset = SL_TRANSFORM_NONE;
    o->size = 224;
    o->max_pixels = DEFAULT_MAX_PIXELS;
    o->max_bytes = DEFAULT_MAX_BYTES;
}

/* Probe + limits + plan: what both public entry points need. */
static int prepare(const void *data, size_t len, const sl_decode_opts *o, sl_image_info *info, sl__plan *p,
                   char *err, size_t errlen) {
    if (!o || (!data && len)) return SL_EINVAL;
    if (o->preset != SL_TRANSFORM_NONE && o->preset != SL_PRESET_TRAIN && o->preset != SL_PRESET_VAL) {
        sl__msg(err, errlen, "unknown preset %d", o->preset);
        return SL_EINVAL;
    }
    int rc;
    if ((rc = sl__check_bytes(len, o->max_bytes, err, errlen)) || (rc = sl__probe(data, len, info, err, errlen)) ||
        (rc = sl__check_pixels(info, o->max_pixels, err, errlen)))
        return rc;
    sl__plan_params pp = {o->preset, o->size, o->seed, o->epoch, o->index, o->flags};
    return sl__plan_sample(info, &pp, p, err, errlen);
}

int sl_image_output_size(const void *data, size_t len, const sl_decode_opts *o, uint32_t *width,
                         uint32_t *height, uint32_t *channels) {
    sl_image_info info;
    sl__plan p;
    int rc = prepare(data, len, o, &info, &p, NULL, 0);
    if (rc) return rc;
    if (width) *width = p.out_w;
    if (height) *height = p.out_h;
    if (channels) *channels = p.channels;
    return 0;
}

int sl_image_decode(const void *data, size_t len, const sl_decode_opts *o, void *out, size_t out_len,
                    char *errbuf, size_t errlen) {
    sl_image_info info;
    sl__plan p;
    int rc = prepare(data, len, o, &info, &p, errbuf, errlen);
    if (rc) return rc;
    uint64_t need = (uint64_t)p.out_w * p.out_h * p.channels;
    if (!out || out_len < need) {
        sl__msg(errbuf, errlen, "output buffer holds %zu bytes, %llu needed", out_len, (unsigned long long)need);
        return SL_EINVAL;
    }
    sl__decoder *d = sl__decoder_new();
    if (!d) return SL_ENOMEM;
    sl__quota q;
    rc = sl__decoder_quota(d, p.mem + SL_DECODER_SELF, &q, errbuf, errlen);
    if (rc == 0) rc = sl__run(d, data, len, &info, &p, &q, out, errbuf, errlen);
    if (rc == SL_EBUDGET && p.mem < (UINT64_MAX >> 2)) {
        /* the header's bound was short for this libjpeg build: once more, twice the room */
        if ((rc = sl__decoder_quota(d, p.mem * 2 + SL_DECODER_SELF, &q, errbuf, errlen)) == 0)
            rc = sl__run(d, data, len, &info, &p, &q, out, errbuf, errlen);
    }
    sl__decoder_free(d);
    return rc;
}

int sl_image_train_crop(uint32_t width, uint32_t height, uint64_t seed, uint64_t epoch, uint64_t index,
                        uint32_t box[4], int *flip) {
    if (!width || !height || !box) return SL_EINVAL;
    sl__rng r;
    sl__rng_init(&r, seed, epoch, index);
    sl__rrc_box(width, height, &r, box);
    int f = sl__rng_uniform(&r) < 0.5;
    if (flip) *flip = f;
    return 0;
}
