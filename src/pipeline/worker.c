/*
 * A worker: one thread, its decoder and its buffers.
 *
 * Memory. Each worker holds a baseline for life (a read buffer and a
 * decoder quota, counted as fixed at create). A sample that needs more
 * grows the worker's buffers with try-requests; if the budget refuses, the
 * worker gives back all its growth and waits, first come first served, for
 * the sample's whole need at once, then re-reads the file if its bytes
 * were in the dropped buffer. A waiter therefore holds nothing it could
 * give back, so waits cannot deadlock; after each sample a worker gives
 * its growth back whenever someone waits, and always before it goes idle
 * (an idle worker must not hold what a waiter needs: it may be idle exactly
 * because the batch waits for that waiter's sample). A need larger than the budget
 * can ever give (limit - fixed) is an SL_EBUDGET error record for that
 * sample, at once.
 */
#include <string.h>

#include "../ops/ops.h"
#include "loader_impl.h"
#include "../base/util.h"

int sl__worker_init(sl__worker *w, sl_loader *ld, uint32_t id) {
    memset(w, 0, sizeof *w);
    w->ld = ld;
    w->id = id;
    w->dec = sl__decoder_new();
    w->rbase = sl__alloc(&ld->budget, SL_WORKER_READ_BASE, SL_MEM_SCRATCH);
    w->rbase_cap = SL_WORKER_READ_BASE;
    int rc = sl__budget_try(&ld->budget, SL_WORKER_DEC_BASE, SL_MEM_DECODER);
    if (rc == 0 && sl__budget_try(&ld->budget, SL_WORKER_STACK, SL_MEM_OTHER)) { /* its thread's stack */
        sl__budget_release(&ld->budget, SL_WORKER_DEC_BASE, SL_MEM_DECODER);
        rc = SL_EBUDGET;
    }
    if (!w->dec || !w->rbase || rc) {
        /* the budget is to blame only for a refused reservation, or a read
         * buffer it could not hold; otherwise the system refused */
        uint64_t used = atomic_load(&ld->budget.used);
        int code = rc                                                                       ? SL_EBUDGET
                   : !w->rbase && used + sl__alloc_cost(SL_WORKER_READ_BASE) > ld->budget.limit ? SL_EBUDGET
                                                                                            : SL_ENOMEM;
        sl__decoder_free(w->dec);
        if (rc == 0) {
            sl__budget_release(&ld->budget, SL_WORKER_DEC_BASE, SL_MEM_DECODER);
            sl__budget_release(&ld->budget, SL_WORKER_STACK, SL_MEM_OTHER);
        }
        sl__free(&ld->budget, w->rbase);
        memset(w, 0, sizeof *w);
        return code;
    }
    return 0;
}

static void drop_growth(sl__worker *w) {
    sl__budget *b = &w->ld->budget;
    if (w->rbig) sl__unmap_prepaid(w->rbig, w->rbig_cap);
    w->rbig = NULL;
    w->rbig_cap = 0;
    sl__decoder_trim(w->dec, SL_WORKER_DEC_BASE); /* unmapped before it is given back */
    sl__budget_release(b, w->grow_read, SL_MEM_SCRATCH);
    sl__budget_release(b, w->grow_dec, SL_MEM_DECODER);
    w->grow_read = w->grow_dec = 0;
}

void sl__worker_idle(sl__worker *w) { drop_growth(w); }

void sl__worker_fini(sl__worker *w) {
    if (!w->ld) return;
    drop_growth(w);
    sl__decoder_free(w->dec);
    sl__budget_release(&w->ld->budget, SL_WORKER_DEC_BASE, SL_MEM_DECODER);
    sl__budget_release(&w->ld->budget, SL_WORKER_STACK, SL_MEM_OTHER);
    sl__free(&w->ld->budget, w->rbase);
    memset(w, 0, sizeof *w);
}

/* Make the buffers hold a file of `file` bytes and a decode needing `dec`
 * bytes. *lost = 1 if the read buffer was dropped (re-read the file). */
