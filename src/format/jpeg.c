/*
 * JPEG through libjpeg-turbo's jpeglib.h API.
 *
 * Probe: our own walk over the markers up to the first SOS (dimensions,
 * components, progressive, Adobe transform, EXIF orientation); nothing is
 * allocated and every length is bounds-checked.
 *
 * Decode: only the requested window. The DCT scale is the smallest power
 * of two (1/8, 1/4, 1/2) that keeps the scaled window at least as large as
 * the output (so the resize after it stays a downscale); jpeg_crop_scanline
 * limits the columns, jpeg_skip_scanlines skips the rows above, and the
 * decode stops after the window's last row. Memory: libjpeg's memory
 * manager is replaced (jpeg_mem.c), so every byte it allocates for an
 * image comes from the sample's quota, in the worker's decode arena;
 * sl__jpeg_mem() bounds it from the header and the caller reserves that
 * from the budget. The arena refuses anything past it (libjpeg's own
 * out-of-memory error, reported as SL_EBUDGET).
 *
 * Work: a file with more scans than req->max_scans is refused from its
 * markers before decoding (each scan of a progressive file is a pass over
 * the whole image, so a repeated scan is a cheap way to cost seconds), and
 * a progress monitor stops the decode once req->cancel reads non-zero (or
 * a scan past the limit shows up after all), as djpeg -maxscans does.
 */
#include <jerror.h>
#include <setjmp.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#include "base/arena.h"
#include "base/util.h"
#include "format/decode.h"
#include "format/jpeg_mem.h"

#define ROWS_PER_READ 16
#define JPEG_BASE_MEM ((uint64_t)256 << 10)
#define SL_JPEG_MARGIN 2 /* decoded pixels around a window (sl__jpeg_decode; 1 is enough in every case test_jpeg_window tries) */

/* ---- probe ---------------------------------------------------------------- */

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

static int exif_orientation(const uint8_t *p, size_t n) {
    /* p: APP1 payload after "Exif\0\0": a TIFF structure. */
    if (n < 8) return 1;
    int le;
    if (p[0] == 'I' && p[1] == 'I') le = 1;
    else if (p[0] == 'M' && p[1] == 'M') le = 0;
    else return 1;
#define RD16(q) (le ? (uint32_t)(q)[0] | (uint32_t)(q)[1] << 8 : (uint32_t)(q)[0] << 8 | (q)[1])
#define RD32(q) (le ? (uint32_t)(q)[0] | (uint32_t)(q)[1] << 8 | (uint32_t)(q)[2] << 16 | (uint32_t)(q)[3] << 24 \
                    : (uint32_t)(q)[0] << 24 | (uint32_t)(q)[1] << 16 | (uint32_t)(q)[2] << 8 | (q)[3])
    uint32_t ifd = RD32(p + 4);
    if (ifd > n - 2 || n < 2) return 1;
    uint32_t count = RD16(p + ifd);
    for (uint32_t i = 0; i < count; i++) {
        uint64_t e = (uint64_t)ifd + 2 + (uint64_t)i * 12;
        if (e + 12 > n) break;
        if (RD16(p + e) == 0x0112) {
            uint32_t v = RD16(p + e + 8);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
#undef RD16
#undef RD32
}

int sl__jpeg_probe(const uint8_t *d, size_t len, sl_image_info *info, char *reason, size_t rlen) {
    memset(info, 0, sizeof *info);
    info->format = SL_FORMAT_JPEG;
    info->orientation = 1;
    size_t pos = 2;
    int have_sof = 0;
    for (;;) {
        /* markers: one or more 0xFF, then the code */
        if (pos >= len) break;
        if (d[pos] != 0xFF) {
            sl__msg(reason, rlen, "corrupt JPEG: expected a marker at byte %zu", pos);
            return SL_ECORRUPT;
        }
        while (pos < len && d[pos] == 0xFF) pos++;
        if (pos >= len) break;
        uint8_t m = d[pos++];
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;
        if (m == 0xD9) break;
        if (pos + 2 > len) break;
        uint32_t seg = be16(d + pos);
        if (seg < 2 || pos + seg > len) break;
        const uint8_t *s = d + pos + 2;
        size_t sn = seg - 2;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (sn < 6) {
                sl__msg(reason, rlen, "corrupt JPEG: short frame header");
                return SL_ECORRUPT;
            }
            info->bit_depth = s[0];
            info->height = be16(s + 1);
            info->width = be16(s + 3);
            info->channels = s[5];
            info->progressive = (m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE);
            if (m == 0xC3 || m == 0xC7 || m == 0xCB || m == 0xCF) {
                sl__msg(reason, rlen, "lossless JPEG is not supported");
                return SL_EUNSUPPORTED;
            }
            have_sof = 1;
        } else if (m == 0xE1 && sn >= 6 && !memcmp(s, "Exif\0\0", 6)) {
            info->orientation = exif_orientation(s + 6, sn - 6);
        } else if (m == 0xDA) {
            /* A first scan without every component means several scans:
             * libjpeg then buffers the whole image's coefficients, as for
             * a progressive file, and it is bounded (and reported) as one. */
            if (have_sof && sn >= 1 && s[0] < info->channels) info->progressive = 1;
            break;
        }
        pos += seg;
    }
    if (!have_sof) {
        sl__msg(reason, rlen, "corrupt JPEG: no frame header before the data (truncated?)");
        return SL_ECORRUPT;
    }
    if (info->width == 0 || info->height == 0) {
        sl__msg(reason, rlen, "JPEG with zero or deferred (DNL) dimensions %ux%u", info->width, info->height);
        return SL_EUNSUPPORTED;
    }
    if (info->bit_depth != 8) {
        sl__msg(reason, rlen, "%d-bit JPEG is not supported", info->bit_depth);
        return SL_EUNSUPPORTED;
    }
    if (info->channels != 1 && info->channels != 3 && info->channels != 4) {
        sl__msg(reason, rlen, "JPEG with %u components is not supported", info->channels);
        return SL_EUNSUPPORTED;
    }
    return 0;
}

