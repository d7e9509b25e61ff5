/*
 * Video clips on the GPU path, the parts that run everywhere: the GPU
 * path's arithmetic on the CPU (ops/yuv.c: what the GPU writes, byte for
 * byte) against the CPU path's swscale clip within the documented
 * difference, on the same frames; the conversion itself; the sink path's
 * refusals and release; NVDEC's availability and refusals; the GPU video
 * engine without a GPU. The GPU's own cases (its clips equal to this
 * reference, device memory, hostile streams, the loader) are in
 * tests/python/test_video_gpu.py, which makes its clips with PyAV where
 * the GPU host has no ffmpeg CLI.
 */
#include "video_fixture.h"

#include "format/video_impl.h"
#include "gpu/video.h"

/* The documented bound (docs/video.md): per frame, mean absolute
 * difference between the GPU path's clip and the CPU path's. */
#define MEAN_BOUND 0.6 /* over every frame of a set of clips */
#define FRAME_BOUND 1.0 /* any one frame */

/* The CPU path's clip and the reference's, same plan; per-frame mean
 * abs differences accumulated. */
static void compare(const char *path, int preset, uint32_t size, uint64_t index, double *sum, double *worst,
                    uint32_t *frames) {
    sl__sample_file f = vx_open(path);
    sl__clip_spec spec = vx_spec(8, 3, size, preset);
    vx_clip c;
    CHECK_OK(vx_decode(&f, &spec, index, &c));
    uint8_t *ref = malloc(c.plan.out_bytes);
    CHECK(ref != NULL);
    sl__clip_ref r;
    sl__quota q = {c.plan.quota, 0, 0, 0};
    CHECK_OK(sl__clip_ref_init(&r, &c.info, &c.plan, &q, ref, c.why, sizeof c.why));
    q.cap += r.mem;
    int rc = sl__video_decode_into(&f, &c.info, &c.plan, &q, NULL, NULL, &r.sink, c.why, sizeof c.why);
    if (rc) SL_FAIL("%s: %s", path, c.why);
    CHECK_EQ(q.used, 0);
    uint64_t fb = (uint64_t)3 * size * size;
    for (uint32_t t = 0; t < c.plan.frames; t++) {
        double s = 0;
        for (uint64_t i = 0; i < fb; i++) s += abs((int)c.out[t * fb + i] - (int)ref[t * fb + i]);
        s /= (double)fb;
        *sum += s;
        if (s > *worst) *worst = s;
        ++*frames;
    }
    free(ref);
    vx_free(&c);
    close(f.fd);
}

TEST(reference_within_the_documented_difference) {
    if (!vx_ready()) return;
    const char *clips[5];
    clips[0] = vx_make("sharp.mp4", VX_SRC("320x240", "25", "2") " " VX_H264);
    clips[1] = vx_make("fractal.mp4", "-f lavfi -i mandelbrot=size=320x240:rate=25 -t 2 " VX_H264);
    clips[2] = vx_make("odd.mp4", VX_SRC("66x50", "25", "2") " " VX_H264);
    clips[3] = vx_make("full.mp4", VX_SRC("160x120", "25", "2") " -c:v libx264 -preset ultrafast -g 12 -bf 2 "
                                                               "-pix_fmt yuvj420p");
    clips[4] = vx_make("bt709.mp4", VX_SRC("160x120", "25", "2") " " VX_H264
                                    " -colorspace bt709 -color_primaries bt709 -color_trc bt709");
    for (int preset = 0; preset < 2; preset++) {
        double sum = 0, worst = 0;
        uint32_t frames = 0;
        for (int k = 0; k < 5; k++)
            for (uint64_t index = 0; index < 6; index++)
                compare(clips[k], preset ? SL_PRESET_VAL : SL_PRESET_TRAIN, k == 2 ? 32 : 112, index, &sum, &worst,
                        &frames);
        printf("%s: mean abs per frame %.3f over %u frames, worst frame %.3f\n", preset ? "val" : "train",
               sum / frames, frames, worst);
        CHECK(sum / frames <= MEAN_BOUND);
        CHECK(worst <= FRAME_BOUND);
    }
}

