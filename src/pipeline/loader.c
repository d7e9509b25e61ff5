/*
 * The loader: a fixed pool of batch slots filled by worker threads and
 * delivered in sampler order.
 *
 * A batch's life: FREE -> FILLING (a worker opened it for batch k of an
 * epoch; workers claim its positions one sample at a time and decode
 * straight into them) -> committed in seqno order (holes refilled, see
 * below) -> READY -> HELD by the consumer -> FREE on release.
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
 *  - slots in FILLING, READY or HELD never exceed nslots; workers wait for a
 *    FREE slot (backpressure); the consumer holding all of them gets
 *    SL_EHELD, never a wait.
 *  - seqnos are dense: delivery takes r_seqno, r_seqno+1, ...; batches
 *    dispatched past an epoch's end are discarded and their seqnos reused.
 *  - one committer at a time (committing), in seqno order (c_seqno); only
 *    the committer writes tail.
 *  - a reset (set_epoch, set_state) bumps gen, waits until no claim or
 *    commit is in flight, and frees every slot the consumer does not hold.
 *
 * Lock order: mu, then budget.mu (inside sl__budget_*), then errmu. A
 * worker never waits for budget while holding mu.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/ops.h"
#include "../base/hash.h"
#include "loader_impl.h"
#include "../base/util.h"

#define DEFAULT_BUDGET ((uint64_t)512 << 20)
#define DEFAULT_MAX_PIXELS (1ull << 26)
#define DEFAULT_MAX_BYTES ((uint64_t)64 << 20)
#define SLOT_ALIGN 64

void sl_config_init(sl_config *c) {
    memset(c, 0, sizeof *c);
    c->batch_size = 256;
    c->size = 224;
    c->preset = SL_PRESET_TRAIN;
    c->shuffle = 1;
    c->world_size = 1;
    c->min_slots = 1;
    c->budget = DEFAULT_BUDGET;
    c->on_error = SL_ON_ERROR_SKIP;
    c->max_pixels = DEFAULT_MAX_PIXELS;
    c->max_bytes = DEFAULT_MAX_BYTES;
    c->max_error_records = 1000;
    c->max_error_rate = 0.1;
}

static uint32_t affinity_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return (uint32_t)n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* ---- order ----------------------------------------------------------------- */

static uint32_t *order_for(sl_loader *ld, uint64_t epoch) {
    int i = (int)(epoch & 1);
    if (!ld->seq_valid[i] || ld->seq_epoch[i] != epoch) {
        sl__sampler_fill(&ld->sampler, epoch, ld->seq[i], ld->seq_tmp);
        ld->seq_epoch[i] = epoch;
        ld->seq_valid[i] = 1;
    }
    return ld->seq[i];
}

/* ---- slot layout ------------------------------------------------------------ */

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static int slot_stride(uint32_t B, uint64_t sample_bytes, uint64_t *out) {
    uint64_t img;
    if (sl__mul(B, sample_bytes, &img)) return SL_EOVERFLOW;
    uint64_t s = align_up(img, SLOT_ALIGN);
    s += align_up((uint64_t)B * 8, SLOT_ALIGN) * 3; /* label, index, hash */
    s += align_up((uint64_t)B, SLOT_ALIGN) * 2;     /* ok, err */
    s += align_up((uint64_t)B * SL_REASON_LEN, SLOT_ALIGN); /* reasons */
    s += align_up((uint64_t)B * 4, SLOT_ALIGN);             /* refill holes */
    if (s < img) return SL_EOVERFLOW;
    *out = s;
    return 0;
}

static void slot_carve(sl_loader *ld, sl_batch *s, uint8_t *base) {
    uint64_t B = ld->B;
    s->image = base;
    base += align_up(B * ld->sample_bytes, SLOT_ALIGN);
    s->label = (int64_t *)base;
    base += align_up(B * 8, SLOT_ALIGN);
    s->index = (int64_t *)base;
    base += align_up(B * 8, SLOT_ALIGN);
    s->hash = (uint64_t *)base;
    base += align_up(B * 8, SLOT_ALIGN);
    s->ok = base;
    base += align_up(B, SLOT_ALIGN);
    s->err = base;
    base += align_up(B, SLOT_ALIGN);
    s->reasons = (char *)base;
    base += align_up(B * SL_REASON_LEN, SLOT_ALIGN);
    s->rf_hole = (uint32_t *)base;
}

/* ---- dispatch ------------------------------------------------------------- */

typedef struct claim {
    sl_batch *slot;
    uint32_t pos;
    uint64_t sample;
    uint64_t epoch;
    uint64_t gen;
} claim;

static sl_batch *slot_by_seqno(sl_loader *ld, uint64_t seqno, int state) {
    for (uint32_t i = 0; i < ld->nslots; i++) {
        sl_batch *s = &ld->slots[i];
        if (s->state == state && s->seqno == seqno && !s->discard && s->gen == ld->gen) return s;
    }
    return NULL;
}

