/*
 * Read-ahead of remote files along the order (readahead.c says how; the
 * table of buffers is io/readahead.c's, the requests the source's I/O
 * engine's).
 *
 * Ownership. readahead.c writes every field: the table, the fields it
 * serves and the sizes at create and destroy (one thread); the claims'
 * cursor (next, epoch, gen) under the engine's mu, from sl__rahead_plan,
 * which the engine calls after a claim. The table locks itself: workers
 * take their entries from it through the sl__load the worker fills
 * (sl__rahead_field), and sl__rahead_issue starts reads outside mu.
 */
#ifndef SL_PIPELINE_READAHEAD_H
#define SL_PIPELINE_READAHEAD_H

#include <stdint.h>

#include "fields/field.h"
#include "io/readahead.h"
#include "pipeline/config.h"
#include "pipeline/lcache.h"
#include "sluice.h"

/* Samples planned per claim, at most. */
#define SL__RAHEAD_STEP 16

typedef struct sl__rahead {
    const sl__conf *conf;
    const sl__lcache *cache;       /* a file it holds is not fetched */
    sl__ra *ra;                    /* the table; NULL: none (a local source, or off) */
    uint8_t field[SL__MAX_FIELDS]; /* 1: field i's files are read ahead */
    uint32_t entries;              /* the table's records */
    /* the claims' cursor (the engine's mu) */
    uint64_t next, epoch, gen;
} sl__rahead;

/* What one claim plans: the samples whose files to start, outside mu. */
typedef struct sl__rahead_todo {
    uint32_t n;
    int jump;                      /* the order jumped: drop what was read ahead */
    uint64_t now;                  /* the claim's time */
    uint64_t sample[SL__RAHEAD_STEP], t[SL__RAHEAD_STEP];
} sl__rahead_todo;

/* Bytes create keeps free of the pipeline for conf's read-ahead: its cap
 * and table (0: a local source, no field read ahead, or off). */
uint64_t sl__rahead_reserve(const sl__conf *conf);
/* The table (nothing when sl__rahead_reserve is 0). 0, or SL_EBUDGET /
 * SL_ENOMEM with err. */
int sl__rahead_create(sl__rahead *r, const sl__conf *conf, const sl__lcache *cache, char *err, size_t errlen);
/* Free the table (in_child: after fork(), forget it: the I/O thread was
 * the parent's). */
void sl__rahead_destroy(sl__rahead *r, int in_child);
/* The engine's mu held, after a claim of position pos of epoch's order,
 * the one being dispatched (seq: that order, tail: its tail; gen: the
 * dispatch's generation, a new one after set_epoch or set_state): the
 * samples to read ahead now (the cursor moves past them) into todo.
 * Returns 0 when there is no read-ahead (todo untouched), else 1. */
int sl__rahead_plan(sl__rahead *r, uint64_t gen, uint64_t epoch, uint64_t pos, uint64_t tail, const uint32_t *seq,
                    sl__rahead_todo *todo);
/* mu not held, after a plan that returned 1: drop what the order passed
 * by, start todo's reads. */
void sl__rahead_issue(sl__rahead *r, const sl__rahead_todo *todo);
/* Field i of the sample L loads (L->index, L->elem set): where its file
 * may have been read ahead (L->ra, L->ra_key; NULL: not read ahead). */
void sl__rahead_field(const sl__rahead *r, sl__load *L, uint32_t i);
/* The remote I/O's part of sl_stats: the source's engine (net_*) and the
 * read-ahead (readahead_*). */
void sl__rahead_stats(const sl__rahead *r, sl_stats *o);

#endif
