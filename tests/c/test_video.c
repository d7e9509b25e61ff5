/*
 * Video clips (src/format/video*.c): headers, frame indices, crops,
 * determinism, every odd or hostile stream, limits, memory and release on
 * every path. Decoded pixels are compared with ffmpeg's own decode in
 * tests/python/test_video.py; the heap bound is in test_video_mem.c.
 */
#include "video_fixture.h"

#include <dirent.h>
#include <math.h>
#include <stdatomic.h>

#include "format/video.h"
#include "source/folder.h"
#include "source/source.h"

/* ---- headers -------------------------------------------------------------- */

TEST(probe_reads_headers) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__video_info info;
    char why[256] = "";
    CHECK_OK(sl__video_probe(&f, NULL, &info, why, sizeof why));
    CHECK_EQ(info.width, 64);
    CHECK_EQ(info.height, 48);
    CHECK_EQ(info.rotation, 0);
    CHECK_EQ(info.frames, 50);
    CHECK(info.fps == 25.0);
    CHECK(info.duration > 1.99 && info.duration < 2.01);
    CHECK(strcmp(info.codec, "h264") == 0);
    CHECK_EQ(info.profile, 77); /* Main (B-frames), read from the avcC record */
    close(f.fd);
}

TEST(probe_rotation_swaps_displayed_size) {
    if (!vx_ready()) return;
    const char *src = vx_standard();
    char args[512];
    snprintf(args, sizeof args, "-i '%s' -c copy -metadata:s:v:0 rotate=90", src);
    sl__sample_file f = vx_open(vx_make("rot.mp4", args));
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 24, SL_PRESET_TRAIN);
    CHECK_OK(vx_decode(&f, &spec, 3, &c));
    CHECK_EQ(c.info.width, 48);
    CHECK_EQ(c.info.height, 64);
    CHECK(c.info.rotation == 90 || c.info.rotation == 270);
    CHECK_LE(c.plan.box[0] + c.plan.box[2], 48); /* the crop lives in displayed pixels */
    CHECK_LE(c.plan.box[1] + c.plan.box[3], 64);
    vx_free(&c);
    close(f.fd);
}

/* ---- frame indices ----------------------------------------------------------- */

TEST(train_indices_are_a_seeded_offset) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(8, 3, 32, SL_PRESET_TRAIN); /* span 22 of 50 frames */
    int seen[50] = {0}, distinct = 0;
    for (uint64_t i = 0; i < 40; i++) {
        vx_clip a, b;
        CHECK_OK(vx_plan(&f, &spec, i, &a));
        CHECK_OK(vx_plan(&f, &spec, i, &b));
        CHECK(memcmp(&a.plan, &b.plan, sizeof a.plan) == 0); /* (seed, epoch, index) decide it */
        int64_t first = a.plan.frame[0];
        CHECK(first >= 0 && first <= 50 - 22);
        for (uint32_t k = 0; k < 8; k++) CHECK_EQ(a.plan.frame[k], first + 3 * k);
        distinct += !seen[first]++;
    }
    CHECK(distinct >= 10);
    close(f.fd);
}

TEST(val_clip_is_centred) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(8, 3, 40, SL_PRESET_VAL);
    vx_clip c;
    CHECK_OK(vx_plan(&f, &spec, 5, &c));
    CHECK_EQ(c.plan.frame[0], (50 - 22) / 2);
    CHECK_EQ(c.plan.frame[7], (50 - 22) / 2 + 21);
    CHECK_EQ(c.plan.box[2], 64); /* the whole frame, short side to 40*256/224 = 45 */
    CHECK_EQ(c.plan.scaled_h, 45);
    CHECK_EQ(c.plan.scaled_w, 60);
    CHECK_EQ(c.plan.win_x, 10);
    CHECK_EQ(c.plan.win_y, 2);
    CHECK_EQ(c.plan.flip, 0);
    close(f.fd);
}

TEST(fps_resampling_indices) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(6, 1, 16, SL_PRESET_VAL);
    spec.fps = 12.5; /* every second frame of 25 fps */
    vx_clip c;
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    for (uint32_t k = 1; k < 6; k++) CHECK_EQ(c.plan.frame[k] - c.plan.frame[0], 2 * k);
    spec.fps = 50; /* twice the rate: each frame twice */
    CHECK_OK(vx_decode(&f, &spec, 0, &c));
    uint64_t fb = 3 * 16 * 16;
    for (uint32_t k = 0; k < 6; k++) CHECK_EQ(c.plan.frame[k] - c.plan.frame[0], k / 2);
    CHECK(memcmp(c.out, c.out + fb, fb) == 0);
    CHECK(memcmp(c.out + fb, c.out + 2 * fb, fb) != 0);
    vx_free(&c);
    close(f.fd);
}

