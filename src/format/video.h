/*
 * Video clips through FFmpeg's libraries (libavformat, libavcodec,
 * libswscale), built when SL_HAVE_FFMPEG is defined; without it every
 * function here fails with SL_EUNSUPPORTED and a reason.
 *
 * The flow for one clip (what the worker does for a `kind: "video"` field):
 *   sl__video_probe()    container and stream headers only: size, rotation,
 *                        rate, frame count, codec; limits checked; nothing
 *                        decoded
 *   sl__video_plan()     which frames (temporal indices), one crop box and
 *                        flip for all of them, and the bytes to reserve
 *   reserve plan.mem     from the budget (SL_MEM_DECODER), a quota of
 *                        plan.quota over it
 *   sl__video_decode()   seek, decode forward as far as the clip needs,
 *                        convert + crop + scale each needed frame straight
 *                        into its place in the output [T][3][H][W]
 *
 * Frame indices. Frame i is the frame displayed at time
 *     start + (i + 0.5) / rate
 * where start is the first frame's timestamp and rate the stream's average
 * frame rate: for a constant-rate stream that is exactly the i-th frame in
 * presentation order (what ffmpeg's select=eq(n,i) picks); for a variable
 * rate one it is the frame on screen at that moment of a nominal grid.
 * With `fps` set, clip frame k is frame i0 + floor(k * rate / fps) (i0: the
 * clip's first frame): the frame on screen at time k / fps after frame i0.
 * Train draws i0 uniformly from the starts that fit the clip; val centres
 * it. A clip longer than the video: see SL_CLIP_* below.
 *
 * Memory. Frame buffers are the decoder's (reference frames + the one being
 * decoded + one held for display-time matching), allocated through our own
 * get_buffer2 from the quota: the count is bounded from the stream's
 * parameters (H.264: the level's DPB size; others: the codec's reference
 * limit), their size from the coded size and pixel format, so a stream
 * that lies about either fails its allocation cleanly (SL_EBUDGET record).
 * FFmpeg's other allocations (demuxer tables, packets, codec tables,
 * swscale filters) cannot be routed through hooks; they are bounded from
 * the headers (probesize, encoded bytes, coded size) and reserved as
 * plan.mem - plan.quota. Decoder threads: 1 per context (the loader's
 * workers are the parallelism). av_max_alloc caps FFmpeg's single
 * allocations at 64 MiB (video.c says why, and that it is process-wide):
 * demuxers size tables from header counts before reading them, and a tiny
 * file could otherwise ask for gigabytes.
 */
#ifndef SL_VIDEO_H
#define SL_VIDEO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "format/decode.h"
#include "source/source.h"

#define SL_CLIP_MAX_FRAMES 512 /* frames one clip may ask for */

/* Limits checked from headers before anything is decoded; 0 (or NULL):
 * none. codecs: comma-separated FFmpeg decoder names allowed
 * ("h264,hevc,vp9"); NULL: SL_VIDEO_DEFAULT_CODECS. */
typedef struct sl__video_limits {
    uint64_t max_pixels; /* per frame (coded size) */
    uint64_t max_frames; /* frames in the stream */
    uint64_t max_bytes;  /* encoded bytes of the file */
    double max_seconds;  /* stream duration */
    const char *codecs;
} sl__video_limits;

/* Decoders whose frame buffers come from our allocator (AV_CODEC_CAP_DR1)
 * and that decode on the calling thread. */
#define SL_VIDEO_DEFAULT_CODECS "h264,hevc,vp8,vp9,mpeg4,mpeg2video,mpeg1video,mjpeg,h263"

typedef struct sl__video_info {
    uint32_t width, height;             /* displayed, after rotation */
    uint32_t coded_width, coded_height; /* as decoded, before rotation */
    int rotation;                       /* clockwise degrees to display: 0, 90, 180, 270 */
    double fps;                         /* average frame rate */
    double duration;                    /* seconds */
    int64_t frames;                     /* frames in the stream (header or duration * fps) */
    int64_t start_pts;                  /* first frame's timestamp, stream time base */
    int tb_num, tb_den;                 /* stream time base */
    int rate_num, rate_den;             /* the average frame rate as read */
    int stream;                         /* index of the video stream */
    int codec_id;                       /* AVCodecID */
    int pix_fmt;                        /* AVPixelFormat from the header, -1 unknown */
    int profile, level;                 /* from the header, < 0 unknown */
    int codec_id_kind;                  /* SL__VC_* (video_impl.h) */
    uint64_t file_bytes;
    uint64_t demux_mem;                 /* the demuxer's memory after the header (index, buffers) */
    char codec[16];                     /* codec name, "h264" */
} sl__video_info;


