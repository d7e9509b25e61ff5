/* ctest: tsan */
/*
 * The loader's GPU stage for a video field (pipeline/gpustage.c, issue
 * 23): workers plan each clip and decode it on an NVDEC session straight
 * into the position's device memory, or on the CPU when the GPU cannot
 * take it.
 *
 * Every case runs everywhere: without a GPU with NVDEC (CI) the test
 * installs a host device whose "device memory" is host memory and whose
 * clip decode is the GPU path's arithmetic on the CPU (ops/yuv.c, what the
 * GPU writes byte for byte), so the scheduling (which clips go where, the
 * upload of CPU clips, records, compaction, the worker count) is checked
 * in CI and under TSan. Clips are made with the ffmpeg CLI (skipped
 * without it); the GPU host runs tests/python/test_video_gpu.py.
 */
#include "video_fixture.h"

#include <pthread.h>

#include "base/util.h"
#include "gpu/device.h"
#include "host_device.h"

/* ---- the host device ----------------------------------------------------------- */

typedef struct host_dev {
    uint8_t *region;
    pthread_mutex_t mu;     /* the counters */
    uint64_t clips, refused;
    uint32_t refuse_width;  /* clips of streams this wide go to the CPU (0: none) */
} host_dev;

static uint32_t refuse_width;

static int host_region(void *ctx, uint64_t bytes, uint64_t *base, char *err, size_t errlen) {
    host_dev *h = ctx;
    (void)err, (void)errlen;
    CHECK(h->region == NULL);
    h->region = malloc(bytes);
    CHECK(h->region != NULL);
    memset(h->region, 0xEE, bytes);
    *base = (uint64_t)(uintptr_t)h->region;
    return 0;
}

/* The GPU path's clip, by its CPU arithmetic, into dst (host memory). */
static int host_clip(void *ctx, uint32_t lane, const sl__sample_file *f, const sl__video_info *info,
                     const sl__clip_plan *plan, sl__quota *q, const _Atomic int *cancel, int wait, uint64_t dst,
                     char *reason, size_t rlen) {
    host_dev *h = ctx;
    (void)lane, (void)q, (void)wait;
    int refuse = h->refuse_width && info->coded_width == h->refuse_width;
    sl__clip_ref r;
    sl__quota mine = {plan->quota, 0, 0, 0};
    int rc = refuse ? SL_EUNSUPPORTED : sl__clip_ref_init(&r, info, plan, &mine, (uint8_t *)(uintptr_t)dst, reason, rlen);
    if (refuse) sl__msg(reason, rlen, "for the CPU: the host device refuses %u-wide streams", h->refuse_width);
    if (!rc) {
        mine.cap += r.mem;
        rc = sl__video_decode_into(f, info, plan, &mine, cancel, NULL, &r.sink, reason, rlen);
        CHECK_EQ(mine.used, 0);
    }
    if (rc && rc != SL_ESTATE && rc != SL_EUNSUPPORTED) rc = SL_EUNSUPPORTED; /* the CPU judges the stream */
    pthread_mutex_lock(&h->mu);
    h->clips += rc == 0;
    h->refused += rc == SL_EUNSUPPORTED;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static void host_stats(void *ctx, sl__gpu_stats *out) {
    host_dev *h = ctx;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&h->mu);
    out->samples_hw = h->clips;
    out->samples_cpu = h->refused;
    pthread_mutex_unlock(&h->mu);
    snprintf(out->device_name, sizeof out->device_name, "host device (test)");
}

