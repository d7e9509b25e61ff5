/*
 * Video: decoding a planned clip (see video.h).
 *
 * One pass: open the container on the sample's byte range, seek to the
 * keyframe at or before the first needed frame, decode forward. Frames
 * arrive in presentation order; the clip's frames are matched by display
 * time: target j (frame index i) is the frame on screen at
 * start + (i + 0.5) / rate, i.e. the last frame whose timestamp is not
 * after it. A frame is known to be that one when the next frame arrives
 * later than the target, so the previous frame is held (a reference to
 * the decoder's buffer, no copy) until then. The pass stops as soon as the
 * last target is settled; targets past the end of the stream get its last
 * frame.
 *
 * A seek lands on a keyframe by its decoding timestamp; with reordering
 * that keyframe can be displayed after the first target. The pass then
 * reports it and is run again from an earlier point (twice), then from the
 * start of the stream.
 *
 * Frames no target shows are not decoded where the codec can skip them:
 * a packet whose frame no other frame references (skip_frame NONREF) is
 * dropped when some packet already sent this pass has a later timestamp q
 * and no target time lies in [pts, q). The frame on screen at any target
 * is then never a dropped one (its successor comes no later than q), and
 * the frames that stay are exactly the ones that were on screen before:
 * the bytes do not change. With B-frames the later anchor is sent before
 * the B-frames it brackets, so most lead-in and between-target B-frames
 * go; streams without non-reference frames decode as before. This rests
 * on a frame's display time being its packet's timestamp: once a frame's
 * time is guessed (no pts, or best_effort_timestamp differs) nothing more
 * is skipped in the clip, and a pass that had skipped runs again.
 *
 * The end of a pass: reading stops at the first packet decoded after the
 * last target's time (dts > that time), and the decoder is drained. Packets
 * come in decoding order (dts never goes back) and none is shown before it
 * is decoded (pts >= dts), so that packet and every later one show after
 * the last target: the frames on screen at the targets are all in the
 * packets already sent, after the frames they reference. Without the stop
 * the decoder would take packets until its reorder delay let out a frame
 * shown after the last target (one to three more reference frames with
 * B-frames). Both premises are checked on every packet read; a stream
 * that breaks one, or whose frame times are guessed, is read on as before.
 *
 * Conversion: swscale reads the crop box straight from the decoder's
 * frame (plane pointers offset to the box, its origin aligned down to the
 * chroma grid as ffmpeg's crop filter does), converts YUV to RGB with the
 * frame's colour matrix and range, and scales with SWS_BILINEAR (ffmpeg's
 * scale filter default, antialiased when shrinking) into planar RGB. For
 * an unrotated train clip it writes into the output frame directly (and
 * the flip mirrors rows in place); rotation (display matrix) and val's
 * centre window go through one scaled-size buffer from the quota.
 *
 * Other converters and decoders (sl__video_decode_into): a sink takes each
 * needed frame instead of swscale (the GPU's kernels, or their CPU
 * reference); an NVDEC session (video_hw.c) lends its codec context, whose
 * frames live in device memory, in place of the software decoder. The
 * passes are the same code either way, but for how a pass starts: an
 * H.264 decoder of a session is not flushed where an IDR picture starts
 * the pass (its flush makes a new NVDEC decoder; sl__video_soft in
 * video_impl.h): its packets carry the pass's generation and frames of an
 * older one are dropped.
 *
 * Ownership: everything in vdec is released by vdec_fini on every path;
 * frame buffers come from the quota through get_buffer and go back when
 * the last AVBufferRef to them is dropped (by the decoder or by us), all
 * before vdec_fini returns. A session's codec context is lent for the clip
 * and given back (kept or freed by the session) in vdec_fini.
 */
#include "format/video.h"

#include <string.h>

#include "base/util.h"
#include "format/video_impl.h"

#ifndef SL_HAVE_FFMPEG

int sl__video_decode(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan, sl__quota *q,
                     const _Atomic int *cancel, uint8_t *dst, char *reason, size_t rlen) {
    sl__msg(reason, rlen, "video support is not built in (sluice was built without FFmpeg's libraries)");
    return SL_EUNSUPPORTED;
}

int sl__video_decode_into(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan,
                          sl__quota *q, const _Atomic int *cancel, sl__video_hw *hw, const sl__video_sink *sink,
                          char *reason, size_t rlen) {
    sl__msg(reason, rlen, "video support is not built in (sluice was built without FFmpeg's libraries)");
    return SL_EUNSUPPORTED;
}

void sl__video_fail_after(long n) { (void)n; }

uint64_t sl__video_skips_asked(void) { return 0; }

void sl__video_distrust_times(int on) { (void)on; }

void sl__video_no_early_end(int on) { (void)on; }

uint64_t sl__video_early_ends(void) { return 0; }

#else /* SL_HAVE_FFMPEG */

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#define BUF_ALIGN 64 /* frame plane and linesize alignment (AVX-512) */
#define MISSED 1     /* a pass that sought past its first target */
#define DONE 2       /* every target settled */
#define UNSURE 3     /* a frame's time is not its packet's: a pass that skipped must run again without */
#define SENT_MAX 512 /* packet timestamps remembered a pass; past it nothing more is skipped */

