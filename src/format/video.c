/*
 * Video: reading a sample's byte range through FFmpeg's demuxers, the
 * header probe and a clip plan's memory bound. Decoding is in
 * video_decode.c; the plan itself (which frames, which crop) is an op
 * (src/ops/clip.c). See video.h for the contract and the memory argument.
 *
 * The bound needs no FFmpeg and is built either way.
 */
#define _GNU_SOURCE
#include "format/video.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "format/video_impl.h"

/* ---- memory bound -------------------------------------------------------- */

/* Bytes per pixel of the largest pixel format the stream's codec and
 * profile can decode to (x2 for more than 8 bits), so a frame's size is
 * known before the decoder has seen a frame. */
static double max_bytes_per_pixel(const sl__video_info *info) {
    switch (info->codec_id_kind) {
    case SL__VC_H264:
        if (info->profile == 66 || info->profile == 77 || info->profile == 88 || info->profile == 100 ||
            info->profile == 578 /* constrained baseline */)
            return 1.5;
        if (info->profile == 110) return 3; /* High 10 */
        if (info->profile == 122) return 4; /* High 4:2:2 */
        return 6;                            /* High 4:4:4, unknown */
    case SL__VC_HEVC:
        if (info->profile == 1 || info->profile == 3) return 1.5; /* Main, Main Still */
        if (info->profile == 2) return 3;                         /* Main 10 */
        return 6;
    case SL__VC_VP9:
        if (info->profile == 0) return 1.5;
        if (info->profile == 1 || info->profile == 2) return 3;
        return 6;
    case SL__VC_VP8: return 1.5;
    default: return 3; /* 8-bit up to 4:4:4 (mjpeg, mpeg2 4:2:2, mpeg4) */
    }
}