/* ---- clips longer than the video -------------------------------------------- */

TEST(short_video_pads_with_last_frame) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(30, 2, 16, SL_PRESET_TRAIN); /* needs 59 frames of 50 */
    vx_clip c;
    CHECK_OK(vx_decode(&f, &spec, 1, &c));
    uint64_t fb = 3 * 16 * 16;
    for (uint32_t k = 0; k < 30; k++) CHECK_EQ(c.plan.frame[k], k < 25 ? 2 * k : 49);
    for (uint32_t k = 26; k < 30; k++) CHECK(memcmp(c.out + 25 * fb, c.out + k * fb, fb) == 0);
    vx_free(&c);
    close(f.fd);
}

TEST(short_video_loops) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(30, 2, 16, SL_PRESET_TRAIN);
    spec.short_clip = SL_CLIP_LOOP;
    vx_clip c;
    CHECK_OK(vx_decode(&f, &spec, 1, &c));
    uint64_t fb = 3 * 16 * 16;
    for (uint32_t k = 0; k < 30; k++) CHECK_EQ(c.plan.frame[k], (2 * k) % 50);
    CHECK(memcmp(c.out + 25 * fb, c.out, fb) == 0); /* frame 50 wraps to frame 0 */
    vx_free(&c);
    close(f.fd);
}

TEST(short_video_error) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(30, 2, 16, SL_PRESET_TRAIN);
    spec.short_clip = SL_CLIP_ERROR;
    vx_clip c;
    CHECK_CODE(vx_plan(&f, &spec, 1, &c), SL_ELIMIT, c.why, "clip needs 59 frames, the video has 50");
    close(f.fd);
}

TEST(bad_spec_is_einval) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    vx_clip c;
    sl__clip_spec spec = vx_spec(0, 2, 16, SL_PRESET_TRAIN);
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_EINVAL, c.why, "clip of 0 frames");
    spec = vx_spec(4, 0, 16, SL_PRESET_TRAIN);
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_EINVAL, c.why, "stride 0");
    spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    spec.recipe.out_w = 0; /* a recipe sl__recipe_make would refuse */
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_EINVAL, c.why, "clip output 0x16");
    close(f.fd);
}

/* ---- determinism ------------------------------------------------------------------ */

TEST(same_plan_same_bytes) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(8, 2, 32, SL_PRESET_TRAIN);
    vx_clip a, b, other;
    CHECK_OK(vx_decode(&f, &spec, 11, &a));
    CHECK_OK(vx_decode(&f, &spec, 11, &b));
    CHECK(memcmp(a.out, b.out, a.plan.out_bytes) == 0);
    CHECK_OK(vx_decode(&f, &spec, 12, &other));
    CHECK(memcmp(a.out, other.out, a.plan.out_bytes) != 0);
    uint64_t fb = 3 * 32 * 32; /* the picture moves: consecutive clip frames differ */
    for (uint32_t k = 0; k + 1 < 8; k++) CHECK(memcmp(a.out + k * fb, a.out + (k + 1) * fb, fb) != 0);
    vx_free(&a), vx_free(&b), vx_free(&other);
    close(f.fd);
}

/* 3 s of 64x48 H.264 with B-frames: x264's B-pyramid in a GOP of 50, and
 * an open GOP of 12 (its keyframes are not IDR pictures). */
static const char *bpyramid_clip(void) {
    return vx_make("bpyr.mp4", VX_SRC("64x48", "25", "3") " -c:v libx264 -preset medium -g 50 -bf 3 -pix_fmt yuv420p");
}
static const char *open_gop_clip(void) {
    return vx_make("open.mp4", VX_SRC("64x48", "25", "3") " -c:v libx264 -preset medium -g 12 -bf 2 -pix_fmt yuv420p "
                                                           "-x264-params open-gop=1");
}

/* Strided targets in a clip with non-reference B-frames: frames no target
 * shows are skipped, and each target is the frame a stride-1 clip over the
 * same span gives (where every frame of the span is a target, so none in
 * it is skipped). */
