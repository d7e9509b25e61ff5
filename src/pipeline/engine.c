/*
 * The engine: a fixed pool of batch slots filled by worker threads and
 * delivered in sampler order.
 *
 * A batch's life: FREE -> FILLING (a worker opened it for batch k of an
 * epoch; workers claim its positions one sample at a time and decode
 * straight into them) -> committed in seqno order (holes refilled, see
 * below) -> READY -> HELD by the consumer -> FREE on release. A slot past
 * the fixed minimum may be RETIRED instead of FREE under a lowered limit,
 * and come back FREE when it grows (see "elastic slots" below).
 *
 * Determinism. Batch k nominally holds positions [kB, (k+1)B) of the rank's
 * order for the epoch. A sample that fails leaves a hole; under
 * on_error=skip the committer, which handles batches strictly in order,
 * refills holes from the end of the order ("the tail"), taking the last
 * unused position each time. Positions at or past the tail were used as
 * refills, so they count as holes where they appear. The epoch ends with
 * the batch after which the tail leaves no further batch. Each sample is
 * used at most once per epoch, and what a batch holds depends only on the
 * seed, the epoch and which files fail: never on worker count or timing.
 * A transform's randomness comes from (seed, epoch, sample index) only.
 *
 * Invariants (all under mu):
 *  - slots in FILLING, READY or HELD never exceed live (the slots not
 *    RETIRED); workers wait for a FREE slot (backpressure); the consumer
 *    holding all of them gets SL_EHELD, never a wait.
 *  - seqnos are dense: delivery takes r_seqno, r_seqno+1, ...; batches
 *    dispatched past an epoch's end are discarded and their seqnos reused.
 *  - one committer at a time (committing), in seqno order (c_seqno); only
 *    the committer writes tail.
 *  - a reset (set_epoch, set_state) bumps gen, waits until no claim or
 *    commit is in flight, and frees every slot the consumer does not hold.
 *
 * GPU decode (gpustage.c): a position whose sample the GPU took stays
 * pending until the GPU thread has written it (or handed it back: then a
 * worker claims it before any other work and decodes it here); the GPU
 * thread counts in active while its call runs, so a reset waits for it.
 *
 * Lock order: mu, then budget.mu (inside sl__budget_*), then errmu. A
 * worker never waits for budget while holding mu.
 *
 * This file is the slot machinery (dispatch, commit, delivery, reset);
 * loader.c creates and sizes the loader; worker.c loads one sample.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/abi.h"
#include "base/hash.h"
#include "base/util.h"
#include "pipeline/loader_impl.h"

/* ---- order ----------------------------------------------------------------- */

uint32_t *sl__order_for(sl_loader *ld, uint64_t epoch) {
    int i = (int)(epoch & 1);
    sl__lcache_epoch(ld, epoch); /* the cache's next uses: this epoch and the next */
    if (!ld->seq_valid[i] || ld->seq_epoch[i] != epoch) {
        sl__sampler_fill(&ld->sampler, epoch, ld->seq[i], ld->seq_tmp);
        ld->seq_epoch[i] = epoch;
        ld->seq_valid[i] = 1;
    }
    return ld->seq[i];
}

/* ---- slots ------------------------------------------------------------------ */

void sl__slot_carve(sl_loader *ld, sl_batch *s, uint8_t *base) {
    const sl__layout *L = &ld->layout;
    s->base = base;
    s->hash = (uint64_t *)(base + L->off_hash);
    s->ok = base + L->off_ok;
    s->err = base + L->off_err;
    s->reasons = (char *)(base + L->off_reasons);
    s->rf_hole = (uint32_t *)(base + L->off_rf_hole);
}

uint64_t sl__slot_index(const sl_loader *ld, const sl_batch *s, uint32_t j) {
    int64_t v;
    memcpy(&v, sl__layout_at(&ld->layout, s->base, ld->layout.index_out, j), 8);
    return (uint64_t)v;
}

void sl__slot_move(sl_loader *ld, sl_batch *s, uint32_t a, uint32_t b) {
    sl__layout_move(&ld->layout, s->base, a, b);
    sl__gstage_move(ld, s, a, b); /* the device copy of a GPU-decoded field */
}

