/* ctest: tsan */
/*
 * The loader's promises, end to end over real JPEG folders (fixture.h):
 * the budget is never passed under concurrency; the output depends on the
 * seed only (same checksums for 1, 2 and 8 workers, corrupt files or not);
 * batches come in sampler order; shards are disjoint and together
 * complete; a saved state resumes exactly; set_epoch; a consumer holding
 * every slot gets SL_EHELD; the skip and raise policies; the minimum budget
 * and its message; destroy at awkward moments.
 *
 * Data is small (tens of images, 32..64 px output) so each case runs in
 * seconds under TSan on 2 cores. Nothing asserts on timing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sys/resource.h>

#include "dataset.h"
#include "pipeline/sampler.h"
#include "records.h"
#include "run.h"

/* ---- helpers ---------------------------------------------------------------- */

/* fx_config over d with seed 7 and batch checksums. */
static void base_cfg(sl_config *c, const fx_dataset *d) {
    fx_config(c, d->root);
    c->seed = 7;
    c->flags = SL_FLAG_CHECKSUM;
}

/* Images of pure noise (large files: read buffers must grow past the
 * baseline), sides min_side..640. */
static fx_dataset *noise_set(uint32_t images, uint32_t quality, uint32_t min_side) {
    fx_opts o;
    fx_defaults(&o);
    o.images = images;
    o.noise = 1;
    o.quality = quality;
    o.min_side = min_side;
    o.max_side = 640;
    return fx_new_opts(&o);
}

/* The sampler's order for (n, world, rank, seed, epoch, shuffle, drop_last). Caller frees. */
static uint32_t *expected_order(uint64_t n, uint32_t rank, uint32_t world, int shuffle, int drop_last, uint64_t seed,
                                uint64_t epoch, uint64_t *per_rank) {
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, n, rank, world, shuffle, drop_last, seed));
    uint32_t *seq = calloc(s.per_rank, 4), *tmp = calloc(s.total > n ? s.total : n, 4);
    CHECK(seq && tmp);
    sl__sampler_fill(&s, epoch, seq, tmp);
    free(tmp);
    *per_rank = s.per_rank;
    return seq;
}

/* The dataset order is the fixture's file order, with the fixture's labels. */
static void check_paths(sl_loader *ld, const fx_dataset *d) {
    CHECK_EQ(sl_loader_dataset_size(ld), d->files);
    for (uint32_t k = 0; k < d->files; k++) {
        char buf[1024];
        const char *p = sl_loader_sample_path(ld, k, buf, sizeof buf);
        CHECK(p != NULL);
        size_t pl = strlen(p), rl = strlen(d->rel[k]);
        if (pl < rl || strcmp(p + pl - rl, d->rel[k])) SL_FAIL("sample %u is %s, expected .../%s", k, p, d->rel[k]);
    }
}

/* ---- budget under concurrency ---------------------------------------------- */

typedef struct watcher {
    uint64_t max_seen, samples;
} watcher;

/* Sample the accounted bytes as fast as possible while the consumer runs
 * (an fx_poller's call). */
static void watch(sl_loader *ld, void *arg) {
    watcher *w = arg;
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    if (st.accounted_bytes > st.budget_bytes)
        SL_FAIL("accounted %llu > budget %llu", (unsigned long long)st.accounted_bytes,
                (unsigned long long)st.budget_bytes);
    uint64_t sum = 0;
    for (uint32_t c = 0; c < st.mem_count; c++) sum += st.mem[c];
    (void)sum; /* categories are read one by one: only their peaks are checked (below) */
    if (st.accounted_bytes > w->max_seen) w->max_seen = st.accounted_bytes;
    w->samples++;
}