/* ---- scale and memory ----------------------------------------------------- */

/* Smallest power-of-two DCT scale num/8 keeping the window >= the output. */
static unsigned choose_scale(const sl__decode_req *r) {
    if (!r->out_w || !r->out_h) return 8;
    unsigned m = 1;
    while (m < 8 && ((uint64_t)r->w * m < (uint64_t)r->out_w * 8 || (uint64_t)r->h * m < (uint64_t)r->out_h * 8))
        m *= 2;
    return m;
}

static uint64_t libjpeg_mem(const sl_image_info *info) {
    uint64_t w16 = ((uint64_t)info->width + 16) & ~(uint64_t)15;
    uint64_t mem = JPEG_BASE_MEM + (uint64_t)info->channels * w16 * 96; /* row buffers, context */
    if (info->progressive) {
        /* whole-image coefficients: 64 x 2 bytes a block, every component
         * counted at full resolution (4:4:4, the most); a component's
         * blocks are padded to its sampling factor (at most 4), so 3 more
         * a row and a column. libjpeg's allocations are counted exactly
         * (jpeg_mem.c), so no slack for pool overheads is guessed. */
        uint64_t bw = ((uint64_t)info->width + 7) / 8 + 3, bh = ((uint64_t)info->height + 7) / 8 + 3;
        mem += (uint64_t)info->channels * bw * bh * sizeof(JBLOCK);
    }
    return mem;
}

uint64_t sl__jpeg_mem(const sl_image_info *info, const sl__decode_req *req) {
    unsigned m = choose_scale(req);
    uint64_t ow = ((uint64_t)info->width * m + 7) / 8 + 16;
    return libjpeg_mem(info) + ROWS_PER_READ * ow * 4 + 256;
}

/* ---- decode --------------------------------------------------------------- */

