/*
 * Which positions of a batch the GPU engine decodes and which the CPU
 * workers decode: a pure function of measured rates and queue state, so
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

#endif