static void budget_under_concurrency(int pause_ms, int preset) {
    fx_dataset *d = noise_set(40, 95, 200);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 8;
    cfg.size = 48;
    cfg.batch_size = 8;
    cfg.preset = preset;
    uint64_t minimum = fx_min_budget(cfg);
    cfg.budget = minimum + (2u << 20); /* room for about one grown sample at a time: the rest wait */
    sl_loader *ld = fx_open(&cfg);
    watcher w = {0, 0};
    fx_poller p;
    fx_poll_start(&p, ld, watch, &w);
    fx_run *r = fx_run_new();
    fx_drive(ld, r, 2, FX_MAXB, pause_ms);
    fx_poll_stop(&p);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.budget_bytes, cfg.budget);
    CHECK_LE(st.peak_accounted_bytes, cfg.budget);
    CHECK_LE(w.max_seen, cfg.budget);
    CHECK_LE(st.fixed_bytes, st.accounted_bytes);
    CHECK_EQ(st.mem_count, sl_mem_category_count());
    for (uint32_t c = 0; c < st.mem_count; c++) CHECK_LE(st.mem_peak[c], cfg.budget);
    if (st.errors) {
        sl_error_record e;
        if (sl_loader_errors(ld, 0, &e, 1)) fprintf(stderr, "first error: %s\n", e.reason);
    }
    CHECK_EQ(st.errors, 0); /* every sample fit: pressure made workers wait, not fail */
    CHECK_EQ(r->ns, 2 * d->files);
    CHECK_EQ(st.samples, 2 * d->files);
    CHECK_EQ(st.workers, 8);
    fprintf(stderr, "budget %llu (minimum %llu) peak %llu, watcher saw max %llu in %llu samples, budget wait %.6f s\n",
            (unsigned long long)cfg.budget, (unsigned long long)minimum, (unsigned long long)st.peak_accounted_bytes,
            (unsigned long long)w.max_seen, (unsigned long long)w.samples, st.budget_wait_s);
    sl_loader_destroy(ld);
    free(r);
    free(d);
}

TEST(budget_never_exceeded_fast_consumer) { budget_under_concurrency(0, SL_PRESET_TRAIN); }
TEST(budget_never_exceeded_slow_consumer) { budget_under_concurrency(4, SL_PRESET_VAL); }

/* ---- determinism ------------------------------------------------------------ */

static void same_for_worker_counts(int preset, uint32_t corrupt) {
    fx_dataset *d = fx_new(26, corrupt, 64, 640);
    const uint32_t workers[3] = {1, 2, 8};
    fx_run *r[3];
    for (int i = 0; i < 3; i++) {
        sl_config cfg;
        base_cfg(&cfg, d);
        cfg.preset = preset;
        cfg.workers = workers[i];
        sl_loader *ld = fx_open(&cfg);
        if (i == 0) check_paths(ld, d);
        r[i] = fx_run_epochs(ld, 2);
        /* error records of the two epochs (workers may have begun epoch 2) */
        CHECK_EQ(fx_records(ld, 0, 2, NULL, SIZE_MAX), 2 * corrupt);
        sl_loader_destroy(ld);
    }
    uint64_t combined[3];
    for (int i = 0; i < 3; i++) {
        combined[i] = FX_FNV_BASIS;
        for (size_t k = 0; k < r[i]->nb; k++) {
            CHECK(r[i]->cks[k] != 0);
            combined[i] = fx_fnv(&r[i]->cks[k], 8, combined[i]);
        }
    }
    CHECK_EQ(r[0]->ns, 2 * (d->files - corrupt));
    for (int i = 1; i < 3; i++) {
        CHECK_EQ(r[i]->nb, r[0]->nb);
        CHECK_EQ(combined[i], combined[0]);
        fx_same_batches(r[0], 0, r[i], 0, r[0]->nb, "workers 1 vs more");
    }
    fprintf(stderr, "%zu batches, combined checksum %016llx for workers 1, 2, 8\n", r[0]->nb,
            (unsigned long long)combined[0]);
    for (int i = 0; i < 3; i++) free(r[i]);
    free(d);
}

TEST(checksums_workers_train) { same_for_worker_counts(SL_PRESET_TRAIN, 0); }
TEST(checksums_workers_val) { same_for_worker_counts(SL_PRESET_VAL, 0); }
TEST(checksums_workers_train_corrupt) { same_for_worker_counts(SL_PRESET_TRAIN, 5); }
TEST(checksums_workers_val_corrupt) { same_for_worker_counts(SL_PRESET_VAL, 5); }

/* ---- order ------------------------------------------------------------------ */

/* ---- worker priority ------------------------------------------------------ */

/* This process's threads whose nice value is `nice`. */
static int threads_at_nice(int nice) {
    DIR *dir = opendir("/proc/self/task");
    CHECK(dir != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* a thread that just ended */
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold anything; fields follow its last ')' */
        CHECK(p != NULL);
        long v = 0;
        for (int field = 3; field <= 19; field++) { /* state is field 3, nice field 19 (proc(5)) */
            while (*++p == ' ') {
            }
            if (field == 19) v = strtol(p, NULL, 10);
            while (*p && *p != ' ') p++;
        }
        n += v == nice;
    }
    closedir(dir);
    return n;
}

/* The CPU workers run worker_nice below the process (default 10); the
 * caller's thread keeps its priority; out of range is refused. */