static void host_close(void *ctx) {
    host_dev *h = ctx;
    free(h->region);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static int host_open(const sl__gpu_dev_config *cfg, sl__budget *host, sl__gpu_dev *out, char *err, size_t errlen) {
    (void)host, (void)err, (void)errlen;
    CHECK(cfg->video == 1 && cfg->sessions >= 1 && cfg->session_cap > 0 && cfg->lanes >= 2);
    host_dev *h = calloc(1, sizeof *h);
    CHECK(h != NULL);
    pthread_mutex_init(&h->mu, NULL);
    h->refuse_width = refuse_width;
    *out = (sl__gpu_dev){.ctx = h, .device_type = SL_DEVICE_CPU, .region = host_region, .upload = hd_upload,
                         .move = hd_move, .download = hd_download, .stats = host_stats, .close = host_close,
                         .clip = host_clip};
    return 0;
}

/* The real GPU where there is one with NVDEC, else the host device. */
static void use_device(void) {
    char why[256];
    if (sl__gpu_video_available(why, sizeof why)) return;
    printf("no GPU video engine (%s): the host device stands in\n", why);
    sl__gpu_dev_override(host_open);
}

/* ---- a table of clips ------------------------------------------------------------ */

#define T 4
#define S 32
#define FB (T * 3 * S * S)
#define N 12

/* N rows of clips (labels 0..N-1): good ones, one truncated, one of another width. */
static const char *make_table(int with_bad) {
    const char *a = vx_make("a.mp4", VX_SRC("64x48", "25", "2") " " VX_H264);
    const char *b = vx_make("b.mp4", "-f lavfi -i mandelbrot=size=80x60:rate=25 -t 2 " VX_H264);
    const char *c = vx_make("c.mp4", VX_SRC("96x64", "25", "2") " " VX_H264);
    static char cut[320], table[320];
    snprintf(cut, sizeof cut, "%s/cut.mp4", vx_dir);
    FILE *in = fopen(a, "rb"), *out = fopen(cut, "wb");
    CHECK(in && out);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, in); /* the header and a little media: truncated */
    fwrite(buf, 1, n / 2, out);
    fclose(in);
    fclose(out);
    snprintf(table, sizeof table, "%s/clips.jsonl", vx_dir);
    FILE *t = fopen(table, "w");
    CHECK(t != NULL);
    const char *paths[4] = {a, b, c, cut};
    for (int i = 0; i < N; i++)
        fprintf(t, "{\"clip\": \"%s\", \"label\": %d}\n", paths[with_bad ? i % 4 : i % 3], i);
    fclose(t);
    return table;
}

static sl_config config(const char *table, int decode, uint32_t workers) {
    sl_config c;
    sl_config_init(&c);
    c.source = table;
    c.fields = "{\"clip\": {\"kind\": \"video\", \"frames\": 4, \"stride\": 2, \"size\": 32}, "
               "\"label\": {\"kind\": \"label\"}}";
    c.batch_size = 4;
    c.budget = 512ull << 20;
    c.workers = workers;
    c.seed = 3;
    c.shuffle = 0;
    c.decode = decode;
    c.gpu_budget = 1ull << 30;
    return c;
}

typedef struct epoch_out {
    uint32_t n;
    int64_t label[N];
    uint8_t px[N][FB];
    char errors[N][160];
    uint32_t nerr;
} epoch_out;

