/*
 * Image recipes (sl_image_recipe): the defaults are the classic presets
 * byte for byte; every bad value is refused with a reason that names it
 * (through sl_image_decode and sl_loader_create); the train box follows
 * scale, ratio and hflip; non-square outputs reach the batch's shape;
 * the plan's memory bound holds for every recipe (a quota of exactly
 * plan.mem never refuses); extreme aspect ratios never convert an
 * out-of-range double (run under UBSan in make test-asan); the CLI flags.
 *
 * Pixel exactness against Pillow is tested in tests/python/test_recipes.py.
 */
#include "fixture.h" /* first: it defines _GNU_SOURCE */

#include <math.h>

#include "ops/ops.h"

static const int both[2] = {SL_PRESET_TRAIN, SL_PRESET_VAL};

/* Decode data under o into a fresh buffer; returns the code, *out owns it. */
static int decode(const unsigned char *data, size_t n, const sl_decode_opts *o, uint8_t **out, size_t *len,
                  char *why, size_t wlen) {
    uint32_t w, h, c;
    *out = NULL;
    why[0] = 0;
    int rc = sl_image_output_size(data, n, o, &w, &h, &c);
    if (rc) return sl_image_decode(data, n, o, NULL, 0, why, wlen);
    *len = (size_t)w * h * c;
    *out = malloc(*len);
    CHECK(*out != NULL);
    return sl_image_decode(data, n, o, *out, *len, why, wlen);
}

/* A zeroed recipe and one spelling out the classic values give the same
 * bytes (train: 12 samples; val), and the same train boxes. */
TEST(zero_recipe_is_the_classic_preset) {
    unsigned long n;
    unsigned char *j = fx_jpeg_bytes(500, 375, 3, 0, 90, &n);
    for (int p = 0; p < 2; p++)
        for (uint64_t index = 0; index < (both[p] == SL_PRESET_TRAIN ? 12u : 1u); index++) {
            sl_decode_opts a, b;
            sl_decode_opts_init(&a);
            a.preset = both[p], a.size = 64, a.index = index, a.seed = 9;
            b = a;
            sl_image_recipe r;
            sl_image_recipe_init(&r);
            if (both[p] == SL_PRESET_TRAIN) {
                r.scale_min = 0.08, r.scale_max = 1.0;
                r.ratio_min = 3.0 / 4.0, r.ratio_max = 4.0 / 3.0;
                r.hflip = 0.5;
            } else {
                r.resize = 64 * 256 / 224;
            }
            r.height = r.width = 64;
            b.recipe = &r;
            uint8_t *x, *y;
            size_t lx, ly;
            char why[200];
            CHECK_OK(decode(j, n, &a, &x, &lx, why, sizeof why));
            CHECK_OK(decode(j, n, &b, &y, &ly, why, sizeof why));
            CHECK_EQ(lx, ly);
            CHECK(memcmp(x, y, lx) == 0);
            free(x), free(y);
            uint32_t b1[4], b2[4];
            int f1, f2;
            CHECK_OK(sl_image_train_crop(500, 375, 9, 0, index, b1, &f1));
            CHECK_OK(sl_image_recipe_crop(500, 375, &b, b2, &f2));
            CHECK(memcmp(b1, b2, sizeof b1) == 0 && f1 == f2);
        }
    free(j);
}

/* One bad value at a time: SL_EINVAL from sl_image_decode with the value
 * in the reason, and the same from sl_loader_create (struct_size is set
 * in the loop). */
typedef struct bad_case {
    int preset;
    sl_image_recipe r;
    const char *reason_part;
} bad_case;

static const bad_case bad_cases[] = {
    {SL_PRESET_TRAIN, {.interpolation = 7}, "interpolation 7"},
    {SL_PRESET_TRAIN, {.height = 32}, "both height and width"},
    {SL_PRESET_TRAIN, {.height = 20000, .width = 32}, "20000x32 out of range"},
    {SL_PRESET_TRAIN, {.scale_min = 0.5, .scale_max = 0.2}, "scale (0.5, 0.2)"},
    {SL_PRESET_TRAIN, {.scale_min = 0.0, .scale_max = 1.5}, "scale (0, 1.5)"},
    {SL_PRESET_TRAIN, {.scale_min = NAN, .scale_max = 1.0}, "scale (nan, 1)"},
    {SL_PRESET_TRAIN, {.ratio_min = 2.0, .ratio_max = 1.0}, "ratio (2, 1)"},
    {SL_PRESET_TRAIN, {.ratio_min = 0.0, .ratio_max = 1.0}, "ratio (0, 1)"},
    {SL_PRESET_TRAIN, {.hflip = 1.5}, "hflip probability 1.5"},
    {SL_PRESET_TRAIN, {.hflip = -0.5}, "hflip probability -0.5"},
    {SL_PRESET_VAL, {.crop_pct = 1.2}, "crop_pct 1.2"},
    {SL_PRESET_VAL, {.crop_pct = 0.01}, "crop_pct 0.01"},
    {SL_PRESET_VAL, {.crop_pct = 0.9, .resize = 40}, "not both"},
    {SL_PRESET_VAL, {.resize = 20}, "resize 20 must be from the output's longer side 32"},
    {SL_PRESET_VAL, {.height = 32, .width = 48, .resize = 40}, "resize 40 must be from the output's longer side 48"},
};

