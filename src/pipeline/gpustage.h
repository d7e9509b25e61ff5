/*
 * The GPU stage: the decode engine beside the workers (gpustage.c says
 * the rules). The image field `field` is delivered from device memory:
 * slot k's batch at region + k * slot_bytes. A worker that plans a sample
 * the GPU can take (and the split gives it) stages its bytes and queues
 * it instead of decoding; the GPU threads (one per engine, gpu_engines)
 * take calls of up to max_batch samples from the one queue and decode them
 * straight into the slots' device memory; what the
 * engine hands back is claimed by workers first (handbacks). An image the
 * worker decoded on the CPU stays in the slot's host block (host_only) and
 * the committer uploads all of a batch's at once (sl__gstage_flush), before
 * it settles the batch, so a batch is complete on the device when it is
 * READY; compaction moves a position's flag, or its device bytes
 * (sl__gstage_move). A video clip decoded on the CPU is uploaded by its
 * worker.
 *
 * The stage knows slots only by id and as opaque pointers it hands back;
 * the engine runs each GPU thread's loop (take, run, settle) and holds the
 * lock the queue lives under.
 *
 * Ownership. gpustage.c writes every field of sl__gstage and sl__ghand.
 * What create sets (mode ... qcap, the tables) is fixed once the threads
 * run. The queue and the handbacks (q, back, qhead, qlen, bhead, blen) are
 * under the engine's lock; staged, staged_peak and reason after create
 * under smu (taken alone or after the engine's lock: a GPU thread and a
 * video worker write the reason of a stopped engine); the counters are
 * atomics; a call (sl__gcall) belongs to its GPU thread. A worker's hand is
 * written by that worker's calls (and by offer() and offer_clip(), called
 * inside them).
 *
 * A video field (video set): no queue, no staging and no GPU thread; the
 * worker that planned a clip decodes it on one of the device's NVDEC
 * sessions (dev.clip) into its position's device memory.
 */
#ifndef SL_PIPELINE_GPUSTAGE_H
#define SL_PIPELINE_GPUSTAGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fields/field.h"
#include "gpu/device.h"
#include "pipeline/config.h"
#include "sluice.h"

/* A sample queued for the GPU: its position, the staged encoded bytes (a
 * staging block of the device's pinned pool) and the plan's resize. */
typedef struct sl__gitem {
    sl_batch *slot;          /* opaque: handed back to the engine */
    uint32_t pos;
    uint64_t gen, sample, epoch;
    void *data;              /* staging block; NULL once freed */
    size_t len;
    uint64_t t_ns;           /* when it was queued */
    uint64_t rank;           /* its batch's place in the delivery order: calls take the lowest first */
    sl__gpu_item item;       /* item.pos = slot id * B + pos */
} sl__gitem;

/* One GPU thread of the stage and the call it makes: it decodes on its own
 * engine; cur[0, n) are the samples it took from the queue, settled by
 * status[]; each device call decodes the subset which[0, m) of them (data,
 * len, items, cstatus, reasons by call position). Written by its thread
 * only (owner and engine by sl__gstage_start, before it runs; thread_on by
 * start and join). */
typedef struct sl__gcall {
    void *owner;             /* the loop's argument (the engine) */
    uint32_t engine;
    pthread_t thread;
    int thread_on;
    sl__gitem *cur;
    int *status;
    uint32_t *which;
    const uint8_t **data;
    size_t *len;
    sl__gpu_item *items;
    int *cstatus;
    char (*reasons)[SL_GPU_REASON];
} sl__gcall;

