/* The default worker count (workers = 0) and the budget: as many workers
 * as this rank's share of its CPUs, but no more than the budget holds
 * beside the rest of the minimum working set, so that a default is never
 * the reason a budget is refused that fewer workers fit (a 64 MiB budget
 * on a 16-core machine: 16 workers' baselines alone need 53 MiB). A count
 * the caller chose is kept, or refused naming the minimum. */
#include "fixture.h" /* first: it defines _GNU_SOURCE */

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* run.h's fx_config with `workers` workers in `budget`, seed 3. */
static sl_config config(const fx_dataset *d, uint32_t workers, uint64_t budget) {
    sl_config c;
    fx_config(&c, d->root);
    c.workers = workers;
    c.budget = budget;
    c.seed = 3;
    return c;
}

static uint64_t min_budget(const fx_dataset *d, uint32_t workers) {
    sl_config c = config(d, workers, 1ull << 30);
    sl_plan p;
    char err[400] = "";
    if (sl_loader_plan(&c, &p, err, sizeof err)) SL_FAIL("plan: %s", err);
    return p.min_budget;
}

static uint32_t cpus(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? (uint32_t)CPU_COUNT(&set) : 1;
}

/* A budget between the minimum with one worker and the minimum with two:
 * the default takes one worker, where two are refused. */
TEST(default_workers_fit_the_budget) {
    if (cpus() < 2 || getenv("LOCAL_WORLD_SIZE")) {
        printf("skipped: one CPU for this rank here, so the default is one worker anyway\n");
        return;
    }
    fx_dataset *d = fx_new(16, 0, 40, 80);
    uint64_t one = min_budget(d, 1), two = min_budget(d, 2);
    CHECK(two > one);
    uint64_t budget = one + (two - one) / 2;
    printf("minimum: %llu with 1 worker, %llu with 2; budget %llu\n", (unsigned long long)one,
           (unsigned long long)two, (unsigned long long)budget);
    sl_config c = config(d, 2, budget);
    sl_loader *ld = NULL;
    char err[600] = "";
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "2 workers");
    /* plan and create agree: one worker, and it runs */
    c.workers = 0;
    sl_plan p;
    CHECK_OK(sl_loader_plan(&c, &p, err, sizeof err));
    CHECK_EQ(p.workers, 1);
    CHECK(p.min_budget <= budget);
    ld = fx_open(&c);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.workers, 1);
    uint64_t samples = 0;
    sl_batch *b;
    while (sl_loader_next(ld, &b) == 0) {
        samples += sl_batch_len(b);
        sl_loader_release(ld, b);
    }
    CHECK_EQ(samples, 16);
    sl_loader_destroy(ld);
    /* with room, the default is the CPUs' count again */
    c.budget = 1ull << 30;
    CHECK_OK(sl_loader_plan(&c, &p, err, sizeof err));
    CHECK_EQ(p.workers, cpus());
    free(d);
}

/* Below even one worker's minimum: refused, naming the minimum with one
 * worker (the default's smallest), not with one a CPU. */
TEST(default_workers_refusal_names_the_smallest_minimum) {
    fx_dataset *d = fx_new(4, 0, 40, 80);
    uint64_t one = min_budget(d, 1);
    sl_config c = config(d, 0, one - 4096);
    sl_loader *ld = NULL;
    char err[600] = "";
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "+ 1 workers x ");
    sl_plan p;
    CHECK_OK(sl_loader_plan(&c, &p, err, sizeof err));
    CHECK(p.min_budget > c.budget && p.min_budget < one + one / 100); /* the index's share moves a little */
    CHECK_EQ(p.workers, 1);
    free(d);
}
