/*
 * WebP (format/webp.c): files made here with libwebp's own encoder (lossy,
 * lossy with alpha, lossless; odd and even sizes). A windowed decode must
 * equal the same pixels of a full decode for every window tried (libwebp's
 * cropping is widened for chroma upsampling: this is what proves it); the
 * memory bound must hold libwebp's measured peak (malloc counted by a shim
 * in this test, outside sanitizer builds); hostile files are error
 * records. Comparisons with Pillow are in tests/python/test_webp.py.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdatomic.h>

#include <webp/decode.h>
#include <webp/encode.h>

#include "check.h"
#include "fixture.h"
#include "base/util.h"
#include "format/decode.h"
#include "webpw.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SL_SANITIZED 1
#endif
#endif

/* ---- malloc counting (not under sanitizers: they own malloc) ------------------- */

#ifndef SL_SANITIZED
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
static _Atomic long long counted, peak;
static _Atomic int counting;

static void note(long long d) {
    if (!atomic_load(&counting)) return;
    long long now = atomic_fetch_add(&counted, d) + d;
    long long p = atomic_load(&peak);
    while (now > p && !atomic_compare_exchange_weak(&peak, &p, now)) {}
}
/* exported (the build hides symbols by default): libwebp.so's calls
 * must bind to these */
#define SHIM __attribute__((visibility("default")))
SHIM void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    if (p) note((long long)malloc_usable_size(p));
    return p;
}
SHIM void *calloc(size_t a, size_t b) {
    void *p = __libc_calloc(a, b);
    if (p) note((long long)malloc_usable_size(p));
    return p;
}
SHIM void *realloc(void *q, size_t n) {
    long long old = q ? (long long)malloc_usable_size(q) : 0;
    void *p = __libc_realloc(q, n);
    if (p) note((long long)malloc_usable_size(p) - old);
    return p;
}
SHIM void free(void *p) {
    if (p) note(-(long long)malloc_usable_size(p));
    __libc_free(p);
}
#endif

/* ---- files ------------------------------------------------------------------------ */

enum { LOSSY, LOSSY_ALPHA, LOSSLESS, LOSSLESS_ALPHA };
static const char *kind_name[] = {"lossy", "lossy+alpha", "lossless", "lossless+alpha"};

/* A WebP of w x h from the fixture's photo-like texture (alpha: a
 * gradient); *out from libwebp (WebPFree). */
static uint8_t *make_webp(int kind, uint32_t w, uint32_t h, size_t *len) {
    uint8_t *rgb = fx_texture(w, h, w * 31 + h, 0), *out = NULL;
    uint8_t *rgba = malloc((size_t)w * h * 4);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        memcpy(rgba + 4 * i, rgb + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)(i * 7 % 256);
    }
    switch (kind) {
    case LOSSY: *len = WebPEncodeRGB(rgb, (int)w, (int)h, (int)w * 3, 80, &out); break;
    case LOSSY_ALPHA: *len = WebPEncodeRGBA(rgba, (int)w, (int)h, (int)w * 4, 75, &out); break;
    case LOSSLESS: *len = WebPEncodeLosslessRGB(rgb, (int)w, (int)h, (int)w * 3, &out); break;
    default: *len = WebPEncodeLosslessRGBA(rgba, (int)w, (int)h, (int)w * 4, &out); break;
    }
    free(rgb), free(rgba);
    CHECK(*len > 0 && out != NULL);
    return out;
}

/* ---- decoding into a buffer --------------------------------------------------------- */

typedef struct grab {
    sl__row_sink sink;
    uint8_t *dst;
    uint32_t w, h, ch, rows;
} grab;

static int grab_begin(sl__row_sink *s, const sl__region *r) {
    grab *g = s->ctx;
    CHECK_EQ(r->scale_num, 8);
    CHECK_EQ(r->w, g->w);
    CHECK_EQ(r->h, g->h);
    CHECK_EQ(r->channels, g->ch);
    return 0;
}

