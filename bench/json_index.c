/*
 * The JSON library decision (issue 10, item 3): what parsing a 1,000,000-row
 * `.jsonl` manifest costs with the hand-written subset parser in
 * src/source/manifest.c, with jansson and with cJSON, against the whole
 * index time (sluice's sl__source_open on the same file: read, parse,
 * store the paths and labels).
 *
 *   bench/json_index.sh [DIR] [ROWS]       (builds this; default 1,000,000 rows)
 *   json_index FILE.jsonl [REPEATS]
 *
 * Each parser walks the text line by line and hands (path, label) to the
 * same callback; the libraries build a document per line and free it (as
 * a manifest reader would). Printed: the best of REPEATS runs, wall and
 * CPU seconds (the share is of CPU seconds: wall time on a shared machine
 * includes waiting for a core), and the allocations each library made
 * (counted through its allocator hooks: the same hooks a budgeted reader
 * would use).
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "source/manifest.h"
#include "source/source.h"

typedef struct sink {
    uint64_t rows, bytes;
    int64_t labels;
} sink;

static int on_row(void *ctx, const char *path, size_t len, int64_t label) {
    sink *s = ctx;
    s->rows++;
    s->bytes += len;
    s->labels += label;
    return 0;
}

/* ---- counting allocator hooks (what a budgeted reader would install) ----- */

static uint64_t alloc_calls, alloc_bytes, live, peak;

static void *count_malloc(size_t n) {
    void *p = malloc(n);
    if (p) {
        alloc_calls++;
        size_t u = malloc_usable_size(p);
        alloc_bytes += u;
        live += u;
        if (live > peak) peak = live;
    }
    return p;
}
static void count_free(void *p) {
    if (p) live -= malloc_usable_size(p);
    free(p);
}

/* ---- the three parsers ------------------------------------------------------ */

static int parse_builtin(const char *t, size_t n, sink *s) {
    char err[256];
    int rc = sl__manifest_parse_jsonl(t, n, on_row, s, err, sizeof err);
    if (rc) fprintf(stderr, "builtin: %s\n", err);
    return rc;
}

/* The next non-blank line of t[0, n) from *pos: 1 with line, len; 0 at the end. */
static int next_line(const char *t, size_t n, size_t *pos, const char **line, size_t *len) {
    while (*pos < n) {
        const char *e = memchr(t + *pos, '\n', n - *pos);
        *line = t + *pos;
        *len = e ? (size_t)(e - *line) : n - *pos;
        *pos += *len + 1;
        if (*len) return 1;
    }
    return 0;
}

static int parse_jansson(const char *t, size_t n, sink *s) {
    const char *line;
    size_t len, pos = 0;
    while (next_line(t, n, &pos, &line, &len)) {
        json_error_t e;
        json_t *o = json_loadb(line, len, 0, &e);
        json_t *p = o ? json_object_get(o, "path") : NULL, *l = o ? json_object_get(o, "label") : NULL;
        if (!json_is_string(p) || !json_is_integer(l)) {
            fprintf(stderr, "jansson: bad row: %s\n", o ? "fields" : e.text);
            json_decref(o);
            return -1;
        }
        on_row(s, json_string_value(p), json_string_length(p), (int64_t)json_integer_value(l));
        json_decref(o);
    }
    return 0;
}

static int parse_cjson(const char *t, size_t n, sink *s) {
    const char *line;
    size_t len, pos = 0;
    while (next_line(t, n, &pos, &line, &len)) {
        cJSON *o = cJSON_ParseWithLength(line, len);
        cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "path"), *l = cJSON_GetObjectItemCaseSensitive(o, "label");
        if (!cJSON_IsString(p) || !cJSON_IsNumber(l)) {
            fprintf(stderr, "cjson: bad row\n");
            cJSON_Delete(o);
            return -1;
        }
        on_row(s, p->valuestring, strlen(p->valuestring), (int64_t)l->valuedouble);
        cJSON_Delete(o);
    }
    return 0;
}

