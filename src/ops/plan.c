/*
 * Presets and the per-sample plan/run. The recipe (recipe.c) says what the
 * output is; the plan says, from the header alone, which window to decode
 * and how to resize it.
 *
 * train: torchvision RandomResizedCrop(size, scale, ratio) +
 *        RandomHorizontalFlip(hflip): the box is decided from the header's
 *        dimensions, only the box is decoded, then resized into the slot.
 *        Taps never leave the box (torchvision crops, then resizes).
 * val:   Resize (short side to resize, or covering crop_pct's target) +
 *        CenterCrop: only the pixels the centre crop's taps reach are
 *        decoded.
 * none:  the whole image, HWC.
 * DCT scaling (JPEG): by default only while the scaled window stays at
 * least SL_EXACT_DCT_FACTOR (3) times the output, so an antialiased resize
 * of >= 3x always follows it and the output stays close to Pillow's
 * full-resolution resize; SL_FLAG_FAST lets it shrink down to the output
 * size itself.
 * EXIF orientation (SL_FLAG_EXIF) is applied to the decoded pixels before
 * the transform; it costs two image-sized buffers, counted in the plan.
 */
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "ops/ops.h"
#include "ops/resize.h"

/* A resized side must fit the axis arithmetic (uint32 totals). */
#define SL_MAX_RESIZED 2147483647.0
/* Without SL_FLAG_FAST, a JPEG is DCT-scaled only while the scaled window
 * stays this many times the output. Measured on 18 large photos (1280 to
 * 3840 px, docs/images.md): worst mean abs diff from Pillow 0.91 (bilinear)
 * and 1.02 (bicubic) with 2, 0.18 with 3, 0.13 with 4; instructions a
 * sample 1.2x, 1.5-2.1x and 2.1-3.0x those of SL_FLAG_FAST. On ImageNet-like
 * sizes (~500 px) 2 and 3 cost the same (1.04-1.08x). */
#define SL_EXACT_DCT_FACTOR 3

/* Python's round() of k/2: half to even. */
static uint32_t half_round_even(uint32_t d) {
    uint32_t k = d / 2;
    if (d % 2 == 0) return k;
    return (k % 2 == 0) ? k : k + 1;
}

static void logical_dims(const sl_image_info *info, int orient, uint32_t *w, uint32_t *h) {
    if (orient >= 5) *w = info->height, *h = info->width;
    else *w = info->width, *h = info->height;
}

/* The source window [x0, x1) that outputs [first, first+n) of a resize
 * whose box is [0, full) -> total reach, with a safety margin; support is
 * the filter's (1 bilinear, 2 bicubic). */
static void val_window(uint32_t full, uint32_t total, uint32_t first, uint32_t n, double support, uint32_t *x0,
                       uint32_t *x1) {
    double scale = (double)full / total, reach = support * (scale < 1.0 ? 1.0 : scale);
    double a = (first + 0.5) * scale - reach - 2.0, b = (first + n - 0.5) * scale + reach + 2.0;
    *x0 = a < 0 ? 0 : (uint32_t)floor(a);
    *x1 = b > full ? full : (uint32_t)ceil(b);
    if (*x1 <= *x0) *x1 = SL_MIN(*x0 + 1, full);
}

/* The val resize's output size rw x rh for a W x H image: the short side
 * to r->resize (torchvision Resize(int): the long side truncated), or the
 * aspect kept and cover_w x cover_h covered (timm ResizeKeepRatio: both
 * rounded). Checked in double before any cast. */
static int val_resized(const sl__recipe *rc, uint32_t W, uint32_t H, uint32_t *rw, uint32_t *rh, char *reason,
                       size_t rlen) {
    double fw, fh;
    if (rc->resize) {
        double t = rc->resize;
        if (W <= H) fw = t, fh = trunc(t * H / W);
        else fh = t, fw = trunc(t * W / H);
    } else {
        double r = fmin((double)W / rc->cover_w, (double)H / rc->cover_h);
        fw = nearbyint(W / r), fh = nearbyint(H / r);
    }
    if (fw > SL_MAX_RESIZED || fh > SL_MAX_RESIZED) {
        sl__msg(reason, rlen, "image %ux%u is too elongated for the val preset: resized it would be %.0fx%.0f", W, H,
                fw, fh);
        return SL_ELIMIT;
    }
    *rw = (uint32_t)fw, *rh = (uint32_t)fh;
    if (*rw < rc->out_w || *rh < rc->out_h) {
        sl__msg(reason, rlen, "image %ux%u too thin for the val preset (resized %ux%u, crop %ux%u)", W, H, *rw, *rh,
                rc->out_w, rc->out_h);
        return SL_EINVAL;
    }
    return 0;
}

/* Val: the resize, the centre crop of it, and the window its taps reach. */
int sl__val_geometry(const sl__recipe *rc, uint32_t W, uint32_t H, uint32_t *rw, uint32_t *rh, uint32_t *cx,
                     uint32_t *cy, char *reason, size_t rlen) {
    int e = val_resized(rc, W, H, rw, rh, reason, rlen);
    if (e) return e;
    *cx = half_round_even(*rw - rc->out_w), *cy = half_round_even(*rh - rc->out_h);
    return 0;
}

