/*
 * WebP: what libwebp will allocate on its own, read from the file's bytes.
 *
 * libwebp has no allocator hooks. Its lossy decoder's memory follows the
 * frame size (webp.c bounds it from the header), but a lossless stream —
 * a lossless file, or the alpha plane of a lossy one — sizes its Huffman
 * tables from counts in its own header: up to 65,536 groups of up to
 * 20 KiB each, allocated before a table is read (a valid 295 KB file of
 * 1024x1024 with 65,536 groups made libwebp hold 350 MiB per worker that
 * no budget saw). So the stream's header is read here first, as libwebp
 * 1.2.4 (src/dec/vp8l_dec.c, with Debian's CVE-2023-4863 patch) reads it,
 * up to the main image's Huffman codes:
 *   - the transforms, each at most once: predictor and cross-colour keep a
 *     sub-image of ceil(w/2^b) x ceil(h/2^b) pixels, colour indexing a
 *     palette of 2^(8 >> bits) entries and packs the width; their
 *     sub-images are entropy-decoded here only to be skipped;
 *   - the colour cache (1 to 11 bits);
 *   - the meta-Huffman image, entropy-decoded: its pixels name the groups.
 *     libwebp makes one table set per index up to the largest, or, when
 *     the largest is over 1000 or over the image's pixels, one per index
 *     used (and a mapping of largest + 1 ints).
 * Every allocation of the decode follows from those numbers (vp8l_need);
 * the tables come in one block of groups x kTableSize[cache bits] codes,
 * which holds every valid code (zlib's "enough" bounds; the patch's extra
 * segments are only for codes past them, which libwebp refuses).
 *
 * Hostile input: every read is bounds-checked (past the end the reader
 * gives zeros and says so, as libwebp's does), every size overflow-checked,
 * and the work is linear in the sub-images' pixels. Memory: the decoding
 * state (~48 KiB) and the meta-Huffman image (4 bytes a pixel) come from
 * the caller's quota; a meta image the quota cannot hold is bounded by the
 * most groups it could name instead (a hostile one: then far over any
 * room). A stream libwebp would refuse in its header is refused here
 * (SL_ECORRUPT, with the reason).
 */
#include <string.h>

#include "base/util.h"
#include "format/decode.h"

typedef unsigned long long ull;

#define MAX_SYMBOLS (256 + 24 + 2048) /* green: literals, lengths, an 11-bit colour cache */
#define PEEK_BITS 8
#define MAX_GROUPS 65536
/* libwebp 1.2.4's per-group structures: HuffmanCode is 4 bytes; HTreeGroup
 * is 5 pointers, 4 ints and a packed table of 64 8-byte entries (568 on
 * x86-64, taken as 576); every table set is kTableSize[cache bits] codes. */
#define HUFFMAN_CODE_BYTES 4
#define HTREE_GROUP_BYTES 576
static const uint16_t table_size[12] = {2954, 2956, 2958, 2962, 2970, 2986, 3018, 3082, 3212, 3468, 3980, 5004};
/* Besides the numbers above: the decoder object, its bit reader and io,
 * code-length scratch (2,328 ints and a sort of as many shorts), a
 * sub-image's own tables while it is read, and malloc's headers: */
#define VP8L_FIXED ((uint64_t)96 << 10)

