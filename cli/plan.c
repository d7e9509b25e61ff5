/*
 * sluice plan DATA [--preset train|val] [--size N] [--batch N] [--budget SIZE]
 *                  [--sample N] [--seed S] [--fields FILE.json] [--json] [--no-python]
 *                  [--net-limit RATE [--rate N]]
 *
 * Size a pipeline before starting it. plan asks the library how it would
 * size the pipeline (sl_loader_plan: index, slots, worker baselines — the
 * same steps create runs), measures one core's decode rate on an evenly
 * spaced sample of the dataset (images: the library's own decode path, one
 * file at a time; a --fields schema: a one-worker loader over that many
 * samples) and what a PyTorch DataLoader worker costs, then prints, over
 * workers x prefetch, the memory each would take, the throughput to expect,
 * which rows fit the budget, and the configuration sluice itself chooses
 * (exit 1 when it would refuse the budget, as sluice bench). A schema's
 * samples are sized by their outputs (name, kind, dtype, shape, bytes) and
 * files, never by an image preset. With --net-limit, the sample cache that
 * keeps the bytes fetched from storage (the network, for s3:// and
 * http(s):// data) under that rate at --rate samples/s (default: the rate
 * predicted for sluice's choice): the cache evicts the entry used farthest
 * ahead, so under fresh permutations it serves cache/dataset of the bytes
 * (docs/cache.md), and the rest is fetched again every epoch. Samples are
 * read through sl_source (a file, a shard's member, a remote object).
 * Public API only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity */
#endif
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "sluice.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* The per-worker base when python3 + torch cannot be run to measure it,
 * marked "constant (not measured)" wherever it is printed: the USS of a
 * forked torch 2.13 (CPU) DataLoader worker after its first batch, measured
 * on the development machine (USS 15.3 MB, PSS 93 MB), rounded up. */
#define SL_PLAN_WORKER_BASE_DEFAULT ((uint64_t)16 << 20)

typedef struct plan_opts {
    const char *data;
    char *fields;              /* --fields file's text (owned) */
    int preset;
    uint32_t size, batch, sample;
    uint64_t budget, seed;
    int json, python;
    uint64_t net_limit;        /* bytes/s (0: no network row) */
    double rate;               /* samples/s for it (0: sluice's predicted rate) */
} plan_opts;

/* One output of a schema's samples, as a batch holds it. */
typedef struct field_size {
    char name[64];
    int kind, dtype, ndim;     /* SL_KIND_*, SL_DTYPE_*; ndim of one sample */
    int64_t shape[SL_MAX_DIMS - 1];
    uint64_t bytes;            /* one sample's */
} field_size;

#define PLAN_MAX_FIELDS 32

typedef struct measure {
    uint64_t dataset;          /* samples in the dataset */
    uint32_t sampled, failed;  /* decoded, and failed (error records) */
    double enc_mean, full_mean, out_mean;
    uint64_t enc_max, full_max, out_max;
    double cpu_s;              /* one-core decode + transform time, summed */
    double index_s;
    /* a schema's (--fields): its outputs, and the bytes of a sample's files */
    int nfields;
    field_size field[PLAN_MAX_FIELDS];
    double files_mean;
    uint64_t files_max;
} measure;

typedef struct model {
    uint64_t base, slot, scratch; /* fixed(w, p) = base + p*slot + w*scratch */
} model;

typedef struct worker_base {
    uint64_t bytes, pss, uss;
    uint64_t main_pss; /* the DataLoader's main process (0: not measured) */
    int measured;
    char how[160];
} worker_base;

static const char *const flags[] = {"--preset", "--size", "--batch", "--budget", "--sample", "--seed",
                                    "--fields", "--json", "--no-python", "--net-limit", "--rate", "--help", NULL};