typedef struct sl__clip_plan {
    uint32_t frames;                     /* T */
    int64_t frame[SL_CLIP_MAX_FRAMES];   /* frame index (see above) of each clip frame */
    uint32_t out_w, out_h;               /* output frame size */
    uint32_t box[4];                     /* crop (x, y, w, h), displayed pixels */
    uint32_t scaled_w, scaled_h;         /* the box is scaled to this (displayed orientation) */
    uint32_t win_x, win_y;               /* then the output window at this offset (val: centre) */
    int flip;                            /* mirror horizontally (train) */
    uint64_t out_bytes;                  /* T * 3 * out_h * out_w */
    uint64_t quota;                      /* cap of the quota sl__video_decode allocates from */
    uint64_t mem;                        /* bytes to reserve: quota + FFmpeg's own (>= quota) */
} sl__clip_plan;

/* 1 when this build decodes video. */
int sl__video_available(void);

/* Read the headers of bytes [f->offset, f->offset + f->size) of f->fd (a
 * tar member works too: the demuxer reads through pread, never past the
 * range), pick the best video stream, fill *info and check *lim. Nothing
 * is decoded; whatever it opens is closed before it returns. Returns 0, or
 * SL_EFORMAT (not a video container / no video stream), SL_ECORRUPT,
 * SL_EUNSUPPORTED (codec off the allow-list or not built), SL_ELIMIT, with
 * a reason naming the numbers. */
int sl__video_probe(const sl__sample_file *f, const sl__video_limits *lim, sl__video_info *info,
                    char *reason, size_t rlen);

/* The stream's frame count and duration from its header's numbers, as
 * the probe takes them: the count the header states (> 0), else duration
 * x fps rounded; a duration of 0 from count / fps. A duration that is
 * not a number, negative or over SL_VIDEO_MAX_SECONDS, or a rate outside
 * (0, 1000], is refused before any product is cast, so no header value
 * reaches an integer it does not fit. 0, or SL_ECORRUPT with a reason. */
#define SL_VIDEO_MAX_SECONDS 1e7
int sl__video_count(int64_t stated, double fps, double *duration, int64_t *frames, char *reason, size_t rlen);

/* Fill plan->quota and plan->mem, the bytes sl__video_decode will take
 * for this plan (frames, crop and size set): a bound from the stream's
 * parameters. 0 or SL_EOVERFLOW / SL_ELIMIT with a reason. */
int sl__video_plan_mem(const sl__video_info *info, sl__clip_plan *p, char *reason, size_t rlen);

/* Decode plan's frames into dst (plan->out_bytes bytes, uint8
 * [T][3][out_h][out_w], RGB planes). Every allocation of ours and the
 * decoder's frame buffers come from q (cap >= plan->quota, reserved in the
 * budget by the caller with the rest of plan->mem). cancel (may be NULL):
 * checked between packets; set, the decode stops with SL_ESTATE. On any
 * return every FFmpeg object is freed and q is back where it started.
 * Returns 0, or SL_ECORRUPT / SL_EFORMAT / SL_EUNSUPPORTED / SL_EBUDGET
 * (quota) / SL_ESTATE, with a reason; dst is then partly written. */
int sl__video_decode(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan,
                     sl__quota *q, const _Atomic int *cancel, uint8_t *dst, char *reason, size_t rlen);

/* ---- another converter than swscale, another decoder than software ------
 *
 * sl__video_decode_into runs the same passes (seek planning, the frames no
 * target shows skipped, display-time matching) and hands each needed frame
 * to a sink instead of converting it with swscale: the GPU's kernels
 * (src/gpu/video.c), or the CPU reference of those kernels (ops/yuv.c).
 * The frames come from the software decoder (frame buffers from the
 * quota, as sl__video_decode) or, given an NVDEC session (video_hw.c),
 * from the GPU's decoder in device memory. */

/* A decoded frame as a sink sees it. */
enum {
    SL__FRAME_YUV420P = 0, /* 8-bit 4:2:0, three planes (host memory: the software decoder) */
    SL__FRAME_NV12 = 1,    /* 8-bit 4:2:0, Y then interleaved U,V (device memory: NVDEC) */
};
typedef struct sl__video_frame {
    uint64_t plane[3];       /* host pointers or device addresses (NV12: two planes) */
    int linesize[3];
    uint32_t width, height;  /* as decoded: the stream's coded size, coded orientation */
    int layout;              /* SL__FRAME_* */
    int colorspace;          /* AVColorSpace of the frame (its YUV -> RGB matrix) */
    int full_range;          /* JPEG range (else MPEG, 16..235) */
} sl__video_frame;

typedef struct sl__video_sink {
    void *ctx;
    /* Write fr to clip positions pos[0..n) (n >= 1; output frames of the
     * clip). fr's memory is valid during the call only: whatever reads it
     * must have finished when this returns. 0, or SL_E* with a reason. */
    int (*frame)(void *ctx, const sl__video_frame *fr, const uint32_t *pos, uint32_t n, char *reason, size_t rlen);
} sl__video_sink;

/* An NVDEC session: FFmpeg's CUDA device on the caller's CUDA context and
 * stream, and the decoder it keeps between clips (video_hw.c). */
