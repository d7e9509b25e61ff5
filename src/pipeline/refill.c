/*
 * Refill rounds: how a batch with holes is topped up from the tail of the
 * epoch's order as ordinary parallel work, with the same result as the
 * serial rule.
 *
 * The serial rule (the definition; engine.c's head): the committer of
 * batch k, in batch order, fills the lowest hole with the sample at the
 * last unused position of the order (tail T: position T-1, then T-2, ...),
 * one at a time, a failed refill leaving its hole for the next one, until
 * the batch is full or the tail reaches the batch's own end ((k+1)B).
 *
 * Rounds. Instead of decoding those refills itself, the committer starts a
 * round: with h holes and r = T - (k+1)B unused positions, it takes the
 * m = min(h, r) positions T-1 .. T-m at once (the tail drops to T-m under
 * mu, so nominal claims of them become voids) and hands them out as claims
 * like any position: refill i decodes position T-1-i into the i-th lowest
 * hole. When the round's claims are all finished the batch is committable
 * again; the next pass records the round's failures in refill order, then
 * moves the round's successes down into the lowest of the round's holes in
 * refill order, and starts another round for the holes left.
 *
 * Why this equals the serial rule. Serially, refills stop at the h-th
 * success (or at (k+1)B); a round of m = (holes left) positions can never
 * take a position the serial rule would not (each hole needs at least one
 * more attempt), so both consume exactly the same positions, T-1 downwards.
 * After the move-down, the successes of attempts in order occupy the
 * lowest holes in order, which is where the serial rule put them (a failed
 * attempt leaves its hole to the next attempt). Failures are recorded in
 * attempt order in both. So a batch's samples, their order, its error
 * records and the tail after it depend only on the seed, the epoch and
 * which files fail — never on the worker count or on timing.
 *
 * Padding (world_size > 1). DDP needs every rank to take the same number
 * of batches, of the same sizes, whatever its bad files. Once a rank's
 * tail meets the batch being committed, its share is used up: the holes
 * left, and every batch after it up to the epoch's nominal count, are
 * padded up to the batch's nominal size with the rank's own samples from
 * the start of its order (pad cursor P: position P, then P+1, ...; each
 * tried at most once an epoch), as DistributedSampler pads by repeating
 * the order's start. Pad rounds are rounds as above with positions taken
 * upward from P; a pad that fails is not recorded again (the sample was,
 * when first tried). One rank alone (world_size 1) never pads: its epoch
 * ends early instead, and holds each good sample once.
 *
 * Only the batch being committed (seqno c_seqno) can be in a round: a
 * later batch's commit waits for it, but the refills themselves run on
 * every worker, beside the nominal positions of later batches.
 *
 * Ownership: this file writes the round's fields of a slot. rf_hole and
 * rf_passes belong to the committer between rounds (no claim is out: every
 * refill of the last round was claimed and finished under mu before the
 * batch was committable again); rf_count, rf_claimed and rf_top are read
 * by claimers, so they change under mu only (engine.c's commit_slot
 * publishes a round there, and its claims take refills here).
 */
#include "pipeline/refill.h"

#include <string.h>

#include "base/util.h"

/* The round just finished: record its failures in attempt order (a pad
 * round's were recorded when the samples were first tried), then move its
 * successes down into its lowest holes, in attempt order. */
static void settle_round(sl_batch *s, const sl__conf *c, sl__gstage *g, sl__errlog *log) {
    for (uint32_t i = 0; i < s->rf_count && !s->rf_pad; i++) {
        uint32_t j = s->rf_hole[i];
        if (!s->ok[j] && s->err[j] && -(int)s->err[j] != SL_ESTATE) /* ESTATE: shutting down */
            sl__slot_fail(s, log, sl__slot_index(s, &c->layout, j), -(int)s->err[j],
                          s->reasons + (size_t)j * SL_REASON_LEN);
    }
    uint32_t dst = 0;
    for (uint32_t i = 0; i < s->rf_count; i++) {
        uint32_t j = s->rf_hole[i];
        if (!s->ok[j]) continue;
        if (i != dst) sl__slot_move(s, &c->layout, g, j, s->rf_hole[dst]); /* rf_hole ascends: down */
        dst++;
    }
}

/* Plan a round of m positions into the m lowest holes of [0, size). */
static void plan_holes(sl_batch *s, uint32_t size, uint32_t m) {
    uint32_t n = 0;
    for (uint32_t j = 0; j < size && n < m; j++)
        if (!s->ok[j]) s->rf_hole[n++] = j;
}

uint32_t sl__refill_pass(sl_batch *s, const sl__conf *c, sl__gstage *g, sl__errlog *log, uint64_t *T, uint64_t *P) {
    uint64_t B = c->B, k = s->batch;
    if (s->rf_passes++) settle_round(s, c, g, log);
    uint32_t have = 0;
    for (uint32_t j = 0; j < B; j++) have += s->ok[j];
    if (*T > (k + 1) * B) { /* refills from the tail */
        if (have >= B) return 0;
        uint32_t m = (uint32_t)SL_MIN((uint64_t)(B - have), *T - (k + 1) * B);
        plan_holes(s, (uint32_t)B, m);
        s->rf_pad = 0;
        *T -= m;
        return m;
    }
    if (c->cfg.world_size == 1) return 0;
    /* the share is used up: pad to the batch's nominal size */
    uint64_t per = sl__sampler_span(&c->sampler, s->epoch)->per_rank;
    uint32_t size = (uint32_t)SL_MIN(B, per - k * B);
    if (have >= size || *P >= per) return 0;
    uint32_t m = (uint32_t)SL_MIN((uint64_t)(size - have), per - *P);
    plan_holes(s, size, m);
    s->rf_pad = 1;
    *P += m;
    return m;
}

void sl__refill_clear(sl_batch *s) {
    s->rf_count = s->rf_claimed = 0;
    s->rf_passes = s->rf_pad = 0;
}

void sl__refill_publish(sl_batch *s, uint64_t top, uint64_t bottom, uint32_t m) {
    s->rf_top = s->rf_pad ? bottom : top;
    s->rf_count = m;
    s->rf_claimed = 0;
}

int sl__refill_claim(sl_batch *s, uint32_t *pos, uint64_t *order_pos) {
    if (s->rf_claimed >= s->rf_count) return 0;
    uint32_t r = s->rf_claimed++;
    *pos = s->rf_hole[r];
    *order_pos = s->rf_pad ? s->rf_top + r : s->rf_top - 1 - r; /* a pad round goes up from the cursor */
    return 1;
}

void sl__refill_close(sl_batch *s) { s->rf_count = s->rf_claimed = 0; }
