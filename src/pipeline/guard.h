/*
 * The guard on failures, and poisoning (guard.c says the rules).
 *
 * Ownership. guard.c writes every field. The commit counts (g_*) and
 * trip_why belong to the one committer (sl__guard_pass, outside the
 * engine's lock; a reset, with no commit in flight, rolls them back under
 * it; trip_why is written before its batch is READY, and the lock
 * publishes it). The rest is under the engine's lock: the guard is called
 * from delivery, which holds it, and read under it by the engine and the
 * public calls.
 */
#ifndef SL_PIPELINE_GUARD_H
#define SL_PIPELINE_GUARD_H

#include <stdint.h>

#include "pipeline/errlog.h"
#include "sluice.h"
#include "source/source.h"

typedef struct sl__guard {
    double max_rate;           /* cfg.max_error_rate */
    /* batches delivered or dropped so far */
    uint64_t good_seen;        /* samples decoded (all epochs) */
    uint64_t failed_seen;      /* failures recorded at their commits (all epochs) */
    uint64_t epoch_good;       /* the same two, in the current epoch */
    uint64_t epoch_errors;
    sl_error_record last_err;  /* the newest failure (has_last_err) */
    int has_last_err;
    /* samples settled in commit order, every epoch and the epoch being committed */
    uint64_t g_good, g_failed, g_epoch, g_epoch_good, g_epoch_failed;
    char trip_why[320];        /* why the last pass tripped it */
    int poisoned;              /* 0, or the code that poisoned the loader */
    char why[320];             /* why, once poisoned */
} sl__guard;

void sl__guard_init(sl__guard *g, double max_rate);
/* After each commit pass of a batch of epoch (the committer, no lock):
 * the samples it settled so far (nerr failures recorded, good decoded) are
 * judged; 1 when the guard trips (the loader stops at this batch), else 0.
 * last: the batch's final pass. */
int sl__guard_pass(sl__guard *g, uint64_t epoch, uint32_t nerr, uint64_t good, int last);
/* A reset (no commit in flight): the commit counts back to the delivered
 * ones, the epoch begun anew at epoch. */
void sl__guard_reset(sl__guard *g, uint64_t epoch);
/* A batch delivered (or dropped): its nerr failures (the newest, last)
 * and good samples are counted. */
void sl__guard_count(sl__guard *g, uint32_t nerr, uint32_t good, const sl_error_record *last);
/* The failure guard for the batch just counted (of epoch; final: the
 * epoch's last; tripped: the guard tripped at its commit): 0, or
 * SL_EERRORS after poisoning. The sentence names the first failures kept
 * in log (paths from src). */
int sl__guard_check(sl__guard *g, sl__errlog *log, const sl__source *src, uint64_t epoch, int final, int tripped);
/* The epoch is over (its last batch delivered): its counts start again. */
void sl__guard_epoch_end(sl__guard *g);
/* Poison for a removed dataset folder (path) after `batches` delivered:
 * SL_ENOENT. */
int sl__guard_vanished(sl__guard *g, const char *path, uint64_t batches);

static inline int sl__guard_poisoned(const sl__guard *g) { return g->poisoned; }

#endif
