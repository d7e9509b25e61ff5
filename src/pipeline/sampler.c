#include "pipeline/sampler.h"

#include "base/util.h"
#include "ops/ops.h"
#include "sluice.h"

int sl__span_shape(sl__span *sp, uint64_t lo, uint64_t hi, const uint32_t *gone, uint64_t ngone, uint32_t world,
                   int drop_last) {
    if (world == 0 || lo >= hi || hi > (uint64_t)UINT32_MAX + 1 || ngone >= hi - lo || (ngone && !gone))
        return SL_EINVAL;
    for (uint64_t g = 0; g < ngone; g++) /* ascending, inside [lo, hi) */
        if (gone[g] < lo || gone[g] >= hi || (g && gone[g] <= gone[g - 1])) return SL_EINVAL;
    sp->lo = lo;
    sp->hi = hi;
    sp->gone = ngone ? gone : NULL;
    sp->ngone = ngone;
    sp->m = hi - lo - ngone;
    sp->per_rank = drop_last ? sp->m / world : (sp->m + world - 1) / world;
    sp->total = sp->per_rank * world;
    return 0;
}

int sl__sampler_init(sl__sampler *s, uint64_t n, uint32_t rank, uint32_t world, int shuffle, int drop_last,
                     uint64_t seed) {
    if (world == 0 || rank >= world || n == 0 || n > UINT32_MAX) return SL_EINVAL;
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->shuffle = shuffle;
    s->seed = seed;
    s->drop_last = drop_last;
    s->resumed = 0;
    return sl__sampler_range(s, 0, n);
}

int sl__sampler_range(sl__sampler *s, uint64_t lo, uint64_t hi) {
    if (hi > s->n || sl__span_shape(&s->span, lo, hi, NULL, 0, s->world, s->drop_last)) return SL_EINVAL;
    s->per_rank = s->span.per_rank;
    s->total = s->span.total;
    return s->per_rank ? 0 : SL_EEMPTY;
}

int sl__span_is_range(const sl__sampler *s, const sl__span *sp) {
    return sp->lo == s->span.lo && sp->hi == s->span.hi && sp->ngone == 0;
}

uint64_t sl__span_index(const sl__span *sp, uint64_t p) {
    if (p < sp->lo || p >= sp->hi) return UINT64_MAX;
    uint64_t a = 0, b = sp->ngone; /* gone[0, a) < p <= gone[b, ngone) */
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        if (sp->gone[mid] < p) a = mid + 1;
        else b = mid;
    }
    if (a < sp->ngone && sp->gone[a] == p) return UINT64_MAX;
    return p - sp->lo - a;
}

uint64_t sl__sampler_batches(const sl__sampler *s, uint64_t epoch, uint32_t B) {
    uint64_t per = sl__sampler_span(s, epoch)->per_rank;
    return s->drop_last ? per / B : (per + B - 1) / B;
}

void sl__sampler_resume(sl__sampler *s, uint64_t epoch, const sl__span *sp) {
    s->resumed = sp != NULL;
    s->r_epoch = epoch;
    if (sp) s->r_span = *sp;
}

