/*
 * Tar archives built block by block for tests (test_tar.c, test_shards.c):
 * ustar headers with any size field, members, the end marker. Header-only.
 */
#ifndef SL_TEST_TARW_H
#define SL_TEST_TARW_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define TW_FN static __attribute__((unused))

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

TW_FN void b_put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        CHECK(b->p != NULL);
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, p, n); /* p may be NULL when n is 0 */
    b->n += n;
}

TW_FN void b_pad(buf *b) {
    static const uint8_t z[512];
    if (b->n % 512) b_put(b, z, 512 - b->n % 512);
}

TW_FN void hdr_sum(uint8_t *h) {
    memset(h + 148, ' ', 8);
    unsigned s = 0;
    for (int i = 0; i < 512; i++) s += h[i];
    snprintf((char *)h + 148, 8, "%06o", s);
    h[155] = ' ';
}

/* A ustar header; size written in octal (size_field NULL) or as given. */
TW_FN void header(buf *b, const char *name, char type, uint64_t size, const uint8_t *size_field) {
    uint8_t h[512] = {0};
    memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
    memcpy(h + 100, "0000644", 8);
    if (size_field) memcpy(h + 124, size_field, 12);
    else snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "14000000000", 12);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    hdr_sum(h);
    b_put(b, h, 512);
}

/* A regular member of n bytes. */
TW_FN void member_n(buf *b, const char *name, const void *data, size_t n) {
    header(b, name, '0', n, NULL);
    b_put(b, data, n);
    b_pad(b);
}

TW_FN void member(buf *b, const char *name, const char *data) { member_n(b, name, data, strlen(data)); }

TW_FN void end(buf *b) {
    static const uint8_t z[1024];
    b_put(b, z, sizeof z);
}

/* Write the archive to path. */
TW_FN void b_write(const buf *b, const char *path) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(b->p, 1, b->n, f), b->n);
    fclose(f);
}

#endif