typedef struct vdec {
    const sl__video_info *info;
    const sl__clip_plan *plan;
    sl__quota *q;
    const _Atomic int *cancel;
    uint8_t *dst;                /* swscale's output (no sink) */
    const sl__video_sink *sink;  /* else: where frames go */
    sl__video_hw *hw;            /* NVDEC session lending cc (NULL: software decoder, ours) */
    char *reason;
    size_t rlen;

    sl__vinput in;
    AVCodecContext *cc;
    AVPacket *pkt;
    AVFrame *frame, *prev; /* prev: the last frame, held until the next one shows when it ended */
    struct SwsContext *sws;
    int sws_fmt;
    uint32_t bx, by, bw, bh; /* the crop box, coded pixels */
    uint32_t tw, th;         /* the box scaled, coded orientation */
    int direct;              /* swscale writes the output frame itself */
    uint8_t *tmp;            /* else: the scaled box, 3 planes tw x th (quota) */
    uint64_t out_frame;      /* bytes of one output frame */
    int quota_failed;        /* get_buffer was refused by the quota */

    /* targets: clip positions sorted by frame index, grouped by index */
    uint32_t order[SL_CLIP_MAX_FRAMES];
    uint32_t first[SL_CLIP_MAX_FRAMES + 1]; /* group j is order[first[j] .. first[j+1]) */
    int64_t when[SL_CLIP_MAX_FRAMES];       /* group j's display time, stream time base */
    uint32_t groups, next;                  /* next: first group not yet written */
    int sought;                             /* this pass began with a seek */
    int64_t last_pts;

    /* timestamps of the packets sent this pass (the first SENT_MAX) */
    int64_t sent[SENT_MAX];
    uint32_t nsent;
    int skipped;   /* this pass asked the decoder to skip a frame */
    int skip_off;  /* no skipping: the stream's frame times are not its packets' */
    int64_t last_dts; /* of the last stream packet read this pass (AV_NOPTS_VALUE: none yet) */
    int end_off;      /* no early end: a packet broke its premises (dts went back, pts before dts) */
    int ended;        /* this pass stopped reading after the last target (the decoder drained) */
    int ok;        /* the clip decoded (a session keeps its decoder only then) */
    sl__video_soft *soft; /* passes start without a flush (NULL: flushed); the session's or own */
    sl__video_soft own;
    int owed;             /* the pass's first packet decides how the decoder forgets the last pass */
} vdec;

/* ---- frame buffers from the quota ---------------------------------------- */

/* Tests: fail the allocation after the next n from the quota (< 0: off). */
static long fail_after = -1;
void sl__video_fail_after(long n) { fail_after = n; }

/* Packets sent with their frame to be skipped, since the start (tests). */
static _Atomic uint64_t skips_asked;
uint64_t sl__video_skips_asked(void) { return atomic_load(&skips_asked); }

/* Tests: the software H.264 decoder starts its passes as a session's
 * does (no flush before an IDR). */
static int soft_seeks;
void sl__video_soft_seeks(int on) { soft_seeks = on; }
static _Atomic uint64_t soft_resets, soft_flushes; /* every decoder's, since the start (tests) */
void sl__video_soft_counts(uint64_t *resets, uint64_t *flushes) {
    *resets = atomic_load(&soft_resets), *flushes = atomic_load(&soft_flushes);
}

/* Packets carry their pass's generation into their frames: the frame's
 * opaque where FFmpeg copies it (6.0), else the packet's position
 * (frame->pkt_pos; the demuxer's positions are not used past the send). */
#ifdef AV_CODEC_FLAG_COPY_OPAQUE
#define TAG_SET(pkt, g) ((pkt)->opaque = (void *)(intptr_t)(g))
#define TAG_OF(f) ((int64_t)(intptr_t)(f)->opaque)
#else
#define TAG_SET(pkt, g) ((pkt)->pos = (g))
#define TAG_OF(f) ((f)->pkt_pos)
#endif

/* Tests: every frame's time counts as guessed. */
static int distrust_times;
void sl__video_distrust_times(int on) { distrust_times = on; }

/* Tests: passes read to the end of the stream or the last target's
 * settling frame, as before the early end; and how many passes ended early. */
static int no_early_end;
void sl__video_no_early_end(int on) { no_early_end = on; }
static _Atomic uint64_t early_ends;
uint64_t sl__video_early_ends(void) { return atomic_load(&early_ends); }

static void *quota_alloc(sl__quota *q, size_t n) {
    if (fail_after >= 0 && fail_after-- == 0) return NULL;
    return sl__quota_alloc(q, n);
}

static void buf_free(void *opaque, uint8_t *data) {
    sl__quota_free(opaque, ((void **)data)[-1]);
}

/* Linesizes for a frame w pixels wide that are multiples of every
 * alignment the codec asks (as avcodec_default_get_buffer2 widens). */