TEST(reference_frames_are_the_cpu_paths) {
    if (!vx_ready()) return;
    /* testsrc2 draws a moving pattern and a frame counter: every frame differs */
    sl__sample_file f = vx_open(vx_make("count.mp4", VX_SRC("160x120", "25", "4") " " VX_H264));
    for (uint64_t index = 0; index < 4; index++) {
        sl__clip_spec spec = vx_spec(12, 3, 64, SL_PRESET_TRAIN);
        vx_clip c;
        CHECK_OK(vx_decode(&f, &spec, index, &c));
        uint8_t *ref = malloc(c.plan.out_bytes);
        sl__clip_ref r;
        sl__quota q = {c.plan.quota, 0, 0, 0};
        CHECK_OK(sl__clip_ref_init(&r, &c.info, &c.plan, &q, ref, c.why, sizeof c.why));
        q.cap += r.mem;
        CHECK_OK(sl__video_decode_into(&f, &c.info, &c.plan, &q, NULL, NULL, &r.sink, c.why, sizeof c.why));
        uint64_t fb = 3 * 64 * 64;
        for (uint32_t t = 0; t < 12; t++) { /* the CPU frame nearest to reference frame t is frame t */
            double best = 1e30;
            uint32_t at = 0;
            for (uint32_t u = 0; u < 12; u++) {
                double s = 0;
                for (uint64_t i = 0; i < fb; i++) s += abs((int)c.out[u * fb + i] - (int)ref[t * fb + i]);
                if (s < best) best = s, at = u;
            }
            CHECK_EQ(at, t);
        }
        free(ref);
        vx_free(&c);
    }
    close(f.fd);
}

/* One pixel through sl__yuv_rgb. */
static void yuv_pixel(uint8_t y, uint8_t u, uint8_t v, int cs, int full, uint8_t rgb[3]) {
    sl__yuv_coefs c;
    sl__yuv_coefs_of(cs, full, &c);
    sl__yuv_rgb(&y, &u, &v, 1, &c, &rgb[0], &rgb[1], &rgb[2]);
}

