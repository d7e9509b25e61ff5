/*
 * The loader's private structures. See loader.c for the pipeline and its
 * invariants, worker.c for what a worker does with one sample.
 */
#ifndef SL_LOADER_IMPL_H
#define SL_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/mem.h"
#include "base/scratch.h"
#include "cache/cache.h"
#include "fields/field.h"
#include "format/decode.h"
#include "gpu/device.h"
#include "pipeline/collate.h"
#include "pipeline/nextuse.h"
#include "pipeline/sampler.h"
#include "sluice.h"
#include "source/source.h"

/* A slot's states (engine.c). RETIRED: an elastic slot given back under a
 * lowered limit (its pages returned, its bytes released); dispatch never
 * opens it, and it comes back as FREE when the limit grows. */
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD, SLOT_RETIRED };

/* An error record and the commit it belongs to. */
typedef struct sl__error {
    sl_error_record rec;
    uint64_t cno;
} sl__error;

/* A batch slot, carved once from the loader's region (layout: collate.h).
 * All fields are protected by ld->mu except the per-position data in the
 * slot (outputs, hash, ok, err, reasons), which belongs to the worker that
 * claimed the position until it decrements pending (under mu), and then to
 * the committer. */
struct sl_batch {
    sl_loader *ld;
    uint32_t id;
    int state;
    uint64_t gen;        /* pipeline generation it was filled for */
    uint64_t epoch;
    uint64_t batch;      /* number within the epoch */
    uint64_t seqno;      /* delivery order */
    uint32_t nominal;    /* positions of its nominal range */
    uint32_t claimed;    /* positions handed out */
    uint32_t pending;    /* positions not finished */
    uint32_t n;          /* samples after commit */
    uint32_t good;       /* samples decoded, delivered or not (on_error=raise drops them) */
    int discard;         /* stale: free once pending reaches 0 */
    int failed;          /* on_error=raise and a sample failed */
    int marker;          /* committed empty (dropped): an epoch boundary only */
    int final;           /* last batch of its epoch */
    uint64_t tail_after; /* the epoch's tail after this batch's commit */
    uint64_t pad_after;  /* and its pad cursor (refill.c) */
    uint64_t checksum;
    uint64_t cno;        /* its commit's number */
    uint32_t nerr;       /* failures recorded at its commit */
    uint8_t *base;       /* the slot's block: outputs, then bookkeeping */
    uint64_t *hash;      /* per-sample hash (SL_FLAG_CHECKSUM) */
    uint8_t *ok;         /* per position: decoded into place */
    uint8_t *err;        /* per position: -code of a failed decode, 0 if none */
    char *reasons;       /* per position: SL_REASON_LEN bytes, why a claimed
                            position failed; recorded at commit, so a position
                            that turns out void (the committer took it as a
                            refill, and recorded it then) is never recorded twice */
    /* Refill rounds (refill.c): the holes a round fills, in position
     * order; refill i of the round decodes order position rf_top - 1 - i
     * into position rf_hole[i]. Claimed like nominal positions (pending
     * counts them), so refills are parallel work. */
    uint32_t *rf_hole;
    uint32_t rf_count;   /* refills in the current round (0: none) (mu) */
    uint32_t rf_claimed; /* handed out (mu) */
    uint64_t rf_top;     /* the tail when the round began; a pad round's: the pad cursor (mu) */
    int rf_pad;          /* a pad round: refill i decodes position rf_top + i (mu) */
    int rf_passes;       /* commit passes made (0: nominal failures not yet recorded) */
    int tripped;         /* the failure guard stopped the loader at its commit (guard.c) */
    sl_error_record last_err; /* the newest failure recorded at its commit (nerr > 0) */
};
#define SL_REASON_LEN sizeof(((sl_error_record *)0)->reason)

/* A sample queued for the GPU (gpustage.c): its position, the staged
 * encoded bytes (a staging block of the device's pinned pool) and the
 * plan's resize. */
typedef struct sl__gitem {
    sl_batch *slot;
    uint32_t pos;
    uint64_t gen, sample, epoch;
    void *data;              /* staging block; NULL once freed */
    size_t len;
    uint64_t t_ns;           /* when it was queued */
    sl__gpu_item item;       /* item.pos = slot id * B + pos */
} sl__gitem;

