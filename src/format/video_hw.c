/*
 * Video: NVDEC sessions through FFmpeg's hardware decoding (see video.h).
 *
 * Why FFmpeg's hwaccel and not libnvcuvid directly: the hwaccel is a
 * second back end of the same libavcodec decoder, so the container, the
 * packets, the seek planning, the frames no target shows skipped
 * (skip_frame) and display-time matching are video_decode.c's, unchanged;
 * only the picture decode runs on NVDEC. libnvcuvid alone would need our
 * own bitstream parser per codec (or NVIDIA's parser, which takes Annex B
 * streams and decides on its own which frames to decode). FFmpeg loads
 * libcuda.so.1 and libnvcuvid.so.1 itself at run time (ffnvcodec), so
 * nothing about CUDA is needed to build this file.
 *
 * A session is FFmpeg's CUDA device made on the caller's context and
 * stream (the GPU layer's: the device's primary context, the one PyTorch
 * uses), and a codec context kept between clips. Frames: FFmpeg 5.1's
 * nvdec maps NVDEC's output surfaces into the AVFrame (no copy; the
 * frames context's own pool is never read, so ours hands out empty
 * buffers, as FFmpeg's does for itself). The surfaces are allocated by
 * the driver when the decoder is created (cuvidCreateDecoder: no
 * allocator hook): their count is the frames context's initial_pool_size,
 * set here in get_format, and their bytes are checked against the
 * session's cap before the decoder exists (a stream that needs more goes
 * to the CPU).
 *
 * Keeping the decoder: a new codec context for each clip would create and
 * destroy an NVDEC decoder (and its surfaces) per clip, where the driver
 * allocates and frees device memory. The session keeps the codec context
 * of a clip that decoded, and lends it again (flushed, as a seek does)
 * when the next clip's stream has the same codec, size, format, time
 * base and byte-identical extradata (SPS/PPS): the decoder state after a
 * flush is then the one a new context reaches from that extradata, and
 * the next clip starts at a keyframe like any seek. Anything else: a new
 * context.
 *
 * Ownership: the session owns its device reference and its kept context;
 * a lent context belongs to the clip until sl__video_hw_give_back.
 * A session is used by one thread at a time.
 */
#define _GNU_SOURCE
#include "format/video.h"

#include <string.h>

#include "base/util.h"
#include "format/video_impl.h"

/* A codec context kept between clips: its share of sl__video_lib_mem. */
uint64_t sl__video_hw_keep_bytes(const sl__video_info *info) {
    return SL__VIDEO_CODEC_BASE + (uint64_t)info->coded_width * info->coded_height * SL__VIDEO_CODEC_PER_PX;
}

#ifndef SL_HAVE_FFMPEG

int sl__video_hw_available(char *why, size_t len) {
    sl__msg(why, len, "video support is not built in (sluice was built without FFmpeg's libraries)");
    return 0;
}

int sl__video_hw_takes(const sl__video_info *info, char *why, size_t len) {
    sl__msg(why, len, "for the CPU: video support is not built in");
    return 0;
}

uint64_t sl__video_hw_device_bound(const sl__video_info *info) { return 0; }

int sl__video_hw_open(void *cuda_ctx, void *cuda_stream, uint64_t device_cap, int keep, sl__video_hw **out,
                      char *why, size_t len) {
    *out = NULL;
    sl__msg(why, len, "video support is not built in (sluice was built without FFmpeg's libraries)");
    return SL_EUNSUPPORTED;
}

void sl__video_hw_close(sl__video_hw *h) { (void)h; }
void sl__video_hw_drop(sl__video_hw *h) { (void)h; }
int sl__video_hw_keeping(const sl__video_hw *h) { return 0; }
void sl__video_hw_stats_get(const sl__video_hw *h, sl__video_hw_stats *out) { memset(out, 0, sizeof *out); }

#else /* SL_HAVE_FFMPEG */

#include <dlfcn.h>
#include <pthread.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>

/* hwcontext_cuda.h includes <cuda.h> unless CUDA_VERSION is defined: the
 * two handle types it names are declared here as the driver declares
 * them, so that no CUDA header is needed to build. */
