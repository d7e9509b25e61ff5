/*
 * Windowed array reads: one pread per run vs one pread per covering span
 * (ops/array.c's two strategies), against reading the whole file (what
 * np.load does), from the page cache. Prints one line per case and
 * strategy: milliseconds per sample, bytes read from the file, and the
 * output rate. This is what SL_ARRAY_GAP in src/ops/array.c was set from.
 *
 *   bench/array_read.sh [DIR]   (builds this against build/libsluice.a)
 *   array_read DIR [REPEATS]
 *
 * Cases (files made in DIR on first use, float32 .npy, ~130 MB in all):
 *   hwc:    720x1280x3 HWC, crop 256x256       (deblurring blur/sharp)
 *   chw:    32x720x1280 CHW, crop 256x256      (event voxels)
 *   points: 120000x4 rows, points 16384        (a LiDAR scan)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "format/array.h"
#include "ops/array.h"

static int make_npy(const char *path, const uint64_t *shape, int ndim) {
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu, ", (unsigned long long)shape[i]);
        count *= shape[i];
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t hl = (10 + (size_t)n + 1 + 63) / 64 * 64 - 10;
    uint8_t head[512];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (uint8_t)hl, head[9] = (uint8_t)(hl >> 8);
    memset(head + 10, ' ', hl);
    memcpy(head + 10, dict, (size_t)n);
    head[10 + hl - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return perror(path), -1;
    fwrite(head, 1, 10 + hl, f);
    float buf[4096];
    for (uint64_t i = 0; i < count; i += 4096) {
        size_t k = (size_t)SL_MIN((uint64_t)4096, count - i);
        for (size_t j = 0; j < k; j++) buf[j] = (float)((i + j) % 1000003);
        fwrite(buf, 4, k, f);
    }
    return fclose(f);
}

static void whole_file(const char *name, int fd, uint64_t size, int reps) {
    uint8_t *buf = malloc(size);
    uint64_t t0 = sl__now_ns();
    for (int r = 0; r < reps; r++)
        if (pread(fd, buf, size, 0) != (ssize_t)size) abort();
    double ms = (double)(sl__now_ns() - t0) / 1e6 / reps;
    printf("%-7s %-22s %8.3f ms  read %9llu B  %7.0f MB/s of file\n", name, "whole file (np.load)", ms,
           (unsigned long long)size, (double)size / ms / 1e3);
    free(buf);
}

static void run_case(const char *dir, const char *name, const uint64_t *shape, int ndim, const sl__array_spec *spec,
                     int reps) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (make_npy(path, shape, ndim)) exit(1);
    int fd = open(path, O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    sl__sample_file f = {.fd = fd, .size = (uint64_t)st.st_size};
    sl__array_info a;
    sl__array_shape out;
    char why[256];
    if (sl__npy_read_header(fd, 0, f.size, &a, why, sizeof why) || sl__array_out_shape(spec, &a, &out, why, sizeof why)) {
        fprintf(stderr, "%s: %s\n", path, why);
        exit(1);
    }
    whole_file(name, fd, f.size, reps); /* also warms the page cache */
    uint8_t *dst = malloc(out.bytes);
    for (int strategy = 0; strategy < 2; strategy++) {
        uint64_t t0 = sl__now_ns();
        for (int r = 0; r < reps; r++) {
            sl__rng rng;
            sl__rng_init(&rng, 7, 0, (uint64_t)r);
            sl__array_plan p;
            if (sl__array_plan_sample(&a, spec, &out, &rng, &p, why, sizeof why)) abort();
            p.coalesce = strategy;
            sl__quota q = {SL_ARRAY_CHUNK + (a.shape[0] + 63) / 64 * 8 + 256, 0, 0, 0};
            if (sl__array_read(&f, &a, &p, &q, dst, NULL, why, sizeof why)) {
                fprintf(stderr, "%s\n", why);
                exit(1);
            }
        }
        double ms = (double)(sl__now_ns() - t0) / 1e6 / reps;
        printf("%-7s %-22s %8.3f ms  out  %9llu B  %7.0f MB/s of output\n", name,
               strategy ? "coalesced spans" : "one pread per run", ms, (unsigned long long)out.bytes,
               (double)out.bytes / ms / 1e3);
    }
    free(dst);
    close(fd);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: array_read DIR [REPEATS]\n");
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 50;
    mkdir(argv[1], 0755);
    uint64_t hwc[3] = {720, 1280, 3}, chw[3] = {32, 720, 1280}, pts[2] = {120000, 4};
    sl__array_spec s_hwc = {.layout = "HWC", .crop = {256, 256}}, s_chw = {.layout = "CHW", .crop = {256, 256}},
                   s_pts = {.points = 16384};
    run_case(argv[1], "hwc", hwc, 3, &s_hwc, reps);
    run_case(argv[1], "chw", chw, 3, &s_chw, reps);
    run_case(argv[1], "points", pts, 2, &s_pts, reps);
    return 0;
}
