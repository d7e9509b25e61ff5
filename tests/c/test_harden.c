/* ctest: tsan */
/*
 * Hardening of the loader (issue 9): refusals that never depend on timing
 * or the worker count, refills as parallel rounds equal to the serial rule,
 * the failure-rate guard and poisoning, a dataset removed under a running
 * loader, transient failures (out of file descriptors) waited out, the
 * timed next, signals kept off the workers, calls after destroy, states no
 * loader can be at, and the single-image API's limits and reasons.
 * fork() has its own file (test_fork.c: not under TSan).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "check.h"
#include "fixture.h"
#include "sluice.h"

/* ---- helpers ------------------------------------------------------------------ */

/* run.h's fx_config in batches of 8, with batch checksums. */
static void small_cfg(sl_config *c, const char *root) {
    fx_config(c, root);
    c->batch_size = 8;
    c->flags = SL_FLAG_CHECKSUM;
}

/* One epoch: the chained checksum of its batches, samples and failures. */
typedef struct run {
    uint64_t cks, samples, errors;
    int rc; /* what ended it: SL_EEND, or the error */
} run;

static run run_epoch(sl_loader *ld) {
    run r = {0, 0, 0, 0};
    sl_batch *b;
    while ((r.rc = sl_loader_next(ld, &b)) == 0) {
        r.cks = (r.cks ^ sl_batch_checksum(b)) * 0x100000001b3ull;
        r.samples += sl_batch_len(b);
        sl_loader_release(ld, b);
    }
    sl_stats st;
    if (sl_loader_stats(ld, &st) == 0) r.errors = st.errors;
    return r;
}

static void progressive(struct jpeg_compress_struct *c, int arg) {
    (void)arg;
    jpeg_simple_progression(c);
}

/* A progressive JPEG of w x h (flat grey: small file, big decode need:
 * its whole-image coefficient buffer). Caller frees. */
static unsigned char *progressive_jpeg(uint32_t w, uint32_t h, unsigned long *len) {
    uint8_t *px = malloc((size_t)w * h * 3);
    CHECK(px != NULL);
    memset(px, 128, (size_t)w * h * 3);
    unsigned char *out;
    fx_jpeg_tuned(px, w, h, 50, progressive, 0, &out, len);
    free(px);
    return out;
}

/* ---- refusals that depend only on the sample and the configuration ----------- */

/* A tight budget, large progressive images among small ones: the same
 * bytes and the same refusals at 1, 2, 7 and 64 workers. (Before, a
 * sample was refused when it needed more than budget - fixed part, and the
 * fixed part grows with the workers: 64 workers refused what 1 decoded.) */
TEST(tight_budget_same_bytes_any_worker_count) {
    fx_dataset *d = fx_new(60, 0, 64, 160);
    unsigned long jl;
    /* ~100 MiB of coefficients: more than a quarter of what 64 workers and
     * their stacks need, so every worker count refuses them alike */
    unsigned char *j = progressive_jpeg(4500, 3000, &jl);
    fx_put(d->root, "c00/big_a.jpg", j, jl);
    fx_put(d->root, "c01/big_b.jpg", j, jl);
    fx_put(d->root, "c02/big_c.jpg", j, jl);
    free(j);
    sl_config c;
    small_cfg(&c, d->root);
    c.workers = 64;
    c.budget = fx_min_budget(c); /* the tightest budget 64 workers accept */
    fprintf(stderr, "budget %llu\n", (unsigned long long)c.budget);
    static const uint32_t counts[] = {1, 2, 7, 64};
    run first = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        c.workers = counts[i];
        sl_loader *ld = fx_open(&c);
        run r = run_epoch(ld);
        CHECK_EQ(r.rc, SL_EEND);
        sl_error_record rec[8];
        size_t n = sl_loader_errors(ld, 0, rec, 8);
        CHECK_EQ(n, 3); /* the three big ones, whatever the worker count */
        for (size_t k = 0; k < n; k++) {
            CHECK_EQ(rec[k].code, SL_EBUDGET);
            CHECK_STR_CONTAINS(rec[k].reason, "a quarter of the budget");
        }
        sl_stats st;
        CHECK_OK(sl_loader_stats(ld, &st));
        CHECK_LE(st.peak_accounted_bytes, c.budget);
        fprintf(stderr, "%u workers: %llu samples, checksum %016llx\n", counts[i], (unsigned long long)r.samples,
                (unsigned long long)r.cks);
        if (i == 0) first = r;
        CHECK_EQ(r.samples, 60);
        CHECK(r.cks == first.cks);
        sl_loader_destroy(ld);
    }
    free(d);
}

