/*
 * Recipes: the options that say how a decoded image becomes its output,
 * resolved once (defaults filled in, every value checked), and the train
 * preset's random box.
 *
 * Defaults are the classic presets, so an all-zero sl_image_recipe gives
 * today's output byte for byte:
 *   train  RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) +
 *          RandomHorizontalFlip(0.5), bilinear
 *   val    Resize(size * 256 / 224) + CenterCrop(size), bilinear
 * Options and their torchvision / timm equivalents: docs/images.md.
 */
#include <math.h>
#include <string.h>

#include "base/abi.h"
#include "base/util.h"
#include "ops/ops.h"

#define SL_MAX_SIDE 16384u     /* output side limit (as cfg.size) */
#define SL_DEFAULT_MAX_SCANS 64u

static int bad(char *reason, size_t rlen, const char *what, double v, const char *range) {
    sl__msg(reason, rlen, "%s %g is out of range %s", what, v, range);
    return SL_EINVAL;
}

/* Train options: scale, ratio, hflip. */
static int train_options(const sl_image_recipe *in, sl__recipe *o, char *reason, size_t rlen) {
    o->scale[0] = 0.08, o->scale[1] = 1.0;
    o->ratio[0] = 3.0 / 4.0, o->ratio[1] = 4.0 / 3.0;
    o->hflip = 0.5;
    if (in->scale_min != 0 || in->scale_max != 0) {
        /* !(a <= b) also refuses NaN */
        if (!(in->scale_min > 0 && in->scale_min <= in->scale_max && in->scale_max <= 1.0)) {
            sl__msg(reason, rlen, "scale (%g, %g) must satisfy 0 < min <= max <= 1", in->scale_min, in->scale_max);
            return SL_EINVAL;
        }
        o->scale[0] = in->scale_min, o->scale[1] = in->scale_max;
    }
    if (in->ratio_min != 0 || in->ratio_max != 0) {
        if (!(in->ratio_min >= 1e-3 && in->ratio_min <= in->ratio_max && in->ratio_max <= 1e3)) {
            sl__msg(reason, rlen, "ratio (%g, %g) must satisfy 0.001 <= min <= max <= 1000", in->ratio_min,
                    in->ratio_max);
            return SL_EINVAL;
        }
        o->ratio[0] = in->ratio_min, o->ratio[1] = in->ratio_max;
    }
    if (in->hflip == SL_HFLIP_NEVER) o->hflip = 0.0;
    else if (in->hflip != 0) {
        if (!(in->hflip > 0 && in->hflip <= 1.0))
            return bad(reason, rlen, "hflip probability", in->hflip, "(0, 1] (SL_HFLIP_NEVER: never)");
        o->hflip = in->hflip;
    }
    return 0;
}

/* Val options: crop_pct or resize, into the resize target. */
static int val_options(const sl_image_recipe *in, sl__recipe *o, char *reason, size_t rlen) {
    if (in->resize && in->crop_pct != 0) {
        sl__msg(reason, rlen, "give resize (%u) or crop_pct (%g), not both", in->resize, in->crop_pct);
        return SL_EINVAL;
    }
    if (in->crop_pct != 0 && !(in->crop_pct >= 0.05 && in->crop_pct <= 1.0))
        return bad(reason, rlen, "crop_pct", in->crop_pct, "[0.05, 1]");
    if (in->resize) {
        uint32_t side = SL_MAX(o->out_w, o->out_h);
        if (in->resize < side || in->resize > 4 * SL_MAX_SIDE) {
            sl__msg(reason, rlen, "resize %u must be from the output's longer side %u to %u", in->resize, side,
                    4 * SL_MAX_SIDE);
            return SL_EINVAL;
        }
        if (o->out_w != o->out_h) {
            o->cover_w = o->cover_h = in->resize; /* short side = resize covers both */
        }
        o->resize = in->resize;
        return 0;
    }
    /* the side the crop is taken from: floor(side / crop_pct) (timm), or
     * the classic side * 256 / 224 in integers */
    uint32_t tw, th;
    if (in->crop_pct != 0) {
        tw = (uint32_t)floor((double)o->out_w / in->crop_pct);
        th = (uint32_t)floor((double)o->out_h / in->crop_pct);
    } else {
        tw = (uint32_t)((uint64_t)o->out_w * 256 / 224);
        th = (uint32_t)((uint64_t)o->out_h * 256 / 224);
    }
    if (o->out_w == o->out_h) o->resize = tw;
    else o->cover_w = tw, o->cover_h = th;
    return 0;
}

int sl__recipe_make(int preset, uint32_t size, const sl_image_recipe *in, uint32_t flags, uint32_t max_scans,
                    sl__recipe *o, char *reason, size_t rlen) {
    static const sl_image_recipe zero;
    if (!in) in = &zero;
    memset(o, 0, sizeof *o);
    o->preset = preset;
    o->flags = flags;
    o->max_scans = max_scans ? max_scans : SL_DEFAULT_MAX_SCANS;
    if (in->interpolation != SL_INTERP_BILINEAR && in->interpolation != SL_INTERP_BICUBIC) {
        sl__msg(reason, rlen, "interpolation %d is neither bilinear (0) nor bicubic (1)", in->interpolation);
        return SL_EINVAL;
    }
    o->interp = in->interpolation;
    if (preset == SL_TRANSFORM_NONE) return 0;
    if (preset != SL_PRESET_TRAIN && preset != SL_PRESET_VAL) {
        sl__msg(reason, rlen, "unknown preset %d", preset);
        return SL_EINVAL;
    }
    if (!in->height != !in->width) {
        sl__msg(reason, rlen, "give both height and width (got %u x %u), or neither", in->height, in->width);
        return SL_EINVAL;
    }
    o->out_w = in->width ? in->width : size;
    o->out_h = in->height ? in->height : size;
    if (o->out_w == 0 || o->out_h == 0 || o->out_w > SL_MAX_SIDE || o->out_h > SL_MAX_SIDE) {
        sl__msg(reason, rlen, "output height x width %ux%u out of range 1..%u", o->out_h, o->out_w, SL_MAX_SIDE);
        return SL_EINVAL;
    }
    return preset == SL_PRESET_TRAIN ? train_options(in, o, reason, rlen) : val_options(in, o, reason, rlen);
}

