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
 *  - the tuner (tuner.c, workers = auto): a worker whose id is not below
 *    its active count parks on cv_park at the top of its loop, holding no
 *    claim and no scratch growth; worker 0 never parks. Dispatch opens a
 *    batch only while the slots in use (filling, ready, held) are under
 *    max(the tuner's target, held + 1), and a slot freed past the target
 *    is retired (its pages and bytes go back) unless the region is pinned.
 *    Neither changes what a batch holds: only how many run at once.
 *
 * GPU decode (gpustage.c): a position whose sample the GPU took stays
 * pending until the GPU thread has written it (or handed it back: then a
 * worker claims it before any other work and decodes it here); the GPU
 * thread counts in active while its call runs, so a reset waits for it.
 *
 * Lock order: mu, then budget.mu (inside sl__budget_*), then the error
 * records' (errlog.c). A worker never waits for budget while holding mu.
 *
 * This file is the slot machinery (dispatch, commit, delivery, reset) and
 * writes every field of sl__engine (engine.h says which lock guards
 * what); loader.c creates and sizes the loader; worker.c loads one
 * sample; the modules below are reached through the pointers in
 * sl__engine, with mu held where their headers say so.
 */
#include "pipeline/engine.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/util.h"
#include "pipeline/refill.h"

/* ---- order ----------------------------------------------------------------- */

/* The sample order of epoch (made on first use). */
static uint32_t *order_for(sl__engine *e, uint64_t epoch) {
    int i = (int)(epoch & 1);
    sl__lcache_epoch(e->cache, epoch); /* the cache's next uses: this epoch and the next */
    if (!e->seq_valid[i] || e->seq_epoch[i] != epoch) {
        sl__sampler_fill(e->sampler, epoch, e->seq[i], e->seq_tmp);
        e->seq_epoch[i] = epoch;
        e->seq_valid[i] = 1;
    }
    return e->seq[i];
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
 * holding h batches can still get the next one.
 *
 * The pages go back outside mu (a whole slot's MADV_DONTNEED is not for
 * the consumer's path to hold the lock through). Under mu a FREE slot to
 * retire is marked RETIRING: it leaves the live slots at once, and
 * dispatch opens FREE slots only. The thread that marked it takes it
 * before it leaves mu (unlock) or waits on a condition variable
 * (wait_on): RELEASING, one taker under mu, so its pages and bytes go
 * back exactly once, unlocked; then, under mu again, it is RETIRED, or
 * FREE once more if the pages would not go (locked: the slots are fixed).
 * So no slot stays marked while mu is free, and a thread waiting for
 * budget never waits for bytes a marked slot holds.
 */

static uint32_t live_floor(const sl__engine *e) { return SL_MAX(e->min_live, e->held + 1); }

/* The most slots in use: the tuner's target where it moves the slots. */
static uint32_t slot_cap(const sl__engine *e) { return e->tune_slots ? e->tuner.slots : e->nslots; }

/* Pinned (or locked) pages cannot be given back: every live slot becomes
 * fixed for life, and none is retired again. */
static void fix_slots(sl__engine *e) {
    if (e->pinned) return;
    e->pinned = 1;
    e->retire_debt = 0;
    sl__budget_fix_stuck(e->conf->budget, (uint64_t)(e->live - e->min_live) * e->pitch);
}

/* FREE slot s is to give its pages and bytes back: marked, for
 * release_marked. mu held. */
static void slot_retire(sl__engine *e, sl_batch *s) {
    s->state = SLOT_RETIRING;
    e->live--;
    e->retire_marked++;
}

/* The release of slot s is over (mu held). ok: it is RETIRED. Else the
 * system would not drop its pages (mlock'd: MADV_DONTNEED refuses locked
 * pages): it is FREE again, its bytes still counted, and the slots are
 * fixed (counting s too when they were fixed while it was away). */
static void retire_settle(sl__engine *e, sl_batch *s, int ok) {
    e->retire_busy--;
    if (ok) {
        s->state = SLOT_RETIRED;
        e->retirements++;
    } else {
        s->state = SLOT_FREE;
        e->live++;
        if (e->pinned) sl__budget_fix_stuck(e->conf->budget, e->pitch);
        else fix_slots(e);
        pthread_cond_broadcast(&e->cv_work);
    }
    pthread_cond_broadcast(&e->cv_quiet); /* pin and give_back wait for releases in flight */
}

/* Release every marked slot, one at a time: taken under mu, its pages
 * dropped and then its bytes released with mu unlocked, settled under mu.
 * mu held on entry and on return. */
static void release_marked(sl__engine *e) {
    while (e->retire_marked) {
        sl_batch *s = e->slots;
        while (s->state != SLOT_RETIRING) s++; /* there is one: retire_marked counts them */
        s->state = SLOT_RELEASING;
        e->retire_marked--;
        e->retire_busy++;
        pthread_mutex_unlock(&e->mu);
        int ok = madvise(s->base, e->pitch, MADV_DONTNEED) == 0;
        if (ok) sl__budget_release(e->conf->budget, e->pitch, SL_MEM_BATCHES); /* after its pages */
        pthread_mutex_lock(&e->mu);
        retire_settle(e, s, ok);
    }
}

/* Leave mu: the slots marked on the way are released first. */
static void unlock(sl__engine *e) {
    release_marked(e);
    pthread_mutex_unlock(&e->mu);
}

/* Wait on cv, mu held; or, with slots marked, release them instead (mu
 * was dropped: the caller looks again, as after any wakeup). */
static void wait_on(sl__engine *e, pthread_cond_t *cv) {
    if (e->retire_marked) release_marked(e);
    else pthread_cond_wait(cv, &e->mu);
}

/* wait_on until the monotonic deadline dl: ETIMEDOUT, or 0. */
static int wait_until(sl__engine *e, pthread_cond_t *cv, const struct timespec *dl) {
    if (!e->retire_marked) return pthread_cond_timedwait(cv, &e->mu, dl);
    release_marked(e);
    return 0;
}

/* Retire FREE slots, highest id first (dispatch takes the lowest), until
 * want bytes are marked or the floor is reached. Returns the bytes marked. */
static uint64_t retire_free(sl__engine *e, uint64_t want) {
    uint64_t got = 0;
    for (uint32_t i = e->nslots; i-- > 0 && got < want && !e->pinned && e->live > live_floor(e);) {
        if (e->slots[i].state == SLOT_FREE) {
            slot_retire(e, &e->slots[i]);
            got += e->pitch;
        }
    }
    return got;
}

/* Slot s is done with (released, dropped, discarded, reset): retired while
 * the debt of a lowered limit lasts and the budget is still over it (the
 * workers' trimmed scratch or another loader may have paid it; while
 * slots' bytes are still on their way back the budget cannot tell, and
 * the debt stands), else FREE. */
static void slot_free(sl__engine *e, sl_batch *s) {
    s->discard = 0;
    if (e->retire_debt && !e->retire_marked && !e->retire_busy && !sl__budget_over(e->conf->budget))
        e->retire_debt = 0;
    s->state = SLOT_FREE;
    if (e->retire_debt && !e->pinned && e->live > live_floor(e)) {
        slot_retire(e, s);
        e->retire_debt = e->retire_debt > e->pitch ? e->retire_debt - e->pitch : 0;
        return;
    }
    if (e->tune_slots && !e->pinned && e->live > SL_MAX(slot_cap(e), live_floor(e))) { /* the tuner took one */
        slot_retire(e, s);
        return;
    }
    pthread_cond_broadcast(&e->cv_work);
}

/* Bring up to `most` retired slots back, one at a time, each with a
 * try-request (never a wait: prefetch is the first thing shed and the last
 * grown), while no debt is owed, the tuner wants them, and the elastic
 * slots leave one sample's growth (sample_cap) under the limit beyond the
 * fixed part, as create sized them. Returns how many came back. */
static uint32_t reactivate(sl__engine *e, uint32_t most) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->nslots && n < most && !e->retire_debt && e->live < slot_cap(e); i++) {
        sl_batch *s = &e->slots[i];
        if (s->state != SLOT_RETIRED) continue;
        uint64_t elastic = (uint64_t)(e->live + 1 - e->min_live) * e->pitch;
        if (elastic + e->conf->sample_cap > sl__budget_headroom(e->conf->budget)) break;
        if (sl__budget_try(e->conf->budget, e->pitch, SL_MEM_BATCHES)) break;
        if (e->pinned && sl__budget_fix(e->conf->budget, e->pitch)) { /* locked after it retired */
            sl__budget_release(e->conf->budget, e->pitch, SL_MEM_BATCHES);
            break;
        }
        s->state = SLOT_FREE;
        e->live++;
        e->reactivations++;
        n++;
    }
    if (n) pthread_cond_broadcast(&e->cv_work);
    return n;
}

/* The budget's consumer (mem.h): called on the thread that moved the
 * limit, no budget lock held. Returns once the slots it retired gave
 * their bytes back (and those other threads were releasing), so the
 * budget asks the next consumer only for what is still over. */
static uint64_t slots_give_back(void *ctx, uint64_t want) {
    sl__engine *e = ctx;
    pthread_mutex_lock(&e->mu);
    uint64_t before = e->retirements;
    uint64_t marked = retire_free(e, want);
    e->retire_debt = want > marked && !e->pinned ? want - marked : 0;
    while (e->retire_marked || e->retire_busy) wait_on(e, &e->cv_quiet);
    uint64_t got = (e->retirements - before) * e->pitch;
    unlock(e);
    return got;
}

static void slots_room(void *ctx) {
    sl__engine *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->retire_debt = 0;
    reactivate(e, UINT32_MAX);
    unlock(e);
}

void sl__engine_consumer_on(sl__engine *e) {
    e->consumer = (sl__consumer){.give_back = slots_give_back, .room = slots_room, .ctx = e};
    sl__budget_add_consumer(e->conf->budget, &e->consumer);
    e->consumer_on = 1;
}

void sl__engine_consumer_off(sl__engine *e) {
    if (e->consumer_on) sl__budget_remove_consumer(e->conf->budget, &e->consumer);
}

void sl__engine_consumer_forget(sl__engine *e) {
    if (e->consumer_on) sl__budget_forget_consumer(e->conf->budget, &e->consumer);
}

int sl__engine_pin(sl__engine *e, void **base, size_t *len) {
    pthread_mutex_lock(&e->mu);
    while (e->retire_marked || e->retire_busy) wait_on(e, &e->cv_quiet); /* every retirement settled */
    int rc = 0;
    uint32_t retired = e->nslots - e->live;
    if (!e->pinned && retired) { /* all of them back, or none */
        if (sl__budget_try(e->conf->budget, (uint64_t)retired * e->pitch, SL_MEM_BATCHES)) {
            rc = SL_EBUDGET;
        } else {
            for (uint32_t i = 0; i < e->nslots; i++)
                if (e->slots[i].state == SLOT_RETIRED) e->slots[i].state = SLOT_FREE;
            e->live = e->nslots;
            e->reactivations += retired;
        }
    }
    if (!rc && !e->pinned) {
        fix_slots(e);
        pthread_cond_broadcast(&e->cv_work);
    }
    unlock(e);
    if (rc) return rc;
    *base = e->region;
    *len = e->region_len;
    return 0;
}

/* ---- life ------------------------------------------------------------------- */

int sl__engine_sync_init(sl__engine *e) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return SL_ESYS;
    int n = 0; /* objects made, in this order */
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_mutex_init(&e->mu, NULL) == 0 && ++n &&
        pthread_cond_init(&e->cv_work, NULL) == 0 && ++n && pthread_cond_init(&e->cv_ready, &ca) == 0 && ++n &&
        pthread_cond_init(&e->cv_quiet, NULL) == 0 && ++n && pthread_cond_init(&e->cv_gpu, &ca) == 0 && ++n &&
        pthread_cond_init(&e->cv_park, NULL) == 0)
        e->sync_init = 1;
    pthread_condattr_destroy(&ca);
    if (e->sync_init) return 0;
    if (n > 4) pthread_cond_destroy(&e->cv_gpu);
    if (n > 3) pthread_cond_destroy(&e->cv_quiet);
    if (n > 2) pthread_cond_destroy(&e->cv_ready);
    if (n > 1) pthread_cond_destroy(&e->cv_work);
    if (n > 0) pthread_mutex_destroy(&e->mu);
    return SL_ESYS;
}