/* Create refuses a budget under which the dataset's ordinary samples would
 * be refused, with the numbers; a budget that holds them is accepted. */
TEST(create_refuses_budget_for_ordinary_samples) {
    fx_dataset *d = fx_new(2, 0, 64, 64);
    unsigned long jl;
    unsigned char *j = progressive_jpeg(2000, 1500, &jl); /* ~22 MiB of coefficients */
    char rel[64];
    for (int i = 0; i < 12; i++) {
        snprintf(rel, sizeof rel, "c%02d/photo_%02d.jpg", i % 3, i);
        fx_put(d->root, rel, j, jl);
    }
    free(j);
    sl_config c;
    small_cfg(&c, d->root);
    c.budget = 32u << 20; /* the pipeline fits; a quarter (8 MiB) holds none of the photos */
    sl_loader *ld = NULL;
    char err[512] = "";
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EBUDGET);
    CHECK(ld == NULL);
    fprintf(stderr, "%s\n", err);
    CHECK_STR_CONTAINS(err, "12 of 14 sampled files need more");
    CHECK_STR_CONTAINS(err, "photo_");
    CHECK_STR_CONTAINS(err, "2000x1500, progressive");
    CHECK_STR_CONTAINS(err, "raise the budget to at least");
    /* the budget it names is accepted, and every photo loads */
    const char *at = strstr(err, "at least ") + strlen("at least ");
    double v = strtod(at, NULL);
    CHECK(strstr(at, "MiB") != NULL);
    c.budget = (uint64_t)((v + 0.1) * (1 << 20));
    ld = fx_open(&c);
    run r = run_epoch(ld);
    CHECK_EQ(r.rc, SL_EEND);
    CHECK_EQ(r.samples, 14);
    CHECK_EQ(r.errors, 0);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- refills: parallel rounds, the serial rule's result ----------------------- */

/* The serial rule (loader.c's head), simulated over the identity order:
 * which sample indices each batch holds, and the failures in record order. */
typedef struct model {
    uint32_t nb;
    uint32_t n[256], first[256];
    uint32_t idx[4096];
    uint32_t nfail, fail[4096];
} model;

static void model_epoch(const fx_dataset *d, uint32_t B, model *m) {
    uint32_t N = d->files, T = N, ns = 0;
    memset(m, 0, sizeof *m);
    for (uint32_t k = 0; k * B < N && k * B < T; k++) {
        int pos[1024];   /* sample at each position, -1 a hole */
        for (uint32_t j = 0; j < B; j++) {
            uint32_t p = k * B + j;
            pos[j] = p < N && p < T ? (int)p : -1;
            if (pos[j] >= 0 && d->kind[p] != FX_GOOD) {
                m->fail[m->nfail++] = p;
                pos[j] = -1;
            }
        }
        uint32_t have = 0;
        for (uint32_t j = 0; j < B; j++) have += pos[j] >= 0;
        uint32_t j = 0;
        while (have < B && T > (k + 1) * B) {
            while (j < B && pos[j] >= 0) j++;
            uint32_t p = --T;
            if (d->kind[p] == FX_GOOD) {
                pos[j] = (int)p;
                have++;
            } else {
                m->fail[m->nfail++] = p;
            }
        }
        if (have == 0) continue;
        m->first[m->nb] = ns;
        m->n[m->nb] = have;
        for (uint32_t q = 0; q < B; q++)
            if (pos[q] >= 0) m->idx[ns++] = (uint32_t)pos[q];
        m->nb++;
        if (T <= (k + 1) * B) break;
    }
}