int sl__recipe_from_config(const sl_config *c, sl__recipe *out, char *reason, size_t rlen) {
    return sl__recipe_make(c->preset, c->size, c->recipe, c->flags, c->max_scans, out, reason, rlen);
}

int sl__recipe_from_opts(const sl_decode_opts *o, sl__recipe *out, char *reason, size_t rlen) {
    return sl__recipe_make(o->preset, o->size, o->recipe, o->flags, o->max_scans, out, reason, rlen);
}

/* ---- the caller's recipe ------------------------------------------------- */

void sl_image_recipe_init_sized(sl_image_recipe *r, size_t struct_size) {
    sl_image_recipe d;
    memset(&d, 0, sizeof d);
    d.struct_size = struct_size;
    sl__abi_out(r, struct_size, &d, sizeof d);
}

int sl__recipe_import(sl_image_recipe *dst, size_t caller_size, size_t ptr_end, const sl_image_recipe *ptr,
                      const uint64_t *legacy, const char *what, char *err, size_t errlen) {
    sl_image_recipe_init(dst);
    if (caller_size >= ptr_end) {
        if (!ptr) return 0;
        int rc = sl__abi_in(dst, sizeof *dst, ptr, ptr->struct_size, SL__SIZE_RECIPE_MIN, what,
                            "initialise it with sl_image_recipe_init", err, errlen);
        dst->struct_size = sizeof *dst;
        return rc;
    }
    sl__recipe_0_1 v;
    memcpy(&v, legacy, sizeof v);
    dst->height = v.height, dst->width = v.width;
    dst->interpolation = v.interpolation;
    dst->scale_min = v.scale_min, dst->scale_max = v.scale_max;
    dst->ratio_min = v.ratio_min, dst->ratio_max = v.ratio_max;
    dst->hflip = v.hflip;
    dst->crop_pct = v.crop_pct;
    dst->resize = v.resize;
    return 0;
}

int sl__config_import(sl_config *dst, sl_image_recipe *recipe, const sl_config *cfg, char *err, size_t errlen) {
    sl_config_init(dst);
    int rc = sl__abi_in(dst, sizeof *dst, cfg, cfg->struct_size, SL__SIZE_CONFIG_MIN, "sl_config",
                        "initialise the configuration with sl_config_init", err, errlen);
    if (!rc)
        rc = sl__recipe_import(recipe, cfg->struct_size, SL__ABI_END(sl_config, recipe), dst->recipe,
                               dst->reserved_0_1_recipe, "sl_config.recipe", err, errlen);
    dst->struct_size = sizeof *dst;
    dst->recipe = recipe;
    return rc;
}

/* ---- the train box ------------------------------------------------------ */

/* nearbyint(v) as a side in [1, limit]: v is clamped before the cast, so
 * an extreme ratio on a huge image never converts an out-of-range double. */
static uint32_t side_within(double v, uint32_t limit) {
    v = nearbyint(v);
    if (!(v >= 1.0)) return 1; /* also NaN */
    if (v >= (double)limit) return limit;
    return (uint32_t)v;
}

void sl__train_box(const sl__recipe *rc, uint32_t width, uint32_t height, sl__rng *r, uint32_t box[4], int *flip) {
    const double smin = rc->scale[0], smax = rc->scale[1];
    const double lr0 = log(rc->ratio[0]), lr1 = log(rc->ratio[1]);
    double area = (double)width * height;
    int found = 0;
    for (int attempt = 0; attempt < 10 && !found; attempt++) {
        double target = area * (smin + (smax - smin) * sl__rng_uniform(r));
        double ar = exp(lr0 + (lr1 - lr0) * sl__rng_uniform(r));
        double wf = nearbyint(sqrt(target * ar)), hf = nearbyint(sqrt(target / ar));
        if (wf > 0 && wf <= width && hf > 0 && hf <= height) {
            uint32_t w = (uint32_t)wf, h = (uint32_t)hf;
            uint32_t i = (uint32_t)sl__rng_below(r, (uint64_t)height - h + 1);
            uint32_t j = (uint32_t)sl__rng_below(r, (uint64_t)width - w + 1);
            box[0] = j, box[1] = i, box[2] = w, box[3] = h;
            found = 1;
        }
    }
    if (!found) { /* centre crop at the nearest allowed ratio */
        double in_ratio = (double)width / height;
        uint32_t w = width, h = height;
        if (in_ratio < rc->ratio[0]) h = side_within(w / rc->ratio[0], height);
        else if (in_ratio > rc->ratio[1]) w = side_within(h * rc->ratio[1], width);
        box[0] = (width - w) / 2, box[1] = (height - h) / 2, box[2] = w, box[3] = h;
    }
    int f = sl__rng_uniform(r) < rc->hflip; /* drawn even at 0: the stream stays the same */
    if (flip) *flip = f;
}
