/*
 * Hostile input: truncated and bit-flipped JPEG and PNG files, empty files,
 * headers declaring 65500x65500, PNG decompression bombs (huge declared
 * dimensions, an IDAT inflating far past the image, a zTXt/iCCP bomb), a
 * file that is neither format, a PNG under a .JPEG name, the max_bytes
 * limit. Each through sl_image_decode and through a real loader over a
 * folder holding them: every bad file is an error record naming the file
 * and the reason, the run goes on, nothing is allocated from a hostile
 * header, nothing leaks (ASan in `make test-asan`).
 *
 * Inputs are built here (the seed corpus tests/fuzz/corpus/decode/ for
 * valid files, a small zlib-free PNG writer for bombs), so each case is
 * self-contained and runs in its own process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"
#include "base/util.h"
#include "format/decode.h"

/* ---- files ---------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        CHECK(b->p != NULL);
        b->cap = c;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    b_put(b, x, 4);
}

/* A seed corpus file (valid images made by make_seed_corpus.py). */
static buf corpus_file(const char *name) {
    const char *src = getenv("SL_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/decode/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f) SL_FAIL("cannot open %s: %s (is SL_SRC set?)", path, strerror(errno));
    buf b = {0};
    uint8_t tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) b_put(&b, tmp, n);
    fclose(f);
    CHECK(b.n > 0);
    return b;
}

/* ---- a PNG writer for bombs (no zlib: fixed-Huffman runs of zeros) -------- */

static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void png_chunk(buf *b, const char *type, const uint8_t *data, size_t n) {
    b_u32(b, (uint32_t)n);
    size_t at = b->n;
    b_put(b, type, 4);
    if (n) b_put(b, data, n);
    b_u32(b, crc32_png(b->p + at, n + 4));
}

typedef struct bits {
    buf *b;
    uint32_t acc;
    int nacc;
} bits;
static void put_bits(bits *w, uint32_t v, int n) { /* LSB-first, as deflate */
    for (int i = 0; i < n; i++) {
        w->acc |= ((v >> i) & 1u) << w->nacc;
        if (++w->nacc == 8) {
            uint8_t c = (uint8_t)w->acc;
            b_put(w->b, &c, 1);
            w->acc = 0;
            w->nacc = 0;
        }
    }
}
static void put_huff(bits *w, uint32_t code, int n) { /* Huffman codes go MSB-first */
    for (int i = n - 1; i >= 0; i--) put_bits(w, (code >> i) & 1u, 1);
}

/* zlib stream of n zero bytes: literal 0, then <length 258, distance 1>
 * copies (13 bits per 258 bytes, ~160:1), then zero literals. */
static void zlib_zeros(buf *out, uint64_t n) {
    static const uint8_t hdr[2] = {0x78, 0x01};
    b_put(out, hdr, 2);
    bits w = {out, 0, 0};
    put_bits(&w, 1, 1); /* BFINAL */
    put_bits(&w, 1, 2); /* BTYPE = fixed Huffman */
    uint64_t left = n;
    if (left) {
        put_huff(&w, 0x30, 8); /* literal 0 */
        left--;
    }
    while (left >= 258) {
        put_huff(&w, 0xC5, 8); /* length code 285 = 258 */
        put_huff(&w, 0, 5);    /* distance code 0 = 1 */
        left -= 258;
    }
    while (left--) put_huff(&w, 0x30, 8);
    put_huff(&w, 0, 7); /* end of block */
    if (w.nacc) put_bits(&w, 0, 8 - w.nacc);
    b_u32(out, (uint32_t)((n % 65521u) << 16 | 1u)); /* adler32 of zeros */
}

/* 8-bit gray PNG declaring w x h whose IDAT inflates to `zeros` zero bytes
 * (an all-black image when zeros == h * (w + 1)); `extra` chunk before
 * IDAT if extra_type is not NULL. */
