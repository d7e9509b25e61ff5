/*
 * The error records: the failures the committer records, in commit order,
 * each tagged with its commit's number, and visible to the consumer
 * (sl_loader_errors) once the batch of that commit is delivered, so what
 * the consumer sees does not depend on how far the workers ran ahead.
 *
 * Ownership. errlog.c writes every field. mu protects recs and kept
 * (records are appended by the committer and dropped by a reset, both
 * under the engine's lock, so mu is taken after it; lock order: the
 * engine's mu, then the budget's, then this one). delivered is written by
 * the delivery (under the engine's lock) and read without a lock.
 */
#ifndef SL_PIPELINE_ERRLOG_H
#define SL_PIPELINE_ERRLOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "sluice.h"

/* An error record and the commit it belongs to. */
typedef struct sl__error {
    sl_error_record rec;
    uint64_t cno;
} sl__error;

typedef struct sl__errlog {
    pthread_mutex_t mu;
    int mu_init;
    sl__error *recs;             /* max of them (at least one allocated) */
    uint32_t max;                /* cfg.max_error_records */
    uint32_t kept;               /* (mu) */
    _Atomic uint64_t delivered;  /* commit number of the last delivered batch */
} sl__errlog;

/* The lock. 0 or SL_ESYS. */
int sl__errlog_sync_init(sl__errlog *l);
void sl__errlog_sync_fini(sl__errlog *l);
/* Room for max records in b: 0, or the bytes b or the system refused. */
uint64_t sl__errlog_alloc(sl__errlog *l, sl__budget *b, uint32_t max);
void sl__errlog_free(sl__errlog *l, sl__budget *b);

/* The committer records a failure of commit cno (dropped past max). */
void sl__errlog_add(sl__errlog *l, uint64_t cno, uint64_t epoch, uint64_t index, int code, const char *reason);
/* The batch of commit cno was delivered: its records (and the earlier
 * ones) are visible. */
void sl__errlog_delivered(sl__errlog *l, uint64_t cno);
/* A reset: records of batches committed but never delivered go. */
void sl__errlog_drop_undelivered(sl__errlog *l);
/* Up to max visible records from the first-th into out, elements of the
 * caller's elem_size bytes (sl__abi_out): how many. */
size_t sl__errlog_list(sl__errlog *l, size_t first, sl_error_record *out, size_t max, size_t elem_size);
/* The first n records kept, visible or not, into out: how many. */
uint32_t sl__errlog_head(sl__errlog *l, sl_error_record *out, uint32_t n);

#endif
