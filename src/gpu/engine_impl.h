/*
 * The engine's inside, shared by engine.c (life cycle, pools, nvJPEG
 * handles) and batch.c (one batch: route, decode, resize). Private.
 *
 * Ownership: everything here belongs to the engine and is released by
 * sl__gpu_engine_free. The host tables (work, hw_*) are one allocation,
 * tables, freed in one place. Per-batch pool blocks (work[i].block) belong
 * to the batch in flight from routing until sl__gpu_wait, whatever became
 * of the sample (a block is never handed out again while a failed call's
 * work may still write it). stats_mu protects st (stats are read from
 * other threads); everything else is touched only by the one thread using
 * the engine (and nvJPEG's allocator hooks, which lock the pools
 * themselves).
 */
#ifndef SL_GPU_ENGINE_IMPL_H
#define SL_GPU_ENGINE_IMPL_H

#include <pthread.h>

#include "gpu/cuda.h"
#include "gpu/engine.h"
#include "gpu/kernels.h"
#include "gpu/pool.h"
#include "gpu/split.h"

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
    sl_CUevent ev0, ev_hyb, ev_hw, ev1; /* the batch in flight: start, hybrid done, hardware done, end */
    int ev1_set;                        /* ev1 recorded after the batch's last work: wait on it */
    sl__gpu_kernels k;
    sl_CUdeviceptr dev_base; /* the device pool's region */
    void *pin_base;          /* the pinned region: nvJPEG's pool, then the staging pool */
    uint64_t pin_counted;    /* bytes counted in host (SL_MEM_PINNED, fixed) */
    sl__pool dpool, ppool, spool;
    int dpool_ok, ppool_ok, spool_ok;
    uint64_t sample_cap;     /* a sample needing a larger block goes to the CPU (a rule of the sample) */
    sl_nvjDevAllocV2 dalloc;
    sl_nvjPinnedAllocV2 palloc;
    /* host tables: one block (tables) of max_batch entries each */
    void *tables;
    sl__gpu_work *work;
    /* hardware backend (NULL where none): hw in the first mode the flags allow (without the pipeline
     * unless SL_GPU_HW_PIPELINED alone, or an nvJPEG that will not make that handle), hw2 in the other
     * where both are allowed and open (else NULL); the streams and params are hw's and serve both */
    sl_nvjHandle hw, hw2;
    sl_nvjState hw_state, hw2_state;
    int hw_unpipelined;         /* hw's mode; hw2's is the other */
    sl_nvjStream *hw_streams;   /* parsed headers, per sample of the batch */
    sl_nvjParams *hw_params;    /* per sample: ROI + output format */
    const unsigned char **hw_data; /* one batched call's arguments */
    size_t *hw_len;
    sl_nvjImage *hw_out;
    sl_nvjParams *hw_batch_params;
    uint32_t *hw_idx;           /* the batch's hardware samples, and whether each failed alone */
    uint8_t *hw_bad;
    /* GPU hybrid backend (NULL where none) */
    sl_nvjHandle gh;
    sl_nvjDecoder hyb;
    sl_nvjState hyb_state;
    sl_nvjBufPinned hyb_pin;
    sl_nvjBufDevice hyb_dev;
    sl_nvjStream hyb_stream;
    sl_nvjParams hyb_params;
    /* per batch */
    sl__gpu_desc *pin_desc;     /* pinned staging of the descriptors (ppool) */
    sl_CUdeviceptr dev_desc;    /* device copy (dpool) */
    int inflight, poisoned;
    char fault[SL_GPU_REASON];  /* why the last call that poisoned the engine failed (the driver's words) */
    int force_hybrid;           /* the warm-up's second decode: the hybrid backend */
    int force_hw2;              /* its third: the hardware's second mode */
    uint64_t call_hw_ns, call_hw_n; /* the batch in flight's batched hardware call: its time, its samples */
    uint32_t held;              /* blocks the batch being routed holds */
    uint32_t inflight_gpu;      /* samples the batch in flight writes */
    uint32_t hw_calls, hw_failed_calls; /* of the batch in flight */
    /* the hardware's mode with both handles open (split.h, sl__hw_modes: handle 0 hw, 1 hw2) */
    sl__hw_modes modes;
    int call_hw2;               /* the handle the batch in flight took */
    uint64_t t_issue_ns, issue_ns;
    /* stats */
    pthread_mutex_t stats_mu;
    sl__gpu_stats st;
};

/* One thread's nvJPEG objects for asking the hardware (engine.h). */
struct sl__gpu_asker {
    sl__gpu_engine *e;
    sl_nvjStream js;
    sl_nvjParams jp;
};

/* Free sample i's pool block, if any. */
void sl__gpu_work_release(sl__gpu_engine *e, sl__gpu_work *w);

/* The first decode (batch.c): one small built-in JPEG through the route
 * every sample takes, then through the hybrid backend where there is one
 * too, into a scratch block of the pool; stats are left as before. 0, or
 * SL_EIO with the driver's reason (the engine is unusable). */
int sl__gpu_warm_up(sl__gpu_engine *e, char *err, size_t errlen);

/* The window of it (the rectangle its taps reach, image pixels) into
 * d's reg_* and full_*: 0, or SL_EINVAL for an item outside its image. */
int sl__gpu_window(const sl__gpu_item *it, sl__gpu_desc *d);

/* A sample's buffers inside one pool block (batch.c): their offsets in
 * w->desc's fields, made from w's decoded region (dx..) and regions
 * (desc.reg_*) and the item's resize; *size the block's bytes. 0 or
 * SL_EOVERFLOW. Then sl__gpu_desc_place makes the offsets addresses in
 * w->block (src: the tap window inside the decoded region), output at
 * dst. The GPU video path (video.c) lays its frames out the same way. */
int sl__gpu_layout(sl__gpu_work *w, const sl__gpu_item *it, uint64_t *size);
void sl__gpu_desc_place(sl__gpu_work *w, uint64_t dst);

#endif