typedef struct sl__worker {
    sl_loader *ld;
    uint32_t id;
    pthread_t thread;
    sl__decoder *dec;
    sl__scratch scratch; /* read buffer and decoder room (base/scratch.h) */
    _Atomic uint64_t busy_ns, idle_ns;
    /* GPU stage (gpustage.c): the sample in hand, offered through defer */
    sl__defer defer;
    sl_batch *g_slot;    /* the position being filled */
    uint32_t g_pos;
    uint64_t g_sample, g_epoch;
    int g_cpu_only;      /* a handed-back sample: decode here */
    int g_taken;         /* the GPU took it: g_item holds its staging */
    sl__gitem g_item;
} sl__worker;

/* The GPU stage: the decode engine beside the workers (gpustage.c). The
 * image field g.field is delivered from device memory: slot s's batch at
 * region + s->id * slot_bytes. A worker that plans a sample the GPU can
 * take (and the split gives it) stages its bytes and queues it instead of
 * decoding; the GPU thread decodes the queue in calls of up to max_batch
 * samples straight into the slots' device memory; what the engine hands
 * back is claimed by workers first (handbacks). CPU-decoded positions are
 * uploaded by the worker that decoded them, so a position is complete on
 * the device when its pending count drops; compaction moves device
 * positions too (sl__slot_move). */
typedef struct sl__gstage {
    int mode;                /* SL_DECODE_CPU or SL_DECODE_GPU: what create chose */
    int gpu_only;            /* cfg.decode == SL_DECODE_GPU: every sample the GPU can take goes to it */
    char reason[160];        /* why this mode */
    int on;                  /* dev is open (mode == SL_DECODE_GPU) */
    sl__gpu_dev dev;
    uint32_t field, out;     /* the schema field it decodes, and its output */
    uint64_t sample_bytes, slot_bytes; /* one sample's output; one slot's batch (B x sample) */
    uint64_t region, region_bytes;     /* device memory of the slots (0 until step_gpu_slots) */
    uint64_t pool_bytes;     /* the engine's device pool */
    uint32_t max_batch, slots_max;
    uint64_t planned_pinned; /* plan only: pinned bytes reserved in the budget */
    /* staging: pinned bytes held by queued samples (smu) */
    uint64_t staging_cap, staged, staged_peak;
    pthread_mutex_t smu;
    pthread_cond_t scv;      /* room in the staging */
    int sync_init;
    /* queue and handbacks (ld->mu): rings of qcap items each */
    sl__gitem *q, *back;
    uint32_t qcap, qhead, qlen, bhead, blen;
    _Atomic uint32_t queued; /* qlen + samples in the GPU's call */
    _Atomic int failed;      /* the device stopped: nothing more is offered */
    pthread_cond_t cv;       /* the GPU thread: queue not empty, or stop (ld->mu) */
    pthread_t thread;
    int thread_on;
    /* the call in progress (GPU thread only) */
    sl__gitem *cur;
    const uint8_t **data;
    size_t *len;
    sl__gpu_item *items;
    int *status;
    char (*reasons)[SL_GPU_REASON];
    /* stats */
    _Atomic uint64_t gpu_samples, cpu_samples, handed_back;
    _Atomic uint64_t gpu_rate_mhz; /* GPU samples/s x 1000 while busy */
    _Atomic uint64_t cpu_ns;       /* ns a worker spends on one CPU image sample (moving average) */
} sl__gstage;