/* One epoch: labels and clip bytes in delivery order, error records. */
static void run_epoch(sl_config *c, epoch_out *o) {
    memset(o, 0, sizeof *o);
    sl_loader *ld;
    char err[300] = "";
    int rc = sl_loader_create(c, &ld, err, sizeof err);
    if (rc) SL_FAIL("create: %s: %s", sl_strerror(rc), err);
    sl_batch *b;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        sl_field clip, lab;
        CHECK_OK(sl_batch_find(b, "clip", &clip));
        CHECK_OK(sl_batch_find(b, "label", &lab));
        for (uint32_t i = 0; i < sl_batch_len(b); i++) {
            CHECK_LE(o->n + 1, N);
            o->label[o->n] = ((const int64_t *)lab.data)[i];
            memcpy(o->px[o->n], (const uint8_t *)clip.data + (size_t)i * FB, FB);
            o->n++;
        }
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    sl_error_record recs[N];
    size_t n = sl_loader_errors(ld, 0, recs, N);
    o->nerr = (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        snprintf(o->errors[i], sizeof o->errors[i], "%llu %d: %s", (unsigned long long)recs[i].index, recs[i].code,
                 recs[i].reason);
    sl_loader_destroy(ld);
}

TEST(gpu_video_loader_same_order_and_records_as_the_cpu) {
    if (!vx_ready()) return;
    use_device();
    const char *table = make_table(1);
    static epoch_out cpu, gpu;
    sl_config c = config(table, SL_DECODE_CPU, 2);
    run_epoch(&c, &cpu);
    c = config(table, SL_DECODE_GPU, 2);
    run_epoch(&c, &gpu);
    CHECK_EQ(cpu.n, gpu.n);
    CHECK_EQ(cpu.n, N - N / 4); /* the truncated clips are records */
    for (uint32_t i = 0; i < cpu.n; i++) CHECK_EQ(cpu.label[i], gpu.label[i]);
    CHECK_EQ(cpu.nerr, gpu.nerr);
    for (uint32_t i = 0; i < cpu.nerr; i++) CHECK(strcmp(cpu.errors[i], gpu.errors[i]) == 0);
    /* every clip within the documented difference of the CPU path's, and some
     * of them GPU-decoded (not byte-equal to the CPU's) */
    uint32_t differ = 0;
    for (uint32_t i = 0; i < cpu.n; i++) {
        uint64_t s = 0;
        for (uint32_t k = 0; k < FB; k++) s += (uint64_t)abs((int)cpu.px[i][k] - (int)gpu.px[i][k]);
        CHECK((double)s / FB <= 1.0);
        differ += memcmp(cpu.px[i], gpu.px[i], FB) != 0;
    }
    CHECK(differ > 0);
}

TEST(gpu_video_loader_bytes_do_not_depend_on_workers) {
    if (!vx_ready()) return;
    use_device();
    const char *table = make_table(0);
    static epoch_out one, four, prefer;
    sl_config c = config(table, SL_DECODE_GPU, 1);
    run_epoch(&c, &one);
    c = config(table, SL_DECODE_GPU, 4);
    run_epoch(&c, &four);
    c = config(table, SL_DECODE_PREFER_GPU, 4); /* waits for a session as gpu does: the same bytes */
    run_epoch(&c, &prefer);
    CHECK_EQ(one.n, N);
    CHECK_EQ(four.n, N);
    CHECK_EQ(prefer.n, N);
    for (uint32_t i = 0; i < N; i++) {
        CHECK_EQ(one.label[i], four.label[i]);
        CHECK(memcmp(one.px[i], four.px[i], FB) == 0);
        CHECK(memcmp(one.px[i], prefer.px[i], FB) == 0);
    }
}

TEST(gpu_video_loader_hands_back_what_the_gpu_refuses) {
    if (!vx_ready()) return;
    char why[256];
    if (sl__gpu_video_available(why, sizeof why)) {
        printf("SKIP: a GPU with NVDEC is here (the host device's refusals are the test's)\n");
        return;
    }
    sl__gpu_dev_override(host_open);
    refuse_width = 96; /* c.mp4: decoded on the CPU, uploaded */
    const char *table = make_table(0);
    static epoch_out cpu, gpu;
    sl_config c = config(table, SL_DECODE_CPU, 2);
    run_epoch(&c, &cpu);
    c = config(table, SL_DECODE_GPU, 2);
    sl_loader *ld;
    char err[300];
    CHECK_OK(sl_loader_create(&c, &ld, err, sizeof err));
    sl_stats st;
    sl_batch *b;
    uint32_t k = 0;
    while (sl_loader_next(ld, &b) == 0) {
        sl_field clip;
        CHECK_OK(sl_batch_find(b, "clip", &clip));
        for (uint32_t i = 0; i < sl_batch_len(b); i++, k++) {
            const uint8_t *px = (const uint8_t *)clip.data + (size_t)i * FB;
            if (k % 3 == 2) CHECK(memcmp(px, cpu.px[k], FB) == 0); /* the CPU path's bytes, uploaded */
        }
        sl_loader_release(ld, b);
    }
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.decode, SL_DECODE_GPU);
    /* the epoch's counts at least (workers may have started the next one) */
    CHECK(st.gpu_samples >= N - N / 3);
    CHECK(st.gpu_handed_back >= N / 3);
    CHECK_STR_CONTAINS(st.decode_reason, "NVDEC sessions");
    CHECK_STR_CONTAINS(st.decode_reason, " clips for the CPU, the last: the host device refuses");
    sl_loader_destroy(ld);
    (void)gpu;
}

