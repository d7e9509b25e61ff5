/*
 * sluice bench DATASET [--preset train|val] [--size 224] [--batch 256]
 *   [--budget 512M] [--workers N|auto] [--workers-max N] [--prefetch N] [--epochs N | --batches N]
 *   [--seed S] [--rank R --world-size W] [--no-shuffle] [--drop-last]
 *   [--on-error skip|raise] [--max-error-rate F] [--max-pixels N]
 *   [--max-bytes SIZE] [--exif] [--fields FILE.json] [--json]
 *   [--cache SIZE [--cache-share none|node] [--cache-what encoded|decoded]]
 *   [--decode cpu|gpu|prefer-gpu|auto] [--gpu-budget SIZE] [--gpu-device N] [--gpu-engines N]
 *   [--worker-nice N]
 *   [--io-requests N] [--io-readahead SIZE] [--io-timeout-ms N] [--io-retries N] [--no-hedge]
 *   [recipe flags: --size H,W --interpolation --scale --ratio --hflip --crop-pct
 *    --resize --fast --max-scans, cli/recipe.c]
 *
 * Exits 1 when the run did not do what was asked: the loader stopped (the
 * failure-rate guard, a vanished dataset), no sample was delivered, or
 * --on-error raise met a failure (the report is printed all the same).
 * Runs the pipeline flat out, throws batches away, reports throughput and
 * memory. Memory is measured, not estimated: the process's RSS before the
 * loader is created and its peak RSS (VmHWM) at the end, beside the
 * budget's own accounting. The checksum hashes every delivered batch's
 * outputs, in order, so determinism can be checked from outside. Exits 1
 * when the loader stops (the failure guard, a removed dataset), when no
 * sample was delivered, or when --on-error raise met a failure. Uses the
 * public API only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "recipe.h"
#include "sluice.h"


static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice bench DATASET [--preset train|val] [--size 224] [--batch 256]\n"
            "                    [--budget 512M] [--workers N|auto] [--workers-max N] [--worker-nice 10]\n"
            "                    [--prefetch N]\n"
            "                    [--epochs N | --batches N] [--seed S] [--rank R --world-size W]\n"
            "                    [--no-shuffle] [--drop-last] [--on-error skip|raise]\n"
            "                    [--max-error-rate F] [--max-pixels N] [--max-bytes SIZE] [--exif]\n"
            "                    [--fields FILE.json] [--json]\n"
            "                    [--cache SIZE [--cache-share none|node] [--cache-what encoded|decoded]]\n"
            "                    [--decode cpu|gpu|prefer-gpu|auto] [--gpu-budget 512M] [--gpu-device N]\n"
            "                    [--gpu-engines 1]\n"
            "                    [--io-requests 64] [--io-readahead SIZE] [--io-timeout-ms 30000]\n"
            "                    [--io-retries 8] [--no-hedge]\n"
            "%s"
            "DATASET: an image folder (class folders; DATASET/train if present) or a\n"
            "manifest .csv/.jsonl (path,label; with --fields, .jsonl rows naming each\n"
            "field's value), tar shards, or any of these at an s3:// or http(s):// URL\n"
            "(docs/remote.md: --io-* size the requests in flight, the read-ahead, the\n"
            "stall timeout and the retries). --fields: the schema, a JSON object of named fields\n"
            "(docs/fields.md). --cache: a sample cache of SIZE (docs/cache.md): a part of\n"
            "the budget, or with --cache-share node one /dev/shm segment for the node's\n"
            "ranks. --decode gpu: every JPEG the GPU engine (nvJPEG) takes decoded by it,\n"
            "beside the CPU workers, batches in device memory, the same bytes for any\n"
            "worker count (docs/gpu.md); prefer-gpu: where it can run, else the CPU; auto:\n"
            "split by measured rates (not bit-reproducible). The checksum covers device\n"
            "bytes too.\n"
            "--workers auto (the default): a tuner driven by the consumer moves how many\n"
            "workers take work (up to --workers-max: this rank's share of the CPUs) and\n"
            "how many slots are in use (docs/tuner.md); N: N workers, fixed.\n"
            "--worker-nice: the workers' priority below the process's (0..19; 10).\n"
            "Sizes take K, M, G suffixes (1024).\n",
            sl_cli_recipe_usage);
}

/* Every flag but the recipe's (sl_cli_recipe_flags), for "did you mean". */
static const char *const flags[] = {
    "--preset", "--batch", "--budget", "--workers", "--workers-max", "--worker-nice", "--prefetch", "--epochs",
    "--batches",
    "--seed", "--rank", "--world-size", "--no-shuffle", "--drop-last", "--on-error", "--max-error-rate",
    "--max-pixels", "--max-bytes", "--exif", "--fields", "--json", "--cache", "--cache-share", "--cache-what",
    "--decode", "--gpu-budget", "--gpu-device", "--gpu-engines",
    "--io-requests", "--io-readahead", "--io-timeout-ms", "--io-retries", "--no-hedge", "--help", NULL};

