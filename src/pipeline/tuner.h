/*
 * The tuner (cfg.workers = SL_WORKERS_AUTO): how many of the loader's CPU
 * workers take work and how many batch slots may be in use, from what the
 * consumer's calls measure (tuner.c says the rules; docs/tuner.md why).
 *
 * It has no thread: the engine hands it one observation per delivered
 * batch, under the engine's lock, and applies what it decides (wakes or
 * parks a worker, retires or brings back a slot). The bytes delivered
 * never depend on it: worker count and slots in flight never did.
 *
 * Ownership. tuner.c writes every field, always under the engine's mu
 * (sl__tuner_init at create, before any thread; the rest from delivery,
 * a reset or the stats, which hold it). `active` is an atomic as well so
 * the GPU stage's split may read it without the lock; `status` is written
 * by one consumer thread at a time outside the lock (sl__tuner_publish,
 * claimed with `publishing`).
 */
#ifndef SL_PIPELINE_TUNER_H
#define SL_PIPELINE_TUNER_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/node.h"
#include "base/status.h"
#include "sluice.h"

/* One window's measurements and the state the rules read: the input of
 * sl__tune_decide, a pure function (the tests drive it directly). */
typedef struct sl__tune_in {
    uint32_t active, ceiling; /* workers taking work now; started (the most) */
    uint32_t cores;          /* CPUs this rank may use (workers and the consumer's thread together) */
    uint32_t slots, slots_min, slots_max; /* slots allowed in use now, and its range (min = max: fixed) */
    uint32_t batches;        /* deliveries in the window */
    double wall_s;           /* the window's length: from the delivery before it to its last */
    double wait_s;           /* of which the consumer waited in sl_loader_next */
    double wait_gpu_s;       /* of that, for batches the busy GPU engines finished last */
    double cpu_s;            /* the consumer's thread's CPU time over it (< 0: not measured) */
    double busy_s;           /* worker-seconds busy (a sample in hand) over it */
    uint32_t ready_min;      /* fewest batches ready when the consumer asked */
    uint32_t gpu_backlog;    /* deliveries at which the GPU engine had a call's worth queued or more */
    uint32_t hold;           /* qualifying windows in a row a step down needs */
    uint32_t calm;           /* qualifying windows in a row so far (this one not counted) */
    /* the node's CPUs shared by demand (0: not shared): what this loader may run now, of how
     * many, among how many loaders wanting how much in all, and its own demand (CPUs) */
    uint32_t node_allow, node_cpus, node_loaders;
    double node_demand, demand;
} sl__tune_in;

typedef struct sl__tune_out {
    int what;                /* 0: nothing; SL_TUNE_WORKERS, SL_TUNE_SLOTS */
    int why;                 /* SL_TUNE_WHY_* */
    uint32_t to;             /* the new active workers or slots */
    int calm;                /* 1: this window qualified for a step down (counted), 0: it did not (reset) */
    char reason[168];
} sl__tune_out;

/* The rules (tuner.c): what to move after a window, if anything. */
void sl__tune_decide(const sl__tune_in *in, sl__tune_out *out);
/* The node's share (tuner.c): the workers a loader demanding `mine` CPUs
 * may run when the node's loaders demand `total` (its own included) of
 * `cpus`: its ceiling while they fit, else its part of the CPUs by demand,
 * rounded, at least 1. */
uint32_t sl__node_allow(uint32_t cpus, double mine, double total, uint32_t ceiling);

/* The CPUs a loader asks of the node's share after a window (tuner.c):
 * one worker more than it runs (at most its ceiling) when its consumer
 * waited on busy workers and the GPU engines were not the bottleneck (the
 * window rule 2 would wake a worker for), else what its workers were busy. */
double sl__tune_demand(const sl__tune_in *in);

/* What the engine sees at one delivery (mu held). */
typedef struct sl__tune_obs {
    uint64_t asked_ns;       /* when the consumer asked for this batch (its first call since the last one) */
    uint64_t asked_cpu_ns;   /* its thread's CPU time then (0: unknown, another thread) */
    uint64_t now_ns;         /* delivered */
    uint32_t ready;          /* batches ready when it asked */
    uint64_t busy_ns;        /* the workers' busy time so far, summed */
    int gpu_backlog;         /* the GPU engine had a call's worth queued when it asked */
    int gpu_held;            /* the batch's last position to finish was the GPU engine's, and the
                                engines were busy when it asked (sl__gstage_busy) */
    int cpu_last;            /* with the GPU stage on, its last position to finish was a CPU worker's */
    uint64_t gpu_samples, cpu_samples; /* the GPU stage's split so far */
} sl__tune_obs;

