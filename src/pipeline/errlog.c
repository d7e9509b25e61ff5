/* The error records (see errlog.h). */
#include "pipeline/errlog.h"

#include <stdio.h>

#include "base/abi.h"
#include "base/util.h"

int sl__errlog_sync_init(sl__errlog *l) {
    if (pthread_mutex_init(&l->mu, NULL)) return SL_ESYS;
    l->mu_init = 1;
    return 0;
}

void sl__errlog_sync_fini(sl__errlog *l) {
    if (l->mu_init) pthread_mutex_destroy(&l->mu);
    l->mu_init = 0;
}

uint64_t sl__errlog_alloc(sl__errlog *l, sl__budget *b, uint32_t max) {
    l->max = max;
    l->recs = sl__calloc(b, SL_MAX(max, 1), sizeof(sl__error), SL_MEM_OTHER);
    return l->recs ? 0 : (uint64_t)SL_MAX(max, 1) * sizeof(sl__error);
}

void sl__errlog_free(sl__errlog *l, sl__budget *b) {
    sl__free(b, l->recs);
    l->recs = NULL;
}

void sl__errlog_add(sl__errlog *l, uint64_t cno, uint64_t epoch, uint64_t index, int code, const char *reason) {
    pthread_mutex_lock(&l->mu);
    if (l->kept < l->max) {
        sl__error *e = &l->recs[l->kept++];
        e->cno = cno;
        e->rec.index = index;
        e->rec.epoch = epoch;
        e->rec.code = code;
        snprintf(e->rec.reason, sizeof e->rec.reason, "%s", reason && *reason ? reason : sl_strerror(code));
    }
    pthread_mutex_unlock(&l->mu);
}

void sl__errlog_delivered(sl__errlog *l, uint64_t cno) { atomic_store(&l->delivered, cno); }

void sl__errlog_drop_undelivered(sl__errlog *l) {
    pthread_mutex_lock(&l->mu);
    uint64_t seen = atomic_load(&l->delivered);
    while (l->kept > 0 && l->recs[l->kept - 1].cno > seen) l->kept--;
    pthread_mutex_unlock(&l->mu);
}

size_t sl__errlog_list(sl__errlog *l, size_t first, sl_error_record *out, size_t max, size_t elem_size) {
    uint64_t seen = atomic_load(&l->delivered);
    pthread_mutex_lock(&l->mu);
    size_t n = 0;
    for (size_t i = first; i < l->kept && n < max && l->recs[i].cno <= seen; i++, n++)
        sl__abi_out((char *)out + n * elem_size, elem_size, &l->recs[i].rec, sizeof l->recs[i].rec);
    pthread_mutex_unlock(&l->mu);
    return n;
}

uint32_t sl__errlog_head(sl__errlog *l, sl_error_record *out, uint32_t n) {
    pthread_mutex_lock(&l->mu);
    n = SL_MIN(l->kept, n);
    for (uint32_t i = 0; i < n; i++) out[i] = l->recs[i].rec;
    pthread_mutex_unlock(&l->mu);
    return n;
}