struct sl_loader {
    sl_config cfg;
    /* process-wide registry of live loaders (registry.c) */
    sl_loader *reg_next;
    long owner_pid;          /* the process that created it */
    int forked;              /* set in a child of fork() by the atfork handler */
    uint64_t sample_cap;     /* most scratch growth one sample may have (admit.c) */
    char *source_path;       /* the configuration's strings, copied */
    char *fields_json;
    sl_image_recipe recipe;  /* the recipe cfg.recipe points at, copied */
    sl__budget *budget;      /* everything the loader holds is counted here */
    sl__budget own_budget;   /* the loader's own budget (what budget points at); with
                                cfg.shared_budget, a child of the shared one */
    int shared;              /* own_budget is a child of cfg.shared_budget's (we hold a reference) */
    int counted_self;        /* sizeof(sl_loader) is reserved in budget */
    sl__source *src;
    sl__schema schema;       /* the fields (fields/field.h) */
    sl__layout layout;       /* where each output lives in a slot */
    sl__sampler sampler;
    uint32_t B;              /* batch size */
    uint64_t nbatches;       /* nominal batches per epoch */
    uint32_t nslots;
    uint32_t nworkers;
    double index_seconds;

    uint32_t *seq[2];        /* sample order of epoch e in seq[e & 1] */
    uint64_t seq_epoch[2];
    int seq_valid[2];
    uint32_t *seq_tmp;       /* permutation scratch (n entries) unless seq holds n: world 1, whole order */
    /* The gone list of the span of an elastic resume's epoch (sampler.r_span),
     * copied by set_state (index memory), and the one before it: a list
     * get_state handed out lives until the second set_state after it. */
    uint32_t *span_gone[2];

    uint8_t *region;         /* all slots: one private mapping of nslots * pitch bytes */
    size_t region_len;
    size_t pitch;            /* a slot's block: layout.stride rounded up to pages, so a
                                retired slot's pages can be given back on their own */
    sl_batch *slots;
    sl__worker *workers;

    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* workers: a position to claim, a free slot */
    pthread_cond_t cv_ready; /* consumer: a batch committed */
    pthread_cond_t cv_quiet; /* reset: a stale claim or commit finished */
    uint64_t gen;
    int paused;              /* reset in progress: no claims */
    int stop;
    _Atomic int cancel;      /* set with stop: decoders give up (sl__load.cancel) */
    uint32_t started;
    int sync_init;           /* mu, errmu and the condition variables exist */
    int poisoned;            /* 0, or the code that poisoned it (mu) */
    char poison_why[320];    /* why, once poisoned (mu) */
    _Atomic int source_gone; /* a worker found the dataset folder removed */
    /* dispatch */
    uint64_t d_epoch, d_batch;
    int d_open;              /* d_epoch's order is ready */
    uint64_t tail;           /* d_epoch's tail; written by the committer */
    uint64_t pad;            /* d_epoch's pad cursor (refill.c); written by the committer */
    uint64_t next_seqno;
    /* commit (one committer at a time, in seqno order) */
    uint64_t c_seqno;
    int committing;
    uint32_t active;         /* claims being processed */
    /* delivery */
    uint64_t r_seqno;
    uint64_t cur_epoch, cur_batch, cur_tail, cur_pad; /* state after the last delivery */
    int pending_end;
    uint32_t held, ready;

    /* Elastic slots (engine.c, "elastic slots"; mu). Slots past min_live
     * are counted as used, not fixed: a lowered limit retires FREE ones at
     * once (consumer.give_back) and the rest as they free while
     * retire_debt lasts; a grown limit brings them back one at a time. */
    uint32_t min_live;       /* never retired: cfg.min_slots */
    uint32_t live;           /* slots not RETIRED */
    uint64_t retire_debt;    /* bytes still to give back as slots free */
    uint64_t retirements, reactivations;
    int pinned;              /* the region was handed out for pinning: no page goes back */
    sl__consumer consumer;   /* registered with the budget's root while the loader runs */
    int consumer_on;

    /* stats (mu) */
    uint64_t t_first_ns;
    uint64_t samples_out, batches_out;
    uint64_t wait_ns;
    uint64_t good_seen;      /* samples decoded in delivered or dropped batches (all epochs) */
    uint64_t epoch_good;     /* the same, in the current epoch */
    uint64_t epoch_errors;   /* failures in the current epoch's delivered or dropped batches */
    sl_error_record last_err;/* newest failure of a delivered batch (has_last_err) */
    int has_last_err;

