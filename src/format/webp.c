/*
 * WebP: header probe (always built) and decoding through libwebp (built
 * when SL_HAVE_WEBP is defined), with the interface of jpeg.c and png.c.
 *
 * Probe: the RIFF container is checked here (sizes against the buffer),
 * then libwebp's WebPGetFeatures reads width, height, alpha and animation.
 * Animated files are refused (SL_EUNSUPPORTED): taking the first frame of
 * a clip as "the image" would pass silently wrong samples. EXIF is not
 * read (orientation 1). info->progressive is 1 when libwebp holds the
 * whole image while decoding (lossless, or an alpha plane), as PNG's
 * interlaced files.
 *
 * Decode: the window only, through libwebp's cropping (no scaling: the
 * project's resampler does every resize). libwebp starts a crop on even
 * coordinates and treats its edges as image edges when upsampling
 * chroma, so the crop asked of libwebp is widened by 2 pixels on each
 * side (clamped, left and top made even); the rows and columns handed to
 * the sink are exactly the requested window, equal to the same pixels of
 * a full decode (test_webp.c checks every window size it tries; alpha
 * kept: see widened()). The
 * pixels land in a window buffer from the quota (libwebp's external
 * memory) and go to the sink from there.
 *
 * Memory. libwebp allocates with malloc and has no allocator hooks, so
 * its own memory is bounded and counted in the quota for the span of the
 * decode, as jpeg.c does for libjpeg:
 *   lossy:     per column of width, VP8's macroblock caches (3 cache rows
 *              of 16 luma + 8 filter lines, and chroma), top samples,
 *              intra modes and coefficients: under SL_WEBP_LOSSY_PER_COL
 *              bytes, from the header;
 *   lossless:  (a lossless file, or a lossy one's alpha plane) read from
 *              the file's bytes, not its header: the Huffman tables follow
 *              the group count the stream itself declares (up to 65,536
 *              groups of 20 KiB, allocated before they are read), so
 *              sl__webp_lib_need (webp_bound.c) reads the stream's header
 *              as libwebp does and sums every allocation the decode makes.
 *              The plan reads it (req->lib_mem) so the budget reserves
 *              exactly that; a decode without it reads it itself, and
 *              refuses (SL_EBUDGET, with the numbers) what its quota
 *              cannot hold before libwebp allocates anything.
 * Without the bytes (a plan from the header alone: the admission check at
 * create) a lossless stream is bounded for ordinary files: the whole image
 * as ARGB, 17 cache rows and SL_WEBP_HUFF of tables.
 * test_webp.c measures libwebp's peak for lossy, lossy + alpha and
 * lossless files against this bound.
 */
#include "format/decode.h"

#include <string.h>

#include "base/util.h"

#ifdef SL_HAVE_WEBP
#include <webp/decode.h>
#endif

typedef unsigned long long ull;

#define SL_WEBP_MAX_DIM 16383u                   /* VP8 and VP8L: 14-bit sizes */
#define SL_WEBP_HUFF ((uint64_t)8 << 20)         /* lossless, header only: 400 groups of the largest tables */
#define SL_WEBP_MARGIN 2                         /* window widening for exact chroma */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- probe ------------------------------------------------------------------ */

/* The RIFF container: "RIFF" size "WEBP", the size even, at least one
 * chunk header, and all of it present (trailing bytes are allowed, as
 * libwebp allows them). */
static int riff_ok(const uint8_t *d, size_t len, char *reason, size_t rlen) {
    if (len < 12 || memcmp(d, "RIFF", 4) || memcmp(d + 8, "WEBP", 4)) {
        sl__msg(reason, rlen, "not a WebP file (no RIFF....WEBP header)");
        return SL_EFORMAT;
    }
    uint64_t riff = le32(d + 4);
    if (riff < 4 + 8 || (riff & 1)) {
        sl__msg(reason, rlen, "WebP RIFF size %llu is invalid", (ull)riff);
        return SL_ECORRUPT;
    }
    if (riff + 8 > len) {
        sl__msg(reason, rlen, "truncated WebP: its RIFF header says %llu bytes, the file has %zu", (ull)riff + 8, len);
        return SL_ECORRUPT;
    }
    return 0;
}

#ifdef SL_HAVE_WEBP
static int status_code(VP8StatusCode st) {
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY: return SL_ENOMEM;
    case VP8_STATUS_INVALID_PARAM: return SL_EINVAL;
    case VP8_STATUS_UNSUPPORTED_FEATURE: return SL_EUNSUPPORTED;
    default: return SL_ECORRUPT;
    }
}