void sl__engine_sync_fini(sl__engine *e) {
    if (!e->sync_init) return;
    pthread_cond_destroy(&e->cv_work);
    pthread_cond_destroy(&e->cv_ready);
    pthread_cond_destroy(&e->cv_quiet);
    pthread_cond_destroy(&e->cv_gpu);
    pthread_cond_destroy(&e->cv_park);
    pthread_mutex_destroy(&e->mu);
    e->sync_init = 0;
}

void sl__engine_init(sl__engine *e, sl_loader *ld, const sl__conf *conf, sl__sampler *sampler, sl__workers *workers,
                     sl__gstage *gs, sl__lcache *cache, sl__rahead *ra, sl__errlog *log, sl__guard *guard) {
    e->ld = ld;
    e->conf = conf;
    e->sampler = sampler;
    e->workers = workers;
    e->gs = gs;
    e->cache = cache;
    e->ra = ra;
    e->log = log;
    e->guard = guard;
}

uint64_t sl__engine_orders(sl__engine *e) {
    const sl__sampler *sp = e->sampler;
    size_t seqb = (size_t)sp->per_rank * sizeof(uint32_t), tmpb = (size_t)sp->n * sizeof(uint32_t);
    e->seq[0] = sl__alloc(e->conf->budget, seqb, SL_MEM_INDEX);
    e->seq[1] = sl__alloc(e->conf->budget, seqb, SL_MEM_INDEX);
    int tmp = e->conf->cfg.world_size > 1 || sp->per_rank < sp->n; /* seq cannot hold the permutation: ranks, an order range */
    if (tmp) e->seq_tmp = sl__alloc(e->conf->budget, tmpb, SL_MEM_INDEX);
    uint64_t want = 0;
    if (tmp && !e->seq_tmp) want = tmpb;
    if (!e->seq[0] || !e->seq[1]) want = want ? SL_MIN(want, seqb) : seqb;
    return want;
}

