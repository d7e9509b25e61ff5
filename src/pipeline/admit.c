/*
 * Admission: which samples the budget can ever hold, decided so that the
 * delivered bytes never depend on the worker count or on timing.
 *
 * The rule. A sample asks its worker for growth beyond the worker's fixed
 * baseline: for each field, its file (when over the baseline read buffer)
 * plus the decode memory its plan needs (beyond the baseline decoder
 * quota); the fields load one after another, so the sample's growth is the
 * largest of its fields'. A sample whose growth exceeds sample_cap =
 * budget / 4 is an SL_EBUDGET error record (base/scratch.c refuses it); any
 * other sample gets its growth, waiting for it if the budget is busy. Both
 * sides depend only on the sample (header, file size, its plan for the
 * epoch) and the configuration — not on how many workers run, nor on what
 * they hold at the moment. Create keeps the quarter out of the fixed part
 * (slots, worker baselines, index), so a waiter's growth always fits once
 * the other workers give theirs back (mem.h: waits cannot deadlock).
 *
 * The check at create. "Ordinary samples must not be refused": create reads
 * the headers of up to ADMIT_PROBES samples spread evenly over the dataset
 * (indices k * N / K, so the same ones every time), bounds each one's need
 * over every epoch (each field's kind: sl__kind.admit; kinds without one
 * are not checked here, only refused per sample), and refuses the budget when more
 * than a tenth of the readable ones would be refused, naming one and the
 * budget that would hold nine in ten. Samples over max_pixels / max_bytes
 * are left out: no budget changes their fate.
 */
#include "pipeline/admit.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "ops/ops.h"

#define ADMIT_PROBES 32

/* One probe: 1 and the growth dataset sample i needs (*need: the largest
 * of its fields' that their kinds can bound, with *what naming it), or 0
 * when no field could be bounded. */
static int probe_need(const sl__conf *c, sl__worker *w, uint64_t i, uint64_t *need, char *what, size_t wlen) {
    sl__load L = {.src = c->src, .scratch = &w->scratch, .dec = w->dec, .cancel = w->cancel, .seed = c->cfg.seed,
                  .index = i, .max_bytes = c->cfg.max_bytes, .max_pixels = c->cfg.max_pixels};
    int ok = 0;
    *need = 0;
    for (uint32_t k = 0; k < c->schema.nfields; k++) {
        const sl__field *f = &c->schema.fields[k];
        const sl__field *e = f->of ? f->of : f; /* a sequence: its first element stands for the rest */
        uint64_t n;
        char w2[64];
        if (!e->kind->admit || f->col < 0 || !e->kind->admit(&L, e, &n, w2, sizeof w2)) continue;
        if (!ok || n > *need) {
            *need = n;
            snprintf(what, wlen, "%s", w2);
        }
        ok = 1;
    }
    return ok;
}

static void sort_u64(uint64_t *v, uint32_t n) {
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

int sl__admit_check(const sl__conf *c, sl__worker *w, char *err, size_t errlen) {
    uint64_t N = sl__source_count(c->src), cap = c->sample_cap;
    uint32_t K = (uint32_t)SL_MIN(N, (uint64_t)ADMIT_PROBES), probed = 0, over = 0;
    uint64_t needs[ADMIT_PROBES], worst = 0, worst_i = 0;
    char worst_what[64] = "";
    for (uint32_t k = 0; k < K; k++) {
        uint64_t i = (uint64_t)k * N / K, need;
        char what[64];
        if (!probe_need(c, w, i, &need, what, sizeof what)) continue;
        needs[probed++] = need;
        if (need > cap) over++;
        if (need > worst) {
            worst = need, worst_i = i;
            snprintf(worst_what, sizeof worst_what, "%s", what);
        }
    }
    if ((uint64_t)over * 10 <= probed) return 0;
    /* the budget whose quarter holds nine in ten of the probes */
    sort_u64(needs, probed);
    uint64_t q = needs[(probed * 9 + 9) / 10 - 1], want;
    if (sl__mul(q, 4, &want)) want = UINT64_MAX;
    char path[512], b1[32], b2[32], b3[32], b4[32];
    if (sl__source_path(c->src, worst_i, path, sizeof path) < 0)
        snprintf(path, sizeof path, "sample %llu", (unsigned long long)worst_i);
    sl__msg(err, errlen,
            "budget %s leaves one sample %s for its decode (a quarter of the budget), but %u of %u sampled files "
            "need more, e.g. %s (%s) needs %s; raise the budget to at least %s (or lower max_pixels)",
            sl__fmt_bytes(c->cfg.budget, b1, sizeof b1), sl__fmt_bytes(cap, b2, sizeof b2), over, probed, path,
            worst_what,
            sl__fmt_bytes(worst, b3, sizeof b3), sl__fmt_bytes(SL_MAX(want, c->cfg.budget + 1), b4, sizeof b4));
    return SL_EBUDGET;
}