/* H.264 MaxDpbMbs by level_idc (Table A-1). 0: unknown level. */
static uint32_t h264_max_dpb_mbs(int level) {
    static const struct { int level; uint32_t mbs; } t[] = {
        {9, 396},     {10, 396},    {11, 900},    {12, 2376},   {13, 2376},   {20, 2376},
        {21, 4752},   {22, 8100},   {30, 8100},   {31, 18000},  {32, 20480},  {40, 32768},
        {41, 32768},  {42, 34816},  {50, 110400}, {51, 184320}, {52, 184320}, {60, 696320},
        {61, 696320}, {62, 696320}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (t[i].level == level) return t[i].mbs;
    return 0;
}

/* Frames the decoder may hold at once: its references (H.264: the
 * level's DPB size for this frame size), frames waiting for output
 * (reordering), the one being decoded and the one held for display-time
 * matching. */
uint32_t sl__video_pool_frames(const sl__video_info *info) {
    uint32_t refs;
    switch (info->codec_id_kind) {
    case SL__VC_H264: {
        uint64_t mbs = (uint64_t)((info->coded_width + 15) / 16) * ((info->coded_height + 15) / 16);
        uint32_t max_mbs = h264_max_dpb_mbs(info->level);
        refs = max_mbs && mbs ? (uint32_t)SL_MIN(max_mbs / mbs, 16) : 16;
        if (refs == 0) refs = 1;
        break;
    }
    case SL__VC_HEVC: refs = 16; break;
    case SL__VC_VP9: refs = 8; break;
    case SL__VC_VP8: refs = 3; break;
    case SL__VC_MJPEG: refs = 0; break;
    default: refs = 2; break; /* MPEG-1/2/4 part 2, H.263: two anchors */
    }
    /* references and reordered frames share the DPB in the standard; FFmpeg
     * keeps a few more alive (current, output delay, our held frame) */
    return refs + 4;
}

int sl__video_plan_mem(const sl__video_info *info, sl__clip_plan *p, char *reason, size_t rlen) {
    uint64_t aw = ((uint64_t)info->coded_width + 64 + 63) & ~(uint64_t)63;
    uint64_t ah = ((uint64_t)info->coded_height + 32 + 31) & ~(uint64_t)31;
    double fb = (double)aw * ah * max_bytes_per_pixel(info) + SL__VIDEO_FRAME_PAD;
    uint64_t frame = (uint64_t)fb, pool, tmp, out, quota, lib;
    if (sl__mul(frame, sl__video_pool_frames(info), &pool) ||
        sl__mul((uint64_t)3 * p->scaled_w, p->scaled_h, &tmp) ||
        sl__mul((uint64_t)3 * p->out_w * p->out_h, p->frames, &out)) {
        sl__msg(reason, rlen, "clip memory size overflows");
        return SL_EOVERFLOW;
    }
    quota = pool + tmp + SL__VIDEO_QUOTA_SLACK;
    lib = sl__video_lib_mem(info, p);
    p->out_bytes = out;
    p->quota = quota;
    p->mem = quota + lib;
    return 0;
}

/* FFmpeg's own allocations, which no hook reaches: the demuxer (its
 * context, AVIO buffer and index, measured at probe), one packet (at most
 * the file), the codec's per-macroblock tables, swscale's filters. */
uint64_t sl__video_lib_mem(const sl__video_info *info, const sl__clip_plan *p) {
    uint64_t px = (uint64_t)info->coded_width * info->coded_height;
    uint64_t packet = SL_MIN(info->file_bytes, px * 4 + 65536);
    uint64_t codec = SL__VIDEO_CODEC_BASE + px * SL__VIDEO_CODEC_PER_PX;
    uint64_t sws = SL__VIDEO_SWS_BASE + ((uint64_t)p->box[2] + p->box[3] + p->scaled_w + p->scaled_h) * 256;
    return info->demux_mem + packet + codec + sws;
}

int sl__video_count(int64_t stated, double fps, double *duration, int64_t *frames, char *reason, size_t rlen) {
    double d = *duration;
    int64_t n = 0;
    /* the range first: d * fps is then at most 1e10, which an int64 holds */
    if (d >= 0 && d <= SL_VIDEO_MAX_SECONDS && fps > 0 && fps <= 1000)
        n = stated > 0 ? stated : (int64_t)floor(d * fps + 0.5);
    if (n <= 0) {
        sl__msg(reason, rlen, "video stream header gives no usable frame count or duration (%lld frames, %.6g s at %.6g fps)",
                (long long)stated, d, fps);
        return SL_ECORRUPT;
    }
    *frames = n;
    if (d == 0) *duration = (double)n / fps;
    return 0;
}

/* ---- without FFmpeg ------------------------------------------------------- */
#ifndef SL_HAVE_FFMPEG

int sl__video_available(void) { return 0; }

int sl__video_probe(const sl__sample_file *f, const sl__video_limits *lim, sl__video_info *info, char *reason,
                    size_t rlen) {
    memset(info, 0, sizeof *info);
    sl__msg(reason, rlen, "video support is not built in (sluice was built without FFmpeg's libraries)");
    return SL_EUNSUPPORTED;
}

#else /* SL_HAVE_FFMPEG */

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <pthread.h>

int sl__video_available(void) { return 1; }

/* ---- reading a byte range through pread ------------------------------- */

static int range_read(void *opaque, uint8_t *buf, int n) {
    sl__vrange *r = opaque;
    if (r->pos >= r->size || n <= 0) return AVERROR_EOF;
    size_t want = (size_t)SL_MIN((uint64_t)n, r->size - r->pos);
    ssize_t got;
    if (r->obj) got = sl__obj_read(r->obj, r->offset + r->pos, buf, want, NULL, 0) ? (errno = EIO, -1) : (ssize_t)want;
    else do got = pread(r->fd, buf, want, (off_t)(r->offset + r->pos));
    while (got < 0 && errno == EINTR);
    if (got < 0) return AVERROR(errno);
    if (got == 0) return AVERROR_EOF; /* the file shrank under us */
    r->pos += (uint64_t)got;
    return (int)got;
}

static int64_t range_seek(void *opaque, int64_t off, int whence) {
    sl__vrange *r = opaque;
    if (whence & AVSEEK_SIZE) return (int64_t)r->size;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = (int64_t)r->pos; break;
    case SEEK_END: base = (int64_t)r->size; break;
    default: return AVERROR(EINVAL);
    }
    int64_t np;
    if (__builtin_add_overflow(base, off, &np) || np < 0 || (uint64_t)np > r->size) return AVERROR(EINVAL);
    r->pos = (uint64_t)np;
    return np;
}

void sl__video_close(sl__vinput *in) {
    if (in->fmt) avformat_close_input(&in->fmt); /* custom IO: leaves in->io to us */
    if (in->io) {
        av_freep(&in->io->buffer);
        avio_context_free(&in->io);
    }
}

