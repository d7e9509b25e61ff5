/*
 * Test datasets, header-only: a temporary ImageFolder tree of real JPEGs
 * written with libjpeg's compressor, optionally with corrupt files mixed
 * in and a CSV manifest beside it; files and empty folders in /tmp. All
 * removed at exit (atexit), so a test that forks must leave its children
 * with _exit.
 *
 * Layout: ROOT/cNN/img_KKKKK.jpg, file k in class k * classes / files.
 * Names sort in k order, so the dataset index of file k is k (the tests
 * confirm it through sl_loader_sample_path). Everything derives from the
 * seed: the same options give the same bytes.
 */
#ifndef SL_TEST_DATASET_H
#define SL_TEST_DATASET_H

#ifndef _GNU_SOURCE /* nftw; only effective when this header comes first */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "check.h"

/* Every helper may go unused in a given test file. */
#define FX_FN static __attribute__((unused))

enum { FX_GOOD = 0, FX_TRUNCATED, FX_GARBAGE, FX_EMPTY, FX__KINDS };

typedef struct fx_opts {
    uint32_t images;      /* good JPEGs */
    uint32_t classes;     /* class folders (>= 1) */
    uint32_t corrupt;     /* bad files spread among them: truncated, garbage, empty in turn */
    uint32_t min_side;    /* width range; height = width * 3 / 4 (default 64..640) */
    uint32_t max_side;
    uint32_t quality;     /* JPEG quality (default 85) */
    int noise;            /* 1: pure noise texture (large files) */
    uint64_t seed;
    int manifest;         /* also write ROOT.csv listing every file */
} fx_opts;

#define FX_MAX_FILES 4096

typedef struct fx_dataset {
    char root[256];         /* the ImageFolder root */
    char manifest[280];     /* ROOT.csv when asked, else "" */
    uint32_t files;         /* images + corrupt */
    uint32_t good;
    uint32_t classes;
    int kind[FX_MAX_FILES]; /* FX_* of file (= dataset index) k */
    int label[FX_MAX_FILES];
    uint32_t w[FX_MAX_FILES], h[FX_MAX_FILES];
    char rel[FX_MAX_FILES][32]; /* "cNN/img_KKKKK.jpg" */
} fx_dataset;

/* ---- cleanup at exit ------------------------------------------------------ */

static char fx_roots[8][280];
static int fx_nroots;

FX_FN int fx_rm_cb(const char *p, const struct stat *st, int type, struct FTW *f) {
    (void)st, (void)type, (void)f;
    return remove(p);
}

FX_FN void fx_cleanup(void) {
    for (int i = 0; i < fx_nroots; i++) {
        struct stat st;
        if (lstat(fx_roots[i], &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) nftw(fx_roots[i], fx_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        else remove(fx_roots[i]);
    }
}

/* Remember path for removal at exit. */
FX_FN void fx_track(const char *path) {
    if (fx_nroots == 0) atexit(fx_cleanup);
    if (fx_nroots >= 8) SL_FAIL("fixture: too many temporary paths");
    snprintf(fx_roots[fx_nroots++], sizeof fx_roots[0], "%s", path);
}

/* ---- deterministic randomness --------------------------------------------- */

FX_FN uint64_t fx_mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- JPEG writing ---------------------------------------------------------- */

/* An RGB image of gradients, blobs and grain (photo-like enough to make the
 * decoder and the resize do real work), or pure noise. Caller frees. */
FX_FN uint8_t *fx_texture(uint32_t w, uint32_t h, uint64_t seed, int noise) {
    uint8_t *px = malloc((size_t)w * h * 3);
    CHECK(px != NULL);
    uint64_t s = fx_mix(seed);
    uint32_t cx = (uint32_t)(s % w), cy = (uint32_t)((s >> 20) % h), r2 = (w * w + h * h) / 16 + 1;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            uint64_t g = fx_mix(seed ^ ((uint64_t)y << 32 | x));
            if (noise) {
                p[0] = (uint8_t)g, p[1] = (uint8_t)(g >> 8), p[2] = (uint8_t)(g >> 16);
                continue;
            }
            uint32_t dx = x > cx ? x - cx : cx - x, dy = y > cy ? y - cy : cy - y;
            int blob = dx * dx + dy * dy < r2;
            int grain = (int)(g & 31) - 16;
            int v[3] = {(int)(x * 255 / w), (int)(y * 255 / h), (int)((s >> (8 * (x / 16 % 4))) & 255)};
            for (int c = 0; c < 3; c++) {
                int t = (blob ? 255 - v[c] : v[c]) + grain;
                p[c] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
        }
    return px;
}

/* Compress an RGB image into memory; *out is malloc'd by libjpeg. tune,
 * when not NULL, sets what it likes (colour space, sampling, scans) after
 * the defaults and the quality, before the compression starts. */
FX_FN void fx_jpeg_tuned(const uint8_t *px, uint32_t w, uint32_t h, int quality,
                         void (*tune)(struct jpeg_compress_struct *c, int arg), int arg, unsigned char **out,
                         unsigned long *len) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    *out = NULL;
    *len = 0;
    jpeg_mem_dest(&c, out, len);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    if (tune) tune(&c, arg);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
}

/* Compress an RGB image into memory with libjpeg's defaults; *out is
 * malloc'd by libjpeg. */
FX_FN void fx_jpeg(const uint8_t *px, uint32_t w, uint32_t h, int quality, unsigned char **out,
                    unsigned long *len) {
    fx_jpeg_tuned(px, w, h, quality, NULL, 0, out, len);
}

FX_FN void fx_write(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) SL_FAIL("fixture: fopen %s: %s", path, strerror(errno));
    if (n && fwrite(p, 1, n, f) != n) SL_FAIL("fixture: write %s failed", path);
    if (fclose(f) != 0) SL_FAIL("fixture: close %s failed", path);
}

