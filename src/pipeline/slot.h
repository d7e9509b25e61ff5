/*
 * A batch slot: one block carved once from the loader's region (layout:
 * collate.h), and the batch it holds. sl_batch is the public handle of a
 * delivered batch.
 *
 * Ownership.
 *  - ld, id and the pointers into the block (base .. rf_hole): slot.c, at
 *    create (sl__slot_carve); fixed for life.
 *  - the slot's state and the batch it holds (state .. checksum): engine.c,
 *    under its lock (mu).
 *  - the commit's number and failures (cno, nerr, last_err): slot.c, for
 *    the committer (sl__slot_commit, sl__slot_fail), the one thread then
 *    owning the batch.
 *  - the refill round (rf_count .. rf_passes): refill.c; rf_count,
 *    rf_claimed, rf_top and rf_pad change under mu (claimers read them),
 *    rf_passes and the holes belong to the committer.
 *  - the per-position data in the block (outputs, hash, ok, err,
 *    reasons): the worker that claimed the position until it reports the
 *    position done (under mu), then the committer; sl__slot_clear at
 *    open, before any claim.
 */
#ifndef SL_PIPELINE_SLOT_H
#define SL_PIPELINE_SLOT_H

#include <stdint.h>

#include "fields/field.h"
#include "pipeline/collate.h"
#include "pipeline/errlog.h"
#include "pipeline/gpustage.h"
#include "sluice.h"

/* A slot's states (engine.c). RETIRED: an elastic slot given back under a
 * lowered limit (its pages returned, its bytes released); dispatch never
 * opens it, and it comes back as FREE when the limit grows. RETIRING: on
 * its way there, marked under the engine's lock and not yet taken by the
 * thread that returns its pages and bytes outside the lock; RELEASING:
 * taken (engine.c, "elastic slots"). Dispatch opens FREE slots only. */
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD, SLOT_RETIRED, SLOT_RETIRING, SLOT_RELEASING };

/* A position's reason string: as long as an error record's. */
#define SL_REASON_LEN SL_REASON_MAX
_Static_assert(sizeof(((sl_error_record *)0)->reason) == SL_REASON_MAX, "a reason fits an error record");

struct sl_batch {
    sl_loader *ld;       /* opaque here: the public accessors' way back */
    uint32_t id;
    int state;
    uint64_t gen;        /* pipeline generation it was filled for */
    uint64_t epoch;
    uint64_t batch;      /* number within the epoch */
    uint64_t seqno;      /* delivery order */
    uint32_t nominal;    /* positions of its nominal range */
    uint32_t claimed;    /* positions handed out */
    uint32_t pending;    /* positions not finished */
    int last_gpu;        /* the position that finished last was the GPU engine's (a consumer that
                            waited for this batch waited on the GPU decode) */
    uint32_t n;          /* samples after commit */
    uint32_t good;       /* samples decoded, delivered or not (on_error=raise drops them) */
    int discard;         /* stale: free once pending reaches 0 */
    int failed;          /* on_error=raise and a sample failed */
    int marker;          /* committed empty (dropped): an epoch boundary only */
    int final;           /* last batch of its epoch */
    int tripped;         /* the failure guard stopped the loader at its commit (guard.c) */
    uint64_t tail_after; /* the epoch's tail after this batch's commit */
    uint64_t pad_after;  /* and its pad cursor (refill.c) */
    uint64_t checksum;
    uint64_t cno;        /* its commit's number */
    uint32_t nerr;       /* failures recorded at its commit */
    sl_error_record last_err; /* the newest failure recorded at its commit (nerr > 0) */
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
};

/* Slot id of loader ld: its block at base, laid out by L. */
void sl__slot_carve(sl_batch *s, sl_loader *ld, uint32_t id, const sl__layout *L, uint8_t *base);
/* A batch opens in s: no position decoded or failed yet (B positions). */
void sl__slot_clear(sl_batch *s, uint32_t B);
/* The dataset index held at position j of s. */
uint64_t sl__slot_index(const sl_batch *s, const sl__layout *L, uint32_t j);
/* Move the sample at position a of s down to b (b < a), on the device too
 * (g); committer only. */
void sl__slot_move(sl_batch *s, const sl__layout *L, sl__gstage *g, uint32_t a, uint32_t b);
/* The committer begins commit number cno of s: no failure recorded yet. */
void sl__slot_commit(sl_batch *s, uint64_t cno);
/* Record a failure at position index for the commit of s (committer
 * only): in log, and as the batch's newest. */
void sl__slot_fail(sl_batch *s, sl__errlog *log, uint64_t index, int code, const char *reason);

#endif
