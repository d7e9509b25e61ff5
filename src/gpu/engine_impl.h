/*
 * The engine's inside, shared by engine.c (life cycle, pools, nvJPEG
 * handles) and batch.c (one batch: route, decode, resize). Private.
 *
 * Ownership: everything here belongs to the engine and is released by
 * sl__gpu_engine_free. Per-batch pool blocks (held[]) belong to the batch
 * in flight and go back in sl__gpu_wait. stats_mu protects st (stats are
 * read from other threads); everything else is touched only by the one
 * thread using the engine (and nvJPEG's allocator hooks, which lock the
 * pools themselves).
 */
#ifndef SL_GPU_ENGINE_IMPL_H
#define SL_GPU_ENGINE_IMPL_H

#include <pthread.h>

#include "gpu/cuda.h"
#include "gpu/engine.h"
#include "gpu/kernels.h"
#include "gpu/pool.h"

/* Where a sample goes (batch.c). */
enum { ROUTE_CPU = 0, ROUTE_HW, ROUTE_HYBRID };

/* One sample's buffers inside a pool block, and its regions: the one
 * decoded (dx..; the window, or the whole image where nvJPEG takes no
 * region of interest) holds the one the taps reach (desc.reg_x..). */
typedef struct sl__gpu_work {
    int route;
    uint64_t block;          /* pool block (0: none); the decoded region starts it */
    uint32_t dx, dy, dw, dh; /* region decoded (image pixels) */
    sl__gpu_desc desc;
} sl__gpu_work;

struct sl__gpu_engine {
    const sl__cuda_api *cu;
    sl__budget *host;
    sl__gpu_config cfg;
    sl_CUdevice dev;
    sl_CUcontext ctx;        /* the device's primary context, retained */
    sl_CUstream stream;
    sl_CUevent ev0, ev1;     /* GPU time of the batch in flight */
    sl__gpu_kernels k;
    sl_CUdeviceptr dev_base; /* the device pool's region */
    void *pin_base;          /* the pinned pool's region */
    uint64_t pin_counted;    /* bytes counted in host (SL_MEM_PINNED, fixed) */
    sl__pool dpool, ppool;
    int dpool_ok, ppool_ok;
    sl_nvjDevAllocV2 dalloc;
    sl_nvjPinnedAllocV2 palloc;
    /* hardware backend (NULL where none) */
    sl_nvjHandle hw;
    sl_nvjState hw_state;
    sl_nvjStream *hw_streams;   /* max_batch parsed headers */
    sl_nvjParams *hw_params;    /* max_batch: ROI + output format */
    const unsigned char **hw_data;
    size_t *hw_len;
    sl_nvjImage *hw_out;
    sl_nvjParams *hw_batch_params; /* the params of the samples in this batch's call */
    uint32_t *hw_idx;
    /* GPU hybrid backend (NULL where none) */
    sl_nvjHandle gh;
    sl_nvjDecoder hyb;
    sl_nvjState hyb_state;
    sl_nvjBufPinned hyb_pin;
    sl_nvjBufDevice hyb_dev;
    sl_nvjStream hyb_stream;
    sl_nvjParams hyb_params;
    /* per batch */
    sl__gpu_work *work;         /* max_batch */
    sl__gpu_desc *pin_desc;     /* pinned staging of the descriptors (ppool) */
    sl_CUdeviceptr dev_desc;    /* device copy (dpool) */
    int inflight, poisoned;
    uint32_t inflight_gpu;      /* samples the batch in flight writes */
    uint64_t t_issue_ns, issue_ns;
    /* stats */
    pthread_mutex_t stats_mu;
    sl__gpu_stats st;
};

/* Free sample i's pool block, if any. */
void sl__gpu_work_release(sl__gpu_engine *e, sl__gpu_work *w);

#endif
