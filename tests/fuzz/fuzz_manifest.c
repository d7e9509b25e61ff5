/*
 * Fuzz the manifest parsers on the same input: the path,label CSV and JSONL
 * parsers, the row tokenizer of tables (every line through sl__jrow_parse,
 * then every value of every row walked as a table would read it) and the
 * CSV record reader with many fields. Nothing may crash, read outside the
 * input, or break the parsers' promises: paths non-empty, without NUL,
 * shorter than PATH_MAX; a row's members inside its line with unique keys;
 * a list's elements as many as counted; a parse error naming its line.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/jsonrow.h"
#include "source/manifest.h"

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

/* Every value of a parsed row, read as the table reads it. */
static void walk(const sl__jrow *row, size_t len, rows *r) {
    static char buf[PATH_MAX];
    for (uint32_t j = 0; j < row->n; j++) {
        const sl__jmember *m = &row->m[j];
        if ((uint64_t)m->val_off + m->val_len > len || m->key_off + m->key_len > row->keys_len) abort();
        for (uint32_t k = 0; k < j; k++)
            if (row->m[k].key_len == m->key_len && !memcmp(row->keys + row->m[k].key_off, row->keys + m->key_off, m->key_len))
                abort();
        char key[300];
        sl__jrow_key(row, m, key, sizeof key);
        if (sl__jrow_find(row, key) == NULL && m->key_len < sizeof key && !memchr(key, ';', strlen(key)) &&
            strlen(key) == m->key_len && m->key_len)
            abort();
        sl__jiter it;
        sl__jrow_iter(row, m, &it);
        int strings = m->type == SL__JV_STRING || m->type == SL__JV_STRINGS;
        for (uint32_t e = 0; e < m->count; e++) {
            if (strings) {
                sl__obuf o = {buf, sizeof buf, 0, 0};
                sl__jiter_string(&it, &o);
                for (size_t i = 0; i < o.len; i++) r->sum += (unsigned char)buf[i];
            } else {
                double d = sl__jiter_number(&it);
                r->sum += d == d;
            }
        }
        int64_t v;
        if (sl__jrow_int(row, m, &v) == 0) r->sum += (uint64_t)v;
    }
}

static void rows_of(const char *t, size_t n, rows *r) {
    static sl__jrow row;
    char err[256];
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - t) : n;
        err[0] = 0;
        if (sl__jrow_parse(t + i, e - i, &row, err, sizeof err) == 0) walk(&row, e - i, r);
        else if (!err[0]) abort();
        i = e + 1;
    }
}

static void csv_records(const char *t, size_t n, rows *r) {
    static char buf[4096];
    sl__csv_field f[64];
    char err[256];
    size_t i = 0;
    uint64_t line = 1, rec_line, last = 0;
    uint32_t nf;
    int rc;
    while ((rc = sl__csv_record(t, n, &i, &line, &rec_line, f, 64, &nf, buf, sizeof buf, err, sizeof err)) == 0) {
        if (rec_line <= last || nf == 0) abort();
        last = rec_line;
        for (uint32_t k = 0; k < nf && k < 64; k++) {
            if (f[k].off + f[k].len >= sizeof buf) abort();
            r->sum += f[k].len;
        }
    }
    if (rc != 1 && (rc != SL_EPARSE || strncmp(err, "line ", 5) != 0)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    rows r = {0, 0};
    err[0] = 0;
    check(sl__manifest_parse_csv((const char *)data, size, on_row, &r, err, sizeof err), err);
    err[0] = 0;
    check(sl__manifest_parse_jsonl((const char *)data, size, on_row, &r, err, sizeof err), err);
    rows_of((const char *)data, size, &r);
    csv_records((const char *)data, size, &r);
    return 0;
}