static int ensure(sl__worker *w, uint64_t file, uint64_t dec, int *lost, char *reason, size_t rlen) {
    sl__budget *b = &w->ld->budget;
    uint64_t rneed = file > w->rbase_cap ? sl__map_cost((size_t)file) : 0;
    uint64_t dneed = dec > SL_WORKER_DEC_BASE ? dec - SL_WORKER_DEC_BASE : 0;
    *lost = 0;
    if (rneed <= w->grow_read && dneed <= w->grow_dec) return 0;
    uint64_t dr = rneed > w->grow_read ? rneed - w->grow_read : 0;
    uint64_t dd = dneed > w->grow_dec ? dneed - w->grow_dec : 0;
    if (sl__budget_try(b, dr, SL_MEM_SCRATCH) == 0) {
        if (sl__budget_try(b, dd, SL_MEM_DECODER) == 0) {
            if (dr) {
                void *m = sl__map_prepaid((size_t)file);
                if (!m) {
                    sl__budget_release(b, dr, SL_MEM_SCRATCH);
                    sl__budget_release(b, dd, SL_MEM_DECODER);
                    sl__msg(reason, rlen, "the system refused %llu bytes", (unsigned long long)rneed);
                    return SL_ENOMEM;
                }
                if (w->rbig) sl__unmap_prepaid(w->rbig, w->rbig_cap);
                w->rbig = m;
                w->rbig_cap = (size_t)rneed;
                *lost = 1;
            }
            w->grow_read += dr;
            w->grow_dec += dd;
            return 0;
        }
        sl__budget_release(b, dr, SL_MEM_SCRATCH);
    }
    /* Pressure: give everything back, then wait for the whole need. */
    drop_growth(w);
    *lost = 1;
    uint64_t total = rneed + dneed;
    int rc = sl__budget_wait(b, total, SL_MEM_SCRATCH);
    if (rc) {
        char x[32], y[32];
        if (rc == SL_EBUDGET)
            sl__msg(reason, rlen, "needs %s of scratch; the budget leaves %s beyond its fixed part",
                    sl__fmt_bytes(total + SL_WORKER_DEC_BASE, x, sizeof x), sl__fmt_bytes(sl__budget_headroom(b), y, sizeof y));
        else
            sl__msg(reason, rlen, "loader closing");
        return rc;
    }
    sl__budget_recat(b, dneed, SL_MEM_SCRATCH, SL_MEM_DECODER);
    if (rneed) {
        w->rbig = sl__map_prepaid((size_t)file);
        if (!w->rbig) {
            sl__budget_release(b, rneed, SL_MEM_SCRATCH);
            sl__budget_release(b, dneed, SL_MEM_DECODER);
            sl__msg(reason, rlen, "the system refused %llu bytes", (unsigned long long)rneed);
            return SL_ENOMEM;
        }
        w->rbig_cap = (size_t)rneed;
    }
    w->grow_read = rneed;
    w->grow_dec = dneed;
    return 0;
}

int sl__worker_sample(sl__worker *w, uint64_t index, uint64_t epoch, uint8_t *dst, char *reason, size_t rlen) {
    sl_loader *ld = w->ld;
    const sl_config *cfg = &ld->cfg;
    sl__sample_file f;
    int rc = sl__source_open_sample(ld->src, index, &f, reason, rlen);
    if (rc) return rc;
    int lost;
    uint8_t *buf;
    sl_image_info info;
    sl__plan plan;
    if ((rc = sl__check_bytes(f.size, cfg->max_bytes, reason, rlen))) goto out;
    if ((rc = ensure(w, f.size, SL_WORKER_DEC_BASE + w->grow_dec, &lost, reason, rlen))) goto out;
    buf = f.size > w->rbase_cap ? w->rbig : w->rbase;
    if ((rc = sl__sample_read(&f, buf, reason, rlen))) goto out;
    if ((rc = sl__probe(buf, f.size, &info, reason, rlen))) goto out;
    if ((rc = sl__check_pixels(&info, cfg->max_pixels, reason, rlen))) goto out;
    sl__plan_params pp = {cfg->preset, cfg->size, cfg->seed, epoch, index, cfg->flags};
    if ((rc = sl__plan_sample(&info, &pp, &plan, reason, rlen))) goto out;
    if ((rc = ensure(w, f.size, plan.mem, &lost, reason, rlen))) goto out;
    if (lost && f.size > w->rbase_cap) {
        buf = w->rbig;
        if ((rc = sl__sample_read(&f, buf, reason, rlen))) goto out;
    }
    sl__quota q;
    if ((rc = sl__decoder_quota(w->dec, SL_WORKER_DEC_BASE + w->grow_dec, &q, reason, rlen))) goto out;
    rc = sl__run(w->dec, buf, (size_t)f.size, &info, &plan, &q, dst, reason, rlen);
    if (rc == SL_EBUDGET && plan.mem < (UINT64_MAX >> 2)) {
        /* The decoder needed more than its bound from the header (another
         * libjpeg build can; the arena refuses exactly at the bound): once
         * more with twice the room, reserved like any growth, before
         * calling the sample bad. */
        if ((rc = ensure(w, f.size, plan.mem * 2, &lost, reason, rlen))) goto out;
        if (lost && f.size > w->rbase_cap && (rc = sl__sample_read(&f, w->rbig, reason, rlen))) goto out;
        buf = f.size > w->rbase_cap ? w->rbig : w->rbase;
        if ((rc = sl__decoder_quota(w->dec, SL_WORKER_DEC_BASE + w->grow_dec, &q, reason, rlen))) goto out;
        rc = sl__run(w->dec, buf, (size_t)f.size, &info, &plan, &q, dst, reason, rlen);
    }
out:
    sl__sample_close(&f);
    if (sl__budget_has_waiters(&ld->budget)) drop_growth(w);
    return rc;
}

void *sl__worker_main(void *arg) {
    sl__loader_run(arg);
    return NULL;
}