typedef struct bench_opts {
    sl_config cfg;
    sl_image_recipe recipe; /* what cfg.recipe points at */
    const char *dataset;
    char *fields;          /* the --fields file's text (owned) */
    uint64_t epochs, max_batches;
    int json;
} bench_opts;

typedef struct bench_run {
    uint64_t checksum, batches, samples, epochs_done, failed_batches;
    uint64_t first_hits, first_misses, first_read; /* cache counters at the end of the first epoch */
    uint64_t rss_before, peak_rss;
    double seconds;
    int exit_code;
    char stopped[400]; /* why the run stopped early or failed, if it did */
} bench_run;

static int parse_u64(const char *s, uint64_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *v = x;
    return 0;
}

/* One option that takes a value; 0, or 2 (usage error, printed). */
static int option_value(bench_opts *o, const char *a, const char *val) {
    sl_config *cfg = &o->cfg;
    uint64_t v = 0;
    struct { const char *name; uint64_t lo, hi; } nums[] = {
        {"--batch", 1, 1u << 20}, {"--prefetch", 1, 1024}, {"--epochs", 1, 1000000},
        {"--batches", 1, UINT64_MAX / 2}, {"--seed", 0, UINT64_MAX}, {"--rank", 0, 1u << 20},
        {"--world-size", 1, 1u << 20}, {"--max-pixels", 1, UINT64_MAX}, {"--gpu-device", 0, 1024},
        {"--worker-nice", 0, 19}, {"--gpu-engines", 1, 4}, {"--workers-max", 1, 1024}, {"--io-requests", 1, 1024},
        {"--io-timeout-ms", 1, 86400000}, {"--io-retries", 1, 100}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        if (strcmp(a, nums[i].name)) continue;
        if (parse_u64(val, &v) || v < nums[i].lo || v > nums[i].hi) {
            fprintf(stderr, "sluice bench: %s takes a whole number from %llu to %llu, not '%s'\n", a,
                    (unsigned long long)nums[i].lo, (unsigned long long)nums[i].hi, val);
            return 2;
        }
        if (i == 0) cfg->batch_size = (uint32_t)v;
        else if (i == 1) cfg->prefetch = (uint32_t)v;
        else if (i == 2) o->epochs = v;
        else if (i == 3) o->max_batches = v;
        else if (i == 4) cfg->seed = v;
        else if (i == 5) cfg->rank = (uint32_t)v;
        else if (i == 6) cfg->world_size = (uint32_t)v;
        else if (i == 7) cfg->max_pixels = v;
        else if (i == 8) cfg->gpu_device = (int)v;
        else if (i == 9) cfg->worker_nice = (int)v;
        else if (i == 10) cfg->gpu_engines = (uint32_t)v;
        else if (i == 11) cfg->workers_max = (uint32_t)v;
        else if (i == 12) cfg->io_requests = (uint32_t)v;
        else if (i == 13) cfg->io_timeout_ms = (uint32_t)v;
        else cfg->io_retries = (uint32_t)v;
        return 0;
    }
    if (!strcmp(a, "--preset")) {
        if (!strcmp(val, "train") || !strcmp(val, "val")) {
            cfg->preset = val[0] == 't' ? SL_PRESET_TRAIN : SL_PRESET_VAL;
            return 0;
        }
        fprintf(stderr, "sluice bench: --preset is train or val, not '%s'\n", val);
    } else if (!strcmp(a, "--budget") || !strcmp(a, "--max-bytes") || !strcmp(a, "--gpu-budget")) {
        char why[256] = "0 bytes: give a size above 0, such as 512M or 2G";
        if (sl_parse_size_msg(val, &v, why, sizeof why) == 0 && v > 0) {
            *(a[2] == 'b' ? &cfg->budget : a[2] == 'g' ? &cfg->gpu_budget : &cfg->max_bytes) = v;
            return 0;
        }
        fprintf(stderr, "sluice bench: %s: %s\n", a, why);
    } else if (!strcmp(a, "--decode")) {
        static const char *const names[] = {"cpu", "auto", "gpu", "prefer-gpu"}; /* SL_DECODE_* in order */
        for (int k = 0; k < 4; k++)
            if (!strcmp(val, names[k])) {
                cfg->decode = k;
                return 0;
            }
        fprintf(stderr, "sluice bench: --decode is cpu, gpu, prefer-gpu or auto, not '%s'\n", val);
    } else if (!strcmp(a, "--workers")) {
        if (!strcmp(val, "auto") || (parse_u64(val, &v) == 0 && v >= 1 && v <= 1024)) {
            cfg->workers = val[0] == 'a' ? 0 : (uint32_t)v;
            return 0;
        }
        fprintf(stderr, "sluice bench: --workers takes 1..1024 or auto, not '%s'\n", val);
    } else if (!strcmp(a, "--io-readahead")) {
        char why[256];
        if (sl_parse_size_msg(val, &v, why, sizeof why) == 0) {
            cfg->io_readahead = v ? v : SL_READAHEAD_OFF; /* 0: none */
            return 0;
        }
        fprintf(stderr, "sluice bench: --io-readahead: %s\n", why);
    } else if (!strcmp(a, "--cache")) {
        char why[256] = "0 bytes: give a size above 0, such as 2G";
        if (sl_parse_size_msg(val, &v, why, sizeof why) == 0 && v > 0) {
            cfg->cache = v;
            return 0;
        }
        fprintf(stderr, "sluice bench: --cache: %s\n", why);
    } else if (!strcmp(a, "--cache-share")) {
        if (!strcmp(val, "none") || !strcmp(val, "node")) {
            cfg->cache_share = val[1] == 'o' ? SL_CACHE_NODE : SL_CACHE_PRIVATE;
            return 0;
        }
        fprintf(stderr, "sluice bench: --cache-share is none or node, not '%s'\n", val);
    } else if (!strcmp(a, "--cache-what")) {
        if (!strcmp(val, "encoded") || !strcmp(val, "decoded")) {
            cfg->cache_what = val[0] == 'd' ? SL_CACHE_DECODED : SL_CACHE_ENCODED;
            return 0;
        }
        fprintf(stderr, "sluice bench: --cache-what is encoded or decoded, not '%s'\n", val);
    } else if (!strcmp(a, "--on-error")) {
        if (!strcmp(val, "skip") || !strcmp(val, "raise")) {
            cfg->on_error = val[0] == 's' ? SL_ON_ERROR_SKIP : SL_ON_ERROR_RAISE;
            return 0;
        }
        fprintf(stderr, "sluice bench: --on-error is skip or raise, not '%s'\n", val);
    } else if (!strcmp(a, "--max-error-rate")) {
        char *end;
        errno = 0;
        double r = strtod(val, &end);
        if (!errno && end != val && !*end && r >= 0 && r <= 1) {
            cfg->max_error_rate = r;
            return 0;
        }
        fprintf(stderr, "sluice bench: --max-error-rate takes a fraction from 0 to 1 (1: never stop), not '%s'\n", val);
    } else if (!strcmp(a, "--fields")) {
        free(o->fields);
        if ((o->fields = sl_cli_read_fields("bench", val))) return 0;
    } else {
        sl_cli_unknown_flag("bench", a, flags, sl_cli_recipe_flags);
        usage(stderr);
    }
    return 2;
}

