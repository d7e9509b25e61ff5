/*
 * The iteration state (sluice.h, "iteration state"): reading one whatever
 * its version, what resuming it means, and the public get, check, set and
 * merge.
 *
 * A rank's progress in its epoch's span is (batch, tail, pad): entries
 * [0, batch * B) of its stride were delivered or recorded bad, entries
 * [tail, per_rank) were taken by refills (engine.c), and pad of its first
 * samples were repeated to pad its batches (refill.c: they consume
 * nothing). A world's progress is
 * every rank's; merged (sl__span_left) it is the set of the span's
 * positions that no rank consumed, itself a span: [lo, hi) less gone. A
 * world of any size resumes that span by sharing it as it shares an
 * epoch, so each position left is delivered once, and no position
 * consumed is tried again: a bad sample is recorded once over both runs.
 *
 * States come from callers and files: every field is checked, and a gone
 * list is walked (ascending, inside the span) before anything uses it.
 * They cross the API with the caller's size (base/abi.h): a caller of
 * 0.1's size has no span and no pad, which then mean the whole order and
 * nothing padded, as zeros do.
 */
#include "pipeline/state.h"

#include <stddef.h>
#include <string.h>

#include "base/abi.h"
#include "base/util.h"

typedef unsigned long long ull;

/* The state's size from 0.2 on: a caller of less has no span. */
#define STATE_SIZE_0_2 SL__ABI_END(sl_state, gone)
#define FLAG_SHUFFLE 1u
#define FLAG_DROP_LAST 2u

/* The state's flags for a loader's configuration. */
static uint32_t loader_flags(const sl__conf *conf) {
    return (conf->cfg.shuffle ? FLAG_SHUFFLE : 0) | (conf->cfg.drop_last ? FLAG_DROP_LAST : 0);
}

/* Nominal batches of B in a span of per_rank entries per rank. */
static uint64_t span_batches(const sl__span *sp, uint64_t B, int drop_last) {
    return drop_last ? sp->per_rank / B : (sp->per_rank + B - 1) / B;
}

/* Could a rank of `world` sharing span sp be at (batch, tail, pad)?
 * get_state reports an epoch's end as the next epoch's start, so a state
 * always has a next batch: batch < its batches and, for one rank alone, a
 * tail that leaves it a sample (a full one with drop_last). With ranks a
 * batch past the tail is padded (refill.c): the tail may lie below it, once
 * pads were taken or exactly at it. */
static int reachable(const sl__span *sp, uint64_t B, int drop_last, uint32_t world, uint64_t batch, uint64_t tail,
                     uint64_t pad) {
    uint64_t start;
    if (batch >= span_batches(sp, B, drop_last) || tail > sp->per_rank || pad > sp->per_rank ||
        sl__mul(batch, B, &start))
        return 0;
    if (world > 1) return tail >= start || pad > 0;
    if (pad) return 0;
    return drop_last ? start + B <= tail : start < tail;
}

/* st (size bytes, the caller's) read into v, a state of this library:
 * the ABI's rule for inputs, then every field checked. A version-1 state
 * names the whole order whatever follows its flags. *whole_range: the span
 * [0, 0), the order range of whoever resumes it. */
static int read_state(const sl_state *st, size_t size, sl_state *v, int *whole_range, char *why, size_t len) {
#define BAD(...) do { sl__msg(why, len, __VA_ARGS__); return SL_ESTATE; } while (0)
    *whole_range = 0;
    memset(v, 0, sizeof *v);
    int rc = sl__abi_in(v, sizeof *v, st, size, SL__SIZE_0_1_STATE, "sl_state", "take it from sl_loader_get_state",
                        why, len);
    if (rc) return rc;
    if (v->version != 1 && v->version != 2)
        BAD("the state's version is %llu; this library reads versions 1 and 2", (ull)v->version);
    uint64_t n = v->dataset_size;
    if (n == 0 || n > UINT32_MAX) BAD("the state's dataset_size %llu is not 1 .. 2^32-1", (ull)n);
    if (v->flags & ~(FLAG_SHUFFLE | FLAG_DROP_LAST))
        BAD("the state's flags 0x%x are not shuffle (1) and drop_last (2)", v->flags);
    if (v->version == 1) { /* 0.1's state: the whole order, nothing padded */
        v->version = 2;
        v->pad = v->span_begin = v->gone_count = 0;
        v->span_end = n;
        v->gone = NULL;
    }
    if (v->world_size == 0) { /* merged */
        if (v->rank || v->batch || v->tail || v->pad || v->batch_size || (v->flags & FLAG_DROP_LAST))
            BAD("a merged state (world_size 0) has rank, batch, tail, pad, batch_size and drop_last 0");
    } else if (v->rank >= v->world_size || v->batch_size == 0) {
        BAD("the state's rank %u of world_size %u with batch_size %u is no loader's", v->rank, v->world_size,
            v->batch_size);
    }
    if (v->span_begin == 0 && v->span_end == 0 && v->gone_count == 0) {
        *whole_range = 1;
        return 0;
    }
    sl__span sp;
    if (v->span_end > n || sl__span_shape(&sp, v->span_begin, v->span_end, v->gone, v->gone_count, 1, 0))
        BAD("the state's span [%llu, %llu) less %llu positions gone is not a part of an order of %llu samples "
            "(bounds, or a gone list that is not ascending inside it)",
            (ull)v->span_begin, (ull)v->span_end, (ull)v->gone_count, (ull)n);
    return 0;
#undef BAD
}

