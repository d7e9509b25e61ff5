/*
 * The public shared budget: sl_budget_create / set_limit / stats / events /
 * destroy, the governor's start, budget="auto".
 *
 * Ownership: refs counts the creator's reference and one per loader
 * attached; the last sl__shared_unref stops the governor and frees. The
 * governor's stack is counted in the core's fixed part while it runs.
 *
 * fork() (base/fork.h): a budget is in the fork registry. In a child every
 * call on an inherited budget returns SL_ESTATE (its counts are a copy of
 * the parent's, its locks may be held by the parent's threads, its
 * governor thread is the parent's), a loader is refused on it, and the
 * last reference frees the child's copy without a lock or a join.
 */
#include "base/budget.h"

#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/fork.h"
#include "base/governor.h"
#include "base/util.h"

struct sl_budget {
    sl__budget core;
    _Atomic int refs;
    pthread_mutex_t mu;   /* gov's start */
    sl__governor *gov;
    sl__handle reg;       /* in the fork registry while it lives */
};

int sl_budget_create(uint64_t limit, sl_budget **out) {
    if (!out) return SL_EINVAL;
    *out = NULL;
    if (limit == 0) return SL_EINVAL;
    sl_budget *b = calloc(1, sizeof *b);
    if (!b) return SL_ENOMEM;
    int rc = sl__budget_init(&b->core, limit);
    if (rc) {
        free(b);
        return rc;
    }
    pthread_mutex_init(&b->mu, NULL);
    atomic_store(&b->refs, 1);
    sl__fork_track(&b->reg);
    *out = b;
    return 0;
}

sl__budget *sl__shared_core(sl_budget *b) { return &b->core; }

void sl__shared_ref(sl_budget *b) { atomic_fetch_add(&b->refs, 1); }

void sl__shared_unref(sl_budget *b) {
    if (atomic_fetch_sub(&b->refs, 1) != 1) return;
    sl__fork_untrack(&b->reg);
    if (b->reg.forked) { /* the child's copy: no lock, no join (the thread is the parent's) */
        sl__governor_forget(b->gov);
        free(b);
        return;
    }
    if (b->gov) {
        sl__governor_stop(b->gov);
        sl__budget_release(&b->core, SL_GOVERNOR_STACK, SL_MEM_OTHER);
        sl__budget_unfix(&b->core, SL_GOVERNOR_STACK);
    }
    pthread_mutex_destroy(&b->mu);
    sl__budget_fini(&b->core);
    free(b);
}

void sl_budget_destroy(sl_budget *b) {
    if (b) sl__shared_unref(b);
}

int sl_budget_poisoned(const sl_budget *b, char *why, size_t len) {
    if (!b) return SL_EINVAL;
    if (b->reg.forked) {
        sl__fork_reason(&b->reg, "shared budget", "its counts, locks and governor thread are the parent's",
                        "the budget (and the loaders that share it)", why, len);
        return SL_ESTATE;
    }
    sl__msg(why, len, "%s", "");
    return 0;
}

int sl_budget_set_limit(sl_budget *b, uint64_t limit, char *err, size_t errlen) {
    if (!b || limit == 0) return SL_EINVAL;
    if (b->reg.forked) return sl_budget_poisoned(b, err, errlen);
    return sl__budget_set_limit(&b->core, limit, 1, err, errlen);
}

int sl_budget_stats_sized(const sl_budget *cb, sl_budget_info *out, size_t out_size) {
    if (!cb || !out || !out_size) return SL_EINVAL;
    sl_budget *b = (sl_budget *)cb;
    sl__budget *r = &b->core;
    sl_budget_info info, *o = &info;
    memset(o, 0, sizeof *o);
    if (b->reg.forked) {
        sl__abi_out(out, out_size, o, sizeof *o);
        return SL_ESTATE;
    }
    o->limit = atomic_load(&r->limit);
    o->ceiling = atomic_load(&r->ceiling);
    o->used = atomic_load(&r->used);
    o->peak = atomic_load(&r->peak);
    o->fixed = atomic_load(&r->fixed);
    o->mem_count = SL_MEM__COUNT;
    for (int c = 0; c < SL_MEM__COUNT; c++) {
        o->mem[c] = atomic_load(&r->cat[c]);
        o->mem_peak[c] = atomic_load(&r->cat_peak[c]);
    }
    memcpy(o->reserved_0_1_mem, o->mem, sizeof o->reserved_0_1_mem); /* 0.1's arrays, where its callers look */
    memcpy(o->reserved_0_1_mem_peak, o->mem_peak, sizeof o->reserved_0_1_mem_peak);
    o->wait_s = (double)atomic_load(&r->wait_ns) / 1e9;
    o->waiters = (uint32_t)atomic_load(&r->waiters);
    pthread_mutex_lock(&r->mu);
    uint32_t n = 0;
    for (sl__budget *c = r->children; c; c = c->sibling) n++;
    o->loaders = n;
    /* children are kept newest first: index them by creation */
    uint32_t i = n;
    for (sl__budget *c = r->children; c; c = c->sibling) {
        i--;
        if (i >= SL_BUDGET_STATS_LOADERS) continue;
        o->loader_used[i] = atomic_load(&c->used);
        o->loader_peak[i] = atomic_load(&c->peak);
        o->loader_fixed[i] = atomic_load(&c->fixed);
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&b->mu);
    if (b->gov) sl__governor_stats(b->gov, o);
    pthread_mutex_unlock(&b->mu);
    sl__abi_out(out, out_size, o, sizeof *o);
    return 0;
}