/* FFmpeg's cap on one allocation, set once for the process. Its demuxers
 * size tables from counts in the header before reading them (a 3 KiB mp4
 * asked for 1.1 GB in one malloc under the fuzzer); no per-context hook
 * exists, so the cap is process-wide: it applies to every user of this
 * libavutil in the process (PyAV, torchvision and OpenCV wheels bring
 * their own copies and are not affected). Legitimate streams within the
 * pixel limits stay far below it: frame buffers are ours, not FFmpeg's. */
static pthread_once_t max_alloc_once = PTHREAD_ONCE_INIT;
static void set_max_alloc(void) { av_max_alloc(SL__VIDEO_MAX_ALLOC); }

/* One try at opening the container with at most max_streams streams: 0,
 * or FFmpeg's error (negative; in is closed), or 1 (no memory for the
 * reader). */
static int open_with(const sl__sample_file *f, sl__vinput *in, int max_streams) {
    memset(in, 0, sizeof *in);
    in->range = (sl__vrange){f->fd, f->offset, f->size, 0, f->obj};
    uint8_t *buf = av_malloc(SL__VIDEO_IO_BUF);
    if (buf) in->io = avio_alloc_context(buf, SL__VIDEO_IO_BUF, 0, &in->range, range_read, NULL, range_seek);
    if (buf && in->io) in->fmt = avformat_alloc_context();
    if (!buf || !in->io || !in->fmt) {
        if (!in->io) av_free(buf);
        sl__video_close(in);
        return 1;
    }
    in->fmt->pb = in->io;
    in->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    AVDictionary *opt = NULL;
    av_dict_set(&opt, "format_whitelist", SL__VIDEO_FORMATS, 0);
    av_dict_set_int(&opt, "probesize", SL__VIDEO_PROBESIZE, 0);
    av_dict_set_int(&opt, "max_streams", max_streams, 0);
    int err = avformat_open_input(&in->fmt, NULL, NULL, &opt); /* frees fmt on failure */
    av_dict_free(&opt);
    if (err < 0) sl__video_close(in);
    return err;
}

/* Open the container on the sample's byte range: demuxers limited to the
 * ones video datasets use, probing and stream counts bounded. */
int sl__video_open(const sl__sample_file *f, sl__vinput *in, char *reason, size_t rlen) {
    pthread_once(&max_alloc_once, set_max_alloc);
    int err = open_with(f, in, SL__VIDEO_MAX_STREAMS);
    if (err == 1) {
        sl__msg(reason, rlen, "cannot allocate the demuxer or its reader");
        return SL_ENOMEM;
    }
    if (err == AVERROR(ENOMEM)) {
        /* A header asking past the cap, more streams than allowed (FFmpeg
         * says which only in its log), or the system refused. Told apart
         * by counting: one more open that may make SL__VIDEO_COUNT_STREAMS
         * streams, closed at once. */
        int again = open_with(f, in, SL__VIDEO_COUNT_STREAMS);
        unsigned streams = again == 0 ? in->fmt->nb_streams : 0;
        if (again == 0) sl__video_close(in);
        if (streams > SL__VIDEO_MAX_STREAMS) {
            sl__msg(reason, rlen, "video has %u streams, over the limit of %d", streams, SL__VIDEO_MAX_STREAMS);
            return SL_ELIMIT;
        }
        if (again == AVERROR(ENOMEM))
            sl__msg(reason, rlen, "video header asks for more memory than allowed (%u MiB in one allocation), or for "
                    "more than %d streams (the limit is %d)", SL__VIDEO_MAX_ALLOC >> 20, SL__VIDEO_COUNT_STREAMS,
                    SL__VIDEO_MAX_STREAMS);
        else
            sl__msg(reason, rlen, "video header asks for more memory than allowed (%u MiB in one allocation)",
                    SL__VIDEO_MAX_ALLOC >> 20);
        return SL_ECORRUPT;
    }
    if (err < 0) {
        char e[64];
        av_strerror(err, e, sizeof e);
        sl__msg(reason, rlen, "not a readable video container (mp4/mov, mkv/webm, avi): %s", e);
        return err == AVERROR_INVALIDDATA ? SL_EFORMAT : SL_ECORRUPT;
    }
    return 0;
}

