/* ctest: tsan */
/*
 * Live limits on running loaders: elastic batch slots (issue 8 item 3).
 *
 *  - A shrink while the loader runs: within a second the accounted total
 *    is under the new limit (free slots retired at once, the rest as the
 *    consumer releases them), resident memory falls with it (the retired
 *    slots' pages are returned, measured in VmRSS), delivery goes on
 *    without an error, and every batch's checksum is the one of a run
 *    without the shrink. Growing the limit back brings the slots back.
 *  - A consumer holding batches keeps getting the next one: live slots
 *    never fall below what it holds + 1 (nor below min_slots).
 *  - Handing the region out for pinning (sl_loader_slot_region) brings
 *    retired slots back and fixes them: a later shrink retires none; so do
 *    pages locked with mlockall, which MADV_DONTNEED cannot drop.
 *  - Shrinks and growths racing with delivery: a slot on its way to
 *    retirement (its pages going back outside the loader's lock) is never
 *    dispatched, and its bytes go back exactly once.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "bigimg.h"


#define MIB ((uint64_t)1 << 20)
#define BATCH 16
#define EPOCHS 4
#define MAXB 64 /* batches recorded */

/* 8 prefetched slots of 16 samples of 3x256x256 (3 MiB each), 2 of them
 * fixed; checksums on. */
static sl_config slot_cfg(const fx_dataset *d, sl_budget *b) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = d->root;
    cfg.batch_size = BATCH;
    cfg.size = 256;
    cfg.workers = 2;
    cfg.prefetch = 8;
    cfg.min_slots = 2;
    cfg.seed = 7;
    cfg.flags = SL_FLAG_CHECKSUM;
    cfg.shared_budget = b;
    return cfg;
}

/* A loader of slot_cfg over a new dataset of n images, on a new shared
 * budget of 128 MiB. */
static sl_loader *slot_loader(uint32_t n, fx_dataset **d, sl_budget **b) {
    *d = fx_new(n, 0, 200, 320);
    CHECK_OK(sl_budget_create(128 * MIB, b));
    sl_config cfg = slot_cfg(*d, *b);
    return fx_open(&cfg);
}

static void slot_done(sl_loader *ld, sl_budget *b, fx_dataset *d) {
    sl_loader_destroy(ld);
    sl_budget_destroy(b);
    free(d);
}

typedef struct run {
    uint64_t sums[MAXB];
    uint32_t n;
} run;

/* The next batch (across epoch ends), its checksum recorded; released
 * unless keep. */
static sl_batch *take(sl_loader *ld, run *r, int keep) {
    for (;;) {
        sl_batch *bt;
        int rc = sl_loader_next(ld, &bt);
        if (rc == SL_EEND) continue;
        if (rc) SL_FAIL("next: %s", sl_strerror(rc));
        if (r->n < MAXB) r->sums[r->n] = sl_batch_checksum(bt);
        r->n++;
        if (keep) return bt;
        sl_loader_release(ld, bt);
        return NULL;
    }
}

static void reference(const fx_dataset *d, run *r, uint32_t nbatches) {
    sl_budget *b;
    CHECK_OK(sl_budget_create(128 * MIB, &b));
    sl_config cfg = slot_cfg(d, b);
    sl_loader *ld = fx_open(&cfg);
    while (r->n < nbatches) take(ld, r, 0);
    sl_loader_destroy(ld);
    sl_budget_destroy(b);
}

/* A dataset of small files (the runs stay short under TSan), the
 * reference run of its first total batches, and a loader of slot_cfg over
 * it on a new 128 MiB shared budget, its 8 slots live. */
static sl_loader *shrink_loader(fx_dataset **d, sl_budget **b, run *ref, uint32_t total) {
    *d = fx_new(128, 0, 96, 160);
    reference(*d, ref, total);
    CHECK_OK(sl_budget_create(128 * MIB, b));
    sl_config cfg = slot_cfg(*d, *b);
    sl_loader *ld = fx_open(&cfg);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.slots, 8);
    return ld;
}

