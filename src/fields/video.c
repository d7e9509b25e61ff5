/*
 * The video kind: a clip of a video file through FFmpeg (src/format/
 * video.[ch]), uint8 [frames, 3, height, width] (RGB planes per frame).
 *
 * Options: "frames" (16), "stride" (2) or "fps" (resample to this rate
 * instead), "short" ("pad" | "loop" | "error": a clip longer than the
 * video repeats its last frame, wraps around, or is an error record),
 * the image crop options ("preset", "size" — default 112 —, "scale",
 * "ratio", "hflip", "crop_pct", "resize": one crop for every frame, drawn
 * once per clip), and limits checked from the stream headers before any
 * decoding: "max_frames", "max_seconds", "max_pixels" (per frame; default
 * the loader's max_pixels), "max_bytes" (default 4 GiB), "codecs" (an
 * allow-list, "h264,hevc,...").
 *
 * Memory: the plan bounds what the decode takes from the stream's
 * parameters (frame pool, FFmpeg's own); that is reserved in the budget
 * before decoding, and every FFmpeg object is freed on every path.
 *
 * GPU decode (decode="gpu"|"auto"): the planned clip is first offered to
 * the load's defer hook; the loader's GPU stage decodes it on NVDEC into
 * the field's device memory, or hands it back to be decoded here.
 */
#include <string.h>

#include "base/util.h"
#include "fields/field.h"
#include "fields/kind_util.h"

#define VIDEO_DEFAULT_SIZE 112
#define VIDEO_DEFAULT_MAX_BYTES ((uint64_t)4 << 30)

static int video_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    json_t *o = opts;
    static const char *const allowed[] = {"frames", "stride", "fps", "short", "preset", "size", "scale", "ratio",
                                          "hflip", "crop_pct", "resize", "max_frames", "max_seconds", "max_pixels",
                                          "max_bytes", "codecs", NULL};
    static const char *const shorts[] = {"pad", "loop", "error", NULL};
    __typeof__(f->u.video) *v = &f->u.video;
    uint64_t frames = 16, stride = 2, max_frames = 0, max_pixels = cfg->max_pixels, max_bytes = VIDEO_DEFAULT_MAX_BYTES;
    int shrt = SL_CLIP_PAD, rc;
    double fps = 0, max_seconds = 0;
    json_t *j;
    if ((rc = sl__opts_only(f, o, allowed, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "frames", 1, SL_CLIP_MAX_FRAMES, &frames, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "stride", 1, 1000000, &stride, err, errlen)) ||
        (rc = sl__opt_enum(f, o, "short", shorts, &shrt, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "max_frames", 1, UINT64_MAX >> 1, &max_frames, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "max_pixels", 1, UINT64_MAX >> 1, &max_pixels, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "max_bytes", 1, UINT64_MAX >> 1, &max_bytes, err, errlen)) ||
        (rc = sl__recipe_opts(f, o, cfg, VIDEO_DEFAULT_SIZE, &v->spec.recipe, err, errlen)))
        return rc;
    if ((j = json_object_get(o, "fps")) && (!json_is_number(j) || !((fps = json_number_value(j)) >= 0.001 && fps <= 1000))) {
        sl__msg(err, errlen, "field \"%s\": \"fps\" must be a number in 0.001..1000", f->name);
        return SL_EINVAL;
    }
    if ((j = json_object_get(o, "max_seconds")) &&
        (!json_is_number(j) || !((max_seconds = json_number_value(j)) > 0))) {
        sl__msg(err, errlen, "field \"%s\": \"max_seconds\" must be a number > 0", f->name);
        return SL_EINVAL;
    }
    if ((j = json_object_get(o, "codecs"))) {
        if (!json_is_string(j) || json_string_length(j) == 0 || json_string_length(j) >= sizeof v->codecs) {
            sl__msg(err, errlen, "field \"%s\": \"codecs\" must be a list like \"h264,hevc\" under %zu bytes", f->name,
                    sizeof v->codecs);
            return SL_EINVAL;
        }
        snprintf(v->codecs, sizeof v->codecs, "%s", json_string_value(j));
    }
    const sl__recipe *r = &v->spec.recipe;
    if (r->out_w > 4096 || r->out_h > 4096) {
        sl__msg(err, errlen, "field \"%s\": clip frames of %ux%u: at most 4096 a side", f->name, r->out_w, r->out_h);
        return SL_EINVAL;
    }
    v->spec.frames = (uint32_t)frames;
    v->spec.stride = (uint32_t)stride;
    v->spec.fps = fps;
    v->spec.short_clip = shrt;
    v->lim = (sl__video_limits){max_pixels, max_frames, max_bytes, max_seconds, v->codecs[0] ? v->codecs : NULL};
    f->dtype = SL_DTYPE_UINT8;
    f->ndim = 4;
    f->shape[0] = (int64_t)frames;
    f->shape[1] = 3;
    f->shape[2] = r->out_h;
    f->shape[3] = r->out_w;
    return 0;
}

static int video_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    (void)len;
    const __typeof__(f->u.video) *v = &f->u.video;
    sl__sample_file sf;
    int rc = sl__source_open_file(L->src, L->index, (uint32_t)f->col, L->elem, &sf, reason, rlen);
    if (rc) return rc;
    sl__video_info info;
    sl__clip_plan plan; /* ~4 KiB of frame indices: the worker's stack holds it */
    sl__rng r;
    int lost;
    if ((rc = sl__video_probe(&sf, &v->lim, &info, reason, rlen))) goto out;
    sl__rng_init(&r, L->seed ^ f->stream, L->epoch, L->index);
    if ((rc = sl__video_plan(&info, &v->spec, &r, &plan, reason, rlen))) goto out;
    if (plan.out_bytes != f->sample_bytes) { /* the spec fixes it: cannot differ */
        sl__msg(reason, rlen, "clip of %llu bytes for a slot of %llu", (unsigned long long)plan.out_bytes,
                (unsigned long long)f->sample_bytes);
        rc = SL_ESTATE;
        goto out;
    }
    if ((rc = sl__scratch_reserve(L->scratch, 0, plan.mem, &lost, reason, rlen))) goto out;
    /* the frame pool from the worker's decoder arena: its pages are the ones counted */
    sl__quota q;
    if ((rc = sl__decoder_quota(L->dec, sl__scratch_dec_room(L->scratch), &q, reason, rlen))) goto out;
    if (q.cap > plan.quota) q.cap = plan.quota; /* the rest of plan.mem is FFmpeg's own mallocs */
    /* the loader's GPU stage may decode it into the field's device memory */
    int taken = L->defer && L->defer->clip ? L->defer->clip(L->defer, f, &sf, &info, &plan, &q) : 0;
    if (taken < 0) {
        sl__msg(reason, rlen, "video decode cancelled");
        rc = taken;
    } else if (!taken) {
        rc = sl__video_decode(&sf, &info, &plan, &q, L->cancel, dst, reason, rlen);
    }
out:
    sl__sample_close(&sf);
    return rc;
}

/* The val preset takes the centred clip and the val crop: the file's alone.
 * (Its encoded bytes are not cached: FFmpeg reads the file itself.) */
static int video_fixed_output(const sl__field *f) { return f->u.video.spec.recipe.preset == SL_PRESET_VAL; }

const sl__kind sl__kind_video = {.name = "video", .id = SL_KIND_VIDEO, .value_type = SL__VAL_FILE,
                                 .media = SL__MEDIA_VIDEO, .parse = video_parse, .load = video_load,
                                 .fixed_output = video_fixed_output};
