/* The GPU/CPU split of a batch and the bisection of failed batched calls. See split.h. */
#include "gpu/split.h"

#include <math.h>

uint32_t sl__gpu_split(const sl__split_in *in, uint8_t *to_gpu) {
    uint32_t eligible = 0;
    for (uint32_t i = 0; i < in->n; i++) eligible += in->eligible[i] != 0;
    double k = eligible;
    int measured = in->gpu_rate > 0 && in->cpu_rate > 0 && isfinite(in->gpu_rate) && isfinite(in->cpu_rate);
    if (!in->gpu_only && measured) {
        double gq = in->gpu_queued > 0 ? in->gpu_queued : 0, cq = in->cpu_queued > 0 ? in->cpu_queued : 0;
        k = nearbyint((in->gpu_rate * (cq + in->n) - in->cpu_rate * gq) / (in->gpu_rate + in->cpu_rate));
        if (!(k > 0)) k = 0; /* negative or NaN */
        if (k > eligible) k = eligible;
    }
    uint32_t want = (uint32_t)k, got = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        to_gpu[i] = in->eligible[i] && got < want;
        got += to_gpu[i];
    }
    return got;
}

uint32_t sl__gpu_bisect(const uint32_t *idx, uint32_t n, sl__bisect_run run, void *ctx, uint8_t *bad) {
    struct { uint32_t lo, n; } stack[64]; /* a range, then its halves: depth <= log2(n) + 1 <= 33 */
    uint32_t top = 0, calls = 0;
    for (uint32_t k = 0; k < n; k++) bad[k] = SL_BISECT_OK;
    if (n) stack[top++].lo = 0, stack[0].n = n;
    while (top) {
        uint32_t lo = stack[top - 1].lo, m = stack[top - 1].n;
        top--;
        calls++;
        int r = run(ctx, idx + lo, m);
        if (r == SL_BISECT_OK) continue;
        if (r == SL_BISECT_LATER || m == 1) {
            for (uint32_t k = 0; k < m; k++) bad[lo + k] = r == SL_BISECT_LATER ? SL_BISECT_LATER : SL_BISECT_FAILED;
            continue;
        }
        uint32_t half = m / 2; /* the second half below the first: the first runs first */
        stack[top].lo = lo + half, stack[top++].n = m - half;
        stack[top].lo = lo, stack[top++].n = half;
    }
    return calls;
}
