/*
 * PNG: header probe (always built) and decoding through libspng (built
 * when SL_HAVE_SPNG is defined).
 *
 * The probe parses the signature and IHDR itself, so the limits apply to
 * PNG files from their header even in a build without libspng; decoding
 * then fails with SL_EUNSUPPORTED.
 *
 * Memory. Every byte libspng allocates (its context, zlib's inflate state
 * and window, scanline buffers, stored ancillary chunks) comes from the
 * sample's quota through allocator hooks, and so does our own row buffer
 * (or, for interlaced files, the whole decoded image). sl__png_mem() bounds
 * all of it from the header alone; the quota refuses anything past that.
 * Ancillary chunks are bounded by libspng's chunk limits (SL_PNG_CHUNK_*):
 * an iCCP, zTXt, iTXt or eXIf chunk that would inflate or grow the chunk
 * cache past them makes libspng fail with SPNG_ECHUNK_LIMITS, which is an
 * SL_ELIMIT record. IDAT decompression writes only into the fixed-size
 * scanline buffers, so a tiny IDAT that inflates to gigabytes costs time
 * bounded by the declared dimensions and no memory.
 */
#include "format/decode.h"

#include <string.h>

#include "base/util.h"

#ifdef SL_HAVE_SPNG
#include <spng.h>
#endif

/* ---- header probe (no libspng) ------------------------------------------- */

static const uint8_t sl__png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
#define SL_PNG_MAX_DIM 0x7FFFFFFFu /* PNG spec: width and height < 2^31 */

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* CRC-32 (ISO-HDLC, as PNG) of n bytes, bitwise: only used on the 17 bytes
 * of IHDR, so no table is kept. */
static uint32_t crc32_small(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* Channels stored per pixel for a colour type (palette counts as 1). */
static int png_raw_channels(int color_type) {
    switch (color_type) {
    case 0: return 1;
    case 2: return 3;
    case 3: return 1;
    case 4: return 2;
    case 6: return 4;
    default: return 0;
    }
}

static int png_depth_ok(int color_type, int depth) {
    switch (color_type) {
    case 0: return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
    case 3: return depth == 1 || depth == 2 || depth == 4 || depth == 8;
    case 2:
    case 4:
    case 6: return depth == 8 || depth == 16;
    default: return 0;
    }
}

/* Does a tRNS chunk come before the first IDAT? Walks chunk headers only
 * (each step advances at least 12 bytes, so the walk is bounded by len);
 * stops quietly at anything malformed: the decoder will report it. */
static int png_has_trns(const uint8_t *data, size_t len) {
    size_t off = 33; /* signature + IHDR chunk */
    while (off <= len && len - off >= 12) {
        uint32_t clen = rd32(data + off);
        const uint8_t *type = data + off + 4;
        if (!memcmp(type, "tRNS", 4)) return 1;
        if (!memcmp(type, "IDAT", 4) || !memcmp(type, "IEND", 4)) return 0;
        if (clen > SL_PNG_MAX_DIM || (uint64_t)clen + 12 > len - off) return 0;
        off += (size_t)clen + 12;
    }
    return 0;
}

int sl__png_probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen) {
    memset(info, 0, sizeof *info);
    if (len < 8 || memcmp(data, sl__png_sig, 8) != 0) {
        sl__msg(reason, rlen, "not a PNG file (bad signature)");
        return SL_EFORMAT;
    }
    if (len < 33) {
        sl__msg(reason, rlen, "PNG truncated in its header (%zu bytes)", len);
        return SL_ECORRUPT;
    }
    const uint8_t *ihdr = data + 8;
    if (rd32(ihdr) != 13 || memcmp(ihdr + 4, "IHDR", 4) != 0) {
        sl__msg(reason, rlen, "PNG does not start with a 13-byte IHDR chunk");
        return SL_ECORRUPT;
    }
    if (crc32_small(ihdr + 4, 17) != rd32(ihdr + 21)) {
        sl__msg(reason, rlen, "PNG IHDR CRC mismatch");
        return SL_ECORRUPT;
    }
    uint32_t w = rd32(ihdr + 8), h = rd32(ihdr + 12);
    int depth = ihdr[16], color = ihdr[17], comp = ihdr[18], filter = ihdr[19], interlace = ihdr[20];
    if (w == 0 || h == 0 || w > SL_PNG_MAX_DIM || h > SL_PNG_MAX_DIM) {
        sl__msg(reason, rlen, "PNG IHDR declares invalid dimensions %ux%u", w, h);
        return SL_ECORRUPT;
    }
    if (!png_depth_ok(color, depth)) {
        sl__msg(reason, rlen, "PNG IHDR: invalid colour type %d / bit depth %d", color, depth);
        return SL_ECORRUPT;
    }
    if (comp != 0 || filter != 0 || interlace > 1) {
        sl__msg(reason, rlen, "PNG IHDR: invalid compression/filter/interlace method %d/%d/%d", comp,
                filter, interlace);
        return SL_ECORRUPT;
    }
    info->width = w;
    info->height = h;
    info->format = SL_FORMAT_PNG;
    info->bit_depth = depth;
    info->progressive = interlace;
    info->orientation = 1; /* eXIf is not read: Pillow ignores it too */
    info->channels = (uint32_t)png_raw_channels(color);
    if (color == 3) info->channels = png_has_trns(data, len) ? 4 : 3;
    return 0;
}

