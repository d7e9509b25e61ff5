/*
 * Running a loader in tests, header-only: the small configuration most
 * cases start from; a loader that must open, or must be refused; the
 * smallest budget it accepts; epochs taken batch by batch, every batch
 * checked and recorded so that two runs compare batch for batch; an
 * epoch's chained checksum; a mid-epoch resume held against a full run;
 * a thread calling the read side of the API while the consumer runs.
 */
#ifndef SL_TEST_RUN_H
#define SL_TEST_RUN_H

#include "dataset.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "sluice.h"

#include "check.h"
#include "clock.h"

/* ---- a loader ---------------------------------------------------------------- */

/* The small configuration most loader tests start from: source read in
 * batches of 4 at 32 px by 2 workers, in 64 MiB. */
FX_FN void fx_config(sl_config *c, const char *source) {
    sl_config_init(c);
    c->source = source;
    c->batch_size = 4;
    c->size = 32;
    c->workers = 2;
    c->budget = 64u << 20;
}

/* A loader for cfg, or the test fails with the library's sentence. */
FX_FN sl_loader *fx_open(const sl_config *cfg) {
    sl_loader *ld = NULL;
    char err[512] = "";
    int rc = sl_loader_create(cfg, &ld, err, sizeof err);
    if (rc) SL_FAIL("sl_loader_create: %s (%s)", sl_strerror(rc), err);
    return ld;
}

/* sl_loader_create must refuse c: its code, and its sentence in err. */
FX_FN int fx_create_fails(const sl_config *c, char *err, size_t errlen) {
    sl_loader *ld = NULL;
    int rc = sl_loader_create(c, &ld, err, errlen);
    if (rc == 0) {
        sl_loader_destroy(ld);
        SL_FAIL("%s with fields %s was accepted", c->source, c->fields ? c->fields : "(none)");
    }
    return rc;
}

/* What sl_loader_create says to cfg with `budget` (a loader it makes is
 * destroyed). */
FX_FN int fx_create_rc(sl_config cfg, uint64_t budget) {
    cfg.budget = budget;
    sl_loader *ld = NULL;
    int rc = sl_loader_create(&cfg, &ld, NULL, 0);
    sl_loader_destroy(ld);
    return rc;
}

/* The smallest budget sl_loader_create accepts for cfg (bisection; every
 * refusal must be SL_EBUDGET). */
FX_FN uint64_t fx_min_budget(sl_config cfg) {
    uint64_t lo = 1, hi = (uint64_t)1 << 32; /* lo fails, hi succeeds */
    for (int rc; (rc = fx_create_rc(cfg, hi)) != 0; hi *= 2) CHECK_EQ(rc, SL_EBUDGET);
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        int rc = fx_create_rc(cfg, mid);
        if (rc == 0) hi = mid;
        else {
            CHECK_EQ(rc, SL_EBUDGET);
            lo = mid;
        }
    }
    return hi;
}

/* ---- epochs batch by batch --------------------------------------------------- */

#define FX_FNV_BASIS 0xcbf29ce484222325ull