static buf png_zero(uint32_t w, uint32_t h, uint64_t zeros, const char *extra_type, const buf *extra) {
    buf b = {0};
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    b_put(&b, sig, 8);
    uint8_t ihdr[13] = {(uint8_t)(w >> 24), (uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w,
                        (uint8_t)(h >> 24), (uint8_t)(h >> 16), (uint8_t)(h >> 8), (uint8_t)h,
                        8, 0, 0, 0, 0};
    png_chunk(&b, "IHDR", ihdr, 13);
    if (extra_type) png_chunk(&b, extra_type, extra->p, extra->n);
    buf z = {0};
    zlib_zeros(&z, zeros);
    png_chunk(&b, "IDAT", z.p, z.n);
    free(z.p);
    png_chunk(&b, "IEND", NULL, 0);
    return b;
}

/* A chunk payload: keyword, NUL, compression method 0, zlib stream of n zeros. */
static buf compressed_payload(const char *keyword, uint64_t n) {
    buf p = {0};
    b_put(&p, keyword, strlen(keyword) + 1);
    uint8_t method = 0;
    b_put(&p, &method, 1);
    zlib_zeros(&p, n);
    return p;
}

/* The JPEG seed with its SOF dimensions patched. */
static buf jpeg_declaring(uint16_t w, uint16_t h) {
    buf b = corpus_file("jpg_420.jpg");
    for (size_t i = 2; i + 9 < b.n; i++) {
        if (b.p[i] == 0xFF && b.p[i + 1] >= 0xC0 && b.p[i + 1] <= 0xC2) {
            b.p[i + 5] = (uint8_t)(h >> 8);
            b.p[i + 6] = (uint8_t)h;
            b.p[i + 7] = (uint8_t)(w >> 8);
            b.p[i + 8] = (uint8_t)w;
            return b;
        }
    }
    SL_FAIL("no SOF marker in jpg_420.jpg");
}

/* ---- decoding --------------------------------------------------------------- */

static long peak_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Decode with a preset (or NONE); returns the code; why gets the reason. */
static int decode(const buf *b, int preset, uint64_t max_bytes, char *why, size_t wlen) {
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = preset;
    o.size = 32;
    if (max_bytes) o.max_bytes = max_bytes;
    uint32_t w, h, c;
    why[0] = 0;
    int rc = sl_image_output_size(b->p, b->n, &o, &w, &h, &c);
    if (rc) {
        /* the same failure must come from sl_image_decode, with a reason */
        int rc2 = sl_image_decode(b->p, b->n, &o, NULL, 0, why, wlen);
        CHECK_EQ(rc2, rc);
        CHECK(why[0] != 0);
        return rc;
    }
    size_t n = (size_t)w * h * c;
    uint8_t *out = malloc(n + 1);
    CHECK(out != NULL);
    out[n] = 0x5A;
    rc = sl_image_decode(b->p, b->n, &o, out, n, why, wlen);
    CHECK_EQ(out[n], 0x5A);
    if (rc) CHECK(why[0] != 0);
    free(out);
    return rc;
}

static const int presets[3] = {SL_TRANSFORM_NONE, SL_PRESET_VAL, SL_PRESET_TRAIN};

/* Every prefix length in steps (plus the last 64 one by one): never a
 * crash, a leak, or success with garbage past the end. */
static void truncations(const char *name) {
    buf b = corpus_file(name);
    char why[160];
    size_t step = b.n > 600 ? b.n / 300 : 1;
    int failures = 0, tries = 0;
    for (size_t cut = 0; cut < b.n; cut += (cut + 64 >= b.n ? 1 : step)) {
        buf t = {b.p, cut, cut};
        for (int k = 0; k < 3; k++) {
            int rc = decode(&t, presets[k], 0, why, sizeof why);
            CHECK(rc <= 0);
            if (rc) failures++;
            tries++;
        }
    }
    /* the header-only prefixes at least must fail */
    CHECK(failures > 0);
    printf("%s: %d truncated decodes, %d failed cleanly\n", name, tries, failures);
    free(b.p);
}

static void bitflips(const char *name) {
    buf b = corpus_file(name);
    char why[160];
    int failures = 0;
    uint32_t x = 12345;
    for (size_t i = 0; i < b.n; i++) {
        for (int rep = 0; rep < 2; rep++) {
            x = x * 1103515245u + 12345u;
            int bit = (int)((x >> 16) & 7);
            b.p[i] ^= (uint8_t)(1u << bit);
            int rc = decode(&b, presets[(i + (size_t)rep) % 3], 0, why, sizeof why);
            CHECK(rc <= 0);
            if (rc) failures++;
            b.p[i] ^= (uint8_t)(1u << bit);
        }
    }
    printf("%s: %zu flips, %d failed cleanly\n", name, 2 * b.n, failures);
    free(b.p);
}

TEST(truncated_jpeg) {
    truncations("jpg_420.jpg");
    truncations("jpg_progressive.jpg");
    truncations("jpg_128x96_q30.jpg");
}

TEST(truncated_png) {
    truncations("png_ct2_d8.png");
    truncations("png_ct6_d16_il.png");
    truncations("png_ct3_d4_trns.png");
    truncations("png_multi_idat.png");
}

TEST(bitflip_jpeg) {
    bitflips("jpg_420.jpg");
    bitflips("jpg_restart.jpg");
    bitflips("jpg_cmyk.jpg");
}

TEST(bitflip_png) {
    bitflips("png_ct2_d8.png");
    bitflips("png_ct3_d8_trns.png");
    bitflips("png_ct0_d16_il.png");
}

TEST(zero_length) {
    buf b = {(uint8_t *)"", 0, 0};
    sl_image_info info;
    CHECK_EQ(sl_image_probe("", 0, &info), SL_EFORMAT);
    char why[160];
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(decode(&b, presets[k], 0, why, sizeof why), SL_EFORMAT);
        CHECK_STR_CONTAINS(why, "empty");
    }
}