typedef struct sl__gstage {
    const sl__conf *conf;
    const _Atomic int *cancel; /* the loader is closing: stop waiting for staging */
    int mode;                /* SL_DECODE_CPU or SL_DECODE_GPU: what create chose */
    int gpu_only;            /* decode=gpu or prefer-gpu: every sample the GPU can take goes to it */
    uint64_t share_cut;      /* gpu_only: a sample goes to the GPU iff its hash is below (SLUICE_GPU_SHARE) */
    char reason[160];        /* why this mode */
    int on;                  /* dev is open (mode == SL_DECODE_GPU) */
    int video;               /* the field is a video field: clips decoded by the workers on the
                                device's NVDEC sessions (dev.clip), no queue, no GPU thread */
    sl__gpu_dev dev;
    uint32_t field, out;     /* the schema field it decodes, and its output */
    uint64_t sample_bytes, slot_bytes; /* one sample's output; one slot's batch (B x sample) */
    uint64_t region, region_bytes;     /* device memory of the slots (0 until sl__gstage_slots) */
    uint64_t pool_bytes;     /* the engine's device pool */
    uint32_t sessions;       /* video: NVDEC sessions */
    char back_reason[120];   /* video: why the last clip handed to the CPU went there (smu) */
    uint32_t max_batch, slots_max;
    uint32_t gather_min;     /* a call waits up to gather_ns for this many samples (SLUICE_GPU_GATHER) */
    uint64_t gather_ns;
    uint64_t planned_pinned; /* plan only: pinned bytes reserved in the budget */
    /* the host memory the engine's libraries took (SL_MEM_GPU_HOST): measured at open as the
     * process's resident growth from rss0 less what the budget counted meanwhile (from used0);
     * sizing counts it as pending (sl__gstage_host_pending), the slots step counts it for real */
    uint64_t rss0, used0, host_pending, host_counted;
    uint64_t opened;         /* what the open counted in the budget (pinned region, tables) */
    /* staging: pinned bytes held by queued samples (smu) */
    uint64_t staging_cap, staged, staged_peak;
    pthread_mutex_t smu;
    pthread_cond_t scv;      /* room in the staging */
    int sync_init;
    /* queue and handbacks (the engine's lock): rings of qcap items each */
    sl__gitem *q, *back;
    uint32_t qcap, qhead, qlen, bhead, blen;
    _Atomic uint32_t queued; /* qlen + samples in the GPU's call */
    _Atomic int failed;      /* the device stopped: nothing more is offered */
    uint32_t engines;        /* GPU threads, one per engine of the device */
    sl__gcall calls[SL_GPU_MAX_ENGINES];
    void *tables;            /* one block: q, back, host_only and every call's arrays */
    uint8_t *host_only;      /* by position (slot id * B + j), images only: its pixels are in the slot's
                                host block only (a CPU decode), for the committer's flush; written by
                                whoever settles the position, read and cleared by the committer */
    uint64_t *fl_dst;        /* the flush's runs, B at most (the committer's) */
    const void **fl_src;
    size_t *fl_len;
    /* The default (SLUICE_GPU_PIN_SLOTS unset or "bounce"): the slots stay pageable and the flush
     * copies its runs through this pinned block (taken from the staging pool at start, the
     * committer's alone), then gives the runs' pages back, so the slots' image field is resident
     * only while a CPU decode waits for its upload; bb_* one bounce's worth of runs (B at most).
     * NULL: uploads from the slots. */
    uint8_t *bounce;
    size_t bounce_len;
    uint64_t *bb_dst;
    const void **bb_src;
    size_t *bb_len;
    /* stats */
    _Atomic uint64_t gpu_samples, cpu_samples, handed_back;
    _Atomic uint64_t gpu_rate_mhz; /* GPU samples/s x 1000 while busy */
    _Atomic uint64_t cpu_ns;       /* ns a worker spends on one CPU image sample (moving average) */
    _Atomic uint64_t copy_ns;      /* ns spent in the device copies (uploads, moves, checksums back) */
    const _Atomic uint32_t *active; /* the CPU workers taking work (the tuner's count; NULL: all) */
} sl__gstage;

/* A worker's side of the stage: the sample in hand, offered through defer. */
typedef struct sl__ghand {
    sl__defer defer;
    sl__gstage *g;
    uint32_t lane;           /* the worker's id: its upload stream */
    sl_batch *slot;          /* the position being filled */
    uint32_t slot_id, pos;
    uint64_t sample, epoch;
    int cpu_only;            /* a handed-back sample: decode here */
    int taken;               /* the GPU took it: item holds its staging */
    int done;                /* a video field: the GPU decoded the clip into the device slot */
    sl__gitem item;
} sl__ghand;

/* At create, before sizing: choose the engine (cfg.decode, the schema, the
 * device), open the device and its host tables (counted in the budget, so
 * the minimum working set holds them). cancel: set when the loader closes.
 * how: SL_GSTAGE_OPEN does that; SL_GSTAGE_PLAN chooses and counts the
 * pinned bytes and a reserve for the libraries' host memory, opens
 * nothing; SL_GSTAGE_DECIDE counts as PLAN without asking the device
 * (nothing loaded), for the default modes' rule (sl__gstage_decides).
 * 0 (g->mode says which), or the failure of decode=gpu with err. */
enum { SL_GSTAGE_OPEN = 0, SL_GSTAGE_PLAN = 1, SL_GSTAGE_DECIDE = 2 };
int sl__gstage_open(sl__gstage *g, const sl__conf *conf, const _Atomic int *cancel, int how, char *err,
                    size_t errlen);
/* decode=prefer-gpu or auto: create first sizes the pipeline with the
 * stage counted as SL_GSTAGE_DECIDE counts it (a rule of the
 * configuration), and opens the device only where the budget holds that;
 * else the CPU path, with nothing of the driver's loaded. decode=gpu opens
 * and refuses a budget that cannot hold what it measured. */
