/* ctest: tsan */
/*
 * A budget shared by loaders, live limits, and the governor's decisions.
 *
 *  (The budget side, children and live limits, is in test_budget.c.)
 *  - Loaders (sl_config.shared_budget): two draw on one budget and never
 *    pass it together; a third whose minimum does not fit what is left is
 *    refused with the numbers; per-loader use adds up.
 *  - The governor's policy (sl__gov_decide), on readings made up here.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "base/budget.h"
#include "base/governor.h"
#include "base/util.h"
#include "base/mem.h"

#define MIB ((uint64_t)1 << 20)

/* ---- loaders on one budget ----------------------------------------------------- */

/* run.h's fx_config at 64 px on the shared budget b. */
static sl_config small_cfg(const fx_dataset *d, sl_budget *b, uint32_t workers) {
    sl_config cfg;
    fx_config(&cfg, d->root);
    cfg.size = 64;
    cfg.workers = workers;
    cfg.shared_budget = b;
    cfg.budget = 0; /* ignored with a shared budget */
    return cfg;
}

/* The shared budget's use, read by an fx_poller while the loaders run:
 * never over its limit; the most seen. */
typedef struct observe {
    sl_budget *b;
    uint64_t max_used;
} observe;

static void observe_budget(sl_loader *ld, void *ctx) {
    (void)ld;
    observe *o = ctx;
    sl_budget_info st;
    CHECK_OK(sl_budget_stats(o->b, &st));
    if (st.used > st.limit) SL_FAIL("shared used %llu over limit %llu", (unsigned long long)st.used, (unsigned long long)st.limit);
    if (st.used > o->max_used) o->max_used = st.used;
}

/* Stats once the workers have gone quiet (every slot filled: they idle
 * and give their growth back), so the sums can be compared. */
static void settled(sl_budget *b, sl_budget_info *st) {
    uint64_t last = UINT64_MAX;
    for (int i = 0; i < 500; i++) {
        CHECK_OK(sl_budget_stats(b, st));
        uint64_t sum = 0;
        for (uint32_t k = 0; k < st->loaders && k < SL_BUDGET_STATS_LOADERS; k++) sum += st->loader_used[k];
        if (sum == st->used && st->used == last) return;
        last = st->used;
        bx_sleep_ms(10);
    }
    SL_FAIL("shared budget use did not settle");
}

static void run_epoch(sl_loader *ld) {
    sl_batch *bt;
    int rc;
    while ((rc = sl_loader_next(ld, &bt)) == 0) sl_loader_release(ld, bt);
    CHECK_EQ(rc, SL_EEND);
}

TEST(two_loaders_one_budget) {
    fx_dataset d;
    fx_simple(&d, 24, 0, 200, 900);
    sl_budget *b;
    CHECK_OK(sl_budget_create(48 * MIB, &b));
    sl_config cfg = small_cfg(&d, b, 2);
    sl_loader *train, *val;
    char err[512] = "";
    int rc = sl_loader_create(&cfg, &train, err, sizeof err);
    if (rc) SL_FAIL("train: %s", err);
    cfg.preset = SL_PRESET_VAL;
    rc = sl_loader_create(&cfg, &val, err, sizeof err);
    if (rc) SL_FAIL("val: %s", err);
    sl_budget_destroy(b); /* the loaders keep it alive */
    observe o = {b, 0};
    fx_poller p;
    fx_poll_start(&p, train, observe_budget, &o);
    run_epoch(train);
    run_epoch(val);
    sl_stats s1, s2;
    CHECK_OK(sl_loader_stats(train, &s1));
    CHECK_OK(sl_loader_stats(val, &s2));
    CHECK_EQ(s1.budget_bytes, 48 * MIB);
    CHECK_EQ(s1.samples + s2.samples, 48);
    sl_budget_info st;
    settled(b, &st);
    CHECK_EQ(st.loaders, 2);
    CHECK_EQ(st.loader_fixed[0], s1.fixed_bytes);
    CHECK_EQ(st.loader_fixed[1], s2.fixed_bytes);
    CHECK_EQ(st.fixed, s1.fixed_bytes + s2.fixed_bytes);
    CHECK_LE(st.peak, st.limit);
    /* the governor's floor: the fixed parts and the larger room each loader
     * keeps for one sample's growth (a quarter of what it was given) */
    uint64_t room = SL_MAX(s1.budget_bytes / 4, s2.budget_bytes / 4);
    CHECK_EQ(sl__budget_floor(sl__shared_core(b)), SL_MIN(st.fixed + room, st.ceiling));
    fx_poll_stop(&p);
    CHECK(o.max_used > s1.fixed_bytes);
    sl_loader_destroy(train);
    settled(b, &st); /* val still holds it */
    CHECK_EQ(st.loaders, 1);
    CHECK_EQ(st.fixed, s2.fixed_bytes);
    sl_loader_destroy(val); /* the last reference: freed (ASan would see a leak) */
}