TEST(nonref_frames_no_target_shows_are_skipped) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(bpyramid_clip());
    sl__clip_spec spec = vx_spec(6, 4, 24, SL_PRESET_VAL), every = vx_spec(21, 1, 24, SL_PRESET_VAL);
    vx_clip strided, all;
    uint64_t before = sl__video_skips_asked();
    CHECK_OK(vx_decode(&f, &spec, 0, &strided));
    CHECK(sl__video_skips_asked() > before);
    CHECK_OK(vx_decode(&f, &every, 0, &all));
    CHECK_EQ(all.plan.frame[0] + 20, all.plan.frame[20]);
    uint64_t fb = 3 * 24 * 24;
    for (uint32_t k = 0; k < 6; k++) {
        uint32_t at = strided.plan.frame[k] - all.plan.frame[0];
        CHECK(at < 21);
        CHECK(memcmp(strided.out + k * fb, all.out + at * fb, fb) == 0);
    }
    /* Frame times that are not the packets' (guessed): the skips made
     * before it showed are undone by a pass without, the bytes the same. */
    vx_clip unsure;
    sl__video_distrust_times(1);
    CHECK_OK(vx_decode(&f, &spec, 0, &unsure));
    sl__video_distrust_times(0);
    CHECK(memcmp(unsure.out, strided.out, strided.plan.out_bytes) == 0);
    vx_free(&strided), vx_free(&all), vx_free(&unsure);
    close(f.fd);
}

/* Clip `index` of f decoded as the module does it and again with a test
 * hook on (hook(1) ... hook(0)): the same bytes, else the failure says
 * `what` with the clip's frames. */
static void same_bytes_with(void (*hook)(int), const char *path, const sl__sample_file *f, const sl__clip_spec *spec,
                            int s, uint64_t index, const char *what) {
    vx_clip a, b;
    CHECK_OK(vx_decode(f, spec, index, &a));
    hook(1);
    int rc = vx_decode(f, spec, index, &b);
    hook(0);
    CHECK_OK(rc);
    if (memcmp(a.out, b.out, a.plan.out_bytes) != 0)
        SL_FAIL("%s, spec %d, clip %llu (frames %lld..%lld): %s", path, s, (unsigned long long)index,
                (long long)a.plan.frame[0], (long long)a.plan.frame[a.plan.frames - 1], what);
    vx_free(&a), vx_free(&b);
}

/* A pass stops reading at the first packet decoded after the last
 * target's time and drains the decoder: the same bytes as reading on until
 * a frame shown after it comes out, on B-pyramid, open-GOP and other
 * streams at many offsets, train and val, and in containers whose packets
 * may lack a decoding time (mkv: read on where so). */
TEST(early_end_gives_the_same_bytes) {
    if (!vx_ready()) return;
    const char *paths[4] = {
        bpyramid_clip(),
        open_gop_clip(),
        vx_make("bpyr.mkv", VX_SRC("64x48", "25", "3") " -c:v libx264 -preset veryfast -g 25 -bf 3 -pix_fmt yuv420p"),
        vx_standard()};
    sl__clip_spec specs[4] = {vx_spec(16, 2, 24, SL_PRESET_TRAIN), vx_spec(6, 3, 24, SL_PRESET_TRAIN),
                              vx_spec(9, 1, 24, SL_PRESET_TRAIN), vx_spec(8, 2, 24, SL_PRESET_VAL)};
    uint64_t e0 = sl__video_early_ends();
    for (int p = 0; p < 4; p++) {
        sl__sample_file f = vx_open(paths[p]);
        for (int s = 0; s < 4; s++)
            for (uint64_t index = 0; index < (s == 3 ? 1u : 12u); index++)
                same_bytes_with(sl__video_no_early_end, paths[p], &f, &specs[s], s, index,
                                "the early end changed the bytes");
        close(f.fd);
    }
    printf("passes ended early: %llu\n", (unsigned long long)(sl__video_early_ends() - e0));
    CHECK(sl__video_early_ends() > e0);
}

/* Passes that start without a flush (an NVDEC session's H.264 decoder,
 * whose flush makes a new NVDEC decoder): the second pass of a clip
 * (frame times distrusted after skips) starts at its IDR keyframe with the
 * first pass's reordered frames still in the decoder, and the bytes are
 * the flushed decoder's; a pass after a drain (targets at the stream's
 * end) or at a keyframe that is no IDR picture (open GOP) is flushed. */
TEST(passes_without_a_flush_give_the_same_bytes) {
    if (!vx_ready()) return;
    const char *paths[3] = {
        bpyramid_clip(),
        open_gop_clip(),
        vx_standard()};
    sl__clip_spec specs[3] = {vx_spec(6, 4, 24, SL_PRESET_VAL), vx_spec(8, 2, 24, SL_PRESET_TRAIN),
                              vx_spec(16, 3, 24, SL_PRESET_TRAIN)};
    uint64_t r0, f0, r1, f1;
    sl__video_soft_counts(&r0, &f0);
    sl__video_distrust_times(1);
    for (int p = 0; p < 3; p++) {
        sl__sample_file f = vx_open(paths[p]);
        for (int s = 0; s < 3; s++)
            for (uint64_t index = 0; index < 6; index++)
                same_bytes_with(sl__video_soft_seeks, paths[p], &f, &specs[s], s, index,
                                "the bytes differ without a flush");
        close(f.fd);
    }
    sl__video_distrust_times(0);
    sl__video_soft_counts(&r1, &f1);
    printf("passes without a flush %llu, flushed %llu\n", (unsigned long long)(r1 - r0), (unsigned long long)(f1 - f0));
    CHECK(r1 > r0);
    CHECK(f1 > f0);
}

