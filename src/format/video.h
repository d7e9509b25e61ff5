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

#endif
