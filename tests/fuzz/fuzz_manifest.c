/*
 * Fuzz both manifest parsers (CSV and JSONL) on the same input: neither may
 * crash, read outside the input, or hand the row callback a path that
 * breaks the parsers' promises (non-empty, no NUL, shorter than PATH_MAX).
 * A parse error must name its line.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/source.h"

typedef struct rows {
    uint64_t n;
    uint64_t sum; /* touches every byte handed out, so ASan checks them */
} rows;

static int on_row(void *ctx, const char *path, size_t len, int64_t label) {
    rows *r = ctx;
    if (len == 0 || len >= PATH_MAX || memchr(path, 0, len)) abort();
    for (size_t i = 0; i < len; i++) r->sum += (unsigned char)path[i];
    r->sum += (uint64_t)label;
    r->n++;
    return 0;
}

static void check(int rc, const char *err) {
    if (rc == 0) return;
    if (rc != SL_EPARSE) abort();
    if (strncmp(err, "line ", 5) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    rows r = {0, 0};
    err[0] = 0;
    check(sl__manifest_parse_csv((const char *)data, size, on_row, &r, err, sizeof err), err);
    err[0] = 0;
    check(sl__manifest_parse_jsonl((const char *)data, size, on_row, &r, err, sizeof err), err);
    return 0;
}
