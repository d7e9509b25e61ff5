/*
 * Presets and the per-sample plan/run.
 *
 * train: torchvision RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4,
 *        4/3)) + RandomHorizontalFlip(0.5): the box is decided from the
 *        header's dimensions, only the box is decoded (at a reduced DCT
 *        scale when it is at least twice the output), then resized into the
 *        slot. Taps never leave the box (torchvision crops, then resizes).
 * val:   Resize(size*256/224) (short side) + CenterCrop(size): only the
 *        pixels the centre crop's taps reach are decoded.
 * none:  the whole image, HWC.
 * EXIF orientation (SL_FLAG_EXIF) is applied to the decoded pixels before
 * the transform; it costs two image-sized buffers, counted in the plan.
 */
#include <math.h>
#include <string.h>

#include "../base/util.h"
#include "ops.h"
#include "resize.h"

void sl__rrc_box(uint32_t width, uint32_t height, sl__rng *r, uint32_t box[4]) {
    const double smin = 0.08, smax = 1.0;
    const double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    double area = (double)width * height;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (smin + (smax - smin) * sl__rng_uniform(r));
        double ar = exp(lr0 + (lr1 - lr0) * sl__rng_uniform(r));
        double wf = nearbyint(sqrt(target * ar)), hf = nearbyint(sqrt(target / ar));
        if (wf > 0 && wf <= width && hf > 0 && hf <= height) {
            uint32_t w = (uint32_t)wf, h = (uint32_t)hf;
            uint32_t i = (uint32_t)sl__rng_below(r, (uint64_t)height - h + 1);
            uint32_t j = (uint32_t)sl__rng_below(r, (uint64_t)width - w + 1);
            box[0] = j, box[1] = i, box[2] = w, box[3] = h;
            return;
        }
    }
    /* Fallback: centre crop at the nearest allowed ratio. */
    double in_ratio = (double)width / height;
    uint32_t w, h;
    if (in_ratio < 3.0 / 4.0) {
        w = width;
        h = (uint32_t)nearbyint(w / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
        h = height;
        w = (uint32_t)nearbyint(h * (4.0 / 3.0));
    } else {
        w = width;
        h = height;
    }
    if (w > width) w = width;
    if (h > height) h = height;
    if (!w) w = 1;
    if (!h) h = 1;
    box[0] = (width - w) / 2, box[1] = (height - h) / 2, box[2] = w, box[3] = h;
}

int sl__check_bytes(uint64_t bytes, uint64_t max_bytes, char *reason, size_t rlen) {
    if (!max_bytes || bytes <= max_bytes) return 0;
    sl__msg(reason, rlen, "file is %llu bytes, over the max_bytes limit of %llu", (unsigned long long)bytes,
            (unsigned long long)max_bytes);
    return SL_ELIMIT;
}

int sl__check_pixels(const sl_image_info *info, uint64_t max_pixels, char *reason, size_t rlen) {
    uint64_t px = (uint64_t)info->width * info->height;
    if (!max_pixels || px <= max_pixels) return 0;
    sl__msg(reason, rlen, "image is %ux%u = %llu pixels, over the max_pixels limit of %llu", info->width,
            info->height, (unsigned long long)px, (unsigned long long)max_pixels);
    return SL_ELIMIT;
}

/* Python's round() of k/2: half to even. */
static uint32_t half_round_even(uint32_t d) {
    uint32_t k = d / 2;
    if (d % 2 == 0) return k;
    return (k % 2 == 0) ? k : k + 1;
}

int sl__val_geometry(uint32_t W, uint32_t H, uint32_t S, uint32_t *rw, uint32_t *rh, uint32_t *cx, uint32_t *cy) {
    uint32_t short_t = (uint32_t)((uint64_t)S * 256 / 224);
    if (W <= H) {
        *rw = short_t;
        *rh = (uint32_t)((double)short_t * H / W);
    } else {
        *rh = short_t;
        *rw = (uint32_t)((double)short_t * W / H);
    }
    if (*rw < S || *rh < S) return SL_EINVAL;
    *cx = half_round_even(*rw - S), *cy = half_round_even(*rh - S);
    return 0;
}

static void logical_dims(const sl_image_info *info, int orient, uint32_t *w, uint32_t *h) {
    if (orient >= 5) *w = info->height, *h = info->width;
    else *w = info->width, *h = info->height;
}

/* The source window [x0, x1) that outputs [first, first+n) of a resize
 * whose box is [0, full) -> total reach, with a safety margin. */
static void val_window(uint32_t full, uint32_t total, uint32_t first, uint32_t n, uint32_t *x0, uint32_t *x1) {
    double scale = (double)full / total, support = scale < 1.0 ? 1.0 : scale;
    double a = (first + 0.5) * scale - support - 2.0, b = (first + n - 0.5) * scale + support + 2.0;
    *x0 = a < 0 ? 0 : (uint32_t)floor(a);
    *x1 = b > full ? full : (uint32_t)ceil(b);
    if (*x1 <= *x0) *x1 = SL_MIN(*x0 + 1, full);
}