/* The governor thread's stack into b's fixed part: 0 or SL_EBUDGET. */
static int take_governor_stack(sl_budget *b) {
    int rc = sl__budget_try(&b->core, SL_GOVERNOR_STACK, SL_MEM_OTHER);
    if (!rc && (rc = sl__budget_fix(&b->core, SL_GOVERNOR_STACK))) /* the limit was lowered meanwhile */
        sl__budget_release(&b->core, SL_GOVERNOR_STACK, SL_MEM_OTHER);
    return rc;
}

/* The caller's governor options (o_size bytes; NULL: the defaults) as ours. */
static int import_opts(sl_governor_opts *dst, const sl_governor_opts *o, size_t o_size, char *err, size_t errlen) {
    sl_governor_opts_init(dst);
    return o ? sl__abi_in(dst, sizeof *dst, o, o_size, SL__SIZE_0_1_GOVERNOR_OPTS, "sl_governor_opts",
                          "initialise the options with sl_governor_opts_init", err, errlen)
             : 0;
}

int sl_budget_govern_sized(sl_budget *b, const sl_governor_opts *co, size_t o_size, char *err, size_t errlen) {
    if (!b) return SL_EINVAL;
    if (b->reg.forked) return sl_budget_poisoned(b, err, errlen);
    sl_governor_opts oc, *o = &oc;
    int rc = import_opts(&oc, co, o_size, err, errlen);
    if (rc) return rc;
    char x[32];
    pthread_mutex_lock(&b->mu);
    if (b->gov) {
        sl__msg(err, errlen, "a governor already runs on this budget");
        rc = SL_ESTATE;
    } else if ((rc = take_governor_stack(b))) {
        sl__msg(err, errlen, "the budget cannot hold the governor thread's %s stack",
                sl__fmt_bytes(SL_GOVERNOR_STACK, x, sizeof x));
    } else if ((rc = sl__governor_start(&b->core, o, &b->gov))) {
        sl__budget_unfix(&b->core, SL_GOVERNOR_STACK);
        sl__budget_release(&b->core, SL_GOVERNOR_STACK, SL_MEM_OTHER);
        sl__msg(err, errlen, "could not start the governor thread");
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

int sl_budget_create_auto_sized(const sl_governor_opts *co, size_t o_size, sl_budget **out, char *err,
                                size_t errlen) {
    if (!out) return SL_EINVAL;
    *out = NULL;
    sl_governor_opts oc, *o = &oc;
    int rc = import_opts(&oc, co, o_size, err, errlen);
    if (rc) return rc;
    sl__gov_reading r;
    sl__gov_read(o->cgroup_dir, &r);
    uint64_t room = r.has_cgroup_limit ? r.cg_limit : r.has_available ? r.mem_available : 0;
    uint64_t margin = o->margin ? o->margin : SL_MAX((uint64_t)64 << 20, room / 20);
    if (!room) {
        sl__msg(err, errlen, "budget=\"auto\": neither a cgroup memory limit nor MemAvailable could be read");
        return SL_ENOENT;
    }
    if (room <= margin) {
        char x[32], y[32];
        sl__msg(err, errlen, "budget=\"auto\": the container allows %s, not more than the %s margin",
                sl__fmt_bytes(room, x, sizeof x), sl__fmt_bytes(margin, y, sizeof y));
        return SL_EBUDGET;
    }
    /* the ceiling: all the container allows; the governor brings the live
     * limit down to what is left at its first sample */
    if ((rc = sl_budget_create(room - margin, out))) return rc;
    if ((rc = sl_budget_govern(*out, o, err, errlen))) {
        sl_budget_destroy(*out);
        *out = NULL;
    }
    return rc;
}

size_t sl_budget_events_sized(const sl_budget *cb, uint64_t first, sl_budget_event *out, size_t max,
                              size_t elem_size) {
    if (!cb || !out || !elem_size || cb->reg.forked) return 0;
    sl_budget *b = (sl_budget *)cb;
    pthread_mutex_lock(&b->mu);
    size_t n = b->gov ? sl__governor_events(b->gov, first, out, max, elem_size) : 0;
    pthread_mutex_unlock(&b->mu);
    return n;
}
