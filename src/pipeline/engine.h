/*
 * The engine: a fixed pool of batch slots filled by the workers (and the
 * GPU stage) and delivered in sampler order (engine.c says how, and its
 * invariants). It drives the modules below it through pointers it is
 * given at init; loader.c composes them and is the only caller.
 *
 * Ownership. engine.c writes every field. The pointers (ld .. guard) are
 * set by sl__engine_init, the slots and the orders' buffers by
 * sl__engine_slots and sl__engine_orders at create; all fixed after. The
 * rest is under mu, except: cancel (an atomic, set with stop), the
 * committer's own fields (commits, and tail, written under mu but only by
 * the one committer), and the order buffers (seq), written while
 * `committing` holds other commits and resets off and read by claims of
 * their epoch. Lock order: mu, then the budget's, then the error
 * records'; the GPU stage's smu after mu.
 */
#ifndef SL_PIPELINE_ENGINE_H
#define SL_PIPELINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/mem.h"
#include "pipeline/config.h"
#include "pipeline/errlog.h"
#include "pipeline/gpustage.h"
#include "pipeline/guard.h"
#include "pipeline/lcache.h"
#include "pipeline/readahead.h"
#include "pipeline/slot.h"
#include "pipeline/tuner.h"
#include "pipeline/worker.h"
#include "sluice.h"

typedef struct sl__engine {
    /* what it drives */
    sl_loader *ld;           /* opaque: stamped into the slots for the public accessors */
    const sl__conf *conf;
    sl__sampler *sampler;    /* conf's: the engine resumes an epoch's span at a reset (config.h) */
    sl__workers *workers;
    sl__gstage *gs;
    sl__lcache *cache;
    sl__rahead *ra;          /* read-ahead of remote files, planned after each claim */
    sl__errlog *log;
    sl__guard *guard;        /* its fields are under mu */

    /* the slots */
    uint32_t nslots;
    uint8_t *region;         /* all slots: one private mapping of nslots * pitch bytes */
    size_t region_len;
    size_t pitch;            /* a slot's block: layout.stride rounded up to pages, so a
                                retired slot's pages can be given back on their own */
    sl_batch *slots;

    /* the epochs' orders */
    uint32_t *seq[2];        /* sample order of epoch e in seq[e & 1] */
    uint64_t seq_epoch[2];
    int seq_valid[2];
    uint32_t *seq_tmp;       /* permutation scratch (n entries) unless seq holds n: world 1, whole order */
    /* The gone list of the span of an elastic resume's epoch (sampler's
     * r_span), copied by set_state (index memory), and the one before it:
     * a list get_state handed out lives until the second set_state after
     * it (mu). */
    uint32_t *span_gone[2];

    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* workers: a position to claim, a free slot */
    pthread_cond_t cv_ready; /* consumer: a batch committed */
    pthread_cond_t cv_quiet; /* reset: a stale claim or commit finished */
    pthread_cond_t cv_gpu;   /* the GPU thread: queue not empty, or stop */
    pthread_cond_t cv_park;  /* parked workers: the tuner woke one, or stop */
    int sync_init;           /* mu and the condition variables exist */
    uint64_t gen;
    int paused;              /* reset in progress: no claims */
    int stop;
    _Atomic int cancel;      /* set with stop: decoders give up (sl__load.cancel) */
    uint32_t started;
    /* dispatch */
    uint64_t d_epoch, d_batch;
    int d_open;              /* d_epoch's order is ready */
    uint64_t tail;           /* d_epoch's tail; written by the committer */
    uint64_t pad;            /* d_epoch's pad cursor (refill.c); written by the committer */
    uint64_t next_seqno;
    /* commit (one committer at a time, in seqno order) */
    uint64_t c_seqno;
    int committing;
    uint64_t commits;        /* committer-owned: number of the last commit */
    uint32_t active;         /* claims being processed (the GPU thread's call counts) */
    int tripped;             /* a batch tripped the failure guard: no more work, delivery stops there */
    /* delivery */
    uint64_t r_seqno;
    uint64_t cur_epoch, cur_batch, cur_tail, cur_pad; /* state after the last delivery */
    int pending_end;
    uint32_t held, ready;

    /* Elastic slots ("elastic slots" in engine.c). Slots past min_live are
     * counted as used, not fixed: a lowered limit retires FREE ones at
     * once (consumer.give_back) and the rest as they free while
     * retire_debt lasts; a grown limit brings them back one at a time. */
    uint32_t min_live;       /* never retired: cfg.min_slots */
    uint32_t live;           /* slots neither RETIRED nor on their way there */
    uint32_t retire_marked;  /* slots RETIRING: none once mu is free (unlock, wait_on) */
    uint32_t retire_busy;    /* slots RELEASING: pages and bytes going back outside mu */
    uint64_t retire_debt;    /* bytes still to give back as slots free */
    uint64_t retirements, reactivations;
    int pinned;              /* the region was handed out for pinning: no page goes back */
    sl__consumer consumer;   /* registered with the budget's root while the loader runs */
    int consumer_on;

    /* The tuner (tuner.h; its state is tuner.c's, under mu): workers with
     * id >= its active count park on cv_park; slots in use stay within
     * its target. The consumer's ask: the first call since its last batch. */
    sl__tuner tuner;
    int tune_slots;          /* the tuner moves the slots (prefetch not set) */
    _Atomic uintptr_t consumer_id; /* the thread that last called next (read before mu) */
    int asking;              /* the consumer asked and has no batch yet */
    uint64_t ask_ns, ask_cpu_ns;
    uint32_t ask_ready;
    int ask_backlog, ask_gpu_busy;

    /* stats */
    uint64_t t_first_ns;
    uint64_t samples_out, batches_out;
    uint64_t wait_ns;
} sl__engine;