static int frame_linesizes(AVCodecContext *cc, const AVFrame *f, int linesize[4], int *h) {
    int w = f->width, align[AV_NUM_DATA_POINTERS];
    *h = f->height;
    avcodec_align_dimensions2(cc, &w, h, align);
    for (int tries = 0; tries < 16; tries++) {
        if (av_image_fill_linesizes(linesize, f->format, w) < 0) return AVERROR(EINVAL);
        int unaligned = 0;
        for (int i = 0; i < 4; i++)
            unaligned |= linesize[i] % BUF_ALIGN || (align[i] > 0 && linesize[i] % align[i]);
        if (!unaligned) return 0;
        w += w & ~(w - 1);
    }
    return AVERROR(EINVAL);
}

/* get_buffer2: one quota block per frame, planes BUF_ALIGN-aligned with
 * FFmpeg's 16 bytes of padding after each. */
static int get_buffer(AVCodecContext *cc, AVFrame *f, int flags) {
    vdec *d = cc->opaque;
    int linesize[4], h;
    ptrdiff_t lsp[4];
    size_t sizes[4], off[4], total = 0;
    if (frame_linesizes(cc, f, linesize, &h) < 0) return AVERROR(EINVAL);
    for (int i = 0; i < 4; i++) lsp[i] = linesize[i];
    if (av_image_fill_plane_sizes(sizes, f->format, h, lsp) < 0) return AVERROR(EINVAL);
    for (int i = 0; i < 4; i++) {
        off[i] = total;
        if (sizes[i] > SIZE_MAX / 4 || total > SIZE_MAX / 4) return AVERROR(EINVAL);
        if (sizes[i]) total += (sizes[i] + 16 + BUF_ALIGN - 1) & ~(size_t)(BUF_ALIGN - 1);
    }
    uint8_t *raw = quota_alloc(d->q, total + BUF_ALIGN + sizeof(void *));
    if (!raw) {
        d->quota_failed = 1;
        return AVERROR(ENOMEM);
    }
    uint8_t *base = (uint8_t *)(((uintptr_t)raw + sizeof(void *) + BUF_ALIGN - 1) & ~(uintptr_t)(BUF_ALIGN - 1));
    ((void **)base)[-1] = raw;
    f->buf[0] = av_buffer_create(base, total, buf_free, d->q, 0);
    if (!f->buf[0]) {
        sl__quota_free(d->q, raw);
        return AVERROR(ENOMEM);
    }
    for (int i = 0; i < 4; i++) {
        f->data[i] = sizes[i] ? base + off[i] : NULL;
        f->linesize[i] = sizes[i] ? linesize[i] : 0;
    }
    f->extended_data = f->data;
    return 0;
}

/* ---- set-up and tear-down ------------------------------------------------ */

static int fail(vdec *d, int code, const char *what, int averr) {
    char e[64] = "";
    if (averr) av_strerror(averr, e, sizeof e);
    sl__msg(d->reason, d->rlen, "%s%s%s", what, averr ? ": " : "", e);
    return code;
}

static void vdec_fini(vdec *d) {
    av_frame_free(&d->frame);
    av_frame_free(&d->prev);
    av_packet_free(&d->pkt);
    if (d->hw) sl__video_hw_give_back(d->hw, &d->cc, d->ok);
    else avcodec_free_context(&d->cc); /* drops the decoder's references: its buffers go back to the quota */
    sws_freeContext(d->sws);
    d->sws = NULL;
    sl__video_close(&d->in);
    sl__quota_free(d->q, d->tmp);
    d->tmp = NULL;
}

/* The file must still be what the probe saw. */
static int check_stream(vdec *d) {
    const sl__video_info *info = d->info;
    if (info->stream < 0 || (unsigned)info->stream >= d->in.fmt->nb_streams)
        return fail(d, SL_ECORRUPT, "the video stream is gone since the probe", 0);
    const AVCodecParameters *par = d->in.fmt->streams[info->stream]->codecpar;
    if ((int)par->codec_id != info->codec_id || (uint32_t)par->width != info->coded_width ||
        (uint32_t)par->height != info->coded_height)
        return fail(d, SL_ECORRUPT, "the video stream changed since the probe", 0);
    for (unsigned i = 0; i < d->in.fmt->nb_streams; i++)
        if ((int)i != info->stream) d->in.fmt->streams[i]->discard = AVDISCARD_ALL;
    return 0;
}

/* A decoder on the calling thread (thread_count 1) whose frames come from
 * get_buffer. */
static int open_codec(vdec *d) {
    AVStream *st = d->in.fmt->streams[d->info->stream];
    if (d->hw) return sl__video_hw_lend(d->hw, st, &d->cc, &d->soft, d->reason, d->rlen);
    if (soft_seeks && st->codecpar->codec_id == AV_CODEC_ID_H264) d->soft = &d->own;
    const AVCodec *dec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!dec || !(dec->capabilities & AV_CODEC_CAP_DR1))
        return fail(d, SL_EUNSUPPORTED, "no decoder for this stream that takes our frame buffers", 0);
    d->cc = avcodec_alloc_context3(dec);
    if (!d->cc) return fail(d, SL_ENOMEM, "cannot allocate the decoder", 0);
    int err = avcodec_parameters_to_context(d->cc, st->codecpar);
    if (err < 0) return fail(d, SL_ECORRUPT, "bad codec parameters", err);
    d->cc->thread_count = 1;
    d->cc->thread_type = 0;
    d->cc->opaque = d;
    d->cc->get_buffer2 = get_buffer;
    d->cc->pkt_timebase = st->time_base;