#ifndef CUDA_VERSION
#define CUDA_VERSION 11000
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
#endif
#include <libavutil/hwcontext_cuda.h>

#define EXTRA_SURFACES 3              /* beyond FFmpeg's count: frames we hold (as FFmpeg's own frames context) */
#define DECODER_FIXED ((uint64_t)8 << 20) /* per decoder beside its surfaces: bitstream, tables (driver) */

struct sl__video_hw {
    AVBufferRef *device;     /* AVHWDeviceContext (CUDA) on the caller's context and stream */
    uint64_t device_cap;     /* bytes one decoder's surfaces may take */
    int keep;                /* keep the decoder between identical streams */
    AVCodecContext *kept;    /* the last clip's context (flushed when lent again); NULL: none */
    AVCodecParameters *par;  /* ... the stream parameters it was opened with */
    AVRational tb;
    int lent;                /* a clip holds a context */
    int offered;             /* get_format saw the CUDA format during the current open */
    char refusal[160];       /* why get_format refused, for the clip's reason */
    sl__video_soft soft;     /* the context's passes without a flush (H.264; video_impl.h) */
    sl__video_hw_stats st;
};

/* ---- what this FFmpeg and this driver can do -------------------------------- */

static int has_cuda_config(const AVCodec *dec) {
    for (int i = 0;; i++) {
        const AVCodecHWConfig *c = avcodec_get_hw_config(dec, i);
        if (!c) return 0;
        if (c->device_type == AV_HWDEVICE_TYPE_CUDA && (c->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX) &&
            c->pix_fmt == AV_PIX_FMT_CUDA)
            return 1;
    }
}

static pthread_once_t avail_once = PTHREAD_ONCE_INIT;
static char avail_why[200];
static int avail_ok;

static void check_available(void) {
    enum AVHWDeviceType t = AV_HWDEVICE_TYPE_NONE;
    int cuda = 0;
    while ((t = av_hwdevice_iterate_types(t)) != AV_HWDEVICE_TYPE_NONE) cuda |= t == AV_HWDEVICE_TYPE_CUDA;
    const AVCodec *h264 = avcodec_find_decoder(AV_CODEC_ID_H264), *hevc = avcodec_find_decoder(AV_CODEC_ID_HEVC);
    if (!cuda || !((h264 && has_cuda_config(h264)) || (hevc && has_cuda_config(hevc)))) {
        unsigned v = avcodec_version();
        snprintf(avail_why, sizeof avail_why,
                 "FFmpeg (libavcodec %u.%u.%u) was built without NVDEC (configure --enable-ffnvcodec "
                 "--enable-cuda --enable-nvdec)", v >> 16, (v >> 8) & 0xff, v & 0xff);
        return;
    }
    /* the driver's video decode library: containers started without the
     * 'video' driver capability lack it; FFmpeg would only log its absence */
    void *dl = dlopen("libnvcuvid.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!dl) {
        snprintf(avail_why, sizeof avail_why,
                 "NVDEC: libnvcuvid.so.1 not found (the NVIDIA driver's video decode library; a container needs "
                 "the driver's 'video' capability)");
        return;
    }
    dlclose(dl);
    avail_ok = 1;
}

int sl__video_hw_available(char *why, size_t len) {
    pthread_once(&avail_once, check_available);
    if (!avail_ok) sl__msg(why, len, "%s", avail_why);
    return avail_ok;
}

