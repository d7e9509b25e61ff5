/*
 * The array read path alone, on the datasets of make_fields_bench.py:
 * THREADS threads take samples in a seeded random order and do what a
 * sluice worker will do for a `fields` sample — open, read the header,
 * plan (one crop for the pair and its events, or points per scan), read
 * only the window into a slot-sized buffer — with no loader around it
 * (no batches, no delivery). This is the ceiling the pipeline can reach
 * with these modules, measured beside the DataLoader (fields_peers.py)
 * and `cat` on the same machine, until sluice.Loader takes fields=.
 *
 *   fields_read DATA pairs|lidar [THREADS] [SAMPLES]
 *
 * Prints one JSON line: samples/s, output MB/s, file MB/s (the bytes of
 * the files the samples name, per second: comparable with cat's rate),
 * peak RSS. bench/fields_read.sh builds it (statically, to run on a bare
 * GPU host).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "format/array.h"
#include "ops/array.h"

#define MAX_FILES 8

typedef struct sample {
    int n;
    char *path[MAX_FILES];
} sample;

static const char *data_dir;
static int lidar;
static sample *samples;
static uint64_t nsamples, want, *order;
static _Atomic uint64_t next_job, file_bytes, out_bytes;
static sl__array_shape shape[MAX_FILES]; /* per position in a sample */
static sl__array_spec spec[MAX_FILES];

/* The quoted strings of a row that name files (bench input, written by
 * make_fields_bench.py: no escapes). */
static void parse_row(char *line, sample *s) {
    for (char *p = strchr(line, '"'); p && s->n < MAX_FILES; p = strchr(p + 1, '"')) {
        char *e = strchr(p + 1, '"');
        if (!e) break;
        size_t n = (size_t)(e - p - 1);
        if (n > 4 && (!memcmp(e - 4, ".npy", 4) || !memcmp(e - 4, ".bin", 4))) {
            s->path[s->n] = strndup(p + 1, n);
            s->n++;
        }
        p = e;
    }
}

static void load(const char *jsonl) {
    FILE *f = fopen(jsonl, "r");
    if (!f) perror(jsonl), exit(1);
    char line[8192];
    uint64_t cap = 1024;
    samples = calloc(cap, sizeof *samples);
    while (fgets(line, sizeof line, f)) {
        if (nsamples == cap) samples = realloc(samples, (cap *= 2) * sizeof *samples);
        memset(&samples[nsamples], 0, sizeof *samples);
        parse_row(line, &samples[nsamples]);
        if (samples[nsamples].n) nsamples++;
    }
    fclose(f);
}

static int open_array(const char *rel, sl__sample_file *f, sl__array_info *a, char *why) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir, rel);
    *f = (sl__sample_file){.fd = open(path, O_RDONLY | O_CLOEXEC)}; /* a local file: no remote object */
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st)) return snprintf(why, 256, "%s: cannot open", path), -1;
    f->offset = 0;
    f->size = (uint64_t)st.st_size;
    if (!lidar) return sl__npy_read_header(f->fd, 0, f->size, a, why, 256);
    int64_t dims[2] = {-1, 4};
    return sl__raw_info(SL_DTYPE_FLOAT32, 0, dims, 2, f->size, a, why, 256);
}

/* One sample into slot; the rng is the sample's (one crop for a pair). */
static int do_sample(uint64_t idx, uint8_t *slot, sl__quota *q, char *why) {
    const sample *s = &samples[idx % nsamples];
    sl__rng group;
    sl__rng_init(&group, 1, 0, idx);
    uint64_t off = 0;
    for (int k = 0; k < s->n; k++) {
        sl__sample_file f;
        sl__array_info a;
        int pos = lidar ? 0 : k, rc = open_array(s->path[k], &f, &a, why);
        sl__rng rng = group; /* a copy per field: the crop group's window */
        sl__array_plan p;
        if (!rc) rc = sl__array_plan_sample(&a, &spec[pos], &shape[pos], &rng, &p, why, 256);
        if (!rc) rc = sl__array_read(&f, &a, &p, q, slot + off, NULL, why, 256);
        if (f.fd >= 0) close(f.fd);
        if (rc) return rc;
        atomic_fetch_add(&file_bytes, f.size);
        off += shape[pos].bytes;
    }
    atomic_fetch_add(&out_bytes, off);
    return 0;
}

static void *worker(void *arg) {
    uint64_t slot_bytes = (uint64_t)(uintptr_t)arg;
    uint8_t *slot = malloc(slot_bytes);
    sl__quota q = {SL_ARRAY_CHUNK + (1 << 20), 0, 0, 0};
    char why[256];
    for (;;) {
        uint64_t j = atomic_fetch_add(&next_job, 1);
        if (j >= want) break;
        if (do_sample(order[j % nsamples] + j / nsamples * nsamples, slot, &q, why)) {
            fprintf(stderr, "sample %llu: %s\n", (unsigned long long)j, why);
            exit(1);
        }
    }
    free(slot);
    return NULL;
}

/* Field shapes from the first sample. */
static uint64_t setup(void) {
    uint64_t slot = 0;
    char why[256];
    for (int k = 0; k < samples[0].n; k++) {
        int pos = lidar ? 0 : k;
        if (lidar) spec[0] = (sl__array_spec){.points = 16384};
        else spec[pos] = (sl__array_spec){.layout = "HWC", .crop = {256, 256}};
        if (!lidar && k == 2) memcpy(spec[pos].layout, "CHW", 4); /* events */
        sl__sample_file f;
        sl__array_info a;
        if (open_array(samples[0].path[k], &f, &a, why) || sl__array_out_shape(&spec[pos], &a, &shape[pos], why, 256))
            fprintf(stderr, "%s\n", why), exit(1);
        close(f.fd);
        slot += shape[pos].bytes;
    }
    return slot;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fields_read DATA pairs|lidar [THREADS] [SAMPLES]\n");
        return 2;
    }
    data_dir = argv[1];
    lidar = !strcmp(argv[2], "lidar");
    int threads = argc > 3 ? atoi(argv[3]) : 16;
    char jsonl[4096];
    snprintf(jsonl, sizeof jsonl, "%s/%s.jsonl", data_dir, argv[2]);
    load(jsonl);
    if (!nsamples) return fprintf(stderr, "%s: no samples\n", jsonl), 1;
    want = argc > 4 ? strtoull(argv[4], NULL, 10) : nsamples;
    order = malloc(nsamples * sizeof *order); /* a seeded permutation, as a shuffled epoch */
    sl__rng r;
    sl__rng_init(&r, 7, 0, 0);
    for (uint64_t i = 0; i < nsamples; i++) order[i] = i;
    for (uint64_t i = nsamples; i > 1; i--) {
        uint64_t j = sl__rng_below(&r, i), t = order[i - 1];
        order[i - 1] = order[j], order[j] = t;
    }
    uint64_t slot = setup();
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    uint64_t t0 = sl__now_ns();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)slot);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double s = (double)(sl__now_ns() - t0) / 1e9;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"loader\": \"sluice read path (fields_read.c, %d threads)\", \"case\": \"%s\", \"samples\": %llu, "
           "\"seconds\": %.3f, \"samples_per_s\": %.2f, \"out_mb_per_s\": %.1f, \"file_mb_per_s\": %.1f, "
           "\"peak_rss_mb\": %.1f}\n",
           threads, argv[2], (unsigned long long)want, s, (double)want / s, (double)out_bytes / s / 1e6,
           (double)file_bytes / s / 1e6, (double)ru.ru_maxrss / 1024);
    return 0;
}