TEST(workers_run_below_the_process_priority) {
    fx_dataset *d = fx_new(12, 0, 64, 64);
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0);
    CHECK(!(base == -1 && errno));
    if (base > 9) { /* no room below 19 to tell the settings apart */
        printf("skipped: this process runs at nice %d\n", base);
        free(d);
        return;
    }
    sl_config cfg;
    base_cfg(&cfg, d);
    CHECK_EQ(cfg.worker_nice, 10);
    cfg.workers = 3;
    int settings[] = {10, 4, 0};
    for (int k = 0; k < 3; k++) {
        cfg.worker_nice = settings[k];
        int before = threads_at_nice(base + settings[k]);
        sl_loader *ld = fx_open(&cfg);
        sl_batch *b;
        CHECK_OK(sl_loader_next(ld, &b)); /* every worker has started */
        if (settings[k]) CHECK_EQ(threads_at_nice(base + settings[k]) - before, 3);
        CHECK_EQ(getpriority(PRIO_PROCESS, 0), base); /* the process, and this thread, as they were */
        sl_loader_release(ld, b);
        sl_loader_destroy(ld);
    }
    cfg.worker_nice = 20;
    sl_loader *ld = NULL;
    char err[256] = "";
    CHECK_EQ(sl_loader_create(&cfg, &ld, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "worker_nice 20 out of range 0..19");
    free(d);
}

TEST(in_order_no_shuffle) {
    fx_dataset *d = fx_new(23, 0, 64, 320);
    for (int drop_last = 0; drop_last < 2; drop_last++) {
        sl_config cfg;
        base_cfg(&cfg, d);
        cfg.shuffle = 0;
        cfg.batch_size = 5;
        cfg.workers = 4;
        cfg.drop_last = drop_last;
        sl_loader *ld = fx_open(&cfg);
        uint64_t nb = drop_last ? 23 / 5 : (23 + 4) / 5;
        CHECK_EQ(sl_loader_len(ld), nb);
        CHECK_EQ(sl_loader_num_samples(ld), 23);
        fx_run *r = fx_run_epochs(ld, 2);
        CHECK_EQ(r->nb, 2 * nb);
        size_t s = 0;
        for (size_t i = 0; i < r->nb; i++) {
            CHECK_EQ(r->epoch[i], i / nb);
            CHECK_EQ(r->batch[i], i % nb);
            CHECK_EQ(r->n[i], (i % nb) == 4 ? 3 : 5);
            for (uint32_t j = 0; j < r->n[i]; j++, s++) {
                int64_t want = (int64_t)((i % nb) * 5 + j);
                CHECK_EQ(r->idx[s], want);
                CHECK_EQ(r->lab[s], d->label[want]);
            }
        }
        CHECK(r->end_after[nb - 1] && r->end_after[2 * nb - 1]);
        sl_loader_destroy(ld);
        free(r);
    }
    free(d);
}

TEST(in_order_shuffle_matches_sampler) {
    fx_dataset *d = fx_new(21, 0, 64, 200);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 3;
    cfg.seed = 12345;
    sl_loader *ld = fx_open(&cfg);
    fx_run *r = fx_run_epochs(ld, 3);
    size_t s = 0;
    for (uint64_t e = 0; e < 3; e++) {
        uint64_t per;
        uint32_t *want = expected_order(21, 0, 1, 1, 0, cfg.seed, e, &per);
        CHECK_EQ(per, 21);
        for (uint64_t j = 0; j < per; j++, s++) {
            if (r->idx[s] != want[j])
                SL_FAIL("epoch %llu position %llu: index %lld, sampler says %u", (unsigned long long)e,
                        (unsigned long long)j, (long long)r->idx[s], want[j]);
            CHECK_EQ(r->lab[s], d->label[want[j]]);
        }
        free(want);
    }
    CHECK_EQ(s, r->ns);
    sl_loader_destroy(ld);
    free(r);
    free(d);
}

/* ---- shards ----------------------------------------------------------------- */

