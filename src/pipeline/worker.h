/*
 * The workers: threads in the loader's address space, each with its
 * decoder, its scratch and its hand on the GPU stage; what a worker does
 * with one sample (worker.c says how). A worker thread runs the loop it
 * was started with (the engine's: claim, fill, commit), so this layer
 * knows nothing of slots' states.
 *
 * Ownership. worker.c writes every field of sl__workers and sl__worker:
 * the table and the workers at create (sl__workers_alloc, _init, _start),
 * at destroy (_join, _fini), and from each worker's own thread its
 * counters (busy_ns, idle_ns, atomics read by the stats), its scratch and
 * decoder (only it touches them while it runs), and source_gone (an
 * atomic flag, set by any worker, read by the engine). The hand is
 * gpustage.c's (gpustage.h).
 */
#ifndef SL_PIPELINE_WORKER_H
#define SL_PIPELINE_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/scratch.h"
#include "format/decode.h"
#include "pipeline/config.h"
#include "pipeline/gpustage.h"
#include "pipeline/lcache.h"
#include "pipeline/readahead.h"
#include "pipeline/slot.h"
#include "sluice.h"

#define SL_TRANSIENT_MAX_S 60
#define SL_WORKER_READ_BASE ((size_t)256 << 10)
#define SL_WORKER_DEC_BASE ((uint64_t)1 << 20)
/* A worker thread's stack, counted (SL_MEM_OTHER) while the thread lives. */
#define SL_WORKER_STACK ((size_t)2 << 20)
/* What one worker holds for life in the budget: its read buffer, decoder room and stack. */
#define SL_WORKER_BYTES (sl__alloc_cost(SL_WORKER_READ_BASE) + SL_WORKER_DEC_BASE + SL_WORKER_STACK)

typedef struct sl__workers sl__workers;

typedef struct sl__worker {
    const sl__conf *conf;
    sl__lcache *cache;       /* every field's load goes through it */
    const sl__rahead *ra;    /* and takes its file from here when it was read ahead */
    const _Atomic int *cancel; /* the loader is closing: decoders give up */
    sl__workers *crew;       /* its table */
    uint32_t id;
    pthread_t thread;
    sl__decoder *dec;
    sl__scratch scratch;     /* read buffer and decoder room (base/scratch.h) */
    _Atomic uint64_t busy_ns, idle_ns;
    sl__ghand hand;          /* its side of the GPU stage (gpustage.h) */
} sl__worker;

/* What a worker thread runs: the engine's loop, for worker w. */
typedef void (*sl__worker_run_fn)(void *ctx, sl__worker *w);

struct sl__workers {
    sl__worker *w;           /* n of them, in a table of size */
    uint32_t n, size;
    _Atomic int source_gone; /* a worker found the dataset folder removed */
    sl__worker_run_fn run;   /* set by sl__workers_start */
    void *ctx;
};

/* The table of n workers, counted in b: 0, or the bytes b or the system
 * refused. */
uint64_t sl__workers_alloc(sl__workers *ws, sl__budget *b, uint32_t n);
/* Before _init: use the table's first n workers (at most its size:
 * sizing lowers the default count to what the budget holds). */
void sl__workers_trim(sl__workers *ws, uint32_t n);
/* Every worker's baseline (fixed for life: a stack, a read buffer,
 * decoder room) and its hand on gs. 0, or the failure (nothing held, err
 * says why). */
int sl__workers_init(sl__workers *ws, const sl__conf *conf, sl__lcache *cache, const sl__rahead *ra,
                     sl__gstage *gs, const _Atomic int *cancel, char *err, size_t errlen);
/* Start the threads ("sl-worker-N"), each running run(ctx, worker), by
 * the library's one thread start (base/thread.h: asynchronous signals
 * blocked, so Ctrl-C and friends go to the caller's threads; the stack the
 * budget counts). *started: how many run. 0, or SL_ESYS with err (the
 * caller stops the started ones). */
int sl__workers_start(sl__workers *ws, sl__worker_run_fn run, void *ctx, uint32_t *started, char *err,
                      size_t errlen);
/* Join the first n threads (their loop was told to stop). */
void sl__workers_join(sl__workers *ws, uint32_t n);
/* Free the workers and the table. in_child: after fork(), leave the
 * decoders alone (a decode may have been mid-call in the parent). */
void sl__workers_fini(sl__workers *ws, sl__budget *b, int in_child);
/* The workers' part of sl_stats. */
void sl__workers_stats(sl__workers *ws, sl_stats *o);
/* The workers' busy time so far, summed (the tuner's reading). */
uint64_t sl__workers_busy_ns(sl__workers *ws);
static inline int sl__workers_source_gone(sl__workers *ws) { return atomic_load(&ws->source_gone); }

/* Give back the worker's scratch growth (called by the worker itself
 * before it waits for work); sl__worker_woke counts the wait that began
 * at t0_ns as idle. */
void sl__worker_idle(sl__worker *w);
void sl__worker_woke(sl__worker *w, uint64_t t0_ns);
/* Load dataset sample `sample` of epoch into position j of slot s: every
 * field through its kind, then the index and (SL_FLAG_CHECKSUM) the hash,
 * and the outcome in the position's ok and err flags; the time counts as
 * busy. 0, or a code with the reason in the position's reason string.
 * Transient system failures (SL_EAGAIN: out of file descriptors, ...; and
 * SL_ENOMEM from the system) are waited out with a bounded backoff and
 * retried, so they never become error records unless they last
 * SL_TRANSIENT_MAX_S. With the GPU stage on, the image may be taken by the
 * GPU (sl__gstage_taken(&w->hand) after the call: queue it); cpu_only (a
 * handed-back sample) keeps it here. SL_ESTATE if the loader closes
 * meanwhile. pos: the sample's position in the rank's order of epoch (its
 * time for the sample cache). */
int sl__worker_fill(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, uint64_t pos,
                    int cpu_only);

#endif
