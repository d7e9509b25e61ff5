/*
 * A worker: one thread, its decoder state and its scratch.
 *
 * Memory. Each worker holds a baseline for life (a read buffer and decoder
 * room, counted as fixed at create) and grows it for a sample that needs
 * more under the budget's wait protocol (base/scratch.h). After each sample
 * a worker gives its growth back whenever someone waits, and always before
 * it goes idle (an idle worker must not hold what a waiter needs: it may be
 * idle exactly because the batch waits for that waiter's sample). A need
 * larger than the per-sample room (conf->sample_cap, a quarter of the budget:
 * a rule that depends only on the sample and the configuration, admit.c)
 * is an SL_EBUDGET error record for that sample, at once; create keeps that
 * room out of the fixed part, so any smaller need is granted in the end.
 *
 * Transient failures. Out of file descriptors (EMFILE, ENFILE), EAGAIN,
 * EINTR and the system refusing memory for a moment are not the sample's
 * fault: the worker gives back its growth, sleeps (1 ms, doubling to
 * 50 ms) and tries the sample again, for up to SL_TRANSIENT_MAX_S.
 *
 * Stages. The worker holds no format knowledge: for each field of the
 * schema it calls the field's kind (fields/), which takes the value from
 * the source, reads and decodes it, and writes it into the slot; with a
 * sample cache, through it (lcache.c), at the sample's time in the order.
 */
#include "pipeline/worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/thread.h"
#include "base/util.h"

/* The decoder's arena is unmapped down to its baseline before the room
 * behind it is given back (scratch.h: trim). */
static void trim_decoder(void *ctx) {
    sl__worker *w = ctx;
    sl__decoder_trim(w->dec, SL_WORKER_DEC_BASE);
}

static int worker_init(sl__worker *w, sl__workers *ws, const sl__conf *conf, sl__lcache *cache,
                       const sl__rahead *ra, sl__gstage *gs, const _Atomic int *cancel, uint32_t id) {
    memset(w, 0, sizeof *w);
    w->conf = conf;
    w->cache = cache;
    w->ra = ra;
    w->cancel = cancel;
    w->crew = ws;
    w->id = id;
    /* its thread's stack, counted while the thread lives */
    if (sl__budget_try(conf->budget, SL_WORKER_STACK, SL_MEM_OTHER)) {
        memset(w, 0, sizeof *w);
        return SL_EBUDGET;
    }
    int rc = sl__scratch_init(&w->scratch, conf->budget, SL_WORKER_READ_BASE, SL_WORKER_DEC_BASE);
    if (rc) {
        sl__budget_release(conf->budget, SL_WORKER_STACK, SL_MEM_OTHER);
        memset(w, 0, sizeof *w);
        return rc;
    }
    w->scratch.cap = conf->sample_cap;
    if (!(w->dec = sl__decoder_new())) {
        sl__scratch_fini(&w->scratch);
        sl__budget_release(conf->budget, SL_WORKER_STACK, SL_MEM_OTHER);
        memset(w, 0, sizeof *w);
        return SL_ENOMEM;
    }
    w->scratch.trim = trim_decoder;
    w->scratch.trim_ctx = w;
    sl__gstage_hand_init(&w->hand, gs, id);
    return 0;
}

static void worker_fini(sl__worker *w) {
    if (!w->conf) return;
    sl__scratch_drop(&w->scratch);
    sl__decoder_free(w->dec); /* its arena unmapped before its room is given back */
    w->scratch.trim = NULL;
    sl__scratch_fini(&w->scratch);
    sl__budget_release(w->conf->budget, SL_WORKER_STACK, SL_MEM_OTHER);
    memset(w, 0, sizeof *w);
}

void sl__worker_idle(sl__worker *w) { sl__scratch_drop(&w->scratch); }

void sl__worker_woke(sl__worker *w, uint64_t t0_ns) {
    atomic_fetch_add_explicit(&w->idle_ns, sl__now_ns() - t0_ns, memory_order_relaxed);
}

