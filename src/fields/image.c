/*
 * The image kind: a JPEG, PNG (or another registered image format) file,
 * decoded only as far as its preset needs and resized straight into the
 * slot, uint8 [C, size, size] (CHW, RGB; RGBA with keep_alpha).
 *
 * Options: "preset" ("train" | "val"), "size" (N or [height, width]),
 * "interpolation" ("bilinear" | "bicubic"), "scale" and "ratio" ([min,
 * max], train), "hflip" (probability; 0: never), "crop_pct" or "resize"
 * (val), "exif", "keep_alpha", "fast", "max_scans" (docs/images.md has
 * their torchvision/timm equivalents). Unset ones come from the loader's
 * configuration (cfg.preset, cfg.size, cfg.recipe, cfg.flags,
 * cfg.max_scans), so the default schema is exactly the loader without one.
 *
 * GPU decode: a planned image is first offered to the load's defer hook
 * (the loader's GPU stage), which may take it and decode it elsewhere.
 *
 * Memory: the file is read whole into the worker's scratch (or found in
 * the sample cache: sl__fileval); the decoder's need is bounded from the
 * header (sl__plan_sample), or from the file's bytes where its library is
 * sized by them (WebP lossless: sl__decode_lib_need), and reserved before
 * decoding. A decode that outgrows the bound (another libjpeg build can)
 * is retried once with twice the room before the sample is called bad.
 */
#include <string.h>

#include "base/util.h"
#include "fields/field.h"
#include "fields/kind_util.h"
#include "ops/ops.h"

/* A [a, b] pair of numbers, or absent. */
static int opt_pair(const sl__field *f, json_t *o, const char *key, double *a, double *b, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
        !json_is_number(json_array_get(v, 1))) {
        sl__msg(err, errlen, "field \"%s\": \"%s\" must be a pair of numbers [min, max]", f->name, key);
        return SL_EINVAL;
    }
    *a = json_number_value(json_array_get(v, 0));
    *b = json_number_value(json_array_get(v, 1));
    return 0;
}

/* "size": N or [height, width]. */
static int opt_size(const sl__field *f, json_t *o, uint32_t *size, sl_image_recipe *r, char *err, size_t errlen) {
    json_t *v = json_object_get(o, "size");
    if (!v) return 0;
    if (json_is_array(v)) {
        double h = 0, w = 0;
        int rc = opt_pair(f, o, "size", &h, &w, err, errlen);
        if (rc) return rc;
        if (h != (uint32_t)h || w != (uint32_t)w || h < 1 || w < 1 || h > 16384 || w > 16384) {
            sl__msg(err, errlen, "field \"%s\": \"size\" [height, width] must be whole numbers in 1..16384", f->name);
            return SL_EINVAL;
        }
        r->height = (uint32_t)h, r->width = (uint32_t)w;
        return 0;
    }
    uint64_t n = *size;
    int rc = sl__opt_uint(f, o, "size", 1, 16384, &n, err, errlen);
    *size = (uint32_t)n;
    r->height = r->width = 0;
    return rc;
}

static int opt_number(const sl__field *f, json_t *o, const char *key, double *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) {
        sl__msg(err, errlen, "field \"%s\": \"%s\" must be a number", f->name, key);
        return SL_EINVAL;
    }
    *out = json_number_value(v);
    return 0;
}