TEST(shrink_retires_slots_and_delivery_is_unchanged) {
    fx_dataset *d;
    sl_budget *b;
    uint32_t total = 128 / BATCH * EPOCHS;
    run ref = {{0}, 0}, got = {{0}, 0};
    sl_loader *ld = shrink_loader(&d, &b, &ref, total);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.slots_min, 2);
    CHECK_EQ(st.slots_retired, 0);
    /* only min_slots slots are fixed: the other six are counted as used */
    CHECK(st.mem[SL_MEM_BATCHES] >= 8 * 3 * MIB);
    CHECK(st.fixed_bytes < st.accounted_bytes - 6 * 3 * MIB + 1);
    uint64_t fixed = st.fixed_bytes;

    for (int i = 0; i < 12; i++) take(ld, &got, 0); /* every slot used once */
    bx_fill_slots(ld);
    uint64_t rss_full = bx_rss();
    sl_budget_info bi;
    CHECK_OK(sl_budget_stats(b, &bi));
    uint64_t limit = fixed + 8 * MIB; /* two elastic slots and a sample's room */
    CHECK(bi.used > limit + 8 * MIB);
    double t0 = bx_now_s(), t_under = -1;
    char err[256] = "";
    if (sl_budget_set_limit(b, limit, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    while (got.n < 2 * total / 3) {
        take(ld, &got, 0);
        CHECK_OK(sl_budget_stats(b, &bi));
        if (t_under < 0 && bi.used <= limit) t_under = bx_now_s() - t0;
    }
    bx_fill_slots(ld);
    CHECK_OK(sl_budget_stats(b, &bi));
    CHECK_OK(sl_loader_stats(ld, &st));
    uint64_t rss_shrunk = bx_rss();
    printf("shrink to %llu MiB: under it after %.3f s; %u slots live, %u retired; RSS %llu -> %llu MiB\n",
           (unsigned long long)(limit >> 20), t_under, st.slots, st.slots_retired,
           (unsigned long long)(rss_full >> 20), (unsigned long long)(rss_shrunk >> 20));
    CHECK(t_under >= 0 && t_under < 1.0);
    CHECK_LE(bi.used, limit);
    CHECK(st.slots_retired >= 4 && st.slots >= 2);
    CHECK_EQ(st.slots + st.slots_retired, 8);
    CHECK_EQ(st.errors, 0);
    CHECK_EQ(st.fixed_bytes, fixed);
    if (BX_RSS_MEANINGFUL) /* the retired slots' pages went back, not only their count */
        CHECK_LE(rss_shrunk + (uint64_t)st.slots_retired * 3 * MIB, rss_full + 4 * MIB);

    /* growing back: the slots come back, one try-request each */
    if (sl_budget_set_limit(b, 128 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    double t1 = bx_now_s();
    while (got.n < total) {
        take(ld, &got, 0);
        CHECK_OK(sl_loader_stats(ld, &st));
        if (st.slots == 8) break;
    }
    printf("grown back: %u slots live after %.3f s, %llu retirements, %llu reactivations\n", st.slots,
           bx_now_s() - t1, (unsigned long long)st.slot_retirements, (unsigned long long)st.slot_reactivations);
    CHECK_EQ(st.slots, 8);
    CHECK_EQ(st.slot_reactivations, st.slot_retirements);
    while (got.n < total) take(ld, &got, 0);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 0);
    sl_loader_destroy(ld);
    sl_budget_destroy(b);
    /* determinism across the shrink: the same batches, byte for byte */
    CHECK_EQ(got.n, ref.n);
    for (uint32_t i = 0; i < got.n && i < MAXB; i++) {
        if (got.sums[i] != ref.sums[i]) SL_FAIL("batch %u differs from the run without a shrink", i);
        CHECK(got.sums[i] != 0);
    }
    free(d);
}

TEST(a_consumer_holding_batches_keeps_getting_the_next) {
    fx_dataset *d;
    sl_budget *b;
    sl_loader *ld = slot_loader(128, &d, &b);
    run got = {{0}, 0};
    sl_batch *held[3];
    for (int i = 0; i < 3; i++) held[i] = take(ld, &got, 1);
    bx_fill_slots(ld);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    char err[256] = "";
    /* as low as it goes: only the fixed part */
    if (sl_budget_set_limit(b, st.fixed_bytes, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    /* the consumer, holding 3, gets a 4th: 4 live slots at least */
    sl_batch *fourth = take(ld, &got, 1);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.slots >= 4);
    CHECK_EQ(st.slots_held, 4);
    for (int i = 0; i < 3; i++) sl_loader_release(ld, held[i]);
    sl_loader_release(ld, fourth);
    /* released while the limit is over: retired down to the floor */
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.slots_retired >= 4);
    CHECK(st.slots >= st.slots_min);
    sl_budget_info bi;
    CHECK_OK(sl_budget_stats(b, &bi));
    printf("held 4 then released: %u live, %u retired; used %llu of limit %llu\n", st.slots, st.slots_retired,
           (unsigned long long)bi.used, (unsigned long long)bi.limit);
    /* the samples here fit the workers' baselines: the loader runs on at the floor */
    for (int i = 0; i < 10; i++) take(ld, &got, 0);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 0);
    CHECK_EQ(st.slots, st.slots_min);
    slot_done(ld, b, d);
}

TEST(pinning_the_region_fixes_the_slots) {
    fx_dataset *d;
    sl_budget *b;
    sl_loader *ld = slot_loader(64, &d, &b);
    run got = {{0}, 0};
    take(ld, &got, 0);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    uint64_t fixed0 = st.fixed_bytes;
    char err[256] = "";
    if (sl_budget_set_limit(b, fixed0 + 4 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    for (int i = 0; i < 6; i++) take(ld, &got, 0);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.slots_retired > 0);
    void *base;
    size_t len;
    /* retired slots cannot come back under this limit: refused, none comes back */
    CHECK_EQ(sl_loader_slot_region(ld, &base, &len), SL_EBUDGET);
    if (sl_budget_set_limit(b, 128 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    CHECK_OK(sl_loader_slot_region(ld, &base, &len));
    CHECK_EQ(len % 4096, 0);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.slots, 8);
    CHECK_EQ(st.slots_retired, 0);
    CHECK(st.fixed_bytes >= fixed0 + 6 * 3 * MIB); /* every slot fixed now */
    /* a shrink can no longer take slots; the limit cannot pass under them */
    CHECK_EQ(sl_budget_set_limit(b, fixed0 + 4 * MIB, err, sizeof err), SL_EBUDGET);
    if (sl_budget_set_limit(b, st.fixed_bytes + 4 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    for (int i = 0; i < 6; i++) take(ld, &got, 0);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.slots, 8);
    CHECK_EQ(st.errors, 0);
    slot_done(ld, b, d);
}

/* Locked pages (mlockall) cannot be dropped: the first retirement that
 * MADV_DONTNEED refuses fixes the slots instead, and delivery goes on. */
TEST(locked_pages_fix_the_slots) {
    if (BX_SANITIZED || mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
        printf("skipped: %s\n", BX_SANITIZED ? "sanitizer shadow memory" : "mlockall refused (RLIMIT_MEMLOCK)");
        return;
    }
    fx_dataset *d;
    sl_budget *b;
    sl_loader *ld = slot_loader(64, &d, &b);
    run got = {{0}, 0};
    for (int i = 0; i < 4; i++) take(ld, &got, 0);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    uint64_t fixed0 = st.fixed_bytes;
    char err[256] = "";
    if (sl_budget_set_limit(b, fixed0 + 4 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    for (int i = 0; i < 6; i++) take(ld, &got, 0);
    CHECK_OK(sl_loader_stats(ld, &st));
    munlockall();
    printf("locked: %u slots live, %u retired, fixed %llu -> %llu MiB\n", st.slots, st.slots_retired,
           (unsigned long long)(fixed0 >> 20), (unsigned long long)(st.fixed_bytes >> 20));
    CHECK_EQ(st.slots_retired, 0);
    CHECK_EQ(st.slots, 8);
    CHECK(st.fixed_bytes >= fixed0 + 6 * 3 * MIB);
    CHECK_EQ(st.errors, 0);
    slot_done(ld, b, d);
}

/* The limit moves between low and the ceiling, over and over, until the
 * consumer is done. */
typedef struct mover {
    sl_budget *b;
    uint64_t low;
    atomic_int done;
    atomic_uint moves;
} mover;

static void *move_limit(void *arg) {
    mover *m = arg;
    char err[256] = "";
    while (!atomic_load(&m->done)) {
        if (sl_budget_set_limit(m->b, m->low, err, sizeof err)) SL_FAIL("set_limit: %s", err);
        sched_yield();
        if (sl_budget_set_limit(m->b, 128 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
        atomic_fetch_add(&m->moves, 1);
        sched_yield();
    }
    return NULL;
}

/* A thread moves the limit down to the fixed part and up again while the
 * consumer takes batches, holding two at a time (each release while the
 * limit is low retires its slot on the consumer's thread) and moving the
 * limit too (give_back on its thread). A slot marked for retirement is
 * never opened for a batch: every batch's checksum is the one of a run
 * without a move. Its bytes go back exactly once: once every slot came
 * back, the batches' category holds the eight slots' blocks exactly, and
 * the budget is empty after destroy. */
TEST(retiring_slots_race_with_delivery) {
    fx_dataset *d;
    sl_budget *b;
    uint32_t total = 128 / BATCH * EPOCHS;
    run ref = {{0}, 0}, got = {{0}, 0}, more = {{0}, 0};
    sl_loader *ld = shrink_loader(&d, &b, &ref, total);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    uint64_t pitch = st.mem[SL_MEM_BATCHES] / 8, fixed = st.fixed_bytes;
    CHECK_EQ(st.mem[SL_MEM_BATCHES], 8 * pitch);

    /* the two batches it holds are taken before the limit first moves: the
     * floor is held + 1 = 3 from then on (taken while it held fewer, under
     * a limit at the fixed part, the slots would go down to min_slots = 2,
     * and the third batch would be SL_EHELD, as docs/memory.md says) */
    sl_batch *held[2] = {take(ld, &got, 1), take(ld, &got, 1)};
    mover m = {.b = b, .low = fixed};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, move_limit, &m), 0);
    char err[256] = "";
    for (uint32_t i = 2; got.n < total; i++) {
        sl_batch *bt = take(ld, &got, 1);
        if (held[i % 2]) sl_loader_release(ld, held[i % 2]);
        held[i % 2] = bt;
        if (i % 4 == 1 && sl_budget_set_limit(b, fixed, err, sizeof err)) SL_FAIL("set_limit: %s", err);
        if (i % 4 == 3 && sl_budget_set_limit(b, 128 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    }
    atomic_store(&m.done, 1);
    CHECK_EQ(pthread_join(t, NULL), 0);
    sl_loader_release(ld, held[0]);
    sl_loader_release(ld, held[1]);
    if (sl_budget_set_limit(b, 128 * MIB, err, sizeof err)) SL_FAIL("set_limit: %s", err);
    /* every slot comes back as batches are taken (a try-request each) */
    for (int i = 0; i < 1000; i++) {
        CHECK_OK(sl_loader_stats(ld, &st));
        if (st.slots == 8) break;
        take(ld, &more, 0);
    }
    printf("%u limit moves beside %u batches: %llu retirements, %llu reactivations\n", atomic_load(&m.moves),
           got.n, (unsigned long long)st.slot_retirements, (unsigned long long)st.slot_reactivations);
    CHECK_EQ(st.slots, 8);
    CHECK(st.slot_retirements > 0);
    CHECK_EQ(st.slot_reactivations, st.slot_retirements);
    CHECK_EQ(st.mem[SL_MEM_BATCHES], 8 * pitch);
    CHECK_EQ(st.errors, 0);
    sl_loader_destroy(ld);
    sl_budget_info bi;
    CHECK_OK(sl_budget_stats(b, &bi));
    CHECK_EQ(bi.used, 0);
    sl_budget_destroy(b);
    CHECK_EQ(got.n, ref.n);
    for (uint32_t i = 0; i < got.n && i < MAXB; i++)
        if (got.sums[i] != ref.sums[i]) SL_FAIL("batch %u differs from the run without a limit move", i);
    free(d);
}