int sl__gstage_decides(const sl__conf *conf);
/* The stage is counted but not open (SL_GSTAGE_PLAN or _DECIDE chose it). */
int sl__gstage_planned(const sl__gstage *g);
/* Host memory the GPU stage's libraries hold that sizing must count (the
 * slots step counts it in the budget): measured at open (create), an
 * estimate for plan; 0 without the GPU stage. */
uint64_t sl__gstage_host_pending(const sl__gstage *g);
/* The GPU stage's part of the budget's fixed bytes, counted or pending
 * (pinned region, tables, its libraries' host memory), for messages. */
uint64_t sl__gstage_fixed(const sl__gstage *g);
/* What the stage would count beyond its count now under a budget of b: the default pinned staging
 * is an eighth of the budget (up to 64 MiB), so the minimum sizing names must hold the staging of
 * that minimum. 0 with gpu_staging set, for video, off the GPU. */
uint64_t sl__gstage_more_at(const sl__gstage *g, uint64_t b);
/* Sizing refused the budget with the GPU stage in it (min_budget: the
 * minimum it named): with decode=auto or prefer-gpu close the stage and
 * return 1, so the CPU path sizes again (what the attempt left resident is
 * still counted); else 0. */
int sl__gstage_give_up(sl__gstage *g, uint64_t min_budget);
/* After the slots are carved: the host memory measured at open counted
 * (with auto or prefer-gpu, a budget that moved since sizing closes the
 * stage: the CPU path), then the device memory of nslots batches. */
int sl__gstage_slots(sl__gstage *g, uint32_t nslots, char *err, size_t errlen);
/* Whether the slots' host memory is to be page-locked for the uploads of
 * CPU-decoded samples (the device can, and SLUICE_GPU_PIN_SLOTS is 1);
 * then sl__gstage_pin with the region, before the threads start. A pin
 * that fails leaves the uploads pageable: slower, the same bytes. */
int sl__gstage_wants_pin(const sl__gstage *g);
void sl__gstage_pin(sl__gstage *g, void *base, size_t len);
/* The default (SLUICE_GPU_PIN_SLOTS unset or "bounce"; the slots not
 * pinned): take the flush's bounce block from the staging pool, before the
 * threads start. Without room, or with SLUICE_GPU_PIN_SLOTS 0 or 1, the
 * uploads read the slots (decode_reason says which). */
void sl__gstage_bounce(sl__gstage *g);
/* Start one GPU thread per engine running main(call), each call's owner
 * set to arg (the engine's loop); join them once the loop was told to
 * stop (also the ones that started when start failed). */
int sl__gstage_start(sl__gstage *g, void *(*main)(void *), void *arg, char *err, size_t errlen);
void sl__gstage_join(sl__gstage *g);
/* Release the device and the tables (threads stopped). in_child: after
 * fork(), touch no lock and no driver: forget them. */
void sl__gstage_close(sl__gstage *g, int in_child);

static inline int sl__gstage_on(const sl__gstage *g) { return g->on; }
/* The GPU engines have half a call's worth queued or in their calls: they
 * are busy, not waiting for the workers to stage samples (a consumer that
 * waits then for a batch the GPU finishes last waits on the GPU decode). */
static inline int sl__gstage_busy(const sl__gstage *g) {
    return g->on && atomic_load_explicit(&g->queued, memory_order_relaxed) >= (uint64_t)g->max_batch / 2;
}
/* The tuner's count of workers taking work, which the split weighs the
 * CPU's rate by (set before the threads start; NULL: every worker). */
static inline void sl__gstage_workers(sl__gstage *g, const _Atomic uint32_t *active) { g->active = active; }
/* Image samples decoded so far by the GPU engine and by the CPU workers. */
static inline void sl__gstage_counts(const sl__gstage *g, uint64_t *gpu, uint64_t *cpu) {
    *gpu = g->on ? atomic_load_explicit(&g->gpu_samples, memory_order_relaxed) : 0;
    *cpu = g->on ? atomic_load_explicit(&g->cpu_samples, memory_order_relaxed) : 0;
}
/* decode=gpu (or prefer-gpu) and a call's worth of samples queued past
 * those its engines decode: the GPU is the bottleneck (more CPU workers
 * would wait for its staging). */
static inline int sl__gstage_backlog(const sl__gstage *g) {
    return g->on && g->gpu_only &&
           atomic_load_explicit(&g->queued, memory_order_relaxed) >= (uint64_t)(g->engines + 1) * g->max_batch;
}

