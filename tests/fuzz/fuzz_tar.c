/*
 * Fuzz the tar scanner, the WebDataset grouper on top of it, and the brace
 * expander (the input as a shard pattern). None may crash, read outside
 * the input or leak. Every member reported must keep the scanner's
 * promises: data inside the input, on a block boundary, after the previous
 * member's data (no overlap), a normalised name (not empty, no NUL, not
 * absolute, no "", "." or ".." component). A failure is a negative SL_E*
 * code with a reason.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/tar.h"
#include "source/wds.h"

typedef struct seen {
    size_t len;
    uint64_t end; /* end of the previous member's data */
    uint64_t sum;
} seen;

static void check_name(const char *n, size_t len) {
    if (len == 0 || len > SL_TAR_NAME_MAX || n[len] != 0 || memchr(n, 0, len)) abort();
    if (n[0] == '/' || n[len - 1] == '/') abort();
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && n[j] != '/') j++;
        if (j == i || (j - i == 1 && n[i] == '.') || (j - i == 2 && n[i] == '.' && n[i + 1] == '.')) abort();
        i = j + 1;
    }
}

static int on_member(void *ctx, const sl__tar_member *m, char *err, size_t errlen) {
    seen *s = ctx;
    check_name(m->name, m->name_len);
    if (m->offset % 512 || m->offset < s->end || m->offset > s->len || m->size > s->len - m->offset) abort();
    if (m->header_offset % 512 || m->header_offset >= m->offset) abort();
    s->end = m->offset + m->size;
    for (size_t i = 0; i < m->name_len; i++) s->sum += (unsigned char)m->name[i];
    return 0;
}

static int on_sample(void *ctx, const char *prefix, size_t plen, const sl__wds_member *m, uint32_t n, char *err,
                     size_t errlen) {
    seen *s = ctx;
    if (n == 0 || n > SL_WDS_MAX_MEMBERS || prefix[plen] != 0) abort();
    for (uint32_t i = 0; i < n; i++) {
        if (m[i].key_len == 0 || m[i].key_len > SL_WDS_KEY_MAX || m[i].key[m[i].key_len] != 0) abort();
        if (m[i].offset > s->len || m[i].size > s->len - m[i].offset) abort();
        for (uint32_t j = 0; j < i; j++)
            if (m[j].key_len == m[i].key_len && !memcmp(m[j].key, m[i].key, m[i].key_len)) abort();
    }
    return 0;
}

static int on_name(void *ctx, const char *name, size_t len) {
    long *count = ctx;
    if (name[len] != 0 || strlen(name) != len || len > SL_TAR_NAME_MAX) abort();
    return ++*count >= 1000; /* enough: a pattern may expand to a million */
}

static void check_rc(int rc, const char *err) {
    if (rc > 0) abort();
    if (rc < 0 && (rc < SL_ESYS || err[0] == 0 || !memchr(err, 0, 256))) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    seen s = {size, 0, 0};
    err[0] = 0;
    check_rc(sl__tar_scan_mem(data, size, on_member, &s, err, sizeof err), err);

    sl__budget b;
    if (sl__budget_init(&b, (uint64_t)64 << 20)) abort();
    sl__wds_grouper *g = malloc(sizeof *g);
    if (!g) abort();
    seen s2 = {size, 0, 0};
    sl__wds_group_init(g, &b, on_sample, &s2);
    err[0] = 0;
    int rc = sl__tar_scan_mem(data, size, sl__wds_group_add, g, err, sizeof err);
    if (!rc) rc = sl__wds_group_finish(g, err, sizeof err);
    check_rc(rc, err);
    sl__wds_group_free(g);
    free(g);
    if (atomic_load(&b.used) != 0) abort(); /* everything given back */
    sl__budget_fini(&b);

    char pattern[512];
    size_t n = size < sizeof pattern - 1 ? size : sizeof pattern - 1;
    memcpy(pattern, data, n);
    pattern[n] = 0;
    long count = 0;
    err[0] = 0;
    rc = sl__brace_expand(pattern, on_name, &count, err, sizeof err);
    if (rc != 1) check_rc(rc, err);
    return 0;
}
