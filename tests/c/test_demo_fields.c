/*
 * The fields demo data (tools/make_demo_fields.py, made here into a
 * temporary folder) through this branch's modules, as the pipeline will
 * use them: the shard pattern expands to the shards, every shard scans
 * into samples of jpg + cls whose JPEGs decode; the pairs keep sharp =
 * blur + 1 in every crop of their crop group; each LiDAR scan gives
 * points rows and the right <field>_len.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "files.h"
#include "fixture.h"
#include "base/util.h"
#include "format/array.h"
#include "ops/array.h"
#include "source/wds.h"

static const char *demo(void) { return fx_demo_fields("--pairs 6 --scans 16"); }

static sl__sample_file open_rel(const char *rel) { return open_sample(demo(), rel); }

/* ---- shards ------------------------------------------------------------------- */

typedef struct shard_ctx {
    int fd;
    uint64_t samples;
} shard_ctx;

static int on_sample(void *ctx, const char *prefix, size_t plen, const sl__wds_member *m, uint32_t n, char *err,
                     size_t errlen) {
    shard_ctx *s = ctx;
    CHECK_EQ(n, 2);
    CHECK(strcmp(m[0].key, "jpg") == 0 && strcmp(m[1].key, "cls") == 0);
    uint8_t *jpg = malloc(m[0].size);
    CHECK_EQ(pread(s->fd, jpg, m[0].size, (off_t)m[0].offset), (ssize_t)m[0].size);
    sl_image_info info;
    CHECK_OK(sl_image_probe(jpg, m[0].size, &info));
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_VAL;
    o.size = 32;
    uint8_t out[3 * 32 * 32];
    char why[256];
    if (sl_image_decode(jpg, m[0].size, &o, out, sizeof out, why, sizeof why)) SL_FAIL("%s: %s", prefix, why);
    free(jpg);
    char cls[16] = {0};
    CHECK(m[1].size < sizeof cls);
    CHECK_EQ(pread(s->fd, cls, m[1].size, (off_t)m[1].offset), (ssize_t)m[1].size);
    CHECK(atoi(cls) >= 0 && atoi(cls) < 4);
    s->samples++;
    return 0;
}

static int on_shard(void *ctx, const char *name, size_t len) {
    uint64_t *total = ctx;
    sl__sample_file f = open_rel(name);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    shard_ctx s = {f.fd, 0};
    char err[256];
    sl__wds_stats ws;
    if (sl__wds_scan(f.fd, f.size, &b, on_sample, &s, &ws, err, sizeof err)) SL_FAIL("%s: %s", name, err);
    uint64_t n = ws.samples;
    CHECK_EQ(n, s.samples);
    CHECK_EQ(ws.skipped, 0);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    close(f.fd);
    *total += n;
    return 0;
}

TEST(shards_scan_into_decodable_samples) {
    char pattern[256] = {0}, path[512];
    snprintf(path, sizeof path, "%s/shards.txt", demo());
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(pattern, sizeof pattern, f));
    fclose(f);
    pattern[strcspn(pattern, "\n")] = 0;
    uint64_t total = 0;
    char err[256];
    CHECK_OK(sl__brace_expand(pattern, on_shard, &total, err, sizeof err));
    CHECK_EQ(total, 48);
}

/* ---- arrays ---------------------------------------------------------------------- */

TEST(pairs_stay_aligned_in_every_crop) {
    const char *keys[3] = {"blur", "sharp", "events"}, *layouts[3] = {"HWC", "HWC", "CHW"};
    for (int i = 0; i < 6; i++) {
        float *out[3];
        uint64_t start[3][2];
        for (int k = 0; k < 3; k++) {
            char rel[64];
            snprintf(rel, sizeof rel, "pairs/%06d_%s.npy", i, keys[k]);
            sl__sample_file f = open_rel(rel);
            sl__array_info a;
            char why[256];
            CHECK_OK(sl__npy_read_header(f.fd, 0, f.size, &a, why, sizeof why));
            sl__array_spec spec = {.crop = {32, 32}};
            memcpy(spec.layout, layouts[k], 4);
            sl__array_shape shape;
            CHECK_OK(sl__array_out_shape(&spec, &a, &shape, why, sizeof why));
            sl__rng rng;
            sl__rng_init(&rng, 9, 1, (uint64_t)i); /* the crop group's generator, a copy per field */
            sl__array_plan p;
            CHECK_OK(sl__array_plan_sample(&a, &spec, &shape, &rng, &p, why, sizeof why));
            int h = k == 2 ? 1 : 0;
            start[k][0] = p.start[h], start[k][1] = p.start[h + 1];
            out[k] = malloc(shape.bytes);
            sl__quota q = {p.scratch, 0, 0, 0};
            CHECK_OK(sl__array_read(&f, &a, &p, &q, out[k], NULL, why, sizeof why));
            close(f.fd);
        }
        for (int k = 1; k < 3; k++) CHECK(start[k][0] == start[0][0] && start[k][1] == start[0][1]);
        for (int e = 0; e < 32 * 32 * 3; e++) CHECK(out[1][e] == out[0][e] + 1.0f);
        for (int k = 0; k < 3; k++) free(out[k]);
    }
}

TEST(lidar_scans_give_points_and_len) {
    for (int i = 0; i < 16; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "lidar/scan_%06d.bin", i);
        sl__sample_file f = open_rel(rel);
        int64_t dims[2] = {-1, 4};
        sl__array_info a;
        char why[256];
        CHECK_OK(sl__raw_info(SL_DTYPE_FLOAT32, 0, dims, 2, f.size, &a, why, sizeof why));
        CHECK(a.shape[0] >= 2000 && a.shape[0] <= 3000);
        uint64_t N = i % 2 ? 2048 : 4096; /* a subset, or all rows and zeros */
        sl__array_spec spec = {.points = N};
        sl__array_shape shape;
        CHECK_OK(sl__array_out_shape(&spec, &a, &shape, why, sizeof why));
        shape.shape[0] = N;
        sl__rng rng;
        sl__rng_init(&rng, 9, 1, (uint64_t)i);
        sl__array_plan p;
        CHECK_OK(sl__array_plan_sample(&a, &spec, &shape, &rng, &p, why, sizeof why));
        float *out = malloc(shape.bytes);
        uint64_t len;
        sl__quota q = {p.scratch, 0, 0, 0};
        CHECK_OK(sl__array_read(&f, &a, &p, &q, out, &len, why, sizeof why));
        CHECK_EQ(len, SL_MIN(N, a.shape[0]));
        for (uint64_t r = len; r < N; r++) CHECK(out[r * 4] == 0 && out[r * 4 + 3] == 0);
        for (uint64_t r = 0; r < len; r++) CHECK(out[r * 4 + 3] >= 0 && out[r * 4 + 3] <= 1); /* intensity */
        free(out);
        close(f.fd);
    }
}
