/* ctest: tsan */
/*
 * kind "array" through the loader (src/fields/array.c) on the fields demo
 * data (tools/make_demo_fields.py): its options parsed strictly, paired
 * crops aligned (sharp = blur + 1 exactly in every crop), a LiDAR
 * sequence of raw scans with points and "<name>_len" [batch, length],
 * the same bytes for 1 and 8 workers, resume mid-epoch, hostile .npy
 * files as error records. The headers, ops and read themselves are tested
 * in test_array.c; numpy comparisons in tests/python/test_arrays.py.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "fixture.h"
#include "sluice.h"

static const char *demo(void) { return fx_demo_fields("--pairs 10 --scans 24"); }

/* The demo's schema NAME.fields.json ("pairs" or "lidar"; read once, kept). */
static const char *schema(const char *name) {
    static char *text[2];
    int k = name[0] == 'l';
    char path[512];
    snprintf(path, sizeof path, "%s/%s.fields.json", demo(), name);
    if (!text[k]) text[k] = fx_read_text(path);
    return text[k];
}

static void cfg_for(sl_config *c, const char *name, const char *fields, uint32_t workers) {
    static char src[8][512];
    static int k;
    char *s = src[k++ % 8];
    snprintf(s, 512, "%s/%s.jsonl", demo(), name);
    sl_config_init(c);
    c->source = s;
    c->fields = fields;
    c->batch_size = 3;
    c->workers = workers;
    c->budget = 64 << 20;
    c->seed = 11;
    c->flags = SL_FLAG_CHECKSUM;
}

static sl_loader *create(const sl_config *c) {
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    return ld;
}

static const char *refusal(const char *fields) {
    static char err[512];
    sl_config c;
    cfg_for(&c, "pairs", fields, 1);
    fx_create_fails(&c, err, sizeof err);
    return err;
}

TEST(options_refused_with_the_field_named) {
#define A(opts) "{\"blur\": {\"kind\": \"array\", " opts "}}"
    CHECK_STR_CONTAINS(refusal(A("\"format\": \"raw\"")), "needs \"dtype\" (stored) and \"shape\"");
    CHECK_STR_CONTAINS(refusal(A("\"format\": \"npy\", \"shape\": [3]")), "describe raw files");
    CHECK_STR_CONTAINS(refusal(A("\"dtype\": \"float16\", \"cast\": \"uint8\"")), "give one");
    CHECK_STR_CONTAINS(refusal(A("\"dtype\": \"complex64\"")), "must be a dtype name");
    CHECK_STR_CONTAINS(refusal(A("\"layout\": \"HWH\"")), "distinct capital letters");
    CHECK_STR_CONTAINS(refusal(A("\"crop\": [32]")), "[height, width]");
    CHECK_STR_CONTAINS(refusal(A("\"crop\": [0, 3]")), "\"crop\" must be a list");
    CHECK_STR_CONTAINS(refusal(A("\"shape\": [-2, 4], \"dtype\": \"float32\"")), "-1 (one free axis)");
    CHECK_STR_CONTAINS(refusal(A("\"points\": 0")), "\"points\" must be");
    CHECK_STR_CONTAINS(refusal(A("\"pints\": 4")), "unknown option \"pints\"");
    /* the spec against the first sample: a crop needs H and W in the layout */
    CHECK_STR_CONTAINS(refusal(A("\"crop\": [8, 8]")), "field \"blur\": its shape comes from the first sample");
    CHECK_STR_CONTAINS(refusal(A("\"layout\": \"HW\"")), "layout 'HW' names 2 axes, the array has 3");
#undef A
}

TEST(pairs_stay_aligned_in_every_crop) {
    sl_config c;
    cfg_for(&c, "pairs", schema("pairs"), 4);
    sl_loader *ld = create(&c);
    sl_batch *b;
    uint64_t seen = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        while (sl_loader_next(ld, &b) == 0) {
            sl_field blur, sharp, events;
            CHECK_OK(sl_batch_find(b, "blur", &blur));
            CHECK_OK(sl_batch_find(b, "sharp", &sharp));
            CHECK_OK(sl_batch_find(b, "events", &events));
            CHECK_EQ(blur.dtype, SL_DTYPE_FLOAT32);
            CHECK(blur.ndim == 4 && blur.shape[1] == 32 && blur.shape[2] == 32 && blur.shape[3] == 3);
            CHECK(events.ndim == 4 && events.shape[1] == 8 && events.shape[2] == 32 && events.shape[3] == 32);
            const float *x = blur.data, *y = sharp.data;
            for (uint64_t e = 0; e < blur.nbytes / 4; e++) CHECK(y[e] == x[e] + 1.0f);
            seen += sl_batch_len(b);
            sl_loader_release(ld, b);
        }
    }
    CHECK_EQ(seen, 20);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 0);
    sl_loader_destroy(ld);
}