TEST(neither_format) {
    const char *texts[] = {"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "just some text, not an image\n",
                           "\xFF\xD8", "\x89PNG\r\n", "BM\x36\x00\x00\x00"};
    char why[160];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        buf b = {(uint8_t *)texts[i], strlen(texts[i]), 0};
        sl_image_info info;
        int rc = sl_image_probe(b.p, b.n, &info);
        CHECK(rc == SL_EFORMAT || rc == SL_ECORRUPT); /* short JPEG/PNG prefixes: corrupt */
        CHECK_EQ(decode(&b, SL_TRANSFORM_NONE, 0, why, sizeof why), rc);
    }
    buf gif = {(uint8_t *)texts[0], strlen(texts[0]), 0};
    CHECK_EQ(decode(&gif, SL_PRESET_TRAIN, 0, why, sizeof why), SL_EFORMAT);
    CHECK_STR_CONTAINS(why, "not a JPEG, PNG or WebP");
}

TEST(jpeg_65500_declared) {
    buf b = jpeg_declaring(65500, 65500);
    sl_image_info info;
    CHECK_OK(sl_image_probe(b.p, b.n, &info));
    CHECK_EQ(info.width, 65500);
    CHECK_EQ(info.height, 65500);
    long rss0 = peak_rss_kib();
    char why[160];
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(decode(&b, presets[k], 0, why, sizeof why), SL_ELIMIT);
        CHECK_STR_CONTAINS(why, "pixels");
    }
    /* 65500^2 RGB is 12 GiB: nothing of it may have been touched */
    CHECK_LE(peak_rss_kib() - rss0, 8 * 1024);
    free(b.p);
}

TEST(png_huge_declared) {
    buf b = png_zero(100000, 100000, 1000, NULL, NULL);
    long rss0 = peak_rss_kib();
    char why[160];
    for (int k = 0; k < 3; k++) CHECK_EQ(decode(&b, presets[k], 0, why, sizeof why), SL_ELIMIT);
    CHECK_LE(peak_rss_kib() - rss0, 8 * 1024);
    free(b.p);
}

/* A 4000x4000 black PNG (16 Mpx, under the limit) whose IDAT inflates to
 * 1 GiB: the decoder inflates what the header declares and stops; memory
 * stays at a few rows. */
TEST(png_idat_bomb) {
    if (!sl__png_available()) {
        printf("built without libspng: skipped\n");
        return;
    }
    const uint32_t w = 4000, h = 4000;
    buf b = png_zero(w, h, (uint64_t)1 << 30, NULL, NULL);
    CHECK_LE(b.n, 8u << 20);
    sl_image_info info;
    CHECK_OK(sl_image_probe(b.p, b.n, &info));
    sl__decode_req req = {0, 0, w, h, 0, 0, 3, 0, 0, NULL, 0};
    uint64_t cap = sl__png_mem(&info, &req);
    /* bounded by rows and chunk limits, not by the image */
    CHECK_LE(cap, 8u << 20);
    long rss0 = peak_rss_kib();
    char why[160];
    int rc = decode(&b, SL_PRESET_TRAIN, 0, why, sizeof why);
    CHECK_OK(rc);
    rc = decode(&b, SL_PRESET_VAL, 0, why, sizeof why);
    CHECK_OK(rc);
    CHECK_LE(peak_rss_kib() - rss0, 64 * 1024);
    free(b.p);
}

/* zTXt and iCCP chunks inflating to 64 MiB: refused by libspng's chunk
 * limits as an SL_ELIMIT record, before the memory is taken. */
TEST(png_chunk_bombs) {
    if (!sl__png_available()) {
        printf("built without libspng: skipped\n");
        return;
    }
    const char *types[2] = {"zTXt", "iCCP"};
    for (int i = 0; i < 2; i++) {
        buf payload = compressed_payload("bomb", (uint64_t)64 << 20);
        buf b = png_zero(16, 16, 16 * 17, types[i], &payload);
        long rss0 = peak_rss_kib();
        char why[160];
        for (int k = 0; k < 3; k++) {
            CHECK_EQ(decode(&b, presets[k], 0, why, sizeof why), SL_ELIMIT);
            CHECK_STR_CONTAINS(why, "chunk");
        }
        CHECK_LE(peak_rss_kib() - rss0, 16 * 1024);
        free(payload.p);
        free(b.p);
    }
}

/* A row sink that checks the region and the rows it is handed. */
typedef struct count_sink {
    sl__region r;
    int begun;
    uint32_t next_row;
    uint64_t sum;
} count_sink;
static int cs_begin(sl__row_sink *s, const sl__region *r) {
    count_sink *c = s->ctx;
    CHECK(!c->begun);
    c->begun = 1;
    c->r = *r;
    return 0;
}
static int cs_rows(sl__row_sink *s, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    count_sink *c = s->ctx;
    CHECK(c->begun);
    CHECK_EQ(y, c->next_row);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < c->r.w * c->r.channels; k++) c->sum += rows[i][k];
    c->next_row += n;
    return 0;
}

/* Straight at the decoder: every PNG decode stays within the bound
 * sl__png_mem() gave from the header (a quota of exactly that size never
 * refuses), delivers exactly the window asked for, and frees everything. */