/* ---- memory bound -------------------------------------------------------- */

/* libspng chunk limits: no single chunk's stored or inflated data may
 * exceed SL_PNG_CHUNK_MAX, and everything libspng keeps from ancillary
 * chunks (text, iCCP, eXIf) stays within SL_PNG_CHUNK_CACHE. */
#define SL_PNG_CHUNK_MAX ((size_t)2 << 20)
#define SL_PNG_CHUNK_CACHE ((size_t)2 << 20)
/* libspng context, zlib inflate state + 32 KiB window, quota block
 * headers and libspng's small fixed allocations; measured ~ 60 KiB for
 * libspng 0.7 with zlib 1.2, bounded with room to spare. */
#define SL_PNG_FIXED ((uint64_t)128 << 10)

uint64_t sl__png_mem(const sl_image_info *info, const sl__decode_req *req) {
#ifndef SL_HAVE_SPNG
    (void)info;
    (void)req;
    return 0; /* decode allocates nothing: it fails at once */
#else
    uint64_t w = info->width, h = info->height, ch = req->channels ? req->channels : 3;
    /* Stored scanline: at most 8 bytes a pixel (RGBA16) + the filter byte. */
    uint64_t scan, row, total, t;
    if (sl__mul(w, 8, &scan) || sl__add(scan, 1 + 64, &scan)) return UINT64_MAX;
    /* libspng: current and previous scanline, and a row buffer in the
     * output format (at most RGBA16 for its 16-bit path) */
    if (sl__mul(scan, 3, &total)) return UINT64_MAX;
    /* our output row (or the whole image when interlaced) */
    if (sl__mul(w, ch, &row) || sl__add(row, 64, &row)) return UINT64_MAX;
    if (info->progressive) {
        if (sl__mul(w, h, &t) || sl__mul(t, ch, &t) || sl__add(t, 64, &row)) return UINT64_MAX;
    }
    if (sl__add(total, row, &total)) return UINT64_MAX;
    /* Ancillary chunks: libspng counts what it keeps against the cache
     * limit before allocating it, and grows an inflate buffer only while
     * it fits the cache left. Each quota block costs at most
     * SL_QUOTA_BLOCK_OVERHEAD (48) bytes beyond its request and comes with
     * at least 32 bytes counted in the cache, so blocks take at most 2.5x
     * the cache. The arena bounds its extent, not live bytes: a buffer
     * grown by realloc past a neighbour moves, leaving a hole of its old
     * size, and holes of a doubling buffer add up to less than its last
     * size: one more chunk's worth. */
    if (sl__add(total, SL_PNG_CHUNK_CACHE * 5 / 2 + SL_PNG_CHUNK_MAX, &total)) return UINT64_MAX;
    if (sl__add(total, SL_PNG_FIXED, &total)) return UINT64_MAX;
    return total;
#endif
}

/* ---- decode -------------------------------------------------------------- */

#ifndef SL_HAVE_SPNG

int sl__png_available(void) { return 0; }

int sl__png_decode(const uint8_t *data, size_t len, const sl_image_info *info,
                   const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
                   size_t rlen) {
    (void)data, (void)len, (void)info, (void)req, (void)q, (void)sink;
    sl__msg(reason, rlen, "PNG support not built (libspng missing)");
    return SL_EUNSUPPORTED;
}

#else /* SL_HAVE_SPNG */

int sl__png_available(void) { return 1; }

/*
 * libspng's allocator hooks take no user pointer, so the quota of the
 * decode running on this thread is reached through a thread-local. It is
 * set for exactly the span between spng_ctx_new2() and spng_ctx_free() of
 * one sl__png_decode() call, on the calling thread, and NULL otherwise; a
 * hook called with it NULL refuses (returns NULL). `refused` records that
 * the quota said no, so SPNG_EMEM is told apart as SL_EBUDGET.
 */