int sl__engine_slots(sl__engine *e, uint32_t nslots, uint64_t pitch) {
    const sl__conf *c = e->conf;
    uint64_t len;
    e->nslots = nslots;
    e->pitch = (size_t)pitch;
    int rc = sl__mul(pitch, nslots, &len) || len > SIZE_MAX / 2 ? SL_EBUDGET
                                                                 : sl__budget_try(c->budget, len, SL_MEM_BATCHES);
    if (rc == 0 && !(e->region = sl__map_prepaid((size_t)len))) {
        sl__budget_release(c->budget, len, SL_MEM_BATCHES);
        rc = SL_ENOMEM;
    }
    if (rc == 0) { /* from here sl__engine_free gives back live * pitch */
        e->region_len = (size_t)len;
        e->live = nslots;
        e->min_live = SL_MIN(c->cfg.min_slots, nslots);
        if (!(e->slots = sl__calloc(c->budget, nslots, sizeof(sl_batch), SL_MEM_OTHER)))
            rc = sl__conf_alloc_fail(c, (uint64_t)nslots * sizeof(sl_batch));
    }
    if (rc) return rc;
    for (uint32_t i = 0; i < nslots; i++)
        sl__slot_carve(&e->slots[i], e->ld, i, &c->layout, e->region + (uint64_t)i * pitch);
    return 0;
}

uint64_t sl__engine_elastic_bytes(const sl__engine *e) { return (uint64_t)(e->nslots - e->min_live) * e->pitch; }

void sl__engine_free(sl__engine *e) {
    sl__budget *b = e->conf->budget;
    sl__free(b, e->slots);
    e->slots = NULL;
    if (e->region) { /* retired slots gave their bytes back already */
        sl__unmap_prepaid(e->region, e->region_len);
        sl__budget_release(b, (uint64_t)e->live * e->pitch, SL_MEM_BATCHES);
        e->region = NULL;
    }
    sl__free(b, e->seq[0]);
    sl__free(b, e->seq[1]);
    sl__free(b, e->seq_tmp);
    sl__free(b, e->span_gone[0]);
    sl__free(b, e->span_gone[1]);
    e->seq[0] = e->seq[1] = e->seq_tmp = e->span_gone[0] = e->span_gone[1] = NULL;
}

void sl__engine_open(sl__engine *e) {
    uint64_t per = e->sampler->per_rank;
    order_for(e, 0);
    e->d_epoch = 0;
    e->d_batch = 0;
    e->tail = per;
    e->d_open = 1;
    e->cur_tail = per;
}

void sl__engine_tune(sl__engine *e, int on, uint32_t ceiling, uint32_t cores) {
    e->tune_slots = on && !e->conf->cfg.prefetch;
    /* the fewest slots: those the consumer may hold (min_slots) and one batch ahead */
    uint32_t floor = e->tune_slots ? SL_MIN(e->nslots, e->min_live + 1) : e->nslots;
    sl__tuner_init(&e->tuner, on, ceiling, cores, e->conf->B, e->nslots, floor);
    sl__tuner_node(&e->tuner, e->conf->node_cpus); /* with local ranks: the node's CPUs by demand */
}

void sl__engine_wait_started(sl__engine *e, uint32_t n) {
    pthread_mutex_lock(&e->mu);
    while (e->started < n) wait_on(e, &e->cv_ready);
    unlock(e);
}