int sl__video_hw_takes(const sl__video_info *info, char *why, size_t len) {
    const AVCodec *dec = avcodec_find_decoder((enum AVCodecID)info->codec_id);
    const char *fmt = info->pix_fmt >= 0 ? av_get_pix_fmt_name((enum AVPixelFormat)info->pix_fmt) : NULL;
    if (info->rotation) {
        sl__msg(why, len, "for the CPU: rotated stream (%d degrees)", info->rotation);
        return 0;
    }
    if (!dec || !has_cuda_config(dec)) {
        sl__msg(why, len, "for the CPU: no NVDEC decoding of %s in this FFmpeg", info->codec);
        return 0;
    }
    if (info->pix_fmt >= 0 && info->pix_fmt != AV_PIX_FMT_YUV420P && info->pix_fmt != AV_PIX_FMT_YUVJ420P) {
        sl__msg(why, len, "for the CPU: %s frames (the GPU path takes 8-bit 4:2:0)", fmt ? fmt : "unknown");
        return 0;
    }
    /* the header's profile, where the container leaves the pixel format
     * unknown: profiles beyond 8-bit 4:2:0 (get_format checks the rest) */
    int p = info->profile;
    if ((info->codec_id_kind == SL__VC_H264 && (p == 110 || p == 122 || p == 244 || p == 44)) ||
        (info->codec_id_kind == SL__VC_HEVC && p >= 0 && p != 1 && p != 3) ||
        (info->codec_id_kind == SL__VC_VP9 && p > 0)) {
        sl__msg(why, len, "for the CPU: %s profile %d (the GPU path takes 8-bit 4:2:0)", info->codec, p);
        return 0;
    }
    return 1;
}

/* NVDEC surfaces of one decoder: FFmpeg's count (its references and
 * reordered frames, + 2) and ours, each a decode and an output surface of
 * the coded size as NV12, aligned as the driver allocates them. */
static uint64_t surface_bytes(uint32_t w, uint32_t h, uint32_t surfaces) {
    uint64_t aw = ((uint64_t)w + 127) & ~(uint64_t)127, ah = ((uint64_t)h + 63) & ~(uint64_t)63;
    return (uint64_t)surfaces * 2 * (aw * ah * 3 / 2) + DECODER_FIXED;
}

uint64_t sl__video_hw_device_bound(const sl__video_info *info) {
    /* FFmpeg asks for references + reordered frames + 2: H.264 both up
     * to the level's DPB (sl__video_pool_frames counts refs + 4) */
    uint32_t refs = sl__video_pool_frames(info) - 4, dpb;
    switch (info->codec_id_kind) {
    case SL__VC_H264: dpb = 2 * refs; break;
    case SL__VC_HEVC: dpb = 17; break;
    default: dpb = refs; break;
    }
    return surface_bytes(info->coded_width, info->coded_height, dpb + 2 + EXTRA_SURFACES);
}

/* ---- the session ------------------------------------------------------------- */

int sl__video_hw_open(void *cuda_ctx, void *cuda_stream, uint64_t device_cap, int keep, sl__video_hw **out,
                      char *why, size_t len) {
    *out = NULL;
    if (!sl__video_hw_available(why, len)) return SL_EUNSUPPORTED;
    sl__video_hw *h = av_mallocz(sizeof *h);
    if (!h) {
        sl__msg(why, len, "cannot allocate the NVDEC session");
        return SL_ENOMEM;
    }
    h->device_cap = device_cap;
    h->keep = keep;
    h->device = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
    int err = h->device ? 0 : AVERROR(ENOMEM);
    if (!err) {
        AVCUDADeviceContext *cu = ((AVHWDeviceContext *)h->device->data)->hwctx;
        cu->cuda_ctx = cuda_ctx; /* ours: FFmpeg neither retains nor releases it */
        cu->stream = cuda_stream;
        err = av_hwdevice_ctx_init(h->device); /* loads libcuda's entry points */
    }
    if (err) {
        char e[64];
        av_strerror(err, e, sizeof e);
        sl__msg(why, len, "FFmpeg's CUDA device: %s", e);
        sl__video_hw_close(h);
        return err == AVERROR(ENOMEM) ? SL_ENOMEM : SL_EUNSUPPORTED;
    }
    *out = h;
    return 0;
}

void sl__video_hw_drop(sl__video_hw *h) {
    if (!h) return;
    avcodec_free_context(&h->kept); /* its NVDEC decoder and surfaces go */
    avcodec_parameters_free(&h->par);
}

void sl__video_hw_close(sl__video_hw *h) {
    if (!h) return;
    sl__video_hw_drop(h);
    av_buffer_unref(&h->device);
    av_free(h);
}