TEST(png_mem_bound_holds) {
    if (!sl__png_available()) return;
    const char *names[] = {"png_ct0_d1.png", "png_ct2_d16.png", "png_ct6_d16_il.png", "png_ct3_d8_trns.png",
                           "png_chunks.png", "png_multi_idat.png", "png_40x32_rgb.png", "png_1x1.png"};
    buf files[12];
    size_t nf = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) files[nf++] = corpus_file(names[i]);
    buf payload = compressed_payload("bomb", (uint64_t)1 << 20); /* under the limit: kept */
    files[nf++] = png_zero(300, 200, 200 * 301, "zTXt", &payload);
    files[nf++] = png_zero(2000, 1000, (uint64_t)1 << 28, NULL, NULL);
    for (size_t i = 0; i < nf; i++) {
        sl_image_info info;
        char why[160];
        CHECK_OK(sl__probe(files[i].p, files[i].n, &info, why, sizeof why));
        for (uint32_t ch = 3; ch <= 4; ch++) {
            sl__decode_req req = {info.width / 3, info.height / 4, info.width - info.width / 3,
                                  info.height / 2 ? info.height / 2 : 1, 0, 0, ch, 0, 0, NULL, 0};
            sl__quota q = {sl__png_mem(&info, &req), 0, 0, 0};
            count_sink c = {0};
            sl__row_sink sink = {cs_begin, cs_rows, &c};
            int rc = sl__png_decode(files[i].p, files[i].n, &info, &req, &q, &sink, why, sizeof why);
            if (rc) SL_FAIL("file %zu ch %u: %s (%s)", i, ch, sl_strerror(rc), why);
            CHECK_EQ(c.r.scale_num, 8);
            CHECK_EQ(c.r.x, req.x);
            CHECK_EQ(c.r.y, req.y);
            CHECK_EQ(c.r.w, req.w);
            CHECK_EQ(c.r.h, req.h);
            CHECK_EQ(c.r.channels, ch);
            CHECK_EQ(c.next_row, req.h);
            CHECK_LE(q.peak, q.cap);
            CHECK_EQ(q.used, 0); /* everything given back */
        }
        free(files[i].p);
    }
    free(payload.p);
}

/* A quota one byte short of what a decode needs: SL_EBUDGET with a reason,
 * nothing leaked, for every failing size down to zero (allocation-failure
 * injection through the quota). */
TEST(png_quota_failure_injection) {
    if (!sl__png_available()) return;
    /* Not png_chunks.png: libspng 0.7.3 reads past its text-chunk array in
     * spng_ctx_free when a realloc of that array fails (seen under
     * valgrind). The loader never reaches that path: the quota it gives a
     * PNG is sl__png_mem(), which covers libspng's own chunk cache limit, so
     * libspng refuses oversized chunks before any allocation can fail. */
    const char *names[] = {"png_ct6_d16_il.png", "png_ct3_d8_trns.png"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        buf b = corpus_file(names[i]);
        sl_image_info info;
        char why[160];
        CHECK_OK(sl__probe(b.p, b.n, &info, why, sizeof why));
        sl__decode_req req = {0, 0, info.width, info.height, 0, 0, 4, 0, 0, NULL, 0};
        sl__quota q = {sl__png_mem(&info, &req), 0, 0, 0};
        count_sink c = {0};
        sl__row_sink sink = {cs_begin, cs_rows, &c};
        CHECK_OK(sl__png_decode(b.p, b.n, &info, &req, &q, &sink, why, sizeof why));
        uint64_t need = q.peak;
        for (uint64_t cap = need; cap-- > 0;) {
            sl__quota q2 = {cap, 0, 0, 0};
            count_sink c2 = {0};
            sl__row_sink s2 = {cs_begin, cs_rows, &c2};
            int rc = sl__png_decode(b.p, b.n, &info, &req, &q2, &s2, why, sizeof why);
            CHECK_EQ(rc, SL_EBUDGET);
            CHECK(why[0] != 0);
            CHECK_EQ(q2.used, 0);
            if (cap > 4096) cap = cap * 15 / 16; /* thin out the large caps */
        }
        free(b.p);
    }
}

TEST(png_named_jpeg_decodes) {
    if (!sl__png_available()) {
        printf("built without libspng: skipped\n");
        return;
    }
    /* format by content: the bytes are what count, not a name */
    buf b = corpus_file("png_ct2_d8.png");
    sl_image_info info;
    CHECK_OK(sl_image_probe(b.p, b.n, &info));
    CHECK_EQ(info.format, SL_FORMAT_PNG);
    char why[160];
    for (int k = 0; k < 3; k++) CHECK_OK(decode(&b, presets[k], 0, why, sizeof why));
    free(b.p);
}

TEST(max_bytes_limit) {
    buf b = corpus_file("jpg_128x96_q30.jpg");
    char why[160];
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(decode(&b, presets[k], b.n - 1, why, sizeof why), SL_ELIMIT);
        CHECK_OK(decode(&b, presets[k], b.n, why, sizeof why));
    }
    free(b.p);
}

/* ---- through a loader --------------------------------------------------- */