static const uint8_t code_length_order[19] = {17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const uint8_t code_to_plane[120] = {
    0x18, 0x07, 0x17, 0x19, 0x28, 0x06, 0x27, 0x29, 0x16, 0x1a, 0x26, 0x2a, 0x38, 0x05, 0x37, 0x39, 0x15, 0x1b, 0x36, 0x3a,
    0x25, 0x2b, 0x48, 0x04, 0x47, 0x49, 0x14, 0x1c, 0x35, 0x3b, 0x46, 0x4a, 0x24, 0x2c, 0x58, 0x45, 0x4b, 0x34, 0x3c, 0x03,
    0x57, 0x59, 0x13, 0x1d, 0x56, 0x5a, 0x23, 0x2d, 0x44, 0x4c, 0x55, 0x5b, 0x33, 0x3d, 0x68, 0x02, 0x67, 0x69, 0x12, 0x1e,
    0x66, 0x6a, 0x22, 0x2e, 0x54, 0x5c, 0x43, 0x4d, 0x65, 0x6b, 0x32, 0x3e, 0x78, 0x01, 0x77, 0x79, 0x53, 0x5d, 0x11, 0x1f,
    0x64, 0x6c, 0x42, 0x4e, 0x76, 0x7a, 0x21, 0x2f, 0x75, 0x7b, 0x31, 0x3f, 0x63, 0x6d, 0x52, 0x5e, 0x00, 0x74, 0x7c, 0x41,
    0x4f, 0x10, 0x20, 0x62, 0x6e, 0x30, 0x73, 0x7d, 0x51, 0x5f, 0x40, 0x72, 0x7e, 0x61, 0x6f, 0x50, 0x71, 0x7f, 0x60, 0x70};

/* ---- bits --------------------------------------------------------------------- */

/* LSB first, as VP8L packs them. Past the end: zeros, and eos set once a
 * read needs a bit that is not there. */
typedef struct vbits {
    const uint8_t *p;
    size_t len, pos;
    uint64_t acc;
    int n;   /* bits in acc */
    int eos;
} vbits;

static void fill(vbits *b) {
    while (b->n <= 56 && b->pos < b->len) {
        b->acc |= (uint64_t)b->p[b->pos++] << b->n;
        b->n += 8;
    }
}

static uint32_t rd(vbits *b, int k) { /* k <= 32 */
    if (b->n < k) {
        fill(b);
        if (b->n < k) { /* the stream ends inside these bits */
            b->eos = 1;
            b->n = k;
        }
    }
    uint32_t v = (uint32_t)(b->acc & ((k == 32 ? 0 : (uint64_t)1 << k) - 1));
    b->acc = k == 64 ? 0 : b->acc >> k;
    b->n -= k;
    return v;
}

/* ---- prefix codes ----------------------------------------------------------------- */

/* A canonical prefix code (codes by length, then symbol, first bit read
 * first: as deflate and VP8L write them). Codes of up to PEEK_BITS bits
 * are found in fast[] (symbol << 4 | length, 0: longer); longer ones bit by
 * bit. A code of one symbol takes no bits (libwebp's rule). */
typedef struct vtree {
    uint16_t count[16];
    uint16_t sym[MAX_SYMBOLS];
    uint16_t fast[1 << PEEK_BITS];
    int single;
} vtree;

/* The code of lens[0, n): 0, or -1 where libwebp's table builder refuses it
 * (no symbol, over-subscribed, or incomplete with more than one symbol). */
static int tree_build(vtree *t, const uint8_t *lens, int n) {
    uint16_t offs[16], next[16];
    memset(t->count, 0, sizeof t->count);
    for (int s = 0; s < n; s++) t->count[lens[s]]++;
    int used = n - t->count[0], left = 1;
    if (used == 0) return -1;
    for (int len = 1; len <= 15; len++) {
        left = (left << 1) - t->count[len];
        if (left < 0) return -1;
    }
    if (used > 1 && left != 0) return -1;
    offs[1] = 0;
    for (int len = 1; len < 15; len++) offs[len + 1] = (uint16_t)(offs[len] + t->count[len]);
    for (int s = 0; s < n; s++)
        if (lens[s]) t->sym[offs[lens[s]]++] = (uint16_t)s;
    t->single = used == 1 ? t->sym[0] : -1;
    memset(t->fast, 0, sizeof t->fast);
    uint32_t code = 0;
    for (int len = 1; len <= 15; len++) next[len] = (uint16_t)(code = (code + (len > 1 ? t->count[len - 1] : 0)) << 1);
    for (int s = 0; s < n && used > 1; s++) {
        int len = lens[s];
        if (!len) continue;
        uint32_t c = next[len]++, rev = 0;
        for (int i = 0; i < len; i++) rev |= ((c >> i) & 1) << (len - 1 - i);
        if (len <= PEEK_BITS)
            for (uint32_t k = rev; k < (1u << PEEK_BITS); k += 1u << len) t->fast[k] = (uint16_t)(s << 4 | len);
    }
    return 0;
}

static int tree_read(vbits *b, const vtree *t) {
    if (t->single >= 0) return t->single;
    fill(b);
    uint16_t f = t->fast[b->acc & ((1u << PEEK_BITS) - 1)];
    if (f) {
        rd(b, f & 15);
        return f >> 4;
    }
    int code = 0, first = 0, index = 0; /* a longer code: bit by bit (puff's decode) */
    for (int len = 1; len <= 15; len++) {
        code |= (int)rd(b, 1);
        int count = t->count[len];
        if (code - count < first) return t->sym[index + (code - first)];
        index += count;
        first = (first + count) << 1;
        code <<= 1;
    }
    return -1; /* not reached for a complete code */
}

/* ---- the stream --------------------------------------------------------------------- */

typedef struct vstate {
    vbits b;
    vtree t[5], cl;               /* a sub-image's five codes; the code-length code */
    uint8_t lens[MAX_SYMBOLS];
    uint32_t cache[1 << 11];
    uint64_t seen[MAX_GROUPS / 64]; /* group indices met in the meta image */
    const char *why;
    int code;                       /* of the failure: SL_ECORRUPT unless said */
} vstate;

static int fail(vstate *st, const char *why) {
    if (!st->why) st->why = why;
    return -1;
}

/* One prefix code of an alphabet (ReadHuffmanCode): simple (one or two
 * symbols of 1 or 8 bits) or code lengths coded by a code-length code. */
static int read_code(vstate *st, int alphabet, vtree *t) {
    vbits *b = &st->b;
    uint8_t *lens = st->lens;
    memset(lens, 0, (size_t)alphabet);
    if (rd(b, 1)) {
        int two = (int)rd(b, 1);
        int s = (int)rd(b, rd(b, 1) ? 8 : 1);
        if (s < alphabet) lens[s] = 1;
        if (two && (s = (int)rd(b, 8)) < alphabet) lens[s] = 1;
    } else {
        uint8_t cll[19] = {0};
        int num = (int)rd(b, 4) + 4;
        for (int i = 0; i < num; i++) cll[code_length_order[i]] = (uint8_t)rd(b, 3);
        if (tree_build(&st->cl, cll, 19)) return fail(st, "bad code-length code");
        int max_symbol = alphabet, sym = 0, prev = 8;
        if (rd(b, 1)) {
            int nbits = 2 + 2 * (int)rd(b, 3);
            max_symbol = 2 + (int)rd(b, nbits);
            if (max_symbol > alphabet) return fail(st, "code lengths past the alphabet");
        }
        while (sym < alphabet && max_symbol-- > 0) {
            int c = tree_read(b, &st->cl);
            if (c < 16) {
                lens[sym++] = (uint8_t)c;
                if (c) prev = c;
            } else {
                static const uint8_t extra[3] = {2, 3, 7}, base[3] = {3, 3, 11};
                int slot = c - 16, rep = (int)rd(b, extra[slot]) + base[slot];
                if (sym + rep > alphabet) return fail(st, "code length repeat past the alphabet");
                memset(lens + sym, slot == 0 ? prev : 0, (size_t)rep);
                sym += rep;
            }
            if (b->eos) return fail(st, "data ends inside a prefix code");
        }
    }
    if (b->eos) return fail(st, "data ends inside a prefix code");
    return tree_build(t, lens, alphabet) ? fail(st, "invalid prefix code") : 0;
}

static uint32_t sub_size(uint32_t size, int bits) { return (uint32_t)(((uint64_t)size + (1u << bits) - 1) >> bits); }

static uint32_t copy_amount(vbits *b, int sym) { /* GetCopyDistance / GetCopyLength */
    if (sym < 4) return (uint32_t)sym + 1;
    int extra = (sym - 2) >> 1;
    uint32_t offset = (uint32_t)(2 + (sym & 1)) << extra;
    return offset + rd(b, extra) + 1;
}

static uint64_t plane_distance(uint32_t xsize, uint32_t code) {
    if (code > 120) return code - 120;
    int dc = code_to_plane[code - 1], yoff = dc >> 4, xoff = 8 - (dc & 0xf);
    int64_t d = (int64_t)yoff * xsize + xoff;
    return d >= 1 ? (uint64_t)d : 1;
}

/* A sub-image of w x h (DecodeImageStream, not level 0: its own colour
 * cache, one group of five codes, LZ77-coded pixels). px NULL: read past;
 * else its pixels are stored there (the meta-Huffman image). */
static int sub_image(vstate *st, uint32_t w, uint32_t h, uint32_t *px) {
    vbits *b = &st->b;
    int ccb = 0;
    if (rd(b, 1)) {
        ccb = (int)rd(b, 4);
        if (ccb < 1 || ccb > 11) return fail(st, "colour cache bits out of range");
    }
    uint32_t cache_size = ccb ? 1u << ccb : 0;
    for (int j = 0; j < 5; j++)
        if (read_code(st, j == 0 ? 280 + (int)cache_size : j == 4 ? 40 : 256, &st->t[j])) return -1;
    if (px && ccb) memset(st->cache, 0, sizeof(uint32_t) << ccb);
    uint64_t total = (uint64_t)w * h, pos = 0;
#define PUT(v)                                                                                  \
    do {                                                                                        \
        if (px) {                                                                               \
            px[pos] = (v);                                                                      \
            if (ccb) st->cache[(uint32_t)(px[pos] * 0x1e35a7bdu) >> (32 - ccb)] = px[pos];      \
        }                                                                                       \
        pos++;                                                                                  \
    } while (0)
    while (pos < total) {
        int g = tree_read(b, &st->t[0]);
        if (g < 256) {
            uint32_t r = (uint32_t)tree_read(b, &st->t[1]), bl = (uint32_t)tree_read(b, &st->t[2]);
            uint32_t a = (uint32_t)tree_read(b, &st->t[3]);
            PUT(a << 24 | r << 16 | (uint32_t)g << 8 | bl);
        } else if (g < 280) {
            uint32_t len = copy_amount(b, g - 256);
            uint64_t dist = plane_distance(w, copy_amount(b, tree_read(b, &st->t[4])));
            if (pos < dist || total - pos < len) return fail(st, "a backward reference outside the image");
            for (uint32_t k = 0; k < len; k++) PUT(px ? px[pos - dist] : 0);
        } else if (g < 280 + (int)cache_size) {
            PUT(px ? st->cache[g - 280] : 0);
        } else {
            return fail(st, "bad symbol");
        }
        if (b->eos) return fail(st, "data ends inside a sub-image");
    }
#undef PUT
    return 0;
}

/* One level-0 stream of w x h (a lossless image, or a lossless alpha
 * plane): what libwebp allocates to decode it, pixel buffers included. */
static int vp8l_need(vstate *st, uint32_t w, uint32_t h, sl__quota *q, uint64_t *need) {
    vbits *b = &st->b;
    uint32_t xs = w;
    uint64_t keep = 0, colors = 0;
    int seen = 0;
    while (rd(b, 1)) { /* transforms */
        int type = (int)rd(b, 2);
        if (seen & (1 << type)) return fail(st, "a transform twice");
        seen |= 1 << type;
        if (type == 0 || type == 1) { /* predictor, cross colour: a sub-image of tiles */
            int bits = (int)rd(b, 3) + 2;
            uint32_t sw = sub_size(xs, bits), sh = sub_size(h, bits);
            if (sub_image(st, sw, sh, NULL)) return -1;
            keep += (uint64_t)sw * sh * 4;
        } else if (type == 3) { /* colour indexing: a palette, the width packed */
            uint32_t n = rd(b, 8) + 1;
            int bits = n > 16 ? 0 : n > 4 ? 1 : n > 2 ? 2 : 3;
            xs = sub_size(xs, bits);
            if (sub_image(st, n, 1, NULL)) return -1;
            keep += ((uint64_t)1 << (8 >> bits)) * 4;
            colors = (uint64_t)n * 4; /* the palette before it is expanded, beside it for a moment */
        }
        if (b->eos) return fail(st, "data ends inside a transform");
    }
    int ccb = 0;
    if (rd(b, 1)) {
        ccb = (int)rd(b, 4);
        if (ccb < 1 || ccb > 11) return fail(st, "colour cache bits out of range");
    }
    uint64_t groups = 1, image = 0, mapping = 0;
    if (rd(b, 1)) { /* the meta-Huffman image */
        int bits = (int)rd(b, 3) + 2;
        uint32_t hx = sub_size(xs, bits), hy = sub_size(h, bits);
        uint64_t pixels = (uint64_t)hx * hy, area = (uint64_t)xs * h;
        image = pixels * 4; /* pixels < 2^28 */
        uint32_t *px = NULL;
        if (image > SL_WEBP_META_MAX) { /* not decoded: the most groups it could name */
            groups = SL_MAX(SL_MIN(pixels, (uint64_t)MAX_GROUPS), SL_MIN((uint64_t)1000, area));
            mapping = (uint64_t)MAX_GROUPS * 4;
        } else if (!(px = sl__quota_alloc(q, (size_t)image))) {
            st->code = SL_EBUDGET;
            return fail(st, "no room for its meta-Huffman image");
        } else {
            int rc = sub_image(st, hx, hy, px);
            uint64_t most = 0, distinct = 0;
            memset(st->seen, 0, sizeof st->seen);
            for (uint64_t i = 0; !rc && i < pixels; i++) {
                uint32_t g = (px[i] >> 8) & 0xffff;
                most = SL_MAX(most, (uint64_t)g + 1);
                if (!(st->seen[g / 64] >> (g % 64) & 1)) distinct++;
                st->seen[g / 64] |= (uint64_t)1 << (g % 64);
            }
            sl__quota_free(q, px);
            if (rc) return rc;
            if (most > 1000 || most > area) groups = distinct, mapping = most * 4;
            else groups = most;
        }
    }
    if (b->eos) return fail(st, "data ends inside the header");
    /* the rest: groups' tables, the colour cache, the pixels (the image at
     * its packed width, a row of top pixels, 16 rows of ARGB cache) */
    uint64_t tables = groups * ((uint64_t)table_size[ccb] * HUFFMAN_CODE_BYTES + HTREE_GROUP_BYTES);
    uint64_t pixels = ((uint64_t)xs * h + (uint64_t)w + 16 * (uint64_t)w) * 4;
    *need = VP8L_FIXED + keep + colors + image + mapping + tables + (ccb ? (uint64_t)4 << ccb : 0) + pixels;
    return 0;
}

/* ---- the container -------------------------------------------------------------------- */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The first chunk named fourcc among RIFF's chunks before the image
 * chunk ("VP8 " or "VP8L", which ends the walk and is found by either
 * name), as libwebp walks them: its payload and size, or NULL. */
static const uint8_t *chunk(const uint8_t *d, size_t len, const char *fourcc, size_t *size) {
    size_t at = 12;
    while (at + 8 <= len) {
        uint64_t n = le32(d + at + 4);
        if (n > len - at - 8) return NULL;
        int image = !memcmp(d + at, "VP8 ", 4) || !memcmp(d + at, "VP8L", 4);
        if (!memcmp(d + at, fourcc, 4) || (image && !memcmp(fourcc, "VP8*", 4))) {
            *size = (size_t)n;
            return d + at + 8;
        }
        if (image) return NULL;
        at += 8 + (size_t)n + (n & 1);
    }
    return NULL;
}

int sl__webp_lib_need(const uint8_t *data, size_t len, const sl_image_info *info, sl__quota *q, uint64_t *out,
                      char *reason, size_t rlen) {
    /* the container was checked by the probe (riff_ok): its size is len's */
    uint64_t w = info->width, h = info->height;
    *out = SL_WEBP_LOSSY_FIXED + w * SL_WEBP_LOSSY_PER_COL; /* a lossy frame: from its size */
    size_t n;
    const uint8_t *img = chunk(data, len, "VP8*", &n);
    if (!img) {
        sl__msg(reason, rlen, "WebP: no image chunk (VP8 or VP8L)");
        return SL_ECORRUPT;
    }
    int lossless = !memcmp(img - 8, "VP8L", 4);
    const uint8_t *stream = img;
    if (!lossless) {
        const uint8_t *alpha = chunk(data, len, "ALPH", &n);
        if (!alpha || n < 1) return 0;
        *out += w * h; /* the alpha plane */
        if ((alpha[0] & 3) != 1) return 0; /* stored raw: nothing more */
        stream = alpha + 1, n -= 1;
    }
    vstate *st = sl__quota_alloc(q, sizeof *st);
    if (!st) {
        sl__msg(reason, rlen, "WebP: %zu bytes to read the lossless header, over the decoder's room", sizeof *st);
        return SL_EBUDGET;
    }
    memset(st, 0, sizeof *st);
    st->b = (vbits){stream, n, 0, 0, 0, 0};
    int rc = 0;
    if (lossless && (rd(&st->b, 8) != 0x2f || rd(&st->b, 14) + 1 != w || rd(&st->b, 14) + 1 != h ||
                     (rd(&st->b, 1), rd(&st->b, 3)) != 0 || st->b.eos))
        rc = fail(st, "bad lossless header");
    uint64_t need = 0;
    if (!rc) rc = vp8l_need(st, (uint32_t)w, (uint32_t)h, q, &need);
    int code = st->code ? st->code : SL_ECORRUPT;
    if (rc) sl__msg(reason, rlen, "WebP %s: %s", lossless ? "lossless stream" : "alpha plane", st->why);
    sl__quota_free(q, st);
    if (rc) return code;
    *out = lossless ? need : *out + need;
    return 0;
}