/* ---- resuming one state ---------------------------------------------------------- */

/* The first of world_size, rank, batch_size and drop_last in which a
 * rank's state v differs from the loader, with both values, into buf. */
static void differing_setting(const sl__conf *conf, const sl_state *v, char *buf, size_t len) {
    const sl_config *c = &conf->cfg;
    int dl = (v->flags & FLAG_DROP_LAST) != 0;
    if (v->world_size != c->world_size)
        sl__msg(buf, len, "the state's world_size is %u, this loader's %u", v->world_size, c->world_size);
    else if (v->rank != c->rank)
        sl__msg(buf, len, "the state's rank is %u, this loader's %u", v->rank, c->rank);
    else if (v->batch_size != conf->B)
        sl__msg(buf, len, "the state's batch_size is %u, this loader's %u", v->batch_size, conf->B);
    else
        sl__msg(buf, len, "the state's drop_last is %s, this loader's %s", dl ? "on" : "off",
                c->drop_last ? "on" : "off");
}

/* Where a state puts a loader: a position and the epoch's span. */
typedef struct where {
    uint64_t epoch, batch, tail, pad;
    int own_span;  /* the epoch has a span of its own (sp), not the order range */
    sl__span sp;   /* shaped for the loader's world; gone is the state's memory */
} where;

/* What sl_loader_set_state would do with st (size bytes; see sluice.h):
 * 0 and *w, or SL_ESTATE (SL_EINVAL, SL_EUNSUPPORTED: sl__abi_in) with
 * why. Reads the configuration only. */
static int plan(const sl__conf *conf, const sl_state *st, size_t size, where *w, char *why, size_t len) {
#define BAD(...) do { sl__msg(why, len, __VA_ARGS__); return SL_ESTATE; } while (0)
    const sl_config *c = &conf->cfg;
    const sl__sampler *s = &conf->sampler;
    sl_state v;
    int whole, rc = read_state(st, size, &v, &whole, why, len);
    if (rc) return rc;
    if (v.seed != c->seed) BAD("the state is of seed %llu, the loader's is %llu", (ull)v.seed, (ull)c->seed);
    if (v.dataset_size != s->n)
        BAD("the state is of a dataset of %llu samples, the loader's has %llu", (ull)v.dataset_size, (ull)s->n);
    if ((v.flags & FLAG_SHUFFLE) != (loader_flags(conf) & FLAG_SHUFFLE))
        BAD("the state is of a loader with shuffle %s, this one has it %s", v.flags & FLAG_SHUFFLE ? "on" : "off",
            c->shuffle ? "on" : "off");
    if (whole) {
        v.span_begin = s->span.lo;
        v.span_end = s->span.hi;
    } else if (v.span_begin < s->span.lo || v.span_end > s->span.hi) {
        BAD("the state's span [%llu, %llu) of the order is not inside this loader's order range [%llu, %llu)",
            (ull)v.span_begin, (ull)v.span_end, (ull)s->span.lo, (ull)s->span.hi);
    }
    memset(w, 0, sizeof *w);
    w->epoch = v.epoch;
    if (sl__span_shape(&w->sp, v.span_begin, v.span_end, v.gone, v.gone_count, c->world_size, c->drop_last))
        BAD("the state's span is empty"); /* read_state checked it: unreachable */
    int same =
        v.world_size == c->world_size && v.rank == c->rank && v.batch_size == conf->B && v.flags == loader_flags(conf);
    if (same) { /* this rank, exactly where it was */
        if (!reachable(&w->sp, conf->B, c->drop_last, c->world_size, v.batch, v.tail, v.pad))
            BAD("the state names batch %llu with tail %llu and pad %llu, a position no loader can be at (%llu "
                "samples and %llu batches a rank in its span)", (ull)v.batch, (ull)v.tail, (ull)v.pad,
                (ull)w->sp.per_rank, (ull)span_batches(&w->sp, conf->B, c->drop_last));
        w->batch = v.batch;
        w->tail = v.tail;
        w->pad = v.pad;
    } else {
        /* another world (or rank, batch size, drop_last): only the span's start resumes there */
        sl__span own;
        int start = v.world_size == 0;
        if (!start && !sl__span_shape(&own, v.span_begin, v.span_end, v.gone, v.gone_count, v.world_size,
                                      (v.flags & FLAG_DROP_LAST) != 0))
            start = v.batch == 0 && v.tail == own.per_rank && v.pad == 0;
        if (!start) {
            char what[96];
            differing_setting(conf, &v, what, sizeof what);
            BAD("%s: the state is rank %u's of %u ranks (batch_size %u, drop_last %u) in the middle of epoch %llu "
                "(batch %llu), and this loader is rank %u of %u (batch_size %u, drop_last %d): one rank's state "
                "resumes only that rank; to resume on another world, merge the states of all %u ranks "
                "(sl_state_merge, sluice.merge_states) and resume every rank from the merged state",
                what, v.rank, v.world_size, v.batch_size, (v.flags & FLAG_DROP_LAST) ? 1 : 0, (ull)v.epoch,
                (ull)v.batch, c->rank, c->world_size, conf->B, c->drop_last, v.world_size);
        }
        w->batch = 0;
        w->tail = w->sp.per_rank;
        if (span_batches(&w->sp, conf->B, c->drop_last) == 0) { /* cut to nothing for this world: the epoch is over */
            if (v.epoch == UINT64_MAX) BAD("the state's epoch has no next");
            w->epoch = v.epoch + 1;
            w->tail = s->per_rank;
            return 0;
        }
    }
    w->own_span = !sl__span_is_range(s, &w->sp);
    return 0;
#undef BAD
}