    /* Error records (errmu), appended by the committer in commit order and
     * visible once their batch is delivered, so what the consumer sees does
     * not depend on how far the workers have run ahead. */
    pthread_mutex_t errmu;
    sl__error *errs;
    uint32_t nerrs_kept;
    uint64_t commits;              /* committer-owned: number of the last commit */
    _Atomic uint64_t delivered_cno;/* commit number of the last delivered batch */
    uint64_t nerrs_seen;           /* (mu) failures in delivered batches */
    /* The failure guard at commit (guard.c): samples settled in commit
     * order, every epoch and the epoch being committed. Committer-owned
     * (one committer at a time); a reset, with no commit in flight, rolls
     * them back to the delivered counts under mu. */
    uint64_t g_good, g_failed, g_epoch, g_epoch_good, g_epoch_failed;
    int tripped;                   /* (mu) a batch tripped it: no more work, delivery stops there */
    char trip_why[320];            /* its sentence, written before the batch is READY (mu publishes it) */

    /* The sample cache (issue 12, lcache.c): made at create, read by every
     * worker (the cache locks itself), gone at destroy. */
    sl__cache *cache;              /* NULL: none */
    sl__nextuse nu;                /* its next-use oracle */
    uint32_t keys_per_sample;      /* F: sample k's keys are [k * F, k * F + F) */
    uint32_t cache_key[SL__MAX_FIELDS];  /* field i's first key within its sample's */
    uint8_t cache_mode[SL__MAX_FIELDS];  /* SL__CM_*: what field i's keys hold */
    uint64_t cache_values;         /* value bytes allowed at create */
    sl__consumer cache_consumer;   /* the governor's first lever (a private cache) */
    int cache_consumer_on;
    sl__fileio fileio;             /* lookups and storage reads, every worker's */
    sl__gstage gs;                 /* GPU decode (gpustage.c) */
};

/* lcache.c: the sample cache in the loader (see its head). */
enum { SL__CM_NONE = 0, SL__CM_FILES, SL__CM_OUTPUT };
/* Bytes create must keep free of the pipeline for the cache: its oracle
 * and handle, and a private cache's capacity. 0 without a cache. */
uint64_t sl__lcache_reserve(const sl_loader *ld);
/* Make the cache of cfg.cache bytes (nothing without one): keys, oracle,
 * cache (private, or the node's segment, created or attached), the
 * governor's consumer. 0, or SL_EINVAL / SL_EBUDGET / SL_ENOMEM / SL_ESYS
 * / SL_ESTATE (a node cache made with other settings) with a sentence;
 * what was made is undone by sl__lcache_destroy. */
int sl__lcache_create(sl_loader *ld, char *err, size_t errlen);
/* Free the cache (the last process of a node cache unlinks it) and the
 * oracle. Safe on a loader without one. */
void sl__lcache_destroy(sl_loader *ld);
/* Epoch's order is about to be dispatched: hold its next uses. */
void sl__lcache_epoch(sl_loader *ld, uint64_t epoch);
/* Dispatch jumps to position pos of epoch (set_epoch, set_state):
 * recompute every entry's next use from there. */
void sl__lcache_jump(sl_loader *ld, uint64_t epoch, uint64_t pos);
/* Load field i of the sample L describes (L->index, L->now set) into dst,
 * through the cache by the field's mode. As sl__kind.load. */
int sl__lcache_load(sl_loader *ld, sl__load *L, uint32_t i, uint8_t *dst, int64_t *len, char *reason);
/* The cache's part of sl_stats. */
void sl__lcache_stats(const sl_loader *ld, sl_stats *o);

/* worker.c */
void *sl__worker_main(void *arg);
int sl__worker_init(sl__worker *w, sl_loader *ld, uint32_t id);
void sl__worker_fini(sl__worker *w);
/* Give back the worker's scratch growth (called by the worker itself
 * before it waits for work). */
void sl__worker_idle(sl__worker *w);
/* Load dataset sample `sample` of epoch into position j of slot s: every
 * field through its kind, then the index and (SL_FLAG_CHECKSUM) the hash.
 * 0, or a code with the reason in the position's reason string. Transient
 * system failures (SL_EAGAIN: out of file descriptors, ...; and SL_ENOMEM
 * from the system) are waited out with a bounded backoff and retried, so
 * they never become error records unless they last SL_TRANSIENT_MAX_S.
 * With the GPU stage on, the image may be taken by the GPU (w->g_taken
 * after the call: queue it); cpu_only (a handed-back sample) keeps it
 * here. SL_ESTATE if the loader closes meanwhile. pos: the sample's
 * position in the rank's order of epoch (its time for the sample cache). */
