/*
 * Single video clips without a loader (sl_video_probe, sl_video_decode):
 * the same probe, plan and decode a worker runs for a `kind: "video"`
 * field, on a file named by path. For tests, tools and inspection.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/util.h"
#include "../format/video.h"
#include "ops.h"

#define DEFAULT_MAX_PIXELS ((uint64_t)4096 * 2304)
#define DEFAULT_MAX_FRAMES ((uint64_t)1000000)
#define DEFAULT_MAX_BYTES ((uint64_t)4 << 30)

void sl_video_opts_init(sl_video_opts *o) {
    memset(o, 0, sizeof *o);
    o->frames = 16;
    o->stride = 2;
    o->size = 112;
    o->preset = SL_PRESET_TRAIN;
    o->short_clip = SL_CLIP_PAD;
    o->max_pixels = DEFAULT_MAX_PIXELS;
    o->max_frames = DEFAULT_MAX_FRAMES;
    o->max_bytes = DEFAULT_MAX_BYTES;
}

/* Open path as a sample: its whole file. */
static int open_file(const char *path, sl__sample_file *f, char *err, size_t errlen) {
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
    sl__video_limits lim = {o->max_pixels, o->max_frames, o->max_bytes, o->max_seconds, o->codecs};
    int rc = open_file(path, f, err, errlen);
    if (rc) return rc;
    rc = sl__video_probe(f, &lim, vi, err, errlen);
    if (rc) {
        close(f->fd);
        f->fd = -1;
    }
    return rc;
}

int sl_video_probe(const char *path, const sl_video_opts *o, sl_video_info *info, char *errbuf, size_t errlen) {
    sl_video_opts def;
    if (!o) sl_video_opts_init(&def), o = &def;
    if (!path || !info) return SL_EINVAL;
    sl__sample_file f;
    sl__video_info vi;
    int rc = probe(path, o, &f, &vi, errbuf, errlen);
    if (rc) return rc;
    close(f.fd);
    memset(info, 0, sizeof *info);
    info->width = vi.width, info->height = vi.height, info->rotation = vi.rotation;
    info->fps = vi.fps, info->duration = vi.duration, info->frames = vi.frames;
    memcpy(info->codec, vi.codec, sizeof info->codec);
    return 0;
}

static void report(const sl__clip_plan *p, sl_video_clip *clip) {
    memcpy(clip->box, p->box, sizeof clip->box);
    clip->flip = p->flip;
    clip->scaled_w = p->scaled_w, clip->scaled_h = p->scaled_h;
    clip->win_x = p->win_x, clip->win_y = p->win_y;
    if (clip->frame_index) memcpy(clip->frame_index, p->frame, p->frames * sizeof *clip->frame_index);
}

int sl_video_decode(const char *path, const sl_video_opts *o, void *out, size_t out_len, sl_video_clip *clip,
                    char *errbuf, size_t errlen) {
    sl_video_opts def;
    if (!o) sl_video_opts_init(&def), o = &def;
    if (!path) return SL_EINVAL;
    sl__sample_file f;
    sl__video_info vi;
    int rc = probe(path, o, &f, &vi, errbuf, errlen);
    if (rc) return rc;
    sl__clip_spec spec = {o->frames, o->stride, o->fps, o->size, o->preset, o->short_clip};
    sl__rng r;
    sl__rng_init(&r, o->seed, o->epoch, o->index);
    sl__clip_plan *p = malloc(sizeof *p); /* ~4 KiB of frame indices: off the caller's stack */
    if (!p) rc = SL_ENOMEM;
    if (rc == 0) rc = sl__video_plan(&vi, &spec, &r, p, errbuf, errlen);
    if (rc == 0 && (!out || out_len < p->out_bytes)) {
        sl__msg(errbuf, errlen, "output buffer holds %zu bytes, %llu needed", out_len,
                (unsigned long long)p->out_bytes);
        rc = SL_EINVAL;
    }
    if (rc == 0) {
        sl__quota q = {p->quota, 0, 0, 0};
        rc = sl__video_decode(&f, &vi, p, &q, NULL, out, errbuf, errlen);
    }
    if (rc == 0 && clip) report(p, clip);
    free(p);
    close(f.fd);
    return rc;
}