/* Parse argv into o: 0, 1 (--help printed: exit 0) or 2 (usage error). */
static int parse_args(bench_opts *o, int argc, char **argv) {
    sl_config_init(&o->cfg);
    sl_image_recipe_init(&o->recipe);
    o->cfg.recipe = &o->recipe;
    o->cfg.flags |= SL_FLAG_CHECKSUM;
    sl_cli_recipe ro = {&o->recipe, &o->cfg.size, &o->cfg.flags, &o->cfg.max_scans};
    for (int i = 1; i < argc; i++) {
        int used = sl_cli_recipe_flag("bench", argc, argv, &i, &ro);
        if (used < 0) return 2;
        if (used) continue;
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--no-shuffle")) {
            o->cfg.shuffle = 0;
        } else if (!strcmp(a, "--drop-last")) {
            o->cfg.drop_last = 1;
        } else if (!strcmp(a, "--exif")) {
            o->cfg.flags |= SL_FLAG_EXIF;
        } else if (!strcmp(a, "--no-hedge")) {
            o->cfg.io_hedge = -1;
        } else if (a[0] == '-') {
            if (i + 1 >= argc) {
                if (sl_cli_flag_known(a, flags, NULL)) fprintf(stderr, "sluice bench: %s needs a value\n", a);
                else sl_cli_unknown_flag("bench", a, flags, sl_cli_recipe_flags);
                usage(stderr);
                return 2;
            }
            if (option_value(o, a, argv[++i])) return 2;
        } else if (!o->dataset) {
            o->dataset = a;
        } else {
            fprintf(stderr, "sluice bench: one DATASET only ('%s' and '%s')\n", o->dataset, a);
            return 2;
        }
    }
    if (!o->dataset) {
        usage(stderr);
        return 2;
    }
    if (o->epochs && o->max_batches) {
        fprintf(stderr, "sluice bench: give --epochs or --batches, not both\n");
        return 2;
    }
    if (!o->epochs && !o->max_batches) o->epochs = 1;
    if (o->cfg.workers && o->cfg.workers_max) {
        fprintf(stderr, "sluice bench: --workers-max goes with --workers auto (the tuner's ceiling); --workers %u "
                        "fixes the count\n", o->cfg.workers);
        return 2;
    }
    o->cfg.source = o->dataset;
    o->cfg.fields = o->fields;
    return 0;
}