TEST(bad_recipes_refused_with_reason) {
    unsigned long n;
    unsigned char *j = fx_jpeg_bytes(120, 90, 5, 0, 90, &n);
    fx_dataset d;
    fx_simple(&d, 4, 0, 64, 96);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        sl_image_recipe r = c->r;
        r.struct_size = sizeof r;
        sl_decode_opts o;
        sl_decode_opts_init(&o);
        o.preset = c->preset;
        o.size = 32;
        o.recipe = &r;
        uint8_t *out;
        size_t len;
        char why[200];
        int rc = decode(j, n, &o, &out, &len, why, sizeof why);
        if (rc != SL_EINVAL || !strstr(why, c->reason_part))
            SL_FAIL("case %zu: rc %d, reason '%s', want SL_EINVAL and '%s'", i, rc, why, c->reason_part);
        sl_config cfg;
        sl_config_init(&cfg);
        cfg.source = d.root;
        cfg.preset = c->preset;
        cfg.size = 32;
        cfg.recipe = &r;
        sl_loader *ld = NULL;
        char err[256] = "";
        CHECK_EQ(sl_loader_create(&cfg, &ld, err, sizeof err), SL_EINVAL);
        CHECK_STR_CONTAINS(err, c->reason_part);
        CHECK(ld == NULL);
    }
    free(j);
}

/* hflip: never (SL_HFLIP_NEVER), always (1), and a rate near p. Boxes
 * stay within scale and ratio (torchvision's rounding: one pixel). */
TEST(train_box_follows_scale_ratio_hflip) {
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_TRAIN;
    sl_image_recipe r = {.struct_size = sizeof r, .scale_min = 0.25, .scale_max = 0.5, .ratio_min = 0.5,
                         .ratio_max = 2.0};
    o.recipe = &r;
    const double ps[3] = {SL_HFLIP_NEVER, 1.0, 0.2};
    for (int k = 0; k < 3; k++) {
        r.hflip = ps[k];
        int flips = 0, fallback = 0;
        for (uint64_t i = 0; i < 2000; i++) {
            uint32_t box[4];
            int flip;
            o.index = i;
            CHECK_OK(sl_image_recipe_crop(640, 480, &o, box, &flip));
            flips += flip;
            CHECK(box[0] + box[2] <= 640 && box[1] + box[3] <= 480 && box[2] && box[3]);
            double area = (double)box[2] * box[3] / (640.0 * 480.0), ratio = (double)box[2] / box[3];
            if (area < 0.25 - 0.01 || area > 0.5 + 0.01 || ratio < 0.5 * 0.99 || ratio > 2.0 * 1.01) fallback++;
        }
        CHECK_EQ(fallback, 0); /* 640x480 always fits these ranges */
        if (k == 0) CHECK_EQ(flips, 0);
        if (k == 1) CHECK_EQ(flips, 2000);
        if (k == 2) CHECK(flips > 400 - 4 * 18 && flips < 400 + 4 * 18); /* 4 sigma of Binomial(2000, 0.2) */
    }
}

/* Extreme aspect ratios, straight at the planner (no pixels needed): no
 * double is cast out of range (UBSan aborts the test otherwise), and the
 * answer is a clean error or a box inside the image. */