/* The moov atom after the media data (no faststart), or before it: the
 * same frames. */
TEST(moov_at_end_decodes_the_same) {
    if (!vx_ready()) return;
    const char *end = vx_standard();
    char args[512];
    snprintf(args, sizeof args, "-i '%s' -c copy -movflags +faststart", end);
    const char *front = vx_make("front.mp4", args);
    sl__sample_file fe = vx_open(end), ff = vx_open(front);
    sl__clip_spec spec = vx_spec(6, 3, 24, SL_PRESET_TRAIN);
    vx_clip a, b;
    CHECK_OK(vx_decode(&fe, &spec, 4, &a));
    CHECK_OK(vx_decode(&ff, &spec, 4, &b));
    CHECK(memcmp(a.out, b.out, a.plan.out_bytes) == 0);
    vx_free(&a), vx_free(&b);
    close(fe.fd), close(ff.fd);
}

/* A sample that is a byte range of a larger file (a tar member): only the
 * range is read. */
TEST(byte_range_member) {
    if (!vx_ready()) return;
    const char *clip = vx_standard();
    sl__sample_file whole = vx_open(clip);
    uint8_t *bytes = malloc(whole.size);
    CHECK(bytes && pread(whole.fd, bytes, whole.size, 0) == (ssize_t)whole.size);
    char path[320];
    snprintf(path, sizeof path, "%s/member.tar", vx_dir);
    FILE *o = fopen(path, "wb");
    CHECK(o != NULL);
    for (int i = 0; i < 1000; i++) fputs("junk", o); /* 4000 bytes before */
    CHECK_EQ(fwrite(bytes, 1, whole.size, o), whole.size);
    fwrite(bytes, 1, 4000, o); /* another clip's bytes after */
    fclose(o);
    sl__sample_file member = vx_open(path);
    member.offset = 4000, member.size = whole.size;
    sl__clip_spec spec = vx_spec(5, 4, 24, SL_PRESET_TRAIN);
    vx_clip a, b;
    CHECK_OK(vx_decode(&whole, &spec, 2, &a));
    CHECK_OK(vx_decode(&member, &spec, 2, &b));
    CHECK(memcmp(a.out, b.out, a.plan.out_bytes) == 0);
    vx_free(&a), vx_free(&b);
    free(bytes);
    close(whole.fd), close(member.fd);
}

/* ---- containers and codecs ---------------------------------------------------------- */

static void decodes(const char *name, const char *args, const char *codec) {
    sl__sample_file f = vx_open(vx_make(name, args));
    sl__clip_spec spec = vx_spec(6, 2, 24, SL_PRESET_TRAIN);
    vx_clip c;
    CHECK_OK(vx_decode(&f, &spec, 9, &c));
    CHECK(strcmp(c.info.codec, codec) == 0);
    vx_free(&c);
    spec = vx_spec(6, 2, 24, SL_PRESET_VAL);
    CHECK_OK(vx_decode(&f, &spec, 9, &c));
    vx_free(&c);
    close(f.fd);
}

TEST(mkv_webm_avi_mov) {
    if (!vx_ready()) return;
    decodes("a.mkv", VX_SRC("64x48", "25", "1") " " VX_H264, "h264");
    decodes("a.webm", VX_SRC("64x48", "25", "1") " -c:v libvpx-vp9 -deadline realtime -g 10", "vp9");
    decodes("a.avi", VX_SRC("64x48", "25", "1") " -c:v mpeg4 -bf 2 -g 10", "mpeg4");
    decodes("a.mov", VX_SRC("64x48", "25", "1") " " VX_H264, "h264");
}

TEST(odd_size) {
    if (!vx_ready()) return;
    /* 4:2:0 needs even sizes; H.264 4:4:4 takes 33x25 */
    decodes("odd.mp4", VX_SRC("64x48", "25", "1") " -vf scale=33:25 -c:v libx264 -preset ultrafast -pix_fmt yuv444p",
            "h264");
}

