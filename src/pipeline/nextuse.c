/* The next-use oracle. See nextuse.h for the contract and the locking. */
#include "pipeline/nextuse.h"

#include <string.h>

#include "base/util.h"

int sl__nextuse_init(sl__nextuse *o, sl__budget *b, const sl__sampler *s, uint32_t rank_lo, uint32_t ranks) {
    memset(o, 0, sizeof *o);
    if (s->n >= (1ull << 31) || ranks == 0 || rank_lo >= s->world || ranks > s->world - rank_lo) return SL_EINVAL;
    o->s = s;
    o->rank_lo = rank_lo;
    o->ranks = ranks;
    o->b = b;
    o->epoch[0] = o->epoch[1] = SL_NEXTUSE_NO_EPOCH;
    if (pthread_rwlock_init(&o->lk, NULL)) return SL_ESYS;
    if (pthread_mutex_init(&o->advance_mu, NULL)) {
        pthread_rwlock_destroy(&o->lk);
        return SL_ESYS;
    }
    size_t bytes = (size_t)s->n * sizeof(uint32_t);
    o->inv[0] = sl__alloc(b, bytes, SL_MEM_INDEX);
    o->inv[1] = o->inv[0] ? sl__alloc(b, bytes, SL_MEM_INDEX) : NULL;
    if (!o->inv[1]) {
        int code = atomic_load(&b->used) + 2 * sl__alloc_cost(bytes) > sl__budget_limit(b) ? SL_EBUDGET : SL_ENOMEM;
        sl__nextuse_fini(o);
        return code;
    }
    return 0;
}

void sl__nextuse_fini(sl__nextuse *o) {
    if (!o->b) return;
    sl__free(o->b, o->inv[0]);
    sl__free(o->b, o->inv[1]);
    pthread_mutex_destroy(&o->advance_mu);
    pthread_rwlock_destroy(&o->lk);
    memset(o, 0, sizeof *o);
}

uint64_t sl__nextuse_bytes(const sl__nextuse *o) { return 2 * (uint64_t)o->s->n * sizeof(uint32_t); }

/* Make slot hold epoch w: untag it (queries skip it from then on), fill it
 * outside the lock, tag it. advance_mu held. */
static void fill_slot(sl__nextuse *o, int slot, uint64_t w) {
    pthread_rwlock_wrlock(&o->lk);
    o->epoch[slot] = SL_NEXTUSE_NO_EPOCH;
    pthread_rwlock_unlock(&o->lk);
    sl__sampler_inverse(o->s, w, o->inv[slot]); /* n < 2^31: checked at init */
    pthread_rwlock_wrlock(&o->lk);
    o->epoch[slot] = w;
    pthread_rwlock_unlock(&o->lk);
}

void sl__nextuse_advance(sl__nextuse *o, uint64_t epoch) {
    pthread_mutex_lock(&o->advance_mu);
    /* epoch[] changes only here, under advance_mu: reading it needs no lk */
    for (uint64_t w = epoch; w <= epoch + 1; w++) {
        if (o->epoch[0] == w || o->epoch[1] == w) continue;
        /* retire a slot holding neither wanted epoch */
        int slot = (o->epoch[0] == epoch || o->epoch[0] == epoch + 1) ? 1 : 0;
        fill_slot(o, slot, w);
    }
    pthread_mutex_unlock(&o->advance_mu);
}

int sl__nextuse_query(sl__nextuse *o, uint32_t k, uint64_t now, uint64_t *next) {
    uint64_t total = o->s->total, e = now / total, off = now % total;
    if (k >= o->s->n) return SL_EINVAL;
    pthread_rwlock_rdlock(&o->lk);
    uint64_t held[2] = {o->epoch[0], o->epoch[1]};
    int first = held[1] < held[0]; /* the slot of the older epoch (NO_EPOCH sorts last) */
    int rc = SL_ESTATE;
    *next = SL_NEXTUSE_NEVER;
    for (int i = 0; i < 2; i++) {
        int slot = first ^ i;
        uint64_t ep = held[slot];
        if (ep == SL_NEXTUSE_NO_EPOCH || ep < e) continue;
        rc = 0;
        uint64_t p = sl__sampler_next_position(o->s, ep, o->inv[slot], k, ep == e ? off + 1 : 0, o->rank_lo, o->ranks);
        if (p != UINT64_MAX) {
            *next = ep * total + p;
            break;
        }
    }
    pthread_rwlock_unlock(&o->lk);
    return rc;
}

int sl__nextuse_fn(void *o, uint32_t k, uint64_t now, uint64_t *next) {
    return sl__nextuse_query(o, k, now, next);
}