static const char *status_name(VP8StatusCode st) {
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "data ends early (truncated)";
    default: return "decoder error";
    }
}
#endif

int sl__webp_probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen) {
    memset(info, 0, sizeof *info);
    int rc = riff_ok(data, len, reason, rlen);
    if (rc) return rc;
#ifdef SL_HAVE_WEBP
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, len, &f);
    if (st != VP8_STATUS_OK) {
        sl__msg(reason, rlen, "WebP header: %s", status_name(st));
        return status_code(st);
    }
    if (f.has_animation) {
        sl__msg(reason, rlen, "animated WebP (%dx%d) is not supported: decode its frames as a video", f.width,
                f.height);
        return SL_EUNSUPPORTED;
    }
    if (f.width <= 0 || f.height <= 0 || (uint32_t)f.width > SL_WEBP_MAX_DIM || (uint32_t)f.height > SL_WEBP_MAX_DIM) {
        sl__msg(reason, rlen, "WebP header declares invalid dimensions %dx%d", f.width, f.height);
        return SL_ECORRUPT;
    }
    info->width = (uint32_t)f.width;
    info->height = (uint32_t)f.height;
    info->channels = f.has_alpha ? 4 : 3;
    info->progressive = f.format == 2 || f.has_alpha; /* 2: lossless */
#else
    /* without libwebp: the container only; the size is unknown */
    sl__msg(reason, rlen, "WebP support not built (libwebp missing)");
    return SL_EUNSUPPORTED;
#endif
    info->format = SL_FORMAT_WEBP;
    info->bit_depth = 8;
    info->orientation = 1;
    return 0;
}

/* ---- memory bound --------------------------------------------------------------- */

/* The window libwebp is asked for: req widened by SL_WEBP_MARGIN. With
 * alpha kept, from the top row: libwebp 1.2.4 misplaces the alpha of a
 * crop that starts below row 0 (test_webp.c finds it, for lossy files
 * with lossless-coded alpha); a crop from row 0 is right. */
static void widened(const sl_image_info *info, const sl__decode_req *req, uint32_t *x0, uint32_t *y0, uint32_t *x1,
                    uint32_t *y1) {
    *x0 = (req->x >= SL_WEBP_MARGIN ? req->x - SL_WEBP_MARGIN : 0) & ~1u;
    *y0 = (req->y >= SL_WEBP_MARGIN ? req->y - SL_WEBP_MARGIN : 0) & ~1u;
    if (info->channels == 4 && req->channels == 4) *y0 = 0;
    *x1 = (uint32_t)SL_MIN((uint64_t)req->x + req->w + SL_WEBP_MARGIN, info->width);
    *y1 = (uint32_t)SL_MIN((uint64_t)req->y + req->h + SL_WEBP_MARGIN, info->height);
}

/* libwebp's own allocations for this request: what the plan read from the
 * file, else the bound from the header (see the head of the file). */
static uint64_t libwebp_mem(const sl_image_info *info, const sl__decode_req *req) {
    if (req->lib_mem) return req->lib_mem;
    uint64_t w = info->width, h = info->height;
    uint64_t mem = SL_WEBP_LOSSY_FIXED + w * SL_WEBP_LOSSY_PER_COL;
    if (info->progressive) mem += 4 * w * h + 17 * 4 * w + SL_WEBP_HUFF;
    return mem;
}

uint64_t sl__webp_mem(const sl_image_info *info, const sl__decode_req *req) {
#ifndef SL_HAVE_WEBP
    (void)info, (void)req;
    return 0;
#else
    uint32_t x0, y0, x1, y1;
    widened(info, req, &x0, &y0, &x1, &y1);
    uint64_t ch = req->channels ? req->channels : 3;
    return libwebp_mem(info, req) + (uint64_t)(x1 - x0) * (y1 - y0) * ch + 64;
#endif
}

/* ---- decode ---------------------------------------------------------------------- */

#ifndef SL_HAVE_WEBP

int sl__webp_available(void) { return 0; }

int sl__webp_decode(const uint8_t *data, size_t len, const sl_image_info *info, const sl__decode_req *req,
                    sl__quota *q, sl__row_sink *sink, char *reason, size_t rlen) {
    (void)data, (void)len, (void)info, (void)req, (void)q, (void)sink;
    sl__msg(reason, rlen, "WebP support not built (libwebp missing)");
    return SL_EUNSUPPORTED;
}