void sl__engine_stop(sl__engine *e) {
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    atomic_store(&e->cancel, 1);
    pthread_cond_broadcast(&e->cv_work);
    pthread_cond_broadcast(&e->cv_ready);
    pthread_cond_broadcast(&e->cv_park);
    unlock(e);
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

static sl_batch *slot_by_seqno(sl__engine *e, uint64_t seqno, int state) {
    for (uint32_t i = 0; i < e->nslots; i++) {
        sl_batch *s = &e->slots[i];
        if (s->state == state && s->seqno == seqno && !s->discard && s->gen == e->gen) return s;
    }
    return NULL;
}

/* Can batch k of the dispatch epoch still hold samples given the tail?
 * (With ranks, batches past the tail are padded: refill.c.) */
static int batch_possible(const sl__engine *e, uint64_t k) {
    uint64_t B = e->conf->B;
    if (k >= sl__sampler_batches(e->sampler, e->d_epoch, e->conf->B)) return 0;
    if (e->conf->cfg.world_size > 1) return 1;
    if (e->conf->cfg.drop_last) return (k + 1) * B <= e->tail;
    return k * B < e->tail;
}

/* Open the next batch of the dispatch epoch in a free slot. mu held. */
static sl_batch *open_batch(sl__engine *e) {
    if (!e->d_open || !batch_possible(e, e->d_batch)) return NULL;
    sl_batch *s = NULL;
    uint32_t in_use = 0; /* filling, ready or held */
    for (uint32_t i = 0; i < e->nslots; i++) {
        int st = e->slots[i].state;
        if (st == SLOT_FREE && !s) s = &e->slots[i];
        in_use += st == SLOT_FILLING || st == SLOT_READY || st == SLOT_HELD;
    }
    /* the tuner's target (a pinned region keeps its slots live), never below one batch past the held ones */
    if (!s || in_use >= SL_MAX(slot_cap(e), e->held + 1)) return NULL;
    uint64_t k = e->d_batch++;
    uint64_t start = k * e->conf->B, per = sl__sampler_span(e->sampler, e->d_epoch)->per_rank;
    s->state = SLOT_FILLING;
    s->gen = e->gen;
    s->epoch = e->d_epoch;
    s->batch = k;
    s->seqno = e->next_seqno++;
    s->nominal = (uint32_t)SL_MIN((uint64_t)e->conf->B, per - start);
    s->claimed = 0;
    s->pending = s->nominal;
    s->last_gpu = 0;
    s->n = 0;
    s->discard = s->failed = s->marker = s->final = s->tripped = 0;
    s->checksum = 0;
    sl__refill_clear(s);
    sl__slot_clear(s, e->conf->B);
    return s;
}

/* A refill of the round of the batch being committed (refill.c), which
 * every later commit waits for: first in line. Returns 1 with c filled. */
static int claim_refill(sl__engine *e, claim *c) {
    for (uint32_t i = 0; i < e->nslots; i++) {
        sl_batch *s = &e->slots[i];
        if (s->state != SLOT_FILLING || s->discard || s->gen != e->gen || !sl__refill_claim(s, &c->pos, &c->order_pos))
            continue;
        c->slot = s;
        c->sample = e->seq[s->epoch & 1][c->order_pos];
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
static int claim_next(sl__engine *e, claim *c) {
    for (;;) {
        if (e->paused || e->stop || e->tripped) return 0;
        if (sl__gstage_take_back(e->gs, e->gen, &c->slot, &c->pos, &c->sample, &c->epoch)) {
            c->gen = c->slot->gen;
            c->cpu_only = 1;
            /* its time for the cache's clock: the nominal position (a refill's is
             * later in the order; the clock only ranks evictions, never bytes) */
            c->order_pos = c->slot->batch * e->conf->B + c->pos;
            return 1;
        }
        if (claim_refill(e, c)) return 1;
        sl_batch *best = NULL;
        for (uint32_t i = 0; i < e->nslots; i++) {
            sl_batch *s = &e->slots[i];
            if (s->state == SLOT_FILLING && !s->discard && s->gen == e->gen && s->claimed < s->nominal &&
                (!best || s->seqno < best->seqno))
                best = s;
        }
        if (!best) best = open_batch(e);
        if (!best) return 0;
        uint32_t j = best->claimed++;
        uint64_t p = best->batch * e->conf->B + j;
        if (p >= e->tail) { /* used as a refill already */
            best->pending--;
            continue; /* its commit is found by the next completion or here below */
        }
        c->slot = best;
        c->pos = j;
        c->order_pos = p;
        c->sample = e->seq[best->epoch & 1][p]; /* valid: the dispatch epoch's order */
        c->epoch = best->epoch;
        c->gen = best->gen;
        c->cpu_only = 0;
        return 1;
    }
}

/* ---- commit ------------------------------------------------------------------ */

/* Settle a position whose fill finished (mu held), on the GPU or the CPU:
 * pending drops; a stale or discarded slot is freed once nothing is
 * pending. */
static void position_done(sl__engine *e, sl_batch *s, int gpu) {
    s->last_gpu = gpu;
    s->pending--;
    if ((s->gen != e->gen || s->discard) && s->pending == 0 && s->state == SLOT_FILLING) slot_free(e, s);
}

/* First commit pass: record the failures of the nominal positions that
 * are still the batch's own (in position order). */
static void commit_nominal(sl__engine *e, sl_batch *s, uint64_t T) {
    uint64_t B = e->conf->B, k = s->batch;
    uint32_t errors = 0;
    sl__slot_commit(s, ++e->commits);
    for (uint32_t j = 0; j < s->nominal; j++) {
        if (k * B + j >= T) {
            s->ok[j] = 0; /* used as a refill by an earlier batch, which recorded any failure */
        } else if (s->err[j] && -(int)s->err[j] != SL_ESTATE) { /* ESTATE: shutting down */
            sl__slot_fail(s, e->log, sl__slot_index(s, &e->conf->layout, j), -(int)s->err[j],
                          s->reasons + (size_t)j * SL_REASON_LEN);
        }
        errors += s->err[j] != 0;
    }
    if (e->conf->cfg.on_error == SL_ON_ERROR_RAISE) s->failed = errors > 0;
}

/* Positions of s decoded so far. */
static uint32_t decoded(const sl_batch *s, uint32_t B) {
    uint32_t n = 0;
    for (uint32_t j = 0; j < SL_MAX(s->nominal, B); j++) n += s->ok[j];
    return n;
}

/* Position j of slot ctx was decoded on the CPU but its copy to the
 * device failed: a failed sample, recorded by the commit as any other. */
static void upload_lost(void *ctx, uint32_t j) {
    sl_batch *s = ctx;
    s->ok[j] = 0;
    s->err[j] = (uint8_t)-SL_EIO;
    sl__msg(s->reasons + (size_t)j * SL_REASON_LEN, SL_REASON_LEN, "copying the decoded image to the GPU failed");
}

/* A commit pass: settle holes (a refill round, refill.c, if any can be
 * filled: returns 1 and the batch goes on filling), else decide n and
 * whether the epoch ends here (returns 0). Runs outside mu by the one
 * committer; tail is written only by it (under mu, for the claimers). */
static int commit_slot(sl__engine *e, sl_batch *s) {
    const sl__conf *c = e->conf;
    uint64_t B = c->B, k = s->batch, T = e->tail, top = T, P = e->pad, bottom = P;
    /* the CPU-decoded images to the device first: a failed copy fails its samples, as a decode would */
    sl__gstage_flush(e->gs, s->id, s->base, s->ok, SL_MAX(s->nominal, (uint32_t)B), upload_lost, s);
    if (s->rf_passes == 0) commit_nominal(e, s, T);
    uint32_t m = c->cfg.on_error == SL_ON_ERROR_SKIP ? sl__refill_pass(s, c, e->gs, e->log, &T, &P) : 0;
    if (sl__guard_pass(e->guard, s->epoch, s->nerr, decoded(s, (uint32_t)B), m == 0)) {
        s->tripped = 1; /* no more rounds: the loader stops here */
        m = 0, T = top, P = bottom;
    }
    if (m) { /* publish the round: its positions leave the tail (or the pad cursor), its refills become claims */
        pthread_mutex_lock(&e->mu);
        sl__refill_publish(s, top, bottom, m);
        s->pending += m;
        e->tail = T;
        e->pad = P;
        unlock(e);
        return 1;
    }
    uint32_t n = 0;
    s->good = decoded(s, (uint32_t)B);
    if (!s->failed) {
        /* compact: keep position order */
        uint32_t limit = SL_MAX(s->nominal, (uint32_t)B);
        for (uint32_t j = 0; j < limit; j++)
            if (s->ok[j]) {
                if (j != n) sl__slot_move(s, &c->layout, e->gs, j, n);
                n++;
            }
    }
    s->n = n;
    uint64_t nb = sl__sampler_batches(e->sampler, s->epoch, (uint32_t)B);
    if (c->cfg.world_size > 1) s->final = k + 1 >= nb; /* every rank takes nb batches (padding) */
    else s->final = c->cfg.drop_last ? T < (k + 2) * B || k + 1 >= nb : T <= (k + 1) * B || k + 1 >= nb;
    if (!s->failed && (n == 0 || (c->cfg.drop_last && n < B))) s->marker = 1;
    s->tail_after = T;
    s->pad_after = P;
    if ((c->cfg.flags & SL_FLAG_CHECKSUM) && !s->marker && !s->failed) {
        sl__gstage_checksum(e->gs, s->id, s->base, s->hash, n); /* the device field's bytes too (GPU decode) */
        s->checksum = sl__hash64(s->hash, (size_t)n * 8, s->epoch * 1000003u + s->batch);
    }
    pthread_mutex_lock(&e->mu);
    e->tail = T;
    sl__refill_close(s);
    unlock(e);
    return 0;
}

/* Commit every resolved batch in order. mu held; may drop it while
 * committing. Returns how many commit passes it made: a pass can open
 * work (a refill round, the next epoch), so a caller about to sleep must
 * look for work again when this is not 0. */
static int try_commit(sl__engine *e) {
    int done = 0;
    while (!e->committing && !e->stop && !e->tripped) {
        sl_batch *s = slot_by_seqno(e, e->c_seqno, SLOT_FILLING);
        if (!s || s->pending || s->claimed < s->nominal || sl__refill_open(s)) return done;
        done++;
        uint64_t gen = e->gen;
        e->committing = 1;
        unlock(e);
        int round = commit_slot(e, s);
        pthread_mutex_lock(&e->mu);
        e->committing = 0;
        pthread_cond_broadcast(&e->cv_quiet);
        if (gen != e->gen) { /* a reset came in meanwhile: stale */
            if (s->state == SLOT_FILLING) slot_free(e, s);
            continue;
        }
        if (round) { /* refills to claim: the batch is committed once they are done */
            pthread_cond_broadcast(&e->cv_work);
            continue;
        }
        s->state = SLOT_READY;
        e->ready++;
        e->c_seqno++;
        e->tripped = s->tripped; /* the guard stopped the loader at s: no commit or claim after it */
        pthread_cond_broadcast(&e->cv_ready);
        if (s->final && !s->tripped) {
            /* Epoch over: drop batches opened past it, start the next. */
            for (uint32_t i = 0; i < e->nslots; i++) {
                sl_batch *o = &e->slots[i];
                if (o->state == SLOT_FILLING && o->gen == e->gen && o->epoch == s->epoch) {
                    o->discard = 1;
                    o->pending -= o->nominal - o->claimed;
                    o->claimed = o->nominal;
                    if (o->pending == 0) slot_free(e, o);
                }
            }
            e->next_seqno = s->seqno + 1;
            e->d_epoch = s->epoch + 1;
            e->d_batch = 0;
            e->d_open = 0;
            e->committing = 1; /* hold off other commits and resets while the order is made */
            unlock(e);
            order_for(e, s->epoch + 1);
            pthread_mutex_lock(&e->mu);
            e->committing = 0;
            e->tail = sl__sampler_span(e->sampler, s->epoch + 1)->per_rank;
            e->pad = 0;
            e->d_open = 1;
            pthread_cond_broadcast(&e->cv_work);
            pthread_cond_broadcast(&e->cv_quiet);
        }
    }
    return done;
}

/* ---- workers -------------------------------------------------------------- */

/* Load sample into position j of s. A failure is kept in the slot for
 * the commit to record if the position is still part of the batch then.
 * Returns 1 when the GPU took the sample (it settles the position). */
static int fill_position(sl__worker *w, const claim *c) {
    int rc = sl__worker_fill(w, c->slot, c->pos, c->sample, c->epoch, c->order_pos, c->cpu_only);
    return rc == 0 && sl__gstage_taken(&w->hand);
}

void sl__engine_run(void *ctx, sl__worker *w) {
    sl__engine *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->started++;
    pthread_cond_broadcast(&e->cv_ready);
    while (!e->stop) {
        if (w->id >= sl__tuner_active(&e->tuner)) { /* parked by the tuner: no CPU until it wakes us */
            sl__worker_idle(w);
            wait_on(e, &e->cv_park);
            continue;
        }
        claim c;
        if (!claim_next(e, &c)) {
            /* voids may have resolved a batch; its commit may have opened
             * the next epoch (the broadcast went to no one: look again) */
            if (try_commit(e) > 0) continue;
            if (e->stop) break;
            sl__worker_idle(w); /* never sleep on growth another worker may wait for */
            uint64_t t0 = sl__now_ns();
            wait_on(e, &e->cv_work);
            sl__worker_woke(w, t0);
            continue;
        }
        e->active++;
        sl__rahead_todo ra; /* remote files of the samples after this one (readahead.h) */
        int ahead = c.epoch == e->d_epoch && e->d_open &&
                    sl__rahead_plan(e->ra, e->gen, c.epoch, c.order_pos, e->tail, e->seq[c.epoch & 1], &ra);
        unlock(e);
        if (ahead) sl__rahead_issue(e->ra, &ra);
        int to_gpu = fill_position(w, &c); /* its time counts as the worker's busy time */
        pthread_mutex_lock(&e->mu);
        e->active--;
        sl_batch *s = c.slot;
        int stale = s->gen != e->gen || s->discard;
        if (to_gpu) { /* pending drops when the GPU has written it */
            sl__gstage_push(e->gs, &w->hand, s->gen, s->seqno);
            pthread_cond_signal(&e->cv_gpu);
        } else {
            position_done(e, s, 0);
        }
        if (stale) {
            pthread_cond_broadcast(&e->cv_quiet);
            continue;
        }
        try_commit(e);
        if (e->active == 0) pthread_cond_broadcast(&e->cv_quiet);
    }
    unlock(e);
}

/* ---- the GPU thread ------------------------------------------------------------- */

static void gpu_done(void *ctx, sl_batch *s) { position_done(ctx, s, 1); }

/* A GPU thread (gpustage.c starts one per engine, arg its call): gather a
 * call from the queue, waiting up to a millisecond for a quarter of a full
 * one; run it outside mu, counted in active so a reset waits for it;
 * settle its positions. */
void *sl__engine_gpu_main(void *arg) {
    sl__gcall *c = arg;
    sl__engine *e = c->owner;
    sl__gstage *g = e->gs;
    char why[200];
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        uint64_t ns;
        while ((ns = sl__gstage_gather_ns(g)) && !e->stop) {
            struct timespec dl;
            clock_gettime(CLOCK_MONOTONIC, &dl);
            dl.tv_nsec += (long)ns;
            if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
            wait_until(e, &e->cv_gpu, &dl);
        }
        /* the stop's broadcast may have come during that wait: waiting on
         * cv_gpu below without looking would wait for ever */
        if (e->stop) break;
        uint32_t n = sl__gstage_take(g, c, e->gen);
        if (!n) {
            wait_on(e, &e->cv_gpu);
            continue;
        }
        e->active++;
        unlock(e);
        why[0] = 0;
        int rc = sl__gstage_run(g, c, n, why, sizeof why);
        pthread_mutex_lock(&e->mu);
        sl__gstage_settle(g, c, n, rc, why, e->gen, gpu_done, e);
        e->active--;
        pthread_cond_broadcast(&e->cv_work); /* handbacks to claim, batches to commit */
        pthread_cond_broadcast(&e->cv_quiet);
    }
    unlock(e);
    return NULL;
}

void sl__engine_stop_gpu(sl__engine *e) {
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv_gpu);
    unlock(e);
    sl__gstage_join(e->gs);
}

/* ---- reset ------------------------------------------------------------------ */

/* Restart delivery at (epoch, batch) with tail and pad cursor. span:
 * epoch's own span (an elastic resume: sl__sampler_resume), NULL: the
 * order range for every epoch. mu held. */
static void reset_pipeline(sl__engine *e, uint64_t epoch, uint64_t batch, uint64_t tail, uint64_t pad,
                           const sl__span *span) {
    e->paused = 1;
    e->gen++;
    while (e->active > 0 || e->committing) wait_on(e, &e->cv_quiet);
    if (span || e->sampler->resumed) { /* the orders made for the old spans are stale */
        sl__sampler_resume(e->sampler, epoch, span);
        e->seq_valid[0] = e->seq_valid[1] = 0;
    }
    sl__gstage_reset(e->gs); /* samples queued for the GPU or handed back belong to the old generation */
    for (uint32_t i = 0; i < e->nslots; i++) {
        sl_batch *s = &e->slots[i];
        if (s->state == SLOT_FILLING || s->state == SLOT_READY) slot_free(e, s);
        s->discard = 0;
    }
    e->ready = 0;
    /* records of batches committed but never delivered go with them */
    sl__errlog_drop_undelivered(e->log);
    order_for(e, epoch);
    sl__lcache_jump(e->cache, epoch, batch * e->conf->B);
    e->d_epoch = epoch;
    e->d_batch = batch;
    e->tail = tail;
    e->pad = pad;
    e->d_open = 1;
    e->next_seqno = e->c_seqno = e->r_seqno = 0;
    e->tripped = 0;
    sl__guard_reset(e->guard, epoch);
    e->cur_epoch = epoch;
    e->cur_batch = batch;
    e->cur_tail = tail;
    e->cur_pad = pad;
    e->pending_end = 0;
    e->paused = 0;
    e->asking = 0;
    sl__tuner_pass_end(&e->tuner, sl__now_ns()); /* the next call begins another pass */
    pthread_cond_broadcast(&e->cv_work);
}

/* ---- public: iteration ------------------------------------------------------ */

/* Hand batch s (the next in order, READY) to the consumer. mu held.
 * Returns 0 with *out, SL_EEND / SL_ESAMPLE, SL_EERRORS or SL_ENOENT (the
 * guard tripped on it, or its failures come from a removed dataset
 * folder: not delivered, the loader poisoned), or 1: nothing to hand (an empty
 * marker inside the epoch), look again. */
static int deliver(sl__engine *e, sl_batch *s, sl_batch **out) {
    e->r_seqno++;
    e->ready--;
    /* its failures become visible with it */
    sl__guard_count(e->guard, s->nerr, s->good, &s->last_err);
    sl__errlog_delivered(e->log, s->cno);
    /* failures because the dataset folder is gone: say that, not "too many failures" */
    int rc = s->nerr && sl__source_gone(e->conf->src)
                 ? sl__guard_vanished(e->guard, e->conf->source_path, e->batches_out)
                 : sl__guard_check(e->guard, e->log, e->conf->src, s->epoch, s->final, s->tripped);
    if (rc) {
        pthread_cond_broadcast(&e->cv_ready); /* poisoned: every waiter returns */
        slot_free(e, s);
        return rc;
    }
    if (s->final) {
        e->cur_epoch = s->epoch + 1;
        e->cur_batch = 0;
        e->cur_tail = sl__sampler_span(e->sampler, s->epoch + 1)->per_rank;
        e->cur_pad = 0;
        sl__guard_epoch_end(e->guard);
    } else {
        e->cur_epoch = s->epoch;
        e->cur_batch = s->batch + 1;
        e->cur_tail = s->tail_after;
        e->cur_pad = s->pad_after;
    }
    if (s->marker || s->failed) {
        int failed = s->failed, final = s->final;
        slot_free(e, s);
        if (failed) {
            if (final) e->pending_end = 1;
            return SL_ESAMPLE;
        }
        return final ? SL_EEND : 1;
    }
    s->state = SLOT_HELD;
    e->held++;
    if (s->final) e->pending_end = 1;
    e->samples_out += s->n;
    e->batches_out++;
    *out = s;
    return 0;
}

/* ---- the tuner's hands ------------------------------------------------------- */

/* The consumer asks for a batch (its first call since the last one): what
 * the tuner will weigh its wait against. cpu_ns: its thread's CPU time, 0
 * when unknown. mu held. */
static void tune_ask(sl__engine *e, uint64_t now, uint64_t cpu_ns) {
    if (e->asking) return; /* a call after a timeout goes on with the same wait */
    uint64_t gpu, cpu;
    sl__gstage_counts(e->gs, &gpu, &cpu);
    e->asking = 1;
    e->ask_ns = now;
    e->ask_cpu_ns = cpu_ns;
    e->ask_ready = e->ready;
    e->ask_backlog = sl__gstage_backlog(e->gs);
    e->ask_gpu_busy = sl__gstage_busy(e->gs);
    sl__tuner_pass_begin(&e->tuner, now, gpu, cpu);
}

/* Apply a decision: a woken worker takes work at once; one over the count
 * parks when it next looks for work; a slot fewer is retired as soon as one
 * is free (its pages and bytes go back), one more comes back by a
 * try-request. mu held. */
static void tune_apply(sl__engine *e, const sl__tune_out *d, uint32_t from) {
    if (d->what == SL_TUNE_WORKERS) {
        if (d->to > from) pthread_cond_broadcast(&e->cv_park);
        else pthread_cond_broadcast(&e->cv_work); /* an idle one over the count goes to park */
        return;
    }
    if (d->to < e->live && !e->pinned) {
        uint32_t keep = SL_MAX(d->to, live_floor(e));
        if (e->live > keep) retire_free(e, (uint64_t)(e->live - keep) * e->pitch);
    } else if (d->to > e->live) {
        reactivate(e, d->to - e->live);
    }
    pthread_cond_broadcast(&e->cv_work);
}

/* Batch s was delivered at now: the tuner's observation. mu held. */
static void tune_delivered(sl__engine *e, const sl_batch *s, uint64_t now, int *publish) {
    e->asking = 0;
    sl__tune_obs ob = {.asked_ns = e->ask_ns, .asked_cpu_ns = e->ask_cpu_ns, .now_ns = now, .ready = e->ask_ready,
                       .gpu_backlog = e->ask_backlog, .gpu_held = s->last_gpu && e->ask_gpu_busy,
                       .cpu_last = sl__gstage_on(e->gs) && !s->last_gpu};
    if (e->tuner.on) ob.busy_ns = sl__workers_busy_ns(e->workers);
    sl__gstage_counts(e->gs, &ob.gpu_samples, &ob.cpu_samples);
    sl__tune_out d;
    uint32_t active = sl__tuner_active(&e->tuner), slots = e->tuner.slots;
    if (sl__tuner_observe(&e->tuner, &ob, &d)) tune_apply(e, &d, d.what == SL_TUNE_WORKERS ? active : slots);
    if (publish) *publish = sl__tuner_publish_due(&e->tuner, now);
}

/* sl__engine_next with mu held. */
static int next_locked(sl__engine *e, sl_batch **out, int64_t timeout_ns, uint64_t cpu_ns, int *publish) {
    if (sl__guard_poisoned(e->guard)) return SL_ESTATE;
    uint64_t t0 = sl__now_ns();
    if (!e->t_first_ns) e->t_first_ns = t0;
    tune_ask(e, t0, cpu_ns);
    struct timespec dl;
    if (timeout_ns > 0) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)timeout_ns;
        dl.tv_sec += (time_t)(ns / 1000000000u);
        dl.tv_nsec = (long)(ns % 1000000000u);
    }
    int rc, expired = 0;
    for (;;) {
        if (sl__workers_source_gone(e->workers)) {
            rc = sl__guard_vanished(e->guard, e->conf->source_path, e->batches_out);
            pthread_cond_broadcast(&e->cv_ready); /* poisoned: every waiter returns */
            break;
        }
        if (e->pending_end) {
            e->pending_end = 0;
            rc = SL_EEND;
            break;
        }
        sl_batch *s = slot_by_seqno(e, e->r_seqno, SLOT_READY);
        if (s && (rc = deliver(e, s, out)) != 1) break;
        if (s) continue;
        if (e->held >= e->live && !reactivate(e, 1)) {
            rc = SL_EHELD;
            break;
        }
        if (expired) {
            rc = SL_ETIMEDOUT;
            break;
        }
        if (timeout_ns < 0) wait_on(e, &e->cv_ready);
        else if (timeout_ns == 0 || wait_until(e, &e->cv_ready, &dl) == ETIMEDOUT) expired = 1;
    }
    uint64_t now = sl__now_ns();
    e->wait_ns += now - t0;
    if (rc == 0) tune_delivered(e, *out, now, publish); /* deliver set *out */
    else if (rc != SL_ETIMEDOUT) e->asking = 0; /* the next call is another ask */
    if (rc == SL_EEND) sl__tuner_pass_end(&e->tuner, now);
    return rc;
}