#ifdef AV_CODEC_FLAG_COPY_OPAQUE
    d->cc->flags |= AV_CODEC_FLAG_COPY_OPAQUE;
#endif
    if ((err = avcodec_open2(d->cc, dec, NULL)) < 0) return fail(d, SL_ECORRUPT, "cannot open the decoder", err);
    return 0;
}

/* Sort the clip positions by frame index (stable) and group equal ones;
 * each group's display time on the stream's nominal grid. */
static void set_targets(vdec *d) {
    const sl__clip_plan *p = d->plan;
    for (uint32_t k = 0; k < p->frames; k++) {
        uint32_t i = k;
        while (i > 0 && p->frame[d->order[i - 1]] > p->frame[k]) {
            d->order[i] = d->order[i - 1];
            i--;
        }
        d->order[i] = k;
    }
    const sl__video_info *in = d->info;
    int64_t num = (int64_t)in->rate_den * in->tb_den, den = 2 * (int64_t)in->rate_num * in->tb_num;
    d->groups = 0;
    for (uint32_t i = 0; i < p->frames; i++) {
        int64_t idx = p->frame[d->order[i]];
        if (i > 0 && idx == p->frame[d->order[i - 1]]) continue;
        d->first[d->groups] = i;
        d->when[d->groups++] = in->start_pts + av_rescale(2 * idx + 1, num, den);
    }
    d->first[d->groups] = p->frames;
}

/* ---- conversion ------------------------------------------------------------ */

/* The plan's box (displayed pixels) in coded pixels, and the scaled size
 * in the coded orientation. */
static void coded_box(vdec *d) {
    const sl__clip_plan *p = d->plan;
    uint32_t x = p->box[0], y = p->box[1], w = p->box[2], h = p->box[3];
    uint32_t W = d->info->coded_width, H = d->info->coded_height;
    switch (d->info->rotation) {
    case 90: d->bx = y, d->by = H - x - w, d->bw = h, d->bh = w; break;
    case 180: d->bx = W - x - w, d->by = H - y - h, d->bw = w, d->bh = h; break;
    case 270: d->bx = W - y - h, d->by = x, d->bw = h, d->bh = w; break;
    default: d->bx = x, d->by = y, d->bw = w, d->bh = h; break;
    }
    int turn = d->info->rotation == 90 || d->info->rotation == 270;
    d->tw = turn ? p->scaled_h : p->scaled_w;
    d->th = turn ? p->scaled_w : p->scaled_h;
    d->direct = d->info->rotation == 0 && p->win_x == 0 && p->win_y == 0 && p->scaled_w == p->out_w &&
                p->scaled_h == p->out_h;
}

static int yuvj(int fmt) {
    return fmt == AV_PIX_FMT_YUVJ420P || fmt == AV_PIX_FMT_YUVJ422P || fmt == AV_PIX_FMT_YUVJ444P ||
           fmt == AV_PIX_FMT_YUVJ440P || fmt == AV_PIX_FMT_YUVJ411P;
}

/* The scaler for the first frame's pixel format (later frames must keep
 * it); the box origin goes down to the chroma grid. */
static int make_scaler(vdec *d, const AVFrame *f) {
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f->format);
    if (!desc || (desc->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_PAL)) ||
        !sws_isSupportedInput(f->format))
        return fail(d, SL_EUNSUPPORTED, "decoded pixel format not supported", 0);
    d->bx &= ~((1u << desc->log2_chroma_w) - 1);
    d->by &= ~((1u << desc->log2_chroma_h) - 1);
    d->sws = sws_getContext((int)d->bw, (int)d->bh, f->format, (int)d->tw, (int)d->th, AV_PIX_FMT_GBRP, SWS_BILINEAR,
                            NULL, NULL, NULL);
    if (!d->sws) return fail(d, SL_ENOMEM, "cannot create the scaler", 0);
    int full = f->color_range == AVCOL_RANGE_JPEG || yuvj(f->format);
    sws_setColorspaceDetails(d->sws, sws_getCoefficients(f->colorspace), full, sws_getCoefficients(SWS_CS_DEFAULT), 1,
                             0, 1 << 16, 1 << 16);
    d->sws_fmt = f->format;
    if (!d->direct) {
        d->tmp = quota_alloc(d->q, (size_t)3 * d->tw * d->th);
        if (!d->tmp) return fail(d, SL_EBUDGET, "scaling buffer over the clip's quota", 0);
    }
    return 0;
}

/* Write the scaled box (coded orientation, planes R G B of tw x th) into
 * an output frame: the window, turned for display, mirrored if flipped. */
