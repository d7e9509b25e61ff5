/*
 * sluice bench DATASET [--preset train|val] [--size 224] [--batch 256]
 *   [--budget 512M] [--workers N|auto] [--prefetch N] [--epochs N | --batches N]
 *   [--seed S] [--rank R --world-size W] [--no-shuffle] [--drop-last]
 *   [--on-error skip|raise] [--max-pixels N] [--max-bytes SIZE] [--exif] [--json]
 *
 * Runs the pipeline flat out, throws batches away, reports throughput and
 * memory. Memory is measured, not estimated: the process's RSS before the
 * loader is created and its peak RSS (VmHWM) at the end, beside the
 * budget's own accounting. The checksum hashes every delivered batch's
 * bytes and labels, in order, so determinism can be checked from outside.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/hash.h"
#include "../src/base/util.h"
#include "cli.h"
#include "common.h"
#include "sluice.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice bench DATASET [--preset train|val] [--size 224] [--batch 256]\n"
            "                    [--budget 512M] [--workers N|auto] [--prefetch N]\n"
            "                    [--epochs N | --batches N] [--seed S] [--rank R --world-size W]\n"
            "                    [--no-shuffle] [--drop-last] [--on-error skip|raise]\n"
            "                    [--max-pixels N] [--max-bytes SIZE] [--exif] [--json]\n"
            "DATASET: an image folder (class folders; DATASET/train if present) or a\n"
            "manifest .csv/.jsonl (path,label). Sizes take K, M, G suffixes (1024).\n");
}

static int parse_u64(const char *s, uint64_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *v = x;
    return 0;
}

static double now_s(void) { return (double)sl__now_ns() / 1e9; }

int sl_cli_bench(int argc, char **argv) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.flags |= SL_FLAG_CHECKSUM;
    int json = 0;
    uint64_t epochs = 0, max_batches = 0, v;
    const char *dataset = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL()                                                              \
    do {                                                                        \
        if (!val) {                                                             \
            fprintf(stderr, "sluice bench: %s needs a value\n", a);             \
            return 2;                                                           \
        }                                                                       \
        i++;                                                                    \
    } while (0)
#define NUM(dst, lo, hi)                                                                  \
    do {                                                                                  \
        NEED_VAL();                                                                       \
        if (parse_u64(val, &v) || v < (lo) || v > (hi)) {                                 \
            fprintf(stderr, "sluice bench: %s takes a whole number from %llu to %llu, not '%s'\n", a, \
                    (unsigned long long)(lo), (unsigned long long)(hi), val);             \
            return 2;                                                                     \
        }                                                                                 \
        dst = v;                                                                          \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--preset")) {
            NEED_VAL();
            if (!strcmp(val, "train")) cfg.preset = SL_PRESET_TRAIN;
            else if (!strcmp(val, "val")) cfg.preset = SL_PRESET_VAL;
            else {
                fprintf(stderr, "sluice bench: --preset is train or val, not '%s'\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--size")) {
            NUM(cfg.size, 1, 16384);
        } else if (!strcmp(a, "--batch")) {
            NUM(cfg.batch_size, 1, 1u << 20);
        } else if (!strcmp(a, "--budget") || !strcmp(a, "--max-bytes")) {
            NEED_VAL();
            uint64_t sz = 0;
            char why[256] = "0 bytes: give a size above 0, such as 512M or 2G";
            if (sl_parse_size_msg(val, &sz, why, sizeof why) || sz == 0) {
                fprintf(stderr, "sluice bench: %s: %s\n", a, why);
                return 2;
            }
            if (!strcmp(a, "--budget")) cfg.budget = sz;
            else cfg.max_bytes = sz;
        } else if (!strcmp(a, "--workers")) {
            NEED_VAL();
            if (!strcmp(val, "auto")) cfg.workers = 0;
            else if (parse_u64(val, &v) || v < 1 || v > 1024) {
                fprintf(stderr, "sluice bench: --workers takes 1..1024 or auto, not '%s'\n", val);
                return 2;
            } else cfg.workers = (uint32_t)v;
        } else if (!strcmp(a, "--prefetch")) {
            NUM(cfg.prefetch, 1, 1024);
        } else if (!strcmp(a, "--epochs")) {
            NUM(epochs, 1, 1000000);
        } else if (!strcmp(a, "--batches")) {
            NUM(max_batches, 1, UINT64_MAX / 2);
        } else if (!strcmp(a, "--seed")) {
            NUM(cfg.seed, 0, UINT64_MAX);
        } else if (!strcmp(a, "--rank")) {
            NUM(cfg.rank, 0, 1u << 20);
        } else if (!strcmp(a, "--world-size")) {
            NUM(cfg.world_size, 1, 1u << 20);
        } else if (!strcmp(a, "--max-pixels")) {
            NUM(cfg.max_pixels, 1, UINT64_MAX);
        } else if (!strcmp(a, "--no-shuffle")) {
            cfg.shuffle = 0;
        } else if (!strcmp(a, "--drop-last")) {
            cfg.drop_last = 1;
        } else if (!strcmp(a, "--exif")) {
            cfg.flags |= SL_FLAG_EXIF;
        } else if (!strcmp(a, "--on-error")) {
            NEED_VAL();
            if (!strcmp(val, "skip")) cfg.on_error = SL_ON_ERROR_SKIP;
            else if (!strcmp(val, "raise")) cfg.on_error = SL_ON_ERROR_RAISE;
            else {
                fprintf(stderr, "sluice bench: --on-error is skip or raise, not '%s'\n", val);
                return 2;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "sluice bench: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!dataset) {
            dataset = a;
        } else {
            fprintf(stderr, "sluice bench: one DATASET only ('%s' and '%s')\n", dataset, a);
            return 2;
        }
#undef NUM
#undef NEED_VAL
    }
    if (!dataset) {
        usage(stderr);
        return 2;
    }
    if (epochs && max_batches) {
        fprintf(stderr, "sluice bench: give --epochs or --batches, not both\n");
        return 2;
    }
    if (!epochs && !max_batches) epochs = 1;
    cfg.source = dataset;

    uint64_t rss_before = sl_cli_rss_bytes();
    char err[512] = "";
    sl_loader *ld;
    int rc = sl_loader_create(&cfg, &ld, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sluice bench: %s: %s\n", sl_strerror(rc), err[0] ? err : sl_strerror(rc));
        if (rc == SL_EBUDGET) fprintf(stderr, "sluice bench: the options: --budget, --batch, --size, --workers\n");
        return 1;
    }
    int tty = isatty(2); /* one-line progress on a terminal */
    uint64_t checksum = 0, batches = 0, samples = 0, epochs_done = 0, failed_batches = 0;
    double t0 = now_s(), last = t0;
    int exit_code = 0;
    for (;;) {
        sl_batch *b;
        rc = sl_loader_next(ld, &b);
        if (rc == 0) {
            uint64_t pair[2] = {checksum, sl_batch_checksum(b)};
            checksum = sl__hash64(pair, sizeof pair, 0x5175696365ull);
            samples += sl_batch_len(b);
            batches++;
            sl_loader_release(ld, b);
            if (max_batches && batches >= max_batches) break;
        } else if (rc == SL_EEND) {
            if (epochs && ++epochs_done >= epochs) break;
        } else if (rc == SL_ESAMPLE) {
            failed_batches++;
            if (json == 0) fprintf(stderr, "sluice bench: a batch was dropped (on_error=raise)\n");
        } else {
            fprintf(stderr, "sluice bench: %s\n", sl_strerror(rc));
            exit_code = 1;
            break;
        }
        if (tty) {
            double t = now_s();
            if (t - last > 0.25) {
                sl_stats st;
                sl_loader_stats(ld, &st);
                char a1[32], a2[32];
                fprintf(stderr, "\r\033[K[sluice bench] %" PRIu64 " samples  %.0f/s  memory %s / %s  errors %" PRIu64,
                        samples, samples / (t - t0), sl__fmt_bytes(st.accounted_bytes, a1, sizeof a1),
                        sl__fmt_bytes(st.budget_bytes, a2, sizeof a2), st.errors);
                last = t;
            }
        }
    }
    double secs = now_s() - t0;
    if (tty) fprintf(stderr, "\r\033[K");
    sl_stats st;
    sl_loader_stats(ld, &st);
    uint64_t peak_rss = sl_cli_peak_rss_bytes();
    sl_error_record recs[5];
    size_t nrec = sl_loader_errors(ld, 0, recs, 5);
    char path[4096];
    const char *preset = cfg.preset == SL_PRESET_TRAIN ? "train" : "val";
    if (json) {
        FILE *o = stdout;
        fprintf(o, "{\"samples\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"seconds\": %.3f, \"samples_per_s\": %.1f", samples,
                batches, secs, secs > 0 ? samples / secs : 0.0);
        fprintf(o, ", \"workers\": %u, \"slots\": %u, \"budget_bytes\": %" PRIu64 ", \"peak_accounted_bytes\": %" PRIu64,
                st.workers, st.slots, st.budget_bytes, st.peak_accounted_bytes);
        fprintf(o, ", \"fixed_bytes\": %" PRIu64 ", \"peak_rss_bytes\": %" PRIu64 ", \"rss_before_bytes\": %" PRIu64
                   ", \"rss_growth_bytes\": %" PRId64,
                st.fixed_bytes, peak_rss, rss_before, (int64_t)(peak_rss - rss_before));
        fprintf(o, ", \"errors\": %" PRIu64 ", \"error_samples\": [", st.errors);
        for (size_t i = 0; i < nrec; i++) {
            const char *p = sl_loader_sample_path(ld, recs[i].index, path, sizeof path);
            fprintf(o, "%s{\"path\": ", i ? ", " : "");
            sl_cli_json_str(o, p ? p : "?");
            fprintf(o, ", \"reason\": ");
            sl_cli_json_str(o, recs[i].reason);
            fprintf(o, ", \"code\": ");
            sl_cli_json_str(o, sl_strerror(recs[i].code));
            fprintf(o, "}");
        }
        fprintf(o, "], \"checksum\": \"%016" PRIx64 "\", \"dropped_batches\": %" PRIu64, checksum, failed_batches);
        fprintf(o, ", \"preset\": \"%s\", \"size\": %u, \"batch\": %u, \"seed\": %" PRIu64 ", \"epochs\": %" PRIu64, preset,
                cfg.size, cfg.batch_size, cfg.seed, epochs_done);
        fprintf(o, ", \"dataset_samples\": %" PRIu64 ", \"index_seconds\": %.3f, \"consumer_wait_s\": %.3f",
                sl_loader_dataset_size(ld), st.index_seconds, st.consumer_wait_s);
        fprintf(o, ", \"worker_busy_s\": %.3f, \"worker_idle_s\": %.3f, \"budget_wait_s\": %.3f", st.worker_busy_s,
                st.worker_idle_s, st.budget_wait_s);
        fprintf(o, ", \"mem_peak_bytes\": {");
        for (int c = 0; c < SL_MEM__COUNT; c++)
            fprintf(o, "%s\"%s\": %" PRIu64, c ? ", " : "", sl_mem_category_name(c), st.mem_peak[c]);
        fprintf(o, "}, \"version\": ");
        sl_cli_json_str(o, sl_version());
        fprintf(o, "}\n");
    } else {
        char a1[32], a2[32], a3[32], a4[32], a5[32], a6[32];
        printf("sluice bench: %s, preset %s %ux%u, batch %u, %u workers, %u slots\n", dataset, preset, cfg.size, cfg.size,
               cfg.batch_size, st.workers, st.slots);
        printf("  %" PRIu64 " samples in %" PRIu64 " batches, %.2f s: %.1f samples/s (index %.3f s, consumer waited %.2f s)\n",
               samples, batches, secs, secs > 0 ? samples / secs : 0.0, st.index_seconds, st.consumer_wait_s);
        printf("  memory: peak accounted %s of budget %s (fixed %s); process RSS %s before, peak %s (+%s)\n",
               sl__fmt_bytes(st.peak_accounted_bytes, a1, sizeof a1), sl__fmt_bytes(st.budget_bytes, a2, sizeof a2),
               sl__fmt_bytes(st.fixed_bytes, a5, sizeof a5), sl__fmt_bytes(rss_before, a3, sizeof a3),
               sl__fmt_bytes(peak_rss, a4, sizeof a4), sl__fmt_bytes(peak_rss - rss_before, a6, sizeof a6));
        printf("  by category (peak):");
        for (int c = 0; c < SL_MEM__COUNT; c++)
            printf(" %s %s", sl_mem_category_name(c), sl__fmt_bytes(st.mem_peak[c], a1, sizeof a1));
        printf("\n  errors: %" PRIu64 "%s\n", st.errors, st.errors ? " (first below)" : "");
        for (size_t i = 0; i < nrec; i++) {
            const char *p = sl_loader_sample_path(ld, recs[i].index, path, sizeof path);
            printf("    %s: %s\n", p ? p : "?", recs[i].reason);
        }
        printf("  checksum %016" PRIx64 "\n", checksum);
    }
    sl_loader_destroy(ld);
    return exit_code;
}
