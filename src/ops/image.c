/* Public single-image API: the loader's decode path, one image at a time. */
#include <stddef.h>
#include <string.h>

#include "base/abi.h"
#include "base/util.h"
#include "ops/ops.h"

#define DEFAULT_MAX_PIXELS (1ull << 26)
#define DEFAULT_MAX_BYTES (64ull << 20)
/* sl__decode_lib_need's scratch (from malloc here): its state and a meta-Huffman image of
 * SL_WEBP_META_MAX, as a loader worker's baseline decoder room holds them */
#define LIB_NEED_ROOM ((uint64_t)1 << 20)

int sl_image_probe_sized(const void *data, size_t len, sl_image_info *info, size_t info_size) {
    if ((!data && len) || !info || !info_size) return SL_EINVAL;
    sl_image_info i;
    memset(&i, 0, sizeof i);
    int rc = sl__probe(data, len, &i, NULL, 0);
    if (!rc) sl__abi_out(info, info_size, &i, sizeof i);
    return rc;
}

void sl_decode_opts_init_sized(sl_decode_opts *o, size_t struct_size) {
    sl_decode_opts d;
    memset(&d, 0, sizeof d);
    d.struct_size = struct_size;
    d.preset = SL_TRANSFORM_NONE;
    d.size = 224;
    d.max_pixels = DEFAULT_MAX_PIXELS;
    d.max_bytes = DEFAULT_MAX_BYTES;
    sl__abi_out(o, struct_size, &d, sizeof d);
}

/* The caller's options over the defaults (newer fields keep defaults),
 * dst->recipe pointing at *recipe, the recipe they ask for. */
static int copy_opts(sl_decode_opts *dst, sl_image_recipe *recipe, const sl_decode_opts *o, char *err,
                     size_t errlen) {
    sl_decode_opts_init(dst);
    int rc = sl__abi_in(dst, sizeof *dst, o, o->struct_size, SL__SIZE_DECODE_OPTS_MIN, "sl_decode_opts",
                        "initialise the options with sl_decode_opts_init", err, errlen);
    if (!rc)
        rc = sl__recipe_import(recipe, o->struct_size, SL__ABI_END(sl_decode_opts, recipe), dst->recipe,
                               dst->reserved_0_1_recipe, "sl_decode_opts.recipe", err, errlen);
    dst->struct_size = sizeof *dst;
    dst->recipe = recipe;
    return rc;
}

/* Probe + limits + plan: what the public entry points need. A limit of 0
 * is the default limit, as in sl_config (never "no limit"). */
static int prepare(const void *data, size_t len, const sl_decode_opts *opts, sl_image_info *info, sl__plan *p,
                   char *err, size_t errlen) {
    if (!opts || (!data && len)) return SL_EINVAL;
    sl_decode_opts oc, *o = &oc;
    sl_image_recipe r;
    sl__recipe recipe;
    int rc = copy_opts(&oc, &r, opts, err, errlen);
    if (rc) return rc;
    uint64_t max_bytes = o->max_bytes ? o->max_bytes : DEFAULT_MAX_BYTES;
    uint64_t max_pixels = o->max_pixels ? o->max_pixels : DEFAULT_MAX_PIXELS;
    if ((rc = sl__recipe_from_opts(o, &recipe, err, errlen)) || (rc = sl__check_bytes(len, max_bytes, err, errlen)) ||
        (rc = sl__probe(data, len, info, err, errlen)) || (rc = sl__check_pixels(info, max_pixels, err, errlen)))
        return rc;
    sl__plan_params pp = {&recipe, o->seed ^ sl__rng_stream(o->crop_group), o->epoch, o->index, NULL};
    uint64_t lib = 0;
    if ((rc = sl__plan_sample(info, &pp, p, err, errlen)) ||
        (rc = sl__decode_lib_need(NULL, LIB_NEED_ROOM, data, len, info, &lib, err, errlen)))
        return rc;
    sl__plan_lib_mem(info, p, lib);
    return 0;
}

int sl_image_check(const void *data, size_t len, const sl_decode_opts *o, uint32_t *width, uint32_t *height,
                   uint32_t *channels, char *errbuf, size_t errlen) {
    sl_image_info info;
    sl__plan p;
    int rc = prepare(data, len, o, &info, &p, errbuf, errlen);
    if (rc) return rc;
    if (width) *width = p.out_w;
    if (height) *height = p.out_h;
    if (channels) *channels = p.channels;
    return 0;
}

int sl_image_output_size(const void *data, size_t len, const sl_decode_opts *o, uint32_t *width,
                         uint32_t *height, uint32_t *channels) {
    return sl_image_check(data, len, o, width, height, channels, NULL, 0);
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
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_TRAIN;
    o.seed = seed, o.epoch = epoch, o.index = index;
    return sl_image_recipe_crop(width, height, &o, box, flip);
}

int sl_image_recipe_crop(uint32_t width, uint32_t height, const sl_decode_opts *opts, uint32_t box[4], int *flip) {
    if (!width || !height || !box || !opts) return SL_EINVAL;
    sl_decode_opts oc, *o = &oc;
    sl_image_recipe in;
    sl__recipe recipe;
    int rc = copy_opts(&oc, &in, opts, NULL, 0);
    if (!rc)
        rc = sl__recipe_make(SL_PRESET_TRAIN, o->size ? o->size : 1, o->recipe, o->flags, o->max_scans, &recipe, NULL,
                             0);
    if (rc) return rc;
    sl__rng r;
    sl__rng_init(&r, o->seed ^ sl__rng_stream(o->crop_group), o->epoch, o->index);
    sl__train_box(&recipe, width, height, &r, box, flip);
    return 0;
}
