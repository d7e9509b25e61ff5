/*
 * cache_ops: what a node cache's own operations cost, without files or
 * decoding, so that a change to its bookkeeping (liveness, checks at
 * attach) can be held against the build before it. One segment; OTHERS
 * processes attached beside this one (each a live slot every reap and
 * attach must judge); then, in this process:
 *
 *   attach   create + destroy of a second handle on the segment (the
 *            stale scan of /dev/shm, the header checks, the reap of the
 *            table, registering and leaving)
 *   hit      sl__cache_get of a cached value (lookup, pin, copy, release)
 *   insert   sl__cache_insert of a new key that evicts the oldest (every
 *            4096th also reaps: judges every slot)
 *
 * Each is timed over ROUNDS rounds; one JSON line with the median and the
 * best round, per operation, in microseconds (attach) or nanoseconds.
 *
 *   cc -O2 -Iinclude -Isrc bench/cache_ops.c build/libsluice.a -ljpeg -lspng -lwebp -lpthread -lm -o build/cache_ops
 *   build/cache_ops [--others 7] [--rounds 9] [--attach 200] [--hits 200000] [--inserts 20000] [--value 8192]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"
#include "cache/cache.h"
#include "sluice.h"

#define KEYS (1u << 20)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Newer keys are used sooner: every insert is admitted and evicts the oldest. */
static int fifo_next(void *ctx, uint32_t k, uint64_t now, uint64_t *next) {
    (void)ctx;
    *next = now + (1ull << 40) - k;
    return 0;
}

static sl__cache *open_cache(sl__budget *b, const char *name) {
    sl__cache_opts o = {.capacity = 64 << 20, .keys = KEYS, .max_entries = 4096, .next_use = fifo_next,
                        .shm_name = name, .block_size = 4096};
    sl__cache *c = NULL;
    char err[400] = "";
    if (sl__cache_create(b, &o, &c, err, sizeof err)) {
        fprintf(stderr, "cache_ops: %s\n", err);
        exit(1);
    }
    return c;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, int rounds, double scale, int last) {
    qsort(t, (size_t)rounds, sizeof *t, by_value);
    printf("\"%s_median\": %.3f, \"%s_best\": %.3f%s", what, t[rounds / 2] * scale, what, t[0] * scale,
           last ? "" : ", ");
}

int main(int argc, char **argv) {
    int others = 7, rounds = 9, attaches = 200, hits = 200000, inserts = 20000;
    size_t value = 8192;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--others")) others = v;
        else if (!strcmp(argv[i], "--rounds")) rounds = v;
        else if (!strcmp(argv[i], "--attach")) attaches = v;
        else if (!strcmp(argv[i], "--hits")) hits = v;
        else if (!strcmp(argv[i], "--inserts")) inserts = v;
        else if (!strcmp(argv[i], "--value")) value = (size_t)v;
        else {
            fprintf(stderr, "cache_ops: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > 99 || value > (1 << 20)) return 2;
    char name[96];
    snprintf(name, sizeof name, "/sluice-cache-ops-%ld", (long)getpid());
    sl__budget b;
    if (sl__budget_init(&b, 1 << 20)) return 1;
    sl__cache *c = open_cache(&b, name);
    int go[2], ready[2];
    if (pipe(go) || pipe(ready)) return 1;
    pid_t pids[64];
    others = others > 60 ? 60 : others;
    for (int i = 0; i < others; i++) {
        pids[i] = fork();
        if (pids[i] == 0) { /* an attached rank that only waits */
            close(go[1]);
            sl__budget cb;
            sl__budget_init(&cb, 1 << 20);
            sl__cache *mine = open_cache(&cb, name);
            char x = 'r', y;
            if (write(ready[1], &x, 1) != 1 || read(go[0], &y, 1) < 0) _exit(1);
            sl__cache_destroy(mine);
            _exit(0);
        }
    }
    close(go[0]);
    for (int i = 0; i < others; i++) {
        char x;
        if (read(ready[0], &x, 1) != 1) return 1;
    }
    uint8_t *v = calloc(1, value), *out = malloc(value);
    if (!v || !out) return 1;
    double t_attach[99], t_hit[99], t_insert[99];
    uint32_t next_key = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (int i = 0; i < attaches; i++) sl__cache_destroy(open_cache(&b, name));
        t_attach[r] = (now_s() - t0) / attaches;
        for (uint32_t k = 0; k < 256; k++) sl__cache_insert(c, next_key + k, 0, v, value);
        t0 = now_s();
        for (int i = 0; i < hits; i++) {
            size_t len;
            if (sl__cache_get(c, next_key + (uint32_t)i % 256, 0, out, value, &len) != 1) return 3;
        }
        t_hit[r] = (now_s() - t0) / hits;
        next_key += 256;
        t0 = now_s();
        for (int i = 0; i < inserts; i++) sl__cache_insert(c, next_key++ % KEYS, 0, v, value);
        t_insert[r] = (now_s() - t0) / inserts;
    }
    printf("{\"others\": %d, \"value\": %zu, \"rounds\": %d, ", others, value, rounds);
    report("attach_us", t_attach, rounds, 1e6, 0);
    report("hit_ns", t_hit, rounds, 1e9, 0);
    report("insert_ns", t_insert, rounds, 1e9, 1);
    printf("}\n");
    close(go[1]); /* the others leave */
    for (int i = 0; i < others; i++) waitpid(pids[i], NULL, 0);
    sl__cache_destroy(c);
    free(v), free(out);
    return 0;
}
