/* The GPU/CPU split of a batch, the bisection of failed batched calls and
 * the measure of the hardware's two modes. See split.h. */
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

void sl__hw_modes_init(sl__hw_modes *m, int unpiped_first) {
    *m = (sl__hw_modes){.unpiped_first = unpiped_first != 0, .cycle = SL_HWM_CYCLE};
}

int sl__hw_modes_pick(const sl__hw_modes *m) {
    uint32_t p = m->pos;
    int other = p < SL_HWM_WARM ? p % 4 == 3 : p < SL_HWM_WARM + SL_HWM_WINDOW ? (int)(p & 1) : 0;
    return m->use ^ other;
}

int sl__hw_modes_account(sl__hw_modes *m, int took, double s, uint64_t n, sl__hw_verdict *v) {
    if (!n) return 0;
    int ended = 0;
    uint32_t p = m->pos;
    if (p >= SL_HWM_WARM && p < SL_HWM_WARM + SL_HWM_WINDOW) m->s[took != 0] += s, m->n[took != 0] += n;
    if ((p = ++m->pos) == SL_HWM_WARM + SL_HWM_WINDOW) {
        double a = m->n[0] ? m->s[0] / (double)m->n[0] : 0, b = m->n[1] ? m->s[1] / (double)m->n[1] : 0;
        double piped = m->unpiped_first ? b : a, unpiped = m->unpiped_first ? a : b;
        int want_piped = piped < (1 - SL_HWM_GAIN) * unpiped;
        int use = want_piped == m->unpiped_first; /* handle 0 is the pipelined one unless unpiped_first */
        *v = (sl__hw_verdict){.moved = use != m->use, .us_piped = 1e6 * piped, .us_unpiped = 1e6 * unpiped};
        m->cycle = v->moved ? SL_HWM_CYCLE : m->cycle * 2 > SL_HWM_CYCLE_MAX ? SL_HWM_CYCLE_MAX : m->cycle * 2;
        m->use = use;
        m->s[0] = m->s[1] = 0, m->n[0] = m->n[1] = 0;
        ended = 1;
    }
    if (p >= m->cycle) m->pos = SL_HWM_WARM;
    return ended;
}