#else

int sl__webp_available(void) { return 1; }

/* Hand the requested rows of the decoded window buf (cw wide) to the sink. */
static int push_rows(const uint8_t *buf, uint32_t cw, uint32_t x0, uint32_t y0, const sl_image_info *info,
                     const sl__decode_req *req, sl__row_sink *sink) {
    uint32_t ch = req->channels;
    sl__region region = {8, info->width, info->height, req->x, req->y, req->w, req->h, ch, ch};
    int rc = sink->begin(sink, &region);
    for (uint32_t r = 0; rc == 0 && r < req->h; r++) {
        const uint8_t *row = buf + ((size_t)(req->y + r - y0) * cw + (req->x - x0)) * ch;
        rc = sink->rows(sink, &row, r, 1);
    }
    return rc;
}

int sl__webp_decode(const uint8_t *data, size_t len, const sl_image_info *info, const sl__decode_req *req,
                    sl__quota *q, sl__row_sink *sink, char *reason, size_t rlen) {
    uint64_t xe, ye;
    if (req->w == 0 || req->h == 0 || sl__add(req->x, req->w, &xe) || xe > info->width ||
        sl__add(req->y, req->h, &ye) || ye > info->height || (req->channels != 3 && req->channels != 4)) {
        sl__msg(reason, rlen, "bad WebP decode request");
        return SL_EINVAL;
    }
    int rc = riff_ok(data, len, reason, rlen);
    if (rc) return rc;
    uint32_t x0, y0, x1, y1, ch = req->channels;
    widened(info, req, &x0, &y0, &x1, &y1);
    uint32_t cw = x1 - x0, chh = y1 - y0;
    uint64_t lib = req->lib_mem, bytes = (uint64_t)cw * chh * ch;
    if (!lib && (rc = sl__webp_lib_need(data, len, info, q, &lib, reason, rlen))) return rc;
    if (q->used + bytes + SL_QUOTA_BLOCK_OVERHEAD + lib > q->cap) { /* before libwebp allocates anything */
        char a[32], b[32], c[32];
        sl__msg(reason, rlen, "WebP %ux%u needs %s for libwebp's own allocations and %s for the window, over the "
                "decoder's %s", info->width, info->height, sl__fmt_bytes(lib, a, sizeof a),
                sl__fmt_bytes(bytes, b, sizeof b), sl__fmt_bytes(q->cap, c, sizeof c));
        return SL_EBUDGET;
    }
    uint8_t *buf = sl__quota_alloc(q, (size_t)bytes);
    if (!buf) {
        sl__msg(reason, rlen, "WebP: %llu-byte window buffer over the decoder's reserved %llu bytes", (ull)bytes,
                (ull)q->cap);
        return SL_EBUDGET;
    }
    q->used += lib; /* libwebp's own allocations, bounded by lib (see above) */
    WebPDecoderConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    if (!WebPInitDecoderConfig(&cfg)) {
        rc = SL_EUNSUPPORTED;
        sl__msg(reason, rlen, "libwebp version mismatch");
        goto out;
    }
    cfg.options.use_cropping = cw != info->width || chh != info->height;
    cfg.options.crop_left = (int)x0, cfg.options.crop_top = (int)y0;
    cfg.options.crop_width = (int)cw, cfg.options.crop_height = (int)chh;
    cfg.output.colorspace = ch == 4 ? MODE_RGBA : MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = buf;
    cfg.output.u.RGBA.stride = (int)(cw * ch);
    cfg.output.u.RGBA.size = (size_t)bytes;
    VP8StatusCode st = WebPDecode(data, len, &cfg);
    if (st != VP8_STATUS_OK) {
        rc = status_code(st);
        sl__msg(reason, rlen, "WebP decode: %s", status_name(st));
        goto out;
    }
    if (cfg.output.width != (int)cw || cfg.output.height != (int)chh) {
        rc = SL_ECORRUPT;
        sl__msg(reason, rlen, "WebP: decoded %dx%d, asked for %ux%u", cfg.output.width, cfg.output.height, cw, chh);
        goto out;
    }
    rc = push_rows(buf, cw, x0, y0, info, req, sink);
out:
    WebPFreeDecBuffer(&cfg.output); /* external memory: frees nothing of ours */
    q->used -= lib;
    sl__quota_free(q, buf);
    return rc;
}

#endif /* SL_HAVE_WEBP */
