/*
 * Lossless WebP files written bit by bit for tests (test_webp.c,
 * test_rss.c): a w x h image of one colour whose meta-Huffman image names
 * `groups` Huffman groups (one per meta pixel, in turn), every group's
 * five codes of a single symbol, so the pixels take no bits. A valid file:
 * libwebp decodes it (transparent black). With 65,536 groups at 1024x1024
 * it is 292 KB and makes libwebp 1.2.4 allocate ~780 MiB of Huffman
 * tables before it reads them. Header-only.
 */
#ifndef SL_TEST_WEBPW_H
#define SL_TEST_WEBPW_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define WW_FN static __attribute__((unused))

typedef struct ww_bits {
    uint8_t *p;
    size_t n, cap;
    uint64_t acc;
    int bits;
} ww_bits;

/* v's low k bits, LSB first (VP8L's order). */
WW_FN void ww_put(ww_bits *w, uint32_t v, int k) {
    for (int i = 0; i < k; i++) {
        w->acc |= (uint64_t)((v >> i) & 1) << w->bits;
        if (++w->bits == 8) {
            if (w->n == w->cap) {
                w->cap = w->cap ? 2 * w->cap : 4096;
                w->p = realloc(w->p, w->cap);
                CHECK(w->p != NULL);
            }
            w->p[w->n++] = (uint8_t)w->acc;
            w->acc = 0, w->bits = 0;
        }
    }
}

/* A prefix code's code word: its first bit first. */
WW_FN void ww_code(ww_bits *w, uint32_t code, int len) {
    for (int i = len - 1; i >= 0; i--) ww_put(w, (code >> i) & 1, 1);
}

/* A code of one symbol (< 256): no bits to read it. */
WW_FN void ww_single(ww_bits *w, uint32_t sym) {
    ww_put(w, 1, 1);        /* simple */
    ww_put(w, 0, 1);        /* one symbol */
    ww_put(w, sym > 1, 1);  /* of 1 or 8 bits */
    ww_put(w, sym, sym > 1 ? 8 : 1);
}

/* A code over an alphabet of n whose first 256 symbols have 8-bit codes
 * (symbol s is code s), the others none: lengths written with a
 * code-length code of the two lengths 0 and 8. */
WW_FN void ww_flat8(ww_bits *w, int n) {
    static const int order[12] = {17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8};
    ww_put(w, 0, 1);      /* normal */
    ww_put(w, 12 - 4, 4); /* 12 code-length code lengths */
    for (int i = 0; i < 12; i++) ww_put(w, order[i] == 0 || order[i] == 8, 3);
    ww_put(w, 0, 1); /* every symbol's length follows */
    for (int s = 0; s < n; s++) ww_code(w, s < 256, 1); /* length 8: code 1, length 0: code 0 */
}

/* The file: RIFF, a VP8L chunk. *len set; the caller frees. groups must
 * fit the meta image: (ceil(w / 4) x ceil(h / 4) pixels, 4-pixel tiles). */
WW_FN uint8_t *ww_groups_webp(uint32_t width, uint32_t height, uint32_t groups, size_t *len) {
    ww_bits w = {0};
    uint32_t hx = (width + 3) / 4, hy = (height + 3) / 4;
    CHECK(groups >= 1 && groups <= 65536 && groups <= hx * hy);
    ww_put(&w, 0x2f, 8);
    ww_put(&w, width - 1, 14);
    ww_put(&w, height - 1, 14);
    ww_put(&w, 0, 1); /* no alpha */
    ww_put(&w, 0, 3); /* version */
    ww_put(&w, 0, 1); /* no transform */
    ww_put(&w, 0, 1); /* no colour cache */
    ww_put(&w, 1, 1); /* a meta-Huffman image */
    ww_put(&w, 0, 3); /* of 4-pixel tiles */
    /* the meta image: no cache, green and red any byte, blue, alpha and distance one symbol */
    ww_put(&w, 0, 1);
    ww_flat8(&w, 280);
    ww_flat8(&w, 256);
    ww_single(&w, 0), ww_single(&w, 0), ww_single(&w, 0);
    for (uint32_t i = 0; i < hx * hy; i++) { /* tile i in group i % groups: green low byte, red high */
        uint32_t g = i % groups;
        ww_code(&w, g & 0xff, 8);
        ww_code(&w, g >> 8, 8);
    }
    for (uint32_t g = 0; g < groups; g++)
        for (int k = 0; k < 5; k++) ww_single(&w, 0);
    if (w.bits) ww_put(&w, 0, 8 - w.bits); /* the last byte */
    size_t payload = w.n, chunk = 8 + payload + (payload & 1);
    uint8_t *f = calloc(1, 12 + chunk);
    CHECK(f != NULL);
    memcpy(f, "RIFF", 4);
    uint32_t riff = (uint32_t)(4 + chunk), pl = (uint32_t)payload;
    for (int i = 0; i < 4; i++) f[4 + i] = (uint8_t)(riff >> (8 * i)), f[16 + i] = (uint8_t)(pl >> (8 * i));
    memcpy(f + 8, "WEBPVP8L", 8);
    memcpy(f + 20, w.p, payload);
    free(w.p);
    *len = 12 + chunk;
    return f;
}

#endif