static void place(const vdec *d, uint8_t *out) {
    const sl__clip_plan *p = d->plan;
    uint32_t W = p->out_w, H = p->out_h, tw = d->tw, th = d->th;
    for (uint32_t c = 0; c < 3; c++) {
        const uint8_t *t = d->tmp + (size_t)c * tw * th;
        uint8_t *o = out + (size_t)c * W * H;
        for (uint32_t y = 0; y < H; y++) {
            for (uint32_t x = 0; x < W; x++) {
                uint32_t dx = p->win_x + (p->flip ? W - 1 - x : x), dy = p->win_y + y, sx, sy;
                switch (d->info->rotation) {
                case 90: sx = dy, sy = th - 1 - dx; break;
                case 180: sx = tw - 1 - dx, sy = th - 1 - dy; break;
                case 270: sx = tw - 1 - dy, sy = dx; break;
                default: sx = dx, sy = dy; break;
                }
                o[(size_t)y * W + x] = t[(size_t)sy * tw + sx];
            }
        }
    }
}

static void mirror_rows(uint8_t *img, uint32_t w, uint32_t rows) {
    for (uint32_t y = 0; y < rows; y++) {
        uint8_t *r = img + (size_t)y * w;
        for (uint32_t a = 0, b = w - 1; a < b; a++, b--) {
            uint8_t t = r[a];
            r[a] = r[b];
            r[b] = t;
        }
    }
}

/* Convert frame f into output frame out (3 planes out_h x out_w). */
static int convert(vdec *d, const AVFrame *f, uint8_t *out) {
    int rc;
    if ((uint32_t)f->width != d->info->coded_width || (uint32_t)f->height != d->info->coded_height)
        return fail(d, SL_ECORRUPT, "frame size differs from the stream header", 0);
    if (!d->sws && (rc = make_scaler(d, f))) return rc;
    if (f->format != d->sws_fmt) return fail(d, SL_ECORRUPT, "pixel format changed mid-stream", 0);
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f->format);
    const uint8_t *src[4] = {0};
    int sls[4] = {0};
    for (int i = 0; i < 4 && f->data[i]; i++) { /* as av_frame_apply_cropping computes plane offsets */
        const AVComponentDescriptor *comp = NULL;
        for (int c = 0; c < desc->nb_components && !comp; c++)
            if (desc->comp[c].plane == i) comp = &desc->comp[c];
        int chroma = i == 1 || i == 2;
        uint32_t sx = chroma ? desc->log2_chroma_w : 0, sy = chroma ? desc->log2_chroma_h : 0;
        src[i] = f->data[i] + (comp ? (size_t)(d->bx >> sx) * comp->step : 0) + (ptrdiff_t)(d->by >> sy) * f->linesize[i];
        sls[i] = f->linesize[i];
    }
    uint8_t *t = d->direct ? out : d->tmp;
    size_t plane = (size_t)d->tw * d->th;
    uint8_t *dp[4] = {t + plane, t + 2 * plane, t, NULL}; /* GBRP planes G, B, R into R G B */
    int ds[4] = {(int)d->tw, (int)d->tw, (int)d->tw, 0};
    if (sws_scale(d->sws, src, sls, 0, (int)d->bh, dp, ds) != (int)d->th)
        return fail(d, SL_ECORRUPT, "scaling the frame failed", 0);
    if (!d->direct) place(d, out);
    else if (d->plan->flip) mirror_rows(out, d->plan->out_w, 3 * d->plan->out_h);
    return 0;
}

/* The frame as a sink sees it: its planes, layout and colour. */
static int sink_frame(vdec *d, const AVFrame *f, sl__video_frame *fr) {
    memset(fr, 0, sizeof *fr);
    if ((uint32_t)f->width != d->info->coded_width || (uint32_t)f->height != d->info->coded_height)
        return fail(d, SL_ECORRUPT, "frame size differs from the stream header", 0);
    int fmt = f->format;
    if (fmt == AV_PIX_FMT_CUDA) {
        const AVHWFramesContext *hf = f->hw_frames_ctx ? (const AVHWFramesContext *)f->hw_frames_ctx->data : NULL;
        fmt = hf ? hf->sw_format : AV_PIX_FMT_NONE;
        if (fmt != AV_PIX_FMT_NV12)
            return fail(d, SL_EUNSUPPORTED, "for the CPU: NVDEC frames not in NV12 (8-bit 4:2:0)", 0);
        fr->layout = SL__FRAME_NV12;
    } else if (fmt == AV_PIX_FMT_YUV420P || fmt == AV_PIX_FMT_YUVJ420P) {
        fr->layout = SL__FRAME_YUV420P;
    } else {
        char e[96];
        snprintf(e, sizeof e, "for the CPU: frames in %s (only 8-bit 4:2:0 here)",
                 av_get_pix_fmt_name(fmt) ? av_get_pix_fmt_name(fmt) : "an unknown format");
        return fail(d, SL_EUNSUPPORTED, e, 0);
    }
    for (int i = 0; i < 3; i++) {
        fr->plane[i] = (uint64_t)(uintptr_t)f->data[i];
        fr->linesize[i] = f->linesize[i];
    }
    fr->width = (uint32_t)f->width, fr->height = (uint32_t)f->height;
    fr->colorspace = f->colorspace;
    fr->full_range = f->color_range == AVCOL_RANGE_JPEG || yuvj(f->format);
    return 0;
}