static char tmp_root[256];
static int rm_cb(const char *p, const struct stat *st, int type, struct FTW *f) {
    (void)st, (void)type, (void)f;
    return remove(p);
}
static void cleanup(void) {
    if (tmp_root[0]) nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
static void put(const char *rel, const buf *b) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    if (mkdir(path, 0755) != 0 && errno != EEXIST) SL_FAIL("mkdir %s: %s", path, strerror(errno));
    *slash = '/';
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (b->n) CHECK_EQ(fwrite(b->p, 1, b->n, f), b->n);
    CHECK_EQ(fclose(f), 0);
}

/* The expected failure of one file in the folder. */
typedef struct bad_file {
    const char *rel;
    int code;
    const char *reason_part;
} bad_file;

static void loader_over_hostile_folder(int preset) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/sl_test_hostile_XXXXXX");
    CHECK(mkdtemp(tmp_root) != NULL);
    atexit(cleanup);
    /* good files: 6 (one a PNG named .JPEG) */
    const char *good[] = {"jpg_420.jpg", "jpg_progressive.jpg", "jpg_gray.jpg", "jpg_cmyk.jpg"};
    char rel[256];
    for (int i = 0; i < 4; i++) {
        buf b = corpus_file(good[i]);
        snprintf(rel, sizeof rel, "a/good_%d.JPEG", i);
        put(rel, &b);
        free(b.p);
    }
    buf png = corpus_file("png_ct6_d8.png");
    put("b/png_named.JPEG", &png);
    put("b/real.png", &png);
    /* bad files */
    buf jpg = corpus_file("jpg_128x96_q30.jpg");
    buf trunc = {jpg.p, 200, 200};
    put("a/truncated.JPEG", &trunc);
    buf empty = {(uint8_t *)"", 0, 0};
    put("a/empty.JPEG", &empty);
    buf text = {(uint8_t *)"this is not an image\n", 21, 0};
    put("b/text.JPEG", &text);
    buf huge = jpeg_declaring(65500, 65500);
    put("b/huge.JPEG", &huge);
    buf bomb = png_zero(100000, 100000, 1000, NULL, NULL);
    put("c/bomb_dims.png", &bomb);
    buf payload = compressed_payload("bomb", (uint64_t)64 << 20);
    buf zbomb = png_zero(16, 16, 16 * 17, "zTXt", &payload);
    put("c/bomb_ztxt.png", &zbomb);
    /* over max_bytes (set to 1 MiB below): a valid but large PNG */
    buf tx = {calloc(1100000, 1), 1100000, 0};
    CHECK(tx.p != NULL);
    memcpy(tx.p, "Comment", 8); /* keyword, NUL, then zeros as text: dropped by the decoder */
    buf big = png_zero(300, 300, 300 * 301, "tEXt", &tx);
    free(tx.p);
    put("c/too_big.png", &big);
    /* not regular files, named like images: never opened blocking */
    char special[1100];
    snprintf(special, sizeof special, "%s/d", tmp_root);
    CHECK_EQ(mkdir(special, 0755), 0);
    snprintf(special, sizeof special, "%s/d/fifo.JPEG", tmp_root);
    CHECK_EQ(mkfifo(special, 0644), 0);
    snprintf(special, sizeof special, "%s/d/zero.JPEG", tmp_root);
    CHECK_EQ(symlink("/dev/zero", special), 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/d/socket.JPEG", tmp_root) >= sizeof sa.sun_path)
        SL_FAIL("socket path too long");
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(sock >= 0);
    CHECK_EQ(bind(sock, (struct sockaddr *)&sa, sizeof sa), 0);
    const bad_file bad[] = {
        {"a/truncated.JPEG", SL_ECORRUPT, ""},  {"a/empty.JPEG", SL_EFORMAT, "empty"},
        {"b/text.JPEG", SL_EFORMAT, "not a JPEG, PNG or WebP"}, {"b/huge.JPEG", SL_ELIMIT, "pixels"},
        {"c/bomb_dims.png", SL_ELIMIT, "pixels"}, {"c/bomb_ztxt.png", SL_ELIMIT, "chunk"},
        {"c/too_big.png", SL_ELIMIT, "bytes"},
        {"d/fifo.JPEG", SL_EIO, "not a regular file (a FIFO)"}, {"d/zero.JPEG", SL_EIO, "not a regular file (a device)"},
        {"d/socket.JPEG", SL_EIO, "not a regular file (a socket)"},
    };
    const size_t nbad = sizeof bad / sizeof *bad, ngood = 6;

    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = tmp_root;
    cfg.batch_size = 4;
    cfg.size = 32;
    cfg.preset = preset;
    cfg.workers = 2;
    cfg.budget = 64u << 20;
    cfg.max_bytes = 1u << 20;
    cfg.on_error = SL_ON_ERROR_SKIP;
    sl_loader *ld = NULL;
    char err[256] = "";
    int rc = sl_loader_create(&cfg, &ld, err, sizeof err);
    if (rc) SL_FAIL("sl_loader_create: %s (%s)", sl_strerror(rc), err);
    CHECK_EQ(sl_loader_dataset_size(ld), ngood + nbad);
    for (int epoch = 0; epoch < 2; epoch++) {
        uint64_t delivered = 0;
        sl_batch *bt;
        while ((rc = sl_loader_next(ld, &bt)) == 0) {
            delivered += sl_batch_len(bt);
            sl_loader_release(ld, bt);
        }
        CHECK_EQ(rc, SL_EEND);
        /* every good file delivered, every bad one skipped: the run went on */
        CHECK_EQ(delivered, ngood);
    }
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 2 * nbad);
    CHECK_LE(st.peak_accounted_bytes, cfg.budget);
    sl_error_record recs[32];
    size_t nrec = sl_loader_errors(ld, 0, recs, 32);
    CHECK_EQ(nrec, 2 * nbad);
    int seen[16] = {0};
    for (size_t i = 0; i < nrec; i++) {
        char pb[1024];
        const char *path = sl_loader_sample_path(ld, recs[i].index, pb, sizeof pb);
        CHECK(path != NULL);
        CHECK(recs[i].reason[0] != 0);
        size_t k = 0;
        while (k < nbad && !strstr(path, bad[k].rel)) k++;
        if (k == nbad) SL_FAIL("error record for a good file %s: %s", path, recs[i].reason);
        if (recs[i].code != bad[k].code)
            SL_FAIL("%s: code %d (%s), expected %d (%s); reason: %s", bad[k].rel, recs[i].code,
                    sl_strerror(recs[i].code), bad[k].code, sl_strerror(bad[k].code), recs[i].reason);
        CHECK_STR_CONTAINS(recs[i].reason, bad[k].reason_part);
        seen[k]++;
    }
    for (size_t k = 0; k < nbad; k++) {
        if (seen[k] != 2) SL_FAIL("%s: %d error records over 2 epochs, expected 2", bad[k].rel, seen[k]);
    }
    sl_loader_destroy(ld);
    close(sock);
    free(jpg.p), free(png.p), free(huge.p), free(bomb.p), free(payload.p), free(zbomb.p), free(big.p);
}

