/* The GPU/CPU split of a batch. See split.h for the policy. */
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