/* A JPEG of w x h in memory (for sl_image_decode tests). Caller frees. */
FX_FN unsigned char *fx_jpeg_bytes(uint32_t w, uint32_t h, uint64_t seed, int noise, int quality,
                                    unsigned long *len) {
    uint8_t *px = fx_texture(w, h, seed, noise);
    unsigned char *j;
    fx_jpeg(px, w, h, quality, &j, len);
    free(px);
    return j;
}

/* The offset of the first marker 0xFF `marker` of a JPEG (0xDA: start of
 * scan, 0xC0: baseline frame header) with 4 bytes after it; the case fails
 * if there is none. */
FX_FN size_t fx_jpeg_marker(const unsigned char *j, size_t len, uint8_t marker) {
    size_t i = 2;
    while (i + 4 < len && !(j[i] == 0xFF && j[i + 1] == marker)) i++;
    CHECK(i + 4 < len);
    return i;
}

/* Write p into dir/rel. */
FX_FN void fx_put(const char *dir, const char *rel, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    fx_write(path, p, n);
}

/* ---- the dataset ----------------------------------------------------------- */

FX_FN void fx_defaults(fx_opts *o) {
    memset(o, 0, sizeof *o);
    o->images = 24;
    o->classes = 3;
    o->min_side = 64;
    o->max_side = 640;
    o->quality = 85;
    o->seed = 1;
}

/* Make the dataset under a fresh /tmp folder (readable by all, so a child
 * that dropped privileges can read it too). */