/* The folder holds good PNGs: without libspng they would be errors too. */
TEST(loader_hostile_folder_train) {
    if (sl__png_available()) loader_over_hostile_folder(SL_PRESET_TRAIN);
    else printf("built without libspng: skipped\n");
}
TEST(loader_hostile_folder_val) {
    if (sl__png_available()) loader_over_hostile_folder(SL_PRESET_VAL);
    else printf("built without libspng: skipped\n");
}

/* A JPEG cut inside its image data fails whatever crop the train preset
 * draws: the verdict must not depend on the epoch's randomness. */
TEST(truncated_jpeg_fails_for_every_crop) {
    buf b = corpus_file("jpg_420.jpg");
    size_t cut = b.n * 2 / 3;
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_TRAIN;
    o.size = 32;
    uint8_t out[3 * 32 * 32];
    char why[160];
    for (uint64_t idx = 0; idx < 64; idx++) {
        o.index = idx;
        int rc = sl_image_decode(b.p, cut, &o, out, sizeof out, why, sizeof why);
        if (rc != SL_ECORRUPT) SL_FAIL("index %llu: %s (%s)", (unsigned long long)idx, sl_strerror(rc), why);
        CHECK_STR_CONTAINS(why, "truncated");
    }
    CHECK_OK(sl_image_decode(b.p, b.n, &o, out, sizeof out, why, sizeof why));
    free(b.p);
}

/* ---- bounded decode work: scan bombs and cancellation ------------------- */

#include <jpeglib.h>

/* Offsets of the SOS markers of a JPEG, walking its markers as a decoder
 * does (segments by length, entropy data by 0xFF escapes); *eoi gets the
 * offset of EOI. Returns the count (at most max recorded). */
static uint32_t sos_offsets(const buf *b, size_t *at, uint32_t max, size_t *eoi) {
    uint32_t n = 0;
    size_t pos = 2;
    *eoi = b->n;
    while (pos + 1 < b->n) {
        if (b->p[pos] != 0xFF || b->p[pos + 1] == 0x00 || b->p[pos + 1] == 0xFF ||
            (b->p[pos + 1] >= 0xD0 && b->p[pos + 1] <= 0xD7)) {
            pos++;
            continue;
        }
        if (b->p[pos + 1] == 0xD9) {
            *eoi = pos;
            break;
        }
        if (b->p[pos + 1] == 0xDA && n < max) at[n] = pos;
        n += b->p[pos + 1] == 0xDA;
        pos += 2 + ((size_t)b->p[pos + 2] << 8 | b->p[pos + 3]);
    }
    return n;
}

/* A progressive JPEG of w x h, a test pattern: libjpeg's standard
 * progression (script NULL) or the n scans of script. */