/* Is there an end-of-image marker after the first start-of-scan? Inside
 * entropy-coded data 0xFF is always followed by 0x00 or a restart code, so
 * FF D9 there can only be EOI. A file cut anywhere in its image data has
 * none: it is refused whatever window is asked for, so whether a truncated
 * file fails does not depend on the crop (Pillow refuses it too). */
static int has_eoi(const uint8_t *d, size_t len) {
    size_t sos = 2;
    while (sos + 4 <= len) { /* markers up to SOS, as the probe walks them */
        if (d[sos] != 0xFF) return 0;
        while (sos < len && d[sos] == 0xFF) sos++;
        if (sos >= len) return 0;
        uint8_t m = d[sos++];
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;
        if (m == 0xDA) break;
        if (sos + 2 > len) return 0;
        sos += be16(d + sos);
    }
    for (size_t i = len; i >= sos + 2; i--)
        if (d[i - 2] == 0xFF && d[i - 1] == 0xD9) return 1;
    return 0;
}

/* How many scans (SOS markers) the file holds, walking its markers as a
 * decoder meets them: segments are skipped by their length (so a
 * thumbnail inside APP1 is not counted), entropy-coded data is searched
 * for 0xFF, after which 0x00 (a stuffed byte), RSTn and 0xFF fill are
 * data and anything else is a marker. Stops at EOI or the end; never
 * reads past len. Linear in len, allocates nothing. */
static uint32_t count_scans(const uint8_t *d, size_t len) {
    uint32_t scans = 0;
    size_t pos = 2; /* after SOI */
    while (pos + 1 < len) {
        if (d[pos] != 0xFF) {
            const uint8_t *ff = memchr(d + pos, 0xFF, len - pos);
            if (!ff) break;
            pos = (size_t)(ff - d);
            continue;
        }
        uint8_t m = d[pos + 1];
        if (m == 0xFF) {
            pos++;
        } else if (m == 0x00 || m == 0x01 || m == 0xD8 || (m >= 0xD0 && m <= 0xD7)) {
            pos += 2;
        } else if (m == 0xD9) {
            break;
        } else {
            if (pos + 4 > len) break;
            if (m == 0xDA) scans++;
            pos += 2 + be16(d + pos + 2);
        }
    }
    return scans;
}

struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int truncated;
};

/* The progress monitor's view of the decode it watches (set per decode). */
struct progress {
    struct jpeg_progress_mgr pub; /* first: libjpeg hands us &pub */
    struct err_mgr *err;
    const _Atomic int *cancel;
    uint32_t max_scans;
    int stop; /* why the monitor ended the decode: SL_ESTATE (cancelled), SL_ELIMIT (scans) */
};

struct sl__decoder {
    struct jpeg_decompress_struct cinfo;
    struct err_mgr err;
    struct progress prog;
    int created;
    sl__jpeg_mm mm;   /* cinfo's memory manager once created */
    sl__arena arena;  /* every sample's allocations (see decode.h) */
};

/* Called by libjpeg once per iMCU row while it absorbs a multi-scan file
 * and once per jpeg_read_scanlines/skip call: a cancel request or a scan
 * past the limit ends the decode through the error handler's jump. */
static void on_progress(j_common_ptr c) {
    struct progress *p = (struct progress *)c->progress;
    if (p->cancel && *p->cancel) p->stop = SL_ESTATE;
    else if (p->max_scans && c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > (int)p->max_scans)
        p->stop = SL_ELIMIT;
    if (p->stop) longjmp(p->err->jb, 1);
}

/* Does the current message read like this? The message codes differ
 * between libjpeg builds, and in a process that already loaded another
 * libjpeg.so.62 (Pillow's or torchvision's wheels bring their own) ours
 * may be bound to theirs, so the text is the stable key. */
static int is_msg(j_common_ptr c, const char *prefix) {
    int code = c->err->msg_code;
    if (code < 0 || code > c->err->last_jpeg_message || !c->err->jpeg_message_table) return 0;
    const char *m = c->err->jpeg_message_table[code];
    return m && !strncmp(m, prefix, strlen(prefix));
}

