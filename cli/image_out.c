/*
 * PNG and PPM writers for the CLI.
 *
 * PNG layout written here: signature, IHDR (8-bit RGB, no interlace), one
 * IDAT holding a zlib stream (header 78 01, stored deflate blocks of at
 * most 65535 bytes, Adler-32), IEND. Every scanline has filter type 0. The
 * IDAT length is known before writing (it depends on w and h only), so the
 * file is written in one pass, row by row, with CRC-32 and Adler-32 kept
 * running.
 */
#include "image_out.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define STORED_MAX 65535u /* bytes in one stored deflate block */

int sl_cli_image_format(const char *path) {
    const char *dot = path ? strrchr(path, '.') : NULL;
    if (!dot || strchr(dot, '/')) return SL_CLI_IMAGE_UNKNOWN;
    if (!strcasecmp(dot, ".png")) return SL_CLI_IMAGE_PNG;
    if (!strcasecmp(dot, ".ppm")) return SL_CLI_IMAGE_PPM;
    return SL_CLI_IMAGE_UNKNOWN;
}

/* ---- PNG ------------------------------------------------------------------ */

/* A byte sink to a file that keeps the CRC-32 of the current chunk and the
 * Adler-32 of the zlib payload. */
typedef struct png_out {
    FILE *f;
    uint32_t crc;          /* running, pre-inverted */
    uint32_t adler_a, adler_b;
    uint32_t block_left;   /* payload bytes left in the current stored block */
    uint64_t payload_left; /* payload bytes not yet written */
} png_out;

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static void put(png_out *o, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) o->crc = crc_table[(o->crc ^ p[i]) & 0xff] ^ (o->crc >> 8);
    fwrite(p, 1, n, o->f);
}

static void put_u32(png_out *o, uint32_t v) {
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    put(o, b, 4);
}

/* Chunk length (outside the CRC), then the type (inside it). */
static void chunk_begin(png_out *o, uint32_t len, const char type[4]) {
    unsigned char b[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                          (unsigned char)len};
    fwrite(b, 1, 4, o->f);
    o->crc = 0xffffffffu;
    put(o, type, 4);
}

static void chunk_end(png_out *o) { put_u32(o, o->crc ^ 0xffffffffu); }

/* Payload bytes, split into stored blocks (each with its 5-byte header). */
static void payload(png_out *o, const unsigned char *p, size_t n) {
    while (n) {
        if (o->block_left == 0) {
            uint32_t len = o->payload_left < STORED_MAX ? (uint32_t)o->payload_left : STORED_MAX;
            unsigned char h[5] = {o->payload_left <= STORED_MAX ? 1 : 0, (unsigned char)len, (unsigned char)(len >> 8),
                                  (unsigned char)~len, (unsigned char)(~len >> 8)};
            put(o, h, 5);
            o->block_left = len;
        }
        size_t take = n < o->block_left ? n : o->block_left;
        for (size_t i = 0; i < take; i++) {
            o->adler_a = (o->adler_a + p[i]) % 65521u;
            o->adler_b = (o->adler_b + o->adler_a) % 65521u;
        }
        put(o, p, take);
        o->block_left -= (uint32_t)take;
        o->payload_left -= take;
        p += take;
        n -= take;
    }
}

static int write_png(FILE *f, const unsigned char *rgb, uint32_t w, uint32_t h, char *err, size_t errlen) {
    uint64_t row = 1 + (uint64_t)w * 3, raw = row * h;
    uint64_t blocks = raw / STORED_MAX + (raw % STORED_MAX != 0);
    uint64_t zlen = 2 + raw + 5 * blocks + 4;
    if (w > 0x7fffffffu || h > 0x7fffffffu || zlen > 0x7fffffffu) {
        snprintf(err, errlen, "a %ux%u picture is too large for one PNG chunk (%llu bytes; at most 2^31 - 1)", w, h,
                 (unsigned long long)zlen);
        return -1;
    }
    if (!crc_table[1]) crc_init();
    png_out o = {.f = f, .adler_a = 1, .payload_left = raw};
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    fwrite(sig, 1, sizeof sig, f);
    chunk_begin(&o, 13, "IHDR");
    put_u32(&o, w);
    put_u32(&o, h);
    static const unsigned char ihdr_tail[5] = {8, 2, 0, 0, 0}; /* 8-bit, RGB, deflate, filter 0, no interlace */
    put(&o, ihdr_tail, sizeof ihdr_tail);
    chunk_end(&o);
    chunk_begin(&o, (uint32_t)zlen, "IDAT");
    static const unsigned char zlib_header[2] = {0x78, 0x01};
    put(&o, zlib_header, 2);
    static const unsigned char filter_none = 0;
    for (uint32_t y = 0; y < h; y++) {
        payload(&o, &filter_none, 1);
        payload(&o, rgb + (uint64_t)y * w * 3, (size_t)w * 3);
    }
    put_u32(&o, o.adler_b << 16 | o.adler_a);
    chunk_end(&o);
    chunk_begin(&o, 0, "IEND");
    chunk_end(&o);
    return 0;
}

/* ---- PPM and the entry point ------------------------------------------------ */

static int write_ppm(FILE *f, const unsigned char *rgb, uint32_t w, uint32_t h) {
    fprintf(f, "P6\n%u %u\n255\n", w, h);
    fwrite(rgb, 1, (size_t)w * h * 3, f);
    return 0;
}

int sl_cli_write_rgb(const char *path, const unsigned char *rgb, uint32_t w, uint32_t h, char *err, size_t errlen) {
    int fmt = sl_cli_image_format(path);
    if (fmt == SL_CLI_IMAGE_UNKNOWN) {
        snprintf(err, errlen, "cannot tell the format of '%s' from its extension: write .png or .ppm", path);
        return -1;
    }
    if (w == 0 || h == 0) {
        snprintf(err, errlen, "%s: a %ux%u picture is empty", path, w, h);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = fmt == SL_CLI_IMAGE_PNG ? write_png(f, rgb, w, h, err, errlen) : write_ppm(f, rgb, w, h);
    int werr = ferror(f) ? errno : 0;
    if (fclose(f) && !werr) werr = errno ? errno : EIO;
    if (!rc && werr) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(werr));
        rc = -1;
    }
    if (rc) remove(path);
    return rc;
}