static int plan_val(const sl__recipe *rc, uint32_t W, uint32_t H, sl__plan *p, char *reason, size_t rlen) {
    uint32_t rw, rh, cx, cy, Sw = rc->out_w, Sh = rc->out_h;
    int rc_ = sl__val_geometry(rc, W, H, &rw, &rh, &cx, &cy, reason, rlen);
    if (rc_) return rc_;
    p->ax = (sl__axis_spec){0, W, 0, W, rw, cx, Sw, rc->interp};
    p->ay = (sl__axis_spec){0, H, 0, H, rh, cy, Sh, rc->interp};
    double support = rc->interp == SL_INTERP_BICUBIC ? 2.0 : 1.0;
    uint32_t x0, x1, y0, y1;
    val_window(W, rw, cx, Sw, support, &x0, &x1);
    val_window(H, rh, cy, Sh, support, &y0, &y1);
    uint32_t ow = (uint32_t)ceil((double)(x1 - x0) * rw / W), oh = (uint32_t)ceil((double)(y1 - y0) * rh / H);
    p->req = (sl__decode_req){x0, y0, x1 - x0, y1 - y0, ow ? ow : 1, oh ? oh : 1, p->channels, 4, 0, NULL, 0};
    p->ax.lo = x0, p->ax.hi = x1, p->ay.lo = y0, p->ay.hi = y1;
    return 0;
}

/* Train: the random box, resized to the output. */
static void plan_train(const sl__recipe *rc, const sl__plan_params *pp, uint32_t W, uint32_t H, sl__plan *p) {
    sl__rng r;
    sl__rng_init(&r, pp->seed, pp->epoch, pp->index);
    sl__train_box(rc, W, H, &r, p->box, &p->flip);
    uint32_t x = p->box[0], y = p->box[1], w = p->box[2], h = p->box[3];
    p->ax = (sl__axis_spec){x, (double)x + w, x, (double)x + w, rc->out_w, 0, rc->out_w, rc->interp};
    p->ay = (sl__axis_spec){y, (double)y + h, y, (double)y + h, rc->out_h, 0, rc->out_h, rc->interp};
    p->req = (sl__decode_req){x, y, w, h, rc->out_w, rc->out_h, p->channels, 4, 0, NULL, 0};
}

int sl__plan_sample(const sl_image_info *info, const sl__plan_params *pp, sl__plan *p, char *reason,
                    size_t rlen) {
    const sl__recipe *rc = pp->recipe;
    memset(p, 0, sizeof *p);
    p->preset = rc->preset;
    p->channels = (rc->flags & SL_FLAG_KEEP_ALPHA) ? 4 : 3;
    p->orient = (rc->flags & SL_FLAG_EXIF) ? info->orientation : 1;
    if (p->orient < 1 || p->orient > 8) p->orient = 1;
    uint32_t W, H;
    logical_dims(info, p->orient, &W, &H);
    uint64_t img;
    if (sl__mul((uint64_t)W * H, p->channels, &img)) return SL_EOVERFLOW;

    sl__decode_req full = {0, 0, info->width, info->height, 0, 0, p->channels, 0, rc->max_scans, pp->cancel, 0};
    if (p->preset == SL_TRANSFORM_NONE) {
        p->out_w = W, p->out_h = H;
        p->req = full;
        p->mem = sl__decode_mem(info, &full) + (p->orient != 1 ? img : 0);
        return 0;
    }
    p->out_w = rc->out_w, p->out_h = rc->out_h;
    if (p->preset == SL_PRESET_TRAIN) {
        plan_train(rc, pp, W, H, p);
    } else if (p->preset == SL_PRESET_VAL) {
        int e = plan_val(rc, W, H, p, reason, rlen);
        if (e) return e;
    } else {
        sl__msg(reason, rlen, "unknown preset %d", p->preset);
        return SL_EINVAL;
    }
    p->req.max_scans = rc->max_scans;
    p->req.cancel = pp->cancel;
    if (!(rc->flags & SL_FLAG_FAST)) {
        /* exact: DCT scaling only while a >= SL_EXACT_DCT_FACTOR x resize follows */
        p->req.out_w = (uint32_t)SL_MIN((uint64_t)p->req.out_w * SL_EXACT_DCT_FACTOR, UINT32_MAX);
        p->req.out_h = (uint32_t)SL_MIN((uint64_t)p->req.out_h * SL_EXACT_DCT_FACTOR, UINT32_MAX);
    }
    if (p->orient != 1) {
        /* whole image decoded, oriented, then resized from memory */
        p->req = full;
        p->mem = sl__decode_mem(info, &full) + 2 * img + sl__resampler_mem(&p->ax, &p->ay, W + 2, H + 2, p->channels);
    } else {
        p->mem = sl__decode_mem(info, &p->req) +
                 sl__resampler_mem(&p->ax, &p->ay, p->req.w + 2, p->req.h + 2, p->channels);
    }
    return 0;
}