TEST(gpu_video_loader_refusals_name_the_numbers) {
    if (!vx_ready()) return;
    use_device();
    const char *table = make_table(0);
    sl_config c = config(table, SL_DECODE_GPU, 2);
    c.gpu_budget = 64ull << 20; /* under one NVDEC session */
    sl_loader *ld;
    char err[300] = "";
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "NVDEC session");
    CHECK_STR_CONTAINS(err, "raise it to at least");
}

TEST(gpu_video_loader_without_a_gpu_says_why) {
    if (!vx_ready()) return;
    char why[256] = "";
    if (sl__gpu_video_available(why, sizeof why)) {
        printf("SKIP: a GPU with NVDEC is here\n");
        return;
    }
    const char *table = make_table(0);
    sl_config c = config(table, SL_DECODE_GPU, 2);
    sl_loader *ld;
    char err[300] = "";
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "decode=gpu: ");
    CHECK_STR_CONTAINS(err, why);
    c = config(table, SL_DECODE_AUTO, 2);
    CHECK_OK(sl_loader_create(&c, &ld, err, sizeof err));
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.decode, SL_DECODE_CPU);
    CHECK_STR_CONTAINS(st.decode_reason, "decode=auto, the CPU: ");
    sl_loader_destroy(ld);
}

TEST(gpu_video_loader_decoded_cache_keeps_host_bytes) {
    /* cache_what=decoded keeps a val clip's output from the slot's host
     * bytes: such clips are decoded on the CPU (and uploaded), every epoch
     * the same bytes as without the GPU, hits included */
    if (!vx_ready()) return;
    use_device();
    const char *table = make_table(0);
    static epoch_out cpu, gpu1, gpu2;
    sl_config c = config(table, SL_DECODE_CPU, 2);
    c.fields = "{\"clip\": {\"kind\": \"video\", \"frames\": 4, \"stride\": 2, \"size\": 32, \"preset\": \"val\"}, "
               "\"label\": {\"kind\": \"label\"}}";
    run_epoch(&c, &cpu);
    c.decode = SL_DECODE_GPU;
    c.cache = 64ull << 20;
    c.cache_what = SL_CACHE_DECODED;
    sl_loader *ld;
    char err[300] = "";
    int rc = sl_loader_create(&c, &ld, err, sizeof err);
    if (rc) SL_FAIL("create: %s", err);
    for (int e = 0; e < 2; e++) {
        epoch_out *o = e ? &gpu2 : &gpu1;
        sl_batch *b;
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            sl_field clip;
            CHECK_OK(sl_batch_find(b, "clip", &clip));
            for (uint32_t i = 0; i < sl_batch_len(b); i++, o->n++)
                memcpy(o->px[o->n], (const uint8_t *)clip.data + (size_t)i * FB, FB);
            sl_loader_release(ld, b);
        }
        CHECK_EQ(rc, SL_EEND);
    }
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.cache_hits > 0);
    sl_loader_destroy(ld);
    CHECK_EQ(gpu1.n, N);
    CHECK_EQ(gpu2.n, N);
    for (uint32_t i = 0; i < N; i++) {
        CHECK(memcmp(cpu.px[i], gpu1.px[i], FB) == 0);
        CHECK(memcmp(cpu.px[i], gpu2.px[i], FB) == 0);
    }
}
