/*
 * Single video clips without a loader (sl_video_probe, sl_video_decode):
 * the same probe, plan and decode a worker runs for a `kind: "video"`
 * field, on a file named by path. For tests, tools and inspection.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/abi.h"
#include "base/util.h"
#include "format/video.h"
#include "ops/ops.h"

/* ---- the plan: which frames, which crop (no FFmpeg) ------------------------ */

/* Frame k of the clip relative to its first frame. */
static int64_t clip_offset(const sl__video_info *info, const sl__clip_spec *spec, uint32_t k) {
    if (spec->fps > 0) return (int64_t)floor((double)k * info->fps / spec->fps + 1e-9);
    return (int64_t)k * spec->stride;
}

static int check_spec(const sl__video_info *info, const sl__clip_spec *spec, char *reason, size_t rlen) {
    if (spec->frames == 0 || spec->frames > SL_CLIP_MAX_FRAMES) {
        sl__msg(reason, rlen, "clip of %u frames: 1 to %u allowed", spec->frames, SL_CLIP_MAX_FRAMES);
        return SL_EINVAL;
    }
    if (!(spec->fps > 0) && (spec->stride == 0 || spec->stride > 1000000)) {
        sl__msg(reason, rlen, "clip stride %u out of range (1 to 1000000, or set fps)", spec->stride);
        return SL_EINVAL;
    }
    if ((spec->fps != 0 && !(spec->fps >= 0.001 && spec->fps <= 1000)) || !(info->fps > 0) || info->frames < 1) {
        sl__msg(reason, rlen, "clip fps %g or stream rate %g / %lld frames out of range", spec->fps, info->fps,
                (long long)info->frames);
        return SL_EINVAL;
    }
    const sl__recipe *rc = &spec->recipe;
    if (rc->out_w == 0 || rc->out_h == 0 || rc->out_w > 4096 || rc->out_h > 4096) {
        sl__msg(reason, rlen, "clip output %ux%u out of range (1 to 4096 a side)", rc->out_w, rc->out_h);
        return SL_EINVAL;
    }
    if (rc->preset != SL_PRESET_TRAIN && rc->preset != SL_PRESET_VAL) {
        sl__msg(reason, rlen, "unknown clip preset %d", rc->preset);
        return SL_EINVAL;
    }
    if (spec->short_clip < SL_CLIP_PAD || spec->short_clip > SL_CLIP_ERROR) {
        sl__msg(reason, rlen, "unknown short-clip policy %d", spec->short_clip);
        return SL_EINVAL;
    }
    return 0;
}

/* Temporal part: a seeded offset (train) or the centred clip (val); a
 * clip longer than the video follows spec->short_clip. */
static int plan_frames(const sl__video_info *info, const sl__clip_spec *spec, sl__rng *rng, sl__clip_plan *p,
                       char *reason, size_t rlen) {
    int64_t n = info->frames, span = clip_offset(info, spec, spec->frames - 1) + 1;
    p->frames = spec->frames;
    if (span <= n) {
        int64_t room = n - span + 1;
        int64_t first = spec->recipe.preset == SL_PRESET_TRAIN ? (int64_t)sl__rng_below(rng, (uint64_t)room) : (room - 1) / 2;
        for (uint32_t k = 0; k < p->frames; k++) p->frame[k] = first + clip_offset(info, spec, k);
        return 0;
    }
    if (spec->short_clip == SL_CLIP_ERROR) {
        sl__msg(reason, rlen, "clip needs %lld frames, the video has %lld", (long long)span, (long long)n);
        return SL_ELIMIT;
    }
    for (uint32_t k = 0; k < p->frames; k++) {
        int64_t o = clip_offset(info, spec, k);
        p->frame[k] = spec->short_clip == SL_CLIP_LOOP ? o % n : SL_MIN(o, n - 1);
    }
    return 0;
}

/* Spatial part, the image presets' semantics (the recipe's) on the
 * displayed frame: train crops the RandomResizedCrop box (the recipe's
 * scale and ratio) and scales it to the output, flipped with the recipe's
 * probability; val scales the whole frame as the val preset does (short
 * side to size*256/224, or the recipe's crop_pct / resize) and takes the
 * centre window. */
