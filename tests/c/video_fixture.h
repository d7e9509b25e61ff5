/*
 * Video test clips, header-only: tiny files made with the ffmpeg CLI in a
 * temporary folder (removed at exit), and helpers that run the module's
 * probe -> plan -> decode on them. A test calls vx_ready() first: it says
 * why and returns 0 when this build has no FFmpeg or there is no ffmpeg
 * CLI, and the test then passes as skipped.
 */
#ifndef SL_VIDEO_FIXTURE_H
#define SL_VIDEO_FIXTURE_H

#include "fixture.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "ops/ops.h"

static char vx_dir[256];

FX_FN int vx_ready(void) {
    if (!sl__video_available()) {
        printf("built without FFmpeg: skipped\n");
        return 0;
    }
    if (system("command -v ffmpeg >/dev/null 2>&1") != 0) {
        printf("no ffmpeg CLI to make test clips: skipped\n");
        return 0;
    }
    snprintf(vx_dir, sizeof vx_dir, "/tmp/sl-video-XXXXXX");
    CHECK(mkdtemp(vx_dir) != NULL);
    fx_track(vx_dir);
    return 1;
}

/* ffmpeg -nostdin -v error -y ARGS DIR/NAME; returns the path (static
 * buffer, one of 8 in turn). */
FX_FN const char *vx_make(const char *name, const char *args) {
    static char paths[8][320];
    static int turn;
    char *path = paths[turn++ % 8], cmd[2048];
    snprintf(path, sizeof paths[0], "%s/%s", vx_dir, name);
    snprintf(cmd, sizeof cmd, "ffmpeg -nostdin -v error -y %s '%s'", args, path);
    if (system(cmd) != 0) SL_FAIL("could not make %s: %s", name, cmd);
    return path;
}

/* The standard clip: 64x48, 25 fps, 2 s (50 frames), H.264 with B-frames,
 * a keyframe every 12 frames; moov at the end of the file. */
#define VX_SRC(size, rate, dur) "-f lavfi -i testsrc2=size=" size ":rate=" rate ":duration=" dur
#define VX_H264 "-c:v libx264 -preset ultrafast -g 12 -bf 2 -pix_fmt yuv420p"
FX_FN const char *vx_standard(void) { return vx_make("std.mp4", VX_SRC("64x48", "25", "2") " " VX_H264); }

FX_FN sl__sample_file vx_open(const char *path) {
    sl__sample_file f = {.fd = open(path, O_RDONLY | O_CLOEXEC)};
    struct stat st;
    if (f.fd < 0 || fstat(f.fd, &st) != 0) SL_FAIL("cannot open %s", path);
    f.size = (uint64_t)st.st_size;
    return f;
}

/* One clip through probe -> plan -> decode. */
typedef struct vx_clip {
    sl__video_info info;
    sl__clip_plan plan;
    uint8_t *out;  /* plan.out_bytes (+1 guard byte), freed by vx_free */
    sl__quota q;
    char why[256];
} vx_clip;

FX_FN sl__clip_spec vx_spec(uint32_t frames, uint32_t stride, uint32_t size, int preset) {
    sl__clip_spec s = {frames, stride, 0, SL_CLIP_PAD, {0}};
    CHECK_OK(sl__recipe_make(preset, size, NULL, 0, 0, &s.recipe, NULL, 0));
    return s;
}

/* Plan only: 0 or the probe's / plan's code. */
FX_FN int vx_plan(const sl__sample_file *f, const sl__clip_spec *spec, uint64_t index, vx_clip *c) {
    memset(c, 0, sizeof *c);
    int rc = sl__video_probe(f, NULL, &c->info, c->why, sizeof c->why);
    if (rc) return rc;
    sl__rng r;
    sl__rng_init(&r, 7, 0, index);
    return sl__video_plan(&c->info, spec, &r, &c->plan, c->why, sizeof c->why);
}

/* Plan and decode; the output has a guard byte after it that must survive;
 * every quota byte must be back after the decode, whatever it returned. */
FX_FN int vx_decode(const sl__sample_file *f, const sl__clip_spec *spec, uint64_t index, vx_clip *c) {
    int rc = vx_plan(f, spec, index, c);
    if (rc) return rc;
    c->out = malloc(c->plan.out_bytes + 1);
    CHECK(c->out != NULL);
    c->out[c->plan.out_bytes] = 0xA5;
    c->q = (sl__quota){c->plan.quota, 0, 0, 0};
    rc = sl__video_decode(f, &c->info, &c->plan, &c->q, NULL, c->out, c->why, sizeof c->why);
    CHECK_EQ(c->out[c->plan.out_bytes], 0xA5);
    CHECK_EQ(c->q.used, 0);
    CHECK_LE(c->q.peak, c->plan.quota);
    return rc;
}

FX_FN void vx_free(vx_clip *c) {
    free(c->out);
    c->out = NULL;
}

/* rc must be code and the reason must mention needle. */
#define CHECK_CODE(expr, code, why, needle)                                          \
    do {                                                                             \
        int rc2_ = (expr);                                                           \
        if (rc2_ != (code)) SL_FAIL("%s returned %d (%s), expected %d: %s", #expr, rc2_, sl_strerror(rc2_), (code), (why)); \
        CHECK_STR_CONTAINS((why), (needle));                                         \
    } while (0)

#endif