static void usage(FILE *f) {
    fputs("usage: sluice plan DATA [--preset train|val] [--size 224] [--batch 256] [--budget 512M]\n"
          "                        [--sample 200] [--seed S] [--fields FILE.json] [--json] [--no-python]\n"
          "                        [--net-limit RATE [--rate N]]\n"
          "  decodes --sample files spread evenly over DATA on one core, then predicts memory\n"
          "  and throughput over workers x prefetch for sluice and a PyTorch DataLoader\n"
          "  --fields     a schema of named fields (docs/fields.md): size schema samples\n"
          "  --no-python  do not run python3 to measure a DataLoader worker's base memory\n"
          "  --net-limit  bytes/s storage (the network, for s3:// or http(s):// data) may serve, e.g.\n"
          "               200M: the sample cache that keeps the fetches under it (docs/remote.md)\n"
          "  --rate       samples/s the training takes, for --net-limit (default: sluice's predicted rate)\n",
          f);
}

static int cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The library's sizing of this pipeline for (workers, prefetch, budget);
 * 0 = its automatic choice. */
static int plan_for(const plan_opts *o, uint32_t workers, uint32_t prefetch, uint64_t budget, sl_plan *p, char *err,
                    size_t errlen) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = o->data;
    cfg.fields = o->fields;
    cfg.batch_size = o->batch;
    cfg.size = o->size;
    cfg.preset = o->preset;
    cfg.workers = workers;
    cfg.prefetch = prefetch;
    cfg.budget = budget;
    cfg.seed = o->seed;
    return sl_loader_plan(&cfg, p, err, errlen);
}

/* Sample idx's file (value 0: the image), at most max bytes, into *buf
 * (grown with realloc): a file, a shard's member or a remote object, read
 * as the loader reads it (sl_source). */
static int read_value(const sl_source *src, uint64_t idx, uint64_t max, unsigned char **buf, size_t *cap,
                      size_t *len) {
    uint64_t size;
    int rc = sl_source_file(src, idx, 0, 0, &size, NULL, 0, NULL, 0);
    if (rc) return rc;
    if (size > max) return SL_ELIMIT;
    if (size > *cap || !*buf) {
        size_t nc = (size_t)MAX(size, (uint64_t)1 << 20);
        unsigned char *p = realloc(*buf, nc);
        if (!p) return SL_ENOMEM;
        *buf = p;
        *cap = nc;
    }
    int64_t got = sl_source_read(src, idx, 0, 0, *buf, *cap, NULL, 0);
    if (got < 0) return (int)got;
    *len = (size_t)got;
    return 0;
}

/* The outputs of b (a batch of one sample) into m->field. */
static void record_fields(const sl_batch *b, measure *m) {
    int n = sl_batch_num_fields(b);
    for (int i = 0; i < n && m->nfields < PLAN_MAX_FIELDS; i++) {
        sl_field f;
        if (sl_batch_field(b, i, &f) || f.ndim < 1) continue;
        field_size *fs = &m->field[m->nfields++];
        snprintf(fs->name, sizeof fs->name, "%s", f.name);
        fs->kind = f.kind, fs->dtype = f.dtype, fs->ndim = f.ndim - 1;
        for (int d = 1; d < f.ndim; d++) fs->shape[d - 1] = f.shape[d];
        fs->bytes = f.nbytes / (f.shape[0] > 0 ? (uint64_t)f.shape[0] : 1);
    }
}

/* The bytes of the files of n samples spread evenly over the source (every
 * file value, every file of a sequence), as the source indexes them. */
static int measure_files(const sl_config *cfg, uint64_t n, measure *m, char *err, size_t errlen) {
    sl_source *src;
    int rc = sl_source_open(cfg, &src, err, errlen);
    if (rc) return rc;
    uint64_t len = sl_source_len(src), total = 0;
    int nv = sl_source_num_values(src);
    n = MIN(n, len);
    for (uint64_t k = 0; k < n && !rc; k++) {
        uint64_t i = k * len / n, bytes = 0;
        for (int v = 0; v < nv && !rc; v++) {
            sl_value val;
            if (sl_source_value(src, i, v, &val) || (val.type != SL_VALUE_FILE && val.type != SL_VALUE_FILES)) continue;
            for (uint32_t e = 0; e < val.count; e++) {
                uint64_t size = 0;
                if (sl_source_file(src, i, v, e, &size, NULL, 0, NULL, 0) == 0) bytes += size;
            }
        }
        total += bytes;
        m->files_max = MAX(m->files_max, bytes);
    }
    m->files_mean = n ? (double)total / n : 0;
    sl_source_close(src);
    return 0;
}