/* Each output row of a scan is a row of the file, in file order. */
static void check_scan(const char *rel, const float *out, int64_t rows, int64_t points) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", demo(), rel);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    float *scan = malloc(4 * 4 * 4000);
    size_t n = fread(scan, 16, 4000, f);
    fclose(f);
    CHECK_EQ((int64_t)n < points ? (int64_t)n : points, rows);
    size_t at = 0;
    for (int64_t r = 0; r < rows; r++) {
        while (at < n && memcmp(scan + 4 * at, out + 4 * r, 16)) at++;
        CHECK(at < n); /* found, after the previous row */
        at++;
    }
    for (int64_t r = rows * 4; r < points * 4; r++) CHECK(out[r] == 0.0f);
    free(scan);
}

TEST(lidar_sequence_gives_points_and_len) {
    sl_config c;
    cfg_for(&c, "lidar", schema("lidar"), 3);
    c.shuffle = 0;
    sl_loader *ld = create(&c);
    sl_batch *b;
    int padded = 0, subset = 0;
    while (sl_loader_next(ld, &b) == 0) {
        sl_field pts, len, ix;
        CHECK_OK(sl_batch_find(b, "lidar", &pts));
        CHECK_OK(sl_batch_find(b, "lidar_len", &len));
        CHECK_OK(sl_batch_find(b, "index", &ix));
        CHECK(pts.ndim == 4 && pts.shape[1] == 8 && pts.shape[2] == 2048 && pts.shape[3] == 4);
        CHECK(len.ndim == 2 && len.shape[1] == 8 && len.dtype == SL_DTYPE_INT64);
        for (uint32_t j = 0; j < sl_batch_len(b); j++) {
            int64_t row = ((const int64_t *)ix.data)[j];
            for (int k = 0; k < 8; k++) { /* row r holds scans 4r .. 4r + 7 */
                char rel[64];
                snprintf(rel, sizeof rel, "lidar/scan_%06d.bin", (int)(4 * row + k));
                int64_t n = ((const int64_t *)len.data)[j * 8 + k];
                check_scan(rel, (const float *)pts.data + ((uint64_t)j * 8 + k) * 2048 * 4, n, 2048);
                padded += n < 2048;
                subset += n == 2048;
            }
        }
        sl_loader_release(ld, b);
    }
    CHECK(padded > 0 && subset > 0); /* scans of 2000-3000 rows: both cases met */
    sl_loader_destroy(ld);
}

TEST(same_bytes_workers_1_and_8_and_resume) {
    const char *names[2] = {"pairs", "lidar"};
    for (int k = 0; k < 2; k++) {
        sl_config c1, c8;
        cfg_for(&c1, names[k], schema(names[k]), 1);
        cfg_for(&c8, names[k], schema(names[k]), 8);
        uint64_t n1, n8;
        CHECK_EQ(fx_epoch_sum(&c1, &n1), fx_epoch_sum(&c8, &n8));
        CHECK_EQ(n1, n8);
        fx_check_resume(&c8, &c1, 1);
    }
}

/* The demo's first pair rewritten hostile: each an error record naming
 * the reason, the other samples delivered. */
