/* Format dispatch by content. The per-sample quota allocator is in quota.c. */
#include "decode.h"

#include <stdio.h>
#include <string.h>

#include "../base/util.h"

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

int sl__probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen) {
    memset(info, 0, sizeof *info);
    if (len == 0) {
        sl__msg(reason, rlen, "empty file");
        return SL_EFORMAT;
    }
    if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return sl__jpeg_probe(data, len, info, reason, rlen);
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (len >= 8 && !memcmp(data, png_sig, 8)) return sl__png_probe(data, len, info, reason, rlen);
    if (len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4))
        return sl__webp_probe(data, len, info, reason, rlen);
    sl__msg(reason, rlen, "not a JPEG, PNG or WebP file (first bytes %02x %02x %02x %02x)", data[0],
            len > 1 ? data[1] : 0, len > 2 ? data[2] : 0, len > 3 ? data[3] : 0);
    return SL_EFORMAT;
}

uint64_t sl__decode_mem(const sl_image_info *info, const sl__decode_req *req) {
    switch (info->format) {
    case SL_FORMAT_JPEG: return sl__jpeg_mem(info, req);
    case SL_FORMAT_PNG: return sl__png_mem(info, req);
    case SL_FORMAT_WEBP: return sl__webp_mem(info, req);
    default: return 0;
    }
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
    switch (info->format) {
    case SL_FORMAT_JPEG: return sl__jpeg_decode(d, data, len, info, req, q, sink, reason, rlen);
    case SL_FORMAT_PNG: return sl__png_decode(data, len, info, req, q, sink, reason, rlen);
    case SL_FORMAT_WEBP: return sl__webp_decode(data, len, info, req, q, sink, reason, rlen);
    default: sl__msg(reason, rlen, "unknown format"); return SL_EFORMAT;
    }
}

/* The runtime version names the formats this build decodes. */
const char *sl_version(void) {
    static char v[80];
    if (!v[0])
        snprintf(v, sizeof v, "%s (libjpeg %s, png %s, webp %s)", SL_VERSION_STRING, "turbo",
                 sl__png_available() ? "libspng" : "off", sl__webp_available() ? "libwebp" : "off");
    return v;
}