static void shards(uint32_t world, int drop_last, uint32_t n) {
    fx_dataset *d = fx_new(n, 0, 64, 160);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        uint32_t *count = calloc(n, sizeof *count);
        CHECK(count != NULL);
        uint64_t per = 0;
        for (uint32_t rank = 0; rank < world; rank++) {
            sl_config cfg;
            base_cfg(&cfg, d);
            cfg.batch_size = 3;
            cfg.world_size = world;
            cfg.rank = rank;
            cfg.drop_last = drop_last;
            sl_loader *ld = fx_open(&cfg);
            CHECK_OK(sl_loader_set_epoch(ld, epoch));
            uint64_t want_per;
            uint32_t *want = expected_order(n, rank, world, 1, drop_last, cfg.seed, epoch, &want_per);
            CHECK_EQ(sl_loader_num_samples(ld), want_per);
            if (rank == 0) per = want_per;
            CHECK_EQ(want_per, per); /* equal length on every rank */
            fx_run *r = fx_run_epochs(ld, 1);
            CHECK_EQ(r->ns, per - (drop_last ? per % 3 : 0));
            for (size_t j = 0; j < r->ns; j++) {
                CHECK_EQ(r->idx[j], want[j]);
                CHECK_EQ(r->epoch[0], epoch);
                count[r->idx[j]]++;
            }
            free(want);
            free(r);
            sl_loader_destroy(ld);
        }
        /* the whole permutation: which samples the padding repeats */
        uint64_t p1;
        uint32_t *perm = expected_order(n, 0, 1, 1, 0, 7, epoch, &p1);
        uint32_t *want_count = calloc(n, sizeof *want_count);
        CHECK(want_count != NULL);
        uint64_t total = per * world;
        if (!drop_last) {
            CHECK(total >= n && total - n < world);
            for (uint32_t i = 0; i < n; i++) want_count[i] = 1;
            for (uint64_t i = 0; i < total - n; i++) want_count[perm[i]]++; /* wrap padding */
        }
        if (!drop_last) {
            for (uint32_t i = 0; i < n; i++)
                if (count[i] != want_count[i])
                    SL_FAIL("epoch %llu: sample %u seen %u times over %u ranks, expected %u", (unsigned long long)epoch,
                            i, count[i], world, want_count[i]);
        } else {
            /* disjoint: no sample twice; complete: every sample but the
             * rank tails and the uneven end of the permutation */
            uint64_t seen = 0;
            for (uint32_t i = 0; i < n; i++) {
                CHECK_LE(count[i], 1);
                seen += count[i];
            }
            CHECK_EQ(seen, (per - per % 3) * world);
        }
        free(want_count);
        free(perm);
        free(count);
    }
    free(d);
}

TEST(shards_world3) { shards(3, 0, 22); }
TEST(shards_world4) { shards(4, 0, 22); }
TEST(shards_world4_drop_last) { shards(4, 1, 22); }
TEST(shards_world3_exact) { shards(3, 0, 21); }

/* ---- resume ------------------------------------------------------------------ */

/* Take k batches, save the state, destroy; a new loader (other worker
 * count) restores it and must deliver exactly the rest of the reference
 * run. */
static void resume_at(const fx_dataset *d, const sl_config *base, const fx_run *ref, int epochs, size_t k) {
    sl_config cfg = *base;
    sl_loader *a = fx_open(&cfg);
    fx_run *ra = fx_run_new();
    fx_drive(a, ra, epochs, k, 0);
    CHECK_EQ(ra->nb, k);
    fx_same_batches(ref, 0, ra, 0, k, "before the save");
    sl_state st;
    CHECK_OK(sl_loader_get_state(a, &st));
    CHECK_EQ(st.version, SL_STATE_VERSION);
    CHECK_EQ(st.dataset_size, d->files);
    sl_loader_destroy(a);

    cfg.workers = base->workers == 1 ? 3 : 1;
    sl_loader *b = fx_open(&cfg);
    CHECK_OK(sl_loader_set_state(b, &st));
    fx_run *rb = fx_run_new();
    /* the epochs still to run: the saved one (unless it is already over) and those after */
    int left = epochs - (int)st.epoch;
    fx_drive(b, rb, left, FX_MAXB, 0);
    if (rb->nb != ref->nb - k)
        SL_FAIL("resumed after %zu batches (epoch %llu batch %llu tail %llu): %zu batches, expected %zu", k,
                (unsigned long long)st.epoch, (unsigned long long)st.batch, (unsigned long long)st.tail, rb->nb,
                ref->nb - k);
    fx_same_batches(ref, k, rb, 0, rb->nb, "resumed");
    sl_loader_destroy(b);
    free(ra);
    free(rb);
}

TEST(resume_mid_epoch) {
    fx_dataset *d = fx_new(30, 0, 64, 320);
    sl_config cfg;
    base_cfg(&cfg, d);
    fx_run *ref = fx_reference(&cfg, 2);
    CHECK_EQ(ref->nb, 16);
    resume_at(d, &cfg, ref, 2, 1);
    resume_at(d, &cfg, ref, 2, 3);
    resume_at(d, &cfg, ref, 2, 10); /* mid epoch 1 */
    free(ref);
    free(d);
}