static buf progressive_jpeg(uint32_t w, uint32_t h, const jpeg_scan_info *script, int n) {
    uint8_t *row = malloc((size_t)w * 3);
    CHECK(row != NULL);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *jp = NULL;
    unsigned long jn = 0;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &jp, &jn);
    c.image_width = w, c.image_height = h, c.input_components = 3, c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 85, TRUE);
    if (script) c.scan_info = script, c.num_scans = n;
    else jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        for (uint32_t x = 0; x < w; x++)
            row[3 * x] = (uint8_t)(x ^ c.next_scanline), row[3 * x + 1] = (uint8_t)(x * 3),
            row[3 * x + 2] = (uint8_t)(c.next_scanline * 5);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return (buf){jp, jn, jn};
}

/* A progressive JPEG of w x h (libjpeg's standard progression) whose last
 * scan is repeated `repeats` more times before EOI: the header is legal,
 * and every extra scan costs libjpeg a pass over the whole image.
 * *scans gets the scan count of the result. */
static buf scan_bomb(uint32_t w, uint32_t h, uint32_t repeats, uint32_t *scans) {
    buf src = progressive_jpeg(w, h, NULL, 0), out = {0};
    size_t at[64], eoi;
    uint32_t n = sos_offsets(&src, at, 64, &eoi);
    CHECK(n >= 2 && n <= 64);
    b_put(&out, src.p, eoi);
    for (uint32_t k = 0; k < repeats; k++) b_put(&out, src.p + at[n - 1], eoi - at[n - 1]);
    b_put(&out, src.p + eoi, src.n - eoi);
    free(src.p);
    size_t at2[1];
    *scans = sos_offsets(&out, at2, 0, &eoi);
    CHECK_EQ(*scans, n + repeats);
    return out;
}

/* The scan bomb of the issue (300 repeats) is refused from its markers by
 * every preset, with the count and the limit in the reason, before the
 * decoder allocates anything. */
TEST(jpeg_scan_bomb_refused_before_decoding) {
    uint32_t scans;
    buf b = scan_bomb(1024, 1024, 300, &scans);
    char why[200], want[64];
    snprintf(want, sizeof want, "JPEG has %u scans, over the max_scans limit of 64", scans);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(decode(&b, presets[k], 0, why, sizeof why), SL_ELIMIT);
        CHECK_STR_CONTAINS(why, want);
    }
    sl_image_info info;
    CHECK_OK(sl__probe(b.p, b.n, &info, why, sizeof why));
    CHECK(info.progressive);
    sl__decode_req req = {0, 0, info.width, info.height, 0, 0, 3, 0, 64, NULL, 0};
    sl__quota q = {sl__decode_mem(&info, &req), 0, 0, 0};
    count_sink c = {0};
    sl__row_sink sink = {cs_begin, cs_rows, &c};
    sl__decoder *d = sl__decoder_new();
    CHECK(d != NULL);
    CHECK_EQ(sl__decode(d, b.p, b.n, &info, &req, &q, &sink, why, sizeof why), SL_ELIMIT);
    CHECK_EQ(q.peak, 0);   /* nothing was allocated: no scan was decoded */
    CHECK(!c.begun);
    sl__decoder_free(d);
    free(b.p);
}

/* A legal progressive JPEG of w x h with many scans: the DC of every
 * component, then each component's AC band sent at Al = 4 and refined a
 * bit a scan down to 0 (16 scans). A repeated scan would not do here: a
 * second refinement pass reads its bits against coefficients the first
 * one already set, so its entropy data desynchronises, and what libjpeg
 * makes of that differs between its builds (API 62: tolerated; API 80 on
 * the GPU host: a decode error). */
static buf many_scans(uint32_t w, uint32_t h, uint32_t *scans) {
    static jpeg_scan_info script[16];
    int n = 0;
    script[n++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, 0};
    for (int ci = 0; ci < 3; ci++) {
        script[n++] = (jpeg_scan_info){1, {ci, 0, 0, 0}, 1, 63, 0, 4};
        for (int al = 4; al > 0; al--) script[n++] = (jpeg_scan_info){1, {ci, 0, 0, 0}, 1, 63, al, al - 1};
    }
    buf out = progressive_jpeg(w, h, script, n);
    size_t eoi;
    *scans = sos_offsets(&out, NULL, 0, &eoi);
    CHECK_EQ(*scans, (uint32_t)n);
    return out;
}

/* max_scans is a bound, not a guess: a file with exactly that many scans
 * decodes (the same pixels as with no limit), one more is SL_ELIMIT. */
TEST(jpeg_max_scans_boundary) {
    uint32_t scans;
    buf b = many_scans(96, 64, &scans);
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_VAL;
    o.size = 32;
    uint8_t out[3 * 32 * 32], ref[3 * 32 * 32];
    char why[200];
    o.max_scans = 1000;
    CHECK_OK(sl_image_decode(b.p, b.n, &o, ref, sizeof ref, why, sizeof why));
    o.max_scans = scans;
    CHECK_OK(sl_image_decode(b.p, b.n, &o, out, sizeof out, why, sizeof why));
    CHECK(memcmp(out, ref, sizeof out) == 0);
    o.max_scans = scans - 1;
    CHECK_EQ(sl_image_decode(b.p, b.n, &o, out, sizeof out, why, sizeof why), SL_ELIMIT);
    char want[80];
    snprintf(want, sizeof want, "%u scans, over the max_scans limit of %u", scans, scans - 1);
    CHECK_STR_CONTAINS(why, want);
    free(b.p);
}