static void on_error(j_common_ptr c) {
    struct err_mgr *e = (struct err_mgr *)c->err;
    longjmp(e->jb, 1);
}

static void on_message(j_common_ptr c, int level) {
    struct err_mgr *e = (struct err_mgr *)c->err;
    if (level < 0) {
        /* A warning. Data ending early is an error (as Pillow and the
         * "image file is truncated" users expect); the rest (extraneous
         * bytes, bad restart markers) is tolerated as Pillow does. */
        if (c->err->msg_code == JWRN_JPEG_EOF || is_msg(c, "Premature end of JPEG")) e->truncated = 1;
        c->err->num_warnings++;
    }
}

sl__decoder *sl__decoder_new(void) {
    sl__decoder *volatile d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->cinfo.err = jpeg_std_error(&d->err.pub);
    d->err.pub.error_exit = on_error;
    d->err.pub.emit_message = on_message;
    if (setjmp(d->err.jb)) {
        free(d);
        return NULL;
    }
    jpeg_create_decompress(&d->cinfo);
    sl__jpeg_mm_install(&d->mm, (j_common_ptr)&d->cinfo);
    sl__arena_init(&d->arena);
    d->created = 1;
    return d;
}

void sl__decoder_free(sl__decoder *d) {
    if (!d) return;
    if (d->created) {
        jpeg_destroy_decompress(&d->cinfo);
        sl__arena_fini(&d->arena);
    }
    free(d);
}

int sl__decoder_quota(sl__decoder *d, uint64_t counted, sl__quota *q, char *reason, size_t rlen) {
    memset(q, 0, sizeof *q);
    if (counted < SL_DECODER_SELF) {
        sl__msg(reason, rlen, "decoder memory of %llu bytes is below its fixed %llu", (unsigned long long)counted,
                (unsigned long long)SL_DECODER_SELF);
        return SL_EBUDGET;
    }
    uint64_t bytes = counted - SL_DECODER_SELF;
    int rc = bytes > SIZE_MAX / 2 ? SL_ENOMEM : sl__arena_reserve(&d->arena, (size_t)bytes);
    if (rc == SL_ESTATE) {
        sl__msg(reason, rlen, "decode arena still holds %zu blocks of the last sample", d->arena.live);
        return rc;
    }
    if (rc) {
        sl__msg(reason, rlen, "the system refused a %llu-byte decode arena", (unsigned long long)bytes);
        return SL_ENOMEM;
    }
    sl__arena_peak_reset(&d->arena);
    q->cap = d->arena.limit;
    q->arena = &d->arena;
    return 0;
}

void sl__decoder_trim(sl__decoder *d, uint64_t counted) {
    if (!d) return;
    uint64_t bytes = counted > SL_DECODER_SELF ? counted - SL_DECODER_SELF : 0;
    sl__arena_trim(&d->arena, (size_t)SL_MIN(bytes, (uint64_t)SIZE_MAX));
}

uint64_t sl__decoder_peak(const sl__decoder *d) { return sl__arena_peak(&d->arena); }