TEST(variable_frame_rate) {
    if (!vx_ready()) return;
    /* timestamps 0, 40, 80 ms, ... with every fifth frame held 3x longer */
    const char *vfr = vx_make("vfr.mp4", VX_SRC("64x48", "25", "2")
                              " -vf setpts='(N+2*floor(N/5))/25/TB' -fps_mode passthrough " VX_H264);
    sl__sample_file f = vx_open(vfr);
    sl__clip_spec spec = vx_spec(10, 2, 24, SL_PRESET_TRAIN);
    vx_clip c;
    CHECK_OK(vx_decode(&f, &spec, 3, &c));
    CHECK(c.info.fps < 25); /* the average rate: 50 frames over 2.8 s */
    for (uint32_t k = 0; k < 10; k++) CHECK(c.plan.frame[k] >= 0 && c.plan.frame[k] < c.info.frames);
    vx_free(&c);
    close(f.fd);
}

/* ---- hostile and broken files -------------------------------------------------------- */

TEST(audio_only_is_not_video) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_make("sound.mp4", "-f lavfi -i sine=duration=1 -c:a aac"));
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_EFORMAT, c.why, "no video stream");
    close(f.fd);
}

/* More streams than the limit (40, of which 39 audio): said so, with the
 * count and the limit (it read "asks for more memory than allowed (64 MiB
 * in one allocation)": FFmpeg reports a stream over max_streams as
 * ENOMEM); 32 streams open as before. */
TEST(too_many_streams_named_as_such) {
    if (!vx_ready()) return;
    char args[1024];
    int n = snprintf(args, sizeof args, VX_SRC("64x48", "10", "1") " -f lavfi -i sine=duration=1");
    for (int i = 0; i < 39; i++) n += snprintf(args + n, sizeof args - (size_t)n, " -map 1:a");
    snprintf(args + n, sizeof args - (size_t)n, " -map 0:v " VX_H264 " -c:a aac");
    sl__sample_file f = vx_open(vx_make("s40.mp4", args));
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_ELIMIT, c.why, "video has 40 streams, over the limit of 32");
    close(f.fd);
    n = snprintf(args, sizeof args, VX_SRC("64x48", "10", "1") " -f lavfi -i sine=duration=1");
    for (int i = 0; i < 31; i++) n += snprintf(args + n, sizeof args - (size_t)n, " -map 1:a");
    snprintf(args + n, sizeof args - (size_t)n, " -map 0:v " VX_H264 " -c:a aac");
    f = vx_open(vx_make("s32.mp4", args));
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    vx_free(&c);
    close(f.fd);
}

static sl__sample_file bytes_file(const char *name, const void *p, size_t n) {
    char path[320];
    snprintf(path, sizeof path, "%s/%s", vx_dir, name);
    fx_write(path, p, n);
    return vx_open(path);
}

TEST(not_a_video_is_eformat) {
    if (!vx_ready()) return;
    const char text[] = "this is a text file, not a video; nothing here is a container\n";
    sl__sample_file f = bytes_file("text.mp4", text, sizeof text - 1);
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_EFORMAT, c.why, "not a readable video container");
    close(f.fd);
}

TEST(empty_file_is_eformat) {
    if (!vx_ready()) return;
    sl__sample_file f = bytes_file("empty.mp4", "", 0);
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    CHECK_CODE(vx_plan(&f, &spec, 0, &c), SL_EFORMAT, c.why, "empty file");
    close(f.fd);
}

/* The first n bytes of path as a new file. */
static sl__sample_file truncated(const char *path, const char *name, double keep) {
    sl__sample_file whole = vx_open(path);
    size_t n = (size_t)(whole.size * keep);
    uint8_t *b = malloc(n);
    CHECK(b && pread(whole.fd, b, n, 0) == (ssize_t)n);
    close(whole.fd);
    sl__sample_file f = bytes_file(name, b, n);
    free(b);
    return f;
}

TEST(truncated_before_moov_fails_at_probe) {
    if (!vx_ready()) return;
    sl__sample_file f = truncated(vx_standard(), "cut.mp4", 0.6); /* moov is at the end */
    vx_clip c;
    sl__clip_spec spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    int rc = vx_plan(&f, &spec, 0, &c);
    CHECK(rc == SL_EFORMAT || rc == SL_ECORRUPT);
    CHECK(c.why[0] != 0);
    close(f.fd);
}

