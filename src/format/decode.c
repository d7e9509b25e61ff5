/* Format dispatch by content. The per-sample quota allocator is in quota.c. */
#include "decode.h"

#include <stdio.h>
#include <string.h>

#include "../base/util.h"

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
    sl__msg(reason, rlen, "not a JPEG or PNG file (first bytes %02x %02x %02x %02x)", data[0],
            len > 1 ? data[1] : 0, len > 2 ? data[2] : 0, len > 3 ? data[3] : 0);
    return SL_EFORMAT;
}

uint64_t sl__decode_mem(const sl_image_info *info, const sl__decode_req *req) {
    switch (info->format) {
    case SL_FORMAT_JPEG: return sl__jpeg_mem(info, req);
    case SL_FORMAT_PNG: return sl__png_mem(info, req);
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
    default: sl__msg(reason, rlen, "unknown format"); return SL_EFORMAT;
    }
}

/* The runtime version names the formats this build decodes. */
const char *sl_version(void) {
    static char v[64];
    if (!v[0])
        snprintf(v, sizeof v, "%s (libjpeg %s, png %s)", SL_VERSION_STRING, "turbo",
                 sl__png_available() ? "libspng" : "off");
    return v;
}