typedef struct sl__tuner {
    int on;                  /* cfg.workers = SL_WORKERS_AUTO */
    uint32_t ceiling, cores;
    _Atomic uint32_t active; /* workers with id < active take work */
    uint32_t slots, slots_min, slots_max;
    uint32_t window;         /* deliveries a window */
    uint32_t hold, calm;
    int last_move;           /* +1 up, -1 down, 0 none yet */
    /* the window being measured (starts at the delivery before its first) */
    uint32_t n, ready_min, gpu_backlog;
    uint64_t w_wait_ns, w_wait_gpu_ns, w_cpu_ns, w_t0_ns, w_busy0_ns;
    int cpu_known;
    /* the previous delivery of the pass */
    int have_prev;
    uint64_t prev_ns, prev_cpu_ns;
    /* the pass */
    uint64_t pass_t0, pass_end, t_change, active_ns; /* active_ns: integral of active over time, to t_change */
    uint64_t pass_wait_ns, pass_cpu_ns, pass_gpu0, pass_cpu0, gpu_now, cpu_now;
    uint64_t pass_wait_gpu_ns; /* of pass_wait_ns, waits for batches the busy GPU engines finished last */
    uint64_t pass_wait_cpu_ns; /* ... and for those a CPU worker finished last (the GPU stage on) */
    uint64_t t_first;        /* the loader's first sl_loader_next (decision times count from it) */
    /* decisions */
    uint64_t decisions, delivered;
    sl_tuner_decision log[SL_TUNER_LOG];
    /* the node's CPUs shared by demand (base/node.h): its share, this
     * loader's demand and what the last window read of the others' */
    sl__cpushare node;
    double demand, node_demand;
    uint32_t node_loaders, node_allow;
    /* the status file for `sluice top` (docs/tuner.md) */
    sl__status status;
    int status_on;
    uint64_t published_ns, published_seq;
    _Atomic int publishing;
} sl__tuner;

/* At create: on (workers = auto), the workers started, the CPUs of this
 * rank, the batch size (a window covers 32 samples or more), the slots
 * carved and the fewest the tuner may go down to (equal: the slots are
 * not tuned). Nothing to free but the status file. */
void sl__tuner_init(sl__tuner *t, int on, uint32_t ceiling, uint32_t cores, uint32_t batch, uint32_t slots,
                    uint32_t slots_min);
/* With local ranks: join the node's share of node_cpus (base/node.h);
 * where it cannot, the loader runs on its own share. At create. */
void sl__tuner_node(sl__tuner *t, uint32_t node_cpus);
void sl__tuner_fini(sl__tuner *t);
/* In a child of fork(): let the inherited share go, touching nothing of
 * the parent's. */
void sl__tuner_forget(sl__tuner *t);
static inline uint32_t sl__tuner_active(const sl__tuner *t) {
    return atomic_load_explicit(&t->active, memory_order_relaxed);
}
/* The consumer asked (first call since its last batch), at now (mu held). */
void sl__tuner_pass_begin(sl__tuner *t, uint64_t now_ns, uint64_t gpu_samples, uint64_t cpu_samples);
/* The pass ends (SL_EEND, a reset): the mean stops here; the next call begins another. */
void sl__tuner_pass_end(sl__tuner *t, uint64_t now_ns);
/* One delivery: returns what moved (0: nothing; out says what, to which
 * value, why), for the engine to apply. */
int sl__tuner_observe(sl__tuner *t, const sl__tune_obs *o, sl__tune_out *out);
/* The tuner's part of sl_stats (mu held). */
void sl__tuner_stats(const sl__tuner *t, uint64_t now_ns, sl_stats *o);
/* The newest decisions, oldest first (mu held). */
size_t sl__tuner_log(const sl__tuner *t, sl_tuner_decision *out, size_t max);

/* The status file: whether one is due (mu held: a decision since the last,
 * or a second gone), its text made from a copy of the stats, and its write
 * (outside mu, by the consumer thread that claims it). */
int sl__tuner_publish_due(sl__tuner *t, uint64_t now_ns);
void sl__tuner_publish(sl__tuner *t, const sl_stats *st, const sl_tuner_decision *log, size_t nlog,
                       const char *source);

#endif