static int grab_rows(sl__row_sink *s, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    grab *g = s->ctx;
    for (uint32_t i = 0; i < n; i++) memcpy(g->dst + (size_t)(y + i) * g->w * g->ch, rows[i], (size_t)g->w * g->ch);
    g->rows += n;
    return 0;
}

/* What libwebp will allocate for this file, read from its bytes. */
static uint64_t lib_need(const uint8_t *d, size_t len, const sl_image_info *info) {
    uint64_t need;
    char why[256];
    if (sl__decode_lib_need(NULL, (uint64_t)1 << 20, d, len, info, &need, why, sizeof why)) SL_FAIL("lib_need: %s", why);
    return need;
}

/* Decode window (x, y, w, h) with ch channels into a new buffer; the
 * quota is exactly sl__webp_mem's bound for the file (as a loader plans
 * it: libwebp's need read from the bytes). */
static uint8_t *decode_window(const uint8_t *d, size_t len, const sl_image_info *info, uint32_t x, uint32_t y,
                              uint32_t w, uint32_t h, uint32_t ch, long long *lib_peak) {
    sl__decode_req req = {.x = x, .y = y, .w = w, .h = h, .channels = ch, .lib_mem = lib_need(d, len, info)};
    grab g = {{grab_begin, grab_rows, NULL}, malloc((size_t)w * h * ch), w, h, ch, 0};
    g.sink.ctx = &g;
    uint64_t bound = sl__decode_mem(info, &req);
    sl__quota q = {.cap = bound};
    char why[256];
#ifndef SL_SANITIZED
    atomic_store(&counted, 0);
    atomic_store(&peak, 0);
    atomic_store(&counting, 1);
#endif
    int rc = sl__decode(NULL, d, len, info, &req, &q, &g.sink, why, sizeof why);
#ifndef SL_SANITIZED
    atomic_store(&counting, 0);
    if (lib_peak) *lib_peak = atomic_load(&peak);
#else
    if (lib_peak) *lib_peak = 0;
#endif
    if (rc) SL_FAIL("decode %ux%u+%u+%u: %s", w, h, x, y, why);
    CHECK_EQ(g.rows, h);
    CHECK_EQ(q.used, 0);
#ifndef SL_SANITIZED
    if (lib_peak) CHECK_LE((uint64_t)*lib_peak, bound);
#endif
    return g.dst;
}

/* ---- tests ----------------------------------------------------------------------------- */

TEST(probe_reads_the_header) {
    uint32_t sizes[][2] = {{203, 151}, {64, 48}, {1, 1}, {17, 301}};
    for (int k = 0; k < 4; k++) {
        for (int s = 0; s < 4; s++) {
            size_t len;
            uint8_t *d = make_webp(k, sizes[s][0], sizes[s][1], &len);
            sl_image_info info;
            char why[256];
            CHECK_OK(sl__probe(d, len, &info, why, sizeof why));
            CHECK_EQ(info.format, SL_FORMAT_WEBP);
            CHECK_EQ(info.width, sizes[s][0]);
            CHECK_EQ(info.height, sizes[s][1]);
            CHECK_EQ(info.channels, k == LOSSY_ALPHA || k == LOSSLESS_ALPHA ? 4 : 3);
            CHECK_EQ(info.progressive, k != LOSSY);
            WebPFree(d);
        }
    }
}