/* Write frame f to every clip position of group j. */
static int emit(vdec *d, const AVFrame *f, uint32_t j) {
    if (d->sink) {
        sl__video_frame fr;
        int rc = sink_frame(d, f, &fr);
        return rc ? rc : d->sink->frame(d->sink->ctx, &fr, &d->order[d->first[j]], d->first[j + 1] - d->first[j],
                                        d->reason, d->rlen);
    }
    uint8_t *first = d->dst + (size_t)d->order[d->first[j]] * d->out_frame;
    int rc = convert(d, f, first);
    for (uint32_t i = d->first[j] + 1; rc == 0 && i < d->first[j + 1]; i++)
        memcpy(d->dst + (size_t)d->order[i] * d->out_frame, first, d->out_frame);
    return rc;
}

/* ---- the pass ---------------------------------------------------------------- */

/* A decoded frame: settle every target displayed before it with the held
 * frame (or with this one, if none is held: targets before the stream's
 * first frame), then hold it. */
static int on_frame(vdec *d) {
    AVFrame *f = d->frame;
    int64_t pts = f->best_effort_timestamp;
    int held = d->prev->buf[0] != NULL;
    if (f->pts == AV_NOPTS_VALUE || f->pts != pts || distrust_times) { /* a guessed time: packet times say nothing */
        d->skip_off = 1;
        if (d->skipped || d->ended) return UNSURE;
    }
    if (pts == AV_NOPTS_VALUE) pts = held ? d->last_pts + 1 : d->info->start_pts;
    if (!held && d->sought && pts > d->when[d->next]) return MISSED;
    while (d->next < d->groups && d->when[d->next] < pts) {
        int rc = emit(d, held ? d->prev : f, d->next);
        if (rc) return rc;
        d->next++;
    }
    av_frame_unref(d->prev);
    av_frame_move_ref(d->prev, f);
    d->last_pts = pts;
    return d->next == d->groups ? DONE : 0;
}

static int receive(vdec *d) {
    for (;;) {
        int err = avcodec_receive_frame(d->cc, d->frame);
        if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return 0;
        if (err < 0)
            return d->quota_failed ? fail(d, SL_EBUDGET, "decoder frames over the clip's quota", 0)
                                   : fail(d, SL_ECORRUPT, "corrupt video", err);
        int rc = d->soft && TAG_OF(d->frame) != d->soft->gen ? 0 : on_frame(d); /* else: an earlier pass's */
        av_frame_unref(d->frame);
        if (rc) return rc;
    }
}

static int send(vdec *d, const AVPacket *pkt) {
    if (d->soft && !pkt) {
        if (d->owed) { /* nothing of this pass was sent: the last pass's frames must not come out */
            avcodec_flush_buffers(d->cc);
            d->soft->flushes++, atomic_fetch_add(&soft_flushes, 1);
            d->owed = 0;
        }
        d->soft->drained = 1, d->soft->used = 1;
    }
    for (;;) {
        int err = avcodec_send_packet(d->cc, pkt);
        if (err == 0 || err == AVERROR_EOF) return receive(d);
        if (err != AVERROR(EAGAIN))
            return d->quota_failed ? fail(d, SL_EBUDGET, "decoder frames over the clip's quota", 0)
                                   : fail(d, SL_ECORRUPT, "corrupt video", err);
        int rc = receive(d); /* the decoder's output is full: drain, resend */
        if (rc) return rc;
    }
}

/* Whether the frame of a packet with timestamp pts shows at no target:
 * an earlier-sent packet's later timestamp q bounds its time on screen,
 * and no target lies in [pts, q). Remembers pts. */
static int unseen(vdec *d, int64_t pts) {
    if (pts == AV_NOPTS_VALUE || d->skip_off) return 0;
    int64_t q = INT64_MAX;
    for (uint32_t i = 0; i < d->nsent; i++)
        if (d->sent[i] > pts && d->sent[i] < q) q = d->sent[i];
    if (d->nsent < SENT_MAX) d->sent[d->nsent++] = pts;
    else return 0; /* the bound below may rest on a timestamp not remembered */
    if (q == INT64_MAX) return 0;
    for (uint32_t j = 0; j < d->groups; j++)
        if (d->when[j] >= pts && d->when[j] < q) return 0;
    return 1;
}

/* Whether an H.264 packet's first picture is an IDR one: its NAL units
 * (length-prefixed as the extradata says, or Annex B start codes) up to
 * the first slice. Bounds checked: the packet is the file's. */
