/* Tests of `sluice plan`: run the CLI over a small JPEG dataset of known
 * sizes made here with libjpeg, and check what it measures and predicts. */
#include "fixture.h" /* first: it defines _GNU_SOURCE; fx_sluice runs the CLI */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jpeglib.h>

#include "check.h"
#include "monitor/json.h"

#define NIMG 12

/* Image i: (64 + 8i) x (48 + 4i), RGB noise-free gradient. */
static void dims(int i, int *w, int *h) {
    *w = 64 + 8 * i;
    *h = 48 + 4 * i;
}

static long write_jpeg(const char *path, int w, int h) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w * 3);
    CHECK(row != NULL);
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < w; x++) {
            row[3 * x] = (unsigned char)(x * 3);
            row[3 * x + 1] = (unsigned char)(c.next_scanline * 5);
            row[3 * x + 2] = (unsigned char)((x + (int)c.next_scanline) * 2);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    long size = ftell(f);
    fclose(f);
    return size;
}

/* Make the dataset; returns the mean encoded and decoded (W*H*3) bytes. */
static void make_dataset(char *dir, size_t len, double *enc_mean, double *dec_mean) {
    snprintf(dir, len, "/tmp/sluice-test-plan-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    double enc = 0, dec = 0;
    for (int i = 0; i < NIMG; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/class%d", dir, i % 2);
        if (mkdir(path, 0755) && errno != EEXIST) SL_FAIL("mkdir %s", path);
        snprintf(path, sizeof path, "%s/class%d/img%02d.jpg", dir, i % 2, i);
        int w, h;
        dims(i, &w, &h);
        enc += (double)write_jpeg(path, w, h);
        dec += (double)w * h * 3;
    }
    *enc_mean = enc / NIMG;
    *dec_mean = dec / NIMG;
}

static void remove_dataset(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

/* Run `sluice plan args`, capture stdout (at most cap-1 bytes); returns the exit status. */
static int run_plan(const char *args, char *out, size_t cap) {
    char all[2048];
    snprintf(all, sizeof all, "plan %s", args);
    return fx_sluice(all, out, cap);
}

static double num(const char *json, const char *path) {
    double v;
    int rc = sl__json_number(json, strlen(json), path, &v);
    if (rc) SL_FAIL("no number at %s in: %.300s", path, json);
    return v;
}

TEST(known_sizes_json) {
    char dir[256], args[1024];
    double enc_mean, dec_mean;
    make_dataset(dir, sizeof dir, &enc_mean, &dec_mean);
    static char out[1 << 16];
    snprintf(args, sizeof args, "'%s' --json --no-python --batch 4 --size 32 --budget 12M --sample 100 --preset val", dir);
    CHECK_EQ(run_plan(args, out, sizeof out), 0);
    CHECK_EQ(num(out, "dataset_samples"), NIMG);
    /* --sample above the dataset: every file, each once. */
    CHECK_EQ(num(out, "sampled"), NIMG);
    CHECK_EQ(num(out, "failed"), 0);
    CHECK_EQ((long)num(out, "encoded_bytes_mean"), (long)(enc_mean + 0.5));
    CHECK_EQ((long)num(out, "decoded_bytes_mean"), (long)(dec_mean + 0.5));
    int w, h;
    dims(NIMG - 1, &w, &h);
    CHECK_EQ(num(out, "decoded_bytes_max"), w * h * 3);
    /* every output of a sample: the image, its label and its index */
    CHECK_EQ(num(out, "sample_bytes"), 3 * 32 * 32 + 8 + 8);
    CHECK(num(out, "decode_s_per_sample") > 0);
    CHECK(num(out, "one_core_samples_per_s") > 0);
    /* A slot holds at least a batch of images. */
    double slot = num(out, "sluice_model.slot_bytes");
    CHECK(slot >= 4 * 3 * 32 * 32);
    /* The worker base is the documented constant with --no-python. */
    CHECK_EQ(num(out, "worker_base.bytes"), 16 << 20);
    CHECK_STR_CONTAINS(out, "\"measured\":false");
    /* Rows: the formula, and fits against the budget. */
    double base = num(out, "sluice_model.base_bytes"), scratch = num(out, "sluice_model.scratch_per_worker_bytes");
    double cores = num(out, "cores"), rate = num(out, "one_core_samples_per_s");
    for (int i = 0;; i++) {
        char path[64];
        double v;
        snprintf(path, sizeof path, "rows.%d.workers", i);
        if (sl__json_number(out, strlen(out), path, &v)) {
            CHECK(i >= 9); /* at least workers 1, 2, 4 by prefetch 1, 2, 4 */
            break;
        }
        double wk = v;
        snprintf(path, sizeof path, "rows.%d.prefetch", i);
        double pf = num(out, path);
        snprintf(path, sizeof path, "rows.%d.sluice_bytes", i);
        double sb = num(out, path);
        CHECK(sb > base + pf * slot + wk * scratch - 2 && sb < base + pf * slot + wk * scratch + 2);
        snprintf(path, sizeof path, "rows.%d.dataloader_bytes", i);
        double db = num(out, path);
        double want = wk * pf * 4 * num(out, "sample_bytes") + wk * (16 << 20);
        CHECK(db > want - 2 && db < want + 2);
        snprintf(path, sizeof path, "rows.%d.samples_per_s", i);
        double r = num(out, path);
        double wr = (wk < cores ? wk : cores) * rate;
        CHECK(r > wr * 0.999 - 0.1 && r < wr * 1.001 + 0.1);
    }
    /* 16 MiB a DataLoader worker: no row fits 12 MiB. */
    CHECK(strstr(out, "\"dataloader_fits\":true") == NULL);
    /* sluice's own choice for 12 MiB, and the model predicts its reservation. */
    double cw = num(out, "choice.workers"), cs = num(out, "choice.slots");
    double fixed = num(out, "choice.fixed_bytes"), model = num(out, "choice.model_bytes");
    CHECK(cw >= 1 && cs >= 1);
    CHECK(fixed <= 12 << 20);
    CHECK(model > fixed * 0.95 && model < fixed * 1.05);
    remove_dataset(dir);
}

TEST(table_and_refusal) {
    char dir[256], args[1024];
    double enc_mean, dec_mean;
    make_dataset(dir, sizeof dir, &enc_mean, &dec_mean);
    static char out[1 << 16];
    snprintf(args, sizeof args, "'%s' --no-python --batch 4 --size 32 --budget 12M --sample 5", dir);
    CHECK_EQ(run_plan(args, out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "5 sampled evenly");
    CHECK_STR_CONTAINS(out, "workers prefetch");
    CHECK_STR_CONTAINS(out, "sluice would choose");
    CHECK_STR_CONTAINS(out, "constant (not measured)");
    /* A budget below the minimum: sluice says so and the reason, and exits
     * 1 as sluice bench does (the table is printed all the same). */
    snprintf(args, sizeof args, "'%s' --no-python --batch 4 --size 32 --budget 1K --sample 5 2>/dev/null", dir);
    CHECK_EQ(run_plan(args, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "workers prefetch");
    CHECK_STR_CONTAINS(out, "sluice refuses this budget");
    /* Bad input. */
    CHECK_EQ(run_plan("/nonexistent/data --no-python 2>/dev/null", out, sizeof out), 1);
    CHECK_EQ(run_plan("2>/dev/null", out, sizeof out), 2);
    snprintf(args, sizeof args, "'%s' --batch 0 2>/dev/null", dir);
    CHECK_EQ(run_plan(args, out, sizeof out), 2);
    remove_dataset(dir);
}
