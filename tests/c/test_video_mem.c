/*
 * The memory bound of a clip, measured: this test binary replaces malloc
 * and friends (forwarding to glibc's) to count every heap byte the process
 * holds, FFmpeg's included, and checks that the peak during a decode stays
 * within plan.mem, what the caller reserves from the budget, and that
 * FFmpeg's own part (the peak less our quota's) stays within the estimate
 * plan.mem - plan.quota. Under sanitizers (which own malloc) it skips.
 */
#include "video_fixture.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SL_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SL_SANITIZED 1
#endif

#ifndef SL_SANITIZED
#include <errno.h>
#include <malloc.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_memalign(size_t, size_t);

/* Exported (the build hides symbols by default) so that FFmpeg's shared
 * libraries bind to these too. Single-threaded test: plain counters. */
#define EXPORT __attribute__((visibility("default")))
static long heap_now, heap_peak;
static void count_in(void *p) {
    if (!p) return;
    heap_now += (long)malloc_usable_size(p);
    if (heap_now > heap_peak) heap_peak = heap_now;
}
static void count_out(void *p) {
    if (p) heap_now -= (long)malloc_usable_size(p);
}
EXPORT void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    count_in(p);
    return p;
}
EXPORT void free(void *p) {
    count_out(p);
    __libc_free(p);
}
EXPORT void *calloc(size_t a, size_t b) {
    void *p = __libc_calloc(a, b);
    count_in(p);
    return p;
}
EXPORT void *realloc(void *old, size_t n) {
    long before = old ? (long)malloc_usable_size(old) : 0;
    void *p = __libc_realloc(old, n);
    if (p || n == 0) heap_now -= before;
    count_in(p);
    return p;
}
EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    count_in(p);
    *out = p;
    return 0;
}
EXPORT void *memalign(size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    count_in(p);
    return p;
}
EXPORT void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

/* Decode one clip of path and check the measured peak against the plan. */
static void measure(const char *path, uint32_t frames, uint32_t size, int preset) {
    sl__sample_file f = vx_open(path);
    vx_clip c;
    sl__clip_spec spec = vx_spec(frames, 2, size, preset);
    CHECK_OK(vx_plan(&f, &spec, 3, &c));
    uint8_t *out = malloc(c.plan.out_bytes);
    CHECK(out != NULL);
    sl__quota q = {c.plan.quota, 0, 0, 0};
    /* a first decode: FFmpeg initialises static tables once per process */
    CHECK_OK(sl__video_decode(&f, &c.info, &c.plan, &q, NULL, out, c.why, sizeof c.why));
    q.peak = 0;
    long base = heap_now;
    heap_peak = heap_now;
    CHECK_OK(sl__video_decode(&f, &c.info, &c.plan, &q, NULL, out, c.why, sizeof c.why));
    long peak = heap_peak - base, ffmpeg = peak - (long)q.peak;
    CHECK_EQ(heap_now, base); /* everything given back (checked before printf allocates its buffer) */
    printf("%s: %ux%u peak %ld (quota %llu of %llu, FFmpeg's %ld of %llu estimated)\n", path, c.info.coded_width,
           c.info.coded_height, peak, (unsigned long long)q.peak, (unsigned long long)c.plan.quota, ffmpeg,
           (unsigned long long)(c.plan.mem - c.plan.quota));
    CHECK_LE(peak, c.plan.mem);
    CHECK_LE(ffmpeg, c.plan.mem - c.plan.quota);
    free(out);
    close(f.fd);
}
#endif

TEST(heap_peak_within_plan) {
#ifdef SL_SANITIZED
    printf("sanitizer build owns malloc: skipped\n");
#else
    if (!vx_ready()) return;
    measure(vx_standard(), 16, 112, SL_PRESET_TRAIN);
    measure(vx_make("sd.mp4", VX_SRC("320x240", "25", "3") " -f lavfi -i sine=duration=3 -c:a aac " VX_H264),
            16, 112, SL_PRESET_VAL);
    measure(vx_make("hd.mp4", VX_SRC("1280x720", "25", "1") " -c:v libx264 -preset ultrafast -bf 3 -refs 4"),
            8, 224, SL_PRESET_TRAIN);
    measure(vx_make("sd.webm", VX_SRC("320x240", "25", "2") " -c:v libvpx-vp9 -deadline realtime"), 16, 112,
            SL_PRESET_TRAIN);
#endif
}

/* A 2.9 KiB mp4 whose header made the demuxer ask for 1.1 GB in one
 * allocation (found by the fuzzer): the open fails cleanly and the heap
 * never holds more than FFmpeg's single-allocation cap. */
TEST(hostile_header_stays_small) {
#ifdef SL_SANITIZED
    printf("sanitizer build owns malloc: skipped\n");
#else
    if (!vx_ready()) return;
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/video/oom_stss_header.mp4", getenv("SL_SRC"));
    sl__sample_file f = vx_open(path);
    sl__video_info info;
    char why[256] = "";
    long base = heap_now;
    heap_peak = heap_now;
    int rc = sl__video_probe(&f, NULL, &info, why, sizeof why);
    CHECK(rc < 0 && why[0]);
    CHECK_LE(heap_peak - base, 64u << 20);
    CHECK_EQ(heap_now, base);
    printf("%s: %d (%s), heap peak %ld\n", path, rc, why, heap_peak - base);
    close(f.fd);
#endif
}
