/*
 * The GPU decode engine: nvJPEG (the hardware JPEG engines of A100/H100/
 * H200 in batches, the GPU hybrid backend for what they refuse), then crop,
 * antialiased resize and flip on the GPU, each sample written as uint8 CHW
 * straight into its position of a device batch tensor. What the GPU cannot
 * take comes back per sample as "CPU, please" (SL_GPU_CPU, with a reason)
 * for the CPU workers.
 *
 * The crop boxes and flips are not decided here: an item is made from the
 * sample's sl__plan (sl__gpu_item_from_plan), the CPU path's own plan, so
 * batch order and augmentation parameters are the same whichever engine
 * decodes a sample. Only the pixels may differ (nvJPEG's IDCT and chroma
 * upsampling against libjpeg-turbo's, and no DCT scaling): docs/gpu.md
 * gives the measured difference.
 *
 * Memory. Device memory is one pool of cfg.gpu_budget bytes taken at
 * create and never grown; nvJPEG's own buffers come from it through its
 * allocator hooks (nvjpegCreateExV2), and so do the per-batch decode
 * outputs, intermediates and coefficient tables. Pinned memory is one
 * region counted in the host budget under SL_MEM_PINNED (as fixed bytes)
 * for the engine's life, in two pools: nvJPEG's pinned buffers and the
 * descriptors (cfg.pinned_bytes), and the caller's staging
 * (cfg.staging_bytes, sl__gpu_stage_alloc), so staging can never starve
 * nvJPEG nor nvJPEG the staging. The host memory the CUDA driver, nvJPEG
 * and NVRTC take outside every hook is measured at create, step by step
 * (sl__gpu_stats.host_rss_*; the caller counts it, pipeline/gpustage.c).
 *
 * Which backend decodes a sample is a rule of the sample, never of which
 * samples share a call or of timing: the hardware engines where
 * nvjpegDecodeBatchedSupportedEx takes it (with its region of interest,
 * else whole); the hybrid backend only for what they do not take; the CPU
 * for what neither takes, what fails alone on its backend (a batched call
 * that fails is split in halves and retried on the same backend until the
 * bad samples stand alone: sl__gpu_bisect), and a sample whose buffers
 * exceed the per-sample cap (a quarter of the pool). A sample under the
 * cap that does not fit the pool now is not decoded in this call
 * (SL_GPU_AGAIN, as every sample after it; the call's first sample is
 * always given room), nor is one whose nvJPEG call found its allocator's
 * pool full: the caller submits them again once the call is done, when
 * its blocks are free. A sample routed beside others leaves nvJPEG an
 * eighth of the pool to grow its buffers in during the call.
 *
 * Threads. An engine is used by one thread at a time (the scheduler's GPU
 * feeder); engines on the same or other GPUs are independent. One batch
 * is in flight per engine: sl__gpu_decode_batch, then sl__gpu_wait.
 * Every call makes the engine's context current on the calling thread.
 *
 * Errors. Per-sample problems are statuses, never failures of the call.
 * A CUDA error (the context is then unusable) poisons the engine: the
 * call returns SL_EIO with the driver's reason, every later call
 * SL_ESTATE, and the positions of the batch in flight must go to the CPU.
 */
#ifndef SL_GPU_ENGINE_H
#define SL_GPU_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "ops/ops.h"

#define SL_GPU_REASON 120 /* bytes of a per-sample reason, NUL included */

/* Whether a GPU engine can run in this process, and if not, why (e.g.
 * "nvJPEG (libnvjpeg) not found (...)"). 1 or 0; never fails otherwise. */
int sl__gpu_available(char *why, size_t len);

/* One sample for the GPU: where its output goes and the plan's resize. */
typedef struct sl__gpu_item {
    uint32_t pos;            /* position in the batch: writes dst + pos * stride */
    uint32_t full_w, full_h; /* image size from the header */
    sl__axis_spec ax, ay;    /* the resize, as the CPU resampler's (sl__plan.ax/ay) */
    int flip;
    int hw;                  /* SL_GPU_HW_*: whether the hardware backend takes it, asked before the
                                call (sl__gpu_ask); SL_GPU_HW_ASK: the engine asks in the call */
} sl__gpu_item;