typedef struct png_tls {
    sl__quota *q;
    int refused;
} png_tls;
static _Thread_local png_tls sl__png_tls;

static void *png_malloc(size_t n) {
    if (!sl__png_tls.q) return NULL;
    void *p = sl__quota_alloc(sl__png_tls.q, n);
    if (!p) sl__png_tls.refused = 1;
    return p;
}
static void *png_calloc(size_t count, size_t size) {
    if (!sl__png_tls.q) return NULL;
    void *p = sl__quota_calloc(sl__png_tls.q, count, size);
    if (!p) sl__png_tls.refused = 1;
    return p;
}
static void *png_realloc(void *ptr, size_t n) {
    if (!sl__png_tls.q) return NULL;
    void *p = sl__quota_realloc(sl__png_tls.q, ptr, n);
    if (!p) sl__png_tls.refused = 1;
    return p;
}
static void png_free(void *ptr) {
    if (ptr && sl__png_tls.q) sl__quota_free(sl__png_tls.q, ptr);
}

/* Map a libspng error to an SL_E* code with a reason. */
static int png_err(int e, const char *what, const sl__quota *q, char *reason, size_t rlen) {
    /* A refusal by the quota surfaces as SPNG_EMEM, or as the error of
     * whatever could not start without that memory (SPNG_EZLIB_INIT). */
    if (sl__png_tls.refused) {
        sl__msg(reason, rlen, "PNG %s: decoder needed more than its reserved %llu bytes (%s)", what,
                (unsigned long long)q->cap, spng_strerror(e));
        return SL_EBUDGET;
    }
    if (e == SPNG_EMEM) {
        sl__msg(reason, rlen, "PNG %s: out of memory", what);
        return SL_ENOMEM;
    }
    if (e == SPNG_ECHUNK_LIMITS) {
        sl__msg(reason, rlen, "PNG %s: ancillary chunk data over the %zu KiB limit (%s)", what,
                SL_PNG_CHUNK_CACHE >> 10, spng_strerror(e));
        return SL_ELIMIT;
    }
    if (e == SPNG_EUSER_WIDTH || e == SPNG_EUSER_HEIGHT) {
        sl__msg(reason, rlen, "PNG %s: dimensions over the limit (%s)", what, spng_strerror(e));
        return SL_ELIMIT;
    }
    sl__msg(reason, rlen, "PNG %s: %s", what, spng_strerror(e));
    return SL_ECORRUPT;
}

/* SL_ESTATE once the caller asked to stop (req->cancel), else 0. */
static int png_cancelled(const sl__decode_req *req, char *reason, size_t rlen) {
    if (!req->cancel || !*req->cancel) return 0;
    sl__msg(reason, rlen, "decode cancelled");
    return SL_ESTATE;
}