static void refills_match_model(uint32_t workers) {
    fx_dataset *d = calloc(1, sizeof *d);
    model *m = calloc(1, sizeof *m);
    CHECK(d != NULL && m != NULL);
    fx_simple(d, 84, 36, 48, 96); /* 30 % undecodable */
    sl_config c;
    small_cfg(&c, d->root);
    c.shuffle = 0; /* the order is the identity: the model needs no sampler */
    c.workers = workers;
    c.max_error_rate = 1;
    model_epoch(d, c.batch_size, m);
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    uint32_t nb = 0;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        sl_field idx;
        CHECK_OK(sl_batch_find(b, "index", &idx));
        CHECK(nb < m->nb);
        CHECK_EQ(sl_batch_len(b), m->n[nb]);
        for (uint32_t i = 0; i < m->n[nb]; i++) {
            int64_t got = ((int64_t *)idx.data)[i], want = m->idx[m->first[nb] + i];
            if (got != want) SL_FAIL("batch %u position %u: sample %lld, the serial rule gives %lld", nb, i,
                                     (long long)got, (long long)want);
        }
        nb++;
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    CHECK_EQ(nb, m->nb);
    sl_error_record r[128];
    size_t n = sl_loader_errors(ld, 0, r, 128), k = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].epoch != 0) continue;
        CHECK(k < m->nfail);
        if (r[i].index != m->fail[k]) SL_FAIL("failure %zu: sample %llu, the serial rule records %u first", k,
                                             (unsigned long long)r[i].index, m->fail[k]);
        k++;
    }
    CHECK_EQ(k, m->nfail);
    sl_loader_destroy(ld);
    free(m);
    free(d);
}

TEST(refills_serial_rule_1_worker) { refills_match_model(1); }
TEST(refills_serial_rule_8_workers) { refills_match_model(8); }

/* ---- the failure-rate guard and poisoning -------------------------------------- */

/* 20 % of the files bad: the guard (10 %) stops the loader once 100 samples
 * were tried, at the same batch whatever the worker count, naming the rate
 * and the first failures; later calls get SL_ESTATE. */
TEST(error_rate_guard_trips) {
    fx_dataset *d = fx_new(160, 40, 48, 64);
    sl_config c;
    small_cfg(&c, d->root);
    uint64_t where[2];
    for (int w = 0; w < 2; w++) {
        c.workers = w ? 6 : 1;
        sl_loader *ld = fx_open(&c);
        run r = run_epoch(ld);
        CHECK_EQ(r.rc, SL_EERRORS);
        where[w] = r.samples;
        char why[400];
        CHECK_EQ(sl_loader_poisoned(ld, why, sizeof why), SL_EERRORS);
        fprintf(stderr, "%s\n", why);
        CHECK_STR_CONTAINS(why, "over max_error_rate 10.0%");
        CHECK_STR_CONTAINS(why, "first failures: ");
        CHECK_STR_CONTAINS(why, d->root);
        sl_batch *b;
        CHECK_EQ(sl_loader_next(ld, &b), SL_ESTATE);
        CHECK_EQ(sl_loader_next_timeout(ld, &b, 0), SL_ESTATE);
        CHECK_EQ(sl_loader_set_epoch(ld, 3), SL_ESTATE);
        sl_stats st;
        CHECK_OK(sl_loader_stats(ld, &st)); /* still readable */
        unsigned long long nf = 0, nt = 0;
        CHECK_EQ(sscanf(why, "%llu of %llu samples tried", &nf, &nt), 2);
        CHECK(nt >= SL_ERROR_RATE_MIN_TRIED && nf * 10 > nt);
        CHECK_EQ(nf, st.errors);
        sl_loader_destroy(ld);
    }
    CHECK_EQ(where[0], where[1]);
    /* a rate the data stays under: the epoch ends normally */
    c.max_error_rate = 0.3;
    sl_loader *ld = fx_open(&c);
    run r = run_epoch(ld);
    CHECK_EQ(r.rc, SL_EEND);
    CHECK_EQ(r.samples, 160);
    CHECK_EQ(sl_loader_poisoned(ld, NULL, 0), 0);
    sl_loader_destroy(ld);
    free(d);
}

/* Every file bad: the first epoch stops the loader (not an empty epoch),
 * however few samples that is, and even with max_error_rate 1. */