/* FNV-1a of n bytes, chained from h (FX_FNV_BASIS to start). */
FX_FN uint64_t fx_fnv(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#define FX_MAXB 1024
#define FX_MAXS 16384

/* What a run of a loader with the default fields (image, label, index)
 * delivered, batch by batch. */
typedef struct fx_run {
    size_t nb, ns;
    uint64_t epoch[FX_MAXB], batch[FX_MAXB], cks[FX_MAXB], img[FX_MAXB];
    uint32_t n[FX_MAXB];
    size_t first[FX_MAXB]; /* offset of the batch's samples in idx/lab */
    int64_t idx[FX_MAXS], lab[FX_MAXS];
    int ends;               /* SL_EEND seen */
    int failed;             /* SL_ESAMPLE seen */
    int end_after[FX_MAXB]; /* SL_EEND came right after batch i */
} fx_run;

/* An empty record (calloc'd: the caller frees it). */
FX_FN fx_run *fx_run_new(void) {
    fx_run *r = calloc(1, sizeof *r);
    CHECK(r != NULL);
    return r;
}

/* Check a batch's fields against each other and the loader, then record it. */
FX_FN void fx_run_add(sl_loader *ld, fx_run *r, sl_batch *b) {
    sl_field img, lab, idx;
    CHECK_EQ(sl_batch_num_fields(b), 3);
    CHECK_OK(sl_batch_find(b, "image", &img));
    CHECK_OK(sl_batch_find(b, "label", &lab));
    CHECK_OK(sl_batch_find(b, "index", &idx));
    uint32_t n = sl_batch_len(b);
    CHECK_EQ(img.shape[0], n);
    CHECK_EQ(img.dtype, SL_DTYPE_UINT8);
    CHECK_EQ(lab.dtype, SL_DTYPE_INT64);
    CHECK_EQ(img.nbytes, (uint64_t)img.shape[0] * img.shape[1] * img.shape[2] * img.shape[3]);
    CHECK(r->nb < FX_MAXB && r->ns + n <= FX_MAXS);
    size_t i = r->nb++;
    r->epoch[i] = sl_batch_epoch(b);
    r->batch[i] = sl_batch_index(b);
    r->cks[i] = sl_batch_checksum(b);
    r->img[i] = fx_fnv(img.data, (size_t)img.nbytes, FX_FNV_BASIS);
    r->n[i] = n;
    r->first[i] = r->ns;
    for (uint32_t j = 0; j < n; j++) {
        r->idx[r->ns] = ((int64_t *)idx.data)[j];
        r->lab[r->ns] = ((int64_t *)lab.data)[j];
        CHECK(r->idx[r->ns] >= 0 && (uint64_t)r->idx[r->ns] < sl_loader_dataset_size(ld));
        r->ns++;
    }
}

/* Take batches until `epochs` epoch ends were seen or `max_batches` were
 * recorded; the consumer sleeps `pause_ms` per batch. */
FX_FN void fx_drive(sl_loader *ld, fx_run *r, int epochs, size_t max_batches, int pause_ms) {
    while (r->ends < epochs && r->nb < max_batches) {
        sl_batch *b = NULL;
        int rc = sl_loader_next(ld, &b);
        if (rc == SL_EEND) {
            if (r->nb) r->end_after[r->nb - 1] = 1;
            r->ends++;
            continue;
        }
        if (rc == SL_ESAMPLE) {
            r->failed++;
            continue;
        }
        if (rc) SL_FAIL("sl_loader_next: %s", sl_strerror(rc));
        fx_run_add(ld, r, b);
        if (pause_ms) bx_sleep_ms(pause_ms);
        sl_loader_release(ld, b);
    }
}

/* What ld delivers in its next `epochs` epochs (the caller frees it). */
FX_FN fx_run *fx_run_epochs(sl_loader *ld, int epochs) {
    fx_run *r = fx_run_new();
    fx_drive(ld, r, epochs, FX_MAXB, 0);
    return r;
}

/* What a new loader for cfg delivers in `epochs` epochs (the caller frees
 * it); the loader is destroyed. */
FX_FN fx_run *fx_reference(const sl_config *cfg, int epochs) {
    sl_loader *ld = fx_open(cfg);
    fx_run *r = fx_run_epochs(ld, epochs);
    sl_loader_destroy(ld);
    return r;
}

/* Batches a[a0 ..) and b[b0 ..) equal for count batches: bytes, labels,
 * indices, numbering. */
FX_FN void fx_same_batches(const fx_run *a, size_t a0, const fx_run *b, size_t b0, size_t count, const char *what) {
    for (size_t k = 0; k < count; k++) {
        size_t i = a0 + k, j = b0 + k;
        if (a->epoch[i] != b->epoch[j] || a->batch[i] != b->batch[j] || a->n[i] != b->n[j] ||
            a->cks[i] != b->cks[j] || a->img[i] != b->img[j])
            SL_FAIL("%s: batch %zu differs: epoch %llu/%llu batch %llu/%llu n %u/%u checksum %016llx/%016llx", what, k,
                    (unsigned long long)a->epoch[i], (unsigned long long)b->epoch[j], (unsigned long long)a->batch[i],
                    (unsigned long long)b->batch[j], a->n[i], b->n[j], (unsigned long long)a->cks[i],
                    (unsigned long long)b->cks[j]);
        for (uint32_t s = 0; s < a->n[i]; s++) {
            if (a->idx[a->first[i] + s] != b->idx[b->first[j] + s] || a->lab[a->first[i] + s] != b->lab[b->first[j] + s])
                SL_FAIL("%s: batch %zu sample %u: index %lld/%lld", what, k, s, (long long)a->idx[a->first[i] + s],
                        (long long)b->idx[b->first[j] + s]);
        }
    }
}

/* Take and give back batches to the end of the epoch (samples that fail
 * under the raise policy passed over). */
FX_FN void fx_finish_epoch(sl_loader *ld) {
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0 || rc == SL_ESAMPLE) sl_loader_release(ld, b);
    CHECK_EQ(rc, SL_EEND);
}