void sl__video_hw_stats_get(const sl__video_hw *h, sl__video_hw_stats *out) {
    *out = h->st;
    out->soft_resets = h->soft.resets;
    out->flushes = h->soft.flushes;
}

int sl__video_hw_keeping(const sl__video_hw *h) { return h->kept != NULL; }

/* Frames carry NVDEC's mapped surfaces, not the pool's memory: empty
 * buffers (as FFmpeg's nvdec makes for its own frames context). */
static AVBufferRef *empty_buffer(size_t size) { return av_buffer_create(NULL, 0, NULL, NULL, 0); }
static void frames_free(AVHWFramesContext *fc) { av_buffer_pool_uninit(&fc->pool); }

/* get_format: NVDEC's CUDA frames, our frames context, its surfaces
 * within the cap; anything else refuses (no software fallback here). */
static enum AVPixelFormat hw_format(AVCodecContext *cc, const enum AVPixelFormat *fmts) {
    sl__video_hw *h = cc->opaque;
    const enum AVPixelFormat *p = fmts;
    while (*p != AV_PIX_FMT_NONE && *p != AV_PIX_FMT_CUDA) p++;
    if (*p == AV_PIX_FMT_NONE) {
        snprintf(h->refusal, sizeof h->refusal, h->offered
                 ? "NVDEC refused the stream (capability check or decoder creation: profile, level or size)"
                 : "no NVDEC decoding for this stream's profile or pixel format");
        return AV_PIX_FMT_NONE;
    }
    h->offered = 1;
    AVBufferRef *fr = NULL;
    int err = avcodec_get_hw_frames_parameters(cc, h->device, AV_PIX_FMT_CUDA, &fr);
    if (err < 0) {
        snprintf(h->refusal, sizeof h->refusal, "NVDEC has no frames for this stream (%s)", av_err2str(err));
        return AV_PIX_FMT_NONE;
    }
    AVHWFramesContext *fc = (AVHWFramesContext *)fr->data;
    if (fc->sw_format != AV_PIX_FMT_NV12) {
        snprintf(h->refusal, sizeof h->refusal, "NVDEC would decode to %s (the GPU path takes 8-bit 4:2:0)",
                 av_get_pix_fmt_name(fc->sw_format));
        av_buffer_unref(&fr);
        return AV_PIX_FMT_NONE;
    }
    fc->initial_pool_size += EXTRA_SURFACES;
    uint64_t bytes = surface_bytes((uint32_t)fc->width, (uint32_t)fc->height, (uint32_t)fc->initial_pool_size);
    if (bytes > h->device_cap) {
        char b1[16], b2[16];
        snprintf(h->refusal, sizeof h->refusal, "NVDEC's %d surfaces of %dx%d need %s, over the session's %s",
                 fc->initial_pool_size, fc->width, fc->height, sl__fmt_bytes(bytes, b1, sizeof b1),
                 sl__fmt_bytes(h->device_cap, b2, sizeof b2));
        av_buffer_unref(&fr);
        return AV_PIX_FMT_NONE;
    }
    fc->pool = av_buffer_pool_init(0, empty_buffer);
    fc->free = frames_free;
    if (!fc->pool || (err = av_hwframe_ctx_init(fr)) < 0) {
        snprintf(h->refusal, sizeof h->refusal, "NVDEC frames context: %s", fc->pool ? av_err2str(err) : "no memory");
        av_buffer_unref(&fr);
        return AV_PIX_FMT_NONE;
    }
    av_buffer_unref(&cc->hw_frames_ctx);
    cc->hw_frames_ctx = fr;
    h->st.decoders++;
    h->st.surfaces = 2 * (uint64_t)fc->initial_pool_size;
    h->st.surface_bytes = bytes;
    return AV_PIX_FMT_CUDA;
}

