/*
 * The image kind: a JPEG, PNG (or another registered image format) file,
 * decoded only as far as its preset needs and resized straight into the
 * slot, uint8 [C, size, size] (CHW, RGB; RGBA with keep_alpha).
 *
 * Options: "preset" ("train" | "val"), "size", "exif", "keep_alpha";
 * unset ones come from the loader's configuration (cfg.preset, cfg.size,
 * cfg.flags), so the default schema is exactly the loader without fields.
 *
 * Memory: the file is read whole into the worker's scratch; the decoder's
 * need is bounded from the header (sl__plan_sample) and reserved before
 * decoding. A decode that outgrows the bound (another libjpeg build can)
 * is retried once with twice the room before the sample is called bad.
 */
#include <string.h>

#include "../base/util.h"
#include "../ops/ops.h"
#include "field.h"
#include "kind_util.h"

static int image_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    json_t *o = opts;
    static const char *const allowed[] = {"preset", "size", "exif", "keep_alpha", NULL};
    static const char *const presets[] = {"train", "val", NULL};
    int preset = cfg->preset == SL_PRESET_VAL ? 1 : 0;
    int exif = (cfg->flags & SL_FLAG_EXIF) != 0, alpha = (cfg->flags & SL_FLAG_KEEP_ALPHA) != 0;
    uint64_t size = cfg->size;
    int rc;
    if ((rc = sl__opts_only(f, o, allowed, err, errlen)) || (rc = sl__opt_enum(f, o, "preset", presets, &preset, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "size", 1, 16384, &size, err, errlen)) ||
        (rc = sl__opt_bool(f, o, "exif", &exif, err, errlen)) ||
        (rc = sl__opt_bool(f, o, "keep_alpha", &alpha, err, errlen)))
        return rc;
    f->image.preset = preset ? SL_PRESET_VAL : SL_PRESET_TRAIN;
    f->image.size = (uint32_t)size;
    f->image.flags = (exif ? SL_FLAG_EXIF : 0) | (alpha ? SL_FLAG_KEEP_ALPHA : 0);
    f->dtype = SL_DTYPE_UINT8;
    f->ndim = 3;
    f->shape[0] = alpha ? 4 : 3;
    f->shape[1] = f->shape[2] = (int64_t)size;
    return 0;
}

static int image_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    (void)len;
    sl__scratch *s = L->scratch;
    sl__sample_file sf;
    int rc = sl__source_open_file(L->src, L->index, (uint32_t)f->col, L->elem, &sf, reason, rlen);
    if (rc) return rc;
    int lost;
    uint8_t *buf;
    sl_image_info info;
    sl__plan plan;
    if ((rc = sl__check_bytes(sf.size, L->max_bytes, reason, rlen))) goto out;
    if ((rc = sl__scratch_reserve(s, sf.size, sl__scratch_dec_room(s), &lost, reason, rlen))) goto out;
    buf = sl__scratch_buf(s, sf.size);
    if ((rc = sl__sample_read(&sf, buf, reason, rlen))) goto out;
    if ((rc = sl__probe(buf, sf.size, &info, reason, rlen))) goto out;
    if ((rc = sl__check_pixels(&info, L->max_pixels, reason, rlen))) goto out;
    sl__plan_params pp = {f->image.preset, f->image.size, L->seed ^ f->stream, L->epoch, L->index, f->image.flags};
    if ((rc = sl__plan_sample(&info, &pp, &plan, reason, rlen))) goto out;
    if ((rc = sl__scratch_reserve(s, sf.size, plan.mem, &lost, reason, rlen))) goto out;
    buf = sl__scratch_buf(s, sf.size);
    if (lost && (rc = sl__sample_read(&sf, buf, reason, rlen))) goto out;
    sl__quota q = {sl__scratch_dec_room(s), 0, 0, 0};
    rc = sl__run(L->dec, buf, (size_t)sf.size, &info, &plan, &q, dst, reason, rlen);
    if (rc == SL_EBUDGET && plan.mem < (UINT64_MAX >> 2)) {
        /* The decoder needed more than its bound from the header: once
         * more with twice the room, reserved like any growth. */
        if ((rc = sl__scratch_reserve(s, sf.size, plan.mem * 2, &lost, reason, rlen))) goto out;
        buf = sl__scratch_buf(s, sf.size);
        if (lost && (rc = sl__sample_read(&sf, buf, reason, rlen))) goto out;
        sl__quota q2 = {sl__scratch_dec_room(s), 0, 0, plan.mem};
        rc = sl__run(L->dec, buf, (size_t)sf.size, &info, &plan, &q2, dst, reason, rlen);
    }
out:
    sl__sample_close(&sf);
    return rc;
}

const sl__kind sl__kind_image = {"image", SL_KIND_IMAGE, SL__VAL_FILE, image_parse, NULL, image_load, NULL};