static int plan_crop(const sl__video_info *info, const sl__clip_spec *spec, sl__rng *rng, sl__clip_plan *p,
                     char *reason, size_t rlen) {
    const sl__recipe *rc = &spec->recipe;
    uint32_t W = info->width, H = info->height;
    p->out_w = rc->out_w, p->out_h = rc->out_h;
    if (rc->preset == SL_PRESET_TRAIN) {
        sl__train_box(rc, W, H, rng, p->box, &p->flip);
        p->scaled_w = rc->out_w, p->scaled_h = rc->out_h;
        return 0;
    }
    int e = sl__val_geometry(rc, W, H, &p->scaled_w, &p->scaled_h, &p->win_x, &p->win_y, reason, rlen);
    if (e) return e;
    if (p->scaled_w > 65536 || p->scaled_h > 65536) {
        sl__msg(reason, rlen, "video %ux%u too elongated for the val preset (resized to %ux%u)", W, H, p->scaled_w,
                p->scaled_h);
        return SL_ELIMIT;
    }
    p->box[0] = p->box[1] = 0, p->box[2] = W, p->box[3] = H;
    return 0;
}

int sl__video_plan(const sl__video_info *info, const sl__clip_spec *spec, sl__rng *rng, sl__clip_plan *plan,
                   char *reason, size_t rlen) {
    memset(plan, 0, sizeof *plan);
    int rc = check_spec(info, spec, reason, rlen);
    if (rc == 0) rc = plan_frames(info, spec, rng, plan, reason, rlen);
    if (rc == 0) rc = plan_crop(info, spec, rng, plan, reason, rlen);
    if (rc == 0) rc = sl__video_plan_mem(info, plan, reason, rlen);
    return rc;
}


#define DEFAULT_MAX_PIXELS ((uint64_t)4096 * 2304)
#define DEFAULT_MAX_FRAMES ((uint64_t)1000000)
#define DEFAULT_MAX_BYTES ((uint64_t)4 << 30)

void sl_video_opts_init_sized(sl_video_opts *o, size_t struct_size) {
    sl_video_opts d;
    memset(&d, 0, sizeof d);
    d.frames = 16;
    d.stride = 2;
    d.size = 112;
    d.preset = SL_PRESET_TRAIN;
    d.short_clip = SL_CLIP_PAD;
    d.max_pixels = DEFAULT_MAX_PIXELS;
    d.max_frames = DEFAULT_MAX_FRAMES;
    d.max_bytes = DEFAULT_MAX_BYTES;
    sl__abi_out(o, struct_size, &d, sizeof d);
}

/* The caller's options (o_size bytes; NULL: the defaults) as ours. */
static int import_opts(sl_video_opts *dst, const sl_video_opts *o, size_t o_size, char *err, size_t errlen) {
    sl_video_opts_init(dst);
    return o ? sl__abi_in(dst, sizeof *dst, o, o_size, SL__SIZE_0_1_VIDEO_OPTS, "sl_video_opts",
                          "initialise the options with sl_video_opts_init", err, errlen)
             : 0;
}

/* Open path as a sample: its whole file. */
static int open_file(const char *path, sl__sample_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f); /* a local file: no remote object */
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        int e = errno;
        if (f->fd >= 0) close(f->fd);
        f->fd = -1;
        sl__msg(err, errlen, "cannot open %s: %s", path, strerror(e));
        return e == ENOENT ? SL_ENOENT : SL_EIO;
    }
    f->offset = 0;
    f->size = (uint64_t)st.st_size;
    return 0;
}

static int probe(const char *path, const sl_video_opts *o, sl__sample_file *f, sl__video_info *vi, char *err,
                 size_t errlen) {
    /* max_pixels 0: the default, as in sl_config and sl_decode_opts */
    sl__video_limits lim = {o->max_pixels ? o->max_pixels : DEFAULT_MAX_PIXELS, o->max_frames, o->max_bytes,
                            o->max_seconds, o->codecs};
    int rc = open_file(path, f, err, errlen);
    if (rc) return rc;
    rc = sl__video_probe(f, &lim, vi, err, errlen);
    if (rc) {
        close(f->fd);
        f->fd = -1;
    }
    return rc;
}