int sl__plan_sample(const sl_image_info *info, const sl__plan_params *pp, sl__plan *p, char *reason,
                    size_t rlen) {
    memset(p, 0, sizeof *p);
    p->preset = pp->preset;
    p->channels = (pp->flags & SL_FLAG_KEEP_ALPHA) ? 4 : 3;
    p->orient = (pp->flags & SL_FLAG_EXIF) ? info->orientation : 1;
    if (p->orient < 1 || p->orient > 8) p->orient = 1;
    uint32_t W, H;
    logical_dims(info, p->orient, &W, &H);
    uint64_t img, mem = 0;
    if (sl__mul((uint64_t)W * H, p->channels, &img)) return SL_EOVERFLOW;

    sl__decode_req full = {0, 0, info->width, info->height, 0, 0, p->channels, 0};
    if (p->preset == SL_TRANSFORM_NONE) {
        p->out_w = W, p->out_h = H;
        p->req = full;
        mem = sl__decode_mem(info, &full) + (p->orient != 1 ? img : 0);
        p->mem = mem;
        return 0;
    }
    if (pp->size == 0 || pp->size > 16384) {
        sl__msg(reason, rlen, "output size %u out of range", pp->size);
        return SL_EINVAL;
    }
    uint32_t S = pp->size;
    p->out_w = p->out_h = S;
    if (p->preset == SL_PRESET_TRAIN) {
        sl__rng r;
        sl__rng_init(&r, pp->seed, pp->epoch, pp->index);
        sl__rrc_box(W, H, &r, p->box);
        p->flip = sl__rng_uniform(&r) < 0.5;
        uint32_t x = p->box[0], y = p->box[1], w = p->box[2], h = p->box[3];
        p->ax = (sl__axis_spec){x, (double)x + w, x, (double)x + w, S, 0, S};
        p->ay = (sl__axis_spec){y, (double)y + h, y, (double)y + h, S, 0, S};
        p->req = (sl__decode_req){x, y, w, h, S, S, p->channels, 4};
    } else if (p->preset == SL_PRESET_VAL) {
        uint32_t rw, rh, cx, cy;
        if (sl__val_geometry(W, H, S, &rw, &rh, &cx, &cy)) {
            sl__msg(reason, rlen, "image %ux%u too thin for the val preset", W, H);
            return SL_EINVAL;
        }
        p->ax = (sl__axis_spec){0, W, 0, W, rw, cx, S};
        p->ay = (sl__axis_spec){0, H, 0, H, rh, cy, S};
        uint32_t x0, x1, y0, y1;
        val_window(W, rw, cx, S, &x0, &x1);
        val_window(H, rh, cy, S, &y0, &y1);
        uint32_t ow = (uint32_t)ceil((double)(x1 - x0) * rw / W), oh = (uint32_t)ceil((double)(y1 - y0) * rh / H);
        p->req = (sl__decode_req){x0, y0, x1 - x0, y1 - y0, ow ? ow : 1, oh ? oh : 1, p->channels, 4};
        p->ax.lo = x0, p->ax.hi = x1, p->ay.lo = y0, p->ay.hi = y1;
        if (x0 == 0 && x1 == W) p->ax.hi = W;
        if (y0 == 0 && y1 == H) p->ay.hi = H;
    } else {
        sl__msg(reason, rlen, "unknown preset %d", pp->preset);
        return SL_EINVAL;
    }
    if (p->orient != 1) {
        /* whole image decoded, oriented, then resized from memory */
        p->req = full;
        p->req.out_w = p->req.out_h = 0;
        p->req.px_bytes = 0;
        mem = sl__decode_mem(info, &full) + 2 * img + sl__resampler_mem(&p->ax, &p->ay, W + 2, H + 2, p->channels);
    } else {
        mem = sl__decode_mem(info, &p->req) + sl__resampler_mem(&p->ax, &p->ay, p->req.w + 2, p->req.h + 2, p->channels);
    }
    p->mem = mem;
    return 0;
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
        sl__resampler_init(&rs, &p->ax, &p->ay, info->width, info->height, p->flip, q);
        rc = sl__decode(d, data, len, info, &p->req, q, &rs.sink, reason, rlen);
        if (rc == 0 && (rc = sl__resampler_finish(&rs, dst))) sl__msg(reason, rlen, "resize: missing rows");
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
        sl__resampler_init(&rs, &p->ax, &p->ay, LW, LH, p->flip, q);
        sl__region reg = {8, LW, LH, 0, 0, LW, LH, C, C};
        rc = rs.sink.begin(&rs.sink, &reg);
        uint64_t line = (uint64_t)LW * C;
        for (uint32_t y = 0; rc == 0 && y < LH; y++) {
            const uint8_t *row = logi + y * line;
            rc = rs.sink.rows(&rs.sink, &row, y, 1);
        }
        if (rc == 0) rc = sl__resampler_finish(&rs, dst);
        if (rc) sl__msg(reason, rlen, "resize after orientation failed");
        sl__resampler_fini(&rs);
    }
    if (logi != dst) sl__quota_free(q, logi);
    return rc;
}
