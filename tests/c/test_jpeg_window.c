/*
 * JPEG crop-in-decode is exact: every pixel of the requested window the
 * decoder hands its sink equals the same pixel of a full decode at the
 * same DCT scale, for every chroma layout (4:4:4, 4:2:2, 4:2:0, 4:4:0,
 * 4:1:1, grey, progressive, CMYK) and windows touching every edge. The
 * train and val resizes take only the window's pixels (their taps never
 * leave the box), so equal windows make the preset's output byte-equal to
 * decode-then-crop-and-resize. libjpeg-turbo's cropped decode treats the
 * crop's edges as image edges when it upsamples chroma; the decoder asks it
 * for a margin around the window so they never fall inside (format/jpeg.c).
 * Before the margin, 156 of 400 ImageNet-like train crops had a pixel off
 * by more than 1, worst 33/255, all at the window's edges.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "check.h"
#include "fixture.h"
#include "base/util.h"
#include "format/decode.h"
#include "ops/ops.h"
#include "ops/resize.h"
#include "resample.h"

enum { L444, L422, L420, L440, L411, GREY, PROG420, CMYK, NLAYOUTS };
static const char *layout_name[] = {"4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "grey", "progressive 4:2:0", "CMYK"};

/* A JPEG of the fixture's texture in the given layout; malloc'd by libjpeg. */
static unsigned char *make_jpeg(int layout, uint32_t w, uint32_t h, unsigned long *len) {
    uint8_t *rgb = fx_texture(w, h, w * 7 + h, 0), *cmyk = NULL;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *out = NULL;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    *len = 0;
    jpeg_mem_dest(&c, &out, len);
    c.image_width = w, c.image_height = h;
    c.input_components = layout == GREY ? 1 : layout == CMYK ? 4 : 3;
    c.in_color_space = layout == GREY ? JCS_GRAYSCALE : layout == CMYK ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 85, TRUE);
    static const int hs[] = {1, 2, 2, 1, 4, 1, 2, 1}, vs[] = {1, 1, 2, 2, 1, 1, 2, 1};
    if (layout != GREY && layout != CMYK) {
        c.comp_info[0].h_samp_factor = hs[layout], c.comp_info[0].v_samp_factor = vs[layout];
        for (int k = 1; k < 3; k++) c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
    }
    if (layout == PROG420) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 4);
    while (c.next_scanline < h) {
        const uint8_t *src = rgb + (size_t)c.next_scanline * w * 3;
        for (uint32_t x = 0; x < w; x++) {
            if (layout == GREY) row[x] = src[3 * x];
            else if (layout == CMYK) row[4 * x] = src[3 * x], row[4 * x + 1] = src[3 * x + 1], row[4 * x + 2] = src[3 * x + 2],
                row[4 * x + 3] = (uint8_t)(x * 3 + c.next_scanline);
            else memcpy(row + 3 * x, src + 3 * x, 3);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row), free(rgb), free(cmyk);
    return out;
}

/* A sink that copies the rows it gets into a canvas of the decoded size at
 * their place, marking what was written. */
typedef struct canvas {
    sl__row_sink sink;
    sl__region r;
    uint8_t *px, *seen; /* full_w x full_h x 3, full_w x full_h */
} canvas;

static int canvas_begin(sl__row_sink *s, const sl__region *r) {
    canvas *c = s->ctx;
    c->r = *r;
    CHECK(r->x + r->w <= r->full_w && r->y + r->h <= r->full_h);
    c->px = calloc((size_t)r->full_w * r->full_h, 3);
    c->seen = calloc((size_t)r->full_w * r->full_h, 1);
    return 0;
}

static int canvas_rows(sl__row_sink *s, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    canvas *c = s->ctx;
    uint32_t pb = c->r.pixel_bytes ? c->r.pixel_bytes : c->r.channels;
    for (uint32_t i = 0; i < n; i++) {
        CHECK(y + i < c->r.h);
        size_t at = (size_t)(c->r.y + y + i) * c->r.full_w + c->r.x;
        for (uint32_t x = 0; x < c->r.w; x++) memcpy(c->px + (at + x) * 3, rows[i] + (size_t)x * pb, 3);
        memset(c->seen + at, 1, c->r.w);
    }
    return 0;
}

/* Decode window (x, y, w, h) of a full-resolution image, DCT-scaled as for
 * an output of out_w x out_h (0: none), into c. */
static void decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info, uint32_t x, uint32_t y,
                   uint32_t w, uint32_t h, uint32_t out_w, uint32_t out_h, canvas *c) {
    sl__decode_req req = {x, y, w, h, out_w, out_h, 3, 4, 0, NULL, 0};
    memset(c, 0, sizeof *c);
    c->sink = (sl__row_sink){canvas_begin, canvas_rows, c};
    sl__quota q;
    char why[256] = "";
    CHECK_OK(sl__decoder_quota(d, SL_DECODER_SELF + sl__decode_mem(info, &req), &q, why, sizeof why));
    int rc = sl__decode(d, data, len, info, &req, &q, &c->sink, why, sizeof why);
    if (rc) SL_FAIL("decode %ux%u+%u+%u: %s", w, h, x, y, why);
    CHECK_EQ(q.used, 0);
}

static void canvas_free(canvas *c) { free(c->px), free(c->seen); }

