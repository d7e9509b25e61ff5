/*
 * Video clips on the GPU: NVDEC decodes (FFmpeg's hwaccel, a session per
 * decoder: format/video_hw.c), a kernel converts the window the clip's
 * resize reaches from NV12 to RGB, and the image path's resize kernels
 * crop, resize and flip it into the clip's frames, uint8 [T][3][H][W]
 * straight into device memory (a device batch slot).
 *
 * Same clip as the CPU path's: the frame indices, the crop box and the
 * flip are the plan's (sl__video_plan, the CPU path's code and
 * randomness), and the passes (seek planning, the frames no target shows
 * skipped, display-time matching) are video_decode.c's. The pixels are
 * those of the GPU path's arithmetic (ops/yuv.c computes the same bytes on
 * the CPU); docs/video.md gives their measured difference from the CPU
 * path's swscale clip.
 *
 * Memory. Device: one pool of cfg.pool_bytes taken at create and never
 * grown, for each clip's RGB window, the resize's passes and tables and
 * each session's descriptors; NVDEC's surfaces are allocated by the driver
 * when a decoder is created (no hook): each session's are bounded by
 * cfg.session_cap (checked from the stream before the decoder exists),
 * so the engine's device memory is at most pool_bytes + sessions x
 * session_cap (sl__gpu_video_device_bytes), measured in the tests. Host:
 * the tables from the host budget; a decoder kept between clips is
 * counted there too (SL_MEM_DECODER) while it is kept.
 *
 * Threads. Any thread may decode a clip: it takes a free session (waiting
 * for one, or not), makes the engine's context current and runs the clip
 * on the session's stream, synchronously. create/free from one thread.
 *
 * Errors. A clip the GPU cannot take, or whose NVDEC decode fails for any
 * reason, is SL_EUNSUPPORTED with a reason starting "for the CPU: ": the
 * caller decodes it on the CPU (whose error record a corrupt stream then
 * becomes). A CUDA error poisons the engine (SL_EIO once, then every clip
 * goes to the CPU).
 */
#ifndef SL_GPU_VIDEO_H
#define SL_GPU_VIDEO_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/mem.h"
#include "format/video.h"

typedef struct sl__gpu_video_config {
    int device;            /* CUDA device ordinal */
    uint64_t pool_bytes;   /* device pool: windows, passes, tables, descriptors */
    uint32_t sessions;     /* NVDEC decoders at once (1..256) */
    uint64_t session_cap;  /* device bytes one session's NVDEC surfaces may take (a stream
                              needing more goes to the CPU; sl__video_hw_device_bound) */
    int keep;              /* keep a session's decoder between clips of identical streams */
} sl__gpu_video_config;

/* Smallest pool_bytes for n sessions (their descriptors and one 720p
 * clip's buffers). */
uint64_t sl__gpu_video_min_pool(uint32_t sessions);
/* Device bytes an engine of cfg may take at most. */
uint64_t sl__gpu_video_device_bytes(const sl__gpu_video_config *cfg);

/* Whether the engine can run here, and if not why (the CUDA driver and
 * NVRTC, FFmpeg with NVDEC, libnvcuvid.so.1). 1 or 0. */
int sl__gpu_video_available(char *why, size_t len);

typedef struct sl__gpu_video sl__gpu_video;

/* Create: retain the device's primary context, load the kernels, take
 * the pool, open every session (a stream and an NVDEC session each).
 * Host tables from host (which outlives the engine). 0, or
 * SL_EUNSUPPORTED (with why), SL_EINVAL, SL_EBUDGET, SL_ENOMEM, SL_EIO;
 * nothing left allocated on failure. */
int sl__gpu_video_new(const sl__gpu_video_config *cfg, sl__budget *host, sl__gpu_video **out, char *err,
                      size_t errlen);
/* Close every session (their decoders and surfaces go), the pool, the
 * kernels, the streams and the context. No clip may be in flight. NULL is
 * ignored. */
void sl__gpu_video_free(sl__gpu_video *v);

/*
 * Decode plan's clip of f (probed as info) into device memory at dst
 * (plan->out_bytes bytes, [T][3][out_h][out_w]); complete on the device
 * when it returns 0. q: the clip's host quota (as sl__video_decode's).
 * wait: wait for a free session and for pool room (else a clip finding
 * none goes to the CPU at once). cancel (may be NULL) is checked between
 * packets and while waiting. 0, SL_EUNSUPPORTED ("for the CPU: ..."),
 * SL_ESTATE (cancelled), SL_EIO (CUDA error: poisoned).
 */
int sl__gpu_video_clip(sl__gpu_video *v, const sl__sample_file *f, const sl__video_info *info,
                       const sl__clip_plan *plan, sl__quota *q, const _Atomic int *cancel, int wait, uint64_t dst,
                       char *reason, size_t rlen);

typedef struct sl__gpu_video_stats {
    uint64_t pool_bytes, pool_used, pool_peak; /* the device pool */
    uint64_t session_cap;
    uint32_t sessions;
    uint64_t clips, frames;    /* decoded on the GPU */
    uint64_t to_cpu;           /* clips handed to the CPU */
    uint64_t decoders, reused; /* NVDEC decoders created; clips that kept the previous one */
    uint64_t soft_resets;      /* passes (seeks, clips) an H.264 decoder started at an IDR without a flush */
    uint64_t flushes;          /* ... that needed a flush, which makes a new NVDEC decoder */
    uint64_t waits;            /* clips that waited for a session or pool room */
    /* where a clip's time goes, summed over clips (ns): waiting for a
     * session and pool room; the decode call (container, NVDEC decoder,
     * passes, the sink); of it, the sink (kernels launched, then waited for
     * before the surface goes back: syncs counts those waits) */
    uint64_t wait_ns, decode_ns, sink_ns, syncs;
    uint64_t surface_bytes;    /* NVDEC surfaces of the sessions' current decoders (bound) */
    char device_name[64];
    char kernels[192];         /* where the resize and NV12 kernels came from (sl__gpu_module_load) */
} sl__gpu_video_stats;
void sl__gpu_video_stats_get(sl__gpu_video *v, sl__gpu_video_stats *out);

#endif