int sl__recipe_opts(const sl__field *f, void *opts, const sl_config *cfg, uint32_t default_size, sl__recipe *out,
                    char *err, size_t errlen) {
    json_t *o = opts;
    static const char *const presets[] = {"train", "val", NULL};
    static const char *const interps[] = {"bilinear", "bicubic", NULL};
    /* unset options: the loader's own (so the default schema is the loader without one) */
    sl_image_recipe r;
    if (cfg->recipe) r = *cfg->recipe;
    else sl_image_recipe_init(&r);
    int preset = cfg->preset == SL_PRESET_VAL ? 1 : 0, interp = r.interpolation;
    int exif = (cfg->flags & SL_FLAG_EXIF) != 0, alpha = (cfg->flags & SL_FLAG_KEEP_ALPHA) != 0;
    int fast = (cfg->flags & SL_FLAG_FAST) != 0;
    uint32_t size = default_size ? default_size : cfg->size;
    if (default_size) r.height = r.width = 0;
    uint64_t scans = cfg->max_scans, resize = r.resize;
    double hflip = -2;
    int rc;
    if ((rc = sl__opt_enum(f, o, "preset", presets, &preset, err, errlen)) ||
        (rc = opt_size(f, o, &size, &r, err, errlen)) || (rc = sl__opt_bool(f, o, "exif", &exif, err, errlen)) ||
        (rc = sl__opt_bool(f, o, "keep_alpha", &alpha, err, errlen)) ||
        (rc = sl__opt_bool(f, o, "fast", &fast, err, errlen)) ||
        (rc = sl__opt_enum(f, o, "interpolation", interps, &interp, err, errlen)) ||
        (rc = opt_pair(f, o, "scale", &r.scale_min, &r.scale_max, err, errlen)) ||
        (rc = opt_pair(f, o, "ratio", &r.ratio_min, &r.ratio_max, err, errlen)) ||
        (rc = opt_number(f, o, "hflip", &hflip, err, errlen)) ||
        (rc = opt_number(f, o, "crop_pct", &r.crop_pct, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "resize", 1, 65535, &resize, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "max_scans", 1, 1u << 16, &scans, err, errlen)))
        return rc;
    r.interpolation = interp;
    r.resize = (uint32_t)resize;
    if (hflip != -2) r.hflip = hflip == 0 ? SL_HFLIP_NEVER : hflip; /* in a schema, 0 means never */
    uint32_t flags = (exif ? SL_FLAG_EXIF : 0) | (alpha ? SL_FLAG_KEEP_ALPHA : 0) | (fast ? SL_FLAG_FAST : 0);
    char why[200];
    if ((rc = sl__recipe_make(preset ? SL_PRESET_VAL : SL_PRESET_TRAIN, size, &r, flags, (uint32_t)scans, out, why,
                              sizeof why))) {
        sl__msg(err, errlen, "field \"%s\": %s", f->name, why);
        return rc;
    }
    return 0;
}

static int image_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    static const char *const allowed[] = {"preset", "size", "exif", "keep_alpha", "interpolation", "scale", "ratio",
                                          "hflip", "crop_pct", "resize", "fast", "max_scans", NULL};
    int rc;
    if ((rc = sl__opts_only(f, opts, allowed, err, errlen)) || (rc = sl__recipe_opts(f, opts, cfg, 0, &f->recipe, err, errlen)))
        return rc;
    f->dtype = SL_DTYPE_UINT8;
    f->ndim = 3;
    f->shape[0] = (f->recipe.flags & SL_FLAG_KEEP_ALPHA) ? 4 : 3;
    f->shape[1] = f->recipe.out_h;
    f->shape[2] = f->recipe.out_w;
    return 0;
}