/* A failure's reason names the field when the sample has several files. */
static void name_field(const sl__conf *c, const sl__field *f, char *reason, size_t rlen) {
    uint32_t files = 0;
    for (uint32_t i = 0; i < c->schema.nfields; i++)
        files += c->schema.fields[i].kind->value_type == SL__VAL_FILE ||
                 c->schema.fields[i].kind->value_type == SL__VAL_FILES;
    if (files < 2 && f->kind->value_type != SL__VAL_NUMBERS && f->kind->value_type != SL__VAL_INT) return;
    char tmp[SL_REASON_MAX];
    snprintf(tmp, sizeof tmp, "%s", reason);
    sl__msg(reason, rlen, "%s: %s", f->name, tmp);
}

/* Every field of the sample, once. */
static int fill_once(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, uint64_t pos,
                     int cpu_only, char *reason) {
    const sl__conf *c = w->conf;
    const sl__layout *L = &c->layout;
    reason[0] = 0;
    sl__load load = {.src = c->src, .scratch = &w->scratch, .dec = w->dec, .cancel = w->cancel,
                     .seed = c->cfg.seed, .epoch = epoch, .index = sample, .max_bytes = c->cfg.max_bytes,
                     .max_pixels = c->cfg.max_pixels,
                     .now = sl__sampler_time(&c->sampler, epoch, pos), /* the sample cache's clock */
                     .io = &w->cache->io};
    if (sl__gstage_on(w->hand.g)) { /* the image may go to the GPU (gpustage.c) */
        sl__gstage_begin(&w->hand, s, s->id, j, sample, epoch, cpu_only);
        load.defer = &w->hand.defer;
    }
    int rc = 0;
    for (uint32_t i = 0; i < c->schema.nfields && rc == 0; i++) {
        const sl__field *f = &c->schema.fields[i];
        uint8_t *dst = sl__layout_at(L, s->base, L->field_out[i], j);
        int64_t *len = L->len_out[i] ? (int64_t *)sl__layout_at(L, s->base, L->len_out[i], j) : NULL;
        sl__rahead_field(w->ra, &load, i); /* its file may be read ahead (remote sources) */
        rc = sl__lcache_load(w->cache, &load, i, dst, len, reason);
        if (rc) name_field(c, f, reason, SL_REASON_LEN);
    }
    return rc;
}

static void sleep_us(uint64_t us) {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

int sl__worker_fill(sl__worker *w, sl_batch *s, uint32_t j, uint64_t sample, uint64_t epoch, uint64_t pos,
                    int cpu_only) {
    const sl__conf *c = w->conf;
    const sl__layout *L = &c->layout;
    char *reason = s->reasons + (size_t)j * SL_REASON_LEN;
    uint64_t t0 = 0, delay_us = 1000, t_start = sl__now_ns();
    int rc;
    for (;;) {
        rc = fill_once(w, s, j, sample, epoch, pos, cpu_only, reason);
        if (rc == SL_ENOENT && sl__source_gone(c->src)) {
            atomic_store(&w->crew->source_gone, 1);
            sl__msg(reason, SL_REASON_LEN, "the dataset folder was removed");
        }
        if (rc != SL_EAGAIN && rc != SL_ENOMEM) break;
        uint64_t now = sl__now_ns();
        if (!t0) t0 = now;
        if (now - t0 >= (uint64_t)SL_TRANSIENT_MAX_S * 1000000000u) {
            size_t at = strlen(reason);
            if (at + 1 < SL_REASON_LEN) sl__msg(reason + at, SL_REASON_LEN - at, " (retried for %d s)", SL_TRANSIENT_MAX_S);
            break;
        }
        if (atomic_load(w->cancel)) { /* set with the engine's stop */
            sl__msg(reason, SL_REASON_LEN, "loader closing");
            rc = SL_ESTATE;
            break;
        }
        sl__scratch_drop(&w->scratch); /* hold nothing while waiting */
        sleep_us(delay_us);
        delay_us = SL_MIN(delay_us * 2, (uint64_t)50000);
    }
    sl__gstage_end(&w->hand, &rc, t_start, s->base, reason); /* a CPU decode goes to the device now */
    int64_t ix = (int64_t)sample;
    memcpy(sl__layout_at(L, s->base, L->index_out, j), &ix, 8);
    if (rc == 0 && (c->cfg.flags & SL_FLAG_CHECKSUM)) s->hash[j] = sl__layout_hash(L, s->base, j);
    s->ok[j] = rc == 0;
    s->err[j] = (uint8_t)-rc; /* codes are -1 .. -20: kept for the commit to record */
    if (sl__budget_has_waiters(c->budget)) sl__scratch_drop(&w->scratch);
    atomic_fetch_add_explicit(&w->busy_ns, sl__now_ns() - t_start, memory_order_relaxed);
    return rc;
}

/* Lower the calling thread's priority by `by` (Linux: a thread has its own
 * nice value). Raising nice needs no privilege; a failure leaves the
 * thread as it was, which only costs the training loop its precedence. */
static void lower_priority(int by) {
    if (by <= 0) return;
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, tid);
    if (now == -1 && errno) return;
    (void)setpriority(PRIO_PROCESS, tid, now + by > 19 ? 19 : now + by);
}