int sl_video_probe_sized(const char *path, const sl_video_opts *co, size_t o_size, sl_video_info *info,
                         size_t info_size, char *errbuf, size_t errlen) {
    if (!path || !info || !info_size) return SL_EINVAL;
    sl_video_opts oc, *o = &oc;
    int rc = import_opts(&oc, co, o_size, errbuf, errlen);
    if (rc) return rc;
    sl__sample_file f;
    sl__video_info vi;
    rc = probe(path, o, &f, &vi, errbuf, errlen);
    if (rc) return rc;
    close(f.fd);
    sl_video_info i;
    memset(&i, 0, sizeof i);
    i.width = vi.width, i.height = vi.height, i.rotation = vi.rotation;
    i.fps = vi.fps, i.duration = vi.duration, i.frames = vi.frames;
    memcpy(i.codec, vi.codec, sizeof i.codec);
    sl__abi_out(info, info_size, &i, sizeof i);
    return 0;
}

/* What the clip took, into the caller's clip (clip_size bytes), whose
 * frame_index (when its size holds it) names where the frames go. */
static void report(const sl__clip_plan *p, sl_video_clip *clip, size_t clip_size) {
    sl_video_clip c;
    memset(&c, 0, sizeof c);
    if (clip_size >= SL__ABI_END(sl_video_clip, frame_index)) c.frame_index = clip->frame_index;
    memcpy(c.box, p->box, sizeof c.box);
    c.flip = p->flip;
    c.scaled_w = p->scaled_w, c.scaled_h = p->scaled_h;
    c.win_x = p->win_x, c.win_y = p->win_y;
    if (c.frame_index) memcpy(c.frame_index, p->frame, p->frames * sizeof *c.frame_index);
    sl__abi_out(clip, clip_size, &c, sizeof c);
}

int sl__clip_file(const char *path, const sl_video_opts *o, sl__sample_file *f, sl__video_info *vi,
                  sl__clip_plan *p, char *err, size_t errlen) {
    int rc = probe(path, o, f, vi, err, errlen);
    if (rc) return rc;
    sl__clip_spec spec = {o->frames, o->stride, o->fps, o->short_clip, {0}};
    rc = sl__recipe_make(o->preset, o->size, NULL, 0, 0, &spec.recipe, err, errlen);
    sl__rng r;
    sl__rng_init(&r, o->seed ^ sl__rng_stream(o->crop_group), o->epoch, o->index);
    if (rc == 0) rc = sl__video_plan(vi, &spec, &r, p, err, errlen);
    if (rc) {
        close(f->fd);
        f->fd = -1;
    }
    return rc;
}

int sl_video_decode_sized(const char *path, const sl_video_opts *co, size_t o_size, void *out, size_t out_len,
                          sl_video_clip *clip, size_t clip_size, char *errbuf, size_t errlen) {
    if (!path || (clip && !clip_size)) return SL_EINVAL;
    sl_video_opts oc, *o = &oc;
    int rc = import_opts(&oc, co, o_size, errbuf, errlen);
    if (rc) return rc;
    sl__sample_file f;
    sl__video_info vi;
    sl__clip_plan *p = malloc(sizeof *p); /* ~4 KiB of frame indices: off the caller's stack */
    if (!p) return SL_ENOMEM;
    rc = sl__clip_file(path, o, &f, &vi, p, errbuf, errlen);
    if (rc) {
        free(p);
        return rc;
    }
    if (rc == 0 && (!out || out_len < p->out_bytes)) {
        sl__msg(errbuf, errlen, "output buffer holds %zu bytes, %llu needed", out_len,
                (unsigned long long)p->out_bytes);
        rc = SL_EINVAL;
    }
    if (rc == 0) {
        sl__quota q = {p->quota, 0, 0, 0};
        rc = sl__video_decode(&f, &vi, p, &q, NULL, out, errbuf, errlen);
    }
    if (rc == 0 && clip) report(p, clip, clip_size);
    free(p);
    close(f.fd);
    return rc;
}
