/*
 * The loader's view of a GPU: the decode engine, the device memory of the
 * batch slots, the copies the loader makes into it and the pinned staging
 * of encoded samples queued for the engine. A table of functions, so the
 * loader's scheduler (pipeline/gpustage.c) is one piece of code whatever
 * the device: the CUDA device opened here (sl__gpu_dev_open: the nvJPEG
 * engine on the device's primary context, the one PyTorch uses), or the
 * device a test installs (sl__gpu_dev_override), which lets CPU-only CI
 * run the scheduler with a real decoder behind it.
 *
 * A device opened for a video field (cfg.video) has the GPU video engine
 * (gpu/video.c: NVDEC sessions) in place of the nvJPEG engines: no decode
 * and no staging (NULL, engines 0), and clip instead, which a worker calls
 * for one clip at a time.
 *
 * Ownership: the device owns its engines, its streams, the region and the
 * staging pool; close releases all of them (waiting for work in flight).
 * Host memory (the engines' pinned pools and tables, the stream table) is
 * counted in the host budget given to open.
 *
 * Threads: decode is called by one thread per engine at a time (the
 * loader's GPU threads, one for each); upload, upload_runs, move and
 * download and ask by one thread per lane at a time (each worker is a
 * lane, the committer has its own); stage_alloc, stage_free and stats from
 * any thread; pin before the threads start.
 */
#ifndef SL_GPU_DEVICE_H
#define SL_GPU_DEVICE_H

#include "gpu/engine.h"
#include "gpu/video.h"

#define SL_GPU_MAX_ENGINES 4

typedef struct sl__gpu_dev_config {
    int device;             /* CUDA device ordinal */
    uint64_t pool_bytes;    /* the engines' device pools, shared equally (sl__gpu_config.gpu_budget) */
    uint64_t staging_bytes; /* pinned bytes for staging, a pool of their own beside nvJPEG's */
    uint32_t max_batch;     /* samples per decode call */
    uint64_t max_pixels;    /* larger images go to the CPU (0: SL_GPU_MAX_PIXELS) */
    uint32_t lanes;         /* threads that may copy at once, lanes 0 .. lanes-1 */
    uint32_t engines;       /* decode engines, 1..SL_GPU_MAX_ENGINES: each its own nvJPEG state and stream,
                               so one's host work overlaps another's GPU work */
    int video;              /* the GPU video engine instead: pool_bytes its pool, and */
    uint32_t sessions;      /* its NVDEC sessions */
    uint64_t session_cap;   /* device bytes of each session's NVDEC surfaces */
} sl__gpu_dev_config;

typedef struct sl__gpu_dev {
    void *ctx;
    int device_type, device_id; /* where region memory lives (SL_DEVICE_*) */
    uint32_t engines;           /* decode's engine index runs 0 .. engines-1 */
    /* Decode a batch on engine `engine` and wait for it (sl__gpu_decode_batch, sl__gpu_wait):
     * on return every SL_GPU_DONE position is written; SL_GPU_CPU ones are
     * the CPU's by a rule of the sample; SL_GPU_AGAIN ones found no room
     * in the device pool in this call: decode them again (a call of such
     * samples alone makes progress). 0, or SL_EIO with err: every status
     * is SL_GPU_CPU and the device is unusable. */
    int (*decode)(void *ctx, uint32_t engine, uint32_t n, const uint8_t *const *data, const size_t *len,
                  const sl__gpu_item *items, uint64_t dst, uint64_t stride, int *status,
                  char (*reasons)[SL_GPU_REASON], char *err, size_t errlen);
    /* The batch slots' device memory, bytes > 0, taken once; *base its
     * address. 0, or SL_ENOMEM with err. close frees it. */
    int (*region)(void *ctx, uint64_t bytes, uint64_t *base, char *err, size_t errlen);
    /* n bytes host -> device (upload) or device -> device (move; the
     * ranges do not overlap), complete on return: readable from any
     * stream. 0 or SL_EIO. */
    int (*upload)(void *ctx, uint32_t lane, uint64_t dst, const void *src, size_t n);
    int (*move)(void *ctx, uint32_t lane, uint64_t dst, uint64_t src, size_t n);
    /* n bytes device -> host, complete on return. 0 or SL_EIO. */
    int (*download)(void *ctx, uint32_t lane, void *dst, uint64_t src, size_t n);
    /* A staging block of n bytes (pinned host memory), or NULL: no room now. */
    void *(*stage_alloc)(void *ctx, size_t n);
    void (*stage_free)(void *ctx, void *p);
    void (*stats)(void *ctx, sl__gpu_stats *out); /* the engines' summed (rates: the sum) */
    /* Release everything; the table is unusable afterwards. */
    void (*close)(void *ctx);
    /* Video: decode a clip into dst, complete on the device on return
     * (sl__gpu_video_clip's contract; lane: the calling worker's). */
    int (*clip)(void *ctx, uint32_t lane, const sl__sample_file *f, const sl__video_info *info,
                const sl__clip_plan *plan, sl__quota *q, const _Atomic int *cancel, int wait, uint64_t dst,
                char *reason, size_t rlen);
    /* Page-lock the n host bytes at host that uploads read from (the batch
     * slots' region), once, before any upload: a copy from them is then one
     * DMA the driver only queues, where a pageable one is staged through the
     * driver's own buffers, under its locks, for as long as it takes (the
     * model's launches wait on them). close unlocks them; the caller frees
     * the memory after close. 0, or SL_EIO with err (uploads stay pageable).
     * NULL: the device has no use for it. */
    int (*pin)(void *ctx, void *host, size_t n, char *err, size_t errlen);
    /* n copies host -> device (src[i] to dst[i], len[i] bytes; no two
     * overlap) on the lane, complete on return: readable from any stream.
     * One wait for them all. 0 or SL_EIO. */
    int (*upload_runs)(void *ctx, uint32_t lane, uint32_t n, const uint64_t *dst, const void *const *src,
                       const size_t *len);
    /* Ask whether the hardware backend takes the staged sample (data, len
     * bytes), on the lane's own asker (engine.h: sl__gpu_ask), into
     * it->hw, so the engine's thread does not parse it in the call. NULL:
     * the device's engines ask themselves. */
    void (*ask)(void *ctx, uint32_t lane, const uint8_t *data, size_t len, sl__gpu_item *it);
} sl__gpu_dev;

typedef int (*sl__gpu_dev_open_fn)(const sl__gpu_dev_config *cfg, sl__budget *host, sl__gpu_dev *out, char *err,
                                   size_t errlen);

/* Whether a device can be opened in this process and if not why: the
 * override's answer when one is installed (1), else sl__gpu_available. */
int sl__gpu_dev_available(char *why, size_t len);
/* The same for a video field: the override's answer, else
 * sl__gpu_video_available (CUDA, FFmpeg with NVDEC, libnvcuvid). */
int sl__gpu_dev_video_available(char *why, size_t len);

/* Open cfg->device: the engine (pools counted in host), one stream per
 * lane. On success *out is filled. Fails as sl__gpu_engine_new (err says
 * why), and with nothing left allocated. With an override installed, it
 * opens the override's device instead. */
int sl__gpu_dev_open(const sl__gpu_dev_config *cfg, sl__budget *host, sl__gpu_dev *out, char *err, size_t errlen);

/* Tests: open devices with fn instead of the CUDA one, process-wide (NULL:
 * back to CUDA). Set before any loader is created. */
void sl__gpu_dev_override(sl__gpu_dev_open_fn fn);

#endif