TEST(extreme_aspect_ratios_plan_cleanly) {
    const uint32_t dims[][2] = {{1, 16777216}, {16777216, 1}, {1, 1}, {2147483647u, 1}, {1, 2147483647u},
                                {65535, 1}, {3, 2147483647u}};
    const sl_image_recipe recipes[] = {
        {0},
        {.ratio_min = 0.001, .ratio_max = 0.001},
        {.ratio_min = 1000, .ratio_max = 1000, .scale_min = 1, .scale_max = 1},
        {.height = 16384, .width = 1, .crop_pct = 0.05},
        {.height = 1, .width = 16384, .interpolation = SL_INTERP_BICUBIC},
        {.resize = 65536},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++)
            for (int p = 0; p < 2; p++) {
                sl_image_info info = {dims[i][0], dims[i][1], 3, SL_FORMAT_PNG, 0, 1, 8};
                sl__recipe rc;
                char why[200] = "";
                if (sl__recipe_make(both[p], 224, &recipes[k], 0, 0, &rc, why, sizeof why)) continue;
                sl__plan_params pp = {&rc, 1, 2, 3, NULL};
                sl__plan plan;
                int r = sl__plan_sample(&info, &pp, &plan, why, sizeof why);
                if (r) {
                    if (r != SL_ELIMIT && r != SL_EINVAL && r != SL_EOVERFLOW)
                        SL_FAIL("%ux%u recipe %zu: rc %d", dims[i][0], dims[i][1], k, r);
                    CHECK(why[0] != 0);
                    continue;
                }
                CHECK((uint64_t)plan.req.x + plan.req.w <= info.width);
                CHECK((uint64_t)plan.req.y + plan.req.h <= info.height);
                CHECK(plan.req.w >= 1 && plan.req.h >= 1);
            }
    /* the case: a 1 x 16777216 image under the classic val preset */
    sl_image_info thin = {1, 16777216, 3, SL_FORMAT_PNG, 0, 1, 8};
    sl__recipe rc;
    CHECK_OK(sl__recipe_make(SL_PRESET_VAL, 224, NULL, 0, 0, &rc, NULL, 0));
    sl__plan_params pp = {&rc, 0, 0, 0, NULL};
    sl__plan plan;
    char why[200];
    CHECK_EQ(sl__plan_sample(&thin, &pp, &plan, why, sizeof why), SL_ELIMIT);
    CHECK_STR_CONTAINS(why, "1x16777216 is too elongated");
}

/* A quota of exactly plan.mem never refuses, whatever the recipe: the
 * bound from the header covers bicubic taps, vertical-first accumulators,
 * non-square outputs and the exact (less DCT-scaled) windows. */
TEST(plan_mem_bound_holds_for_recipes) {
    const uint32_t sizes[][2] = {{500, 375}, {375, 500}, {97, 61}, {1600, 1200}, {300, 1000}};
    const sl_image_recipe recipes[] = {
        {0},
        {.interpolation = SL_INTERP_BICUBIC},
        {.height = 37, .width = 300, .interpolation = SL_INTERP_BICUBIC},
        {.height = 300, .width = 37},
        {.scale_min = 0.01, .scale_max = 1, .ratio_min = 0.1, .ratio_max = 10, .interpolation = SL_INTERP_BICUBIC},
        {.crop_pct = 1.0, .interpolation = SL_INTERP_BICUBIC},
        {.height = 96, .width = 160, .crop_pct = 0.95},
    };
    const uint32_t flags[2] = {0, SL_FLAG_FAST};
    sl__decoder *d = sl__decoder_new();
    CHECK(d != NULL);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned long n;
        unsigned char *j = fx_jpeg_bytes(sizes[i][0], sizes[i][1], i, 0, 90, &n);
        sl_image_info info;
        CHECK_OK(sl__probe(j, n, &info, NULL, 0));
        for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++)
            for (int p = 0; p < 2; p++)
                for (int f = 0; f < 2; f++)
                    for (uint64_t index = 0; index < 4; index++) {
                        sl__recipe rc;
                        char why[200] = "";
                        CHECK_OK(sl__recipe_make(both[p], 64, &recipes[k], flags[f], 0, &rc, why, sizeof why));
                        sl__plan_params pp = {&rc, 5, 0, index, NULL};
                        sl__plan plan;
                        if (sl__plan_sample(&info, &pp, &plan, why, sizeof why)) continue; /* too thin for val */
                        uint8_t *out = malloc((size_t)plan.out_w * plan.out_h * plan.channels);
                        CHECK(out != NULL);
                        sl__quota q = {plan.mem, 0, 0, 0};
                        int r = sl__run(d, j, n, &info, &plan, &q, out, why, sizeof why);
                        if (r)
                            SL_FAIL("%ux%u recipe %zu preset %d fast %d index %llu: rc %d (%s), quota %llu", sizes[i][0],
                                    sizes[i][1], k, both[p], f, (unsigned long long)index, r, why,
                                    (unsigned long long)plan.mem);
                        CHECK_EQ(q.used, 0);
                        free(out);
                    }
        free(j);
    }
    sl__decoder_free(d);
}

/* A loader with a non-square recipe: the image field is [n, 3, H, W] with
 * C-order strides, and every sample is the one sl_image_decode gives. */