/* The permutation of [0, n) for epoch into a (Fisher-Yates). */
static void permute(const sl__sampler *s, uint64_t epoch, uint32_t *a) {
    for (uint64_t i = 0; i < s->n; i++) a[i] = (uint32_t)i;
    if (!s->shuffle) return;
    sl__rng r;
    sl__rng_init(&r, s->seed, epoch, UINT64_MAX); /* a stream no sample index uses */
    for (uint64_t i = s->n - 1; i > 0; i--) {
        uint64_t j = sl__rng_below(&r, i + 1);
        uint32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void sl__sampler_fill(const sl__sampler *s, uint64_t epoch, uint32_t *seq, uint32_t *tmp) {
    const sl__span *sp = sl__sampler_span(s, epoch);
    uint32_t *a = tmp ? tmp : seq; /* n entries */
    permute(s, epoch, a);
    if (sp->lo || sp->ngone) { /* the span's entries, in place: entry j's position is >= j */
        uint64_t j = 0, g = 0;
        for (uint64_t p = sp->lo; p < sp->hi; p++) {
            if (g < sp->ngone && sp->gone[g] == p) g++;
            else a[j++] = a[p];
        }
    }
    if (a == seq) return; /* world 1: per_rank == m, and the entries are in place */
    /* pad by wrapping (entry j >= m is entry j mod m; more than one round if world > m) */
    for (uint64_t i = 0; i < sp->per_rank; i++) {
        uint64_t j = s->rank + i * s->world;
        seq[i] = a[j < sp->m ? j : j % sp->m];
    }
}

/* Did the ranks' progress use entry j of sp? */
static int entry_used(const sl__span *sp, uint32_t world, uint32_t B, sl__progress_fn progress, const void *ctx,
                      uint64_t j) {
    if (j >= sp->total) return 0; /* cut by drop_last: no rank's */
    uint64_t i = j / world, batch, tail;
    progress(ctx, (uint32_t)(j % world), &batch, &tail);
    return i < batch * B || i >= tail;
}

/* Walk sp's positions from entry j (at position *p, gone[*g] the next
 * gone position past it). */
static void seek_entry(const sl__span *sp, uint64_t j, uint64_t *p, uint64_t *g) {
    *p = sp->lo + j;
    for (*g = 0; *g < sp->ngone && sp->gone[*g] <= *p; ++*g) ++*p;
}

uint64_t sl__span_left(const sl__span *sp, uint32_t world, uint32_t B, sl__progress_fn progress, const void *ctx,
                       uint64_t *lo, uint64_t *hi, uint32_t *gone, uint64_t cap, uint64_t *ngone) {
    /* every rank delivered its first `done` entries: entries below done * world are used */
    uint64_t done = UINT64_MAX;
    for (uint32_t r = 0; r < world; r++) {
        uint64_t batch, tail;
        progress(ctx, r, &batch, &tail);
        done = SL_MIN(done, batch * B);
    }
    /* walk 1: the first and last position left, and how many */
    uint64_t j0 = SL_MIN(done * world, sp->m), j = j0, p, g;
    uint64_t first = UINT64_MAX, jfirst = 0, gfirst = 0, last = 0, left = 0;
    for (seek_entry(sp, j0, &p, &g); p < sp->hi; p++) {
        if (g < sp->ngone && sp->gone[g] == p) {
            g++;
            continue;
        }
        if (!entry_used(sp, world, B, progress, ctx, j)) {
            if (first == UINT64_MAX) first = p, jfirst = j, gfirst = g;
            last = p;
            left++;
        }
        j++;
    }
    if (!left) {
        *lo = *hi = *ngone = 0;
        return 0;
    }
    *lo = first;
    *hi = last + 1;
    *ngone = last + 1 - first - left;
    if (*ngone > cap) return left;
    /* walk 2: the positions inside (first, last) not left: gone before, or used now */
    uint64_t k = 0;
    j = jfirst + 1;
    g = gfirst;
    for (p = first + 1; p < last; p++) {
        int out = g < sp->ngone && sp->gone[g] == p;
        if (out) g++;
        else out = entry_used(sp, world, B, progress, ctx, j++);
        if (out) gone[k++] = (uint32_t)p;
    }
    return left;
}

/* Invert the permutation a of [0, n) in place, cycle by cycle; bit 31
 * marks entries already holding their inverse (n < 2^31). */
static void invert_in_place(uint32_t *a, uint64_t n) {
    const uint32_t done = 1u << 31;
    for (uint64_t i = 0; i < n; i++) {
        if (a[i] & done) continue;
        /* the cycle i -> a[i] -> ...: write inv[a[j]] = j along it */
        uint32_t prev = (uint32_t)i, cur = a[i];
        while (!(a[cur] & done) && cur != i) {
            uint32_t next = a[cur];
            a[cur] = prev | done;
            prev = cur;
            cur = next;
        }
        a[i] = prev | done; /* cur == i: close the cycle (a fixed point too) */
    }
    for (uint64_t i = 0; i < n; i++) a[i] &= ~done;
}

int sl__sampler_inverse(const sl__sampler *s, uint64_t epoch, uint32_t *inv) {
    if (s->n >= (1ull << 31)) return SL_EINVAL;
    permute(s, epoch, inv);
    invert_in_place(inv, s->n);
    return 0;
}

uint64_t sl__sampler_next_position(const sl__sampler *s, uint64_t epoch, const uint32_t *inv, uint32_t k,
                                   uint64_t from, uint32_t rank_lo, uint32_t ranks) {
    const sl__span *sp = sl__sampler_span(s, epoch);
    uint64_t j = sl__span_index(sp, inv[k]);
    if (j == UINT64_MAX) return UINT64_MAX; /* not in the span */
    if (from > j) j += (from - j + sp->m - 1) / sp->m * sp->m; /* first of j + t*m at or past from */
    for (; j < sp->total; j += sp->m) {
        uint64_t r = j % s->world;
        if (r >= rank_lo && r - rank_lo < ranks) return j;
    }
    return UINT64_MAX;
}
