/*
 * The table index on many rows: a schema source's .jsonl (or .csv) opened
 * with three columns (a path, an integer label, a list of 4 numbers), as
 * sl_loader_create indexes it. Prints one JSON line: rows, best wall and
 * CPU seconds of REPEATS opens, the index's bytes.
 *
 *   table_index make PATH ROWS    write PATH (.jsonl or .csv) of ROWS rows
 *   table_index time PATH [REPEATS]
 * Built against a libsluice.a by bench/table_index.sh (this tree's, or an
 * older commit's for a before/after).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "source/source.h"

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int make(const char *path, long rows) {
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    int csv = strstr(path, ".csv") != NULL;
    if (csv) fprintf(f, "path,label,box\n");
    for (long i = 0; i < rows; i++) {
        long c = i % 1000;
        if (csv) fprintf(f, "train/n%08ld/img_%ld.JPEG,%ld,0.%ld\n", c, i, c, i % 97);
        else
            fprintf(f, "{\"path\": \"train/n%08ld/img_%ld.JPEG\", \"label\": %ld, \"box\": [0.%ld, 0.25, 12.5, %ld]}\n",
                    c, i, c, i % 97, i % 13);
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "make")) return make(argv[2], atol(argv[3]));
    if (argc < 3 || strcmp(argv[1], "time")) {
        fprintf(stderr, "usage: table_index make PATH ROWS | time PATH [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    sl__colreq req[3] = {{"path", SL__VAL_FILE, 0}, {"label", SL__VAL_INT, 0}, {"box", SL__VAL_NUMBERS, 0}};
    double best_wall = 1e9, best_cpu = 1e9;
    uint64_t rows = 0, bytes = 0;
    for (int r = 0; r < repeats; r++) {
        sl__budget b;
        sl__budget_init(&b, (uint64_t)8 << 30);
        sl__source *s;
        char err[512];
        double w0 = wall_s(), c0 = cpu_s();
        if (sl__source_open_cols(&b, argv[2], 1, req, 3, &s, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        double w = wall_s() - w0, c = cpu_s() - c0;
        best_wall = w < best_wall ? w : best_wall;
        best_cpu = c < best_cpu ? c : best_cpu;
        rows = sl__source_count(s);
        bytes = atomic_load(&b.used);
        sl__source_close(s);
        sl__budget_fini(&b);
    }
    printf("{\"path\": \"%s\", \"rows\": %llu, \"wall_s\": %.3f, \"cpu_s\": %.3f, \"index_bytes\": %llu}\n", argv[2],
           (unsigned long long)rows, best_wall, best_cpu, (unsigned long long)bytes);
    return 0;
}