TEST(loader_non_square_output) {
    fx_dataset d;
    fx_simple(&d, 6, 0, 80, 200);
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = d.root;
    cfg.batch_size = 3;
    cfg.shuffle = 0;
    cfg.workers = 2;
    cfg.budget = 32u << 20;
    sl_image_recipe r = {.struct_size = sizeof r, .height = 24, .width = 40, .interpolation = SL_INTERP_BICUBIC,
                         .hflip = 1.0};
    cfg.recipe = &r;
    sl_loader *ld;
    char err[256];
    CHECK_OK(sl_loader_create(&cfg, &ld, err, sizeof err));
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    sl_field f;
    CHECK_OK(sl_batch_find(b, "image", &f));
    CHECK_EQ(f.ndim, 4);
    CHECK_EQ(f.shape[1], 3);
    CHECK_EQ(f.shape[2], 24);
    CHECK_EQ(f.shape[3], 40);
    CHECK_EQ(f.strides[3], 1);
    CHECK_EQ(f.strides[2], 40);
    CHECK_EQ(f.strides[1], 24 * 40);
    CHECK_EQ(f.strides[0], 3 * 24 * 40);
    sl_field idx;
    CHECK_OK(sl_batch_find(b, "index", &idx));
    for (int64_t s = 0; s < f.shape[0]; s++) {
        int64_t k = ((int64_t *)idx.data)[s];
        char path[400];
        snprintf(path, sizeof path, "%s/%s", d.root, d.rel[k]);
        FILE *fp = fopen(path, "rb");
        CHECK(fp != NULL);
        static unsigned char data[1 << 20];
        size_t n = fread(data, 1, sizeof data, fp);
        fclose(fp);
        sl_decode_opts o;
        sl_decode_opts_init(&o);
        o.preset = SL_PRESET_TRAIN, o.size = cfg.size, o.recipe = cfg.recipe, o.index = (uint64_t)k;
        uint8_t want[3 * 24 * 40];
        CHECK_OK(sl_image_decode(data, n, &o, want, sizeof want, err, sizeof err));
        CHECK(memcmp((uint8_t *)f.data + s * f.strides[0], want, sizeof want) == 0);
    }
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
}

/* ---- the CLI flags ------------------------------------------------------ */

/* sluice ARGS, stdout and stderr together */
static int run(const char *args, char *out, size_t cap) {
    char all[2048];
    snprintf(all, sizeof all, "%s 2>&1", args);
    return fx_sluice(all, out, cap);
}

TEST(cli_recipe_flags) {
    fx_dataset d;
    fx_simple(&d, 4, 0, 200, 300);
    char args[1024], out[8192], ppm[320];
    snprintf(ppm, sizeof ppm, "%s/out.ppm", d.root);
    snprintf(args, sizeof args,
             "decode '%s/%s' --preset val --size 48,80 --crop-pct 0.9 --interpolation bicubic -o '%s'", d.root,
             d.rel[0], ppm);
    CHECK_EQ(run(args, out, sizeof out), 0);
    FILE *f = fopen(ppm, "rb");
    CHECK(f != NULL);
    char head[32] = "";
    CHECK(fread(head, 1, 10, f) == 10);
    fclose(f);
    CHECK(!strncmp(head, "P6\n80 48\n", 9));
    snprintf(args, sizeof args,
             "bench '%s' --json --batch 2 --budget 32M --batches 2 --size 40,24 --scale 0.3,0.9 --ratio 0.5,2 "
             "--hflip 0 --fast --max-scans 10",
             d.root);
    CHECK_EQ(run(args, out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "\"height\": 40, \"width\": 24");
    /* bad values: exit 2, the flag and what it takes */
    const char *bad[][2] = {{"--scale 0.5", "--scale takes A,B"},
                            {"--ratio x,1", "--ratio takes A,B"},
                            {"--interpolation lanczos", "--interpolation takes bilinear or bicubic"},
                            {"--hflip 2", "--hflip takes a probability"},
                            {"--size 0,5", "--size takes N or H,W"},
                            {"--crop-pct", "--crop-pct needs a value"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "bench '%s' %s", d.root, bad[i][0]);
        CHECK_EQ(run(args, out, sizeof out), 2);
        CHECK_STR_CONTAINS(out, bad[i][1]);
        snprintf(args, sizeof args, "decode '%s/%s' -o /dev/null %s", d.root, d.rel[0], bad[i][0]);
        CHECK_EQ(run(args, out, sizeof out), 2);
        CHECK_STR_CONTAINS(out, bad[i][1]);
    }
    /* values the library refuses: its reason */
    snprintf(args, sizeof args, "bench '%s' --preset val --crop-pct 1.5 --batches 1", d.root);
    CHECK_EQ(run(args, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "crop_pct 1.5 is out of range");
}
