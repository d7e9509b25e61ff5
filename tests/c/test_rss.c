/*
 * The budget is the process's real memory: with 8 and 16 workers over the
 * images that make decoders hold the most (progressive and multi-scan
 * 4:4:4 JPEGs of 6 Mpx, whose whole-image coefficients take 36 MB each,
 * large baseline ones, tiny ones), over several epochs, the process's
 * resident memory grows by at most budget + 48 MiB over its level before
 * the loader (VmHWM, the kernel's own high-water mark, reset just before),
 * and comes back near that level after destroy. Before decoder memory came
 * from a counted arena, 8 workers grew RSS by 304 MB under an 80 MiB
 * budget. The budgets are the smallest near which a 6 Mpx progressive
 * image is admitted (its decode needs ~43 MiB, at most a quarter of the
 * budget) with the workers' stacks counted.
 *
 * Under ASan resident memory includes the sanitizer's shadow and
 * quarantine, which are not the library's: the bound is checked in the
 * plain build only (the run still goes through every path under ASan).
 */
#define _GNU_SOURCE
#include <malloc.h>

#include "bigimg.h"
#include "webpw.h"

#define SLACK ((uint64_t)48 << 20)

/* A fresh ImageFolder root (removed at exit) in root, with one empty
 * class folder, root/c0, in dir. */
static void one_class_root(char *root, size_t len, char *dir, size_t dlen) {
    fx_empty_dir(root, len);
    snprintf(dir, dlen, "%s/c0", root);
    CHECK(mkdir(dir, 0755) == 0);
}

/* sl_config's defaults (its size among them) over root: batches of 4 by
 * `workers` workers in `budget`. */
static void rss_cfg(sl_config *c, const char *root, uint32_t workers, uint64_t budget) {
    sl_config_init(c);
    c->source = root;
    c->batch_size = 4;
    c->workers = workers;
    c->budget = budget;
}

/* An ImageFolder of large and tiny images; returns its root. */
static void make_big_set(char *root, size_t len) {
    char dir[300];
    one_class_root(root, len, dir, sizeof dir);
    struct {
        uint32_t w, h;
        int layout, count;
    } kinds[] = {{3000, 2000, BX_PROGRESSIVE_444, 6}, {2000, 3000, BX_MULTISCAN_444, 2},
                 {4000, 3000, BX_BASELINE_420, 2},    {48, 32, BX_PROGRESSIVE_444, 6}};
    int k = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        for (int j = 0; j < kinds[i].count; j++, k++) {
            unsigned long n;
            unsigned char *jpg = bx_jpeg(kinds[i].w, kinds[i].h, kinds[i].layout, (uint64_t)k, &n);
            char path[400];
            snprintf(path, sizeof path, "%s/img_%03d.jpg", dir, k);
            fx_write(path, jpg, n);
            free(jpg);
        }
}

/* A loader over cfg run for `epochs` epochs, measured: *base the RSS before
 * it, *hwm the high-water mark after (VmHWM reset before create; else the
 * largest RSS sampled between batches), *samples those delivered. The
 * loader is returned, not destroyed. */
static sl_loader *run_measured(const sl_config *cfg, int epochs, uint64_t *base, uint64_t *hwm, uint64_t *samples) {
    malloc_trim(0); /* what making the files took goes back before the baseline */
    int have_peak = bx_reset_peak() == 0;
    *base = bx_rss();
    sl_loader *ld = fx_open(cfg);
    uint64_t max_rss = 0;
    *samples = 0;
    for (int e = 0; e < epochs; e++) {
        sl_batch *b;
        int rc;
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            *samples += sl_batch_len(b);
            sl_loader_release(ld, b);
            uint64_t r = bx_rss();
            if (r > max_rss) max_rss = r;
        }
        CHECK_EQ(rc, SL_EEND);
    }
    *hwm = have_peak ? bx_hwm() : max_rss;
    return ld;
}