/* ---- life (create and destroy, one thread) ---------------------------------------- */

/* The lock and the condition variables (cv_ready and cv_gpu on the
 * monotonic clock, for deadlines). 0, or SL_ESYS with none left. */
int sl__engine_sync_init(sl__engine *e);
void sl__engine_sync_fini(sl__engine *e);
/* What the engine drives (ld: the loader the slots belong to). */
void sl__engine_init(sl__engine *e, sl_loader *ld, const sl__conf *conf, sl__sampler *sampler, sl__workers *workers,
                     sl__gstage *gs, sl__lcache *cache, sl__rahead *ra, sl__errlog *log, sl__guard *guard);
static inline const _Atomic int *sl__engine_cancel(const sl__engine *e) { return &e->cancel; }
/* The two epoch orders' buffers (and the permutation scratch for world >
 * 1) in the budget: 0, or the smallest block refused. */
uint64_t sl__engine_orders(sl__engine *e);
/* The region of nslots blocks of pitch bytes, counted under
 * SL_MEM_BATCHES, and the slots carved from it. Slots past min_slots are
 * elastic: counted, not fixed (sl__engine_elastic_bytes), so a lowered
 * limit can retire them. 0, or SL_EBUDGET / SL_ENOMEM. */
int sl__engine_slots(sl__engine *e, uint32_t nslots, uint64_t pitch);
/* Bytes of the elastic slots (counted, not fixed). */
uint64_t sl__engine_elastic_bytes(const sl__engine *e);
/* The tuner, once the slots are carved (cfg.workers = SL_WORKERS_AUTO:
 * on; the workers started and the CPUs of this rank; the slots are tuned
 * unless cfg.prefetch fixes them). */
void sl__engine_tune(sl__engine *e, int on, uint32_t ceiling, uint32_t cores);
/* Dispatch begins with epoch 0 (its order made). */
void sl__engine_open(sl__engine *e);
/* A worker thread's loop (sl__workers_start runs it with the engine). */
void sl__engine_run(void *e, sl__worker *w);
/* A GPU thread's loop (sl__gstage_start runs it with its call, whose
 * owner is the engine). */
void *sl__engine_gpu_main(void *call);
/* Return once n workers run (the create's handshake). */
void sl__engine_wait_started(sl__engine *e, uint32_t n);
/* Stop: no more claims, every waiter wakes, decoders give up. */
void sl__engine_stop(sl__engine *e);
/* After the stop: wake the GPU threads and join them. */
void sl__engine_stop_gpu(sl__engine *e);
/* The slots' budget consumer: registered at the end of create (on),
 * removed first thing in destroy (off, which waits for a notification in
 * progress), or forgotten in a child of fork(). */
void sl__engine_consumer_on(sl__engine *e);
void sl__engine_consumer_off(sl__engine *e);
void sl__engine_consumer_forget(sl__engine *e);
/* Free the slots, the region and the orders. */
void sl__engine_free(sl__engine *e);

/* ---- the public calls' bodies (the loader checked its handle) --------------------- */

/* The next batch, waiting at most timeout_ns (< 0: forever). *publish:
 * the tuner's status file is due (the caller writes it: sl__tuner_publish). */
int sl__engine_next(sl__engine *e, sl_batch **out, int64_t timeout_ns, int *publish);
/* Give batch b back (anything that is not a held slot of e: nothing). */
void sl__engine_release(sl__engine *e, sl_batch *b);
int sl__engine_set_epoch(sl__engine *e, uint64_t epoch);
/* Restart delivery at (epoch, batch) with tail and pad cursor; span:
 * epoch's own span (an elastic resume), NULL: the order range; gone: its
 * gone list, allocated in the budget, which the engine keeps (and frees)
 * from here, also on failure. 0, or SL_ESTATE when poisoned. */
int sl__engine_set_state(sl__engine *e, uint64_t epoch, uint64_t batch, uint64_t tail, uint64_t pad,
                         const sl__span *span, uint32_t *gone);
/* The state after the last delivery, and its epoch's span (its gone list
 * lives until the second set_state after). */
void sl__engine_state(sl__engine *e, uint64_t *epoch, uint64_t *batch, uint64_t *tail, uint64_t *pad, sl__span *span);
/* The poison code (0: none) and its sentence. */
int sl__engine_poisoned(sl__engine *e, char *why, size_t len);
/* The newest failure of a delivered batch: 0, or SL_EEND (none). */
int sl__engine_last_error(sl__engine *e, sl_error_record *out);
/* The region is handed out for pinning (sl_loader_slot_region): bring
 * every retired slot back (try-requests) and fix the slots in the budget
 * for life; then *base, *len. 0, or SL_EBUDGET. */
int sl__engine_pin(sl__engine *e, void **base, size_t *len);
/* The parts of sl_stats under the engine's lock: delivery, slots,
 * errors, the GPU stage's mode. */
void sl__engine_stats(sl__engine *e, sl_stats *o);
/* The tuner's newest decisions, oldest first (sl_loader_tuner_log). */
size_t sl__engine_tuner_log(sl__engine *e, sl_tuner_decision *out, size_t max);

#endif