static int image_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    (void)len;
    sl__scratch *s = L->scratch;
    sl__fileval v;
    int rc = sl__fileval_open(L, f, &v, reason, rlen);
    if (rc) return rc;
    int lost;
    const uint8_t *buf;
    sl_image_info info;
    sl__plan plan;
    if ((rc = sl__check_bytes(v.size, L->max_bytes, reason, rlen))) goto out;
    if ((rc = sl__scratch_reserve(s, v.size, sl__scratch_dec_room(s), &lost, reason, rlen))) goto out;
    if ((rc = sl__fileval_read(L, &v, sl__scratch_buf(s, v.size), &buf, reason, rlen))) goto out;
    if ((rc = sl__probe(buf, v.size, &info, reason, rlen))) goto out;
    if ((rc = sl__check_pixels(&info, L->max_pixels, reason, rlen))) goto out;
    sl__plan_params pp = {&f->recipe, L->seed ^ f->stream, L->epoch, L->index, L->cancel};
    if ((rc = sl__plan_sample(&info, &pp, &plan, reason, rlen))) goto out;
    /* a library sized by the file's bytes, not its header (WebP lossless),
     * read with the decoder's room held now, before it is reserved for */
    uint64_t lib;
    if ((rc = sl__decode_lib_need(L->dec, sl__scratch_dec_room(s), buf, (size_t)v.size, &info, &lib, reason, rlen)))
        goto out;
    sl__plan_lib_mem(&info, &plan, lib);
    if (L->defer && L->defer->offer(L->defer, f, buf, (size_t)v.size, &info, &plan)) goto out; /* decoded elsewhere */
    if ((rc = sl__scratch_reserve(s, v.size, plan.mem, &lost, reason, rlen))) goto out;
    if (lost && (rc = sl__fileval_read(L, &v, sl__scratch_buf(s, v.size), &buf, reason, rlen))) goto out;
    sl__quota q;
    if ((rc = sl__decoder_quota(L->dec, sl__scratch_dec_room(s), &q, reason, rlen))) goto out;
    rc = sl__run(L->dec, buf, (size_t)v.size, &info, &plan, &q, dst, reason, rlen);
    if (rc == SL_EBUDGET && plan.mem < (UINT64_MAX >> 2)) {
        /* The decoder needed more than its bound from the header (another
         * libjpeg build can: a process may bind our libjpeg symbols to
         * Pillow's or torchvision's copy; the arena refuses exactly at the
         * bound): once more with twice the room, reserved like any growth. */
        if ((rc = sl__scratch_reserve(s, v.size, plan.mem * 2, &lost, reason, rlen))) goto out;
        if (lost && (rc = sl__fileval_read(L, &v, sl__scratch_buf(s, v.size), &buf, reason, rlen))) goto out;
        if ((rc = sl__decoder_quota(L->dec, sl__scratch_dec_room(s), &q, reason, rlen))) goto out;
        rc = sl__run(L->dec, buf, (size_t)v.size, &info, &plan, &q, dst, reason, rlen);
    }
out:
    sl__fileval_close(L, &v);
    return rc;
}

static int image_admit(sl__load *L, const sl__field *f, uint64_t *need, char *what, size_t wlen) {
    sl__scratch *s = L->scratch;
    sl__sample_file sf;
    if (sl__source_open_file(L->src, L->index, (uint32_t)f->col, L->elem, &sf, NULL, 0)) return 0;
    sl__sample_file head = sf;
    head.size = SL_MIN(sf.size, (uint64_t)s->rbase_cap);
    sl_image_info info;
    int ok = 0;
    if (sf.size > 0 && sf.size <= L->max_bytes && sl__sample_read(&head, s->rbase, NULL, 0) == 0 &&
        sl__probe(s->rbase, (size_t)head.size, &info, NULL, 0) == 0 &&
        sl__check_pixels(&info, L->max_pixels, NULL, 0) == 0) {
        sl__plan_params pp = {&f->recipe, L->seed ^ f->stream, 0, L->index, NULL};
        uint64_t bound = sl__plan_mem_bound(&info, &pp);
        if (bound) {
            *need = sl__scratch_growth(s, sf.size, bound);
            sl__msg(what, wlen, "%ux%u%s", info.width, info.height, info.progressive ? ", progressive" : "");
            ok = 1;
        }
    }
    sl__sample_close(&sf);
    return ok;
}

/* The val preset has no random op: its output is the file's alone. */
static int image_fixed_output(const sl__field *f) { return f->recipe.preset == SL_PRESET_VAL; }

const sl__kind sl__kind_image = {.name = "image", .id = SL_KIND_IMAGE, .value_type = SL__VAL_FILE,
                                 .media = SL__MEDIA_IMAGE, .parse = image_parse, .load = image_load,
                                 .admit = image_admit, .fixed_output = image_fixed_output};