/* A worker's hand on the stage (lane: its id). */
void sl__gstage_hand_init(sl__ghand *h, sl__gstage *g, uint32_t lane);
/* Worker side, around one fill of position j of slot s (id slot_id):
 * begin sets the defer hook (cpu_only: a handback, never offered); end
 * settles it: returns 1 when the GPU took the sample (queue it with
 * sl__gstage_push, under the engine's lock), else 0 after settling a CPU
 * decode (rc 0: the output is at base, the slot's block): an image is
 * marked for the commit's flush, a video clip uploaded now (a failed upload
 * becomes rc, with reason, SL_REASON_MAX bytes, saying so). */
void sl__gstage_begin(sl__ghand *h, sl_batch *s, uint32_t slot_id, uint32_t j, uint64_t sample, uint64_t epoch,
                      int cpu_only);
int sl__gstage_end(sl__ghand *h, int *rc, uint64_t t0_ns, uint8_t *base, char *reason);
/* The hand's sample went to the GPU (after sl__gstage_end returned 1). */
static inline int sl__gstage_taken(const sl__ghand *h) { return h->taken; }
/* Engine's lock held: queue the hand's taken sample, claimed in
 * generation gen for a batch of rank `rank` in the delivery order (the
 * slot's seqno), for the GPU thread (the caller wakes it). */
void sl__gstage_push(sl__gstage *g, sl__ghand *h, uint64_t gen, uint64_t rank);
/* Engine's lock held: a handed-back position of generation gen to decode
 * on the CPU (1 with *s, *j, *sample, *epoch), or 0. Stale ones are
 * dropped. */
int sl__gstage_take_back(sl__gstage *g, uint64_t gen, sl_batch **s, uint32_t *j, uint64_t *sample, uint64_t *epoch);
/* Engine's lock held, nothing in flight (reset): drop queued samples and
 * handbacks. */
void sl__gstage_reset(sl__gstage *g);
/* The committer moves position a of slot slot_id to b on the device too
 * (lane: the committer's), or only its host_only mark. */
void sl__gstage_move(sl__gstage *g, uint32_t slot_id, uint32_t a, uint32_t b);
/* The committer, at the start of each commit pass of slot slot_id (host
 * block base; positions [0, n), ok[j] the decoded ones): upload every ok
 * position still host_only, one copy a run of neighbours, complete on
 * return. If the copy fails, the stage stops offering and lost(ctx, j) is
 * called for each of those positions (the caller fails them as a decode
 * would). */
void sl__gstage_flush(sl__gstage *g, uint32_t slot_id, uint8_t *base, const uint8_t *ok, uint32_t n,
                      void (*lost)(void *ctx, uint32_t j), void *ctx);
/* SL_FLAG_CHECKSUM, the committer: fold the device bytes of the n delivered
 * positions of slot slot_id into hash[0, n) (copied back through the
 * field's place in the slot's host block base). 0, or SL_EIO (the device
 * failed: the stage stops offering). */
int sl__gstage_checksum(sl__gstage *g, uint32_t slot_id, uint8_t *base, uint64_t *hash, uint32_t n);
/* Device address of output k of slot slot_id (0 when k is a host output),
 * and where that memory lives. */
uint64_t sl__gstage_data(const sl__gstage *g, uint32_t slot_id, uint32_t k, int *device_type, int *device_id);

/* A GPU thread's steps on its call c, under the engine's lock but run: */
/* ns to wait for more samples before a call (0: call now): up to a
 * millisecond after the oldest was queued, for a quarter of a full call
 * (SLUICE_GPU_GATHER=N samples, SLUICE_GPU_GATHER_MS=MS milliseconds). */
uint64_t sl__gstage_gather_ns(const sl__gstage *g);
/* The next call from the queue: up to max_batch samples of generation gen
 * (stale ones dropped), those of the lowest ranks first (in the order
 * queued within a rank). Returns how many. */
uint32_t sl__gstage_take(sl__gstage *g, sl__gcall *c, uint64_t gen);
/* Outside the lock: decode them on c's engine, again for what found no
 * room (SL_GPU_AGAIN): a round that decodes nothing is followed by the
 * first waiting sample alone, and one that does not fit even alone goes to
 * the CPU, so every round moves on. 0, or SL_EIO with why (the device
 * stopped). */
int sl__gstage_run(sl__gstage *g, sl__gcall *c, uint32_t n, char *why, size_t wlen);
/* Lock held again: each position of generation gen done (done(ctx, slot)
 * for each one written) or handed back; rc/why from the call. */
void sl__gstage_settle(sl__gstage *g, sl__gcall *c, uint32_t n, int rc, const char *why, uint64_t gen,
                       void (*done)(void *ctx, sl_batch *s), void *ctx);

/* The stats: mode and reason (under the engine's lock), then the rest. */
void sl__gstage_mode(sl__gstage *g, sl_stats *o);
void sl__gstage_stats(sl__gstage *g, sl_stats *o);

#endif