/* Same stream as the kept context was opened for? */
static int same_stream(const sl__video_hw *h, const AVStream *st) {
    const AVCodecParameters *a = h->par, *b = st->codecpar;
    return h->kept && a && a->codec_id == b->codec_id && a->width == b->width && a->height == b->height &&
           a->format == b->format && a->profile == b->profile && a->extradata_size == b->extradata_size &&
           (a->extradata_size == 0 || memcmp(a->extradata, b->extradata, (size_t)a->extradata_size) == 0) &&
           h->tb.num == st->time_base.num && h->tb.den == st->time_base.den;
}

static int refuse(sl__video_hw *h, int code, const char *what, int err, char *reason, size_t rlen) {
    char e[64] = "";
    if (err) av_strerror(err, e, sizeof e);
    if (h->refusal[0]) sl__msg(reason, rlen, "for the CPU: %s", h->refusal);
    else sl__msg(reason, rlen, "for the CPU: %s%s%s", what, err ? ": " : "", e);
    return code;
}

const char *sl__video_hw_refusal(const sl__video_hw *h) { return h->refusal[0] ? h->refusal : NULL; }

int sl__video_hw_lend(sl__video_hw *h, const AVStream *st, AVCodecContext **out, sl__video_soft **soft,
                      char *reason, size_t rlen) {
    *out = NULL;
    *soft = NULL;
    if (h->lent) return refuse(h, SL_ESTATE, "the NVDEC session is in use", 0, reason, rlen);
    h->st.clips++;
    h->refusal[0] = 0;
    int h264 = st->codecpar->codec_id == AV_CODEC_ID_H264;
    if (same_stream(h, st)) {
        /* as a seek: no reference, no frame in flight. H.264's flush
         * would make a new NVDEC decoder: its first pass resets instead */
        if (h264) *soft = &h->soft;
        else avcodec_flush_buffers(h->kept);
        *out = h->kept;
        h->kept = NULL;
        h->lent = 1;
        h->st.reused++;
        return 0;
    }
    sl__video_hw_drop(h);
    const AVCodec *dec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!dec || !has_cuda_config(dec)) return refuse(h, SL_EUNSUPPORTED, "no NVDEC decoder for this codec", 0, reason, rlen);
    h->offered = 0;
    AVCodecContext *cc = avcodec_alloc_context3(dec);
    int err = cc ? avcodec_parameters_to_context(cc, st->codecpar) : AVERROR(ENOMEM);
    if (!err) {
        cc->thread_count = 1;
        cc->thread_type = 0;
        cc->opaque = h;
        cc->get_format = hw_format;
        cc->pkt_timebase = st->time_base;
        cc->hw_device_ctx = av_buffer_ref(h->device);
#ifdef AV_HWACCEL_FLAG_UNSAFE_OUTPUT
        cc->hwaccel_flags |= AV_HWACCEL_FLAG_UNSAFE_OUTPUT; /* map NVDEC's surfaces, as 5.1 does: no copy */
#endif
        err = cc->hw_device_ctx ? avcodec_open2(cc, dec, NULL) : AVERROR(ENOMEM);
    }
    if (err) {
        avcodec_free_context(&cc);
        return refuse(h, err == AVERROR(ENOMEM) ? SL_ENOMEM : SL_EUNSUPPORTED, "cannot open the NVDEC decoder", err,
                      reason, rlen);
    }
    h->par = avcodec_parameters_alloc();
    if (!h->par || avcodec_parameters_copy(h->par, st->codecpar) < 0) avcodec_parameters_free(&h->par);
    h->tb = st->time_base;
    h->soft.gen = 0, h->soft.used = 0, h->soft.drained = 0; /* a new decoder; the counts go on */
    if (h264) *soft = &h->soft;
    *out = cc;
    h->lent = 1;
    return 0;
}

void sl__video_hw_give_back(sl__video_hw *h, AVCodecContext **cc, int ok) {
    h->lent = 0;
    if (!*cc) return;
    if (ok && h->keep && h->par && !h->kept) {
        h->kept = *cc; /* flushed when lent again */
        *cc = NULL;
        return;
    }
    avcodec_free_context(cc);
    avcodec_parameters_free(&h->par);
}

#endif /* SL_HAVE_FFMPEG */
