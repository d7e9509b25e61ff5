/*
 * The loader's private structures. See loader.c for the pipeline and its
 * invariants, worker.c for what a worker does with one sample.
 */
#ifndef SL_LOADER_IMPL_H
#define SL_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../format/decode.h"
#include "../source/source.h"
#include "../base/mem.h"
#include "sampler.h"
#include "sluice.h"

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD };

/* An error record and the commit it belongs to. */
typedef struct sl__error {
    sl_error_record rec;
    uint64_t cno;
} sl__error;

/* A batch slot, carved once from the loader's region. All fields are
 * protected by ld->mu except the per-position arrays, which belong to the
 * worker that claimed the position until it decrements pending (under mu),
 * and then to the committer. */
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
    int discard;         /* stale: free once pending reaches 0 */
    int failed;          /* on_error=raise and a sample failed */
    int marker;          /* committed empty (dropped): an epoch boundary only */
    int final;           /* last batch of its epoch */
    uint64_t tail_after; /* the epoch's tail after this batch's commit */
    uint64_t checksum;
    uint64_t cno;        /* its commit's number */
    uint32_t nerr;       /* failures recorded at its commit */
    uint8_t *image;      /* batch_size x sample_bytes */
    int64_t *label;
    int64_t *index;
    uint64_t *hash;      /* per-sample hash (SL_FLAG_CHECKSUM) */
    uint8_t *ok;         /* per position: decoded into place */
    uint8_t *err;        /* per position: -code of a failed decode, 0 if none */
    char *reasons;       /* per position: SL_REASON_LEN bytes, why a claimed
                            position failed; recorded at commit, so a position
                            that turns out void (the committer took it as a
                            refill, and recorded it then) is never recorded twice */
};
#define SL_REASON_LEN sizeof(((sl_error_record *)0)->reason)

typedef struct sl__worker {
    sl_loader *ld;
    uint32_t id;
    pthread_t thread;
    sl__decoder *dec;
    uint8_t *rbase;      /* baseline read buffer (fixed) */
    size_t rbase_cap;
    uint8_t *rbig;       /* grown read buffer (prepaid from grow_read) */
    size_t rbig_cap;
    uint64_t grow_read;  /* bytes counted for rbig (SL_MEM_SCRATCH) */
    uint64_t grow_dec;   /* decoder quota beyond the baseline (SL_MEM_DECODER) */
    _Atomic uint64_t busy_ns, idle_ns;
} sl__worker;

struct sl_loader {
    sl_config cfg;
    char *source_path;
    sl__budget budget;
    int shared;              /* budget is a child of cfg.shared_budget's (we hold a reference) */
    sl__source *src;
    sl__sampler sampler;
    uint32_t B;              /* batch size */
    uint32_t C;              /* channels */
    uint64_t sample_bytes;   /* C * size * size */
    uint64_t nbatches;       /* nominal batches per epoch */
    uint32_t nslots;
    uint32_t nworkers;
    double index_seconds;

    uint32_t *seq[2];        /* sample order of epoch e in seq[e & 1] */
    uint64_t seq_epoch[2];
    int seq_valid[2];
    uint32_t *seq_tmp;       /* permutation scratch for world > 1 */

    uint8_t *region;         /* all slots */
    size_t region_len;
    sl_batch *slots;
    sl__worker *workers;

    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* workers: a position to claim, a free slot */
    pthread_cond_t cv_ready; /* consumer: a batch committed */
    pthread_cond_t cv_quiet; /* reset: a stale claim or commit finished */
    uint64_t gen;
    int paused;              /* reset in progress: no claims */
    int stop;
    uint32_t started;
    int poisoned;
    /* dispatch */
    uint64_t d_epoch, d_batch;
    int d_open;              /* d_epoch's order is ready */
    uint64_t tail;           /* d_epoch's tail; written by the committer */
    uint64_t next_seqno;
    /* commit (one committer at a time, in seqno order) */
    uint64_t c_seqno;
    int committing;
    uint32_t active;         /* claims being processed */
    /* delivery */
    uint64_t r_seqno;
    uint64_t cur_epoch, cur_batch, cur_tail; /* state after the last delivery */
    int pending_end;
    uint32_t held, ready;

    /* stats (mu) */
    uint64_t t_first_ns;
    uint64_t samples_out, batches_out;
    uint64_t wait_ns;

    /* Error records (errmu), appended by the committer in commit order and
     * visible once their batch is delivered, so what the consumer sees does
     * not depend on how far the workers have run ahead. */
    pthread_mutex_t errmu;
    sl__error *errs;
    uint32_t nerrs_kept;
    uint64_t commits;              /* committer-owned: number of the last commit */
    _Atomic uint64_t delivered_cno;/* commit number of the last delivered batch */
    uint64_t nerrs_seen;           /* (mu) failures in delivered batches */
};

/* worker.c */
void *sl__worker_main(void *arg);
int sl__worker_init(sl__worker *w, sl_loader *ld, uint32_t id);
void sl__worker_fini(sl__worker *w);
/* Give back the worker's scratch growth (called by the worker itself
 * before it waits for work). */
void sl__worker_idle(sl__worker *w);
/* Decode dataset sample index of epoch into dst. 0 or a code with reason. */
int sl__worker_sample(sl__worker *w, uint64_t index, uint64_t epoch, uint8_t *dst, char *reason, size_t rlen);
/* Record a failure for batch s being committed (committer only). */
void sl__record_error(sl_loader *ld, sl_batch *s, uint64_t index, int code, const char *reason);

#define SL_WORKER_READ_BASE ((size_t)256 << 10)
#define SL_WORKER_DEC_BASE ((uint64_t)1 << 20)
/* A worker thread's stack, counted (SL_MEM_OTHER) while the thread lives. */
#define SL_WORKER_STACK ((uint64_t)2 << 20)

/* loader.c, called by workers */
void sl__loader_run(sl__worker *w);

#endif
