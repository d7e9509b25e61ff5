/*
 * Scheduling policies of the GPU engine, pure functions tested without a
 * GPU. Which positions of a batch the GPU engine decodes and which the CPU
 * workers decode (decode=auto): a pure function of measured rates and queue state, so
 * the scheduler's choice is testable and repeatable. Only the engine
 * changes with it: the batch's samples, their order and their crop boxes
 * and flips come from the sampler and the plan, whatever the split.
 *
 * Policy: both sides should finish together. With the GPU decoding k of
 * the batch's n samples, the GPU is done after (gpu_queued + k) / gpu_rate
 * and the CPU after (cpu_queued + n - k) / cpu_rate; the k that equalizes
 * them is
 *     k = (gpu_rate * (cpu_queued + n) - cpu_rate * gpu_queued) / (gpu_rate + cpu_rate)
 * rounded to nearest, then kept within [0, number of eligible positions]
 * (samples the GPU cannot take stay on the CPU whatever the rates). Until
 * both rates are measured (a rate <= 0), every eligible sample goes to the
 * GPU, which is how its rate gets measured. The k chosen are the first k
 * eligible positions in batch order.
 */
#ifndef SL_GPU_SPLIT_H
#define SL_GPU_SPLIT_H

#include <stdint.h>

typedef struct sl__split_in {
    uint32_t n;                /* positions in the batch */
    const uint8_t *eligible;   /* eligible[i] != 0: the GPU can decode position i */
    double gpu_rate, cpu_rate; /* samples/s: the engine's measured rate, the CPU workers' summed */
    double gpu_queued;         /* samples already issued to the GPU, not yet done */
    double cpu_queued;         /* samples waiting for or in CPU workers */
    int gpu_only;              /* 1: every eligible position to the GPU (decode="gpu") */
} sl__split_in;

/* Fill to_gpu[0, n) with 1 (GPU) or 0 (CPU); returns how many went to the
 * GPU. Deterministic: the same input gives the same answer. */
uint32_t sl__gpu_split(const sl__split_in *in, uint8_t *to_gpu);

/*
 * A batched call that fails as a whole when one of its samples is bad
 * (nvjpegDecodeBatchedEx: one corrupt file fails the call), made so that a
 * bad sample costs only itself and the good ones stay on the backend they
 * were routed to, whichever samples shared their call: run(ctx, idx + lo,
 * m) decodes the samples idx[lo, lo + m) in one call and returns
 * SL_BISECT_OK, SL_BISECT_FAILED (a sample is bad: a call over more than
 * one sample is split in halves, each run again, down to samples alone) or
 * SL_BISECT_LATER (the call could not be made now, e.g. its allocator had
 * no room: no sample is judged). On return bad[k] says what became of
 * idx[k]: SL_BISECT_OK (decoded by a call that succeeded, the last one to
 * write it), SL_BISECT_FAILED (its call alone failed), SL_BISECT_LATER.
 * Calls are made in index order within each range; returns how many were
 * made (1 when none failed; at most 2 b ceil(log2 n) + 1 for b bad samples).
 */
enum { SL_BISECT_OK = 0, SL_BISECT_FAILED = 1, SL_BISECT_LATER = 2 };
typedef int (*sl__bisect_run)(void *ctx, const uint32_t *idx, uint32_t m);
uint32_t sl__gpu_bisect(const uint32_t *idx, uint32_t n, sl__bisect_run run, void *ctx, uint8_t *bad);

#endif