/* Every window tried equals the full decode at the same scale. */
TEST(windows_equal_full_decode_every_layout) {
    static const uint32_t sizes[][2] = {{203, 151}, {640, 480}, {97, 300}};
    sl__decoder *d = sl__decoder_new();
    CHECK(d != NULL);
    long windows = 0;
    for (int layout = 0; layout < NLAYOUTS; layout++) {
        for (int s = 0; s < 3; s++) {
            uint32_t W = sizes[s][0], H = sizes[s][1];
            unsigned long len;
            unsigned char *data = make_jpeg(layout, W, H, &len);
            sl_image_info info;
            CHECK_OK(sl__probe(data, len, &info, NULL, 0));
            for (uint32_t m = 8; m >= 1; m /= 2) { /* DCT scale m/8: an output m/8 of the image asks for it */
                canvas full;
                decode(d, data, len, &info, 0, 0, W, H, m == 8 ? 0 : W * m / 8, m == 8 ? 0 : H * m / 8, &full);
                CHECK_EQ(full.r.scale_num, m);
                for (int t = 0; t < 40; t++) {
                    uint64_t r = fx_mix((uint64_t)layout << 48 | (uint64_t)s << 40 | (uint64_t)m << 32 | (uint64_t)t);
                    uint32_t w = 1 + (uint32_t)(r % W), h = 1 + (uint32_t)((r >> 16) % H);
                    uint32_t x = (uint32_t)((r >> 32) % (W - w + 1)), y = (uint32_t)((r >> 48) % (H - h + 1));
                    if (t % 8 == 1) x = 0; /* the image's own edges too */
                    if (t % 8 == 2) x = W - w;
                    if (t % 8 == 3) y = 0;
                    if (t % 8 == 4) y = H - h;
                    if (t % 8 == 5) x = x & ~15u, y = y & ~15u; /* on iMCU boundaries */
                    canvas win;
                    uint32_t ow = m == 8 ? 0 : (uint32_t)((uint64_t)w * m / 8), oh = m == 8 ? 0 : (uint32_t)((uint64_t)h * m / 8);
                    if (m < 8 && (!ow || !oh)) continue; /* too small to be scaled by m */
                    decode(d, data, len, &info, x, y, w, h, ow, oh, &win);
                    if (win.r.scale_num != m) {
                        canvas_free(&win);
                        continue;
                    }
                    /* the window in decoded pixels, as the resampler takes it */
                    uint32_t x0 = (uint32_t)((uint64_t)x * m / 8), y0 = (uint32_t)((uint64_t)y * m / 8);
                    uint32_t x1 = (uint32_t)SL_MIN(((uint64_t)(x + w) * m + 7) / 8, full.r.full_w);
                    uint32_t y1 = (uint32_t)SL_MIN(((uint64_t)(y + h) * m + 7) / 8, full.r.full_h);
                    for (uint32_t yy = y0; yy < y1; yy++)
                        for (uint32_t xx = x0; xx < x1; xx++) {
                            size_t at = (size_t)yy * full.r.full_w + xx;
                            if (!win.seen[at])
                                SL_FAIL("%s %ux%u at %u/8: window %ux%u+%u+%u: pixel (%u, %u) never delivered",
                                        layout_name[layout], W, H, m, w, h, x, y, xx, yy);
                            if (memcmp(win.px + at * 3, full.px + at * 3, 3))
                                SL_FAIL("%s %ux%u at %u/8: window %ux%u+%u+%u: pixel (%u, %u) is %u,%u,%u, the full decode "
                                        "%u,%u,%u", layout_name[layout], W, H, m, w, h, x, y, xx, yy, win.px[at * 3],
                                        win.px[at * 3 + 1], win.px[at * 3 + 2], full.px[at * 3], full.px[at * 3 + 1],
                                        full.px[at * 3 + 2]);
                        }
                    windows++;
                    canvas_free(&win);
                }
                canvas_free(&full);
            }
            free(data);
        }
    }
    printf("%ld windows equal to the full decode\n", windows);
    sl__decoder_free(d);
}

/* The train preset end to end: its output from the JPEG equals its output
 * from the same image's full decode handed over as raw pixels (a PNG-like
 * exact source: the full decode through the same plan and resize). */
TEST(train_crops_equal_decode_then_crop) {
    sl__decoder *d = sl__decoder_new();
    CHECK(d != NULL);
    unsigned long len;
    unsigned char *data = make_jpeg(L420, 500, 375, &len);
    sl_image_info info;
    CHECK_OK(sl__probe(data, len, &info, NULL, 0));
    canvas full;
    decode(d, data, len, &info, 0, 0, 500, 375, 0, 0, &full);
    sl__recipe rcp;
    char why[256];
    CHECK_OK(sl__recipe_make(SL_PRESET_TRAIN, 224, NULL, 0, 0, &rcp, why, sizeof why));
    uint8_t *a = malloc(3 * 224 * 224), *b = malloc(3 * 224 * 224);
    int differ = 0;
    for (uint64_t i = 0; i < 200; i++) {
        sl__plan_params pp = {&rcp, 5, 0, i, NULL};
        sl__plan p;
        CHECK_OK(sl__plan_sample(&info, &pp, &p, why, sizeof why));
        sl__quota q;
        CHECK_OK(sl__decoder_quota(d, SL_DECODER_SELF + p.mem, &q, why, sizeof why));
        CHECK_OK(sl__run(d, data, len, &info, &p, &q, a, why, sizeof why));
        /* the same box and resize over the full decode's pixels */
        CHECK_OK(fx_resample(full.px, 500, 375, &p.ax, &p.ay, p.flip, p.mem, b));
        if (memcmp(a, b, 3 * 224 * 224)) {
            int worst = 0;
            for (size_t k = 0; k < 3 * 224 * 224; k++) worst = SL_MAX(worst, abs(a[k] - b[k]));
            fprintf(stderr, "sample %llu: box %ux%u+%u+%u, worst %d\n", (unsigned long long)i, p.box[2], p.box[3],
                    p.box[0], p.box[1], worst);
            differ++;
        }
    }
    CHECK_EQ(differ, 0);
    free(a), free(b), free(data);
    canvas_free(&full);
    sl__decoder_free(d);
}