/* Take batches until the epochs or batches asked for are done. */
static void run(const bench_opts *o, sl_loader *ld, bench_run *r) {
    int tty = isatty(2); /* one-line progress on a terminal */
    double t0 = sl_cli_now_s(), last = t0;
    for (;;) {
        sl_batch *b;
        int rc = sl_loader_next(ld, &b);
        if (rc == 0) {
            uint64_t pair[2] = {r->checksum, sl_batch_checksum(b)};
            r->checksum = sl_hash64(pair, sizeof pair, 0x5175696365ull);
            r->samples += sl_batch_len(b);
            r->batches++;
            sl_loader_release(ld, b);
            if (o->max_batches && r->batches >= o->max_batches) break;
        } else if (rc == SL_EEND) {
            if (++r->epochs_done == 1) { /* the cache fills in the first epoch: hit rates count from the second */
                sl_stats st;
                sl_loader_stats(ld, &st);
                r->first_hits = st.cache_hits, r->first_misses = st.cache_misses, r->first_read = st.storage_bytes_read;
            }
            if (o->epochs && r->epochs_done >= o->epochs) break;
        } else if (rc == SL_ESAMPLE) {
            r->failed_batches++;
            if (!o->json) fprintf(stderr, "sluice bench: a batch was dropped (on_error=raise)\n");
        } else {
            char why[320] = "";
            sl_loader_poisoned(ld, why, sizeof why);
            sl_cli_reason(rc, why, r->stopped, sizeof r->stopped);
            fprintf(stderr, "sluice bench: %s\n", r->stopped);
            r->exit_code = 1;
            break;
        }
        double t = sl_cli_now_s();
        if (tty && t - last > 0.25) {
            sl_stats st;
            sl_loader_stats(ld, &st);
            char a1[32], a2[32];
            fprintf(stderr, "\r\033[K[sluice bench] %" PRIu64 " samples  %.0f/s  memory %s / %s  errors %" PRIu64,
                    r->samples, r->samples / (t - t0), sl_format_size(st.accounted_bytes, a1, sizeof a1),
                    sl_format_size(st.budget_bytes, a2, sizeof a2), st.errors);
            last = t;
        }
    }
    r->seconds = sl_cli_now_s() - t0;
    if (tty) fprintf(stderr, "\r\033[K");
    if (!r->exit_code && r->samples == 0) {
        snprintf(r->stopped, sizeof r->stopped, "no sample was delivered");
        fprintf(stderr, "sluice bench: %s\n", r->stopped);
        r->exit_code = 1;
    } else if (!r->exit_code && r->failed_batches) {
        snprintf(r->stopped, sizeof r->stopped, "%llu batch(es) dropped: a sample failed (--on-error raise)",
                 (unsigned long long)r->failed_batches);
        fprintf(stderr, "sluice bench: %s\n", r->stopped);
        r->exit_code = 1;
    }
}

