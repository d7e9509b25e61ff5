/*
 * Decoders: bytes in, rows of RGB(A)8 pixels out, pushed to a row sink.
 *
 * The flow for one sample (worker.c):
 *   sl__probe()            header only: format by content, size, channels
 *   limits checked         max pixels / bytes, before anything is allocated
 *   plan (ops/)            which window of the image is needed, and the
 *                          output size it will be resized to
 *   sl__decode_mem()       bytes the decode will need, reserved from budget
 *   sl__decode()           decodes only that window, at the smallest
 *                          resolution that keeps the resize a downscale
 *                          (JPEG DCT scaling), pushing rows to the sink
 * Every allocation a decoder makes comes from the sample's quota, which
 * was reserved from the budget before decoding began.
 */
#ifndef SL_DECODE_H
#define SL_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* A per-sample allocation allowance (single-threaded). With an arena
 * (the loader's workers, sl_image_decode) every block comes from it and
 * the arena's extent may not pass cap, so the bound holds for resident
 * memory whatever the fragmentation; used is then the extent. Without one
 * (arena NULL: a caller that set up no arena) blocks come from malloc and
 * used is the sum of live blocks. The caller counted cap in its budget. */
struct sl__arena;
typedef struct sl__quota {
    uint64_t cap;
    uint64_t used;
    uint64_t peak;
    struct sl__arena *arena;
} sl__quota;
/* Most bytes one quota block costs beyond its request (header, rounding):
 * bounds add it once per block they expect. */
#define SL_QUOTA_BLOCK_OVERHEAD 48
void *sl__quota_alloc(sl__quota *q, size_t n);
void *sl__quota_calloc(sl__quota *q, size_t count, size_t size);
void *sl__quota_realloc(sl__quota *q, void *p, size_t n);
void sl__quota_free(sl__quota *q, void *p);

/* The per-sample limits, checked before anything is allocated: encoded
 * size (from fstat or the buffer's length) and pixels (from the header).
 * 0 or SL_ELIMIT with a reason; a limit of 0 means none. */
int sl__check_bytes(uint64_t bytes, uint64_t max_bytes, char *reason, size_t rlen);
int sl__check_pixels(const sl_image_info *info, uint64_t max_pixels, char *reason, size_t rlen);

/* Identify by content (not by name) and read the header. */
int sl__probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen);

/* What the caller wants decoded. */
typedef struct sl__decode_req {
    uint32_t x, y, w, h;     /* window in full-resolution pixels */
    uint32_t out_w, out_h;   /* size the window will be resized to; the
                                decoder may shrink (DCT scaling) while the
                                scaled window stays >= this. 0: full res */
    uint32_t channels;       /* 3 (RGB) or 4 (RGBA) */
    uint32_t px_bytes;       /* 4: rows may carry RGBX for channels 3 (a
                                padding byte the sink ignores); 0: channels */
    uint32_t max_scans;      /* JPEG: a file with more scans (SOS markers) is
                                SL_ELIMIT before any decoding; 0: no limit */
    const _Atomic int *cancel; /* not NULL: polled while decoding (libjpeg's
                                progress monitor, between row batches); once
                                it reads non-zero the decode stops with
                                SL_ESTATE "decode cancelled". Owned by the
                                caller, set from any thread */
    uint64_t lib_mem;        /* what the format's library allocates on its own
                                for this file, read from its bytes before the
                                plan (sl__decode_lib_need: WebP); 0: not read
                                (the bound is the header's, and the decode
                                reads it itself where it must) */
} sl__decode_req;

/* What the decoder delivers: rows [0, h) of a region of the image as
 * decoded at scale num/8 (of a decoded image full_w x full_h), the region
 * starting at (x, y) of the decoded image and covering the scaled window. */
typedef struct sl__region {
    uint32_t scale_num;      /* decoded = ceil(source * scale_num / 8) */
    uint32_t full_w, full_h; /* decoded image */
    uint32_t x, y, w, h;     /* delivered region, decoded coordinates */
    uint32_t channels;
    uint32_t pixel_bytes;    /* bytes per pixel in pushed rows (0: channels) */
} sl__region;

typedef struct sl__row_sink {
    /* Called once, before any row, with the region the decoder will push. */
    int (*begin)(struct sl__row_sink *s, const sl__region *r);
    /* n rows starting at region row y; each row w*channels bytes. */
    int (*rows)(struct sl__row_sink *s, const uint8_t *const *rows, uint32_t y, uint32_t n);
    void *ctx;
} sl__row_sink;

/* Upper bound of bytes sl__decode allocates from its quota for this
 * request (decoder-internal memory included; req->lib_mem where set). */
uint64_t sl__decode_mem(const sl_image_info *info, const sl__decode_req *req);

/* Reusable per-thread decoder state (libjpeg objects and the like) and
 * the decode arena every allocation of a sample comes from. */
typedef struct sl__decoder sl__decoder;
/* NULL when the system refuses. Maps nothing yet. */
sl__decoder *sl__decoder_new(void);
/* Unmaps the arena and frees everything. NULL is ignored. */
void sl__decoder_free(sl__decoder *d);
/* Bytes of a decoder's counted memory that are not its arena: the object,
 * libjpeg's permanent pool (Huffman and quantization tables, source
 * manager: a few KiB, allocated once per decoder with malloc). */