void sl__plan_lib_mem(const sl_image_info *info, sl__plan *p, uint64_t lib) {
    if (!lib) return;
    uint64_t header = sl__decode_mem(info, &p->req);
    p->req.lib_mem = lib;
    p->mem = p->mem - header + sl__decode_mem(info, &p->req);
}

/* ---- run -------------------------------------------------------------- */

/* Sink that copies the region's rows into an HWC image of the full size. */
typedef struct copy_sink {
    sl__row_sink sink;
    uint8_t *dst;
    uint32_t w, h, C;
} copy_sink;

static int copy_begin(sl__row_sink *s, const sl__region *r) {
    copy_sink *c = s->ctx;
    return (r->x == 0 && r->y == 0 && r->w == c->w && r->h == c->h && r->channels == c->C) ? 0 : SL_EINVAL;
}

static int copy_rows(sl__row_sink *s, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    copy_sink *c = s->ctx;
    uint64_t line = (uint64_t)c->w * c->C;
    for (uint32_t i = 0; i < n; i++) memcpy(c->dst + (uint64_t)(y + i) * line, rows[i], line);
    return 0;
}

static void orient_image(const uint8_t *src, uint32_t W, uint32_t H, uint32_t C, int o, uint8_t *dst) {
    uint32_t LW = o >= 5 ? H : W, LH = o >= 5 ? W : H;
    for (uint32_t ly = 0; ly < LH; ly++) {
        for (uint32_t lx = 0; lx < LW; lx++) {
            uint32_t px, py;
            switch (o) {
            case 2: px = W - 1 - lx, py = ly; break;
            case 3: px = W - 1 - lx, py = H - 1 - ly; break;
            case 4: px = lx, py = H - 1 - ly; break;
            case 5: px = ly, py = lx; break;
            case 6: px = ly, py = H - 1 - lx; break;
            case 7: px = W - 1 - ly, py = H - 1 - lx; break;
            case 8: px = W - 1 - ly, py = lx; break;
            default: px = lx, py = ly; break;
            }
            memcpy(dst + ((uint64_t)ly * LW + lx) * C, src + ((uint64_t)py * W + px) * C, C);
        }
    }
}

int sl__run(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
            const sl__plan *p, sl__quota *q, uint8_t *dst, char *reason, size_t rlen) {
    int rc;
    uint32_t C = p->channels;
    if (p->orient == 1 && p->preset == SL_TRANSFORM_NONE) {
        copy_sink cs = {{copy_begin, copy_rows, NULL}, dst, info->width, info->height, C};
        cs.sink.ctx = &cs;
        return sl__decode(d, data, len, info, &p->req, q, &cs.sink, reason, rlen);
    }
    if (p->orient == 1) {
        sl__resampler rs;
        sl__resampler_init(&rs, &p->ax, &p->ay, info->width, info->height, p->flip, q, dst);
        rc = sl__decode(d, data, len, info, &p->req, q, &rs.sink, reason, rlen);
        if (rc == 0 && (rc = sl__resampler_finish(&rs))) sl__msg(reason, rlen, "resize: missing rows");
        sl__resampler_fini(&rs);
        return rc;
    }
    /* EXIF orientation: whole image, oriented, then as above from memory. */
    uint64_t img = (uint64_t)info->width * info->height * C;
    uint8_t *phys = sl__quota_alloc(q, img);
    uint8_t *logi = p->preset == SL_TRANSFORM_NONE ? dst : sl__quota_alloc(q, img);
    if (!phys || !logi) {
        sl__quota_free(q, phys);
        if (logi != dst) sl__quota_free(q, logi);
        sl__msg(reason, rlen, "image buffer over quota");
        return SL_EBUDGET;
    }
    copy_sink cs = {{copy_begin, copy_rows, NULL}, phys, info->width, info->height, C};
    cs.sink.ctx = &cs;
    rc = sl__decode(d, data, len, info, &p->req, q, &cs.sink, reason, rlen);
    if (rc == 0) orient_image(phys, info->width, info->height, C, p->orient, logi);
    sl__quota_free(q, phys);
    if (rc == 0 && p->preset != SL_TRANSFORM_NONE) {
        uint32_t LW = p->orient >= 5 ? info->height : info->width, LH = p->orient >= 5 ? info->width : info->height;
        sl__resampler rs;
        sl__resampler_init(&rs, &p->ax, &p->ay, LW, LH, p->flip, q, dst);
        sl__region reg = {8, LW, LH, 0, 0, LW, LH, C, C};
        rc = rs.sink.begin(&rs.sink, &reg);
        uint64_t line = (uint64_t)LW * C;
        for (uint32_t y = 0; rc == 0 && y < LH; y++) {
            const uint8_t *row = logi + y * line;
            rc = rs.sink.rows(&rs.sink, &row, y, 1);
        }
        if (rc == 0) rc = sl__resampler_finish(&rs);
        if (rc) sl__msg(reason, rlen, "resize after orientation failed");
        sl__resampler_fini(&rs);
    }
    if (logi != dst) sl__quota_free(q, logi);
    return rc;
}