TEST(every_sample_failing_stops) {
    fx_dataset *d = fx_new(0, 12, 48, 64);
    sl_config c;
    small_cfg(&c, d->root);
    c.max_error_rate = 1;
    c.on_error = SL_ON_ERROR_SKIP;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    CHECK_EQ(sl_loader_next(ld, &b), SL_EERRORS);
    char why[400];
    CHECK_EQ(sl_loader_poisoned(ld, why, sizeof why), SL_EERRORS);
    CHECK_STR_CONTAINS(why, "every sample tried in epoch 0 failed (12 failures, none decoded)");
    sl_loader_destroy(ld);
    free(d);
}

/* An ImageFolder of n junk files of 1,000 bytes each (no image format). */
static void junk_folder(char *root, size_t len, uint32_t n) {
    fx_empty_dir(root, len);
    char path[512], junk[1000];
    memset(junk, 'j', sizeof junk);
    snprintf(path, sizeof path, "%s/c0", root);
    CHECK_OK(mkdir(path, 0755));
    for (uint32_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/c0/f%05u.jpg", root, i);
        fx_write(path, junk, sizeof junk);
    }
}

/* Nothing loadable: the guard judges samples as they are committed, so
 * the loader stops after about SL_ERROR_RATE_MIN_TRIED of them (and what
 * the workers had claimed ahead, at most the slots' batches) — it read all
 * 2,000 files before, batch 0's refills taking the whole epoch before any
 * batch was delivered. The same point for 1 and 4 workers. */
TEST(all_bad_dataset_stops_within_a_bound) {
    char root[256];
    junk_folder(root, sizeof root, 2000);
    sl_config c;
    small_cfg(&c, root);
    uint64_t tried[2];
    for (int w = 0; w < 2; w++) {
        c.workers = w ? 4 : 1;
        sl_loader *ld = fx_open(&c);
        sl_batch *b;
        CHECK_EQ(sl_loader_next(ld, &b), SL_EERRORS);
        char why[400];
        CHECK_EQ(sl_loader_poisoned(ld, why, sizeof why), SL_EERRORS);
        fprintf(stderr, "%s\n", why);
        unsigned long long nf = 0, nt = 0;
        CHECK_EQ(sscanf(why, "%llu of %llu samples tried", &nf, &nt), 2);
        CHECK(nf == nt && nt >= SL_ERROR_RATE_MIN_TRIED && nt < SL_ERROR_RATE_MIN_TRIED + c.batch_size);
        CHECK_STR_CONTAINS(why, "first failures: ");
        tried[w] = nt;
        sl_stats st;
        CHECK_OK(sl_loader_stats(ld, &st));
        uint64_t files = st.storage_bytes_read / 1000, bound = nt + (uint64_t)(st.slots + 1) * c.batch_size + c.workers;
        fprintf(stderr, "%u workers: %llu files read (bound %llu) of 2000\n", c.workers, (unsigned long long)files,
                (unsigned long long)bound);
        CHECK(files <= bound);
        CHECK_EQ(st.errors, nf);
        sl_loader_destroy(ld);
    }
    CHECK_EQ(tried[0], tried[1]);
}

/* With max_error_rate 1 (the rate never stops it), an epoch whose first
 * 1,000 samples all failed still stops: reading the rest of a dataset
 * that has held nothing loadable is not going on. */
TEST(none_decoded_stops_even_with_rate_1) {
    char root[256];
    junk_folder(root, sizeof root, 1500);
    sl_config c;
    small_cfg(&c, root);
    c.max_error_rate = 1;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    CHECK_EQ(sl_loader_next(ld, &b), SL_EERRORS);
    char why[400];
    CHECK_EQ(sl_loader_poisoned(ld, why, sizeof why), SL_EERRORS);
    CHECK_STR_CONTAINS(why, "the first 1000 samples tried in epoch 0 all failed, none decoded");
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.storage_bytes_read / 1000 < 1500);
    sl_loader_destroy(ld);
}

/* The dataset folder removed between epochs: SL_ENOENT saying so, not
 * empty epochs; the loader is poisoned. */