/* Every window of every kind equals the full decode's pixels. */
TEST(windows_equal_full_decode) {
    uint32_t sizes[][2] = {{203, 151}, {96, 64}, {33, 47}};
    for (int k = 0; k < 4; k++) {
        for (int s = 0; s < 3; s++) {
            uint32_t W = sizes[s][0], H = sizes[s][1];
            size_t len;
            uint8_t *d = make_webp(k, W, H, &len);
            sl_image_info info;
            CHECK_OK(sl__probe(d, len, &info, NULL, 0));
            for (uint32_t ch = 3; ch <= 4; ch++) {
                uint8_t *full = decode_window(d, len, &info, 0, 0, W, H, ch, NULL);
                for (int t = 0; t < 60; t++) {
                    uint64_t r = fx_mix((uint64_t)k << 40 | (uint64_t)s << 32 | ch << 16 | (uint64_t)t);
                    uint32_t w = 1 + (uint32_t)(r % W), h = 1 + (uint32_t)((r >> 16) % H);
                    uint32_t x = (uint32_t)((r >> 32) % (W - w + 1)), y = (uint32_t)((r >> 48) % (H - h + 1));
                    uint8_t *win = decode_window(d, len, &info, x, y, w, h, ch, NULL);
                    for (uint32_t row = 0; row < h; row++)
                        if (memcmp(win + (size_t)row * w * ch, full + ((size_t)(y + row) * W + x) * ch, (size_t)w * ch))
                            SL_FAIL("%s %ux%u: window %ux%u+%u+%u (%u ch) differs in row %u", kind_name[k], W, H, w,
                                    h, x, y, ch, row);
                    free(win);
                }
                free(full);
            }
            WebPFree(d);
        }
    }
}

/* libwebp's peak heap during a decode stays within the bound reserved
 * for it (the quota's own buffer included: both are malloc). */
TEST(memory_bound_holds_measured_peak) {
#ifdef SL_SANITIZED
    printf("sanitizer build: malloc is the sanitizer's, not counted here\n");
#else
    uint32_t sizes[][2] = {{640, 480}, {1280, 720}, {37, 3001}};
    for (int k = 0; k < 4; k++) {
        for (int s = 0; s < 3; s++) {
            uint32_t W = sizes[s][0], H = sizes[s][1];
            size_t len;
            uint8_t *d = make_webp(k, W, H, &len);
            sl_image_info info;
            CHECK_OK(sl__probe(d, len, &info, NULL, 0));
            for (int win = 0; win < 2; win++) { /* the whole image, then a train-like crop */
                uint32_t w = win ? W / 3 + 1 : W, h = win ? H / 2 + 1 : H, x = win ? W / 3 : 0, y = win ? H / 4 : 0;
                sl__decode_req req = {.x = x, .y = y, .w = w, .h = h, .channels = 3, .lib_mem = lib_need(d, len, &info)};
                long long measured;
                free(decode_window(d, len, &info, x, y, w, h, 3, &measured));
                uint64_t bound = sl__decode_mem(&info, &req);
                printf("%-14s %4ux%-4u window %4ux%-4u: peak %9lld bytes, bound %9llu (%.0f%%)\n", kind_name[k], W, H, w,
                       h, measured, (unsigned long long)bound, 100.0 * (double)measured / (double)bound);
                CHECK_LE((uint64_t)measured, bound);
            }
            WebPFree(d);
        }
    }
#endif
}

static int probe_code(const uint8_t *d, size_t len, char *why) {
    sl_image_info info;
    why[0] = 0;
    int rc = sl__probe(d, len, &info, why, 256);
    if (rc) CHECK(why[0] != 0);
    return rc;
}