/* A schema's samples: a one-worker loader over o->sample samples (batch
 * 1, shuffled, so spread over the dataset); the worker's busy time is one
 * core's cost of them. */
static int measure_schema(const plan_opts *o, measure *m, char *err, size_t errlen) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = o->data;
    cfg.fields = o->fields;
    cfg.batch_size = 1;
    cfg.workers = 1;
    cfg.prefetch = 2;
    cfg.seed = o->seed;
    cfg.budget = (uint64_t)1 << 40;
    sl_loader *ld;
    int rc = sl_loader_create(&cfg, &ld, err, errlen);
    if (rc) return rc;
    m->dataset = sl_loader_dataset_size(ld);
    uint64_t n = MIN((uint64_t)o->sample, m->dataset);
    for (uint64_t k = 0; k < n; k++) {
        sl_batch *b;
        if ((rc = sl_loader_next(ld, &b))) break;
        if (!m->nfields) record_fields(b, m);
        sl_loader_release(ld, b);
    }
    sl_stats st;
    sl_loader_stats(ld, &st);
    sl_loader_destroy(ld);
    if (rc && rc != SL_EEND) {
        snprintf(err, errlen, "%s: sampling stopped: %s", o->data, sl_strerror(rc));
        return rc;
    }
    m->index_s = st.index_seconds;
    m->sampled = (uint32_t)st.samples;
    m->failed = (uint32_t)st.errors;
    m->cpu_s = st.worker_busy_s;
    if (!m->sampled) {
        snprintf(err, errlen, "%s: none of the %llu sampled samples loaded", o->data, (unsigned long long)n);
        return SL_EEMPTY;
    }
    return measure_files(&cfg, n, m, err, errlen);
}

/* Decode o->sample files spread evenly over the dataset, one at a time on
 * this thread. Paths come from a loader over the dataset (workers 1). */
static int measure_sample(const plan_opts *o, measure *m, char *err, size_t errlen) {
    if (o->fields) return measure_schema(o, m, err, errlen);
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = o->data;
    cfg.batch_size = 1;
    cfg.size = o->size;
    cfg.preset = o->preset;
    cfg.workers = 1;
    cfg.prefetch = 1;
    cfg.budget = (uint64_t)1 << 40;
    sl_source *src;
    double t_index = sl_cli_now_s();
    int rc = sl_source_open(&cfg, &src, err, errlen);
    if (rc) return rc;
    m->index_s = sl_cli_now_s() - t_index;
    m->dataset = sl_source_len(src);
    uint64_t n = o->sample < m->dataset ? o->sample : m->dataset;
    unsigned char *file = NULL, *out = NULL;
    size_t fcap = 0, ocap = 0;
    double enc = 0, full = 0, outb = 0;
    sl_decode_opts d;
    sl_decode_opts_init(&d);
    d.preset = o->preset;
    d.size = o->size;
    d.seed = o->seed;
    d.max_pixels = cfg.max_pixels;
    d.max_bytes = cfg.max_bytes;
    for (uint64_t k = 0; k < n && rc == 0; k++) {
        uint64_t idx = k * m->dataset / n; /* evenly spaced through the index */
        size_t len = 0;
        int frc = read_value(src, idx, cfg.max_bytes, &file, &fcap, &len);
        if (frc == SL_ENOMEM) rc = frc;
        sl_image_info info;
        uint32_t w, h, c;
        if (frc || sl_image_probe(file, len, &info) || sl_image_output_size(file, len, &d, &w, &h, &c)) {
            m->failed++;
            continue;
        }
        uint64_t osz = (uint64_t)w * h * c, fsz;
        if (__builtin_mul_overflow((uint64_t)info.width * info.height, info.channels == 4 ? 4 : 3, &fsz))
            fsz = UINT64_MAX;
        if (osz > ocap) {
            free(out);
            out = osz < SIZE_MAX ? malloc((size_t)osz) : NULL;
            ocap = out ? (size_t)osz : 0;
            if (!out) {
                rc = SL_ENOMEM;
                break;
            }
        }
        d.index = idx;
        double t0 = thread_cpu_s();
        int drc = sl_image_decode(file, len, &d, out, (size_t)osz, NULL, 0);
        double dt = thread_cpu_s() - t0;
        if (drc) {
            m->failed++;
            continue;
        }
        m->cpu_s += dt;
        m->sampled++;
        enc += (double)len;
        full += (double)fsz;
        outb += (double)osz;
        m->enc_max = MAX(m->enc_max, (uint64_t)len);
        m->full_max = MAX(m->full_max, fsz);
        m->out_max = MAX(m->out_max, osz);
    }
    free(file);
    free(out);
    sl_source_close(src);
    if (rc) {
        snprintf(err, errlen, "%s: sampling stopped: %s", o->data, sl_strerror(rc));
        return rc;
    }
    if (!m->sampled) {
        snprintf(err, errlen, "%s: none of the %llu sampled files decoded", o->data, (unsigned long long)n);
        return SL_EEMPTY;
    }
    m->enc_mean = enc / m->sampled;
    m->full_mean = full / m->sampled;
    m->out_mean = outb / m->sampled;
    return 0;
}