/* ---- elastic slots: retire and reactivate ------------------------------------ */
/*
 * Slots past min_live are elastic: counted as used, not fixed, so a
 * lowered limit can take them back. Only a FREE slot is retired: a FILLING
 * slot holds claimed positions, a READY one a committed batch, a HELD one
 * the consumer's data; none is disturbed, so delivery order and bytes
 * never change, only how many batches are in flight. Retiring drops the
 * slot's pages (MADV_DONTNEED: they read as zeros when it comes back)
 * before its bytes are released, so resident memory never outgrows the
 * count. Live slots never fall below max(min_live, held + 1): a consumer
 * holding h batches can still get the next one. All of it under mu.
 */

static uint32_t live_floor(const sl_loader *ld) { return SL_MAX(ld->min_live, ld->held + 1); }

/* Pinned (or locked) pages cannot be given back: every live slot becomes
 * fixed for life, and none is retired again. */
static void fix_slots(sl_loader *ld) {
    if (ld->pinned) return;
    ld->pinned = 1;
    ld->retire_debt = 0;
    sl__budget_fix(ld->budget, (uint64_t)(ld->live - ld->min_live) * ld->pitch);
}

/* FREE slot s gives its pages and bytes back: 1, or 0 (it stays FREE)
 * when the system will not drop its pages (mlock'd: MADV_DONTNEED refuses
 * locked pages), and then the slots are fixed. */
static int slot_retire(sl_loader *ld, sl_batch *s) {
    if (madvise(s->base, ld->pitch, MADV_DONTNEED) != 0) {
        fix_slots(ld);
        return 0;
    }
    s->state = SLOT_RETIRED;
    ld->live--;
    ld->retirements++;
    sl__budget_release(ld->budget, ld->pitch, SL_MEM_BATCHES);
    return 1;
}

/* Retire FREE slots, highest id first (dispatch takes the lowest), until
 * want bytes went or the floor is reached. Returns the bytes released. */
static uint64_t retire_free(sl_loader *ld, uint64_t want) {
    uint64_t got = 0;
    for (uint32_t i = ld->nslots; i-- > 0 && got < want && !ld->pinned && ld->live > live_floor(ld);) {
        if (ld->slots[i].state == SLOT_FREE && slot_retire(ld, &ld->slots[i])) got += ld->pitch;
    }
    return got;
}

/* Slot s is done with (released, dropped, discarded, reset): retired while
 * the debt of a lowered limit lasts and the budget is still over it (the
 * workers' trimmed scratch or another loader may have paid it), else FREE. */
static void slot_free(sl_loader *ld, sl_batch *s) {
    s->discard = 0;
    if (ld->retire_debt && !sl__budget_over(ld->budget)) ld->retire_debt = 0;
    s->state = SLOT_FREE;
    if (ld->retire_debt && !ld->pinned && ld->live > live_floor(ld) && slot_retire(ld, s)) {
        ld->retire_debt = ld->retire_debt > ld->pitch ? ld->retire_debt - ld->pitch : 0;
        return;
    }
    pthread_cond_broadcast(&ld->cv_work);
}

/* Bring up to `most` retired slots back, one at a time, each with a
 * try-request (never a wait: prefetch is the first thing shed and the last
 * grown), while no debt is owed and the elastic slots leave one sample's
 * growth (sample_cap) under the limit beyond the fixed part, as create
 * sized them. Returns how many came back. */
static uint32_t reactivate(sl_loader *ld, uint32_t most) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < ld->nslots && n < most && !ld->retire_debt; i++) {
        sl_batch *s = &ld->slots[i];
        if (s->state != SLOT_RETIRED) continue;
        uint64_t elastic = (uint64_t)(ld->live + 1 - ld->min_live) * ld->pitch;
        if (elastic + ld->sample_cap > sl__budget_headroom(ld->budget)) break;
        if (sl__budget_try(ld->budget, ld->pitch, SL_MEM_BATCHES)) break;
        if (ld->pinned) sl__budget_fix(ld->budget, ld->pitch); /* locked after it retired */
        s->state = SLOT_FREE;
        ld->live++;
        ld->reactivations++;
        n++;
    }
    if (n) pthread_cond_broadcast(&ld->cv_work);
    return n;
}