/* Can batch k of the dispatch epoch still hold samples given the tail? */
static int batch_possible(const sl_loader *ld, uint64_t k) {
    uint64_t B = ld->B;
    if (k >= ld->nbatches) return 0;
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
    uint64_t start = k * ld->B, per = ld->sampler.per_rank;
    s->state = SLOT_FILLING;
    s->gen = ld->gen;
    s->epoch = ld->d_epoch;
    s->batch = k;
    s->seqno = ld->next_seqno++;
    s->nominal = (uint32_t)SL_MIN((uint64_t)ld->B, per - start);
    s->claimed = 0;
    s->pending = s->nominal;
    s->n = 0;
    s->discard = s->failed = s->marker = s->final = 0;
    s->checksum = 0;
    s->rf_count = s->rf_claimed = 0;
    s->rf_passes = 0;
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
        c->sample = ld->seq[s->epoch & 1][s->rf_top - 1 - r];
        c->epoch = s->epoch;
        c->gen = s->gen;
        return 1;
    }
    return 0;
}

/* Find work: a refill, else the lowest-seqno filling slot with unclaimed
 * positions, else a newly opened batch. Positions at or past the tail are
 * voids: settled here without decoding. Returns 1 with c filled, 0 if
 * nothing to do. */
static int claim_next(sl_loader *ld, claim *c) {
    for (;;) {
        if (ld->paused || ld->stop) return 0;
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
        c->sample = ld->seq[best->epoch & 1][p]; /* valid: the dispatch epoch's order */
        c->epoch = best->epoch;
        c->gen = best->gen;
        return 1;
    }
}

/* ---- commit ------------------------------------------------------------------ */

static void slot_free(sl_loader *ld, sl_batch *s) {
    s->state = SLOT_FREE;
    s->discard = 0;
    pthread_cond_broadcast(&ld->cv_work);
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
            sl__record_error(ld, s, (uint64_t)s->index[j], -(int)s->err[j], s->reasons + (size_t)j * SL_REASON_LEN);
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
    uint64_t B = ld->B, k = s->batch, T = ld->tail, top = T;
    if (s->rf_passes == 0) commit_nominal(ld, s, T);
    uint32_t m = ld->cfg.on_error == SL_ON_ERROR_SKIP ? sl__refill_pass(ld, s, &T) : 0;
    if (m) { /* publish the round: its positions leave the tail, its refills become claims */
        pthread_mutex_lock(&ld->mu);
        s->rf_top = top;
        s->rf_count = m;
        s->rf_claimed = 0;
        s->pending += m;
        ld->tail = T;
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
    s->final = ld->cfg.drop_last ? T < (k + 2) * B || k + 1 >= ld->nbatches : T <= (k + 1) * B || k + 1 >= ld->nbatches;
    if (!s->failed && (n == 0 || (ld->cfg.drop_last && n < B))) s->marker = 1;
    s->tail_after = T;
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
    while (!ld->committing && !ld->stop) {
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
        pthread_cond_broadcast(&ld->cv_ready);
        if (s->final) {
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
            order_for(ld, s->epoch + 1);
            pthread_mutex_lock(&ld->mu);
            ld->committing = 0;
            ld->tail = ld->sampler.per_rank;
            ld->d_open = 1;
            pthread_cond_broadcast(&ld->cv_work);
            pthread_cond_broadcast(&ld->cv_quiet);
        }
    }
    return done;
}

/* ---- workers -------------------------------------------------------------- */

/* Decode sample into position j of s. A failure is kept in the slot for
 * the commit to record if the position is still part of the batch then. */
static void fill_position(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch) {
    sl_loader *ld = w->ld;
    char *reason = s->reasons + (size_t)j * SL_REASON_LEN;
    reason[0] = 0;
    uint8_t *dst = s->image + (uint64_t)j * ld->sample_bytes;
    int rc = sl__worker_sample(w, sample, epoch, dst, reason, SL_REASON_LEN);
    s->label[j] = sl__source_label(ld->src, sample);
    s->index[j] = (int64_t)sample;
    if (rc == 0) {
        s->ok[j] = 1;
        s->err[j] = 0;
        if (ld->cfg.flags & SL_FLAG_CHECKSUM)
            s->hash[j] = sl__hash64(dst, ld->sample_bytes, (uint64_t)s->label[j]);
    } else {
        s->ok[j] = 0;
        s->err[j] = (uint8_t)-rc; /* codes are -1 .. -20 */
    }
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
        fill_position(w, c.slot, c.pos, c.sample, c.epoch);
        atomic_fetch_add_explicit(&w->busy_ns, sl__now_ns() - t0, memory_order_relaxed);
        pthread_mutex_lock(&ld->mu);
        ld->active--;
        sl_batch *s = c.slot;
        s->pending--;
        if (s->gen != ld->gen || s->discard) {
            if (s->pending == 0 && s->state == SLOT_FILLING) slot_free(ld, s);
            pthread_cond_broadcast(&ld->cv_quiet);
            continue;
        }
        try_commit(w);
        if (ld->active == 0) pthread_cond_broadcast(&ld->cv_quiet);
    }
    pthread_mutex_unlock(&ld->mu);
}

