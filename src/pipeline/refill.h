/*
 * Refill rounds: how a batch with holes is topped up from the tail of the
 * epoch's order as ordinary parallel work (refill.c says why the result is
 * the serial rule's). The round's fields of a slot are refill.c's
 * (slot.h says which lock guards which).
 */
#ifndef SL_PIPELINE_REFILL_H
#define SL_PIPELINE_REFILL_H

#include <stdint.h>

#include "pipeline/config.h"
#include "pipeline/errlog.h"
#include "pipeline/gpustage.h"
#include "pipeline/slot.h"

/* A batch opens in s: no round, no pass. mu held. */
void sl__refill_clear(sl_batch *s);
/* Committer, mu not held: settle the round just finished (its failures
 * recorded in log, its successes moved down, on the device too), then
 * plan the next one if the batch has holes and the tail has unused
 * positions: returns its size m (rf_hole[0..m) filled, *T, the
 * committer's tail, lowered by m), or, with ranks and the tail used up, a
 * pad round (*P, the pad cursor, raised by m), or 0: the batch is
 * settled. The caller publishes a round with sl__refill_publish under mu. */
uint32_t sl__refill_pass(sl_batch *s, const sl__conf *c, sl__gstage *g, sl__errlog *log, uint64_t *T, uint64_t *P);
/* mu held: the round of m refills planned at tail top (a pad round: at
 * pad cursor bottom) becomes claims. */
void sl__refill_publish(sl_batch *s, uint64_t top, uint64_t bottom, uint32_t m);
/* mu held: the next refill of s's round to claim: 1 with the position it
 * fills and the order position it decodes, or 0 (none left). */
int sl__refill_claim(sl_batch *s, uint32_t *pos, uint64_t *order_pos);
/* mu held: the batch is committed, no round is open. */
void sl__refill_close(sl_batch *s);
/* Refills of the round not yet handed out? */
static inline int sl__refill_open(const sl_batch *s) { return s->rf_claimed < s->rf_count; }

#endif
