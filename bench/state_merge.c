/*
 * What merging the ranks' states costs (sl_state_merge, docs/engine.md
 * "Resume on another number of ranks"): W ranks of a dataset of N samples
 * stopped after B-sample batches, each having refilled a different number
 * of bad samples from its tail (a fraction BAD of what it consumed, spread
 * over the ranks), merged once, then the merged span resumed on W2 ranks,
 * stopped again and merged a second time (its states carry the gone list).
 * Prints one JSON line per merge: its CPU time (best of REPEAT; both
 * calls, the count and the list), the positions left and gone,
 * and the bytes of the gone list (what a checkpoint stores beyond ~100 B).
 * Public API only.
 *
 *   state_merge N W W2 BATCH BAD [REPEAT]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"

/* CPU seconds of this process: on a shared machine, wall time includes waiting for a CPU. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Merge n states (two calls: the count, then the list); best of repeat. */
static double merge(const sl_state *const *ptr, size_t n, sl_state *m, uint32_t **gone, int repeat) {
    double best = 1e30;
    for (int i = 0; i < repeat; i++) {
        char why[512];
        double t0 = now_s();
        int rc = sl_state_merge(ptr, n, m, NULL, 0, why, sizeof why);
        if (rc == SL_EOVERFLOW) {
            free(*gone);
            *gone = malloc(m->gone_count * sizeof **gone);
            rc = sl_state_merge(ptr, n, m, *gone, m->gone_count, why, sizeof why);
        }
        double t = now_s() - t0;
        if (rc) {
            fprintf(stderr, "merge: %s (%s)\n", sl_strerror(rc), why);
            exit(1);
        }
        if (t < best) best = t;
    }
    return best;
}

/* World of w ranks over the span of `from`, each at batch `batch` with a
 * tail lowered by its share of bad samples. */
static void world(const sl_state *from, uint64_t n, uint32_t w, uint32_t B, uint64_t batch, double bad, sl_state *st) {
    uint64_t m = from->span_end - from->span_begin - from->gone_count, per = (m + w - 1) / w;
    for (uint32_t r = 0; r < w; r++) {
        memset(&st[r], 0, sizeof st[r]);
        st[r] = *from;
        st[r].version = SL_STATE_VERSION;
        st[r].rank = r;
        st[r].world_size = w;
        st[r].batch_size = B;
        st[r].batch = batch;
        st[r].flags = 1;
        st[r].dataset_size = n;
        uint64_t refills = (uint64_t)(bad * (double)(batch * B) * (double)(1 + r % 3) / 2.0);
        st[r].tail = per - refills;
    }
}

static void report(const char *what, uint64_t n, uint32_t w, double bad, double s, const sl_state *m) {
    uint64_t left = m->span_end - m->span_begin - m->gone_count;
    printf("{\"merge\": \"%s\", \"samples\": %llu, \"ranks\": %u, \"bad\": %.3f, \"cpu_ms\": %.2f, \"left\": %llu, "
           "\"span\": [%llu, %llu], \"gone\": %llu, \"gone_bytes\": %llu}\n",
           what, (unsigned long long)n, w, bad, s * 1e3, (unsigned long long)left, (unsigned long long)m->span_begin,
           (unsigned long long)m->span_end, (unsigned long long)m->gone_count,
           (unsigned long long)m->gone_count * 4);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: state_merge N W W2 BATCH BAD [REPEAT]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[1], NULL, 10);
    uint32_t W = (uint32_t)atoi(argv[2]), W2 = (uint32_t)atoi(argv[3]), B = (uint32_t)atoi(argv[4]);
    double bad = atof(argv[5]);
    int repeat = argc > 6 ? atoi(argv[6]) : 3;
    sl_state whole;
    memset(&whole, 0, sizeof whole);
    whole.span_end = n;
    sl_state *st = calloc(W > W2 ? W : W2, sizeof *st);
    const sl_state **ptr = calloc(W > W2 ? W : W2, sizeof *ptr);
    uint32_t *gone1 = NULL, *gone2 = NULL;
    /* a third of the epoch on W ranks */
    uint64_t b1 = n / 3 / W / B;
    world(&whole, n, W, B, b1, bad, st);
    for (uint32_t r = 0; r < W; r++) ptr[r] = &st[r];
    sl_state m1, m2;
    double s1 = merge(ptr, W, &m1, &gone1, repeat);
    report("W ranks", n, W, bad, s1, &m1);
    /* another third on W2 ranks over what they left: the states carry m1's gone list */
    uint64_t b2 = n / 3 / W2 / B;
    world(&m1, n, W2, B, b2, bad, st);
    for (uint32_t r = 0; r < W2; r++) ptr[r] = &st[r];
    double s2 = merge(ptr, W2, &m2, &gone2, repeat);
    report("then W2 ranks", n, W2, bad, s2, &m2);
    free(st), free(ptr), free(gone1), free(gone2);
    return 0;
}