/* Pillow's CMYK -> RGB (inverted first when an Adobe marker says so). */
static void cmyk_to_rgb(uint8_t *row, uint32_t w, int inverted, uint32_t channels) {
    uint8_t *out = row;
    for (uint32_t x = 0; x < w; x++) {
        int c = row[4 * x], m = row[4 * x + 1], y = row[4 * x + 2], k = row[4 * x + 3];
        if (inverted) {
            c = 255 - c;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        int nk = 255 - k, t;
#define MULDIV255(a, b) (t = (a) * (b) + 128, ((t >> 8) + t) >> 8)
        int r = nk - MULDIV255(c, nk), g = nk - MULDIV255(m, nk), b = nk - MULDIV255(y, nk);
#undef MULDIV255
        out[0] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
        out[1] = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
        out[2] = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
        if (channels == 4) out[3] = 255;
        out += channels;
    }
}

int sl__jpeg_decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
                    const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
                    size_t rlen) {
    struct jpeg_decompress_struct *ci = &d->cinfo;
    uint8_t *volatile buf = NULL;
    volatile int rc = 0;

    if (len > (unsigned long)-1) return SL_ELIMIT;
    d->err.truncated = 0;
    if (setjmp(d->err.jb)) {
        char msg[JMSG_LENGTH_MAX];
        d->err.pub.format_message((j_common_ptr)ci, msg);
        int code = d->err.pub.msg_code;
        if (d->prog.stop == SL_ESTATE) {
            sl__msg(reason, rlen, "decode cancelled");
            rc = SL_ESTATE;
        } else if (d->prog.stop == SL_ELIMIT) {
            sl__msg(reason, rlen, "JPEG scan %d is over the max_scans limit of %u", ci->input_scan_number,
                    req->max_scans);
            rc = SL_ELIMIT;
        } else if (code == JERR_NO_BACKING_STORE || code == JERR_OUT_OF_MEMORY || strstr(msg, "Backing store") ||
            strstr(msg, "Insufficient memory")) {
            sl__msg(reason, rlen, "JPEG decoder needs more memory than its bound: %s", msg);
            rc = SL_EBUDGET;
        } else {
            sl__msg(reason, rlen, "corrupt JPEG: %s", msg);
            rc = SL_ECORRUPT;
        }
        goto out;
    }
    if (!has_eoi(data, len)) {
        sl__msg(reason, rlen, "truncated JPEG: the data ends before its end-of-image marker");
        return SL_ECORRUPT;
    }
    /* A scan bomb (a legal header, one scan repeated hundreds of times)
     * costs a full pass over the image per scan: refused from its markers
     * before any of them is decoded. */
    uint32_t scans = req->max_scans ? count_scans(data, len) : 0;
    if (scans > req->max_scans) {
        sl__msg(reason, rlen, "JPEG has %u scans, over the max_scans limit of %u", scans, req->max_scans);
        return SL_ELIMIT;
    }
    d->prog = (struct progress){{on_progress, 0, 0, 0, 0}, &d->err, req->cancel, req->max_scans, 0};
    ci->progress = &d->prog.pub;
    sl__jpeg_mm_bind(&d->mm, (j_common_ptr)ci, q); /* libjpeg's image pool draws on q */
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    if (ci->image_width != info->width || ci->image_height != info->height) {
        sl__msg(reason, rlen, "corrupt JPEG: header disagrees with itself");
        rc = SL_ECORRUPT;
        goto out;
    }
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    if (cmyk) ci->out_color_space = JCS_CMYK;
    else if (req->channels == 4) ci->out_color_space = JCS_EXT_RGBA;
    else ci->out_color_space = req->px_bytes == 4 ? JCS_EXT_RGBX : JCS_RGB; /* RGBX: 4-lane resize */
    ci->dct_method = JDCT_ISLOW;
    unsigned m = choose_scale(req);
    ci->scale_num = m;
    ci->scale_denom = 8;
    jpeg_start_decompress(ci);

    /* Window in decoded coordinates, widened to whole pixels, then by
     * SL_JPEG_MARGIN on each side (clamped): libjpeg-turbo's cropped decode
     * treats the crop's first and last columns as image edges when it
     * upsamples chroma (and a row skip starts its context afresh), so
     * those pixels differ from a full decode's; the margin keeps them out
     * of the window, whose pixels then equal the full decode's at this
     * scale (test_jpeg_window). The sink takes what it needs of the rest. */
    uint32_t ow = ci->output_width, oh = ci->output_height;
    uint32_t rx0 = (uint32_t)((uint64_t)req->x * m / 8);
    uint32_t rx1 = (uint32_t)SL_MIN(((uint64_t)(req->x + req->w) * m + 7) / 8, ow);
    uint32_t ry0 = (uint32_t)((uint64_t)req->y * m / 8);
    uint32_t ry1 = (uint32_t)SL_MIN(((uint64_t)(req->y + req->h) * m + 7) / 8, oh);
    if (rx1 <= rx0 || ry1 <= ry0) {
        sl__msg(reason, rlen, "empty decode window");
        rc = SL_EINVAL;
        goto out;
    }
    rx0 = rx0 > SL_JPEG_MARGIN ? rx0 - SL_JPEG_MARGIN : 0, rx1 = SL_MIN(rx1 + SL_JPEG_MARGIN, ow);
    ry0 = ry0 > SL_JPEG_MARGIN ? ry0 - SL_JPEG_MARGIN : 0, ry1 = SL_MIN(ry1 + SL_JPEG_MARGIN, oh);
    JDIMENSION xoff = rx0, cw = rx1 - rx0;
    if (xoff > 0 || cw < ow) jpeg_crop_scanline(ci, &xoff, &cw);
    else cw = ow;

    uint32_t comps = (uint32_t)ci->output_components; /* 3, 4 (RGBA or CMYK) */
    uint64_t rowbytes = (uint64_t)cw * SL_MAX(comps, req->channels);
    buf = sl__quota_alloc(q, (size_t)(rowbytes * ROWS_PER_READ));
    if (!buf) {
        sl__msg(reason, rlen, "row buffer over quota");
        rc = SL_EBUDGET;
        goto out;
    }
    uint32_t pb = cmyk ? req->channels : comps; /* CMYK rows are converted in place */
    sl__region region = {m, ow, oh, xoff, ry0, cw, ry1 - ry0, req->channels, pb};
    if ((rc = sink->begin(sink, &region))) {
        sl__msg(reason, rlen, "resize setup failed");
        goto out;
    }
    if (ry0 > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(ci, ry0);
        if (skipped != ry0) {
            sl__msg(reason, rlen, "corrupt JPEG: could not skip to row %u", ry0);
            rc = SL_ECORRUPT;
            goto out;
        }
    }
    JSAMPROW rows[ROWS_PER_READ];
    for (int i = 0; i < ROWS_PER_READ; i++) rows[i] = buf + (size_t)i * rowbytes;
    while (ci->output_scanline < ry1) {
        if (req->cancel && *req->cancel) {
            sl__msg(reason, rlen, "decode cancelled");
            rc = SL_ESTATE;
            goto out;
        }
        uint32_t want = SL_MIN((uint32_t)ROWS_PER_READ, ry1 - ci->output_scanline);
        uint32_t y = ci->output_scanline - ry0;
        JDIMENSION got = jpeg_read_scanlines(ci, rows, want);
        if (d->err.truncated) {
            sl__msg(reason, rlen, "truncated JPEG: data ends before row %u of %u", ci->output_scanline, oh);
            rc = SL_ECORRUPT;
            goto out;
        }
        if (got == 0) {
            sl__msg(reason, rlen, "corrupt JPEG: no rows returned");
            rc = SL_ECORRUPT;
            goto out;
        }
        if (cmyk)
            for (JDIMENSION i = 0; i < got; i++)
                cmyk_to_rgb(rows[i], cw, ci->saw_Adobe_marker, req->channels);
        if ((rc = sink->rows(sink, (const uint8_t *const *)rows, y, got))) {
            sl__msg(reason, rlen, "resize failed");
            goto out;
        }
    }
out:
    /* Early stop (rows below the window never decoded) or failure: abort
     * keeps the object reusable; a full read finishes normally. */
    sl__jpeg_mm_bind(&d->mm, (j_common_ptr)ci, q); /* ours again after a longjmp out of libjpeg's */
    if (setjmp(d->err.jb) == 0) {
        if (rc == 0 && ci->output_scanline == ci->output_height) jpeg_finish_decompress(ci);
        else jpeg_abort_decompress(ci);
    } else {
        jpeg_abort_decompress(ci);
    }
    ci->progress = NULL; /* d->prog describes this decode only */
    sl__jpeg_mm_unbind(&d->mm, (j_common_ptr)ci);
    sl__quota_free(q, buf);
    return rc;
}