TEST(truncated_media_fails_at_decode) {
    if (!vx_ready()) return;
    char args[512];
    snprintf(args, sizeof args, "-i '%s' -c copy -movflags +faststart", vx_standard());
    sl__sample_file f = truncated(vx_make("front.mp4", args), "cut.mp4", 0.5);
    vx_clip c;
    sl__clip_spec spec = vx_spec(8, 2, 16, SL_PRESET_VAL); /* centred: frames 18..32 */
    CHECK_OK(vx_plan(&f, &spec, 0, &c)); /* the header is whole */
    spec.frames = 20;                     /* frames 6..44: past the cut */
    CHECK_CODE(vx_decode(&f, &spec, 0, &c), SL_ECORRUPT, c.why, "video"); /* the cut packet, or the end */
    vx_free(&c);
    close(f.fd);
}

/* A Matroska file cut in half keeps its header (duration: 100 frames) and
 * ends early at a cluster: frames the header promised never come. */
TEST(stream_shorter_than_header_is_ecorrupt) {
    if (!vx_ready()) return;
    const char *mkv = vx_make("long.mkv", VX_SRC("64x48", "25", "4") " " VX_H264 " -cues_to_front 1 -reserve_index_space 4000");
    sl__sample_file f = truncated(mkv, "cut.mkv", 0.5);
    vx_clip c;
    sl__clip_spec spec = vx_spec(20, 4, 16, SL_PRESET_VAL); /* frames 11..87 */
    CHECK_CODE(vx_decode(&f, &spec, 0, &c), SL_ECORRUPT, c.why, "that its header promises (100 frames): truncated?");
    vx_free(&c);
    close(f.fd);
}

/* Bytes overwritten in the media data: a clean result or a clean error,
 * nothing leaked (ASan), the quota back to zero (vx_decode checks). */
TEST(corrupt_media_is_clean) {
    if (!vx_ready()) return;
    char args[512];
    snprintf(args, sizeof args, "-i '%s' -c copy -movflags +faststart", vx_standard());
    sl__sample_file good = vx_open(vx_make("front.mp4", args));
    uint8_t *b = malloc(good.size);
    CHECK(b && pread(good.fd, b, good.size, 0) == (ssize_t)good.size);
    uint64_t s = 1;
    for (int round = 0; round < 8; round++) {
        uint8_t *m = malloc(good.size);
        memcpy(m, b, good.size);
        for (int i = 0; i < 64; i++) { /* bytes in the second half: the media data */
            s = fx_mix(s);
            m[good.size / 2 + s % (good.size / 2)] = (uint8_t)(s >> 32);
        }
        sl__sample_file f = bytes_file("bad.mp4", m, good.size);
        sl__clip_spec spec = vx_spec(10, 2, 16, SL_PRESET_TRAIN);
        vx_clip c;
        int rc = vx_decode(&f, &spec, (uint64_t)round, &c);
        CHECK(rc == 0 || (rc < 0 && c.why[0]));
        vx_free(&c);
        close(f.fd);
        free(m);
    }
    free(b);
    close(good.fd);
}

/* The probe's frame count from a header's duration and rate: a hostile
 * duration (a 64-bit mdhd count over a tiny time base, NaN, infinity) is
 * refused before duration x rate is cast to int64 (UB that -fsanitize=
 * float-cast-overflow stops on), and sane numbers give the count. Needs no
 * FFmpeg: the numbers are what a demuxer would hand over. */
TEST(header_duration_times_rate_checked_before_the_cast) {
    char why[256];
    double d;
    int64_t n = -7;
    const double bad[] = {9.2e18, 1e300, INFINITY, -1.0, NAN, SL_VIDEO_MAX_SECONDS * 1.0001};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = bad[i];
        why[0] = 0;
        CHECK_EQ(sl__video_count(0, 1000, &d, &n, why, sizeof why), SL_ECORRUPT);
        CHECK_STR_CONTAINS(why, "no usable frame count or duration");
        CHECK_EQ(sl__video_count(50, 25, &d, &n, why, sizeof why), SL_ECORRUPT); /* a stated count too */
    }
    CHECK_EQ(n, -7); /* untouched on failure */
    d = 3e10;
    CHECK_EQ(sl__video_count(0, 25, &d, &n, why, sizeof why), SL_ECORRUPT);
    CHECK_STR_CONTAINS(why, "(0 frames, 3e+10 s at 25 fps)");
    const double rates[] = {0, -25, 1000.5, NAN};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        d = 2;
        CHECK_EQ(sl__video_count(0, rates[i], &d, &n, why, sizeof why), SL_ECORRUPT);
    }
    d = 0;
    CHECK_EQ(sl__video_count(0, 25, &d, &n, why, sizeof why), SL_ECORRUPT); /* neither count nor duration */
    /* sane headers */
    d = 2;
    CHECK_OK(sl__video_count(0, 25, &d, &n, why, sizeof why));
    CHECK_EQ(n, 50);
    d = 2;
    CHECK_OK(sl__video_count(48, 25, &d, &n, why, sizeof why)); /* the stated count wins */
    CHECK_EQ(n, 48);
    CHECK(d == 2);
    d = 0;
    CHECK_OK(sl__video_count(50, 25, &d, &n, why, sizeof why)); /* no duration: from the count */
    CHECK(d == 2);
    d = SL_VIDEO_MAX_SECONDS;
    CHECK_OK(sl__video_count(0, 1000, &d, &n, why, sizeof why)); /* the largest product fits */
    CHECK_EQ(n, 10000000000LL);
}