static void run_bound(uint32_t workers, uint64_t budget, int epochs) {
    char root[256];
    make_big_set(root, sizeof root);
    sl_config cfg;
    rss_cfg(&cfg, root, workers, budget);
    cfg.flags |= SL_FLAG_CHECKSUM;
    uint64_t base, hwm, samples;
    sl_loader *ld = run_measured(&cfg, epochs, &base, &hwm, &samples);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    sl_error_record rec;
    if (st.errors && sl_loader_errors(ld, 0, &rec, 1)) SL_FAIL("sample %llu failed: %s", (unsigned long long)rec.index, rec.reason);
    CHECK_EQ(samples, 16ull * epochs);
    CHECK_LE(st.peak_accounted_bytes, budget);
    sl_loader_destroy(ld);
    malloc_trim(0);
    uint64_t after = bx_rss();
    printf("%u workers, budget %llu MiB: RSS %llu MiB before, peak +%llu MiB, peak accounted %llu MiB, "
           "after destroy +%lld KiB\n",
           workers, (unsigned long long)(budget >> 20), (unsigned long long)(base >> 20),
           (unsigned long long)((hwm - base) >> 20), (unsigned long long)(st.peak_accounted_bytes >> 20),
           (long long)((int64_t)(after - base) / 1024));
    if (!BX_RSS_MEANINGFUL) return;
    CHECK_LE(hwm, base + budget + SLACK);
    CHECK_LE(after, base + (16u << 20)); /* thread stacks cached by glibc: only their touched pages */
}

TEST(rss_bound_8_workers_large_progressive_and_444) { run_bound(8, (uint64_t)176 << 20, 2); }

TEST(rss_bound_16_workers_tight_budget_three_epochs) { run_bound(16, (uint64_t)192 << 20, 3); }

/* ---- WebP: libwebp's memory read from the file ------------------------------------- */

/* Valid lossless WebPs whose meta-Huffman image names 65,536 groups (each
 * file makes libwebp 1.2.4 hold ~350 MiB resident: 367 MiB of growth under
 * a 128 MiB budget with 1 worker, 709 MiB with 2, before their need was
 * read from their bytes), beside ordinary JPEGs: under a 128 MiB budget
 * they are error records naming their need, the JPEGs load, and RSS grows
 * by at most budget + 48 MiB for 1, 2 and 16 workers. */
static void webp_groups_bound(uint32_t workers) {
    char root[256], dir[300], path[400];
    one_class_root(root, sizeof root, dir, sizeof dir);
    size_t len;
    uint8_t *webp = ww_groups_webp(1024, 1024, 65536, &len);
    for (int k = 0; k < 16; k++) {
        snprintf(path, sizeof path, "%s/img_%02d.%s", dir, k, k % 2 ? "webp" : "jpg");
        if (k % 2) {
            fx_write(path, webp, len);
        } else {
            unsigned long n;
            unsigned char *jpg = fx_jpeg_bytes(320, 240, (uint64_t)k, 0, 85, &n);
            fx_write(path, jpg, n);
            free(jpg);
        }
    }
    free(webp);
    uint64_t budget = (uint64_t)128 << 20;
    sl_config cfg;
    rss_cfg(&cfg, root, workers, budget);
    cfg.max_error_rate = 1;
    uint64_t base, hwm, samples;
    sl_loader *ld = run_measured(&cfg, 1, &base, &hwm, &samples);
    CHECK_EQ(samples, 8);
    sl_error_record rec[8];
    CHECK_EQ(sl_loader_errors(ld, 0, rec, 8), 8);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(rec[i].code, SL_EBUDGET);
        CHECK_STR_CONTAINS(rec[i].reason, "over the 32.0 MiB a sample may have");
    }
    printf("%s\n", rec[0].reason);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_LE(st.peak_accounted_bytes, budget);
    sl_loader_destroy(ld);
    printf("%u workers, budget 128 MiB, 8 WebPs of 65,536 Huffman groups: RSS %llu MiB before, peak +%llu MiB, "
           "peak accounted %llu MiB\n", workers, (unsigned long long)(base >> 20),
           (unsigned long long)((hwm - base) >> 20), (unsigned long long)(st.peak_accounted_bytes >> 20));
    if (!BX_RSS_MEANINGFUL) return;
    CHECK_LE(hwm, base + budget + SLACK);
}

TEST(rss_bound_webp_huffman_groups_1_worker) { webp_groups_bound(1); }
TEST(rss_bound_webp_huffman_groups_2_workers) { webp_groups_bound(2); }
TEST(rss_bound_webp_huffman_groups_16_workers) { webp_groups_bound(16); }