int sl__worker_fill(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, uint64_t pos,
                    int cpu_only);
/* Record a failure for batch s being committed (committer only). */
void sl__record_error(sl_loader *ld, sl_batch *s, uint64_t index, int code, const char *reason);

#define SL_TRANSIENT_MAX_S 60
#define SL_WORKER_READ_BASE ((size_t)256 << 10)
#define SL_WORKER_DEC_BASE ((uint64_t)1 << 20)
/* A worker thread's stack, counted (SL_MEM_OTHER) while the thread lives. */
#define SL_WORKER_STACK ((size_t)2 << 20)
/* sl_config.worker_nice's default: at nice 10 a worker weighs about a
 * ninth of a nice-0 thread in the scheduler, so the training loop sharing
 * its core runs when it is ready (bench/nice_sim.py). */
#define SL_WORKER_NICE 10

/* engine.c: the slot machinery, run by workers and the consumer */
void sl__loader_run(sl__worker *w);
/* Restart delivery at (epoch, batch) with tail and pad cursor. span:
 * epoch's own span (an elastic resume: sl__sampler_resume), NULL: the
 * order range for every epoch. mu held. */
void sl__reset_pipeline(sl_loader *ld, uint64_t epoch, uint64_t batch, uint64_t tail, uint64_t pad,
                        const sl__span *span);
/* The sample order of epoch (made on first use). */
uint32_t *sl__order_for(sl_loader *ld, uint64_t epoch);
/* Elastic slots (engine.c). The loader's budget consumer: registered at
 * the end of create, removed first thing in destroy. */
void sl__slots_consumer_init(sl_loader *ld);
/* The region is handed out for pinning (sl_loader_slot_region): bring
 * every retired slot back (try-requests) and fix the slots in the budget
 * for life. mu not held. 0, or SL_EBUDGET with a reason. */
int sl__slots_pin(sl_loader *ld, char *err, size_t errlen);
/* Point slot s at its block of the region. */
void sl__slot_carve(sl_loader *ld, sl_batch *s, uint8_t *base);
/* Has destroy begun? (a worker's retry loop stops waiting). */
int sl__loader_stopping(sl_loader *ld);

/* Settle a position whose fill finished (mu held): pending drops; a stale
 * or discarded slot is freed once nothing is pending. */
void sl__position_done(sl_loader *ld, sl_batch *s);

/* gpustage.c: the GPU stage (see sl__gstage). */
/* At create, before sizing: choose the engine (cfg.decode, the schema, the
 * device), open the device and its host tables (counted in the budget, so
 * the minimum working set holds them). plan_only: choose and count the
 * pinned bytes, open nothing. 0 (ld->gs.mode says which), or the failure
 * of decode=gpu with err. */
int sl__gstage_open(sl_loader *ld, int plan_only, char *err, size_t errlen);
/* After the slots are carved: the device memory of nslots batches. */
int sl__gstage_slots(sl_loader *ld, char *err, size_t errlen);
/* Start / stop (join) the GPU thread; stop after ld->stop is set. */
int sl__gstage_start(sl_loader *ld, char *err, size_t errlen);
void sl__gstage_stop(sl_loader *ld);
/* Release the device and the tables (threads stopped). in_child: after
 * fork(), touch no lock and no driver: forget them. */
void sl__gstage_close(sl_loader *ld, int in_child);
/* Worker side, around one fill of position j of s: begin sets the defer
 * hook (cpu_only: a handback, never offered); end settles it: returns 1
 * when the GPU took the sample (queue it with sl__gstage_push, under mu),
 * else 0 after uploading a CPU decode (rc 0) to the device; a failed
 * upload becomes rc. */