/* ---- the probe ------------------------------------------------------------ */

static int codec_kind(enum AVCodecID id) {
    switch (id) {
    case AV_CODEC_ID_H264: return SL__VC_H264;
    case AV_CODEC_ID_HEVC: return SL__VC_HEVC;
    case AV_CODEC_ID_VP9: return SL__VC_VP9;
    case AV_CODEC_ID_VP8: return SL__VC_VP8;
    case AV_CODEC_ID_MJPEG: return SL__VC_MJPEG;
    default: return SL__VC_OTHER;
    }
}

/* Clockwise degrees the frame turns for display, as ffmpeg's autorotate
 * reads the display matrix, to the nearest quarter turn. */
static int stream_rotation(const AVStream *st) {
    size_t n = 0;
    const uint8_t *m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &n);
    if (!m || n < 9 * sizeof(int32_t)) return 0;
    double theta = -av_display_rotation_get((const int32_t *)m);
    if (isnan(theta)) return 0;
    long q = lround(theta / 90.0) % 4;
    return (int)((q + 4) % 4) * 90;
}

/* Is name (or FFmpeg's decoder name) in the comma-separated list? */
static int codec_allowed(const char *list, const char *name, const char *decoder) {
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if ((strlen(name) == n && !strncmp(p, name, n)) || (strlen(decoder) == n && !strncmp(p, decoder, n)))
            return 1;
        p += n + (e ? 1 : 0);
    }
    return 0;
}

/* The demuxer's memory as the header left it: its index entries (what a
 * long or hostile moov makes it build) plus contexts and buffers. */
static uint64_t demux_mem(AVFormatContext *fmt) {
    uint64_t entries = 0;
    for (unsigned i = 0; i < fmt->nb_streams; i++)
        entries += (uint64_t)avformat_index_get_entries_count(fmt->streams[i]);
    return SL__VIDEO_DEMUX_BASE + SL__VIDEO_IO_BUF + entries * SL__VIDEO_PER_INDEX_ENTRY +
           (uint64_t)fmt->nb_streams * SL__VIDEO_PER_STREAM;
}

/* Profile and level of an H.264 or HEVC stream from its decoder
 * configuration record (avcC / hvcC) or, for H.264, an Annex B SPS: the
 * demuxers leave them unknown without decoding. */
static void header_profile(const AVCodecParameters *par, int *profile, int *level) {
    const uint8_t *x = par->extradata;
    int n = par->extradata_size;
    if (*profile >= 0 || !x) return;
    if (par->codec_id == AV_CODEC_ID_H264) {
        if (n >= 4 && x[0] == 1) {
            *profile = x[1], *level = x[3];
            return;
        }
        for (int i = 0; i + 6 < n; i++) /* 00 00 01 then an SPS NAL header (type 7) */
            if (x[i] == 0 && x[i + 1] == 0 && x[i + 2] == 1 && (x[i + 3] & 0x1f) == 7) {
                *profile = x[i + 4], *level = x[i + 6];
                return;
            }
    } else if (par->codec_id == AV_CODEC_ID_HEVC && n >= 13 && x[0] == 1) {
        *profile = x[1] & 0x1f, *level = x[12];
    }
}

static int fill_info(AVFormatContext *fmt, int si, sl__video_info *info, char *reason, size_t rlen) {
    const AVStream *st = fmt->streams[si];
    const AVCodecParameters *par = st->codecpar;
    info->stream = si;
    info->codec_id = par->codec_id;
    info->codec_id_kind = codec_kind(par->codec_id);
    info->coded_width = (uint32_t)par->width, info->coded_height = (uint32_t)par->height;
    info->pix_fmt = par->format, info->profile = par->profile, info->level = par->level;
    header_profile(par, &info->profile, &info->level);
    if (par->width <= 0 || par->height <= 0 || par->width > 65535 || par->height > 65535) {
        sl__msg(reason, rlen, "video stream header gives no usable frame size (%dx%d)", par->width, par->height);
        return SL_ECORRUPT;
    }
    info->rotation = stream_rotation(st);
    int turn = info->rotation == 90 || info->rotation == 270;
    info->width = turn ? info->coded_height : info->coded_width;
    info->height = turn ? info->coded_width : info->coded_height;
    AVRational rate = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate : st->r_frame_rate;
    if (rate.num <= 0 || rate.den <= 0 || av_q2d(rate) > 1000 || st->time_base.num <= 0 || st->time_base.den <= 0) {
        sl__msg(reason, rlen, "video stream header gives no usable frame rate (%d/%d) or time base", rate.num,
                rate.den);
        return SL_ECORRUPT;
    }
    info->rate_num = rate.num, info->rate_den = rate.den, info->fps = av_q2d(rate);
    info->tb_num = st->time_base.num, info->tb_den = st->time_base.den;
    info->start_pts = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
    if (st->duration > 0) info->duration = (double)st->duration * av_q2d(st->time_base);
    else if (fmt->duration > 0) info->duration = (double)fmt->duration / AV_TIME_BASE;
    int rc = sl__video_count(st->nb_frames, info->fps, &info->duration, &info->frames, reason, rlen);
    if (rc) return rc;
    info->demux_mem = demux_mem(fmt);
    return 0;
}