int sl__png_decode(const uint8_t *data, size_t len, const sl_image_info *info,
                   const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
                   size_t rlen) {
    uint64_t x1, y1;
    if (req->w == 0 || req->h == 0 || sl__add(req->x, req->w, &x1) || x1 > info->width ||
        sl__add(req->y, req->h, &y1) || y1 > info->height ||
        (req->channels != 3 && req->channels != 4)) {
        sl__msg(reason, rlen, "bad PNG decode request");
        return SL_EINVAL;
    }
    const uint32_t ch = req->channels;
    const int fmt = ch == 4 ? SPNG_FMT_RGBA8 : SPNG_FMT_RGB8;
    const int flags = ch == 4 ? SPNG_DECODE_TRNS : 0;
    uint64_t row_bytes, buf_bytes;
    if (sl__mul(info->width, ch, &row_bytes)) return SL_EOVERFLOW;
    buf_bytes = row_bytes;
    if (info->progressive && sl__mul(row_bytes, info->height, &buf_bytes)) {
        sl__msg(reason, rlen, "PNG image size overflows");
        return SL_EOVERFLOW;
    }
    if (buf_bytes > SIZE_MAX) return SL_EOVERFLOW;

    int rc = 0, e;
    uint8_t *buf = NULL;
    spng_ctx *ctx = NULL;
    struct spng_alloc hooks = {png_malloc, png_realloc, png_calloc, png_free};

    /* From here to spng_ctx_free the hooks draw on q (see png_tls). */
    sl__png_tls.q = q;
    sl__png_tls.refused = 0;
    ctx = spng_ctx_new2(&hooks, 0);
    if (!ctx) {
        rc = sl__png_tls.refused ? SL_EBUDGET : SL_ENOMEM;
        sl__msg(reason, rlen, "PNG: cannot create decoder context");
        goto out;
    }
    /* Refuse anything larger than the header we planned from; chunk data
     * is bounded; bad CRCs on critical chunks are errors, on ancillary
     * chunks the chunk is dropped (libspng's default, stated). */
    if ((e = spng_set_image_limits(ctx, info->width, info->height)) ||
        (e = spng_set_chunk_limits(ctx, SL_PNG_CHUNK_MAX, SL_PNG_CHUNK_CACHE)) ||
        (e = spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_DISCARD)) ||
        (e = spng_set_png_buffer(ctx, data, len))) {
        rc = png_err(e, "setup", q, reason, rlen);
        goto out;
    }
    struct spng_ihdr ih;
    if ((e = spng_get_ihdr(ctx, &ih))) {
        rc = png_err(e, "header", q, reason, rlen);
        goto out;
    }
    if (ih.width != info->width || ih.height != info->height ||
        (ih.interlace_method != 0) != (info->progressive != 0)) {
        sl__msg(reason, rlen, "PNG header changed between probe and decode");
        rc = SL_EINVAL;
        goto out;
    }
    buf = sl__quota_alloc(q, (size_t)buf_bytes);
    if (!buf) {
        sl__msg(reason, rlen, "PNG: %llu-byte pixel buffer over the decoder's reserved %llu bytes",
                (unsigned long long)buf_bytes, (unsigned long long)q->cap);
        rc = SL_EBUDGET;
        goto out;
    }

    sl__region region = {.scale_num = 8,
                         .full_w = info->width,
                         .full_h = info->height,
                         .x = req->x,
                         .y = req->y,
                         .w = req->w,
                         .h = req->h,
                         .channels = ch};
    const size_t xoff = (size_t)req->x * ch;

    if (info->progressive) {
        /* Adam7 spreads every row over seven passes: decode it whole, row
         * by row of each pass into its place (so a cancel is seen). */
        if ((e = spng_decode_image(ctx, NULL, 0, fmt, flags | SPNG_DECODE_PROGRESSIVE))) {
            rc = png_err(e, "decode", q, reason, rlen);
            goto out;
        }
        for (;;) {
            struct spng_row_info ri;
            if ((rc = png_cancelled(req, reason, rlen))) goto out;
            if ((e = spng_get_row_info(ctx, &ri)) == 0 && ri.row_num < info->height)
                e = spng_decode_row(ctx, buf + (size_t)ri.row_num * (size_t)row_bytes, (size_t)row_bytes);
            if (e == SPNG_EOI) break;
            if (e) {
                rc = png_err(e, "decode", q, reason, rlen);
                goto out;
            }
        }
        if ((rc = sink->begin(sink, &region))) goto out;
        for (uint32_t r = 0; r < req->h; r++) {
            const uint8_t *p = buf + (size_t)(req->y + r) * (size_t)row_bytes + xoff;
            if ((rc = png_cancelled(req, reason, rlen))) goto out;
            if ((rc = sink->rows(sink, &p, r, 1))) goto out;
        }
        goto out;
    }

    /* Non-interlaced: row by row, rows above the window decoded and
     * dropped (filters need them), stopping after the window's last row. */
    if ((e = spng_decode_image(ctx, NULL, 0, fmt, flags | SPNG_DECODE_PROGRESSIVE))) {
        rc = png_err(e, "decode", q, reason, rlen);
        goto out;
    }
    if ((rc = sink->begin(sink, &region))) goto out;
    for (uint32_t r = 0; r < (uint32_t)y1; r++) {
        if ((rc = png_cancelled(req, reason, rlen))) goto out;
        e = spng_decode_row(ctx, buf, (size_t)row_bytes);
        /* SPNG_EOI comes with the image's last row, decoded */
        if (e != 0 && !(e == SPNG_EOI && r + 1 == info->height)) {
            rc = png_err(e == SPNG_EOI ? SPNG_EIDAT_TOO_SHORT : e, "decode", q, reason, rlen);
            goto out;
        }
        if (r >= req->y) {
            const uint8_t *p = buf + xoff;
            if ((rc = sink->rows(sink, &p, r - req->y, 1))) goto out;
        }
    }

out:
    sl__quota_free(q, buf);
    if (ctx) spng_ctx_free(ctx);
    sl__png_tls.q = NULL;
    return rc;
}

#endif /* SL_HAVE_SPNG */