/* ---- timing ------------------------------------------------------------------- */

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef int (*parse_fn)(const char *, size_t, sink *);

static void time_parser(const char *name, parse_fn fn, const char *t, size_t n, int reps, double index_s) {
    double best = 1e9, best_cpu = 1e9;
    sink s = {0};
    alloc_calls = alloc_bytes = peak = live = 0;
    for (int r = 0; r < reps; r++) {
        memset(&s, 0, sizeof s);
        uint64_t t0 = sl__now_ns();
        double c0 = cpu_s();
        if (fn(t, n, &s)) exit(1);
        double w = (double)(sl__now_ns() - t0) / 1e9, c = cpu_s() - c0;
        if (w < best) best = w;
        if (c < best_cpu) best_cpu = c;
    }
    printf("{\"parser\": \"%s\", \"rows\": %llu, \"seconds\": %.3f, \"cpu_s\": %.3f, \"cpu_share_of_index\": %.2f, "
           "\"allocs_per_row\": %.1f, \"alloc_bytes_per_row\": %.0f, \"peak_live_bytes\": %llu}\n",
           name, (unsigned long long)s.rows, best, best_cpu, index_s > 0 ? best_cpu / index_s : 0,
           (double)alloc_calls / (double)reps / (double)(s.rows ? s.rows : 1),
           (double)alloc_bytes / (double)reps / (double)(s.rows ? s.rows : 1), (unsigned long long)peak);
}

static double cpu_s(void);

/* Best wall and CPU seconds of sl__source_open; returns the CPU seconds
 * (the machine may be shared: CPU time is what the parsers are compared by). */
static double time_index(const char *path, int reps) {
    double best = 1e9, best_cpu = 1e9;
    for (int r = 0; r < reps; r++) {
        sl__budget b;
        sl__budget_init(&b, (uint64_t)8 << 30);
        sl__source *src;
        char err[256];
        uint64_t t0 = sl__now_ns();
        double c0 = cpu_s();
        if (sl__source_open(&b, path, 1, &src, err, sizeof err)) {
            fprintf(stderr, "index: %s\n", err);
            exit(1);
        }
        double w = (double)(sl__now_ns() - t0) / 1e9, c = cpu_s() - c0;
        if (w < best) best = w;
        if (c < best_cpu) best_cpu = c;
        if (r == reps - 1)
            printf("{\"index\": \"sl__source_open (builtin parser)\", \"rows\": %llu, \"seconds\": %.3f, "
                   "\"cpu_s\": %.3f, \"index_bytes\": %llu}\n",
                   (unsigned long long)sl__source_count(src), best, best_cpu, (unsigned long long)atomic_load(&b.used));
        sl__source_close(src);
        sl__budget_fini(&b);
    }
    return best_cpu;
}

static int make(const char *path, long rows) {
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    for (long i = 0; i < rows; i++)
        fprintf(f, "{\"path\": \"train/n%08ld/img_%ld.JPEG\", \"label\": %ld}\n", i % 1000, i, i % 1000);
    return fclose(f);
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "make")) return make(argv[2], atol(argv[3]));
    if (argc < 2) {
        fprintf(stderr, "usage: json_index FILE.jsonl [REPEATS] | make FILE.jsonl ROWS\n");
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return perror(argv[1]), 1;
    size_t n = (size_t)st.st_size;
    char *t = malloc(n);
    if (!t || read(fd, t, n) != (ssize_t)n) return perror("read"), 1;
    close(fd);
    json_set_alloc_funcs(count_malloc, count_free);
    cJSON_Hooks hooks = {count_malloc, count_free};
    cJSON_InitHooks(&hooks);
    double index_s = time_index(argv[1], reps);
    time_parser("builtin (manifest.c)", parse_builtin, t, n, reps, index_s);
    time_parser("jansson " JANSSON_VERSION, parse_jansson, t, n, reps, index_s);
    char cj[64];
    snprintf(cj, sizeof cj, "cJSON %s", cJSON_Version());
    time_parser(cj, parse_cjson, t, n, reps, index_s);
    free(t);
    return 0;
}