TEST(vanished_source_is_an_error) {
    fx_dataset *d = fx_new(24, 0, 48, 64);
    sl_config c;
    small_cfg(&c, d->root);
    c.prefetch = 2;
    sl_loader *ld = fx_open(&c);
    run r = run_epoch(ld);
    CHECK_EQ(r.rc, SL_EEND);
    CHECK_EQ(r.samples, 24);
    fx_cleanup(); /* rm -rf the dataset */
    int rc, batches = 0, ends = 0;
    sl_batch *b;
    /* at most what was decoded before the removal (with 2 slots, up to the
     * next epoch's 3 batches), then the error */
    while ((rc = sl_loader_next(ld, &b)) == 0 || (rc == SL_EEND && ++ends < 2)) {
        if (rc == 0) batches++;
        if (rc == 0) sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_ENOENT);
    CHECK(batches <= 3);
    char why[400];
    CHECK_EQ(sl_loader_poisoned(ld, why, sizeof why), SL_ENOENT);
    CHECK_STR_CONTAINS(why, "was removed while the loader ran");
    CHECK_EQ(sl_loader_next(ld, &b), SL_ESTATE);
    sl_loader_destroy(ld);
    free(d);
}

/* The newest failure of a dropped batch is known even when the error
 * records are full (max_error_records 1): SampleError must name it. */
TEST(last_error_beyond_max_records) {
    fx_dataset *d = calloc(1, sizeof *d);
    CHECK(d != NULL);
    fx_simple(d, 21, 3, 48, 64); /* bad files at 4, 12, 20 */
    sl_config c;
    small_cfg(&c, d->root);
    c.shuffle = 0;
    c.on_error = SL_ON_ERROR_RAISE;
    c.max_error_records = 1;
    sl_loader *ld = fx_open(&c);
    sl_error_record e;
    CHECK_EQ(sl_loader_last_error(ld, &e), SL_EEND);
    int dropped = 0, rc;
    sl_batch *b;
    for (uint64_t k = 0; (rc = sl_loader_next(ld, &b)) != SL_EEND; k++) {
        if (rc == 0) {
            sl_loader_release(ld, b);
            continue;
        }
        CHECK_EQ(rc, SL_ESAMPLE);
        CHECK_OK(sl_loader_last_error(ld, &e));
        CHECK(e.index / 8 == k); /* a sample of the batch just dropped */
        CHECK(d->kind[e.index] != FX_GOOD);
        dropped++;
    }
    CHECK_EQ(dropped, 3);
    sl_error_record r[4];
    CHECK_EQ(sl_loader_errors(ld, 0, r, 4), 1);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- transient failures -------------------------------------------------------- */

/* The highest file descriptor open now. */
static int highest_fd(void) {
    int hi = 0;
    DIR *dir = opendir("/proc/self/fd");
    CHECK(dir != NULL);
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd > hi) hi = fd;
    }
    closedir(dir);
    return hi;
}

/* Out of file descriptors with 32 workers (RLIMIT_NOFILE just above what is
 * open, in a child process): every good image delivered, no error record. */
TEST(emfile_waited_out) {
    fx_dataset *d = fx_new(96, 0, 48, 96);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sl_config c;
        small_cfg(&c, d->root);
        c.workers = 32;
        c.budget = 192u << 20; /* 32 workers' stacks and scratch */
        sl_loader *ld = fx_open(&c);
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = (rlim_t)highest_fd() + 3; /* two samples open at a time, for 32 workers */
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
        run r = run_epoch(ld);
        fprintf(stderr, "child: %llu samples, %llu errors, rc %d\n", (unsigned long long)r.samples,
                (unsigned long long)r.errors, r.rc);
        int ok = r.rc == SL_EEND && r.samples == 96 && r.errors == 0;
        sl_loader_destroy(ld);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    free(d);
}

/* ---- the timed next, signals, calls after destroy ------------------------------ */

/* Waiting in slices loses nothing: the batches a timed-next loop gets are
 * those of a plain loop; a timeout consumes nothing. */
TEST(next_timeout_slices_lose_nothing) {
    fx_dataset *d = fx_new(40, 4, 200, 640);
    sl_config c;
    small_cfg(&c, d->root);
    c.workers = 1;
    sl_loader *ld = fx_open(&c);
    run plain = run_epoch(ld);
    CHECK_EQ(plain.rc, SL_EEND);
    sl_loader_destroy(ld);
    ld = fx_open(&c);
    uint64_t cks = 0, samples = 0, timeouts = 0, polls = 0;
    int rc;
    sl_batch *b;
    for (;;) { /* mostly polls (0 ms: a batch takes milliseconds to decode), some 1 ms waits */
        rc = sl_loader_next_timeout(ld, &b, polls++ % 8 == 7 ? 1 : 0);
        if (rc == SL_ETIMEDOUT) {
            CHECK(b == NULL);
            timeouts++;
            continue;
        }
        if (rc != 0) break;
        cks = (cks ^ sl_batch_checksum(b)) * 0x100000001b3ull;
        samples += sl_batch_len(b);
        sl_loader_release(ld, b);
    }
    fprintf(stderr, "%llu timeouts\n", (unsigned long long)timeouts);
    CHECK_EQ(rc, SL_EEND);
    CHECK(cks == plain.cks);
    CHECK_EQ(samples, plain.samples);
    CHECK(timeouts > 0);
    sl_loader_destroy(ld);
    free(d);
}

