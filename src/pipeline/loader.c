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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/ops.h"
#include "../base/budget.h"
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
    memset(s->ok, 0, ld->B);
    memset(s->err, 0, ld->B);
    return s;
}

/* Find work: the lowest-seqno filling slot with unclaimed positions, else a
 * newly opened batch. Positions at or past the tail are voids: settled
 * here without decoding. Returns 1 with c filled, 0 if nothing to do. */
static int claim_next(sl_loader *ld, claim *c) {
    for (;;) {
        if (ld->paused || ld->stop) return 0;
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

/* Move sample from position a to b (b < a) within a slot. */
static void move_sample(sl_loader *ld, sl_batch *s, uint32_t a, uint32_t b) {
    memcpy(s->image + (uint64_t)b * ld->sample_bytes, s->image + (uint64_t)a * ld->sample_bytes, ld->sample_bytes);
    s->label[b] = s->label[a];
    s->index[b] = s->index[a];
    s->hash[b] = s->hash[a];
    s->ok[b] = 1;
    s->ok[a] = 0;
}

static void fill_position(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, int defer);

/* Settle holes, decide n and whether the epoch ends here. Runs outside mu
 * by the one committer; tail is read and written only by it. */
static void commit_slot(sl__worker *w, sl_batch *s) {
    sl_loader *ld = w->ld;
    uint64_t B = ld->B, k = s->batch, T = ld->tail;
    s->cno = ++ld->commits;
    s->nerr = 0;
    uint32_t have = 0, errors = 0;
    for (uint32_t j = 0; j < s->nominal; j++) {
        if (k * B + j >= T) {
            s->ok[j] = 0; /* used as a refill by an earlier batch, which recorded any failure */
        } else if (s->err[j] && -(int)s->err[j] != SL_ESTATE) { /* ESTATE: shutting down */
            sl__record_error(ld, s, (uint64_t)s->index[j], -(int)s->err[j], s->reasons + (size_t)j * SL_REASON_LEN);
        }
        have += s->ok[j];
        errors += s->err[j] != 0;
    }
    if (ld->cfg.on_error == SL_ON_ERROR_RAISE) {
        s->failed = errors > 0;
    } else {
        /* refill holes from the tail, in position order */
        uint32_t j = 0;
        const uint32_t *order = ld->seq[s->epoch & 1]; /* made before dispatch */
        while (have < B && T > (k + 1) * B) {
            while (j < B && s->ok[j]) j++;
            uint64_t p = --T;
            fill_position(w, s, j, order[p], s->epoch, 0);
            if (s->ok[j]) have++;
        }
    }
    uint32_t n = 0;
    if (!s->failed) {
        /* compact: keep position order */
        uint32_t limit = SL_MAX(s->nominal, (uint32_t)B);
        for (uint32_t j = 0; j < limit; j++)
            if (s->ok[j]) {
                if (j != n) move_sample(ld, s, j, n);
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
    pthread_mutex_unlock(&ld->mu);
}

/* Commit every resolved batch in order. mu held; may drop it while
 * committing. Returns how many batches it committed or dropped: a commit
 * can open work (the next epoch), so a caller about to sleep must look for
 * work again when this is not 0. */
static int try_commit(sl__worker *w) {
    sl_loader *ld = w->ld;
    int done = 0;
    while (!ld->committing && !ld->stop) {
        sl_batch *s = slot_by_seqno(ld, ld->c_seqno, SLOT_FILLING);
        if (!s || s->pending || s->claimed < s->nominal) return done;
        done++;
        uint64_t gen = ld->gen;
        ld->committing = 1;
        pthread_mutex_unlock(&ld->mu);
        commit_slot(w, s);
        pthread_mutex_lock(&ld->mu);
        ld->committing = 0;
        pthread_cond_broadcast(&ld->cv_quiet);
        if (gen != ld->gen) { /* a reset came in meanwhile: stale */
            if (s->state == SLOT_FILLING) slot_free(ld, s);
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

/* Decode sample into position j of s. A failure is recorded now (defer 0:
 * the committer's refills, which are final) or kept in the slot for the
 * commit to record if the position is still part of the batch then. */
static void fill_position(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, int defer) {
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
        s->err[j] = (uint8_t)-rc; /* codes are -1 .. -17 */
        if (!defer && rc != SL_ESTATE) sl__record_error(ld, s, sample, rc, reason); /* ESTATE: shutting down */
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
        fill_position(w, c.slot, c.pos, c.sample, c.epoch, 1);
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
    if (c->budget == 0 && !c->shared_budget) BAD("budget is 0");
    if (c->flags & ~(SL_FLAG_CHECKSUM | SL_FLAG_EXIF | SL_FLAG_KEEP_ALPHA)) BAD("unknown flags 0x%x", c->flags);
    if (c->max_error_records > (1u << 20)) BAD("max_error_records over 1048576");
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

static void free_all(sl_loader *ld) {
    if (ld->workers)
        for (uint32_t i = 0; i < ld->nworkers; i++) sl__worker_fini(&ld->workers[i]);
    sl__free(&ld->budget, ld->workers);
    sl__free(&ld->budget, ld->slots);
    sl__free(&ld->budget, ld->region);
    sl__free(&ld->budget, ld->seq[0]);
    sl__free(&ld->budget, ld->seq[1]);
    sl__free(&ld->budget, ld->seq_tmp);
    sl__free(&ld->budget, ld->errs);
    sl__free(&ld->budget, ld->source_path);
    if (ld->src) sl__source_close(ld->src);
    pthread_cond_destroy(&ld->cv_work);
    pthread_cond_destroy(&ld->cv_ready);
    pthread_cond_destroy(&ld->cv_quiet);
    pthread_mutex_destroy(&ld->mu);
    pthread_mutex_destroy(&ld->errmu);
    sl__budget_fini(&ld->budget);
    if (ld->shared) sl__shared_unref(ld->cfg.shared_budget);
    free(ld);
}

/* ---- a shared budget (issue 8; the lead carries this into the rewrite) ------
 * The loader's own budget becomes a child of the shared one. While the
 * loader is created it is capped at what the shared budget has left, so
 * the sizing below and its messages read as for a private budget of that
 * size; once it runs the cap is lifted and only the shared limit binds. */
static void attach_shared(sl_loader *ld) {
    sl__budget *core = sl__shared_core(ld->cfg.shared_budget);
    uint64_t limit = sl__budget_limit(core), used = atomic_load(&core->used);
    uint64_t left = limit > used ? limit - used : 0;
    atomic_store(&ld->budget.limit, left);
    atomic_store(&ld->budget.ceiling, left);
    ld->cfg.budget = left;
    sl__budget_attach(&ld->budget, core);
    sl__shared_ref(ld->cfg.shared_budget);
    ld->shared = 1;
}

/* Say that the budget that was short is what a shared budget had left. */
static void shared_reason(sl_loader *ld, char *err, size_t errlen) {
    if (!ld->shared || !err || !errlen) return;
    char tmp[512], x[32];
    sl__budget *core = sl__shared_core(ld->cfg.shared_budget);
    snprintf(tmp, sizeof tmp, "shared budget of %s (what its other loaders leave): %s",
             sl__fmt_bytes(sl__budget_limit(core), x, sizeof x), err);
    snprintf(err, errlen, "%s", tmp);
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
        return rc;
    }
    if (cfg->shared_budget) {
        attach_shared(ld);
        cfg = &ld->cfg; /* sized against what the shared budget has left */
    }
    pthread_mutex_init(&ld->mu, NULL);
    pthread_mutex_init(&ld->errmu, NULL);
    pthread_cond_init(&ld->cv_work, NULL);
    pthread_cond_init(&ld->cv_ready, NULL);
    pthread_cond_init(&ld->cv_quiet, NULL);
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
    uint64_t stride, per_worker = sl__alloc_cost(SL_WORKER_READ_BASE) + SL_WORKER_DEC_BASE + SL_WORKER_STACK, workers_b;
    if ((rc = slot_stride(ld->B, ld->sample_bytes, &stride))) {
        sl__msg(err, errlen, "batch of %u x %llu bytes overflows", ld->B, (unsigned long long)ld->sample_bytes);
        goto fail;
    }
    workers_b = per_worker * ld->nworkers;
    uint64_t used = atomic_load(&ld->budget.used);
    uint64_t min_slots = SL_MAX(cfg->min_slots, cfg->prefetch ? cfg->prefetch : 1);
    uint64_t minimum = used + workers_b + (uint64_t)sl__alloc_cost((size_t)SL_MIN(stride * min_slots, SIZE_MAX / 2)) +
                       sizeof(sl_batch) * min_slots + 4096;
    if (minimum > cfg->budget) {
        sl__msg(err, errlen,
                "budget %s is below the minimum working set of %s for this pipeline: %llu batch slot(s) of %s "
                "(batch %u x %ux%ux%u) + %u workers x %s scratch + %s index; "
                "raise --budget to at least %s or lower batch size, size or workers",
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
        /* as many as fit, leaving room for scratch to grow, at most
         * max(4, 4 * workers / batch) */
        uint64_t room = cfg->budget - used - workers_b - 4096;
        uint64_t growth = SL_MIN((uint64_t)ld->nworkers * (4u << 20), cfg->budget / 8);
        uint64_t fit = room > growth ? (room - growth) / (stride + sizeof(sl_batch)) : 0;
        uint64_t cap = SL_MAX(4, (4ull * ld->nworkers + ld->B - 1) / ld->B);
        ld->nslots = (uint32_t)SL_MAX(SL_MIN(fit, cap), min_slots);
        while (ld->nslots > min_slots &&
               used + workers_b + sl__alloc_cost(stride * ld->nslots) + sizeof(sl_batch) * ld->nslots + 4096 > cfg->budget)
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

    order_for(ld, 0);
    ld->d_epoch = 0;
    ld->d_batch = 0;
    ld->tail = per;
    ld->d_open = 1;
    ld->cur_tail = per;

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)SL_WORKER_STACK);
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        if (pthread_create(&ld->workers[i].thread, &attr, sl__worker_main, &ld->workers[i])) {
            pthread_attr_destroy(&attr);
            stop_workers(ld, i);
            sl__msg(err, errlen, "could not start worker thread %u", i);
            rc = SL_ESYS;
            goto fail;
        }
    }
    pthread_attr_destroy(&attr);
    /* handshake: return only once every worker runs */
    pthread_mutex_lock(&ld->mu);
    while (ld->started < ld->nworkers) pthread_cond_wait(&ld->cv_ready, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    if (ld->shared) sl__budget_unbind_limit(&ld->budget);
    *out = ld;
    return 0;
fail:
    if (rc == SL_EBUDGET) shared_reason(ld, err, errlen);
    free_all(ld);
    return rc;
}

void sl_loader_destroy(sl_loader *ld) {
    if (!ld) return;
    stop_workers(ld, ld->nworkers);
    free_all(ld);
}

/* ---- public: iteration ------------------------------------------------------ */

int sl_loader_next(sl_loader *ld, sl_batch **out) {
    if (!ld || !out) return SL_EINVAL;
    *out = NULL;
    pthread_mutex_lock(&ld->mu);
    if (ld->poisoned) {
        pthread_mutex_unlock(&ld->mu);
        return SL_ESTATE;
    }
    uint64_t t0 = sl__now_ns();
    if (!ld->t_first_ns) ld->t_first_ns = t0;
    int rc;
    for (;;) {
        if (ld->pending_end) {
            ld->pending_end = 0;
            rc = SL_EEND;
            break;
        }
        sl_batch *s = slot_by_seqno(ld, ld->r_seqno, SLOT_READY);
        if (s) {
            ld->r_seqno++;
            ld->ready--;
            /* its failures become visible with it */
            ld->nerrs_seen += s->nerr;
            atomic_store(&ld->delivered_cno, s->cno);
            if (s->final) {
                ld->cur_epoch = s->epoch + 1;
                ld->cur_batch = 0;
                ld->cur_tail = ld->sampler.per_rank;
            } else {
                ld->cur_epoch = s->epoch;
                ld->cur_batch = s->batch + 1;
                ld->cur_tail = s->tail_after;
            }
            if (s->marker || s->failed) {
                int failed = s->failed;
                slot_free(ld, s);
                if (failed) {
                    if (s->final) ld->pending_end = 1;
                    rc = SL_ESAMPLE;
                    break;
                }
                if (s->final) {
                    rc = SL_EEND;
                    break;
                }
                continue;
            }
            s->state = SLOT_HELD;
            ld->held++;
            if (s->final) ld->pending_end = 1;
            ld->samples_out += s->n;
            ld->batches_out++;
            *out = s;
            rc = 0;
            break;
        }
        if (ld->held >= ld->nslots) {
            rc = SL_EHELD;
            break;
        }
        pthread_cond_wait(&ld->cv_ready, &ld->mu);
    }
    ld->wait_ns += sl__now_ns() - t0;
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

void sl_loader_release(sl_loader *ld, sl_batch *b) {
    if (!ld || !b) return;
    pthread_mutex_lock(&ld->mu);
    if (b->ld == ld && b->state == SLOT_HELD) {
        ld->held--;
        slot_free(ld, b);
        pthread_cond_broadcast(&ld->cv_ready);
    }
    pthread_mutex_unlock(&ld->mu);
}

int sl_loader_set_epoch(sl_loader *ld, uint64_t epoch) {
    if (!ld) return SL_EINVAL;
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
    o->budget_bytes = sl__budget_limit(&ld->budget);
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
}

size_t sl_loader_errors(const sl_loader *cld, size_t first, sl_error_record *out, size_t max) {
    if (!cld || !out) return 0;
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

int sl_loader_set_state(sl_loader *ld, const sl_state *st) {
    if (!ld || !st) return SL_EINVAL;
    uint32_t flags = (ld->cfg.shuffle ? 1u : 0) | (ld->cfg.drop_last ? 2u : 0);
    if (st->version != SL_STATE_VERSION || st->seed != ld->cfg.seed || st->dataset_size != ld->sampler.n ||
        st->rank != ld->cfg.rank || st->world_size != ld->cfg.world_size || st->batch_size != ld->B ||
        st->flags != flags || st->batch > ld->nbatches || st->tail > ld->sampler.per_rank ||
        st->tail < st->batch * ld->B)
        return SL_ESTATE;
    pthread_mutex_lock(&ld->mu);
    if (ld->poisoned) {
        pthread_mutex_unlock(&ld->mu);
        return SL_ESTATE;
    }
    if (st->batch >= ld->nbatches || !((ld->cfg.drop_last ? (st->batch + 1) * ld->B <= st->tail : st->batch * ld->B < st->tail)))
        reset_pipeline(ld, st->epoch + 1, 0, ld->sampler.per_rank); /* saved right at an epoch's end */
    else
        reset_pipeline(ld, st->epoch, st->batch, st->tail);
    pthread_mutex_unlock(&ld->mu);
    return 0;
}