/* ---- reset ------------------------------------------------------------------ */

/* Restart delivery at (epoch, batch) with tail. mu held. */
static void reset_pipeline(sl_loader *ld, uint64_t epoch, uint64_t batch, uint64_t tail) {
    ld->paused = 1;
    ld->gen++;
    while (ld->active > 0 || ld->committing) pthread_cond_wait(&ld->cv_quiet, &ld->mu);
    for (uint32_t i = 0; i < ld->nslots; i++) {
        sl_batch *s = &ld->slots[i];
        if (s->state == SLOT_FILLING || s->state == SLOT_READY) s->state = SLOT_FREE;
        s->discard = 0;
    }
    ld->ready = 0;
    /* records of batches committed but never delivered go with them */
    pthread_mutex_lock(&ld->errmu);
    uint64_t seen = atomic_load(&ld->delivered_cno);
    while (ld->nerrs_kept > 0 && ld->errs[ld->nerrs_kept - 1].cno > seen) ld->nerrs_kept--;
    pthread_mutex_unlock(&ld->errmu);
    order_for(ld, epoch);
    ld->d_epoch = epoch;
    ld->d_batch = batch;
    ld->tail = tail;
    ld->d_open = 1;
    ld->next_seqno = ld->c_seqno = ld->r_seqno = 0;
    ld->cur_epoch = epoch;
    ld->cur_batch = batch;
    ld->cur_tail = tail;
    ld->pending_end = 0;
    ld->paused = 0;
    pthread_cond_broadcast(&ld->cv_work);
}

/* ---- public: create / destroy --------------------------------------------- */

static int validate(const sl_config *c, char *err, size_t errlen) {
#define BAD(...) do { sl__msg(err, errlen, __VA_ARGS__); return SL_EINVAL; } while (0)
    if (!c->source || !*c->source) BAD("source is empty");
    if (c->batch_size == 0 || c->batch_size > (1u << 20)) BAD("batch_size %u out of range 1..1048576", c->batch_size);
    if (c->size == 0 || c->size > 16384) BAD("size %u out of range 1..16384", c->size);
    if (c->preset != SL_PRESET_TRAIN && c->preset != SL_PRESET_VAL) BAD("preset %d is neither train nor val", c->preset);
    if (c->world_size == 0) BAD("world_size is 0");
    if (c->rank >= c->world_size) BAD("rank %u is not below world_size %u", c->rank, c->world_size);
    if (c->on_error != SL_ON_ERROR_SKIP && c->on_error != SL_ON_ERROR_RAISE) BAD("on_error %d unknown", c->on_error);
    if (c->workers > 1024) BAD("workers %u over 1024", c->workers);
    if (c->prefetch > 1024) BAD("prefetch %u over 1024", c->prefetch);
    if (c->min_slots > 1024) BAD("min_slots %u over 1024", c->min_slots);
    if (c->budget == 0) BAD("budget is 0");
    if (c->flags & ~(SL_FLAG_CHECKSUM | SL_FLAG_EXIF | SL_FLAG_KEEP_ALPHA)) BAD("unknown flags 0x%x", c->flags);
    if (c->max_error_records > (1u << 20)) BAD("max_error_records over 1048576");
    if (!(c->max_error_rate >= 0)) BAD("max_error_rate %g is not a fraction >= 0 (1 = never stop)", c->max_error_rate);
    return 0;
#undef BAD
}

static void stop_workers(sl_loader *ld, uint32_t n) {
    pthread_mutex_lock(&ld->mu);
    ld->stop = 1;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_cond_broadcast(&ld->cv_ready);
    pthread_mutex_unlock(&ld->mu);
    sl__budget_close(&ld->budget);
    for (uint32_t i = 0; i < n; i++) pthread_join(ld->workers[i].thread, NULL);
}

/* An allocation of n bytes came back NULL at create (one thread): the
 * budget could not hold it (SL_EBUDGET) or the system refused (SL_ENOMEM). */
static int alloc_fail_code(const sl_loader *ld, uint64_t n) {
    uint64_t used = atomic_load(&((sl_loader *)ld)->budget.used), need;
    if (n > SIZE_MAX || sl__add(used, sl__alloc_cost((size_t)n), &need) || need > ld->budget.limit) return SL_EBUDGET;
    return SL_ENOMEM;
}

/* Free what the loader allocated. In a child of fork() the decoders are
 * left alone: a decode may have been mid-call in the parent at the fork. */