static int check_limits(const sl__video_info *info, const sl__video_limits *lim, const AVCodec *dec, char *reason,
                        size_t rlen) {
    uint64_t px = (uint64_t)info->coded_width * info->coded_height;
    if (lim->max_pixels && px > lim->max_pixels) {
        sl__msg(reason, rlen, "video frames are %ux%u = %llu pixels, over the max_pixels limit of %llu",
                info->coded_width, info->coded_height, (unsigned long long)px, (unsigned long long)lim->max_pixels);
        return SL_ELIMIT;
    }
    if (lim->max_frames && (uint64_t)info->frames > lim->max_frames) {
        sl__msg(reason, rlen, "video has %lld frames, over the max_frames limit of %llu", (long long)info->frames,
                (unsigned long long)lim->max_frames);
        return SL_ELIMIT;
    }
    if (lim->max_seconds > 0 && info->duration > lim->max_seconds) {
        sl__msg(reason, rlen, "video lasts %.2f s, over the max_seconds limit of %.2f", info->duration,
                lim->max_seconds);
        return SL_ELIMIT;
    }
    if (!dec) {
        sl__msg(reason, rlen, "no decoder for the video codec %s in this FFmpeg", info->codec);
        return SL_EUNSUPPORTED;
    }
    const char *list = lim->codecs ? lim->codecs : SL_VIDEO_DEFAULT_CODECS;
    if (!codec_allowed(list, info->codec, dec->name)) {
        sl__msg(reason, rlen, "video codec %s is not in the allowed list (%s)", info->codec, list);
        return SL_EUNSUPPORTED;
    }
    if (!(dec->capabilities & AV_CODEC_CAP_DR1) || (dec->capabilities & AV_CODEC_CAP_OTHER_THREADS)) {
        sl__msg(reason, rlen, "decoder %s allocates its own frames or threads; sluice cannot bound it", dec->name);
        return SL_EUNSUPPORTED;
    }
    return 0;
}

int sl__video_probe(const sl__sample_file *f, const sl__video_limits *lim, sl__video_info *info, char *reason,
                    size_t rlen) {
    static const sl__video_limits none = {0};
    if (!lim) lim = &none;
    memset(info, 0, sizeof *info);
    info->file_bytes = f->size;
    int rc = sl__check_bytes(f->size, lim->max_bytes, reason, rlen);
    if (rc) return rc;
    if (f->size == 0) {
        sl__msg(reason, rlen, "empty file");
        return SL_EFORMAT;
    }
    sl__vinput in;
    if ((rc = sl__video_open(f, &in, reason, rlen))) return rc;
    int si = av_find_best_stream(in.fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (si < 0) {
        sl__msg(reason, rlen, "no video stream (the file has %u streams: audio or data only)", in.fmt->nb_streams);
        sl__video_close(&in);
        return SL_EFORMAT;
    }
    const AVCodec *dec = avcodec_find_decoder(in.fmt->streams[si]->codecpar->codec_id);
    snprintf(info->codec, sizeof info->codec, "%s", avcodec_get_name(in.fmt->streams[si]->codecpar->codec_id));
    rc = fill_info(in.fmt, si, info, reason, rlen);
    if (rc == 0) rc = check_limits(info, lim, dec, reason, rlen);
    sl__video_close(&in);
    return rc;
}

#endif /* SL_HAVE_FFMPEG */
