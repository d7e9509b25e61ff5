/* The image format registry (dispatch by content). The per-sample quota
 * allocator is in quota.c. */
#include "format/decode.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"

/* ---- limits ------------------------------------------------------------ */

int sl__check_bytes(uint64_t bytes, uint64_t max_bytes, char *reason, size_t rlen) {
    if (!max_bytes || bytes <= max_bytes) return 0;
    sl__msg(reason, rlen, "file is %llu bytes, over the max_bytes limit of %llu", (unsigned long long)bytes,
            (unsigned long long)max_bytes);
    return SL_ELIMIT;
}

int sl__check_pixels(const sl_image_info *info, uint64_t max_pixels, char *reason, size_t rlen) {
    uint64_t px = (uint64_t)info->width * info->height;
    if (!max_pixels || px <= max_pixels) return 0;
    sl__msg(reason, rlen, "image is %ux%u = %llu pixels, over the max_pixels limit of %llu", info->width,
            info->height, (unsigned long long)px, (unsigned long long)max_pixels);
    return SL_ELIMIT;
}

/* ---- the image formats ------------------------------------------------- */

/* JPEG's decoder keeps state per worker; the others take none. */
static int png_decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
                      const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason, size_t rlen) {
    (void)d;
    return sl__png_decode(data, len, info, req, q, sink, reason, rlen);
}

static int webp_decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
                       const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason, size_t rlen) {
    (void)d;
    return sl__webp_decode(data, len, info, req, q, sink, reason, rlen);
}

static int jpeg_sig(const uint8_t *d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
static int png_sig(const uint8_t *d, size_t n) { return n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8); }
static int webp_sig(const uint8_t *d, size_t n) { return n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4); }
static int always(void) { return 1; }

/* The registry: a format is one entry. Probing goes by content, in this
 * order; a format whose library is not built in (available() == 0) still
 * probes (its probe says so: SL_EUNSUPPORTED), so the reason names it. */
static const sl__image_format formats[] = {
    {"jpeg", "libjpeg-turbo", SL_FORMAT_JPEG, jpeg_sig, sl__jpeg_probe, sl__jpeg_mem, NULL, sl__jpeg_decode, always,
     sl__jpeg_version},
    {"png", "libspng", SL_FORMAT_PNG, png_sig, sl__png_probe, sl__png_mem, NULL, png_decode, sl__png_available,
     sl__png_version},
    {"webp", "libwebp", SL_FORMAT_WEBP, webp_sig, sl__webp_probe, sl__webp_mem, sl__webp_lib_need, webp_decode,
     sl__webp_available, sl__webp_version},
};
#define NFORMATS (sizeof formats / sizeof *formats)

const sl__image_format *sl__image_formats(size_t *n) {
    *n = NFORMATS;
    return formats;
}

static const sl__image_format *format_of(int id) {
    for (size_t i = 0; i < NFORMATS; i++)
        if (formats[i].id == id) return &formats[i];
    return NULL;
}

int sl__probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen) {
    memset(info, 0, sizeof *info);
    if (len == 0) {
        sl__msg(reason, rlen, "empty file");
        return SL_EFORMAT;
    }
    for (size_t i = 0; i < NFORMATS; i++)
        if (formats[i].sig(data, len)) return formats[i].probe(data, len, info, reason, rlen);
    sl__msg(reason, rlen, "not a JPEG, PNG or WebP file (first bytes %02x %02x %02x %02x)", data[0],
            len > 1 ? data[1] : 0, len > 2 ? data[2] : 0, len > 3 ? data[3] : 0);
    return SL_EFORMAT;
}

uint64_t sl__decode_mem(const sl_image_info *info, const sl__decode_req *req) {
    const sl__image_format *f = format_of(info->format);
    return f ? f->mem(info, req) : 0;
}

int sl__decode_lib_need(sl__decoder *d, uint64_t room, const uint8_t *data, size_t len, const sl_image_info *info,
                        uint64_t *need, char *reason, size_t rlen) {
    *need = 0;
    const sl__image_format *f = format_of(info->format);
    if (!f || !f->lib_need || !f->available()) return 0;
    sl__quota q = {.cap = room};
    int rc = d ? sl__decoder_quota(d, room, &q, reason, rlen) : 0;
    return rc ? rc : f->lib_need(data, len, info, &q, need, reason, rlen);
}

int sl__decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
               const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
               size_t rlen) {
    uint64_t x1, y1;
    if (req->w == 0 || req->h == 0 || sl__add(req->x, req->w, &x1) || x1 > info->width ||
        sl__add(req->y, req->h, &y1) || y1 > info->height || (req->channels != 3 && req->channels != 4)) {
        sl__msg(reason, rlen, "bad decode request");
        return SL_EINVAL;
    }
    const sl__image_format *f = format_of(info->format);
    if (!f) {
        sl__msg(reason, rlen, "unknown format");
        return SL_EFORMAT;
    }
    return f->decode(d, data, len, info, req, q, sink, reason, rlen);
}

/* The runtime version names the formats this build decodes, from the
 * registry: "0.2.0 (jpeg libjpeg-turbo, png libspng, webp off)". */
const char *sl_version(void) {
    static char v[160];
    if (!v[0]) {
        char tmp[160];
        size_t n = (size_t)snprintf(tmp, sizeof tmp, "%s (", SL_VERSION_STRING);
        for (size_t i = 0; i < NFORMATS && n < sizeof tmp; i++)
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s%s %s", i ? ", " : "", formats[i].name,
                                  formats[i].available() ? formats[i].library : "off");
        if (n < sizeof tmp) snprintf(tmp + n, sizeof tmp - n, ")");
        memcpy(v, tmp, sizeof v); /* one write of a finished string (racing first calls write the same) */
    }
    return v;
}