static void free_memory(sl_loader *ld, int in_child) {
    for (uint32_t i = 0; ld->workers && i < ld->nworkers; i++) {
        sl__worker *w = &ld->workers[i];
        if (!in_child) {
            sl__worker_fini(w);
        } else if (w->ld) {
            sl__unmap_prepaid(w->rbig, w->rbig_cap);
            sl__free(&ld->budget, w->rbase);
        }
    }
    sl__free(&ld->budget, ld->workers);
    sl__free(&ld->budget, ld->slots);
    sl__free(&ld->budget, ld->region);
    sl__free(&ld->budget, ld->seq[0]);
    sl__free(&ld->budget, ld->seq[1]);
    sl__free(&ld->budget, ld->seq_tmp);
    sl__free(&ld->budget, ld->errs);
    sl__free(&ld->budget, ld->source_path);
    if (ld->src) sl__source_close(ld->src);
}

static void free_all(sl_loader *ld) {
    free_memory(ld, 0);
    if (ld->sync_init) {
        pthread_cond_destroy(&ld->cv_work);
        pthread_cond_destroy(&ld->cv_ready);
        pthread_cond_destroy(&ld->cv_quiet);
        pthread_mutex_destroy(&ld->mu);
        pthread_mutex_destroy(&ld->errmu);
    }
    sl__budget_fini(&ld->budget);
    free(ld);
}

/* In a child of fork(): free this process's copy of the loader without
 * touching a lock or a condition variable (the parent's threads may have
 * held any of them at the fork, and they do not exist here, so waiting or
 * destroying could hang forever). */
static void destroy_in_child(sl_loader *ld) {
    atomic_store(&ld->budget.waiters, 0); /* they were the parent's threads: nobody to wake */
    free_memory(ld, 1);
    free(ld);
}

/* mu, errmu and the condition variables (cv_ready on the monotonic clock,
 * for sl_loader_next_timeout's deadline). 0, or SL_ESYS with none left. */
static int init_sync(sl_loader *ld) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return SL_ESYS;
    int n = 0; /* objects made, in this order */
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_mutex_init(&ld->mu, NULL) == 0 && ++n &&
        pthread_mutex_init(&ld->errmu, NULL) == 0 && ++n && pthread_cond_init(&ld->cv_work, NULL) == 0 && ++n &&
        pthread_cond_init(&ld->cv_ready, &ca) == 0 && ++n && pthread_cond_init(&ld->cv_quiet, NULL) == 0)
        ld->sync_init = 1;
    pthread_condattr_destroy(&ca);
    if (ld->sync_init) return 0;
    if (n > 3) pthread_cond_destroy(&ld->cv_ready);
    if (n > 2) pthread_cond_destroy(&ld->cv_work);
    if (n > 1) pthread_mutex_destroy(&ld->errmu);
    if (n > 0) pthread_mutex_destroy(&ld->mu);
    return SL_ESYS;
}

/* Start the workers with every asynchronous signal blocked (they inherit
 * the mask), so Ctrl-C and friends go to the caller's threads; synchronous
 * ones (a fault) stay deliverable. 0 or SL_ESYS (the started ones stopped). */