FX_FN void fx_make(const fx_opts *o, fx_dataset *d) {
    memset(d, 0, sizeof *d);
    uint32_t total = o->images + o->corrupt, classes = o->classes ? o->classes : 1;
    if (total == 0 || total > FX_MAX_FILES) SL_FAIL("fixture: %u files", total);
    uint32_t lo = o->min_side ? o->min_side : 64, hi = o->max_side ? o->max_side : 640;
    if (hi < lo) hi = lo;
    snprintf(d->root, sizeof d->root, "/tmp/sl_fixture_XXXXXX");
    if (!mkdtemp(d->root)) SL_FAIL("fixture: mkdtemp: %s", strerror(errno));
    fx_track(d->root);
    chmod(d->root, 0755);
    d->files = total;
    d->good = o->images;
    d->classes = classes;
    for (uint32_t c = 0; c < classes; c++) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/c%02u", d->root, c);
        if (mkdir(dir, 0755) != 0) SL_FAIL("fixture: mkdir %s: %s", dir, strerror(errno));
    }
    /* corrupt files at evenly spread positions: file k is bad when it is the
     * (i+1)-th of every total/corrupt block's middle */
    for (uint32_t k = 0; k < total; k++) d->kind[k] = FX_GOOD;
    for (uint32_t i = 0; i < o->corrupt; i++) {
        uint32_t k = (uint32_t)(((uint64_t)i * total + total / 2) / o->corrupt);
        while (d->kind[k] != FX_GOOD) k = (k + 1) % total;
        d->kind[k] = 1 + (int)(i % 3);
    }
    for (uint32_t k = 0; k < total; k++) {
        uint64_t r = fx_mix(o->seed * 1000003u + k);
        uint32_t w = lo + (uint32_t)(r % (hi - lo + 1));
        uint32_t h = w * 3 / 4 ? w * 3 / 4 : 1;
        if (r >> 63) { /* some portrait */
            uint32_t t = w;
            w = h;
            h = t;
        }
        d->w[k] = w, d->h[k] = h;
        d->label[k] = (int)((uint64_t)k * classes / total);
        snprintf(d->rel[k], sizeof d->rel[k], "c%02d/img_%05u.jpg", d->label[k], k);
        char path[320];
        snprintf(path, sizeof path, "%s/%s", d->root, d->rel[k]);
        if (d->kind[k] == FX_EMPTY) {
            fx_write(path, "", 0);
            continue;
        }
        if (d->kind[k] == FX_GARBAGE) {
            uint8_t g[3000];
            for (size_t i = 0; i < sizeof g; i++) g[i] = (uint8_t)fx_mix(r + i);
            g[0] = 'x'; /* never a JPEG or PNG signature */
            fx_write(path, g, sizeof g);
            continue;
        }
        unsigned long len;
        unsigned char *j = fx_jpeg_bytes(w, h, r, o->noise, (int)(o->quality ? o->quality : 85), &len);
        /* truncated: cut 16 bytes into the entropy-coded data, so that any
         * crop of any preset needs the missing part (a cut further down can
         * legitimately decode: a train crop above it never reads there) */
        size_t n = (size_t)len;
        if (d->kind[k] == FX_TRUNCATED) {
            size_t sos = fx_jpeg_marker(j, n, 0xDA);
            n = sos + 2 + ((size_t)j[sos + 2] << 8 | j[sos + 3]) + 16;
            CHECK(n < len);
        }
        fx_write(path, j, n);
        free(j);
    }
    if (o->manifest) {
        snprintf(d->manifest, sizeof d->manifest, "%s.csv", d->root);
        fx_track(d->manifest);
        FILE *f = fopen(d->manifest, "w");
        if (!f) SL_FAIL("fixture: fopen %s: %s", d->manifest, strerror(errno));
        const char *base = strrchr(d->root, '/') + 1; /* paths relative to the manifest's folder */
        fprintf(f, "path,label\n");
        for (uint32_t k = 0; k < total; k++) fprintf(f, "%s/%s,%d\n", base, d->rel[k], d->label[k]);
        if (fclose(f) != 0) SL_FAIL("fixture: close %s failed", d->manifest);
    }
}

/* The options of a small dataset: n good images of sides lo..hi, corrupt
 * bad ones. */
FX_FN void fx_simple_opts(fx_opts *o, uint32_t n, uint32_t corrupt, uint32_t lo, uint32_t hi) {
    fx_defaults(o);
    o->images = n;
    o->corrupt = corrupt;
    o->min_side = lo;
    o->max_side = hi;
}

/* Small dataset in one call: n good images of sides lo..hi, corrupt bad ones. */
FX_FN void fx_simple(fx_dataset *d, uint32_t n, uint32_t corrupt, uint32_t lo, uint32_t hi) {
    fx_opts o;
    fx_simple_opts(&o, n, corrupt, lo, hi);
    fx_make(&o, d);
}

/* fx_make into a new dataset (calloc'd: the caller frees it). */
FX_FN fx_dataset *fx_new_opts(const fx_opts *o) {
    fx_dataset *d = calloc(1, sizeof *d);
    CHECK(d != NULL);
    fx_make(o, d);
    return d;
}

/* fx_simple into a new dataset (calloc'd: the caller frees it). */
FX_FN fx_dataset *fx_new(uint32_t n, uint32_t corrupt, uint32_t lo, uint32_t hi) {
    fx_opts o;
    fx_simple_opts(&o, n, corrupt, lo, hi);
    return fx_new_opts(&o);
}

/* An empty temporary folder, removed at exit. */
FX_FN void fx_empty_dir(char *out, size_t len) {
    snprintf(out, len, "/tmp/sl_fixture_empty_XXXXXX");
    if (!mkdtemp(out)) SL_FAIL("fixture: mkdtemp: %s", strerror(errno));
    fx_track(out);
}

/* The whole text of a file, NUL-terminated (malloc'd; the case fails if
 * it cannot be read). */
FX_FN char *fx_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) SL_FAIL("fixture: fopen %s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0, k;
    char *t = malloc(cap);
    while (t && (k = fread(t + n, 1, cap - n - 1, f)) > 0)
        if ((n += k) + 1 == cap) t = realloc(t, cap *= 2);
    fclose(f);
    CHECK(t != NULL);
    t[n] = 0;
    return t;
}

#endif