static int h264_idr(const AVCodecContext *cc, const AVPacket *pkt) {
    const uint8_t *p = pkt->data;
    size_t n = pkt->size > 0 ? (size_t)pkt->size : 0, i = 0;
    int avcc = cc->extradata_size >= 7 && cc->extradata[0] == 1, len_size = avcc ? (cc->extradata[4] & 3) + 1 : 0;
    while (i < n) {
        size_t nal, len = 0;
        if (avcc) {
            if (n - i < (size_t)len_size) return 0;
            for (int k = 0; k < len_size; k++) len = len << 8 | p[i + k];
            nal = i + len_size;
            if (len == 0 || len > n - nal) return 0;
            i = nal + len;
        } else {
            while (i + 3 <= n && !(p[i] == 0 && p[i + 1] == 0 && p[i + 2] == 1)) i++;
            if (i + 3 >= n) return 0;
            nal = i + 3;
            i = nal;
        }
        int type = p[nal] & 0x1f;
        if (type == 5) return 1;
        if (type >= 1 && type <= 4) return 0; /* a non-IDR slice first */
    }
    return 0;
}

/* The pass's first packet: the decoder forgets the last pass by the IDR
 * it starts with, or by a flush (sl__video_soft). */
static void soft_start(vdec *d, const AVPacket *pkt) {
    sl__video_soft *s = d->soft;
    d->owed = 0;
    if (!s->drained && h264_idr(d->cc, pkt)) {
        s->resets++, atomic_fetch_add(&soft_resets, 1);
        return;
    }
    avcodec_flush_buffers(d->cc);
    s->drained = 0;
    s->flushes++, atomic_fetch_add(&soft_flushes, 1);
}

/* Send a packet of the stream, its frame skipped when a non-reference
 * frame no target shows. */
static int send_stream_packet(vdec *d, AVPacket *pkt) {
    if (d->soft) {
        if (d->owed) soft_start(d, pkt);
        TAG_SET(pkt, d->soft->gen);
        d->soft->used = 1;
    }
    int skip = unseen(d, pkt->pts);
    if (skip) atomic_fetch_add(&skips_asked, 1), d->skipped = 1;
    d->cc->skip_frame = skip ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
    int rc = send(d, pkt);
    d->cc->skip_frame = AVDISCARD_DEFAULT;
    return rc;
}

/* Whether pkt and every later packet show after the last target, so that
 * the pass stops reading (see the head of the file). Remembers pkt's dts.
 * Only once a frame has come out (a target before the stream's first frame
 * takes that frame), and not for a session's decoder (a drain costs it a
 * flush before the next clip, video_impl.h). */
static int ends_before(vdec *d, const AVPacket *pkt) {
    if (pkt->dts == AV_NOPTS_VALUE || pkt->pts == AV_NOPTS_VALUE || pkt->pts < pkt->dts ||
        (d->last_dts != AV_NOPTS_VALUE && pkt->dts < d->last_dts))
        d->end_off = 1;
    d->last_dts = pkt->dts;
    return !d->end_off && !d->skip_off && !no_early_end && !d->hw && !d->soft && d->prev->buf[0] &&
           pkt->dts > d->when[d->groups - 1];
}

/* Seek (seek_ts, or the stream's start when AV_NOPTS_VALUE after a first
 * pass) and decode until every target is settled. 0, MISSED, UNSURE or
 * an error. */
static int pass(vdec *d, int64_t seek_ts, int rewind) {
    AVFormatContext *fmt = d->in.fmt;
    int err, rc = 0;
    d->sought = seek_ts != AV_NOPTS_VALUE;
    if (d->sought || rewind) {
        int64_t ts = d->sought ? seek_ts : d->info->start_pts;
        if (av_seek_frame(fmt, d->info->stream, ts, AVSEEK_FLAG_BACKWARD) < 0 &&
            av_seek_frame(fmt, d->info->stream, 0, AVSEEK_FLAG_BYTE) < 0)
            return fail(d, SL_ECORRUPT, "cannot seek in the video", 0);
        if (!d->soft) avcodec_flush_buffers(d->cc);
    }
    if (d->soft && d->soft->used) { /* a lent decoder's last clip, or the last pass: forgotten by the first packet */
        d->soft->gen++;
        d->owed = 1;
    }
    av_frame_unref(d->prev);
    d->nsent = 0, d->skipped = 0, d->ended = 0, d->last_dts = AV_NOPTS_VALUE;
    while (rc == 0) {
        if (d->cancel && atomic_load(d->cancel)) return fail(d, SL_ESTATE, "video decode cancelled", 0);
        err = av_read_frame(fmt, d->pkt);
        if (err == AVERROR_EOF) break;
        if (err < 0) return fail(d, err == AVERROR(ENOMEM) ? SL_ENOMEM : SL_ECORRUPT, "cannot read the video", err);
        if (d->pkt->stream_index == d->info->stream) {
            if (ends_before(d, d->pkt)) {
                av_packet_unref(d->pkt);
                d->ended = 1, atomic_fetch_add(&early_ends, 1);
                break;
            }
            rc = send_stream_packet(d, d->pkt);
        }
        av_packet_unref(d->pkt);
    }
    if (rc == 0) rc = send(d, NULL); /* end of stream or of what the clip needs: drain the reordered frames */
    if (rc == DONE) return 0;
    if (rc) return rc;
    if (!d->prev->buf[0]) return fail(d, SL_ECORRUPT, "no frame could be decoded", 0);
    /* Targets past the last frame: the plan's padding (indices clamped to
     * the header's last frame) gets that frame; a stream that ends more
     * than SL__VIDEO_END_SLACK frames before a frame its header promised is
     * truncated or corrupt. After an early end the last frame sent before
     * the last target's time is the one on screen then (the stream goes on). */
    int64_t slack = av_rescale((int64_t)2 * SL__VIDEO_END_SLACK * d->info->rate_den, d->info->tb_den,
                               2 * (int64_t)d->info->rate_num * d->info->tb_num);
    if (!d->ended && d->when[d->groups - 1] > d->last_pts + slack) {
        sl__msg(d->reason, d->rlen, "video ends before frame %lld that its header promises (%lld frames): truncated?",
                (long long)d->plan->frame[d->order[d->first[d->groups - 1]]], (long long)d->info->frames);
        return SL_ECORRUPT;
    }
    while (d->next < d->groups)
        if ((rc = emit(d, d->prev, d->next++))) return rc;
    return 0;
}