TEST(conversion_follows_the_streams_matrix_and_range) {
    uint8_t p[3], q[3];
    yuv_pixel(235, 128, 128, 2, 0, p); /* limited range white */
    CHECK(p[0] == 255 && p[1] == 255 && p[2] == 255);
    yuv_pixel(16, 128, 128, 2, 0, p);
    CHECK(p[0] == 0 && p[1] == 0 && p[2] == 0);
    yuv_pixel(126, 128, 128, 2, 0, p); /* mid grey: (126 - 16) x 255 / 219 = 128.1 */
    CHECK(p[0] == 128 && p[1] == 128 && p[2] == 128);
    yuv_pixel(255, 128, 128, 2, 1, p); /* full range */
    CHECK(p[0] == 255 && p[1] == 255 && p[2] == 255);
    yuv_pixel(128, 128, 128, 2, 1, p);
    CHECK(p[0] == 128 && p[1] == 128 && p[2] == 128);
    /* limited-range red: BT.601 (Y 81, U 90, V 240), BT.709 (Y 63, U 102, V 240) */
    yuv_pixel(81, 90, 240, 2, 0, p);
    CHECK(p[0] >= 253 && p[1] <= 2 && p[2] <= 2);
    yuv_pixel(63, 102, 240, 1, 0, p);
    CHECK(p[0] >= 253 && p[1] <= 2 && p[2] <= 2);
    yuv_pixel(63, 102, 240, 2, 0, q); /* the same YUV read with BT.601's matrix */
    CHECK(abs((int)p[0] - (int)q[0]) >= 10);
    /* swscale's table rules: YCgCo and out of range fall back to BT.601 */
    sl__yuv_coefs a, b;
    sl__yuv_coefs_of(8, 0, &a);
    sl__yuv_coefs_of(2, 0, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    sl__yuv_coefs_of(99, 0, &a);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    CHECK_EQ(b.crv, 104597);
    CHECK_EQ(b.cy, 76309); /* 65536 x 255 / 219 */
}

TEST(planes_are_packed_as_the_resize_takes_them) {
    /* a 6x4 frame: luma as (Y, Y, Y), chroma samples as (U, V, V), the
     * same from three planes (the software decoder) and from NV12 (NVDEC) */
    uint8_t Y[6 * 4], U[3 * 2], V[3 * 2], UV[6 * 2];
    for (int i = 0; i < 24; i++) Y[i] = (uint8_t)(10 + i);
    for (int i = 0; i < 6; i++) U[i] = (uint8_t)(100 + i), V[i] = (uint8_t)(200 + i);
    for (int i = 0; i < 6; i++) UV[2 * i] = U[i], UV[2 * i + 1] = V[i];
    sl__video_frame p3 = {{(uintptr_t)Y, (uintptr_t)U, (uintptr_t)V}, {6, 3, 3}, 6, 4, SL__FRAME_YUV420P, 2, 0};
    sl__video_frame nv = {{(uintptr_t)Y, (uintptr_t)UV, 0}, {6, 6, 0}, 6, 4, SL__FRAME_NV12, 2, 0};
    uint8_t a[18], b[18];
    sl__yuv_pack_row(&p3, 0, 2, 3, 4, a); /* luma row 3, columns 2..5 */
    for (int k = 0; k < 4; k++) CHECK(a[3 * k] == Y[3 * 6 + 2 + k] && a[3 * k + 1] == a[3 * k] && a[3 * k + 2] == a[3 * k]);
    sl__yuv_pack_row(&p3, 1, 1, 1, 2, a); /* chroma row 1, samples 1..2 */
    CHECK(a[0] == U[4] && a[1] == V[4] && a[2] == V[4] && a[3] == U[5] && a[4] == V[5]);
    sl__yuv_pack_row(&nv, 1, 1, 1, 2, b);
    CHECK(memcmp(a, b, 6) == 0);
    sl__yuv_pack_row(&nv, 0, 2, 3, 4, b);
    sl__yuv_pack_row(&p3, 0, 2, 3, 4, a);
    CHECK(memcmp(a, b, 12) == 0);
}

TEST(chroma_box_is_swscales) {
    /* odd boxes: ceil(w/2) x ceil(h/2) chroma samples from the box's
     * origin (moved down to even), as swscale reads the box */
    sl__video_info info;
    memset(&info, 0, sizeof info);
    info.coded_width = info.width = 320, info.coded_height = info.height = 240;
    sl__clip_plan p;
    memset(&p, 0, sizeof p);
    p.frames = 1, p.out_w = p.out_h = p.scaled_w = p.scaled_h = 112;
    p.box[0] = 37, p.box[1] = 8, p.box[2] = 81, p.box[3] = 79;
    sl__clip_geom g;
    CHECK_OK(sl__clip_geometry(&info, &p, &g, NULL, 0));
    CHECK(g.x == 36 && g.y == 8 && g.w == 81 && g.h == 79);
    CHECK(g.cx == 18 && g.cy == 4 && g.cw == 41 && g.ch == 40);
    CHECK(g.ax.in0 == 36 && g.ax.in1 == 117 && g.bx.in0 == 18 && g.bx.in1 == 59);
    CHECK(g.by.total == 112 && g.by.n == 112 && g.by.first == 0);
    p.box[0] = 300, p.box[2] = 21; /* past the frame */
    char why[120];
    CHECK_EQ(sl__clip_geometry(&info, &p, &g, why, sizeof why), SL_EINVAL);
}

TEST(reference_refuses_what_it_cannot_take_and_releases) {
    if (!vx_ready()) return;
    /* 4:4:4 frames: the sink path takes 8-bit 4:2:0 only */
    sl__sample_file f = vx_open(vx_make("444.mp4", VX_SRC("64x48", "25", "1") " -c:v libx264 -preset ultrafast "
                                                                            "-pix_fmt yuv444p"));
    sl__clip_spec spec = vx_spec(4, 2, 32, SL_PRESET_TRAIN);
    vx_clip c;
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    uint8_t *ref = malloc(c.plan.out_bytes);
    sl__clip_ref r;
    sl__quota q = {c.plan.quota, 0, 0, 0};
    CHECK_OK(sl__clip_ref_init(&r, &c.info, &c.plan, &q, ref, c.why, sizeof c.why));
    q.cap += r.mem;
    CHECK_CODE(sl__video_decode_into(&f, &c.info, &c.plan, &q, NULL, NULL, &r.sink, c.why, sizeof c.why),
               SL_EUNSUPPORTED, c.why, "for the CPU: frames in yuv444p");
    CHECK_EQ(q.used, 0);
    /* rotated: the geometry refuses */
    sl__video_info rot = c.info;
    rot.rotation = 90;
    CHECK_CODE(sl__clip_ref_init(&r, &rot, &c.plan, &q, ref, c.why, sizeof c.why), SL_EUNSUPPORTED, c.why, "rotated");
    free(ref);
    close(f.fd);
}

TEST(hw_available_says_why) {
    char why[256] = "";
    int ok = sl__video_hw_available(why, sizeof why);
    printf("NVDEC through FFmpeg: %d%s%s\n", ok, ok ? "" : ": ", why);
    if (!ok) CHECK(strstr(why, "libnvcuvid.so.1") || strstr(why, "without NVDEC") || strstr(why, "not built in"));
    char why2[256] = "";
    ok = sl__gpu_video_available(why2, sizeof why2);
    printf("GPU video engine: %d%s%s\n", ok, ok ? "" : ": ", why2);
    if (!ok) CHECK(strlen(why2) > 10);
}

TEST(hw_takes_refuses_what_the_cpu_must_take) {
    if (!vx_ready()) return;
    char why[256];
    sl__sample_file f = vx_open(vx_standard());
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 32, SL_PRESET_TRAIN);
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    close(f.fd);
    int h264 = sl__video_hw_takes(&c.info, why, sizeof why);
    if (!h264) { /* an FFmpeg without nvdec refuses every stream, and says so */
        CHECK_STR_CONTAINS(why, "no NVDEC decoding of h264");
        printf("SKIP: %s\n", why);
        return;
    }
    sl__video_info rot = c.info;
    rot.rotation = 270;
    CHECK(!sl__video_hw_takes(&rot, why, sizeof why));
    CHECK_STR_CONTAINS(why, "for the CPU: rotated");
    f = vx_open(vx_make("444.mp4", VX_SRC("64x48", "25", "1") " -c:v libx264 -preset ultrafast -pix_fmt yuv444p"));
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    close(f.fd);
    CHECK(!sl__video_hw_takes(&c.info, why, sizeof why));
    CHECK_STR_CONTAINS(why, "h264 profile 244"); /* High 4:4:4 from the avcC record */
    sl__video_info none = c.info; /* a codec no decoder of this FFmpeg takes through NVDEC */
    none.codec_id = 0;
    snprintf(none.codec, sizeof none.codec, "none");
    CHECK(!sl__video_hw_takes(&none, why, sizeof why));
    CHECK_STR_CONTAINS(why, "no NVDEC decoding of none");
}