/* The budget's consumer (mem.h): called on the thread that moved the
 * limit, no budget lock held. */
static uint64_t slots_give_back(void *ctx, uint64_t want) {
    sl_loader *ld = ctx;
    pthread_mutex_lock(&ld->mu);
    uint64_t got = retire_free(ld, want);
    ld->retire_debt = want > got && !ld->pinned ? want - got : 0;
    pthread_mutex_unlock(&ld->mu);
    return got;
}

static void slots_room(void *ctx) {
    sl_loader *ld = ctx;
    pthread_mutex_lock(&ld->mu);
    ld->retire_debt = 0;
    reactivate(ld, UINT32_MAX);
    pthread_mutex_unlock(&ld->mu);
}

void sl__slots_consumer_init(sl_loader *ld) {
    ld->consumer = (sl__consumer){.give_back = slots_give_back, .room = slots_room, .ctx = ld};
}

int sl__slots_pin(sl_loader *ld, char *err, size_t errlen) {
    pthread_mutex_lock(&ld->mu);
    int rc = 0;
    uint32_t retired = ld->nslots - ld->live;
    if (!ld->pinned && retired) { /* all of them back, or none */
        if (sl__budget_try(ld->budget, (uint64_t)retired * ld->pitch, SL_MEM_BATCHES)) {
            char x[32];
            sl__msg(err, errlen, "%u of %u batch slots are retired under a lowered limit and the budget cannot "
                    "hold their %s again now", retired, ld->nslots,
                    sl__fmt_bytes((uint64_t)retired * ld->pitch, x, sizeof x));
            rc = SL_EBUDGET;
        } else {
            for (uint32_t i = 0; i < ld->nslots; i++)
                if (ld->slots[i].state == SLOT_RETIRED) ld->slots[i].state = SLOT_FREE;
            ld->live = ld->nslots;
            ld->reactivations += retired;
        }
    }
    if (!rc && !ld->pinned) {
        fix_slots(ld);
        pthread_cond_broadcast(&ld->cv_work);
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------- */

typedef struct claim {
    sl_batch *slot;
    uint32_t pos;
    uint64_t order_pos;  /* the sample's position in the rank's order of its epoch */
    uint64_t sample;
    uint64_t epoch;
    uint64_t gen;
    int cpu_only; /* a sample the GPU handed back: decode it here */
} claim;

static sl_batch *slot_by_seqno(sl_loader *ld, uint64_t seqno, int state) {
    for (uint32_t i = 0; i < ld->nslots; i++) {
        sl_batch *s = &ld->slots[i];
        if (s->state == state && s->seqno == seqno && !s->discard && s->gen == ld->gen) return s;
    }
    return NULL;
}

/* Can batch k of the dispatch epoch still hold samples given the tail?
 * (With ranks, batches past the tail are padded: refill.c.) */
static int batch_possible(const sl_loader *ld, uint64_t k) {
    uint64_t B = ld->B;
    if (k >= sl__sampler_batches(&ld->sampler, ld->d_epoch, ld->B)) return 0;
    if (ld->cfg.world_size > 1) return 1;
    if (ld->cfg.drop_last) return (k + 1) * B <= ld->tail;
    return k * B < ld->tail;
}

/* Open the next batch of the dispatch epoch in a free slot. mu held. */
static sl_batch *open_batch(sl_loader *ld) {
    if (!ld->d_open || !batch_possible(ld, ld->d_batch)) return NULL;
    sl_batch *s = NULL;
    for (uint32_t i = 0; i < ld->nslots; i++)
        if (ld->slots[i].state == SLOT_FREE) {
            s = &ld->slots[i];
            break;
        }
    if (!s) return NULL;
    uint64_t k = ld->d_batch++;
    uint64_t start = k * ld->B, per = sl__sampler_span(&ld->sampler, ld->d_epoch)->per_rank;
    s->state = SLOT_FILLING;
    s->gen = ld->gen;
    s->epoch = ld->d_epoch;
    s->batch = k;
    s->seqno = ld->next_seqno++;
    s->nominal = (uint32_t)SL_MIN((uint64_t)ld->B, per - start);
    s->claimed = 0;
    s->pending = s->nominal;
    s->n = 0;
    s->discard = s->failed = s->marker = s->final = s->tripped = 0;
    s->checksum = 0;
    s->rf_count = s->rf_claimed = 0;
    s->rf_passes = s->rf_pad = 0;
    memset(s->ok, 0, ld->B);
    memset(s->err, 0, ld->B);
    return s;
}

/* A refill of the round of the batch being committed (refill.c), which
 * every later commit waits for: first in line. Returns 1 with c filled. */
static int claim_refill(sl_loader *ld, claim *c) {
    for (uint32_t i = 0; i < ld->nslots; i++) {
        sl_batch *s = &ld->slots[i];
        if (s->state != SLOT_FILLING || s->discard || s->gen != ld->gen || s->rf_claimed >= s->rf_count) continue;
        uint32_t r = s->rf_claimed++;
        c->slot = s;
        c->pos = s->rf_hole[r];
        c->order_pos = s->rf_pad ? s->rf_top + r : s->rf_top - 1 - r; /* a pad round goes up from the cursor */
        c->sample = ld->seq[s->epoch & 1][c->order_pos];
        c->epoch = s->epoch;
        c->gen = s->gen;
        c->cpu_only = 0;
        return 1;
    }
    return 0;
}

/* Find work: a sample the GPU handed back, a refill, else the lowest-seqno filling slot with unclaimed
 * positions, else a newly opened batch. Positions at or past the tail are
 * voids: settled here without decoding. Returns 1 with c filled, 0 if
 * nothing to do. */
static int claim_next(sl_loader *ld, claim *c) {
    for (;;) {
        if (ld->paused || ld->stop || ld->tripped) return 0;
        if (sl__gstage_take_back(ld, &c->slot, &c->pos, &c->sample, &c->epoch)) {
            c->gen = c->slot->gen;
            c->cpu_only = 1;
            /* its time for the cache's clock: the nominal position (a refill's is
             * later in the order; the clock only ranks evictions, never bytes) */
            c->order_pos = c->slot->batch * ld->B + c->pos;
            return 1;
        }
        if (claim_refill(ld, c)) return 1;
        sl_batch *best = NULL;
        for (uint32_t i = 0; i < ld->nslots; i++) {
            sl_batch *s = &ld->slots[i];
            if (s->state == SLOT_FILLING && !s->discard && s->gen == ld->gen && s->claimed < s->nominal &&
                (!best || s->seqno < best->seqno))
                best = s;
        }
        if (!best) best = open_batch(ld);
        if (!best) return 0;
        uint32_t j = best->claimed++;
        uint64_t p = best->batch * ld->B + j;
        if (p >= ld->tail) { /* used as a refill already */
            best->pending--;
            continue; /* its commit is found by the next completion or here below */
        }
        c->slot = best;
        c->pos = j;
        c->order_pos = p;
        c->sample = ld->seq[best->epoch & 1][p]; /* valid: the dispatch epoch's order */
        c->epoch = best->epoch;
        c->gen = best->gen;
        c->cpu_only = 0;
        return 1;
    }
}

/* ---- commit ------------------------------------------------------------------ */

void sl__position_done(sl_loader *ld, sl_batch *s) {
    s->pending--;
    if ((s->gen != ld->gen || s->discard) && s->pending == 0 && s->state == SLOT_FILLING) slot_free(ld, s);
}

/* First commit pass: record the failures of the nominal positions that
 * are still the batch's own (in position order). */
static void commit_nominal(sl_loader *ld, sl_batch *s, uint64_t T) {
    uint64_t B = ld->B, k = s->batch;
    uint32_t errors = 0;
    s->cno = ++ld->commits;
    s->nerr = 0;
    for (uint32_t j = 0; j < s->nominal; j++) {
        if (k * B + j >= T) {
            s->ok[j] = 0; /* used as a refill by an earlier batch, which recorded any failure */
        } else if (s->err[j] && -(int)s->err[j] != SL_ESTATE) { /* ESTATE: shutting down */
            sl__record_error(ld, s, sl__slot_index(ld, s, j), -(int)s->err[j], s->reasons + (size_t)j * SL_REASON_LEN);
        }
        errors += s->err[j] != 0;
    }
    if (ld->cfg.on_error == SL_ON_ERROR_RAISE) s->failed = errors > 0;
}

/* A commit pass: settle holes (a refill round, refill.c, if any can be
 * filled: returns 1 and the batch goes on filling), else decide n and
 * whether the epoch ends here (returns 0). Runs outside mu by the one
 * committer; tail is written only by it (under mu, for the claimers). */
static int commit_slot(sl__worker *w, sl_batch *s) {
    sl_loader *ld = w->ld;
    uint64_t B = ld->B, k = s->batch, T = ld->tail, top = T, P = ld->pad, bottom = P;
    if (s->rf_passes == 0) commit_nominal(ld, s, T);
    uint32_t m = ld->cfg.on_error == SL_ON_ERROR_SKIP ? sl__refill_pass(ld, s, &T, &P) : 0;
    if (sl__guard_pass(ld, s, m == 0)) m = 0, T = top, P = bottom; /* tripped: no more rounds, the loader stops here */
    if (m) { /* publish the round: its positions leave the tail (or the pad cursor), its refills become claims */
        pthread_mutex_lock(&ld->mu);
        s->rf_top = s->rf_pad ? bottom : top;
        s->rf_count = m;
        s->rf_claimed = 0;
        s->pending += m;
        ld->tail = T;
        ld->pad = P;
        pthread_mutex_unlock(&ld->mu);
        return 1;
    }
    uint32_t n = 0;
    s->good = 0;
    for (uint32_t j = 0; j < SL_MAX(s->nominal, (uint32_t)B); j++) s->good += s->ok[j];
    if (!s->failed) {
        /* compact: keep position order */
        uint32_t limit = SL_MAX(s->nominal, (uint32_t)B);
        for (uint32_t j = 0; j < limit; j++)
            if (s->ok[j]) {
                if (j != n) sl__slot_move(ld, s, j, n);
                n++;
            }
    }
    s->n = n;
    uint64_t nb = sl__sampler_batches(&ld->sampler, s->epoch, ld->B);
    if (ld->cfg.world_size > 1) s->final = k + 1 >= nb; /* every rank takes nb batches (padding) */
    else s->final = ld->cfg.drop_last ? T < (k + 2) * B || k + 1 >= nb : T <= (k + 1) * B || k + 1 >= nb;
    if (!s->failed && (n == 0 || (ld->cfg.drop_last && n < B))) s->marker = 1;
    s->tail_after = T;
    s->pad_after = P;
    if ((ld->cfg.flags & SL_FLAG_CHECKSUM) && !s->marker && !s->failed)
        s->checksum = sl__hash64(s->hash, (size_t)n * 8, s->epoch * 1000003u + s->batch);
    pthread_mutex_lock(&ld->mu);
    ld->tail = T;
    s->rf_count = s->rf_claimed = 0;
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

/* Commit every resolved batch in order. mu held; may drop it while
 * committing. Returns how many commit passes it made: a pass can open
 * work (a refill round, the next epoch), so a caller about to sleep must
 * look for work again when this is not 0. */
static int try_commit(sl__worker *w) {
    sl_loader *ld = w->ld;
    int done = 0;
    while (!ld->committing && !ld->stop && !ld->tripped) {
        sl_batch *s = slot_by_seqno(ld, ld->c_seqno, SLOT_FILLING);
        if (!s || s->pending || s->claimed < s->nominal || s->rf_claimed < s->rf_count) return done;
        done++;
        uint64_t gen = ld->gen;
        ld->committing = 1;
        pthread_mutex_unlock(&ld->mu);
        int round = commit_slot(w, s);
        pthread_mutex_lock(&ld->mu);
        ld->committing = 0;
        pthread_cond_broadcast(&ld->cv_quiet);
        if (gen != ld->gen) { /* a reset came in meanwhile: stale */
            if (s->state == SLOT_FILLING) slot_free(ld, s);
            continue;
        }
        if (round) { /* refills to claim: the batch is committed once they are done */
            pthread_cond_broadcast(&ld->cv_work);
            continue;
        }
        s->state = SLOT_READY;
        ld->ready++;
        ld->c_seqno++;
        ld->tripped = s->tripped; /* the guard stopped the loader at s: no commit or claim after it */
        pthread_cond_broadcast(&ld->cv_ready);
        if (s->final && !s->tripped) {
            /* Epoch over: drop batches opened past it, start the next. */
            for (uint32_t i = 0; i < ld->nslots; i++) {
                sl_batch *o = &ld->slots[i];
                if (o->state == SLOT_FILLING && o->gen == ld->gen && o->epoch == s->epoch) {
                    o->discard = 1;
                    o->pending -= o->nominal - o->claimed;
                    o->claimed = o->nominal;
                    if (o->pending == 0) slot_free(ld, o);
                }
            }
            ld->next_seqno = s->seqno + 1;
            ld->d_epoch = s->epoch + 1;
            ld->d_batch = 0;
            ld->d_open = 0;
            ld->committing = 1; /* hold off other commits and resets while the order is made */
            pthread_mutex_unlock(&ld->mu);
            sl__order_for(ld, s->epoch + 1);
            pthread_mutex_lock(&ld->mu);
            ld->committing = 0;
            ld->tail = sl__sampler_span(&ld->sampler, s->epoch + 1)->per_rank;
            ld->pad = 0;
            ld->d_open = 1;
            pthread_cond_broadcast(&ld->cv_work);
            pthread_cond_broadcast(&ld->cv_quiet);
        }
    }
    return done;
}

/* ---- workers -------------------------------------------------------------- */

/* Load sample into position j of s. A failure is kept in the slot for
 * the commit to record if the position is still part of the batch then.
 * Returns 1 when the GPU took the sample (it settles the position). */
static int fill_position(sl__worker *w, const claim *c) {
    sl_batch *s = c->slot;
    uint32_t j = c->pos;
    int rc = sl__worker_fill(w, s, j, c->sample, c->epoch, c->order_pos, c->cpu_only);
    s->ok[j] = rc == 0;
    s->err[j] = (uint8_t)-rc; /* codes are -1 .. -20 */
    return rc == 0 && w->g_taken;
}

void sl__loader_run(sl__worker *w) {
    sl_loader *ld = w->ld;
    pthread_mutex_lock(&ld->mu);
    ld->started++;
    pthread_cond_broadcast(&ld->cv_ready);
    while (!ld->stop) {
        claim c;
        if (!claim_next(ld, &c)) {
            /* voids may have resolved a batch; its commit may have opened
             * the next epoch (the broadcast went to no one: look again) */
            if (try_commit(w) > 0) continue;
            if (ld->stop) break;
            sl__worker_idle(w); /* never sleep on growth another worker may wait for */
            uint64_t t0 = sl__now_ns();
            pthread_cond_wait(&ld->cv_work, &ld->mu);
            atomic_fetch_add_explicit(&w->idle_ns, sl__now_ns() - t0, memory_order_relaxed);
            continue;
        }
        ld->active++;
        pthread_mutex_unlock(&ld->mu);
        uint64_t t0 = sl__now_ns();
        int to_gpu = fill_position(w, &c);
        atomic_fetch_add_explicit(&w->busy_ns, sl__now_ns() - t0, memory_order_relaxed);
        pthread_mutex_lock(&ld->mu);
        ld->active--;
        sl_batch *s = c.slot;
        int stale = s->gen != ld->gen || s->discard;
        if (to_gpu) sl__gstage_push(ld, w); /* pending drops when the GPU has written it */
        else sl__position_done(ld, s);
        if (stale) {
            pthread_cond_broadcast(&ld->cv_quiet);
            continue;
        }
        try_commit(w);
        if (ld->active == 0) pthread_cond_broadcast(&ld->cv_quiet);
    }
    pthread_mutex_unlock(&ld->mu);
}

/* ---- reset ------------------------------------------------------------------ */

void sl__reset_pipeline(sl_loader *ld, uint64_t epoch, uint64_t batch, uint64_t tail, uint64_t pad,
                        const sl__span *span) {
    ld->paused = 1;
    ld->gen++;
    while (ld->active > 0 || ld->committing) pthread_cond_wait(&ld->cv_quiet, &ld->mu);
    if (span || ld->sampler.resumed) { /* the orders made for the old spans are stale */
        sl__sampler_resume(&ld->sampler, epoch, span);
        ld->seq_valid[0] = ld->seq_valid[1] = 0;
    }
    sl__gstage_reset(ld); /* samples queued for the GPU or handed back belong to the old generation */
    for (uint32_t i = 0; i < ld->nslots; i++) {
        sl_batch *s = &ld->slots[i];
        if (s->state == SLOT_FILLING || s->state == SLOT_READY) slot_free(ld, s);
        s->discard = 0;
    }
    ld->ready = 0;
    /* records of batches committed but never delivered go with them */
    pthread_mutex_lock(&ld->errmu);
    uint64_t seen = atomic_load(&ld->delivered_cno);
    while (ld->nerrs_kept > 0 && ld->errs[ld->nerrs_kept - 1].cno > seen) ld->nerrs_kept--;
    pthread_mutex_unlock(&ld->errmu);
    sl__order_for(ld, epoch);
    sl__lcache_jump(ld, epoch, batch * ld->B);
    ld->d_epoch = epoch;
    ld->d_batch = batch;
    ld->tail = tail;
    ld->pad = pad;
    ld->d_open = 1;
    ld->next_seqno = ld->c_seqno = ld->r_seqno = 0;
    sl__guard_reset(ld, epoch);
    ld->cur_epoch = epoch;
    ld->cur_batch = batch;
    ld->cur_tail = tail;
    ld->cur_pad = pad;
    ld->pending_end = 0;
    ld->paused = 0;
    pthread_cond_broadcast(&ld->cv_work);
}

/* ---- public: iteration ------------------------------------------------------ */

/* Hand batch s (the next in order, READY) to the consumer. mu held.
 * Returns 0 with *out, SL_EEND / SL_ESAMPLE, SL_EERRORS or SL_ENOENT (the
 * guard tripped on it, or its failures come from a removed dataset
 * folder: not delivered, ld poisoned), or 1: nothing to hand (an empty
 * marker inside the epoch), look again. */
static int deliver(sl_loader *ld, sl_batch *s, sl_batch **out) {
    ld->r_seqno++;
    ld->ready--;
    /* its failures become visible with it */
    ld->nerrs_seen += s->nerr;
    ld->epoch_errors += s->nerr;
    if (s->nerr) {
        ld->last_err = s->last_err;
        ld->has_last_err = 1;
    }
    atomic_store(&ld->delivered_cno, s->cno);
    ld->good_seen += s->good;
    ld->epoch_good += s->good;
    /* failures because the dataset folder is gone: say that, not "too many failures" */
    int rc = s->nerr && sl__source_gone(ld->src) ? sl__poison_vanished(ld) : sl__guard_check(ld, s);
    if (rc) {
        slot_free(ld, s);
        return rc;
    }
    if (s->final) {
        ld->cur_epoch = s->epoch + 1;
        ld->cur_batch = 0;
        ld->cur_tail = sl__sampler_span(&ld->sampler, s->epoch + 1)->per_rank;
        ld->cur_pad = 0;
        ld->epoch_good = ld->epoch_errors = 0;
    } else {
        ld->cur_epoch = s->epoch;
        ld->cur_batch = s->batch + 1;
        ld->cur_tail = s->tail_after;
        ld->cur_pad = s->pad_after;
    }
    if (s->marker || s->failed) {
        int failed = s->failed, final = s->final;
        slot_free(ld, s);
        if (failed) {
            if (final) ld->pending_end = 1;
            return SL_ESAMPLE;
        }
        return final ? SL_EEND : 1;
    }
    s->state = SLOT_HELD;
    ld->held++;
    if (s->final) ld->pending_end = 1;
    ld->samples_out += s->n;
    ld->batches_out++;
    *out = s;
    return 0;
}

/* sl_loader_next with mu held, waiting at most timeout_ns (< 0: forever). */
static int next_locked(sl_loader *ld, sl_batch **out, int64_t timeout_ns) {
    if (ld->poisoned) return SL_ESTATE;
    uint64_t t0 = sl__now_ns();
    if (!ld->t_first_ns) ld->t_first_ns = t0;
    struct timespec dl;
    if (timeout_ns > 0) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)timeout_ns;
        dl.tv_sec += (time_t)(ns / 1000000000u);
        dl.tv_nsec = (long)(ns % 1000000000u);
    }
    int rc, expired = 0;
    for (;;) {
        if (atomic_load(&ld->source_gone)) {
            rc = sl__poison_vanished(ld);
            break;
        }
        if (ld->pending_end) {
            ld->pending_end = 0;
            rc = SL_EEND;
            break;
        }
        sl_batch *s = slot_by_seqno(ld, ld->r_seqno, SLOT_READY);
        if (s && (rc = deliver(ld, s, out)) != 1) break;
        if (s) continue;
        if (ld->held >= ld->live && !reactivate(ld, 1)) {
            rc = SL_EHELD;
            break;
        }
        if (expired) {
            rc = SL_ETIMEDOUT;
            break;
        }
        if (timeout_ns < 0) pthread_cond_wait(&ld->cv_ready, &ld->mu);
        else if (timeout_ns == 0 || pthread_cond_timedwait(&ld->cv_ready, &ld->mu, &dl) == ETIMEDOUT) expired = 1;
    }
    ld->wait_ns += sl__now_ns() - t0;
    return rc;
}

int sl_loader_next_timeout(sl_loader *ld, sl_batch **out, uint32_t timeout_ms) {
    if (!ld || !out) return SL_EINVAL;
    *out = NULL;
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    int rc = next_locked(ld, out, (int64_t)timeout_ms * 1000000);
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

int sl_loader_next(sl_loader *ld, sl_batch **out) {
    if (!ld || !out) return SL_EINVAL;
    *out = NULL;
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    int rc = next_locked(ld, out, -1);
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

/* Is b one of ld's slots? By address only: b may point anywhere. */
static int is_slot(const sl_loader *ld, const sl_batch *b) {
    uintptr_t p = (uintptr_t)b, lo = (uintptr_t)ld->slots, hi = lo + (uintptr_t)ld->nslots * sizeof(sl_batch);
    return p >= lo && p < hi && (p - lo) % sizeof(sl_batch) == 0;
}

void sl_loader_release(sl_loader *ld, sl_batch *b) {
    if (!ld || !b || !sl__registry_enter(ld)) return; /* a destroyed loader: its batches went with it */
    if (!ld->forked && is_slot(ld, b)) {
        pthread_mutex_lock(&ld->mu);
        if (b->state == SLOT_HELD) {
            ld->held--;
            slot_free(ld, b);
            if (ld->live < ld->nslots) reactivate(ld, 1); /* room a try-request refused before */
            pthread_cond_broadcast(&ld->cv_ready);
        }
        pthread_mutex_unlock(&ld->mu);
    }
    sl__registry_leave();
}

int sl_loader_poisoned(const sl_loader *cld, char *why, size_t len) {
    if (!cld) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->forked) {
        sl__msg(why, len,
                "this loader was created in process %ld and this is process %ld, a child of fork(): its worker "
                "threads did not survive the fork, so it cannot be used here; create a new loader after the fork",
                ld->owner_pid, (long)getpid());
        return SL_ESTATE;
    }
    pthread_mutex_lock(&ld->mu);
    int code = ld->poisoned;
    if (code) sl__msg(why, len, "%s", ld->poison_why);
    else sl__msg(why, len, "%s", "");
    pthread_mutex_unlock(&ld->mu);
    return code;
}

int sl_loader_last_error_sized(const sl_loader *cld, sl_error_record *out, size_t out_size) {
    if (!cld || !out || !out_size) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    int rc = ld->has_last_err ? 0 : SL_EEND;
    if (!rc) sl__abi_out(out, out_size, &ld->last_err, sizeof ld->last_err);
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

int sl__loader_stopping(sl_loader *ld) {
    pthread_mutex_lock(&ld->mu);
    int stop = ld->stop;
    pthread_mutex_unlock(&ld->mu);
    return stop;
}

int sl_loader_set_epoch(sl_loader *ld, uint64_t epoch) {
    if (!ld) return SL_EINVAL;
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    if (ld->poisoned) {
        pthread_mutex_unlock(&ld->mu);
        return SL_ESTATE;
    }
    if (ld->cur_epoch == epoch && ld->cur_batch == 0) {
        ld->pending_end = 0; /* already there (the usual loop) */
    } else {
        sl__reset_pipeline(ld, epoch, 0, ld->sampler.per_rank, 0, NULL);
    }
    pthread_mutex_unlock(&ld->mu);
    return 0;
}