/* ---- limits, one per path ------------------------------------------------------------- */

/* sl_video_opts.max_pixels means what every max_pixels means
 * (include/sluice.h): 0 is the default (4096x2304), UINT64_MAX none.
 * (sl_config: test_harden.loader_max_pixels_zero_is_default.) */
TEST(max_pixels_zero_is_the_default) {
    if (!vx_ready()) return;
    /* one frame a little over 4096x2304 */
    const char *big = vx_make("big.avi", "-f lavfi -i color=size=4112x2304:rate=25:duration=0.04 -c:v mjpeg -pix_fmt yuvj420p");
    sl_video_opts o;
    sl_video_opts_init(&o);
    sl_video_info info;
    char why[256] = "";
    CHECK_CODE(sl_video_probe(big, &o, &info, why, sizeof why), SL_ELIMIT, why,
               "4112x2304 = 9474048 pixels, over the max_pixels limit of 9437184");
    o.max_pixels = 0;
    why[0] = 0;
    CHECK_CODE(sl_video_probe(big, &o, &info, why, sizeof why), SL_ELIMIT, why, "over the max_pixels limit of 9437184");
    o.max_pixels = UINT64_MAX;
    CHECK_OK(sl_video_probe(big, &o, &info, why, sizeof why));
    CHECK_EQ(info.width, 4112);
}

static int probe_with(const sl__video_limits *lim, char *why, size_t n) {
    sl__sample_file f = vx_open(vx_standard());
    sl__video_info info;
    int rc = sl__video_probe(&f, lim, &info, why, n);
    close(f.fd);
    return rc;
}

TEST(limit_pixels) {
    if (!vx_ready()) return;
    sl__video_limits lim = {.max_pixels = 64 * 48 - 1};
    char why[256];
    CHECK_CODE(probe_with(&lim, why, sizeof why), SL_ELIMIT, why, "64x48 = 3072 pixels, over the max_pixels limit of 3071");
}

TEST(limit_frames) {
    if (!vx_ready()) return;
    sl__video_limits lim = {.max_frames = 49};
    char why[256];
    CHECK_CODE(probe_with(&lim, why, sizeof why), SL_ELIMIT, why, "50 frames, over the max_frames limit of 49");
}

TEST(limit_seconds) {
    if (!vx_ready()) return;
    sl__video_limits lim = {.max_seconds = 1.5};
    char why[256];
    CHECK_CODE(probe_with(&lim, why, sizeof why), SL_ELIMIT, why, "lasts 2.00 s, over the max_seconds limit of 1.50");
}

TEST(limit_bytes) {
    if (!vx_ready()) return;
    sl__video_limits lim = {.max_bytes = 100};
    char why[256];
    CHECK_CODE(probe_with(&lim, why, sizeof why), SL_ELIMIT, why, "over the max_bytes limit of 100");
}

TEST(limit_codec_allow_list) {
    if (!vx_ready()) return;
    sl__video_limits lim = {.codecs = "hevc,vp9"};
    char why[256];
    CHECK_CODE(probe_with(&lim, why, sizeof why), SL_EUNSUPPORTED, why, "codec h264 is not in the allowed list (hevc,vp9)");
    lim.codecs = "vp9,h264";
    CHECK_OK(probe_with(&lim, why, sizeof why));
}

/* ---- memory and release ----------------------------------------------------------------- */

TEST(quota_too_small_is_ebudget) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(4, 2, 16, SL_PRESET_TRAIN);
    vx_clip c;
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    uint8_t *out = malloc(c.plan.out_bytes);
    sl__quota q = {c.plan.quota / 8, 0, 0, 0};
    CHECK_CODE(sl__video_decode(&f, &c.info, &c.plan, &q, NULL, out, c.why, sizeof c.why), SL_EBUDGET, c.why,
               "over the clip's quota");
    CHECK_EQ(q.used, 0);
    free(out);
    close(f.fd);
}

/* Fail quota allocation n, n+1, ... until the decode completes: every
 * failure is SL_EBUDGET with everything given back. */