static int start_workers(sl_loader *ld, char *err, size_t errlen) {
    sigset_t all, old;
    sigfillset(&all);
    static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&all, sync_signals[i]);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr)) {
        sl__msg(err, errlen, "could not make thread attributes");
        return SL_ESYS;
    }
    pthread_attr_setstacksize(&attr, (size_t)2 << 20);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    for (uint32_t i = 0; i < ld->nworkers && !rc; i++) {
        if (pthread_create(&ld->workers[i].thread, &attr, sl__worker_main, &ld->workers[i])) {
            stop_workers(ld, i);
            sl__msg(err, errlen, "could not start worker thread %u", i);
            rc = SL_ESYS;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

int sl_loader_create(const sl_config *cfg, sl_loader **out, char *err, size_t errlen) {
    char b1[32], b2[32], b3[32], b4[32];
    if (!cfg || !out) return SL_EINVAL;
    *out = NULL;
    int rc = validate(cfg, err, errlen);
    if (rc) return rc;
    sl_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return SL_ENOMEM;
    ld->cfg = *cfg;
    if (ld->cfg.max_pixels == 0) ld->cfg.max_pixels = DEFAULT_MAX_PIXELS;
    if (ld->cfg.max_bytes == 0) ld->cfg.max_bytes = DEFAULT_MAX_BYTES;
    if (ld->cfg.min_slots == 0) ld->cfg.min_slots = 1;
    if ((rc = sl__budget_init(&ld->budget, cfg->budget))) {
        free(ld);
        sl__msg(err, errlen, "could not make the budget's lock");
        return rc;
    }
    if ((rc = init_sync(ld))) {
        sl__budget_fini(&ld->budget);
        free(ld);
        sl__msg(err, errlen, "could not make the loader's locks");
        return rc;
    }
    ld->sample_cap = sl__sample_cap(cfg->budget);
    ld->nworkers = cfg->workers ? cfg->workers : affinity_cpus();
    ld->B = cfg->batch_size;
    ld->C = (cfg->flags & SL_FLAG_KEEP_ALPHA) ? 4 : 3;
    ld->sample_bytes = (uint64_t)ld->C * cfg->size * cfg->size;
    ld->source_path = sl__strdup(&ld->budget, cfg->source, SL_MEM_INDEX);
    ld->cfg.source = ld->source_path;
    if (!ld->source_path) {
        rc = alloc_fail_code(ld, strlen(cfg->source) + 1);
        if (rc == SL_EBUDGET)
            sl__msg(err, errlen, "budget of %s cannot hold the source path", sl__fmt_bytes(cfg->budget, b1, sizeof b1));
        else
            sl__msg(err, errlen, "out of memory copying the source path");
        goto fail;
    }

    /* 1. index */
    uint64_t t0 = sl__now_ns();
    if ((rc = sl__source_open(&ld->budget, cfg->source, ld->nworkers, &ld->src, err, errlen))) goto fail;
    ld->index_seconds = (double)(sl__now_ns() - t0) / 1e9;
    uint64_t N = sl__source_count(ld->src);
    if (N > UINT32_MAX) {
        sl__msg(err, errlen, "dataset has %llu samples, more than 2^32-1", (unsigned long long)N);
        rc = SL_EINVAL;
        goto fail;
    }
    rc = sl__sampler_init(&ld->sampler, N, cfg->rank, cfg->world_size, cfg->shuffle, cfg->drop_last, cfg->seed);
    if (rc) {
        sl__msg(err, errlen, "dataset of %llu samples leaves rank %u of %u nothing", (unsigned long long)N, cfg->rank,
                cfg->world_size);
        goto fail;
    }
    uint64_t per = ld->sampler.per_rank;
    ld->nbatches = cfg->drop_last ? per / ld->B : (per + ld->B - 1) / ld->B;
    if (ld->nbatches == 0) {
        sl__msg(err, errlen, "%llu samples per rank is less than one batch of %u with drop_last",
                (unsigned long long)per, ld->B);
        rc = SL_EEMPTY;
        goto fail;
    }

    /* 2. order buffers, error records, worker table: fixed */
    size_t seqb = (size_t)per * sizeof(uint32_t);
    ld->seq[0] = sl__alloc(&ld->budget, seqb, SL_MEM_INDEX);
    ld->seq[1] = sl__alloc(&ld->budget, seqb, SL_MEM_INDEX);
    if (cfg->world_size > 1)
        ld->seq_tmp = sl__alloc(&ld->budget, (size_t)SL_MAX(N, ld->sampler.total) * sizeof(uint32_t), SL_MEM_INDEX);
    ld->errs = sl__calloc(&ld->budget, SL_MAX(cfg->max_error_records, 1), sizeof(sl__error), SL_MEM_OTHER);
    ld->workers = sl__calloc(&ld->budget, ld->nworkers, sizeof(sl__worker), SL_MEM_OTHER);
    if (!ld->seq[0] || !ld->seq[1] || (cfg->world_size > 1 && !ld->seq_tmp) || !ld->errs || !ld->workers) {
        /* the budget is to blame only if the smallest refused block did not fit */
        uint64_t want = UINT64_MAX;
        if (!ld->seq[0] || !ld->seq[1]) want = SL_MIN(want, seqb);
        if (cfg->world_size > 1 && !ld->seq_tmp) want = SL_MIN(want, (uint64_t)SL_MAX(N, ld->sampler.total) * 4);
        if (!ld->errs) want = SL_MIN(want, (uint64_t)SL_MAX(cfg->max_error_records, 1) * sizeof(sl__error));
        if (!ld->workers) want = SL_MIN(want, (uint64_t)ld->nworkers * sizeof(sl__worker));
        rc = alloc_fail_code(ld, want);
        if (rc == SL_EBUDGET)
            sl__msg(err, errlen, "budget of %s cannot hold the sample order and bookkeeping for %llu samples",
                    sl__fmt_bytes(cfg->budget, b1, sizeof b1), (unsigned long long)N);
        else
            sl__msg(err, errlen, "out of memory for the sample order and bookkeeping of %llu samples",
                    (unsigned long long)N);
        goto fail;
    }

    /* 3. size the pool: minimum working set = slots + worker baselines */
    uint64_t stride, per_worker = sl__alloc_cost(SL_WORKER_READ_BASE) + SL_WORKER_DEC_BASE, workers_b;
    if ((rc = slot_stride(ld->B, ld->sample_bytes, &stride))) {
        sl__msg(err, errlen, "batch of %u x %llu bytes overflows", ld->B, (unsigned long long)ld->sample_bytes);
        goto fail;
    }
    workers_b = per_worker * ld->nworkers;
    uint64_t used = atomic_load(&ld->budget.used);
    uint64_t min_slots = SL_MAX(cfg->min_slots, cfg->prefetch ? cfg->prefetch : 1);
    /* the fixed part must leave a quarter of the budget for one sample (admit.c) */
    uint64_t fixed_min = used + workers_b + (uint64_t)sl__alloc_cost((size_t)SL_MIN(stride * min_slots, SIZE_MAX / 2)) +
                         sizeof(sl_batch) * min_slots + 4096;
    uint64_t minimum = fixed_min > UINT64_MAX / 4 ? UINT64_MAX : (fixed_min * 4 + 2) / 3;
    if (fixed_min + ld->sample_cap > cfg->budget || fixed_min > cfg->budget) {
        sl__msg(err, errlen,
                "budget %s is below the minimum working set of %s for this pipeline: %llu batch slot(s) of %s "
                "(batch %u x %ux%ux%u) + %u workers x %s scratch + %s index, with a quarter of the budget "
                "kept for one sample's decode; raise --budget to at least %s or lower batch size, size or workers",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), sl__fmt_bytes(minimum, b2, sizeof b2),
                (unsigned long long)min_slots, sl__fmt_bytes(stride, b3, sizeof b3), ld->B, ld->C, cfg->size, cfg->size,
                ld->nworkers, sl__fmt_bytes(per_worker, b4, sizeof b4), sl__fmt_bytes(used, b4 + 16, 16),
                sl__fmt_bytes(minimum, b2, sizeof b2));
        rc = SL_EBUDGET;
        goto fail;
    }
    if (cfg->prefetch) {
        ld->nslots = cfg->prefetch;
    } else {
        /* as many as fit, leaving a sample's room (a quarter) for scratch
         * to grow, at most max(4, 4 * workers / batch) */
        uint64_t room = cfg->budget - used - workers_b - 4096 - ld->sample_cap;
        uint64_t fit = room / (stride + sizeof(sl_batch));
        uint64_t cap = SL_MAX(4, (4ull * ld->nworkers + ld->B - 1) / ld->B);
        ld->nslots = (uint32_t)SL_MAX(SL_MIN(fit, cap), min_slots);
        while (ld->nslots > min_slots && used + workers_b + sl__alloc_cost(stride * ld->nslots) +
                                                 sizeof(sl_batch) * ld->nslots + 4096 + ld->sample_cap > cfg->budget)
            ld->nslots--;
    }
    ld->region_len = (size_t)(stride * ld->nslots);
    ld->region = sl__alloc(&ld->budget, ld->region_len, SL_MEM_BATCHES);
    ld->slots = sl__calloc(&ld->budget, ld->nslots, sizeof(sl_batch), SL_MEM_OTHER);
    if (!ld->region || !ld->slots) {
        rc = alloc_fail_code(ld, !ld->slots ? (uint64_t)ld->nslots * sizeof(sl_batch) : ld->region_len);
        if (rc == SL_EBUDGET)
            sl__msg(err, errlen, "budget %s cannot hold %u batch slots of %s (prefetch): minimum working set is %s",
                    sl__fmt_bytes(cfg->budget, b1, sizeof b1), ld->nslots, sl__fmt_bytes(stride, b2, sizeof b2),
                    sl__fmt_bytes(minimum, b3, sizeof b3));
        else
            sl__msg(err, errlen, "out of memory for %u batch slots of %s", ld->nslots,
                    sl__fmt_bytes(stride, b2, sizeof b2));
        goto fail;
    }
    for (uint32_t i = 0; i < ld->nslots; i++) {
        ld->slots[i].ld = ld;
        ld->slots[i].id = i;
        slot_carve(ld, &ld->slots[i], ld->region + (uint64_t)i * stride);
    }

    /* 4. workers: baselines are fixed for life */
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        if ((rc = sl__worker_init(&ld->workers[i], ld, i))) {
            for (uint32_t j = 0; j < i; j++) sl__worker_fini(&ld->workers[j]);
            memset(ld->workers, 0, sizeof(sl__worker) * ld->nworkers);
            sl__msg(err, errlen, "worker scratch: %s", sl_strerror(rc));
            goto fail;
        }
    }
    sl__budget_fix(&ld->budget, atomic_load(&ld->budget.used));
    if (sl__budget_headroom(&ld->budget) < ld->sample_cap) { /* allocation rounding ate into it */
        sl__msg(err, errlen, "budget %s: the fixed part of %s leaves less than a quarter for one sample; raise it to %s",
                sl__fmt_bytes(cfg->budget, b1, sizeof b1), sl__fmt_bytes(atomic_load(&ld->budget.fixed), b2, sizeof b2),
                sl__fmt_bytes(minimum + minimum / 8, b3, sizeof b3));
        rc = SL_EBUDGET;
        goto fail;
    }
    if ((rc = sl__admit_check(ld, err, errlen))) goto fail;

    order_for(ld, 0);
    ld->d_epoch = 0;
    ld->d_batch = 0;
    ld->tail = per;
    ld->d_open = 1;
    ld->cur_tail = per;

    if ((rc = start_workers(ld, err, errlen))) goto fail;
    /* handshake: return only once every worker runs */
    pthread_mutex_lock(&ld->mu);
    while (ld->started < ld->nworkers) pthread_cond_wait(&ld->cv_ready, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    sl__registry_add(ld);
    *out = ld;
    return 0;
fail:
    free_all(ld);
    return rc;
}

void sl_loader_destroy(sl_loader *ld) {
    if (!ld || !sl__registry_remove(ld)) return; /* NULL, or not a live loader (destroyed already) */
    if (ld->forked) {
        destroy_in_child(ld);
        return;
    }
    stop_workers(ld, ld->nworkers);
    free_all(ld);
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
        ld->cur_tail = ld->sampler.per_rank;
        ld->epoch_good = ld->epoch_errors = 0;
    } else {
        ld->cur_epoch = s->epoch;
        ld->cur_batch = s->batch + 1;
        ld->cur_tail = s->tail_after;
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
        if (ld->held >= ld->nslots) {
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

int sl_loader_last_error(const sl_loader *cld, sl_error_record *out) {
    if (!cld || !out) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    int rc = ld->has_last_err ? 0 : SL_EEND;
    if (!rc) *out = ld->last_err;
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
        reset_pipeline(ld, epoch, 0, ld->sampler.per_rank);
    }
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

uint64_t sl_loader_len(const sl_loader *ld) { return ld ? ld->nbatches : 0; }
uint64_t sl_loader_num_samples(const sl_loader *ld) { return ld ? ld->sampler.per_rank : 0; }
uint64_t sl_loader_dataset_size(const sl_loader *ld) { return ld ? ld->sampler.n : 0; }

const char *sl_loader_sample_path(const sl_loader *ld, uint64_t index, char *buf, size_t len) {
    if (!ld || !buf || index >= ld->sampler.n) return NULL;
    return sl__source_path(ld->src, index, buf, len) >= 0 ? buf : NULL;
}

int sl_loader_slot_region(const sl_loader *ld, void **base, size_t *len) {
    if (!ld || !base || !len) return SL_EINVAL;
    *base = ld->region;
    *len = ld->region_len;
    return 0;
}

/* ---- batches -------------------------------------------------------------- */

int sl_batch_num_fields(const sl_batch *b) { return b ? 3 : 0; }

int sl_batch_field(const sl_batch *b, int i, sl_field *f) {
    if (!b || !f || i < 0 || i > 2) return SL_EINVAL;
    const sl_loader *ld = b->ld;
    memset(f, 0, sizeof *f);
    if (i == 0) {
        int64_t S = ld->cfg.size;
        f->name = "image";
        f->data = b->image;
        f->dtype = SL_DTYPE_UINT8;
        f->ndim = 4;
        f->shape[0] = b->n, f->shape[1] = ld->C, f->shape[2] = S, f->shape[3] = S;
        f->strides[3] = 1, f->strides[2] = S, f->strides[1] = S * S, f->strides[0] = (int64_t)ld->sample_bytes;
        f->nbytes = (uint64_t)b->n * ld->sample_bytes;
    } else {
        f->name = i == 1 ? "label" : "index";
        f->data = i == 1 ? (void *)b->label : (void *)b->index;
        f->dtype = SL_DTYPE_INT64;
        f->ndim = 1;
        f->shape[0] = b->n;
        f->strides[0] = 8;
        f->nbytes = (uint64_t)b->n * 8;
    }
    return 0;
}

int sl_batch_find(const sl_batch *b, const char *name, sl_field *f) {
    if (!name) return SL_EINVAL;
    for (int i = 0; i < 3; i++)
        if (sl_batch_field(b, i, f) == 0 && !strcmp(f->name, name)) return 0;
    return SL_EINVAL;
}

uint32_t sl_batch_len(const sl_batch *b) { return b ? b->n : 0; }
uint64_t sl_batch_epoch(const sl_batch *b) { return b ? b->epoch : 0; }
uint64_t sl_batch_index(const sl_batch *b) { return b ? b->batch : 0; }
uint64_t sl_batch_checksum(const sl_batch *b) { return b ? b->checksum : 0; }

/* ---- stats, errors, state ----------------------------------------------- */

int sl_loader_stats(const sl_loader *cld, sl_stats *o) {
    if (!cld || !o) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    memset(o, 0, sizeof *o);
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    o->samples = ld->samples_out;
    o->batches = ld->batches_out;
    o->epoch = ld->cur_epoch;
    o->seconds = ld->t_first_ns ? (double)(sl__now_ns() - ld->t_first_ns) / 1e9 : 0;
    o->consumer_wait_s = (double)ld->wait_ns / 1e9;
    o->slots = ld->nslots;
    o->slots_held = ld->held;
    o->slots_ready = ld->ready;
    o->errors = ld->nerrs_seen;
    pthread_mutex_unlock(&ld->mu);
    o->samples_per_s = o->seconds > 0 ? (double)o->samples / o->seconds : 0;
    o->workers = ld->nworkers;
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        o->worker_busy_s += (double)atomic_load(&ld->workers[i].busy_ns) / 1e9;
        o->worker_idle_s += (double)atomic_load(&ld->workers[i].idle_ns) / 1e9;
    }
    o->budget_wait_s = (double)atomic_load(&ld->budget.wait_ns) / 1e9;
    o->budget_bytes = ld->budget.limit;
    o->accounted_bytes = atomic_load(&ld->budget.used);
    o->peak_accounted_bytes = atomic_load(&ld->budget.peak);
    o->fixed_bytes = atomic_load(&ld->budget.fixed);
    for (int c = 0; c < SL_MEM__COUNT; c++) {
        o->mem[c] = atomic_load(&ld->budget.cat[c]);
        o->mem_peak[c] = atomic_load(&ld->budget.cat_peak[c]);
    }
    o->index_seconds = ld->index_seconds;
    return 0;
}

void sl__record_error(sl_loader *ld, sl_batch *s, uint64_t index, int code, const char *reason) {
    s->nerr++;
    pthread_mutex_lock(&ld->errmu);
    if (ld->nerrs_kept < ld->cfg.max_error_records) {
        sl__error *e = &ld->errs[ld->nerrs_kept++];
        e->cno = s->cno;
        e->rec.index = index;
        e->rec.epoch = s->epoch;
        e->rec.code = code;
        snprintf(e->rec.reason, sizeof e->rec.reason, "%s", reason && *reason ? reason : sl_strerror(code));
    }
    pthread_mutex_unlock(&ld->errmu);
    /* the newest one of the batch, kept whatever max_error_records says */
    s->last_err.index = index;
    s->last_err.epoch = s->epoch;
    s->last_err.code = code;
    snprintf(s->last_err.reason, sizeof s->last_err.reason, "%s", reason && *reason ? reason : sl_strerror(code));
}

size_t sl_loader_errors(const sl_loader *cld, size_t first, sl_error_record *out, size_t max) {
    if (!cld || !out || cld->forked) return 0;
    sl_loader *ld = (sl_loader *)cld;
    uint64_t seen = atomic_load(&ld->delivered_cno);
    pthread_mutex_lock(&ld->errmu);
    size_t n = 0;
    for (size_t i = first; i < ld->nerrs_kept && n < max && ld->errs[i].cno <= seen; i++) out[n++] = ld->errs[i].rec;
    pthread_mutex_unlock(&ld->errmu);
    return n;
}

int sl_loader_get_state(const sl_loader *cld, sl_state *st) {
    if (!cld || !st) return SL_EINVAL;
    sl_loader *ld = (sl_loader *)cld;
    memset(st, 0, sizeof *st);
    if (ld->forked) return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    st->version = SL_STATE_VERSION;
    st->seed = ld->cfg.seed;
    st->epoch = ld->cur_epoch;
    st->batch = ld->cur_batch;
    st->tail = ld->cur_tail;
    st->dataset_size = ld->sampler.n;
    st->rank = ld->cfg.rank;
    st->world_size = ld->cfg.world_size;
    st->batch_size = ld->B;
    st->flags = (ld->cfg.shuffle ? 1u : 0) | (ld->cfg.drop_last ? 2u : 0);
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

/* Could a loader be at st? sl_loader_get_state reports an epoch's end as
 * (epoch + 1, 0, per_rank), so a state always has a next batch: batch <
 * nbatches and a tail that leaves it a sample (a full one with drop_last). */
static int state_reachable(const sl_loader *ld, const sl_state *st) {
    uint64_t B = ld->B, start;
    if (st->batch >= ld->nbatches || st->tail > ld->sampler.per_rank || sl__mul(st->batch, B, &start)) return 0;
    return ld->cfg.drop_last ? start + B <= st->tail : start < st->tail;
}

int sl_loader_set_state(sl_loader *ld, const sl_state *st) {
    if (!ld || !st) return SL_EINVAL;
    if (ld->forked) return SL_ESTATE;
    uint32_t flags = (ld->cfg.shuffle ? 1u : 0) | (ld->cfg.drop_last ? 2u : 0);
    if (st->version != SL_STATE_VERSION || st->seed != ld->cfg.seed || st->dataset_size != ld->sampler.n ||
        st->rank != ld->cfg.rank || st->world_size != ld->cfg.world_size || st->batch_size != ld->B ||
        st->flags != flags || !state_reachable(ld, st))
        return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    if (ld->poisoned) {
        pthread_mutex_unlock(&ld->mu);
        return SL_ESTATE;
    }
    reset_pipeline(ld, st->epoch, st->batch, st->tail);
    pthread_mutex_unlock(&ld->mu);
    return 0;
}