/* Through a loader: the bomb is one error record (SL_ELIMIT, the count in
 * the reason); the good files around it are delivered. */
TEST(loader_scan_bomb_is_an_error_record) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/sl_test_scans_XXXXXX");
    CHECK(mkdtemp(tmp_root) != NULL);
    atexit(cleanup);
    uint32_t scans;
    buf bomb = scan_bomb(1024, 768, 300, &scans);
    put("a/bomb.jpg", &bomb);
    const char *good[] = {"jpg_420.jpg", "jpg_progressive.jpg", "jpg_gray.jpg"};
    for (int i = 0; i < 3; i++) {
        buf g = corpus_file(good[i]);
        char rel[64];
        snprintf(rel, sizeof rel, "b/good_%d.jpg", i);
        put(rel, &g);
        free(g.p);
    }
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = tmp_root;
    cfg.batch_size = 4;
    cfg.size = 32;
    cfg.workers = 2;
    cfg.budget = 64u << 20;
    sl_loader *ld;
    char err[256];
    CHECK_OK(sl_loader_create(&cfg, &ld, err, sizeof err));
    sl_batch *bt;
    uint32_t delivered = 0;
    while (sl_loader_next(ld, &bt) == 0) {
        delivered += sl_batch_len(bt);
        sl_loader_release(ld, bt);
    }
    CHECK_EQ(delivered, 3);
    sl_error_record rec;
    CHECK_EQ(sl_loader_errors(ld, 0, &rec, 1), 1);
    CHECK_EQ(rec.code, SL_ELIMIT);
    char want[64];
    snprintf(want, sizeof want, "%u scans", scans);
    CHECK_STR_CONTAINS(rec.reason, want);
    sl_loader_destroy(ld);
    free(bomb.p);
}

/* A sink that raises the cancel flag when the decode starts delivering. */
typedef struct cancel_sink {
    count_sink c;
    _Atomic int *flag;
} cancel_sink;
static int cancel_begin(sl__row_sink *s, const sl__region *r) {
    cancel_sink *k = s->ctx;
    *k->flag = 1;
    sl__row_sink inner = {cs_begin, cs_rows, &k->c};
    return cs_begin(&inner, r);
}
static int cancel_rows(sl__row_sink *s, const uint8_t *const *rows, uint32_t y, uint32_t n) {
    cancel_sink *k = s->ctx;
    sl__row_sink inner = {cs_begin, cs_rows, &k->c};
    return cs_rows(&inner, rows, y, n);
}

/* Cancel, set before the decode or raised once rows flow: JPEG (baseline:
 * between row batches; progressive: libjpeg's progress monitor while it
 * reads the scans), PNG and interlaced PNG (between rows). Every one
 * stops with SL_ESTATE "decode cancelled", leaves the quota empty, and the
 * decoder decodes the next file normally. */
TEST(decode_cancel) {
    const char *files[] = {"jpg_420.jpg", "jpg_progressive.jpg", "png_ct2_d8.png", "png_ct2_d8_il.png"};
    for (int f = 0; f < 4; f++) {
        if (files[f][0] == 'p' && !sl__png_available()) continue;
        buf b = corpus_file(files[f]);
        sl_image_info info;
        char why[200];
        CHECK_OK(sl__probe(b.p, b.n, &info, why, sizeof why));
        sl__decoder *d = sl__decoder_new();
        CHECK(d != NULL);
        for (int when = 0; when < 2; when++) { /* 0: before, 1: from the sink */
            _Atomic int flag = when == 0;
            sl__decode_req req = {0, 0, info.width, info.height, 0, 0, 3, 0, 64, &flag, 0};
            sl__quota q = {sl__decode_mem(&info, &req), 0, 0, 0};
            cancel_sink k = {.flag = &flag};
            sl__row_sink sink = {when ? cancel_begin : cs_begin, when ? cancel_rows : cs_rows, when ? (void *)&k : &k.c};
            why[0] = 0;
            int rc = sl__decode(d, b.p, b.n, &info, &req, &q, &sink, why, sizeof why);
            if (rc != SL_ESTATE) SL_FAIL("%s, cancel %s: rc %d (%s)", files[f], when ? "from the sink" : "before", rc, why);
            CHECK_STR_CONTAINS(why, "decode cancelled");
            CHECK_EQ(q.used, 0);
            CHECK(k.c.next_row < info.height); /* stopped early */
            /* the same decoder, no cancel: the whole image */
            flag = 0;
            sl__quota q2 = {sl__decode_mem(&info, &req), 0, 0, 0};
            count_sink c = {0};
            sl__row_sink all = {cs_begin, cs_rows, &c};
            CHECK_OK(sl__decode(d, b.p, b.n, &info, &req, &q2, &all, why, sizeof why));
            CHECK_EQ(c.next_row, info.height);
        }
        sl__decoder_free(d);
        free(b.p);
    }
}