/* The hardware backend's answer for a sample: not asked yet; it takes the
 * sample with its window as region of interest; only whole; not at all
 * (the hybrid backend, else the CPU). */
enum { SL_GPU_HW_ASK = 0, SL_GPU_HW_ROI, SL_GPU_HW_WHOLE, SL_GPU_HW_NO };

/* From the CPU path's plan of the sample: 0, or SL_EUNSUPPORTED with the
 * reason the CPU must take it (not a baseline 8-bit 1- or 3-channel JPEG,
 * EXIF orientation applied, alpha kept, no preset). Pure; never allocates. */
int sl__gpu_item_from_plan(const sl__plan *p, const sl_image_info *info, uint32_t pos, sl__gpu_item *it,
                           char *reason, size_t rlen);

#define SL_GPU_NO_HARDWARE (1u << 0) /* skip the hardware backend */
#define SL_GPU_NO_HYBRID (1u << 1)   /* skip the GPU hybrid backend */
#define SL_GPU_NO_ROI (1u << 2)      /* decode whole images (no region of interest) */
#define SL_GPU_LOW_PRIORITY (1u << 3) /* the engine's stream at the device's least priority (that of default
                                         streams too): work on a stream of greater priority runs first */
#define SL_GPU_HIGH_PRIORITY (1u << 4) /* ... at its greatest instead: the engine's kernels are scheduled
                                          ahead of a default stream's (over LOW) */
/* nvJPEG's hardware backend buffers images ahead in its batched calls (its pipeline) unless told not
 * to (NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE). Alone on a GPU the pipeline decodes faster; beside a
 * training loop, without it (docs/gpu.md "The hardware's two modes"). By default the engine opens
 * both and the calls take the one its measure chose (batch.c); these flags keep one of them. */