TEST(allocation_failure_injection) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(6, 3, 20, SL_PRESET_VAL); /* val: the scaling buffer too */
    vx_clip ok;
    CHECK_OK(vx_decode(&f, &spec, 0, &ok));
    long n;
    for (n = 0; n < 1000; n++) {
        vx_clip c;
        sl__video_fail_after(n);
        int rc = vx_decode(&f, &spec, 0, &c);
        sl__video_fail_after(-1);
        if (rc == 0) {
            CHECK(memcmp(c.out, ok.out, ok.plan.out_bytes) == 0);
            vx_free(&c);
            break;
        }
        if (rc != SL_EBUDGET) SL_FAIL("failure %ld: %d (%s)", n, rc, c.why);
        vx_free(&c);
    }
    fprintf(stderr, "allocations: %ld\n", n);
    CHECK(n > 2 && n < 1000);
    vx_free(&ok);
    close(f.fd);
}

TEST(cancel_stops_between_packets) {
    if (!vx_ready()) return;
    sl__sample_file f = vx_open(vx_standard());
    sl__clip_spec spec = vx_spec(8, 2, 16, SL_PRESET_TRAIN);
    vx_clip c;
    CHECK_OK(vx_plan(&f, &spec, 0, &c));
    uint8_t *out = malloc(c.plan.out_bytes);
    _Atomic int cancel = 1;
    sl__quota q = {c.plan.quota, 0, 0, 0};
    CHECK_CODE(sl__video_decode(&f, &c.info, &c.plan, &q, &cancel, out, c.why, sizeof c.why), SL_ESTATE, c.why,
               "cancelled");
    CHECK_EQ(q.used, 0);
    free(out);
    close(f.fd);
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static uint64_t rss_bytes(void) {
    FILE *s = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0, res = 0;
    CHECK(s && fscanf(s, "%llu %llu", &pages, &res) == 2);
    fclose(s);
    return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_ASAN 1
#endif
#endif
#ifdef __SANITIZE_ADDRESS__
#define SL_ASAN 1
#endif

/* 100 clips, good and bad files in turn: open descriptors constant, RSS
 * flat after a warm-up (not under ASan, whose quarantine keeps freed
 * memory resident by design; it checks leaks itself). */
TEST(fds_and_rss_constant) {
    if (!vx_ready()) return;
    sl__sample_file good = vx_open(vx_standard());
    sl__sample_file bad = truncated(vx_standard(), "cut.mp4", 0.6);
    sl__clip_spec spec = vx_spec(8, 2, 32, SL_PRESET_TRAIN);
    uint64_t rss0 = 0;
    int fds0 = 0;
    for (int i = 0; i < 110; i++) {
        if (i == 10) rss0 = rss_bytes(), fds0 = count_fds();
        vx_clip c;
        CHECK_OK(vx_decode(&good, &spec, (uint64_t)i, &c));
        vx_free(&c);
        CHECK(vx_decode(&bad, &spec, (uint64_t)i, &c) < 0);
        vx_free(&c);
    }
    CHECK_EQ(count_fds(), fds0);
#ifndef SL_ASAN
    CHECK_LE(rss_bytes(), rss0 + (2u << 20));
#else
    (void)rss0;
#endif
    close(good.fd), close(bad.fd);
}

/* ---- folder source ------------------------------------------------------------------------ */

TEST(folder_video_extensions) {
    const char *yes[] = {"a.mp4", "b.AVI", "c.mkv", "d.WebM", "e.mov", "x.y.MP4"};
    const char *no[] = {"a.jpg", "b.mp3", "c.mp", "mp4", "d.mp4.txt", "e.wmv"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        CHECK(sl__folder_ext_match(yes[i], strlen(yes[i]), SL__MEDIA_VIDEO));
        CHECK(!sl__folder_ext_match(yes[i], strlen(yes[i]), SL__MEDIA_IMAGE));
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        CHECK(!sl__folder_ext_match(no[i], strlen(no[i]), SL__MEDIA_VIDEO));
    CHECK(sl__folder_ext_match("a.JPEG", 6, SL__MEDIA_IMAGE));
}

/* ---- without FFmpeg --------------------------------------------------------------------------- */

TEST(without_ffmpeg_is_unsupported) {
    if (sl__video_available()) {
        printf("built with FFmpeg: nothing to check\n");
        return;
    }
    sl__sample_file f = {.fd = 0, .size = 100};
    sl__video_info info;
    char why[256];
    CHECK_CODE(sl__video_probe(&f, NULL, &info, why, sizeof why), SL_EUNSUPPORTED, why, "without FFmpeg");
}