static _Atomic int sig_main, sig_other;
static pthread_t main_thread;

static void on_usr1(int s) {
    (void)s;
    if (pthread_equal(pthread_self(), main_thread)) atomic_fetch_add(&sig_main, 1);
    else atomic_fetch_add(&sig_other, 1);
}

/* Workers block asynchronous signals: a process-directed signal always
 * lands on a thread of the caller, never on a worker. */
TEST(signals_never_reach_workers) {
    fx_dataset *d = fx_new(40, 0, 96, 320);
    main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    sl_config c;
    small_cfg(&c, d->root);
    c.workers = 8;
    sl_loader *ld = fx_open(&c);
    for (int e = 0; e < 3; e++) {
        sl_batch *b;
        int rc;
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            kill(getpid(), SIGUSR1);
            sl_loader_release(ld, b);
        }
        CHECK_EQ(rc, SL_EEND);
    }
    sl_loader_destroy(ld);
    CHECK(atomic_load(&sig_main) > 0);
    CHECK_EQ(atomic_load(&sig_other), 0);
    free(d);
}

/* A batch released after its loader was destroyed, and a second destroy:
 * both do nothing (ASan would see a use after free). */
TEST(release_after_destroy_is_ignored) {
    fx_dataset *d = fx_new(16, 0, 48, 64);
    sl_config c;
    small_cfg(&c, d->root);
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    sl_loader_destroy(ld);
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
    /* a batch pointer that is no slot of a live loader is ignored too */
    sl_loader *ld2 = fx_open(&c);
    sl_batch *b2;
    CHECK_OK(sl_loader_next(ld2, &b2));
    sl_loader_release(ld2, (sl_batch *)((char *)b2 + 1));
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld2, &st));
    CHECK_EQ(st.slots_held, 1);
    sl_loader_release(ld2, b2);
    CHECK_OK(sl_loader_stats(ld2, &st));
    CHECK_EQ(st.slots_held, 0);
    sl_loader_destroy(ld2);
    free(d);
}

/* States no loader can be at are refused (before, tail 0 skipped to the
 * next epoch); the ones a loader reports are accepted. */