TEST(resume_epoch_boundary) {
    fx_dataset *d = fx_new(30, 0, 64, 320);
    sl_config cfg;
    base_cfg(&cfg, d);
    fx_run *ref = fx_reference(&cfg, 3);
    CHECK_EQ(ref->nb, 24);
    resume_at(d, &cfg, ref, 3, 0);  /* before anything */
    resume_at(d, &cfg, ref, 3, 8);  /* after the last batch of epoch 0 */
    resume_at(d, &cfg, ref, 3, 16); /* after the last batch of epoch 1 */
    resume_at(d, &cfg, ref, 3, 23); /* one before the very end */

    /* after SL_EEND itself: the state names the next epoch's start */
    sl_loader *a = fx_open(&cfg);
    fx_run *ra = fx_run_epochs(a, 1);
    sl_state st;
    CHECK_OK(sl_loader_get_state(a, &st));
    CHECK_EQ(st.epoch, 1);
    CHECK_EQ(st.batch, 0);
    sl_loader_destroy(a);
    sl_loader *b = fx_open(&cfg);
    CHECK_OK(sl_loader_set_state(b, &st));
    fx_run *rb = fx_run_epochs(b, 2);
    CHECK_EQ(rb->nb, 16);
    fx_same_batches(ref, 8, rb, 0, 16, "resumed after SL_EEND");
    sl_loader_destroy(b);
    free(ra);
    free(rb);
    free(ref);
    free(d);
}

/* Corrupt files make batches refill from the tail: every save point must
 * still resume exactly (the state carries the tail). */
TEST(resume_with_corrupt_every_point) {
    fx_dataset *d = fx_new(22, 6, 64, 200);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 3;
    fx_run *ref = fx_reference(&cfg, 2);
    CHECK_EQ(ref->ns, 2 * 22);
    for (size_t k = 0; k <= ref->nb; k++) resume_at(d, &cfg, ref, 2, k);
    free(ref);
    free(d);
}

TEST(resume_drop_last_corrupt) {
    fx_dataset *d = fx_new(25, 4, 64, 200);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.drop_last = 1;
    cfg.batch_size = 3;
    fx_run *ref = fx_reference(&cfg, 2);
    for (size_t i = 0; i < ref->nb; i++) CHECK_EQ(ref->n[i], 3);
    CHECK_EQ(ref->ns, 2 * 24); /* 25 good, 24 fit in full batches */
    for (size_t k = 0; k <= ref->nb; k += 2) resume_at(d, &cfg, ref, 2, k);
    free(ref);
    free(d);
}

/* set_state on a loader that is already running (and across epochs):
 * rewinds to the saved point. */
TEST(resume_across_epochs_same_loader) {
    fx_dataset *d = fx_new(19, 3, 64, 200);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.batch_size = 5;
    fx_run *ref = fx_reference(&cfg, 3);
    sl_loader *ld = fx_open(&cfg);
    fx_run *r = fx_run_new();
    fx_drive(ld, r, 3, 6, 0); /* into epoch 1 */
    sl_state st;
    CHECK_OK(sl_loader_get_state(ld, &st));
    CHECK_EQ(st.epoch, 1);
    fx_run *more = fx_run_new();
    fx_drive(ld, more, 3, 5, 0); /* run on into epoch 2 */
    CHECK_OK(sl_loader_set_state(ld, &st));
    fx_run *rest = fx_run_epochs(ld, 2); /* epochs 1 and 2 remain */
    CHECK_EQ(rest->nb, ref->nb - 6);
    fx_same_batches(ref, 6, rest, 0, rest->nb, "rewound");
    sl_loader_destroy(ld);
    free(r);
    free(more);
    free(rest);
    free(ref);
    free(d);
}

/* ---- epochs ------------------------------------------------------------------ */

static int is_permutation(const int64_t *idx, size_t n) {
    uint8_t *seen = calloc(n, 1);
    CHECK(seen != NULL);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (idx[i] < 0 || (size_t)idx[i] >= n || seen[idx[i]]) ok = 0;
        else seen[idx[i]] = 1;
    }
    free(seen);
    return ok;
}