void sl__gstage_begin(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, int cpu_only);
int sl__gstage_end(sl__worker *w, int *rc, uint64_t t0_ns);
/* mu held: queue the worker's taken sample for the GPU thread. */
void sl__gstage_push(sl_loader *ld, sl__worker *w);
/* mu held: a handed-back position to decode on the CPU (1 with *s, *j,
 * *sample, *epoch), or 0. Stale ones are dropped. */
int sl__gstage_take_back(sl_loader *ld, sl_batch **s, uint32_t *j, uint64_t *sample, uint64_t *epoch);
/* mu held, nothing in flight (reset): drop queued samples and handbacks. */
void sl__gstage_reset(sl_loader *ld);
/* The committer moves position a of s to b on the device too. */
void sl__gstage_move(sl_loader *ld, sl_batch *s, uint32_t a, uint32_t b);
/* Device address of output k of slot s (0 when k is a host output). */
uint64_t sl__gstage_data(const sl_loader *ld, const sl_batch *s, uint32_t k);
/* Fill the GPU part of the stats. */
void sl__gstage_stats(const sl_loader *ld, sl_stats *o);

/* registry.c: live loaders, process-wide. A pthread_atfork child handler
 * marks every loader registered at the fork as forked (no lock needed: the
 * child has one thread; the registry's own lock is held across fork()). */
void sl__registry_add(sl_loader *ld);
/* 1 if ld was registered (and is no longer), 0 if it was not. */
int sl__registry_remove(sl_loader *ld);
/* 1 with the registry locked if ld is a live loader, else 0 (unlocked):
 * for calls that must not touch a destroyed loader. sl__registry_leave
 * unlocks. Lock order: registry, then ld->mu. */
int sl__registry_enter(const sl_loader *ld);
void sl__registry_leave(void);

/* guard.c. After each commit pass of batch s (the committer, no lock):
 * the samples the pass settled are judged; 1 when the guard trips (s is
 * marked: the loader stops there), else 0. last: the batch's final pass. */
int sl__guard_pass(sl_loader *ld, sl_batch *s, int last);
/* A reset (mu held, no commit in flight): the guard's commit counts back
 * to the delivered ones, the epoch begun anew at epoch. */
void sl__guard_reset(sl_loader *ld, uint64_t epoch);
/* (mu held) The failure guard for batch s about to be delivered (or
 * dropped), its samples and failures already counted: 0, or SL_EERRORS
 * after poisoning ld. */
int sl__guard_check(sl_loader *ld, const sl_batch *s);
/* Poison ld for a removed dataset folder: SL_ENOENT. */
int sl__poison_vanished(sl_loader *ld);

/* admit.c: the per-sample room and the check of ordinary samples at create. */
/* The most growth one sample may have: a quarter of the budget. */
uint64_t sl__sample_cap(uint64_t budget);
/* At create (no worker running): read the headers of up to 32 samples
 * spread evenly over the dataset and refuse (SL_EBUDGET with the numbers)
 * when more than a tenth would need more than ld->sample_cap (each file
 * field's kind bounds its need, sl__kind.admit). Uses worker 0's scratch.
 * Unreadable or undecodable headers are left out. */
int sl__admit_check(sl_loader *ld, char *err, size_t errlen);

/* refill.c: refill rounds, committer side (see refill.c). mu not held. */
/* Settle the round just finished (its failures recorded, its successes
 * moved down), then plan the next one if the batch has holes and the tail
 * has unused positions: returns its size m (rf_hole[0..m) filled, *T, the
 * committer's tail, lowered by m; the caller publishes rf_top = the old
 * *T and rf_count = m under mu), or, with ranks and the tail used up, a
 * pad round (rf_pad set; *P, the pad cursor, raised by m; rf_top = the old
 * *P), or 0: the batch is settled. */
uint32_t sl__refill_pass(sl_loader *ld, sl_batch *s, uint64_t *T, uint64_t *P);
/* Move the sample at position a of s down to b (b < a); committer only. */
void sl__slot_move(sl_loader *ld, sl_batch *s, uint32_t a, uint32_t b);
/* The dataset index held at position j of slot s. */
uint64_t sl__slot_index(const sl_loader *ld, const sl_batch *s, uint32_t j);

#endif