TEST(unreachable_states_refused) {
    fx_dataset *d = fx_new(20, 0, 48, 64);
    sl_config c;
    small_cfg(&c, d->root);
    sl_loader *ld = fx_open(&c);
    sl_state st;
    CHECK_OK(sl_loader_get_state(ld, &st));
    CHECK_OK(sl_loader_set_state(ld, &st));
    sl_state bad = st;
    bad.tail = 0;
    CHECK_EQ(sl_loader_set_state(ld, &bad), SL_ESTATE);
    bad = st;
    bad.batch = 2;
    bad.tail = 16; /* batch 2 starts at position 16: nothing left for it */
    CHECK_EQ(sl_loader_set_state(ld, &bad), SL_ESTATE);
    bad.batch = 3; /* past the epoch's 3 batches */
    bad.tail = 20;
    CHECK_EQ(sl_loader_set_state(ld, &bad), SL_ESTATE);
    bad.batch = 2;
    bad.tail = 17;
    CHECK_OK(sl_loader_set_state(ld, &bad));
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    CHECK_EQ(sl_batch_index(b), 2);
    CHECK_EQ(sl_batch_len(b), 1);
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- single images: limits of 0, reasons from the header stage ----------------- */

/* A JPEG header declaring w x h (no image data needed for the header stage). */
static unsigned char *declaring(uint32_t w, uint32_t h, unsigned long *len) {
    unsigned char *j = fx_jpeg_bytes(16, 16, 1, 0, 90, len);
    size_t i = 2;
    while (i + 8 < *len && !(j[i] == 0xFF && j[i + 1] == 0xC0)) i++;
    CHECK(i + 8 < *len);
    j[i + 5] = (unsigned char)(h >> 8), j[i + 6] = (unsigned char)h;
    j[i + 7] = (unsigned char)(w >> 8), j[i + 8] = (unsigned char)w;
    return j;
}

TEST(image_limits_zero_is_default) {
    unsigned long len;
    unsigned char *j = declaring(20000, 20000, &len); /* 4e8 pixels, over the default 2^26 */
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.max_pixels = 0;
    o.max_bytes = 0;
    char err[256] = "";
    uint32_t w, h, ch;
    CHECK_EQ(sl_image_check(j, len, &o, &w, &h, &ch, err, sizeof err), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "20000x20000 = 400000000 pixels, over the max_pixels limit of 67108864");
    CHECK_EQ(sl_image_output_size(j, len, &o, &w, &h, &ch), SL_ELIMIT);
    uint8_t px[64];
    CHECK_EQ(sl_image_decode(j, len, &o, px, sizeof px, err, sizeof err), SL_ELIMIT);
    free(j);
    /* the reasons of the header stage reach the caller */
    CHECK_EQ(sl_image_check("", 0, &o, &w, &h, &ch, err, sizeof err), SL_EFORMAT);
    CHECK_STR_CONTAINS(err, "empty file");
    j = fx_jpeg_bytes(64, 48, 2, 0, 90, &len);
    CHECK_OK(sl_image_check(j, len, &o, &w, &h, &ch, err, sizeof err));
    CHECK_EQ(w, 64);
    CHECK_EQ(h, 48);
    CHECK_EQ(ch, 3);
    o.max_bytes = 100;
    CHECK_EQ(sl_image_check(j, len, &o, &w, &h, &ch, err, sizeof err), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "over the max_bytes limit of 100");
    free(j);
}

/* The loader's max_pixels has the one meaning of every max_pixels
 * (include/sluice.h): 0 is the default, 2^26, not "none"; UINT64_MAX is
 * none. (sl_video_opts: test_video.max_pixels_zero_is_the_default.) */
TEST(loader_max_pixels_zero_is_default) {
    fx_dataset *d = fx_new(11, 0, 48, 96);
    unsigned long len;
    unsigned char *j = declaring(20000, 20000, &len);
    char path[400];
    snprintf(path, sizeof path, "%s/%s/zz_big.jpg", d->root, "c00"); /* sorts last of its class */
    fx_write(path, j, len);
    free(j);
    for (int none = 0; none < 2; none++) {
        sl_config c;
        sl_config_init(&c);
        c.source = d->root;
        c.batch_size = 4;
        c.size = 32;
        c.workers = 2;
        c.max_pixels = none ? UINT64_MAX : 0;
        sl_loader *ld = fx_open(&c);
        sl_batch *b;
        int rc;
        while ((rc = sl_loader_next(ld, &b)) == 0) sl_loader_release(ld, b);
        CHECK_EQ(rc, SL_EEND);
        sl_error_record r[4];
        size_t n = sl_loader_errors(ld, 0, r, 4);
        if (!none) {
            CHECK_EQ(n, 1);
            CHECK_STR_CONTAINS(r[0].reason, "20000x20000 = 400000000 pixels, over the max_pixels limit of 67108864");
        }
        for (size_t k = 0; none && k < n; k++) /* what its few bytes hold may fail it, never the limit */
            if (strstr(r[k].reason, "max_pixels")) SL_FAIL("UINT64_MAX is no pixel limit, yet: %s", r[k].reason);
        sl_loader_destroy(ld);
    }
    free(d);
}

/* max_error_rate must be a fraction >= 0 (NaN and negatives refused). */
TEST(max_error_rate_validated) {
    fx_dataset *d = fx_new(8, 0, 48, 64);
    sl_config c;
    small_cfg(&c, d->root);
    sl_loader *ld = NULL;
    char err[256];
    c.max_error_rate = -0.5;
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "max_error_rate");
    c.max_error_rate = NAN;
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EINVAL);
    sl_config_init(&c);
    CHECK(c.max_error_rate == 0.1);
    free(d);
}