TEST(set_epoch_semantics) {
    fx_dataset *d = fx_new(20, 0, 64, 200);
    sl_config cfg;
    base_cfg(&cfg, d);
    sl_loader *ld = fx_open(&cfg);
    fx_run *r = fx_run_epochs(ld, 1);
    /* auto-advance: after SL_EEND the next call starts epoch 1 */
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.epoch, 1);
    fx_drive(ld, r, 2, FX_MAXB, 0);
    CHECK_EQ(r->ns, 40);
    CHECK_EQ(r->epoch[5], 1);
    CHECK_EQ(r->batch[5], 0);
    CHECK(is_permutation(r->idx, 20));
    CHECK(is_permutation(r->idx + 20, 20));
    CHECK(memcmp(r->idx, r->idx + 20, 20 * sizeof(int64_t)) != 0); /* each epoch its own order */

    /* set_epoch(0) replays epoch 0 exactly, bytes included */
    CHECK_OK(sl_loader_set_epoch(ld, 0));
    fx_run *again = fx_run_epochs(ld, 1);
    fx_same_batches(r, 0, again, 0, 5, "epoch 0 replayed");
    /* set_epoch in the middle of an epoch, with a batch held: the held
     * batch stays valid, the next one is batch 0 of the new epoch */
    sl_batch *held;
    CHECK_OK(sl_loader_next(ld, &held)); /* epoch 1 batch 0 */
    sl_field img;
    CHECK_OK(sl_batch_find(held, "image", &img));
    uint64_t h = fx_fnv(img.data, (size_t)img.nbytes, 1);
    CHECK_OK(sl_loader_set_epoch(ld, 5));
    fx_run *e5 = fx_run_epochs(ld, 1);
    CHECK_EQ(fx_fnv(img.data, (size_t)img.nbytes, 1), h);
    CHECK_EQ(sl_batch_epoch(held), 1);
    sl_loader_release(ld, held);
    CHECK_EQ(e5->epoch[0], 5);
    CHECK_EQ(e5->batch[0], 0);
    uint64_t per;
    uint32_t *want = expected_order(20, 0, 1, 1, 0, cfg.seed, 5, &per);
    for (size_t j = 0; j < 20; j++) CHECK_EQ(e5->idx[j], want[j]);
    free(want);
    sl_loader_destroy(ld);

    /* same seed, new loader: the same orders; another seed: another */
    fx_run *rs = fx_reference(&cfg, 2);
    fx_same_batches(r, 0, rs, 0, 10, "same seed");
    cfg.seed = 8;
    fx_run *ro = fx_reference(&cfg, 1);
    CHECK(memcmp(r->idx, ro->idx, 20 * sizeof(int64_t)) != 0);
    free(r), free(again), free(e5), free(rs), free(ro), free(d);
}

/* ---- a consumer that never gives batches back -------------------------------- */

TEST(held_consumer_gets_eheld) {
    fx_dataset *d = fx_new(30, 0, 64, 320);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.prefetch = 3;
    cfg.workers = 4;
    sl_loader *ld = fx_open(&cfg);
    sl_batch *b[3];
    uint64_t h[3];
    for (int i = 0; i < 3; i++) {
        CHECK_OK(sl_loader_next(ld, &b[i]));
        sl_field f;
        CHECK_OK(sl_batch_find(b[i], "image", &f));
        h[i] = fx_fnv(f.data, (size_t)f.nbytes, 1);
    }
    sl_batch *x = (sl_batch *)1;
    CHECK_EQ(sl_loader_next(ld, &x), SL_EHELD);
    CHECK(x == NULL);
    sl_stats s0, s1;
    CHECK_OK(sl_loader_stats(ld, &s0));
    CHECK_EQ(s0.slots, 3);
    CHECK_EQ(s0.slots_held, 3);
    bx_sleep_ms(100); /* workers have nothing to fill: nothing may grow */
    for (int i = 0; i < 1000; i++) CHECK_EQ(sl_loader_next(ld, &x), SL_EHELD);
    bx_sleep_ms(50);
    CHECK_OK(sl_loader_stats(ld, &s1));
    CHECK_EQ(s1.accounted_bytes, s0.accounted_bytes);
    CHECK_EQ(s1.batches, 3);
    CHECK_LE(s1.peak_accounted_bytes, cfg.budget);
    for (int i = 0; i < 3; i++) { /* held batches untouched */
        sl_field f;
        CHECK_OK(sl_batch_find(b[i], "image", &f));
        CHECK_EQ(fx_fnv(f.data, (size_t)f.nbytes, 1), h[i]);
        CHECK_EQ(sl_batch_index(b[i]), i);
    }
    /* give one back: delivery goes on in order */
    sl_loader_release(ld, b[1]);
    sl_batch *n3;
    CHECK_OK(sl_loader_next(ld, &n3));
    CHECK_EQ(sl_batch_index(n3), 3);
    CHECK_EQ(sl_loader_next(ld, &x), SL_EHELD);
    sl_loader_release(ld, NULL);
    sl_loader_release(ld, b[0]);
    sl_loader_release(ld, b[2]);
    sl_loader_release(ld, n3);
    fx_run *r = fx_run_epochs(ld, 1);
    CHECK_EQ(r->nb, 8 - 4);
    CHECK_EQ(r->batch[0], 4);
    sl_loader_destroy(ld);
    free(r);
    free(d);
}

/* ---- error policies ----------------------------------------------------------- */

static int expected_code(int kind) {
    return kind == FX_TRUNCATED ? SL_ECORRUPT : SL_EFORMAT; /* garbage and empty: not an image */
}