/* Through the public single-image API, where limits apply too. */
static int public_decode(const uint8_t *d, size_t len, char *why) {
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    uint32_t w, h, c;
    int rc = sl_image_output_size(d, len, &o, &w, &h, &c);
    if (rc) {
        CHECK_EQ(sl_image_decode(d, len, &o, NULL, 0, why, 256), rc);
        CHECK(why[0] != 0);
        return rc;
    }
    uint8_t *out = malloc((size_t)w * h * c);
    rc = sl_image_decode(d, len, &o, out, (size_t)w * h * c, why, 256);
    free(out);
    return rc;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

TEST(hostile_files_are_errors) {
    size_t len;
    uint8_t *d = make_webp(LOSSY, 203, 151, &len);
    char why[256];
    /* truncated anywhere: never a crash; cut in the RIFF payload, refused by the container check */
    for (size_t cut = 0; cut < len; cut += 97) {
        int rc = public_decode(d, cut, why);
        CHECK(rc < 0);
    }
    CHECK_EQ(probe_code(d, len - 10, why), SL_ECORRUPT);
    CHECK_STR_CONTAINS(why, "truncated WebP");
    /* RIFF size odd / too small */
    uint8_t *b = malloc(len);
    memcpy(b, d, len);
    put32(b + 4, 3);
    CHECK_EQ(probe_code(b, len, why), SL_ECORRUPT);
    CHECK_STR_CONTAINS(why, "RIFF size 3");
    /* the VP8 chunk claims more than the RIFF holds */
    memcpy(b, d, len);
    put32(b + 16, 0x7FFFFFF0u);
    CHECK(probe_code(b, len, why) < 0 || public_decode(b, len, why) < 0);
    /* huge declared dimensions (16383 x 16383 in the VP8 frame header): over the pixel limit */
    memcpy(b, d, len);
    CHECK(!memcmp(b + 12, "VP8 ", 4));
    b[26] = 0xFF, b[27] = 0x3F, b[28] = 0xFF, b[29] = 0x3F;
    int rc = public_decode(b, len, why);
    CHECK_EQ(rc, SL_ELIMIT);
    CHECK_STR_CONTAINS(why, "16383");
    /* garbage after a valid header: the decoder refuses it */
    memcpy(b, d, len);
    for (size_t i = 40; i < len; i++) b[i] = (uint8_t)fx_mix(i);
    CHECK(public_decode(b, len, why) < 0);
    free(b);
    WebPFree(d);
}

TEST(quota_refusal_is_clean) {
    size_t len;
    uint8_t *d = make_webp(LOSSLESS, 300, 200, &len);
    sl_image_info info;
    CHECK_OK(sl__probe(d, len, &info, NULL, 0));
    sl__decode_req req = {.w = 300, .h = 200, .channels = 3, .lib_mem = lib_need(d, len, &info)};
    grab g = {{grab_begin, grab_rows, NULL}, malloc(300 * 200 * 3), 300, 200, 3, 0};
    g.sink.ctx = &g;
    sl__quota q = {.cap = sl__decode_mem(&info, &req) / 2};
    char why[256];
    CHECK_EQ(sl__decode(NULL, d, len, &info, &req, &q, &g.sink, why, sizeof why), SL_EBUDGET);
    CHECK_STR_CONTAINS(why, "for libwebp's own allocations");
    CHECK_EQ(q.used, 0);
    free(g.dst);
    WebPFree(d);
}

/* ---- Huffman groups: libwebp's memory read from the file ------------------------ */

/* A valid lossless file whose meta-Huffman image names 65,536 groups
 * (1024x1024, ~290 KB): libwebp 1.2.4 would allocate ~800 MB of tables
 * before reading one (350 MiB resident per worker, under no budget). The
 * bytes say so before libwebp runs: the need counts every group, and a
 * decode whose quota does not hold it is refused with the numbers before
 * libwebp allocates anything. Smaller group counts decode, inside the
 * bound read from their bytes. */
TEST(huffman_groups_counted_before_libwebp_allocates) {
    size_t len;
    uint8_t *d = ww_groups_webp(1024, 1024, 65536, &len);
    printf("1024x1024 with 65536 groups: %zu bytes\n", len);
    sl_image_info info;
    char why[256];
    CHECK_OK(sl__probe(d, len, &info, why, sizeof why));
    CHECK(info.format == SL_FORMAT_WEBP && info.width == 1024 && info.progressive);
    uint64_t need = lib_need(d, len, &info);
    printf("libwebp's need read from the file: %llu MiB\n", (unsigned long long)(need >> 20));
    CHECK(need > ((uint64_t)65536 * 2954 * 4)); /* every group's tables */
    sl__decode_req req = {.w = 224, .h = 224, .channels = 3}; /* a plan from the header alone */
    sl__quota q = {.cap = sl__decode_mem(&info, &req)};
    grab g = {{grab_begin, grab_rows, NULL}, malloc(224 * 224 * 3), 224, 224, 3, 0};
    g.sink.ctx = &g;
#ifndef SL_SANITIZED
    atomic_store(&counted, 0);
    atomic_store(&peak, 0);
    atomic_store(&counting, 1);
#endif
    CHECK_EQ(sl__decode(NULL, d, len, &info, &req, &q, &g.sink, why, sizeof why), SL_EBUDGET);
#ifndef SL_SANITIZED
    atomic_store(&counting, 0);
    printf("heap peak of the refused decode: %lld bytes\n", atomic_load(&peak));
    CHECK(atomic_load(&peak) < (1 << 20)); /* the reading's scratch; libwebp never ran */
#endif
    printf("%s\n", why);
    CHECK_STR_CONTAINS(why, "for libwebp's own allocations");
    CHECK_EQ(q.used, 0);
    /* a copy cut short, its RIFF and chunk sizes made to match (libwebp held
     * 314 MiB of one before failing): refused while its header is read */
    size_t cut = len / 3 & ~(size_t)1; /* RIFF sizes are even */
    for (int i = 0; i < 4; i++) d[4 + i] = (uint8_t)((cut - 8) >> (8 * i)), d[16 + i] = (uint8_t)((cut - 20) >> (8 * i));
    CHECK_OK(sl__probe(d, cut, &info, why, sizeof why));
    CHECK_EQ(sl__decode_lib_need(NULL, (uint64_t)1 << 20, d, cut, &info, &need, why, sizeof why), SL_ECORRUPT);
    CHECK_STR_CONTAINS(why, "data ends inside");
    free(d);
    free(g.dst);
    /* 1, 300 and 4,096 groups: decoded (one colour), inside their bounds */
    static const uint32_t groups[] = {1, 300, 4096};
    for (int k = 0; k < 3; k++) {
        d = ww_groups_webp(256, 256, groups[k], &len);
        CHECK_OK(sl__probe(d, len, &info, why, sizeof why));
        long long measured;
        uint8_t *px = decode_window(d, len, &info, 0, 0, 256, 256, 4, &measured);
        for (size_t i = 0; i < 256 * 256 * 4; i++) CHECK_EQ(px[i], 0);
        need = lib_need(d, len, &info);
        printf("%u groups: libwebp's need %llu bytes, heap peak %lld with the window\n", groups[k],
               (unsigned long long)need, measured);
        CHECK(need >= (uint64_t)groups[k] * 2954 * 4);
        free(px);
        free(d);
    }
}

/* Files libwebp's own encoder writes, every effort level and a palette:
 * the bytes are read as libwebp reads them (no false refusal) and its
 * measured heap stays inside the need (see memory_bound_holds_measured_peak
 * for the window buffer too). */
TEST(encoder_presets_read_and_bounded) {
    uint32_t W = 256, H = 192;
    uint8_t *rgb = fx_texture(W, H, 99, 0), *pal = malloc((size_t)W * H * 4);
    for (size_t i = 0; i < (size_t)W * H; i++) {
        memcpy(pal + 4 * i, rgb + 3 * i, 3);
        pal[4 * i] &= 0xc0, pal[4 * i + 1] &= 0xc0, pal[4 * i + 2] = 0; /* 16 colours: colour indexing */
        pal[4 * i + 3] = 255;
    }
    for (int level = 0; level <= 9; level += 3)
        for (int palette = 0; palette < 2; palette++) {
            WebPConfig cfg;
            WebPPicture pic;
            WebPMemoryWriter mw;
            CHECK(WebPConfigInit(&cfg) && WebPConfigLosslessPreset(&cfg, level) && WebPPictureInit(&pic));
            pic.use_argb = 1, pic.width = (int)W, pic.height = (int)H;
            CHECK(palette ? WebPPictureImportRGBA(&pic, pal, (int)W * 4) : WebPPictureImportRGB(&pic, rgb, (int)W * 3));
            WebPMemoryWriterInit(&mw);
            pic.writer = WebPMemoryWrite, pic.custom_ptr = &mw;
            CHECK(WebPEncode(&cfg, &pic));
            sl_image_info info;
            char why[256];
            CHECK_OK(sl__probe(mw.mem, mw.size, &info, why, sizeof why));
            long long measured; /* decode_window checks it against the bound */
            free(decode_window(mw.mem, mw.size, &info, 0, 0, W, H, 3, &measured));
            sl__decode_req req = {.w = W, .h = H, .channels = 3, .lib_mem = lib_need(mw.mem, mw.size, &info)};
            uint64_t bound = sl__decode_mem(&info, &req);
            printf("lossless level %d%s: %zu bytes, bound %llu, heap peak %lld (%.0f%%)\n", level,
                   palette ? " (palette)" : "", mw.size, (unsigned long long)bound, measured,
                   100.0 * (double)measured / (double)bound);
            WebPMemoryWriterClear(&mw);
            WebPPictureFree(&pic);
        }
    free(rgb), free(pal);
}

/* libwebp's own decode of the file (full, RGBA), its heap peak in *peak
 * (0 under sanitizers): 1 when it decoded. */
static int libwebp_decodes(const uint8_t *d, size_t len, long long *heap) {
#ifndef SL_SANITIZED
    atomic_store(&counted, 0);
    atomic_store(&peak, 0);
    atomic_store(&counting, 1);
#endif
    int w, h;
    uint8_t *px = WebPDecodeRGBA(d, len, &w, &h);
#ifndef SL_SANITIZED
    atomic_store(&counting, 0);
    *heap = atomic_load(&peak);
#else
    *heap = 0;
#endif
    WebPFree(px);
    return px != NULL;
}

/* Lossless streams with bits flipped in their headers (transforms,
 * colour cache, meta image, codes): reading them never crashes or reads
 * outside the input (ASan), never refuses a file libwebp decodes, and the
 * need read holds libwebp's heap peak whenever libwebp decodes it. */
TEST(mutated_lossless_headers_agree_with_libwebp) {
    static const int kinds[] = {LOSSLESS, LOSSLESS_ALPHA, LOSSY_ALPHA};
    long agree = 0, refused = 0, decoded = 0;
    for (int k = 0; k < 3; k++) {
        size_t len;
        uint8_t *orig = make_webp(kinds[k], 96, 64, &len), *d = malloc(len);
        for (int t = 0; t < 400; t++) {
            memcpy(d, orig, len);
            uint64_t r = fx_mix((uint64_t)k << 32 | (uint64_t)t);
            size_t head = SL_MIN(len, (size_t)200), at = 21 + (size_t)(r % (head - 21));
            d[at] ^= (uint8_t)(1u << ((r >> 32) % 8));
            if (t % 3 == 0) d[21 + (size_t)((r >> 40) % (head - 21))] ^= (uint8_t)(r >> 48);
            sl_image_info info;
            if (sl__probe(d, len, &info, NULL, 0)) continue;
            uint64_t need;
            char why[256];
            int rc = sl__decode_lib_need(NULL, (uint64_t)1 << 20, d, len, &info, &need, why, sizeof why);
            if (!rc && need > ((uint64_t)64 << 20)) { /* many groups: not handed to libwebp here */
                agree++;
                continue;
            }
            long long heap;
            int ok = libwebp_decodes(d, len, &heap);
            decoded += ok;
            refused += rc != 0;
            if (ok && rc) SL_FAIL("%s try %d: libwebp decodes it, the header reading refused it: %s", kind_name[kinds[k]], t, why);
            if (ok) CHECK_LE((uint64_t)heap, need + (uint64_t)96 * 64 * 4 + 4096); /* + libwebp's RGBA output here */
            agree++;
        }
        free(d);
        WebPFree(orig);
    }
    printf("%ld mutated files agree with libwebp (%ld decoded, %ld refused by the header reading)\n", agree, decoded,
           refused);
}