TEST(hw_device_bound_follows_the_level) {
    sl__video_info info;
    memset(&info, 0, sizeof info);
    info.coded_width = 1920, info.coded_height = 1080, info.codec_id_kind = SL__VC_H264, info.level = 40;
    uint64_t l40 = sl__video_hw_device_bound(&info); /* 4 references at 1080p: 2 x 4 + 5 surfaces */
    info.level = 51;
    uint64_t l51 = sl__video_hw_device_bound(&info); /* 16 */
    CHECK(l40 < l51);
    uint64_t frame = 1920ull * 1088 * 3 / 2;
    CHECK(l40 >= 13 * 2 * frame && l40 <= 13 * 2 * frame + (16ull << 20));
    CHECK(l51 >= 37 * 2 * frame);
}

TEST(gpu_video_engine_refuses_bad_config_first) {
    sl__budget host;
    CHECK_OK(sl__budget_init(&host, 1ull << 30));
    sl__gpu_video *v = (sl__gpu_video *)1;
    char err[200] = "";
    sl__gpu_video_config c = {0, 256ull << 20, 0, 64ull << 20, 1};
    CHECK_EQ(sl__gpu_video_new(&c, &host, &v, err, sizeof err), SL_EINVAL);
    CHECK(v == NULL);
    CHECK_STR_CONTAINS(err, "0 NVDEC sessions");
    c.sessions = 4, c.pool_bytes = 1 << 20;
    CHECK_EQ(sl__gpu_video_new(&c, &host, &v, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "below the minimum");
    CHECK_EQ(atomic_load(&host.used), 0);
    CHECK_EQ(sl__gpu_video_device_bytes(&c), (1 << 20) + 4 * (64ull << 20));
}

TEST(gpu_video_engine_without_a_gpu_fails_cleanly) {
    char why[256] = "";
    if (sl__gpu_video_available(why, sizeof why)) {
        printf("SKIP: a GPU with NVDEC is present (this case is for machines without one)\n");
        return;
    }
    sl__budget host;
    CHECK_OK(sl__budget_init(&host, 1ull << 30));
    sl__gpu_video *v = NULL;
    char err[256] = "";
    sl__gpu_video_config c = {0, 256ull << 20, 4, 64ull << 20, 1};
    CHECK_EQ(sl__gpu_video_new(&c, &host, &v, err, sizeof err), SL_EUNSUPPORTED);
    CHECK(v == NULL);
    CHECK(strcmp(err, why) == 0);
    CHECK_EQ(atomic_load(&host.used), 0);
    sl__gpu_video_free(NULL);
    sl__video_hw *h = (sl__video_hw *)1;
    CHECK_EQ(sl__video_hw_open(NULL, NULL, 1 << 30, 1, &h, err, sizeof err), SL_EUNSUPPORTED);
    CHECK(h == NULL);
    sl__video_hw_close(NULL);
}