TEST(skip_policy_every_good_sample_once) {
    fx_dataset *d = fx_new(27, 7, 64, 320);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 3;
    cfg.batch_size = 5;
    sl_loader *ld = fx_open(&cfg);
    check_paths(ld, d);
    fx_run *r = fx_run_epochs(ld, 2);
    size_t s = 0;
    for (int e = 0; e < 2; e++) {
        uint32_t seen[64] = {0};
        size_t start = s;
        for (size_t i = 0; i < r->nb; i++) {
            if (r->epoch[i] != (uint64_t)e) continue;
            /* refills keep batches full; only the epoch's last may be short */
            if (!r->end_after[i]) CHECK_EQ(r->n[i], 5);
            for (uint32_t j = 0; j < r->n[i]; j++, s++) {
                int64_t k = r->idx[s];
                CHECK_EQ(d->kind[k], FX_GOOD);
                CHECK_EQ(r->lab[s], d->label[k]);
                seen[k]++;
            }
        }
        CHECK_EQ(s - start, 27);
        for (uint32_t k = 0; k < d->files; k++) CHECK_EQ(seen[k], d->kind[k] == FX_GOOD ? 1 : 0);
    }
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.errors >= 14); /* more if workers already began epoch 2 */
    sl_error_record recs[64];
    size_t n = sl_loader_errors(ld, 0, recs, 64);
    CHECK_EQ(n, st.errors);
    uint8_t named[2][64] = {{0}};
    for (size_t i = 0; i < n; i++) {
        if (recs[i].epoch >= 2) continue;
        CHECK(recs[i].index < d->files);
        CHECK(d->kind[recs[i].index] != FX_GOOD);
        if (recs[i].code != expected_code(d->kind[recs[i].index]))
            SL_FAIL("%s: code %s, reason %s", d->rel[recs[i].index], sl_strerror(recs[i].code), recs[i].reason);
        CHECK(recs[i].reason[0] != 0);
        named[recs[i].epoch][recs[i].index] = 1;
    }
    /* every bad file named in each epoch, no good one ever */
    for (uint32_t k = 0; k < d->files; k++)
        for (int e = 0; e < 2; e++) CHECK_EQ(named[e][k], d->kind[k] == FX_GOOD ? 0 : 1);
    CHECK_EQ(fx_records(ld, 0, 2, NULL, SIZE_MAX), 14);
    CHECK_EQ(sl_loader_errors(ld, 10, recs, 64), n - 10); /* paging */
    sl_loader_destroy(ld);
    free(r);
    free(d);
}

TEST(raise_policy_then_continues) {
    fx_dataset *d = fx_new(18, 4, 64, 200); /* 22 files: batches of 4 -> 6 nominal, last of 2 */
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.shuffle = 0;
    cfg.on_error = SL_ON_ERROR_RAISE;
    cfg.workers = 3;
    sl_loader *ld = fx_open(&cfg);
    for (int e = 0; e < 2; e++) {
        for (uint64_t k = 0; k < 6; k++) {
            int bad = 0;
            for (uint64_t p = k * 4; p < k * 4 + 4 && p < 22; p++) bad |= d->kind[p] != FX_GOOD;
            sl_batch *b;
            int rc = sl_loader_next(ld, &b);
            if (bad) {
                if (rc != SL_ESAMPLE) SL_FAIL("epoch %d batch %llu: %s, expected SL_ESAMPLE", e, (unsigned long long)k, sl_strerror(rc));
                CHECK(b == NULL);
                continue;
            }
            CHECK_OK(rc);
            CHECK_EQ(sl_batch_index(b), k);
            CHECK_EQ(sl_batch_epoch(b), e);
            sl_field idx;
            CHECK_OK(sl_batch_find(b, "index", &idx));
            CHECK_EQ(sl_batch_len(b), k == 5 ? 2 : 4);
            for (uint32_t j = 0; j < sl_batch_len(b); j++) CHECK_EQ(((int64_t *)idx.data)[j], (int64_t)(k * 4 + j));
            sl_loader_release(ld, b);
        }
        sl_batch *b;
        CHECK_EQ(sl_loader_next(ld, &b), SL_EEND);
    }
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    sl_error_record recs[16];
    size_t n = sl_loader_errors(ld, 0, recs, 16), in2 = 0;
    CHECK_EQ(n, st.errors);
    for (size_t i = 0; i < n; i++) {
        CHECK(d->kind[recs[i].index] != FX_GOOD);
        in2 += recs[i].epoch < 2;
    }
    CHECK_EQ(in2, 8); /* (records of epoch 2 if workers already began it) */
    sl_loader_destroy(ld);
    free(d);
}

