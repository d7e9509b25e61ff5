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

/*
 * Which of nvJPEG's two hardware modes a batched call takes, where the
 * engine holds a handle in each (0 and 1: the pipelined batched decode and
 * the one without, in the order unpiped_first says), measured on the calls
 * themselves (docs/gpu.md "The hardware's two modes"):
 *   - the first SL_HWM_WARM calls take the chosen handle (first handle 0),
 *     every fourth the other, so that its buffers have grown to the images
 *     before it is measured;
 *   - then SL_HWM_WINDOW calls alternate between the two, each call's
 *     hardware seconds (the batched call and the wait for its GPU work)
 *     summed per handle with its hardware samples; alternating, so that a
 *     change around the window (a training loop starting) weighs on both;
 *   - the pipelined mode is chosen where it was SL_HWM_GAIN faster a
 *     sample, else the other: beside a training loop part of the
 *     pipeline's cost lies outside this measure (its driver calls slow the
 *     loop's own launches), so it must win by a margin;
 *   - the chosen one to the cycle's end, then a window again. A cycle is
 *     SL_HWM_CYCLE calls after a window that moved the calls, twice the
 *     last after one that kept them, at most SL_HWM_CYCLE_MAX: a mode that
 *     keeps winning is measured less often, as every window spends half its
 *     calls on the loser.
 * Calls with no hardware sample are not counted. Pure: tested without a GPU.
 */
#define SL_HWM_WARM 16u
#define SL_HWM_WINDOW 32u
#define SL_HWM_CYCLE 512u
#define SL_HWM_CYCLE_MAX 8192u
#define SL_HWM_GAIN 0.05 /* alone the pipeline has read 0.81-0.94 of the other, beside a model 0.98-2.9 */

typedef struct sl__hw_modes {
    int unpiped_first; /* handle 0 is the mode without the pipeline */
    int use;           /* the chosen handle */
    uint32_t pos;      /* calls into the cycle */
    uint32_t cycle;    /* this cycle's calls */
    double s[2];       /* the window's hardware seconds per handle */
    uint64_t n[2];     /* and its hardware samples */
} sl__hw_modes;

typedef struct sl__hw_verdict {
    int moved;                  /* the calls go to the other handle from now */
    double us_piped, us_unpiped; /* the window's microseconds a sample in each mode */
} sl__hw_verdict;

void sl__hw_modes_init(sl__hw_modes *m, int unpiped_first);
/* The handle the next call takes. */
int sl__hw_modes_pick(const sl__hw_modes *m);
/* After a call on handle took: its hardware seconds s over n hardware
 * samples. Returns 1 where a window ended, its verdict in *v. */
int sl__hw_modes_account(sl__hw_modes *m, int took, double s, uint64_t n, sl__hw_verdict *v);

#endif