/* ---- checksums and resume ---------------------------------------------------- */

/* A hash of the batch checksums of ld's next epoch, taken to its end (its
 * configuration needs SL_FLAG_CHECKSUM), and the samples delivered
 * (samples may be NULL). */
FX_FN uint64_t fx_loader_sum(sl_loader *ld, uint64_t *samples) {
    uint64_t h = 0, n = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        uint64_t pair[2] = {h, sl_batch_checksum(b)};
        h = sl_hash64(pair, sizeof pair, 1);
        n += sl_batch_len(b);
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    if (samples) *samples = n;
    return h;
}

/* fx_loader_sum of one epoch of a new loader for c, then destroyed. The
 * case fails if create does. */
FX_FN uint64_t fx_epoch_sum(const sl_config *c, uint64_t *samples) {
    sl_loader *ld = fx_open(c);
    uint64_t h = fx_loader_sum(ld, samples);
    sl_loader_destroy(ld);
    return h;
}

/* Resume: take `after` batches of epoch 0 with configuration a, save the
 * state, resume it in a new loader with configuration b (another worker
 * count, say): the rest of the epoch must equal the same batches of a full
 * run of a, checksum for checksum (a and b need SL_FLAG_CHECKSUM). */
FX_FN void fx_check_resume(const sl_config *a, const sl_config *b, int after) {
    sl_loader *ld = fx_open(a);
    sl_batch *bt;
    uint64_t sums[256];
    int n = 0;
    while (sl_loader_next(ld, &bt) == 0) {
        CHECK(n < 256);
        sums[n++] = sl_batch_checksum(bt);
        sl_loader_release(ld, bt);
    }
    sl_loader_destroy(ld);
    CHECK(after < n);
    sl_state st;
    ld = fx_open(a);
    for (int k = 0; k < after; k++) {
        CHECK_OK(sl_loader_next(ld, &bt));
        sl_loader_release(ld, bt);
    }
    CHECK_OK(sl_loader_get_state(ld, &st));
    sl_loader_destroy(ld);
    ld = fx_open(b);
    CHECK_OK(sl_loader_set_state(ld, &st));
    for (int k = after; k < n; k++) {
        CHECK_OK(sl_loader_next(ld, &bt));
        CHECK_EQ(sl_batch_checksum(bt), sums[k]);
        sl_loader_release(ld, bt);
    }
    CHECK_EQ(sl_loader_next(ld, &bt), SL_EEND);
    sl_loader_destroy(ld);
}

/* ---- the read side from another thread --------------------------------------- */

/* A thread that calls fn(ld, ctx) again and again, yielding in between,
 * until fx_poll_stop: the read side of the API (stats, state, errors)
 * called while the workers and the consumer run. */
typedef struct fx_poller {
    sl_loader *ld;
    void (*fn)(sl_loader *ld, void *ctx);
    void *ctx;
    _Atomic int stop;
    pthread_t thread;
} fx_poller;

FX_FN void *fx_poll_main(void *arg) {
    fx_poller *p = arg;
    while (!atomic_load(&p->stop)) {
        p->fn(p->ld, p->ctx);
        sched_yield();
    }
    return NULL;
}

FX_FN void fx_poll_start(fx_poller *p, sl_loader *ld, void (*fn)(sl_loader *ld, void *ctx), void *ctx) {
    p->ld = ld;
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->stop, 0);
    CHECK_EQ(pthread_create(&p->thread, NULL, fx_poll_main, p), 0);
}

FX_FN void fx_poll_stop(fx_poller *p) {
    atomic_store(&p->stop, 1);
    CHECK_EQ(pthread_join(p->thread, NULL), 0);
}

#endif