#define SL_GPU_HW_PIPELINED (1u << 5) /* only the pipelined mode (the engine until now) */
#define SL_GPU_HW_UNPIPELINED (1u << 6) /* only the one without (over PIPELINED) */
#define SL_GPU_RESIZE_PASSES (1u << 7) /* every sample through the resize's two-pass kernels, none through
                                          the tiled one (kernels.h; an experiment's knob: the same bytes) */

typedef struct sl__gpu_config {
    int device;              /* CUDA device ordinal */
    uint64_t gpu_budget;     /* device pool bytes, taken at create */
    uint64_t pinned_bytes;   /* pinned pool for nvJPEG and the descriptors, counted in the host budget */
    uint32_t max_batch;      /* samples per sl__gpu_decode_batch, 1..65535 */
    uint32_t hint_w, hint_h; /* typical image size, for nvJPEG's preallocation (0: 512) */
    uint32_t flags;          /* SL_GPU_NO_* */
    uint64_t max_pixels;     /* larger images go to the CPU (0: SL_GPU_MAX_PIXELS). nvJPEG's
                                hardware backend keeps per-slot buffers outside the allocator
                                hooks that grow to the largest image each slot has seen (about
                                3.3 bytes a pixel, measured): this caps them; docs/gpu.md */
    uint64_t staging_bytes;  /* pinned pool for sl__gpu_stage_alloc (0: none), counted with the other */
} sl__gpu_config;
#define SL_GPU_MAX_PIXELS ((uint64_t)1 << 22) /* 4.2 Mpx, e.g. 2048 x 2048 */

/* Smallest gpu_budget / pinned_bytes sl__gpu_engine_new accepts for max_batch. */
uint64_t sl__gpu_min_device(uint32_t max_batch);
uint64_t sl__gpu_min_pinned(uint32_t max_batch);

typedef struct sl__gpu_engine sl__gpu_engine;

/* Create an engine on cfg->device: load the kernels (the kernel cache, or
 * NVRTC), take the pools, create nvJPEG's handles, states and streams, and
 * decode one small built-in JPEG through each backend (so the driver's
 * lazily loaded modules are in before the host memory is measured, and a
 * broken device fails here, not in the first batch). host counts the
 * pinned region (SL_MEM_PINNED, fixed) and the engine's host tables; it
 * must outlive the engine. On success *out owns the engine
 * (sl__gpu_engine_free). Fails with SL_EUNSUPPORTED (no CUDA / nvJPEG /
 * NVRTC, no such device: err says which), SL_EINVAL, SL_EBUDGET (a pool
 * below its minimum, which err states, or the host budget cannot hold the
 * pinned region or a table), SL_ENOMEM (the device, the driver or the
 * system refused memory), SL_EIO. Nothing is left allocated on failure. */
int sl__gpu_engine_new(const sl__gpu_config *cfg, sl__budget *host, sl__gpu_engine **out, char *err,
                       size_t errlen);
/* Wait for the batch in flight, release every nvJPEG handle, state,
 * stream and buffer, the kernels, both pools and the context. NULL is
 * ignored. */
void sl__gpu_engine_free(sl__gpu_engine *e);

/*
 * Asking before the call. nvJPEG parses a sample's header and says whether
 * its hardware backend takes it (about 18 us an image on an H100 host, a
 * sixth to a quarter of the engine thread's wall, which every GPU sample
 * waits for). An asker is one thread's own nvJPEG stream and parameters
 * (nvJPEG's rule: one per thread; the library handle, engine 0's, is
 * shared), so the thread that stages a sample asks for it and sets
 * item.hw; the engine then only sets the region it was told. The answer
 * is the one the engine would get: the same question on the same bytes,
 * a rule of the sample.
 */
typedef struct sl__gpu_asker sl__gpu_asker;
/* One thread's asker, counted in the engine's host budget: 0 (*out set),
 * SL_EUNSUPPORTED (no hardware backend: nothing to ask), SL_EBUDGET,
 * SL_EIO (*out NULL). Freed before its engine. */
int sl__gpu_asker_new(sl__gpu_engine *e, sl__gpu_asker **out);
void sl__gpu_asker_free(sl__gpu_asker *a);
/* The hardware's answer for it (SL_GPU_HW_ROI, _WHOLE, _NO), or
 * SL_GPU_HW_ASK where the engine decides before asking (an item outside
 * its image, over max_pixels, without bytes). The engine's context must be
 * current on the calling thread. */
int sl__gpu_ask(sl__gpu_asker *a, const uint8_t *data, size_t len, const sl__gpu_item *it);

/*
 * Issue a batch on the engine's stream: for each i < n, decode data[i]
 * (len[i] bytes), crop/resize/flip as items[i] says, into dst +
 * items[i].pos * stride (a device address; out_h * out_w * 3 bytes, CHW).
 * status[i] is SL_GPU_DONE (the GPU writes it: valid once sl__gpu_wait
 * returns 0), SL_GPU_CPU (the CPU must decode it: a rule of the sample,
 * see above; reasons[i] says why, when reasons is not NULL) or
 * SL_GPU_AGAIN (no room in the device pool now: submit it again after
 * sl__gpu_wait; in a call of such samples alone the first one always gets
 * room or goes to the CPU, so resubmitting makes progress). data[i] must
 * stay valid until sl__gpu_wait returns. Returns 0 (statuses set),
 * SL_EINVAL (n > max_batch, NULL arrays), SL_ESTATE (poisoned, or a batch
 * still in flight), SL_EIO (CUDA error: every status is SL_GPU_CPU, the
 * engine is poisoned).
 */
int sl__gpu_decode_batch(sl__gpu_engine *e, uint32_t n, const uint8_t *const *data, const size_t *len,
                         const sl__gpu_item *items, uint64_t dst, uint64_t stride, int *status,
                         char (*reasons)[SL_GPU_REASON]);
enum { SL_GPU_DONE = 0, SL_GPU_CPU = 1, SL_GPU_AGAIN = 2 };

/* Wait for the batch in flight (0 at once when none) and give its buffers
 * back to the pool. 0, or SL_EIO with the driver's reason (poisoned: the
 * batch's SL_GPU_DONE positions were not written). */
int sl__gpu_wait(sl__gpu_engine *e, char *err, size_t errlen);

/* The resize alone, on pixels the caller decoded: rgb[i] is the whole
 * image of items[i] (full_w x full_h, RGB interleaved, host memory).
 * Synchronous. For tests that hold the GPU kernels to the CPU resampler
 * byte for byte. 0, SL_EBUDGET (pool full), SL_EINVAL, SL_ESTATE, SL_EIO. */
int sl__gpu_resize_host(sl__gpu_engine *e, uint32_t n, const uint8_t *const *rgb, const sl__gpu_item *items,
                        uint64_t dst, uint64_t stride, char *err, size_t errlen);

/* A block of n bytes of the engine's staging pool (page-locked host
 * memory, cfg.staging_bytes), e.g. to stage encoded samples until they are
 * decoded; NULL when it has no room now. With nothing staged any n up to
 * half the pool fits. Any thread (the pool locks itself). */
void *sl__gpu_stage_alloc(sl__gpu_engine *e, size_t n);
/* Give a block back; NULL is ignored. Any thread. */
void sl__gpu_stage_free(sl__gpu_engine *e, void *p);

typedef struct sl__gpu_stats {
    uint64_t device_pool_bytes;  /* taken at create; constant */
    uint64_t device_used, device_peak; /* of the pool, now and high-water */
    uint64_t pinned_pool_bytes;  /* constant, in the host budget: nvJPEG's and the staging pools */
    uint64_t pinned_used, pinned_peak; /* nvJPEG's pool */
    uint64_t staging_used, staging_peak;
    uint64_t pool_refusals;      /* allocations the pools refused (nvJPEG's included) */
    uint64_t samples_hw;         /* decoded by the hardware JPEG engines */
    uint64_t samples_hybrid;     /* decoded by the GPU hybrid backend */
    uint64_t samples_cpu;        /* handed back to the CPU */
    uint64_t samples_again;      /* not decoded in their call for lack of pool room (submitted again) */
    uint64_t batches;
    uint64_t hw_calls, hw_failed_calls; /* batched hardware calls; those that failed (then bisected) */
    uint64_t hw_calls_unpipelined;      /* of hw_calls, those without nvJPEG's pipeline */
    uint64_t hw_mode_switches;          /* times the measure moved the calls to the other mode */
    double hw_us_pipelined, hw_us_unpipelined; /* the last measure's hardware microseconds a sample (0: none) */
    double busy_s;               /* per batch: max(host issue time, GPU time), summed */
    double gpu_hybrid_s, gpu_hw_s, gpu_resize_s; /* GPU time of each phase (stream events), summed */
    /* The calling thread's wall time (host clock) in each step of the calls, summed: routing
     * (nvJPEG parses every header and says which backend takes it), the hybrid samples one by
     * one, the hardware's batched call, the resize kernels' launch, and sl__gpu_wait's wait */
    double thread_route_s, thread_hybrid_s, thread_hw_s, thread_launch_s, thread_wait_s;
    double rate;                 /* GPU samples / s over the last batches (moving average; 0 before any) */
    uint32_t hw_engines, hw_cores; /* nvJPEG's hardware decoder (0 where none) */
    char device_name[64];
    char backends[64];           /* e.g. "hardware+hybrid" */
    /* The process's resident memory (VmRSS) that each step of create added,
     * bytes (may be negative: NVRTC's heap handed back): the context and
     * streams, the kernels (the cache, or NVRTC), the pinned region (counted
     * in the host budget), nvJPEG's handles and buffers, the first decode. */
    int64_t host_rss_context, host_rss_kernels, host_rss_pinned, host_rss_nvjpeg, host_rss_warmup;
    char kernels[192];           /* where the kernels came from: "cached (PATH)", "compiled by NVRTC ..." */
} sl__gpu_stats;

/* The process's resident bytes now (VmRSS, from /proc/self/statm); 0 when
 * unknown. */
uint64_t sl__gpu_rss_now(void);

void sl__gpu_engine_stats(const sl__gpu_engine *e, sl__gpu_stats *out);

#endif