typedef struct sl__video_hw sl__video_hw;

/* The same passes as sl__video_decode; each needed frame goes to sink.
 * hw NULL: the software decoder, frame buffers from q. hw: the session's
 * NVDEC decoder (q still takes what our side allocates). A stream the
 * session cannot decode fails with SL_EUNSUPPORTED and a reason starting
 * "for the CPU: " before any frame reached the sink. Every FFmpeg object
 * of the clip is freed on return (the session may keep its decoder). */
int sl__video_decode_into(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan,
                          sl__quota *q, const _Atomic int *cancel, sl__video_hw *hw, const sl__video_sink *sink,
                          char *reason, size_t rlen);

/* Whether this FFmpeg can decode through NVDEC here, and if not why
 * ("FFmpeg was built without NVDEC (...)", "NVDEC: libnvcuvid.so.1 not
 * found"): the CUDA device type built in, the driver's video library
 * loadable. The CUDA driver itself is the GPU layer's to check. */
int sl__video_hw_available(char *why, size_t len);

/* Whether NVDEC through this FFmpeg takes this stream (from its probe):
 * a decoder with a CUDA hardware configuration, 8-bit 4:2:0, unrotated.
 * 1, or 0 with why ("for the CPU: ..."). */
int sl__video_hw_takes(const sl__video_info *info, char *why, size_t len);

/* Device bytes NVDEC's own surfaces take for this stream at most: the
 * driver allocates them (no allocator hook), sl__video_decode_into refuses
 * a decoder that would need more than the session's cap. */
uint64_t sl__video_hw_device_bound(const sl__video_info *info);

/* Open a session on CUDA context cuda_ctx (a CUcontext, which the caller
 * keeps alive and makes current as it likes) with every NVDEC copy on
 * cuda_stream (a CUstream). device_cap: the device bytes one decoder's
 * surfaces may take (sl__video_hw_device_bound of the largest stream to
 * take; a stream needing more goes to the CPU). keep: keep the decoder
 * between clips whose stream parameters are identical (no new NVDEC
 * decoder for each clip). 0, or SL_EUNSUPPORTED / SL_ENOMEM with why. */
int sl__video_hw_open(void *cuda_ctx, void *cuda_stream, uint64_t device_cap, int keep, sl__video_hw **out,
                      char *why, size_t len);
/* Free the session and its kept decoder (NVDEC's surfaces go back to the
 * driver). NULL is ignored. */
void sl__video_hw_close(sl__video_hw *h);
/* Free the kept decoder now (the session stays usable). */
void sl__video_hw_drop(sl__video_hw *h);
/* Whether the session keeps a decoder now, and the host bytes a decoder
 * kept for this stream holds (FFmpeg's codec context and tables: the
 * estimate sl__video_plan_mem reserves for them). */
int sl__video_hw_keeping(const sl__video_hw *h);
uint64_t sl__video_hw_keep_bytes(const sl__video_info *info);

typedef struct sl__video_hw_stats {
    uint64_t clips;          /* decodes through the session */
    uint64_t decoders;       /* NVDEC decoders created (a new codec context, or a new stream size) */
    uint64_t reused;         /* clips that kept the previous clip's decoder */
    uint64_t surfaces;       /* NVDEC surfaces of the current decoder (decode + output) */
    uint64_t surface_bytes;  /* the device bytes they take (bound used against device_cap) */
    uint64_t soft_resets;    /* passes (seeks, clips) started at an IDR without a flush (H.264) */
    uint64_t flushes;        /* passes of such a decoder that needed a flush (no IDR first, or drained) */
} sl__video_hw_stats;
void sl__video_hw_stats_get(const sl__video_hw *h, sl__video_hw_stats *out);

/* Tests: make the quota allocation after the next n of sl__video_decode
 * fail (n < 0: off). Process-wide; tests run each in its own process. */
void sl__video_fail_after(long n);

/* Tests: packets sent so far with their frame to be skipped (a
 * non-reference frame no target shows; see video_decode.c). */
uint64_t sl__video_skips_asked(void);

/* Tests: on, every decoded frame's time counts as guessed (as a stream
 * whose packets carry no or wrong timestamps): skipping stops, and a pass
 * that had skipped runs again without. Process-wide. */
void sl__video_distrust_times(int on);
/* Tests: on, a pass reads on after the last target as before the early
 * end (video_decode.c); and the passes that ended early so far. */
void sl__video_no_early_end(int on);
uint64_t sl__video_early_ends(void);
/* Tests: the software H.264 decoder starts passes as an NVDEC session's
 * does: no flush where the pass's first packet is an IDR picture, the
 * earlier pass's frames dropped by generation (video_impl.h). */
void sl__video_soft_seeks(int on);
/* Passes such decoders started without a flush and with one, since the start. */
void sl__video_soft_counts(uint64_t *resets, uint64_t *flushes);

#endif