int sl__state_check(const sl__conf *conf, const sl_state *st, size_t st_size, char *why, size_t len) {
    where w;
    return plan(conf, st, st_size, &w, why, len);
}

int sl__state_set(const sl__conf *conf, sl__engine *e, const sl_state *st, size_t st_size) {
    where w;
    int rc = plan(conf, st, st_size, &w, NULL, 0);
    if (rc) return rc;
    uint32_t *copy = NULL;
    if (w.own_span && w.sp.ngone) { /* the caller's list, copied (counted) */
        copy = sl__alloc(conf->budget, (size_t)w.sp.ngone * sizeof *copy, SL_MEM_INDEX);
        if (!copy) return SL_EBUDGET;
        memcpy(copy, w.sp.gone, (size_t)w.sp.ngone * sizeof *copy);
        w.sp.gone = copy;
    }
    return sl__engine_set_state(e, w.epoch, w.batch, w.tail, w.pad, w.own_span ? &w.sp : NULL, copy);
}

/* ---- get ------------------------------------------------------------------------- */

int sl__state_get(const sl__conf *conf, sl__engine *e, sl_state *out, size_t out_size) {
    sl_state st;
    memset(&st, 0, sizeof st);
    sl__span sp;
    sl__engine_state(e, &st.epoch, &st.batch, &st.tail, &st.pad, &sp);
    st.version = SL_STATE_VERSION;
    st.seed = conf->cfg.seed;
    st.dataset_size = conf->sampler.n;
    st.rank = conf->cfg.rank;
    st.world_size = conf->cfg.world_size;
    st.batch_size = conf->B;
    st.flags = loader_flags(conf);
    st.span_begin = sp.lo;
    st.span_end = sp.hi;
    st.gone_count = sp.ngone;
    st.gone = sp.gone;
    /* a caller without the span (0.1's size) gets a state only where it needs none */
    if (out_size < STATE_SIZE_0_2 && (st.span_begin || st.span_end != st.dataset_size || st.gone_count || st.pad)) {
        memset(out, 0, out_size);
        return SL_EUNSUPPORTED;
    }
    sl__abi_out(out, out_size, &st, sizeof st);
    return 0;
}

/* ---- merge ----------------------------------------------------------------------- */

static void progress(const void *ctx, uint32_t r, uint64_t *batch, uint64_t *tail) {
    const sl_state *const *states = ctx;
    *batch = states[r]->batch;
    *tail = states[r]->tail;
}

