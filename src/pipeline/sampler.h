/*
 * The sampler: which dataset samples a rank sees, in which order, per
 * epoch. As torch's DistributedSampler: one seeded permutation of the whole
 * dataset per epoch (the same on every rank), padded by wrapping to a
 * multiple of world_size (or cut, with drop_last), then rank r takes
 * positions r, r+world, r+2*world, ...
 *
 * Spans. What the ranks share is a span of the epoch's order: by default
 * all of it, positions [0, n) of the permutation; with an order range
 * (cfg.order_begin/end, a Ray read task's lease) positions [lo, hi) of
 * every epoch; and in the epoch an elastic resume lands in (set_state
 * from the merged state of another world), what the earlier world left of
 * it: [lo, hi) less the positions it consumed ("gone"). Entry j of a span
 * is its j-th position in ascending order; the padding and the rank's
 * stride apply to entries as they applied to positions: rank r takes
 * entries r, r+world, ... of the span padded by wrapping to per_rank *
 * world entries (entry j >= m is entry j mod m), or cut to a multiple of
 * world (drop_last). So every rank of a span has the same number of
 * samples, and the whole order is the span [0, n), as before.
 */
#ifndef SL_SAMPLER_H
#define SL_SAMPLER_H

#include <stdint.h>

typedef struct sl__span {
    uint64_t lo, hi;       /* positions [lo, hi) of the epoch's permutation ... */
    const uint32_t *gone;  /* ... less these ngone, ascending, inside [lo, hi); not owned */
    uint64_t ngone;
    uint64_t m;            /* entries: hi - lo - ngone */
    uint64_t per_rank;     /* entries each rank takes (0 only with drop_last and m < world) */
    uint64_t total;        /* per_rank * world */
} sl__span;

typedef struct sl__sampler {
    uint64_t n;        /* dataset size */
    uint64_t per_rank; /* samples per epoch for this rank (an ordinary epoch: span's) */
    uint64_t total;    /* per_rank * world */
    uint32_t rank, world;
    int shuffle;
    uint64_t seed;
    int drop_last;
    sl__span span;     /* every epoch's: the order range, [0, n) unless sl__sampler_range */
    /* The epoch of an elastic resume has a span of its own (r_span, its
     * gone list owned by the caller) while `resumed` is set. Changed only
     * while nothing reads the sampler (the loader's pipeline is quiet). */
    int resumed;
    uint64_t r_epoch;
    sl__span r_span;
} sl__sampler;

int sl__sampler_init(sl__sampler *s, uint64_t n, uint32_t rank, uint32_t world, int shuffle, int drop_last,
                     uint64_t seed);
/* Share only positions [lo, hi) of every epoch's order (an order range).
 * 0, SL_EINVAL (not 0 <= lo < hi <= n), or SL_EEMPTY (nothing per rank:
 * drop_last and fewer positions than ranks). */
int sl__sampler_range(sl__sampler *s, uint64_t lo, uint64_t hi);

/* Shape a span of positions [lo, hi) less gone (ascending, inside [lo, hi),
 * the caller's memory) for `world` ranks: m, per_rank, total. 0, or
 * SL_EINVAL when the bounds or the gone list are not that (checked here:
 * gone may be hostile), or no entry is left. */
int sl__span_shape(sl__span *sp, uint64_t lo, uint64_t hi, const uint32_t *gone, uint64_t ngone, uint32_t world,
                   int drop_last);
/* Is sp the ordinary span of s (the order range, nothing gone)? */
int sl__span_is_range(const sl__sampler *s, const sl__span *sp);
/* Entry index of position p in sp, or UINT64_MAX when p is not one. */
uint64_t sl__span_index(const sl__span *sp, uint64_t p);

/* The span of epoch: the resumed epoch's, else the order range. */
static inline const sl__span *sl__sampler_span(const sl__sampler *s, uint64_t epoch) {
    return s->resumed && s->r_epoch == epoch ? &s->r_span : &s->span;
}
/* Nominal batches of B for each rank in epoch (all full with drop_last). */
uint64_t sl__sampler_batches(const sl__sampler *s, uint64_t epoch, uint32_t B);
/* Give epoch the span sp (shaped for s's world: sl__span_shape), or, with
 * sp NULL, give every epoch the order range again. */
void sl__sampler_resume(sl__sampler *s, uint64_t epoch, const sl__span *sp);

/* Fill seq[0, per_rank of epoch) for epoch. tmp holds n entries; it may be
 * NULL when seq holds n (world 1, no order range): the order is made in
 * seq itself. */
void sl__sampler_fill(const sl__sampler *s, uint64_t epoch, uint32_t *seq, uint32_t *tmp);

/* Rank r's progress in a span: batches of B delivered (entries [0,
 * *batch * B) of its stride), and its tail (refills took its stride from
 * *tail on). */
typedef void (*sl__progress_fn)(const void *ctx, uint32_t r, uint64_t *batch, uint64_t *tail);

/*
 * What `world` ranks sharing sp (shaped for them) leave of it, each rank's
 * progress as `progress` says (tail <= per_rank; a tail below batch * B,
 * a rank that padded, used its whole stride).
 * Entries past m (padding) repeat earlier ones and leave nothing. The
 * positions left are written as a span: [*lo, *hi) less the *ngone
 * positions written to gone (at most cap of them; *ngone is the count even
 * when larger). Returns the positions left (0: nothing; then *lo = *hi =
 * *ngone = 0). Allocates nothing: two walks over [sp->lo, sp->hi).
 */
uint64_t sl__span_left(const sl__span *sp, uint32_t world, uint32_t B, sl__progress_fn progress, const void *ctx,
                       uint64_t *lo, uint64_t *hi, uint32_t *gone, uint64_t cap, uint64_t *ngone);

/*
 * Next use (for the sample cache). Time is the entry of the epoch's span,
 * counted across epochs: the j-th entry (0 <= j < total) of epoch e's
 * padded span is used at time e * total + j, by rank j % world (total: an
 * ordinary epoch's, which no span of a resumed epoch exceeds). Rank r's
 * i-th sample of epoch e is at sl__sampler_time(s, e, i). All ranks share
 * one permutation per epoch and advance in lock step, so the times of the
 * ranks of a node, merged, are the node's order.
 */
static inline uint64_t sl__sampler_time(const sl__sampler *s, uint64_t epoch, uint64_t i) {
    return epoch * s->total + s->rank + i * s->world;
}

/* The inverse permutation of epoch: inv[k] = the position of sample k in
 * the epoch's permutation. inv holds n entries; requires n < 2^31
 * (SL_EINVAL otherwise). Allocates nothing. */
int sl__sampler_inverse(const sl__sampler *s, uint64_t epoch, uint32_t *inv);

/* The first entry j >= from of epoch's span holding sample k (inv: the
 * epoch's inverse), used by one of the ranks [rank_lo, rank_lo + ranks),
 * or UINT64_MAX if there is none before the span's total. */
uint64_t sl__sampler_next_position(const sl__sampler *s, uint64_t epoch, const uint32_t *inv, uint32_t k,
                                   uint64_t from, uint32_t rank_lo, uint32_t ranks);

#endif
