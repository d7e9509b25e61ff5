/*
 * Fuzz the .npy header parser and the array read behind it: parse the
 * input as a whole file, by memory and by pread (they must agree), then
 * plan and read it with a few specs (as is, cast to float32, a crop of the
 * last two axes, points). Nothing may crash, read outside the input, leak
 * or write outside the output; failures are negative SL_E* codes with a
 * reason; a parsed header's sizes must add up to the input's.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/array.h"
#include "ops/array.h"

static void check_rc(int rc, const char *why) {
    if (rc > 0) abort();
    if (rc < 0 && (rc < SL_ESYS || why[0] == 0 || !memchr(why, 0, 256))) abort();
}

static void read_with(const sl__sample_file *f, const sl__array_info *a, const sl__array_spec *spec) {
    char why[256] = "";
    sl__array_shape shape;
    int rc = sl__array_out_shape(spec, a, &shape, why, sizeof why);
    check_rc(rc, why);
    if (rc || shape.bytes > ((uint64_t)16 << 20)) return;
    sl__rng rng;
    sl__rng_init(&rng, 1, 0, a->data_bytes);
    sl__array_plan p;
    rc = sl__array_plan_sample(a, spec, &shape, &rng, &p, why, sizeof why);
    check_rc(rc, why);
    if (rc) return;
    uint8_t *out = malloc(shape.bytes + 1);
    if (!out) return;
    out[shape.bytes] = 0xA5;
    sl__quota q = {p.scratch, 0, 0, 0};
    uint64_t len = 0;
    rc = sl__array_read(f, a, &p, &q, out, &len, why, sizeof why);
    check_rc(rc, why);
    if (q.used != 0 || q.peak > p.scratch || out[shape.bytes] != 0xA5) abort();
    if (!rc && a->ndim && len > shape.shape[0]) abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl__array_info a, b;
    char why[256] = "", why2[256] = "";
    int rc = sl__npy_parse(data, size, size, &a, why, sizeof why);
    check_rc(rc, why);
    int fd = memfd_create("npy", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    int rc2 = sl__npy_read_header(fd, 0, size, &b, why2, sizeof why2);
    check_rc(rc2, why2);
    /* the pread path reads the dict from its first 4 KiB only */
    if (rc2 != rc && !(rc2 == SL_ELIMIT && size > SL_NPY_DICT_MAX)) abort();
    if (!rc && !rc2 && memcmp(&a, &b, sizeof a)) abort();
    if (!rc) {
        if (a.data_offset + a.data_bytes != size || a.ndim > SL_ARRAY_MAX_DIMS) abort();
        sl__sample_file f = {.fd = fd, .offset = 0, .size = size};
        sl__array_spec none = {0}, cast = {.dtype = SL_DTYPE_FLOAT32}, pts = {.points = 3};
        read_with(&f, &a, &none);
        read_with(&f, &a, &cast);
        if (a.ndim >= 1) read_with(&f, &a, &pts);
        if (a.ndim >= 2) {
            sl__array_spec crop = {.crop = {1, 2}};
            memset(crop.layout, 'C', a.ndim);
            crop.layout[a.ndim - 2] = 'H';
            crop.layout[a.ndim - 1] = 'W';
            read_with(&f, &a, &crop);
        }
    }
    close(fd);
    return 0;
}