TEST(loader_over_what_is_left_is_refused_with_numbers) {
    fx_dataset d;
    fx_simple(&d, 8, 0, 64, 128);
    sl_config cfg = small_cfg(&d, NULL, 2);
    cfg.budget = 1ull << 30;
    cfg.shared_budget = NULL;
    uint64_t min = fx_min_budget(cfg);
    sl_budget *b;
    CHECK_OK(sl_budget_create(min + min / 2, &b)); /* one fits, two do not */
    cfg = small_cfg(&d, b, 2);
    sl_loader *one, *two = NULL;
    char err[512] = "";
    CHECK_OK(sl_loader_create(&cfg, &one, err, sizeof err));
    CHECK_EQ(sl_loader_create(&cfg, &two, err, sizeof err), SL_EBUDGET);
    CHECK(two == NULL);
    CHECK_STR_CONTAINS(err, "shared budget of");
    CHECK_STR_CONTAINS(err, "minimum working set");
    sl_budget_info st;
    CHECK_OK(sl_budget_stats(b, &st));
    CHECK_EQ(st.loaders, 1); /* the refused one left nothing behind */
    char err2[256] = "";
    CHECK_EQ(sl_budget_set_limit(b, st.fixed - 1, err2, sizeof err2), SL_EBUDGET);
    sl_loader_destroy(one);
    CHECK_OK(sl_loader_create(&cfg, &two, err, sizeof err)); /* room again */
    sl_loader_destroy(two);
    sl_budget_destroy(b);
    CHECK_EQ(sl_budget_create(0, &b), SL_EINVAL);
}

/* ---- the governor's decisions ------------------------------------------------------ */

static const uint64_t S = 1000000000ull; /* a second in ns */

/* The governor's options with a 64 MiB margin, and its state before the
 * first decision. */
static void gov_start(sl_governor_opts *o, sl__gov_state *st) {
    sl_governor_opts_init(o);
    o->margin = 64 * MIB;
    memset(st, 0, sizeof *st);
}

TEST(governor_shrinks_at_once_and_grows_slowly) {
    sl_governor_opts o;
    sl__gov_state st;
    gov_start(&o, &st);
    char why[112];
    sl__gov_budget b = {512 * MIB, 512 * MIB, 64 * MIB, 400 * MIB};
    sl__gov_reading r = {1, 1024 * MIB, 1000 * MIB, 0, 0, 0, 0, 0};
    /* working set 1000 of 1024 - 64: 40 MiB over -> used 400 - 40, at once */
    uint64_t l = sl__gov_decide(&o, &st, &b, &r, 1 * S, why, sizeof why);
    CHECK_EQ(l, 360 * MIB);
    CHECK_STR_CONTAINS(why, "cgroup working set");
    b.limit = l;
    b.used = 330 * MIB;
    r.cg_ws = 500 * MIB; /* the hog left: room for 330 + 460 */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 2 * S, why, sizeof why), l);             /* not yet */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 2 * S + S / 2, why, sizeof why), l);     /* still not */
    uint64_t up = sl__gov_decide(&o, &st, &b, &r, 3 * S + S / 10, why, sizeof why); /* held 1.1 s */
    CHECK_EQ(up, l + 32 * MIB); /* one step: ceiling / 16 */
    CHECK_STR_CONTAINS(why, "held");
    b.limit = up;
    /* a dip below the band restarts the wait */
    r.cg_ws = 950 * MIB;
    uint64_t down = sl__gov_decide(&o, &st, &b, &r, 3 * S + S / 5, why, sizeof why);
    CHECK(down < up);
    /* never below fixed, never above the ceiling */
    r.cg_ws = 4000 * MIB;
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 4 * S, why, sizeof why), b.fixed);
    b.limit = b.fixed;
    r.cg_ws = 0;
    for (uint64_t t = 5 * S; t < 20 * S; t += S / 10) {
        uint64_t n = sl__gov_decide(&o, &st, &b, &r, t, why, sizeof why);
        CHECK(n >= b.limit && n <= b.ceiling && n - b.limit <= 32 * MIB);
        b.limit = n;
    }
    CHECK_EQ(b.limit, b.ceiling);
}

TEST(governor_sheds_on_events_pressure_and_machine) {
    sl_governor_opts o;
    sl__gov_state st;
    gov_start(&o, &st);
    char why[112];
    sl__gov_budget b = {800 * MIB, 800 * MIB, 0, 100 * MIB};
    sl__gov_reading r = {1, 4096 * MIB, 200 * MIB, 5, 0, 0, 0, 0};
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 1 * S, why, sizeof why), b.limit); /* first events: a baseline */
    r.cg_events = 6;                                                            /* the cgroup hit its limit */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 2 * S, why, sizeof why), 700 * MIB);
    CHECK_STR_CONTAINS(why, "oom/max");
    b.limit = 700 * MIB;
    r.has_psi = 1, r.psi_some10 = 25.0;
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 3 * S, why, sizeof why), 700 * MIB - 700 * MIB / 8);
    CHECK_STR_CONTAINS(why, "PSI");
    b.limit = 700 * MIB - 700 * MIB / 8;
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 3 * S + S / 2, why, sizeof why), b.limit); /* once a second */
    r.has_psi = 0;
    r.has_available = 1, r.mem_available = 164 * MIB; /* the machine: 100 more at most */
    CHECK_EQ(sl__gov_decide(&o, &st, &b, &r, 5 * S, why, sizeof why), 200 * MIB);
    CHECK_STR_CONTAINS(why, "MemAvailable");
}