/* The sample cache's counters; hit rate and storage bytes also from the
 * second epoch on (the first fills the cache). */
static void report_json_cache(FILE *f, const bench_run *r, const sl_stats *st) {
    uint64_t h = st->cache_hits - r->first_hits, m = st->cache_misses - r->first_misses;
    fprintf(f, ", \"cache_hits\": %" PRIu64 ", \"cache_misses\": %" PRIu64 ", \"cache_hit_rate\": %.4f",
            st->cache_hits, st->cache_misses, st->cache_hit_rate);
    fprintf(f, ", \"cache_hit_rate_after_first_epoch\": %.4f", h + m ? (double)h / (double)(h + m) : 0.0);
    fprintf(f, ", \"cache_bytes\": %" PRIu64 ", \"cache_capacity\": %" PRIu64 ", \"cache_entries\": %" PRIu64
               ", \"cache_evictions\": %" PRIu64 ", \"cache_shared\": %u, \"cache_processes\": %u",
            st->cache_bytes, st->cache_capacity, st->cache_entries, st->cache_evictions, st->cache_shared,
            st->cache_processes);
    fprintf(f, ", \"storage_bytes_read\": %" PRIu64 ", \"storage_bytes_read_after_first_epoch\": %" PRIu64,
            st->storage_bytes_read, st->storage_bytes_read - r->first_read);
}

static const char *tune_what(int what) { return what == SL_TUNE_WORKERS ? "workers" : "slots"; }

/* The tuner: workers and slots now and over the pass, the consumer's
 * wait and CPU, the split over the pass, the last decisions. */