/* Base memory of one PyTorch DataLoader worker: a forked worker of a
 * python3 that imported torch, measured from its smaps_rollup after its
 * first batch. USS is what each added worker costs (its shared pages are
 * the parent's); PSS is reported alongside. It prints one line: the
 * worker's PSS and USS and its parent's PSS, in bytes. */
static const char *const worker_probe_py =
    "import os, torch\n"
    "from torch.utils.data import DataLoader, Dataset\n"
    "class D(Dataset):\n"
    "    def __len__(self): return 64\n"
    "    def __getitem__(self, i): return i\n"
    "def rollup(pid):\n"
    "    r = {}\n"
    "    for l in open('/proc/%d/smaps_rollup' % pid):\n"
    "        p = l.split()\n"
    "        if len(p) >= 2 and p[0].endswith(':') and p[1].isdigit(): r[p[0][:-1]] = int(p[1]) * 1024\n"
    "    return r\n"
    "it = iter(DataLoader(D(), batch_size=4, num_workers=1, prefetch_factor=1))\n"
    "next(it)\n"
    "r = rollup(it._workers[0].pid)\n"
    "m = rollup(os.getpid())\n"
    "print(r['Pss'], r['Private_Clean'] + r['Private_Dirty'], m['Pss'])\n";

static void measure_worker_base(int python, worker_base *wb) {
    memset(wb, 0, sizeof *wb);
    wb->bytes = SL_PLAN_WORKER_BASE_DEFAULT;
    snprintf(wb->how, sizeof wb->how, "constant (not measured): 16 MiB, USS of a torch 2.13 worker on the dev machine");
    if (!python) return;
    char path[] = "/tmp/sluice-plan-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(path);
        return;
    }
    fputs(worker_probe_py, f);
    fclose(f);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "timeout 120 python3 %s 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    char line[512] = "";
    if (p) {
        if (!fgets(line, sizeof line, p)) line[0] = 0;
        pclose(p);
    }
    unlink(path);
    unsigned long long pss, uss, main_pss;
    if (sscanf(line, "%llu %llu %llu", &pss, &uss, &main_pss) != 3) return;
    wb->main_pss = main_pss;
    wb->pss = pss;
    wb->uss = uss;
    wb->bytes = wb->uss;
    wb->measured = 1;
    snprintf(wb->how, sizeof wb->how, "measured: USS of a forked python3+torch DataLoader worker after its first batch");
}

