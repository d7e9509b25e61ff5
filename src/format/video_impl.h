/* Private to src/format/video*.c: the demuxer input, the constants of the
 * memory bound, and helpers shared by the probe and the decoder. */
#ifndef SL_VIDEO_IMPL_H
#define SL_VIDEO_IMPL_H

#include "format/video.h"

/* Codec families the memory bound tells apart. */
enum { SL__VC_OTHER = 0, SL__VC_H264, SL__VC_HEVC, SL__VC_VP9, SL__VC_VP8, SL__VC_MJPEG };

/* Demuxers allowed (FFmpeg names; any name of a demuxer matches). */
#define SL__VIDEO_FORMATS "mov,mp4,matroska,webm,avi"
#define SL__VIDEO_IO_BUF (32 << 10)        /* AVIO read buffer */
#define SL__VIDEO_PROBESIZE (1 << 20)      /* bytes the format probe may read */
#define SL__VIDEO_MAX_STREAMS 32           /* more streams: the open fails */
#define SL__VIDEO_COUNT_STREAMS 256        /* the open that tells a stream count apart from a memory bomb */
#define SL__VIDEO_MAX_ALLOC (64u << 20)    /* av_max_alloc: FFmpeg's largest single allocation */

/* The memory bound (video.c, sl__video_plan_mem). The quota part is exact
 * (our allocator enforces it); the FFmpeg part is an estimate from the
 * headers whose margins the tests check by measuring the heap. */
#define SL__VIDEO_FRAME_PAD 4096           /* per frame buffer: alignment, padding */
#define SL__VIDEO_QUOTA_SLACK (64 << 10)
#define SL__VIDEO_CODEC_BASE (2u << 20)    /* codec context, tables, bitstream reader */
#define SL__VIDEO_CODEC_PER_PX 8           /* per-macroblock state, per pixel */
#define SL__VIDEO_SWS_BASE (512u << 10)
#define SL__VIDEO_DEMUX_BASE (512u << 10)
#define SL__VIDEO_PER_INDEX_ENTRY 64       /* index entry + the demuxer's sample tables */
#define SL__VIDEO_PER_STREAM (16u << 10)
/* A stream may end this many frames before its header's count (rounded
 * durations) before the clip counts as truncated. */
#define SL__VIDEO_END_SLACK 2

/* A byte range of a file, read with pread (or of a remote object, read
 * with ranged GETs: obj). */
typedef struct sl__vrange {
    int fd;
    uint64_t offset, size, pos;
    const sl__obj *obj;
} sl__vrange;

struct AVIOContext;
struct AVFormatContext;
typedef struct sl__vinput {
    sl__vrange range;
    struct AVIOContext *io;
    struct AVFormatContext *fmt;
} sl__vinput;

/* Open f's byte range as a container (no stream info read beyond the
 * header). 0, or SL_EFORMAT / SL_ECORRUPT / SL_ENOMEM with a reason; on
 * failure nothing is left open. */
int sl__video_open(const sl__sample_file *f, sl__vinput *in, char *reason, size_t rlen);
/* Close what sl__video_open opened (takes a half-open or zeroed input). */
void sl__video_close(sl__vinput *in);

/* Fill plan->out_bytes, quota and mem from info and the planned sizes. */
/* FFmpeg's own allocations for this clip (estimate, see video.c). */
uint64_t sl__video_lib_mem(const sl__video_info *info, const sl__clip_plan *p);
/* Frame buffers the decoder may hold at once. */
uint32_t sl__video_pool_frames(const sl__video_info *info);

/* A decoder that starts a pass (a seek, the next clip) without
 * avcodec_flush_buffers. H.264's flush drops its context
 * (context_initialized), so its next slice calls get_format, and FFmpeg's
 * get_format uninits the hwaccel first: every flush made a new NVDEC
 * decoder (tens of ms in the driver). Instead, a pass whose first packet
 * is an IDR picture is sent to the decoder as it is (the IDR drops every
 * reference, as in a stream with periodic IDRs), each packet tagged with
 * the pass's generation; frames of an older one (the previous pass's
 * reordered pictures, bumped out by the IDR) are dropped unseen. A pass
 * that starts elsewhere, or after the decoder was drained (a NULL packet:
 * only a flush makes it take packets again), is flushed as before. */
typedef struct sl__video_soft {
    int64_t gen;       /* of the packets sent this pass */
    int used;          /* packets were sent since the last flush */
    int drained;       /* a NULL packet was sent since the last flush */
    uint64_t resets;   /* passes started without a flush */
    uint64_t flushes;  /* passes that needed one */
} sl__video_soft;

/* An NVDEC session's codec context for stream st, lent for one clip
 * (video_hw.c): the one kept from the previous clip when the stream's
 * parameters are identical, else a new one whose get_format takes
 * NVDEC's CUDA frames (its surfaces bounded by the session's cap). *soft:
 * the context's pass state when it starts passes without a flush (H.264),
 * else NULL (flushed here when kept). 0, or SL_EUNSUPPORTED / SL_ENOMEM
 * with a reason. */
struct AVStream;
struct AVCodecContext;
int sl__video_hw_lend(sl__video_hw *h, const struct AVStream *st, struct AVCodecContext **cc,
                      sl__video_soft **soft, char *reason, size_t rlen);
/* After the clip: *cc kept for the next clip (ok, and the session keeps
 * decoders) or freed; *cc is NULL afterwards. */
void sl__video_hw_give_back(sl__video_hw *h, struct AVCodecContext **cc, int ok);
/* Why the session's get_format refused the current clip's stream (NULL:
 * it did not). */
const char *sl__video_hw_refusal(const sl__video_hw *h);

#endif