/* Passes from the keyframe before the first target, then from earlier
 * points, then from the start, until a pass does not overshoot. */
static int decode_clip(vdec *d) {
    int64_t first = d->when[0], back = av_rescale(2, d->info->tb_den, d->info->tb_num); /* 2 s */
    int64_t seek = d->plan->frame[d->order[0]] > 0 ? first : AV_NOPTS_VALUE;
    for (int attempt = 0;; attempt++) {
        d->next = 0;
        int rc = pass(d, seek, attempt > 0);
        if (rc == UNSURE) { /* the same pass again, skip_off set */
            d->next = 0;
            rc = pass(d, seek, 1);
        }
        if (rc != MISSED) return rc;
        seek = attempt < 2 ? first - back * (attempt + 1) : AV_NOPTS_VALUE;
        if (seek != AV_NOPTS_VALUE && seek <= d->info->start_pts) seek = AV_NOPTS_VALUE;
    }
}

/* One clip: into dst through swscale, or into sink; decoded by hw or by
 * the software decoder. */
static int decode(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan, sl__quota *q,
                  const _Atomic int *cancel, uint8_t *dst, sl__video_hw *hw, const sl__video_sink *sink, char *reason,
                  size_t rlen) {
    vdec d;
    memset(&d, 0, sizeof d);
    d.info = info, d.plan = plan, d.q = q, d.cancel = cancel, d.dst = dst, d.reason = reason, d.rlen = rlen;
    d.sink = sink, d.hw = hw;
    d.out_frame = (uint64_t)3 * plan->out_w * plan->out_h;
    if (plan->frames == 0 || plan->frames > SL_CLIP_MAX_FRAMES || info->rate_num <= 0 || info->tb_num <= 0) {
        sl__msg(reason, rlen, "bad clip plan or stream info");
        return SL_EINVAL;
    }
    int rc = sl__video_open(f, &d.in, reason, rlen);
    if (rc) return rc;
    d.pkt = av_packet_alloc();
    d.frame = av_frame_alloc();
    d.prev = av_frame_alloc();
    if (!d.pkt || !d.frame || !d.prev) rc = fail(&d, SL_ENOMEM, "cannot allocate packet or frame", 0);
    if (rc == 0) rc = check_stream(&d);
    if (rc == 0) rc = open_codec(&d);
    if (rc == 0) {
        set_targets(&d);
        coded_box(&d);
        rc = decode_clip(&d);
    }
    /* A decoder may conceal a frame it got no buffer for and go on: the
     * clip is then not the stream's, whatever the decoder returned. */
    if (rc == 0 && d.quota_failed) rc = fail(&d, SL_EBUDGET, "decoder frames over the clip's quota", 0);
    d.ok = rc == 0;
    vdec_fini(&d);
    return rc;
}

int sl__video_decode(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan, sl__quota *q,
                     const _Atomic int *cancel, uint8_t *dst, char *reason, size_t rlen) {
    return decode(f, info, plan, q, cancel, dst, NULL, NULL, reason, rlen);
}

int sl__video_decode_into(const sl__sample_file *f, const sl__video_info *info, const sl__clip_plan *plan,
                          sl__quota *q, const _Atomic int *cancel, sl__video_hw *hw, const sl__video_sink *sink,
                          char *reason, size_t rlen) {
    if (!sink || !sink->frame) return SL_EINVAL;
    int rc = decode(f, info, plan, q, cancel, NULL, hw, sink, reason, rlen);
    /* NVDEC's failures, whatever they were, are the CPU path's to judge:
     * it decodes the clip again, and a corrupt stream becomes its record */
    if (hw && rc && rc != SL_ESTATE && !(reason && strncmp(reason, "for the CPU: ", 13) == 0)) {
        char why[160];
        const char *refusal = sl__video_hw_refusal(hw); /* get_format's, when the decode failed for it */
        snprintf(why, sizeof why, "%s", refusal ? refusal : reason ? reason : "");
        sl__msg(reason, rlen, "for the CPU: NVDEC: %s", why);
        rc = SL_EUNSUPPORTED;
    }
    return rc;
}

#endif /* SL_HAVE_FFMPEG */