/* The calling thread's CPU time (the consumer's, for the tuner), or 0 when
 * another thread than the last asks (its time says nothing of the last's). */
static uint64_t consumer_cpu_ns(sl__engine *e) {
    if (!e->tuner.on) return 0;
    struct timespec ts;
    pthread_t self = pthread_self();
    int same = atomic_exchange_explicit(&e->consumer_id, (uintptr_t)self, memory_order_relaxed) == (uintptr_t)self;
    if (!same || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 1; /* + 1: never 0 */
}

int sl__engine_next(sl__engine *e, sl_batch **out, int64_t timeout_ns, int *publish) {
    uint64_t cpu = consumer_cpu_ns(e); /* before the lock: a system call */
    pthread_mutex_lock(&e->mu);
    int rc = next_locked(e, out, timeout_ns, cpu, publish);
    unlock(e);
    return rc;
}

/* Is b one of e's slots? By address only: b may point anywhere. */
static int is_slot(const sl__engine *e, const sl_batch *b) {
    uintptr_t p = (uintptr_t)b, lo = (uintptr_t)e->slots, hi = lo + (uintptr_t)e->nslots * sizeof(sl_batch);
    return p >= lo && p < hi && (p - lo) % sizeof(sl_batch) == 0;
}

void sl__engine_release(sl__engine *e, sl_batch *b) {
    if (!is_slot(e, b)) return;
    pthread_mutex_lock(&e->mu);
    if (b->state == SLOT_HELD) {
        e->held--;
        slot_free(e, b);
        if (e->live < e->nslots) reactivate(e, 1); /* room a try-request refused before */
        pthread_cond_broadcast(&e->cv_ready);
    }
    unlock(e);
}

int sl__engine_poisoned(sl__engine *e, char *why, size_t len) {
    pthread_mutex_lock(&e->mu);
    int code = sl__guard_poisoned(e->guard);
    if (code) sl__msg(why, len, "%s", e->guard->why);
    else sl__msg(why, len, "%s", "");
    unlock(e);
    return code;
}

int sl__engine_last_error(sl__engine *e, sl_error_record *out) {
    pthread_mutex_lock(&e->mu);
    int rc = e->guard->has_last_err ? 0 : SL_EEND;
    if (!rc) *out = e->guard->last_err;
    unlock(e);
    return rc;
}

int sl__engine_set_epoch(sl__engine *e, uint64_t epoch) {
    pthread_mutex_lock(&e->mu);
    if (sl__guard_poisoned(e->guard)) {
        unlock(e);
        return SL_ESTATE;
    }
    if (e->cur_epoch == epoch && e->cur_batch == 0) {
        e->pending_end = 0; /* already there (the usual loop) */
    } else {
        reset_pipeline(e, epoch, 0, e->sampler->per_rank, 0, NULL);
    }
    unlock(e);
    return 0;
}

int sl__engine_set_state(sl__engine *e, uint64_t epoch, uint64_t batch, uint64_t tail, uint64_t pad,
                         const sl__span *span, uint32_t *gone) {
    pthread_mutex_lock(&e->mu);
    if (sl__guard_poisoned(e->guard)) {
        unlock(e);
        sl__free(e->conf->budget, gone);
        return SL_ESTATE;
    }
    reset_pipeline(e, epoch, batch, tail, pad, span);
    uint32_t *old = NULL;
    if (gone) { /* keep the list before it: get_state may have handed it out */
        old = e->span_gone[1];
        e->span_gone[1] = e->span_gone[0];
        e->span_gone[0] = gone;
    }
    unlock(e);
    sl__free(e->conf->budget, old);
    return 0;
}

void sl__engine_state(sl__engine *e, uint64_t *epoch, uint64_t *batch, uint64_t *tail, uint64_t *pad, sl__span *span) {
    pthread_mutex_lock(&e->mu);
    *epoch = e->cur_epoch;
    *batch = e->cur_batch;
    *tail = e->cur_tail;
    *pad = e->cur_pad;
    *span = *sl__sampler_span(e->sampler, e->cur_epoch);
    unlock(e);
}

void sl__engine_stats(sl__engine *e, sl_stats *o) {
    pthread_mutex_lock(&e->mu);
    o->samples = e->samples_out;
    o->batches = e->batches_out;
    o->epoch = e->cur_epoch;
    o->seconds = e->t_first_ns ? (double)(sl__now_ns() - e->t_first_ns) / 1e9 : 0;
    o->consumer_wait_s = (double)e->wait_ns / 1e9;
    o->slots = e->live;
    o->slots_held = e->held;
    o->slots_ready = e->ready;
    o->slots_retired = e->nslots - e->live;
    o->slots_min = e->min_live;
    o->slot_retirements = e->retirements;
    o->slot_reactivations = e->reactivations;
    o->errors = e->guard->failed_seen;
    sl__gstage_mode(e->gs, o);
    sl__tuner_stats(&e->tuner, sl__now_ns(), o);
    if (!e->tune_slots) o->slots_target = e->live;
    unlock(e);
}

size_t sl__engine_tuner_log(sl__engine *e, sl_tuner_decision *out, size_t max) {
    pthread_mutex_lock(&e->mu);
    size_t n = sl__tuner_log(&e->tuner, out, max);
    unlock(e);
    return n;
}