/* ---- the minimum budget --------------------------------------------------------- */

/* "... minimum working set of 12.3 MiB ..." -> bytes (and the rounding unit). */
static double parse_minimum(const char *msg, double *unit) {
    const char *p = strstr(msg, "minimum working set of ");
    CHECK(p != NULL);
    p += strlen("minimum working set of ");
    double v = strtod(p, (char **)&p);
    while (*p == ' ') p++;
    static const char *u[] = {"B", "KiB", "MiB", "GiB"};
    for (int i = 3; i >= 0; i--)
        if (!strncmp(p, u[i], strlen(u[i]))) {
            *unit = (double)(1ull << (10 * i));
            return v * *unit;
        }
    SL_FAIL("no unit in %s", msg);
}

TEST(memory_minimum_message) {
    fx_dataset *d = fx_new(12, 0, 64, 160);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 2;
    cfg.size = 64;
    cfg.batch_size = 8;
    uint64_t m = fx_min_budget(cfg);
    cfg.budget = 1u << 20;
    sl_loader *ld = NULL;
    char err[512] = "";
    CHECK_EQ(sl_loader_create(&cfg, &ld, err, sizeof err), SL_EBUDGET);
    CHECK(ld == NULL);
    CHECK_STR_CONTAINS(err, "minimum");
    double unit, stated = parse_minimum(err, &unit);
    fprintf(stderr, "message: %s\nbisected minimum: %llu bytes\n", err, (unsigned long long)m);
    /* the stated minimum is the real one, to its printed precision */
    if (stated < (double)m - 0.06 * unit || stated > (double)m + 0.06 * unit)
        SL_FAIL("message states %.0f bytes, the real minimum is %llu", stated, (unsigned long long)m);
    cfg.budget = m - 1;
    CHECK_EQ(sl_loader_create(&cfg, &ld, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "minimum");
    /* exactly the minimum: a working pipeline (small samples fit in the
     * workers' baselines), inside its budget */
    cfg.budget = m;
    ld = fx_open(&cfg);
    fx_run *r = fx_run_epochs(ld, 2);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 0);
    CHECK_EQ(r->ns, 24);
    CHECK_LE(st.peak_accounted_bytes, m);
    sl_loader_destroy(ld);
    free(r);
    free(d);
}

/* ---- destroy at awkward moments ------------------------------------------------- */

TEST(destroy_while_busy) {
    fx_dataset *d = noise_set(30, 85, 320);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 8;
    for (int round = 0; round < 4; round++) {
        /* right after create: workers are starting on the first batches */
        sl_loader_destroy(fx_open(&cfg));
        /* after one batch: workers busy filling the next ones */
        sl_loader *ld = fx_open(&cfg);
        sl_batch *b;
        CHECK_OK(sl_loader_next(ld, &b));
        sl_loader_release(ld, b);
        sl_loader_destroy(ld);
        /* while the consumer holds batches */
        ld = fx_open(&cfg);
        sl_batch *h1, *h2;
        CHECK_OK(sl_loader_next(ld, &h1));
        CHECK_OK(sl_loader_next(ld, &h2));
        bx_sleep_ms(round);
        sl_loader_destroy(ld);
    }
    /* while workers wait for budget: tight budget, large files */
    sl_config tight = cfg;
    tight.budget = fx_min_budget(cfg) + (512u << 10);
    for (int round = 0; round < 3; round++) {
        sl_loader *ld = fx_open(&tight);
        sl_batch *b;
        CHECK_OK(sl_loader_next(ld, &b));
        bx_sleep_ms(2 * round);
        sl_loader_destroy(ld);
    }
    free(d);
}

/* The consumer and a thread reading stats, errors and state concurrently
 * with the workers (TSan: the read-side API is safe to call from another
 * thread). */
static void read_side(sl_loader *ld, void *arg) {
    (void)arg;
    sl_stats st;
    sl_state s;
    sl_error_record e[4];
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_OK(sl_loader_get_state(ld, &s));
    (void)sl_loader_errors(ld, 0, e, 4);
    CHECK_LE(st.accounted_bytes, st.budget_bytes);
}

TEST(concurrent_readers) {
    fx_dataset *d = fx_new(24, 4, 64, 320);
    sl_config cfg;
    base_cfg(&cfg, d);
    cfg.workers = 4;
    sl_loader *ld = fx_open(&cfg);
    fx_poller p;
    fx_poll_start(&p, ld, read_side, NULL);
    fx_run *r = fx_run_epochs(ld, 2);
    fx_poll_stop(&p);
    CHECK_EQ(r->ns, 48);
    sl_loader_destroy(ld);
    free(r);
    free(d);
}