static const char *kind_name(int kind) {
    static const char *const names[] = {"?",     "image",  "array", "sequence", "video",
                                        "label", "target", "index", "length"};
    return kind > 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

/* "[32, 32, 3]" ("[]" for a scalar) into buf. */
static const char *shape_text(const field_size *f, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < f->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)f->shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* A schema's outputs, one line each: what applies to arrays, sequences and
 * targets as to images (dtype, shape, bytes), never an image preset. */
static void text_fields(const measure *m) {
    char s[160], b[32];
    for (int i = 0; i < m->nfields; i++) {
        const field_size *f = &m->field[i];
        printf("  %-14s %-8s %-7s %-22s %10s\n", f->name, kind_name(f->kind), sl_dtype_name(f->dtype),
               shape_text(f, s, sizeof s), sl_format_size(f->bytes, b, sizeof b));
    }
}

static void json_fields(const measure *m) {
    printf("\"fields\":[");
    for (int i = 0; i < m->nfields; i++) {
        const field_size *f = &m->field[i];
        printf("%s{\"name\":", i ? "," : "");
        sl_cli_json_str(stdout, f->name);
        printf(",\"kind\":\"%s\",\"dtype\":\"%s\",\"shape\":[", kind_name(f->kind), sl_dtype_name(f->dtype));
        for (int d = 0; d < f->ndim; d++) printf("%s%lld", d ? "," : "", (long long)f->shape[d]);
        printf("],\"bytes\":%llu}", (unsigned long long)f->bytes);
    }
    printf("]");
}

int sl_cli_plan(int argc, char **argv) {
    plan_opts o = {NULL, NULL, SL_PRESET_TRAIN, 224, 256, 200, (uint64_t)512 << 20, 0, 0, 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o.json = 1;
            continue;
        }
        if (!strcmp(a, "--no-python")) {
            o.python = 0;
            continue;
        }
        if (a[0] != '-') {
            if (o.data) {
                fprintf(stderr, "sluice plan: one dataset, not %s too\n", a);
                return 2;
            }
            o.data = a;
            continue;
        }
        if (!sl_cli_flag_known(a, flags, NULL)) {
            sl_cli_unknown_flag("plan", a, flags, NULL);
            usage(stderr);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "sluice plan: %s needs a value\n", a);
            return 2;
        }
        i++;
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        int bad = *end != 0 || v[0] == '-'; /* for the numeric flags */
        if (!strcmp(a, "--preset")) {
            bad = 0;
            if (!strcmp(v, "train")) o.preset = SL_PRESET_TRAIN;
            else if (!strcmp(v, "val")) o.preset = SL_PRESET_VAL;
            else bad = 1;
        } else if (!strcmp(a, "--size")) {
            bad |= n < 1 || n > 65535;
            o.size = (uint32_t)n;
        } else if (!strcmp(a, "--batch")) {
            bad |= n < 1 || n > 1u << 20;
            o.batch = (uint32_t)n;
        } else if (!strcmp(a, "--sample")) {
            bad |= n < 1 || n > 1u << 24;
            o.sample = (uint32_t)n;
        } else if (!strcmp(a, "--seed")) {
            o.seed = n;
        } else if (!strcmp(a, "--budget")) {
            char why[256] = "0 bytes: give a size above 0, such as 512M or 2G";
            bad = 0;
            if (sl_parse_size_msg(v, &o.budget, why, sizeof why) || o.budget == 0) {
                fprintf(stderr, "sluice plan: --budget: %s\n", why);
                return 2;
            }
        } else if (!strcmp(a, "--fields")) {
            free(o.fields);
            if (!(o.fields = sl_cli_read_fields("plan", v))) return 2;
            bad = 0;
        } else if (!strcmp(a, "--net-limit")) {
            char why[256] = "0 bytes/s: give a rate above 0, such as 200M";
            bad = 0;
            if (sl_parse_size_msg(v, &o.net_limit, why, sizeof why) || o.net_limit == 0) {
                fprintf(stderr, "sluice plan: --net-limit (bytes per second): %s\n", why);
                return 2;
            }
        } else { /* --rate */
            o.rate = strtod(v, &end);
            bad = *end != 0 || !(o.rate > 0);
        }
        if (bad) {
            fprintf(stderr, "sluice plan: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
    if (!o.data) {
        usage(stderr);
        return 2;
    }
    if (o.rate > 0 && !o.net_limit) {
        fprintf(stderr, "sluice plan: --rate goes with --net-limit\n");
        return 2;
    }
    char err[512] = "";
    measure m = {0};
    int rc = measure_sample(&o, &m, err, sizeof err);
    if (rc) {
        sl_cli_error("plan", rc, err);
        free(o.fields);
        return 1;
    }
    /* The loader's reservation model and its own choice, from the library's sizing. */
    const uint64_t roomy = (uint64_t)1 << 44;
    sl_plan base;
    if ((rc = plan_for(&o, 1, 1, roomy, &base, err, sizeof err))) {
        sl_cli_error("plan", rc, err);
        free(o.fields);
        return 1;
    }
    model md = {base.index_bytes, base.slot_bytes, base.worker_bytes};
    sl_plan pick;
    char pick_err[512] = "";
    int pick_rc = plan_for(&o, 0, 0, o.budget, &pick, pick_err, sizeof pick_err);
    if (pick_rc == 0 && pick.min_budget > o.budget) {
        char x[32], y[32];
        snprintf(pick_err, sizeof pick_err, "budget %s is below the minimum working set of %s",
                 sl_format_size(o.budget, x, sizeof x), sl_format_size(pick.min_budget, y, sizeof y));
        pick_rc = SL_EBUDGET;
    }
    worker_base wb;
    measure_worker_base(o.python, &wb);

    int ncores = cores();
    double per_core = m.cpu_s > 0 ? m.sampled / m.cpu_s : 0;
    uint64_t sample_bytes = base.sample_bytes; /* every sample has the same output size */
    uint32_t wl[16];
    int nw = 0;
    int wmax = MAX(8, 2 * ncores);
    for (int w = 1; w <= wmax && nw < 15; w *= 2) wl[nw++] = (uint32_t)w;
    if ((ncores & (ncores - 1)) && ncores <= wmax) wl[nw++] = (uint32_t)ncores;
    for (int i = 1; i < nw; i++) /* keep the list sorted */
        for (int j = i; j > 0 && wl[j] < wl[j - 1]; j--) {
            uint32_t x = wl[j];
            wl[j] = wl[j - 1];
            wl[j - 1] = x;
        }
    const uint32_t pl[] = {1, 2, 4};
    char a[24], b[24], c[24], d[24], e[24]; /* one buffer per value of a printf */
    typedef unsigned long long ull;
    if (o.json) {
        printf("{\"dataset\":");
        sl_cli_json_str(stdout, o.data);
        printf(",\"dataset_samples\":%llu,\"sampled\":%u,\"failed\":%u,", (ull)m.dataset, m.sampled, m.failed);
        if (o.fields) {
            json_fields(&m);
            printf(",\"file_bytes_mean\":%.0f,\"file_bytes_max\":%llu,", m.files_mean, (ull)m.files_max);
        } else {
            printf("\"preset\":\"%s\",\"size\":%u,\"encoded_bytes_mean\":%.0f,\"encoded_bytes_max\":%llu,"
                   "\"decoded_bytes_mean\":%.0f,\"decoded_bytes_max\":%llu,",
                   o.preset == SL_PRESET_VAL ? "val" : "train", o.size, m.enc_mean, (ull)m.enc_max, m.full_mean,
                   (ull)m.full_max);
        }
        printf("\"batch\":%u,\"budget_bytes\":%llu,\"cores\":%d,\"index_seconds\":%.3f,\"sample_bytes\":%llu,"
               "\"decode_s_per_sample\":%.6f,\"one_core_samples_per_s\":%.1f,",
               o.batch, (ull)o.budget, ncores, m.index_s, (ull)sample_bytes, m.cpu_s / m.sampled, per_core);
        printf("\"sluice_model\":{\"base_bytes\":%llu,\"slot_bytes\":%llu,\"scratch_per_worker_bytes\":%llu},",
               (ull)md.base, (ull)md.slot, (ull)md.scratch);
        printf("\"worker_base\":{\"bytes\":%llu,\"measured\":%s,\"pss_bytes\":%llu,\"uss_bytes\":%llu,"
               "\"main_process_pss_bytes\":%llu,\"how\":",
               (ull)wb.bytes, wb.measured ? "true" : "false", (ull)wb.pss, (ull)wb.uss, (ull)wb.main_pss);
        sl_cli_json_str(stdout, wb.how);
        printf("},\"rows\":[");
    } else {
        printf("sluice plan  %s  (%llu samples, %u sampled evenly, %u failed)\n", o.data, (ull)m.dataset, m.sampled,
               m.failed);
        if (o.fields) {
            printf("schema of %d outputs, batch %u, budget %s, %d cores\n", m.nfields, o.batch,
                   sl_format_size(o.budget, a, sizeof a), ncores);
            printf("per sample: files %s (max %s), in the batch %s:\n", sl_format_size((uint64_t)m.files_mean, a, sizeof a),
                   sl_format_size(m.files_max, b, sizeof b), sl_format_size(sample_bytes, c, sizeof c));
            text_fields(&m);
            printf("load + transform on one core: %.2f ms/sample = %.0f samples/s\n", 1e3 * m.cpu_s / m.sampled,
                   per_core);
        } else {
            printf("preset %s %u, batch %u, budget %s, %d cores\n", o.preset == SL_PRESET_VAL ? "val" : "train",
                   o.size, o.batch, sl_format_size(o.budget, a, sizeof a), ncores);
            printf("per sample: encoded %s (max %s), decoded %s (max %s), in the batch %s\n",
                   sl_format_size((uint64_t)m.enc_mean, a, sizeof a), sl_format_size(m.enc_max, b, sizeof b),
                   sl_format_size((uint64_t)m.full_mean, c, sizeof c), sl_format_size(m.full_max, d, sizeof d),
                   sl_format_size(sample_bytes, e, sizeof e));
            printf("decode + transform on one core: %.2f ms/sample = %.0f samples/s\n", 1e3 * m.cpu_s / m.sampled,
                   per_core);
        }
        printf("sluice reserves: %s base (index, bookkeeping) + %s per batch slot + %s per worker\n",
               sl_format_size(md.base, a, sizeof a), sl_format_size(md.slot, b, sizeof b), sl_format_size(md.scratch, c, sizeof c));
        printf("DataLoader worker base: %s (%s)\n", sl_format_size(wb.bytes, a, sizeof a), wb.how);
        if (wb.main_pss)
            printf("DataLoader main process: %s (measured: PSS of the python3+torch parent beside its worker)\n",
                   sl_format_size(wb.main_pss, a, sizeof a));
        printf("\n%7s %8s %14s %5s %16s %5s %12s\n", "workers", "prefetch", "sluice", "fits", "DataLoader", "fits",
               "samples/s");
    }
    int first = 1;
    for (int i = 0; i < nw; i++) {
        for (size_t j = 0; j < sizeof pl / sizeof pl[0]; j++) {
            uint32_t w = wl[i], p = pl[j];
            /* sluice: p batch slots shared by all workers; DataLoader: p
             * batches per worker, each worker's process base, and the main
             * process (python3 + torch, measured with the workers). */
            double sl_bytes = (double)md.base + (double)p * md.slot + (double)w * md.scratch;
            double dl_bytes = (double)w * p * o.batch * (double)sample_bytes + (double)w * wb.bytes + (double)wb.main_pss;
            double rate = MIN((int)w, ncores) * per_core;
            int sl_fits = sl_bytes <= (double)o.budget, dl_fits = dl_bytes <= (double)o.budget;
            if (o.json) {
                printf("%s{\"workers\":%u,\"prefetch\":%u,\"sluice_bytes\":%.0f,\"sluice_fits\":%s,\"dataloader_bytes\":%.0f,"
                       "\"dataloader_fits\":%s,\"samples_per_s\":%.1f}",
                       first ? "" : ",", w, p, sl_bytes, sl_fits ? "true" : "false", dl_bytes,
                       dl_fits ? "true" : "false", rate);
            } else {
                printf("%7u %8u %14s %5s %16s %5s %12.0f\n", w, p, sl_format_size((uint64_t)sl_bytes, a, sizeof a),
                       sl_fits ? "yes" : "no", sl_format_size((uint64_t)dl_bytes, b, sizeof b), dl_fits ? "yes" : "no",
                       rate);
            }
            first = 0;
        }
    }
    /* The cache that keeps the fetches under --net-limit: it serves
     * cache/dataset of the bytes (farthest-next-use under fresh
     * permutations), the rest is fetched each epoch: rate x mean x (1 -
     * C/D) <= limit, plus its index (4 bytes a sample, 64 an entry). */
    double want_rate = o.rate > 0 ? o.rate : pick_rc == 0 ? MIN((int)pick.workers, ncores) * per_core : 0;
    double data_bytes = m.enc_mean * (double)m.dataset, demand = want_rate * m.enc_mean;
    double values = demand <= (double)o.net_limit || demand <= 0 ? 0 : data_bytes * (1 - (double)o.net_limit / demand);
    double cache_bytes = values > 0 ? values + 4.0 * (double)m.dataset + 64.0 * values / m.enc_mean : 0;
    if (o.json) {
        if (o.net_limit)
            printf("],\"network\":{\"limit_bytes_per_s\":%llu,\"samples_per_s\":%.1f,\"dataset_bytes\":%.0f,"
                   "\"fetch_bytes_per_s_without_cache\":%.0f,\"cache_bytes\":%.0f},\"choice\":",
                   (ull)o.net_limit, want_rate, data_bytes, demand, cache_bytes);
        else
            printf("],\"choice\":");
        if (pick_rc == 0) {
            double pred = (double)md.base + (double)pick.slots * md.slot + (double)pick.workers * md.scratch;
            printf("{\"workers\":%u,\"slots\":%u,\"fixed_bytes\":%llu,\"model_bytes\":%.0f,\"samples_per_s\":%.1f}",
                   pick.workers, pick.slots, (ull)pick.fixed_bytes, pred,
                   MIN((int)pick.workers, ncores) * per_core);
        } else {
            printf("{\"error\":");
            sl_cli_json_str(stdout, pick_err[0] ? pick_err : sl_strerror(pick_rc));
            printf("}");
        }
        printf("}\n");
    } else if (pick_rc == 0) {
        printf("\nsluice would choose: %u workers, %u batch slots, reserving %s of the %s budget (%.0f samples/s)\n",
               pick.workers, pick.slots, sl_format_size(pick.fixed_bytes, a, sizeof a),
               sl_format_size(o.budget, b, sizeof b), MIN((int)pick.workers, ncores) * per_core);
    } else {
        printf("\nsluice refuses this budget: %s\n", pick_err[0] ? pick_err : sl_strerror(pick_rc));
    }
    if (!o.json && o.net_limit) {
        printf("\nnetwork: the dataset is about %s (%llu samples x %s); at %.0f samples/s the loader fetches %s/s "
               "without a cache.\n",
               sl_format_size((uint64_t)data_bytes, a, sizeof a), (ull)m.dataset,
               sl_format_size((uint64_t)m.enc_mean, b, sizeof b), want_rate, sl_format_size((uint64_t)demand, c, sizeof c));
        if (cache_bytes > 0)
            printf("  to stay under %s/s: a sample cache of at least %s (--cache; cache_share=node serves the node's "
                   "ranks: give it the node's total rate with --rate)\n",
                   sl_format_size(o.net_limit, d, sizeof d), sl_format_size((uint64_t)cache_bytes, e, sizeof e));
        else
            printf("  that is under %s/s already: no cache needed for it\n", sl_format_size(o.net_limit, d, sizeof d));
    }
    free(o.fields);
    if (pick_rc) { /* as sluice bench: a budget the loader would refuse is an error (exit 1) */
        fprintf(stderr, "sluice plan: exit 1: a loader would refuse --budget %s: %s\n",
                sl_format_size(o.budget, a, sizeof a), pick_err[0] ? pick_err : sl_strerror(pick_rc));
        return 1;
    }
    return 0;
}