static void report_json_tuner(FILE *f, sl_loader *ld, const sl_stats *st) {
    fprintf(f, ", \"tuner\": %s, \"workers_active\": %u, \"workers_active_mean\": %.3f, \"slots_target\": %u",
            st->tuner ? "true" : "false", st->workers_active, st->workers_active_mean, st->slots_target);
    double pass = st->pass_seconds;
    fprintf(f, ", \"consumer_wait_fraction\": %.4f, \"pass_seconds\": %.3f, \"pass_consumer_wait_fraction\": %.4f"
               ", \"pass_consumer_wait_gpu_fraction\": %.4f, \"pass_consumer_wait_cpu_fraction\": %.4f"
               ", \"pass_consumer_cpu_s\": %.3f"
               ", \"pass_gpu_samples\": %" PRIu64 ", \"pass_cpu_samples\": %" PRIu64,
            st->seconds > 0 ? st->consumer_wait_s / st->seconds : 0.0, st->pass_seconds,
            pass > 0 ? st->pass_consumer_wait_s / pass : 0.0, pass > 0 ? st->pass_consumer_wait_gpu_s / pass : 0.0,
            pass > 0 ? st->pass_consumer_wait_cpu_s / pass : 0.0, st->pass_consumer_cpu_s, st->pass_gpu_samples,
            st->pass_cpu_samples);
    fprintf(f, ", \"node_cpus\": %u, \"node_loaders\": %u, \"node_demand\": %.3f, \"demand\": %.3f", st->node_cpus,
            st->node_loaders, st->node_demand, st->demand);
    sl_tuner_decision log[SL_TUNER_LOG];
    size_t n = sl_loader_tuner_log(ld, log, SL_TUNER_LOG);
    fprintf(f, ", \"tuner_decisions\": %" PRIu64 ", \"tuner_log\": [", st->tuner_decisions);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s{\"seq\": %" PRIu64 ", \"t\": %.3f, \"batches\": %" PRIu64 ", \"what\": \"%s\""
                   ", \"why\": \"%s\", \"from\": %u, \"to\": %u, \"reason\": ",
                i ? ", " : "", log[i].seq, log[i].t, log[i].batches, tune_what(log[i].what),
                sl_tune_why_name(log[i].why), log[i].from, log[i].to);
        sl_cli_json_str(f, log[i].reason);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

static void report_json(const bench_opts *o, sl_loader *ld, const bench_run *r, const sl_stats *st) {
    FILE *f = stdout;
    sl_error_record recs[5];
    size_t nrec = sl_loader_errors(ld, 0, recs, 5);
    char path[SL_PATH_MAX];
    fprintf(f, "{\"samples\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"seconds\": %.3f, \"samples_per_s\": %.1f",
            r->samples, r->batches, r->seconds, r->seconds > 0 ? r->samples / r->seconds : 0.0);
    fprintf(f, ", \"workers\": %u, \"slots\": %u, \"budget_bytes\": %" PRIu64 ", \"peak_accounted_bytes\": %" PRIu64,
            st->workers, st->slots, st->budget_bytes, st->peak_accounted_bytes);
    fprintf(f, ", \"fixed_bytes\": %" PRIu64 ", \"peak_rss_bytes\": %" PRIu64 ", \"rss_before_bytes\": %" PRIu64
               ", \"rss_growth_bytes\": %" PRId64,
            st->fixed_bytes, r->peak_rss, r->rss_before, (int64_t)(r->peak_rss - r->rss_before));
    fprintf(f, ", \"errors\": %" PRIu64 ", \"error_samples\": [", st->errors);
    for (size_t i = 0; i < nrec; i++) {
        const char *p = sl_loader_sample_path(ld, recs[i].index, path, sizeof path);
        fprintf(f, "%s{\"path\": ", i ? ", " : "");
        sl_cli_json_str(f, p ? p : "?");
        fprintf(f, ", \"reason\": ");
        sl_cli_json_str(f, recs[i].reason);
        fprintf(f, ", \"code\": ");
        sl_cli_json_str(f, sl_strerror(recs[i].code));
        fprintf(f, "}");
    }
    fprintf(f, "], \"checksum\": \"%016" PRIx64 "\", \"dropped_batches\": %" PRIu64, r->checksum, r->failed_batches);
    fprintf(f, ", \"stopped\": ");
    if (r->stopped[0]) sl_cli_json_str(f, r->stopped);
    else fprintf(f, "null");
    uint32_t out_h, out_w;
    sl_cli_out_dims(o->cfg.size, o->cfg.recipe, &out_h, &out_w);
    fprintf(f,
            ", \"preset\": \"%s\", \"size\": %u, \"height\": %u, \"width\": %u, \"batch\": %u, \"seed\": %" PRIu64
            ", \"epochs\": %" PRIu64,
            o->cfg.preset == SL_PRESET_TRAIN ? "train" : "val", o->cfg.size, out_h, out_w, o->cfg.batch_size,
            o->cfg.seed, r->epochs_done);
    fprintf(f, ", \"dataset_samples\": %" PRIu64 ", \"index_seconds\": %.3f, \"consumer_wait_s\": %.3f",
            sl_loader_dataset_size(ld), st->index_seconds, st->consumer_wait_s);
    fprintf(f, ", \"worker_busy_s\": %.3f, \"worker_idle_s\": %.3f, \"budget_wait_s\": %.3f", st->worker_busy_s,
            st->worker_idle_s, st->budget_wait_s);
    report_json_cache(f, r, st);
    fprintf(f, ", \"mem_peak_bytes\": {");
    for (int c = 0; c < (int)st->mem_count; c++)
        fprintf(f, "%s\"%s\": %" PRIu64, c ? ", " : "", sl_mem_category_name(c), st->mem_peak[c]);
    fprintf(f, "}, \"decode\": \"%s\", \"decode_reason\": ", st->decode == SL_DECODE_GPU ? "gpu" : "cpu");
    sl_cli_json_str(f, st->decode_reason);
    fprintf(f, ", \"gpu_samples\": %" PRIu64 ", \"cpu_samples\": %" PRIu64 ", \"gpu_handed_back\": %" PRIu64
               ", \"gpu_pool_bytes\": %" PRIu64 ", \"gpu_pool_peak_bytes\": %" PRIu64 ", \"gpu_batch_bytes\": %" PRIu64
               ", \"gpu_pinned_bytes\": %" PRIu64 ", \"gpu_staging_peak_bytes\": %" PRIu64
               ", \"gpu_rate\": %.1f, \"cpu_rate\": %.1f",
            st->gpu_samples, st->cpu_samples, st->gpu_handed_back, st->gpu_pool_bytes, st->gpu_pool_peak,
            st->gpu_batch_bytes, st->gpu_pinned_bytes, st->gpu_staging_peak, st->gpu_rate, st->cpu_rate);
    fprintf(f, ", \"gpu_engines\": %u, \"gpu_hw_s\": %.3f, \"gpu_hybrid_s\": %.3f, \"gpu_resize_s\": %.3f"
               ", \"gpu_copy_s\": %.3f, \"gpu_hw_calls\": %" PRIu64 ", \"gpu_hw_failed_calls\": %" PRIu64
               ", \"gpu_hw_calls_unpipelined\": %" PRIu64 ", \"gpu_hw_mode_switches\": %" PRIu64
               ", \"gpu_hw_us_pipelined\": %.1f, \"gpu_hw_us_unpipelined\": %.1f",
            st->gpu_engines, st->gpu_hw_s, st->gpu_hybrid_s, st->gpu_resize_s, st->gpu_copy_s, st->gpu_hw_calls,
            st->gpu_hw_failed_calls, st->gpu_hw_calls_unpipelined, st->gpu_hw_mode_switches, st->gpu_hw_us_pipelined,
            st->gpu_hw_us_unpipelined);
    fprintf(f, ", \"gpu_thread_route_s\": %.3f, \"gpu_thread_hybrid_s\": %.3f, \"gpu_thread_hw_s\": %.3f"
               ", \"gpu_thread_launch_s\": %.3f, \"gpu_thread_wait_s\": %.3f",
            st->gpu_thread_route_s, st->gpu_thread_hybrid_s, st->gpu_thread_hw_s, st->gpu_thread_launch_s,
            st->gpu_thread_wait_s);
    report_json_tuner(f, ld, st);
    fprintf(f, ", \"net_bytes\": %" PRIu64 ", \"net_requests\": %" PRIu64 ", \"net_retries\": %" PRIu64
               ", \"net_hedges\": %" PRIu64 ", \"net_timeouts\": %" PRIu64 ", \"net_failures\": %" PRIu64
               ", \"net_inflight_peak\": %u, \"readahead_started\": %" PRIu64 ", \"readahead_hits\": %" PRIu64
               ", \"readahead_dropped\": %" PRIu64,
            st->net_bytes, st->net_requests, st->net_retries, st->net_hedges, st->net_timeouts, st->net_failures,
            st->net_inflight_peak, st->readahead_started, st->readahead_hits, st->readahead_dropped);
    fprintf(f, ", \"version\": ");
    sl_cli_json_str(f, sl_version());
    fprintf(f, "}\n");
}

static void report_text(const bench_opts *o, sl_loader *ld, const bench_run *r, const sl_stats *st) {
    char a1[32], a2[32], a3[32], a4[32], a5[32], a6[32], path[SL_PATH_MAX];
    sl_error_record recs[5];
    size_t nrec = sl_loader_errors(ld, 0, recs, 5);
    if (o->fields)
        printf("sluice bench: %s, fields from the schema, batch %u, %u workers, %u slots\n", o->dataset,
               o->cfg.batch_size, st->workers, st->slots);
    else {
        uint32_t out_h, out_w;
        sl_cli_out_dims(o->cfg.size, o->cfg.recipe, &out_h, &out_w);
        printf("sluice bench: %s, preset %s %ux%u (HxW), batch %u, %u workers, %u slots\n", o->dataset,
               o->cfg.preset == SL_PRESET_TRAIN ? "train" : "val", out_h, out_w, o->cfg.batch_size, st->workers,
               st->slots);
    }
    printf("  %" PRIu64 " samples in %" PRIu64 " batches, %.2f s: %.1f samples/s (index %.3f s, consumer waited %.2f s)\n",
           r->samples, r->batches, r->seconds, r->seconds > 0 ? r->samples / r->seconds : 0.0, st->index_seconds,
           st->consumer_wait_s);
    printf("  memory: peak accounted %s of budget %s (fixed %s); process RSS %s before, peak %s (+%s)\n",
           sl_format_size(st->peak_accounted_bytes, a1, sizeof a1), sl_format_size(st->budget_bytes, a2, sizeof a2),
           sl_format_size(st->fixed_bytes, a5, sizeof a5), sl_format_size(r->rss_before, a3, sizeof a3),
           sl_format_size(r->peak_rss, a4, sizeof a4), sl_format_size(r->peak_rss - r->rss_before, a6, sizeof a6));
    printf("  by category (peak):");
    for (int c = 0; c < (int)st->mem_count; c++) printf(" %s %s", sl_mem_category_name(c), sl_format_size(st->mem_peak[c], a1, sizeof a1));
    if (st->cache_capacity)
        printf("\n  cache%s: %" PRIu64 " hits, %" PRIu64 " misses (%.1f %%), %s held of %s, %" PRIu64
               " evictions; %s read from storage",
               st->cache_shared ? " (node)" : "", st->cache_hits, st->cache_misses, 100 * st->cache_hit_rate,
               sl_format_size(st->cache_bytes, a1, sizeof a1), sl_format_size(st->cache_capacity, a2, sizeof a2),
               st->cache_evictions, sl_format_size(st->storage_bytes_read, a3, sizeof a3));
    if (st->net_requests)
        printf("\n  network: %s in %" PRIu64 " requests (%" PRIu64 " retried, %" PRIu64 " hedged, %" PRIu64
               " failed), %u in flight at most; read ahead %" PRIu64 " files, %" PRIu64 " taken",
               sl_format_size(st->net_bytes, a1, sizeof a1), st->net_requests, st->net_retries, st->net_hedges,
               st->net_failures, st->net_inflight_peak, st->readahead_started, st->readahead_hits);
    printf("\n  decode: %s\n", st->decode_reason);
    if (st->decode == SL_DECODE_GPU)
        printf("  GPU %" PRIu64 " samples, CPU %" PRIu64 " (%" PRIu64 " handed back); device pool peak %s of %s, "
               "batches %s, pinned %s\n",
               st->gpu_samples, st->cpu_samples, st->gpu_handed_back, sl_format_size(st->gpu_pool_peak, a1, sizeof a1),
               sl_format_size(st->gpu_pool_bytes, a2, sizeof a2), sl_format_size(st->gpu_batch_bytes, a3, sizeof a3),
               sl_format_size(st->gpu_pinned_bytes, a4, sizeof a4));
    if (st->pass_consumer_wait_gpu_s > 0 || st->pass_consumer_wait_cpu_s > 0) /* who held the batches up */
        printf("  of the %.2f s the consumer waited in the last pass, %.2f s for batches the busy GPU decode finished "
               "last, %.2f s for those a CPU worker's decode did\n",
               st->pass_consumer_wait_s, st->pass_consumer_wait_gpu_s, st->pass_consumer_wait_cpu_s);
    if (st->tuner) {
        sl_tuner_decision last;
        int any = sl_loader_tuner_log(ld, &last, 1) == 1;
        printf("  tuner: %u of %u workers active (%.2f on average over the pass), %u slots in use of %u; %" PRIu64
               " decision%s%s%s%s%s\n",
               st->workers_active, st->workers, st->workers_active_mean, st->slots_target, st->slots + st->slots_retired,
               st->tuner_decisions, st->tuner_decisions == 1 ? "" : "s", any ? ", the last: " : "",
               any ? tune_what(last.what) : "", any ? " " : "", any ? last.reason : "");
    }
    printf("  errors: %" PRIu64 "%s\n", st->errors, st->errors ? " (first below)" : "");
    for (size_t i = 0; i < nrec; i++) {
        const char *p = sl_loader_sample_path(ld, recs[i].index, path, sizeof path);
        printf("    %s: %s\n", p ? p : "?", recs[i].reason);
    }
    printf("  checksum %016" PRIx64 "\n", r->checksum);
}

int sl_cli_bench(int argc, char **argv) {
    bench_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(&o, argc, argv);
    if (rc) {
        free(o.fields);
        return rc == 1 ? 0 : rc;
    }
    bench_run r;
    memset(&r, 0, sizeof r);
    r.rss_before = sl_cli_rss_bytes();
    char err[512] = "";
    sl_loader *ld;
    rc = sl_loader_create(&o.cfg, &ld, err, sizeof err);
    if (rc) {
        sl_cli_error("bench", rc, err);
        if (rc == SL_EBUDGET) fprintf(stderr, "sluice bench: the options: --budget, --batch, --size, --workers, --cache\n");
        free(o.fields);
        return 1;
    }
    run(&o, ld, &r);
    sl_stats st;
    sl_loader_stats(ld, &st);
    r.peak_rss = sl_cli_peak_rss_bytes();
    if (o.json) report_json(&o, ld, &r, &st);
    else report_text(&o, ld, &r, &st);
    sl_loader_destroy(ld);
    free(o.fields);
    return r.exit_code;
}