/* Do a and b (read) name the same span? */
static int same_span(const sl_state *a, const sl_state *b) {
    return a->span_begin == b->span_begin && a->span_end == b->span_end && a->gone_count == b->gone_count &&
           (!a->gone_count || !memcmp(a->gone, b->gone, (size_t)a->gone_count * sizeof *a->gone));
}

int sl_state_merge_sized(const sl_state *const *states, size_t n, sl_state *out, size_t state_size,
                         uint32_t *gone_buf, uint64_t gone_cap, char *why, size_t len) {
#define BAD(...) do { sl__msg(why, len, __VA_ARGS__); return SL_ESTATE; } while (0)
    sl__msg(why, len, "%s", "");
    if (!states || n == 0 || n > UINT32_MAX || !out || state_size < STATE_SIZE_0_2 || (gone_cap && !gone_buf)) {
        sl__msg(why, len, "no states, no output, or states of a header before 0.2 (no span)");
        return SL_EINVAL;
    }
    /* Read every state (the ABI's rule; version 1 as the whole order): they
     * are compared in the read form, and the walk reads batch and tail,
     * which every version holds at the same place, from the originals. */
    sl_state first;
    int whole;
    memset(&first, 0, sizeof first);
    for (size_t r = 0; r < n; r++) {
        sl_state v;
        if (!states[r]) BAD("state %zu is missing", r);
        char inner[320];
        int rc = read_state(states[r], state_size, &v, &whole, inner, sizeof inner);
        if (rc) {
            sl__msg(why, len, "state %zu: %s", r, inner);
            return rc;
        }
        if (v.world_size == 0) BAD("state %zu is a merged state already: resume it, or merge the ranks' own states", r);
        if (whole) { /* [0, 0): the ranks' order range; the whole order is all a merge can name */
            v.span_begin = 0;
            v.span_end = v.dataset_size;
        }
        if (v.world_size != n)
            BAD("state %zu is of a world of %u ranks, and %zu states were given: give every rank's state", r,
                v.world_size, n);
        if (v.rank != r) BAD("state %zu is rank %u's: give the states in rank order", r, v.rank);
        if (r == 0) {
            first = v;
            continue;
        }
        if (v.seed != first.seed || v.dataset_size != first.dataset_size || v.flags != first.flags ||
            v.batch_size != first.batch_size)
            BAD("rank %zu's state is of another configuration than rank 0's (seed, dataset size, shuffle, "
                "drop_last, batch_size)", r);
        if (v.epoch != first.epoch)
            BAD("rank %zu's state is in epoch %llu and rank 0's in epoch %llu: merge states taken at one epoch "
                "(after the same number of batches, as DDP steps)", r, (ull)v.epoch, (ull)first.epoch);
        if (!same_span(&v, &first)) BAD("rank %zu's state shares another span of the epoch than rank 0's", r);
    }
    int drop_last = (first.flags & FLAG_DROP_LAST) != 0;
    sl__span sp;
    if (sl__span_shape(&sp, first.span_begin, first.span_end, first.gone, first.gone_count, (uint32_t)n, drop_last))
        BAD("the states' span is empty");
    for (size_t r = 0; r < n; r++)
        if (!reachable(&sp, first.batch_size, drop_last, (uint32_t)n, states[r]->batch, states[r]->tail,
                       states[r]->version == 1 ? 0 : states[r]->pad)) /* pads repeat: they leave nothing */
            BAD("rank %zu's state names batch %llu with tail %llu, a position no loader can be at", r,
                (ull)states[r]->batch, (ull)states[r]->tail);
    sl_state m;
    memset(&m, 0, sizeof m);
    m.version = SL_STATE_VERSION;
    m.seed = first.seed;
    m.epoch = first.epoch;
    m.dataset_size = first.dataset_size;
    m.flags = first.flags & FLAG_SHUFFLE;
    uint64_t lo, hi, ngone;
    if (!sl__span_left(&sp, (uint32_t)n, first.batch_size, progress, states, &lo, &hi, gone_buf, gone_cap, &ngone)) {
        if (first.epoch == UINT64_MAX) BAD("the states' epoch has no next");
        m.epoch++; /* nothing left: the next epoch's start, over the resuming loader's order range */
    } else {
        m.span_begin = lo;
        m.span_end = hi;
        m.gone_count = ngone;
        m.gone = ngone ? gone_buf : NULL;
    }
    if (m.gone_count > gone_cap) m.gone = NULL;
    sl__abi_out(out, state_size, &m, sizeof m);
    if (m.gone_count > gone_cap) {
        sl__msg(why, len, "the merged state lists %llu positions gone: give room for them", (ull)m.gone_count);
        return SL_EOVERFLOW;
    }
    return 0;
#undef BAD
}