#define SL_DECODER_SELF ((uint64_t)32 << 10)
/* Bind q to d's arena for one sample: counted is what the caller holds
 * counted for this decoder (SL_DECODER_SELF included); the arena's mapping
 * becomes counted - SL_DECODER_SELF and q->cap its limit. 0, or SL_ENOMEM
 * with a reason (the system refused the mapping), SL_EBUDGET when counted
 * does not even cover SL_DECODER_SELF, SL_ESTATE when blocks of the last
 * sample are still live (a leak: a bug). Between samples only. */
int sl__decoder_quota(sl__decoder *d, uint64_t counted, sl__quota *q, char *reason, size_t rlen);
/* Shrink the arena so the decoder holds at most counted bytes (between
 * samples; before the caller gives the rest back). */
void sl__decoder_trim(sl__decoder *d, uint64_t counted);
/* Highest arena extent of the last sample decoded (tests, bounds). */
uint64_t sl__decoder_peak(const sl__decoder *d);

/* A library without allocator hooks whose allocations follow counts in the
 * file rather than its header (WebP's lossless streams: the Huffman
 * groups): what it will allocate to decode this file, read from the bytes,
 * into *need (0 for the formats whose bound is their header's). The
 * reading's scratch comes from d's arena with `room` counted (d NULL: from
 * malloc, at most room), and is given back. 0, or SL_ECORRUPT (the file's
 * header is one the library refuses) / SL_EBUDGET with a reason. */
int sl__decode_lib_need(sl__decoder *d, uint64_t room, const uint8_t *data, size_t len,
                        const sl_image_info *info, uint64_t *need, char *reason, size_t rlen);

/* Decode the request. Returns 0, or SL_ECORRUPT / SL_EUNSUPPORTED /
 * SL_ELIMIT (scan limit) / SL_EBUDGET (quota) / SL_ESTATE (cancelled) / a
 * sink's error, with a reason. */
int sl__decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
               const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
               size_t rlen);

/* An image format: one entry of decode.c's registry. Adding a format is
 * writing its probe, mem and decode and adding its entry there. */
typedef struct sl__image_format {
    const char *name;    /* "jpeg", "png", "webp" */
    const char *library; /* what decodes it, for sl_version() */
    int id;              /* SL_FORMAT_* (sl_image_info.format) */
    /* 1 when the first n bytes are this format's signature */
    int (*sig)(const uint8_t *data, size_t n);
    /* the header: as sl__probe */
    int (*probe)(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen);
    /* as sl__decode_mem */
    uint64_t (*mem)(const sl_image_info *info, const sl__decode_req *req);
    /* as sl__decode_lib_need with a quota, or NULL (the header bounds it) */
    int (*lib_need)(const uint8_t *data, size_t len, const sl_image_info *info, sl__quota *q, uint64_t *need,
                    char *reason, size_t rlen);
    /* as sl__decode (the request already checked against info) */
    int (*decode)(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
                  const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason, size_t rlen);
    /* 0 when built without its library (its probe then says so) */
    int (*available)(void);
    /* its library and version for sl_build_info ("libspng 0.7.3"), or "off" */
    void (*version)(char *buf, size_t len);
} sl__image_format;

/* The registry, in probing order: *n entries. Static; cannot fail. */
const sl__image_format *sl__image_formats(size_t *n);
/* Each format's library version (build_info.c). */
void sl__jpeg_version(char *buf, size_t len);
void sl__png_version(char *buf, size_t len);
void sl__webp_version(char *buf, size_t len);

/* Per format (decode.c's registry holds them). */
int sl__jpeg_probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen);
uint64_t sl__jpeg_mem(const sl_image_info *info, const sl__decode_req *req);
int sl__jpeg_decode(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
                    const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
                    size_t rlen);
int sl__png_probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen);
uint64_t sl__png_mem(const sl_image_info *info, const sl__decode_req *req);
/* PNG decodes full resolution (scale_num 8), only the window's rows and
 * columns reaching the sink, stopping after the window's last row where
 * the file is not interlaced. */
int sl__png_decode(const uint8_t *data, size_t len, const sl_image_info *info,
                   const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
                   size_t rlen);
int sl__png_available(void); /* 0 when built without libspng */
/* WebP (webp.c): full resolution (scale_num 8), the window only (libwebp
 * cropping), pushed to the sink from a window buffer in the quota.
 * libwebp's own allocations: a lossy frame's follow its width (decoder
 * objects, io, upsampler lines, and per column of width VP8's macroblock
 * caches, top samples, intra modes and coefficients); a lossless stream's
 * (a lossless file, or a lossy file's alpha plane) are read from its
 * header by sl__webp_lib_need (webp_bound.c). */
#define SL_WEBP_LOSSY_FIXED ((uint64_t)256 << 10)
#define SL_WEBP_LOSSY_PER_COL ((uint64_t)256)
/* The most meta-Huffman image sl__webp_lib_need decodes to count groups (a
 * bigger one is bounded by the most groups it could name; encoders write
 * at most 2,600 pixels): fixed, so the bound never depends on the room. */
#define SL_WEBP_META_MAX ((uint64_t)512 << 10)
int sl__webp_lib_need(const uint8_t *data, size_t len, const sl_image_info *info, sl__quota *q, uint64_t *need,
                      char *reason, size_t rlen);
int sl__webp_probe(const uint8_t *data, size_t len, sl_image_info *info, char *reason, size_t rlen);
uint64_t sl__webp_mem(const sl_image_info *info, const sl__decode_req *req);
int sl__webp_decode(const uint8_t *data, size_t len, const sl_image_info *info,
                    const sl__decode_req *req, sl__quota *q, sl__row_sink *sink, char *reason,
                    size_t rlen);
int sl__webp_available(void); /* 0 when built without libwebp */

#endif