static void *worker_main(void *arg) {
    sl__worker *w = arg;
    lower_priority(w->conf->cfg.worker_nice);
    w->crew->run(w->crew->ctx, w);
    return NULL;
}

/* ---- the table ----------------------------------------------------------------- */

uint64_t sl__workers_alloc(sl__workers *ws, sl__budget *b, uint32_t n) {
    ws->n = ws->size = n;
    ws->w = sl__calloc(b, n, sizeof(sl__worker), SL_MEM_OTHER);
    return ws->w ? 0 : (uint64_t)n * sizeof(sl__worker);
}

void sl__workers_trim(sl__workers *ws, uint32_t n) {
    ws->n = SL_MIN(n, ws->size);
}

int sl__workers_init(sl__workers *ws, const sl__conf *conf, sl__lcache *cache, const sl__rahead *ra,
                     sl__gstage *gs, const _Atomic int *cancel, char *err, size_t errlen) {
    int rc;
    for (uint32_t i = 0; i < ws->n; i++) {
        if ((rc = worker_init(&ws->w[i], ws, conf, cache, ra, gs, cancel, i))) {
            for (uint32_t j = 0; j < i; j++) worker_fini(&ws->w[j]);
            memset(ws->w, 0, sizeof(sl__worker) * ws->n);
            sl__msg(err, errlen, "worker scratch: %s", sl_strerror(rc));
            return rc;
        }
    }
    return 0;
}

/* Each through sl__thread_start (base/thread.h: asynchronous signals
 * blocked, named, the stack the budget counts). */
int sl__workers_start(sl__workers *ws, sl__worker_run_fn run, void *ctx, uint32_t *started, char *err,
                      size_t errlen) {
    *started = 0;
    ws->run = run;
    ws->ctx = ctx;
    for (uint32_t i = 0; i < ws->n; i++) {
        char name[32]; /* cut to SL_THREAD_NAME_MAX by the start */
        snprintf(name, sizeof name, "sl-worker-%u", i);
        if (sl__thread_start(&ws->w[i].thread, worker_main, &ws->w[i], SL_WORKER_STACK, name)) {
            sl__msg(err, errlen, "could not start worker thread %u", i);
            return SL_ESYS;
        }
        *started = i + 1;
    }
    return 0;
}

void sl__workers_join(sl__workers *ws, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) pthread_join(ws->w[i].thread, NULL);
}

void sl__workers_fini(sl__workers *ws, sl__budget *b, int in_child) {
    for (uint32_t i = 0; ws->w && i < ws->n; i++) {
        sl__worker *w = &ws->w[i];
        if (!in_child) worker_fini(w);
        else if (w->conf) sl__scratch_fini(&w->scratch);
    }
    sl__free(b, ws->w);
    ws->w = NULL;
}

uint64_t sl__workers_busy_ns(sl__workers *ws) {
    uint64_t ns = 0;
    for (uint32_t i = 0; i < ws->n; i++) ns += atomic_load_explicit(&ws->w[i].busy_ns, memory_order_relaxed);
    return ns;
}

void sl__workers_stats(sl__workers *ws, sl_stats *o) {
    o->workers = ws->n;
    for (uint32_t i = 0; i < ws->n; i++) {
        o->worker_busy_s += (double)atomic_load(&ws->w[i].busy_ns) / 1e9;
        o->worker_idle_s += (double)atomic_load(&ws->w[i].idle_ns) / 1e9;
    }
}