TEST(hostile_npy_are_error_records) {
    char path[512], m[600];
    snprintf(path, sizeof path, "%s/pairs/000001_blur.npy", demo());
    sl__sample_file f = open_sample(demo(), "pairs/000001_blur.npy");
    uint8_t *bytes = malloc(f.size);
    CHECK_EQ(pread(f.fd, bytes, f.size, 0), (ssize_t)f.size);
    close(f.fd);
    fx_write(path, bytes, f.size - 7); /* truncated */
    snprintf(path, sizeof path, "%s/pairs/000002_sharp.npy", demo());
    const char *huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 96, 3), }";
    memcpy(bytes + 10, huge, strlen(huge));
    fx_write(path, bytes, f.size); /* 2^40 rows claimed: refused before any allocation */
    snprintf(path, sizeof path, "%s/pairs/000003_events.npy", demo());
    fx_write(path, "\x93NUMPY\x01\x00\xff\xff{'descr'", 18); /* header past the end */
    free(bytes);
    sl_config c;
    cfg_for(&c, "pairs", schema("pairs"), 2);
    c.shuffle = 0;
    sl_loader *ld = create(&c);
    sl_batch *b;
    uint64_t n = 0;
    while (sl_loader_next(ld, &b) == 0) {
        n += sl_batch_len(b);
        sl_loader_release(ld, b);
    }
    CHECK_EQ(n, 7);
    sl_error_record e[4];
    CHECK_EQ(sl_loader_errors(ld, 0, e, 4), 3);
    snprintf(m, sizeof m, "%s | %s | %s", e[0].reason, e[1].reason, e[2].reason);
    CHECK_STR_CONTAINS(m, "blur: npy: the shape needs");
    CHECK_STR_CONTAINS(m, "(truncated)");
    CHECK_STR_CONTAINS(m, "sharp: npy: the shape needs 1266637395197952 bytes");
    CHECK_STR_CONTAINS(m, "events: ");
    CHECK(e[0].index == 1 && e[1].index == 2 && e[2].index == 3);
    sl_loader_destroy(ld);
}

/* A .npy file: v1 header for shape (a Python tuple's text), little float32, data. */
static void write_npy(const char *path, const char *shape, const float *data, size_t n) {
    char hdr[128];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape);
    while ((len + 11) % 64) hdr[len++] = ' ';
    hdr[len - 1] = '\n';
    uint8_t *b = malloc(10 + (size_t)len + n * 4);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)len, b[9] = 0;
    memcpy(b + 10, hdr, (size_t)len);
    if (n) memcpy(b + 10 + len, data, n * 4);
    fx_write(path, b, 10 + (size_t)len + n * 4);
    free(b);
}

/* A zero-size points array — rows of no elements, however many its header
 * declares (2^40 in a file of 128 bytes) — loads as empty rows: no subset
 * to draw and no bitmap, where create refused the whole dataset for its
 * 128 GiB bitmap ("raise the budget to at least 512.0 GiB"). */
TEST(zero_size_points_array_is_empty_rows) {
    char dir[256], path[400], m[400];
    fx_empty_dir(dir, sizeof dir);
    float pts[100 * 3];
    for (int i = 0; i < 300; i++) pts[i] = (float)i;
    snprintf(m, sizeof m, "%s/m.jsonl", dir);
    FILE *f = fopen(m, "w");
    CHECK(f != NULL);
    for (int k = 0; k < 6; k++) {
        snprintf(path, sizeof path, "%s/p%d.npy", dir, k);
        if (k == 3) write_npy(path, "(1099511627776, 0)", NULL, 0);
        else write_npy(path, "(100, 3)", pts, 300);
        fprintf(f, "{\"pts\": \"p%d.npy\", \"label\": %d}\n", k, k);
    }
    fclose(f);
    sl_config c;
    sl_config_init(&c);
    c.source = m;
    c.fields = "{\"pts\": {\"kind\": \"array\", \"points\": 16, \"pad\": [16, 3]}, \"label\": {\"kind\": \"label\"}}";
    c.batch_size = 6;
    c.workers = 2;
    c.budget = 16 << 20;
    c.shuffle = 0;
    sl_loader *ld = create(&c);
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    CHECK_EQ(sl_batch_len(b), 6);
    sl_field p, len;
    CHECK_OK(sl_batch_find(b, "pts", &p));
    CHECK_OK(sl_batch_find(b, "pts_len", &len));
    const float *row = (const float *)p.data + 3 * 16 * 3;
    for (int i = 0; i < 16 * 3; i++) CHECK(row[i] == 0.0f);
    CHECK_EQ(((const int64_t *)len.data)[3], 16);
    CHECK_EQ(((const int64_t *)len.data)[2], 16);
    sl_loader_release(ld, b);
    CHECK_EQ(sl_loader_errors(ld, 0, (sl_error_record[1]){0}, 1), 0);
    sl_loader_destroy(ld);
}
