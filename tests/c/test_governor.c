/*
 * The governor for real, in a memory cgroup of 512 MiB, with a second
 * process in the same cgroup (a hog) that takes 288 MiB, 16 MiB every
 * 100 ms, holds it 2 s and exits. Budget + hog would pass the cgroup's
 * limit; the governor must move the live limit down as the hog grows,
 * nobody is OOM-killed (the hog exits 0, the cgroup's oom_kill count
 * stays), the loader delivers without an error throughout, and the limit
 * comes back to the ceiling once the hog is gone. Two loaders:
 *  - decoder growth: a governed budget of 256 MiB (margin 96 MiB) over
 *    large progressive JPEGs (36 MB of decoder memory each, 4 workers),
 *    given back as each sample ends;
 *  - prefetch: batch slots of 19 MiB, which the loader retires (pages
 *    returned) as the limit falls and brings back after; the batches are
 *    checked against a run without the hog.
 * The timeline (cgroup limit and usage, live limit, used, live slots,
 * samples/s) is printed twice a second.
 *
 * Needs root and a writable memory cgroup (v1 memory controller, or v2
 * with memory in the root's subtree_control); skips cleanly otherwise, and
 * under sanitizers (their shadow memory would be charged to the cgroup).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "bigimg.h"

#define MIB ((uint64_t)1 << 20)
#define CG_LIMIT (512 * MIB)
#define CEILING (256 * MIB)
#define HOG (288 * MIB)

static int write_file(const char *dir, const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static uint64_t read_u64(const char *dir, const char *name, const char *key) {
    char p[600], line[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    uint64_t v = 0;
    size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (!key) {
            v = strtoull(line, NULL, 10);
            break;
        }
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            v = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

/* A fresh memory cgroup with a limit: v1 first, then v2. 1 (v1) or 2, 0 if none. */
static int make_cgroup(char *dir, size_t len) {
    char lim[32];
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)CG_LIMIT);
    snprintf(dir, len, "/sys/fs/cgroup/memory/sl_gov_test_%d", (int)getpid());
    if (mkdir(dir, 0755) == 0) {
        if (write_file(dir, "memory.limit_in_bytes", lim) == 0) return 1;
        rmdir(dir);
    }
    char ctl[256] = "";
    FILE *f = fopen("/sys/fs/cgroup/cgroup.subtree_control", "r");
    if (f) {
        if (!fgets(ctl, sizeof ctl, f)) ctl[0] = 0;
        fclose(f);
    }
    if (!strstr(ctl, "memory")) return 0;
    snprintf(dir, len, "/sys/fs/cgroup/sl_gov_test_%d", (int)getpid());
    if (mkdir(dir, 0755) != 0) return 0;
    if (write_file(dir, "memory.max", lim) == 0) {
        write_file(dir, "memory.swap.max", "0"); /* where swap is accounted: none */
        return 2;
    }
    rmdir(dir);
    return 0;
}

static uint64_t oom_kills(const char *dir, int v) {
    return v == 1 ? read_u64(dir, "memory.oom_control", "oom_kill") : read_u64(dir, "memory.events", "oom_kill");
}

static uint64_t cg_usage(const char *dir, int v) {
    return v == 1 ? read_u64(dir, "memory.usage_in_bytes", NULL) : read_u64(dir, "memory.current", NULL);
}

/* The hog: 16 MiB more every 100 ms up to HOG, touched; held 2 s; exit 0.
 * (The loader gives growth back as each worker's sample ends: the governor
 * reacts within one decode, ~1 s for these images on a loaded 2-core
 * machine; a faster hog outruns that until the loader retires slots at
 * once, see docs/memory.md.) */
static void hog(int go_fd) {
    char c;
    if (read(go_fd, &c, 1) != 1) _exit(4); /* waits for the start */
    size_t step = 16 * MIB, n = HOG / step;
    for (size_t i = 0; i < n; i++) {
        void *p = mmap(NULL, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) _exit(3);
        memset(p, (int)i + 1, step);
        bx_sleep_ms(100);
    }
    bx_sleep_ms(2000);
    _exit(0);
}

/* What a job loads and how. */
typedef struct scenario {
    uint32_t batch, size, workers, prefetch, min_slots;
    uint64_t ceiling;
    int step_ms;          /* the consumer's "training step" per batch (0: flat out) */
    const char *sums;     /* write the batches' checksums here (NULL: none) */
} scenario;

typedef struct job {
    const char *cg;
    int v;
    sl_budget *b;
    sl_loader *ld;
    _Atomic uint64_t samples;
    _Atomic int stop;
    double t0;
    uint64_t min_limit_hog;
    uint32_t min_slots_hog;
    double hog_start, hog_end;
} job;

/* Twice a second: the timeline row. */
static void *sampler(void *arg) {
    job *j = arg;
    uint64_t last_samples = 0;
    double last_t = bx_now_s();
    printf("%6s %10s %10s %10s %10s %6s %8s  %s\n", "t_s", "cg_limit", "cg_usage", "live_lim", "used", "slots", "img/s",
           "phase");
    while (!atomic_load(&j->stop)) {
        bx_sleep_ms(500);
        sl_budget_info st;
        sl_budget_stats(j->b, &st);
        sl_stats ls;
        sl_loader_stats(j->ld, &ls);
        double t = bx_now_s();
        uint64_t s = atomic_load(&j->samples);
        const char *phase = j->hog_start == 0 ? "before" : j->hog_end == 0 ? "hog" : "after";
        printf("%6.1f %9lluM %9lluM %9lluM %9lluM %6u %8.1f  %s\n", t - j->t0, (unsigned long long)(CG_LIMIT >> 20),
               (unsigned long long)(cg_usage(j->cg, j->v) >> 20), (unsigned long long)(st.limit >> 20),
               (unsigned long long)(st.used >> 20), ls.slots, (double)(s - last_samples) / (t - last_t), phase);
        fflush(stdout);
        last_samples = s;
        last_t = t;
    }
    return NULL;
}

static sl_config job_cfg(const char *data, const scenario *sc, sl_budget *b) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = data;
    cfg.batch_size = sc->batch;
    cfg.size = sc->size;
    cfg.workers = sc->workers;
    cfg.prefetch = sc->prefetch;
    cfg.min_slots = sc->min_slots ? sc->min_slots : 1;
    cfg.flags = sc->sums ? SL_FLAG_CHECKSUM : 0;
    cfg.shared_budget = b;
    return cfg;
}

/* One batch (across epoch ends) into j, its checksum to sums. */
static void consume(job *j, const scenario *sc, FILE *sums) {
    sl_batch *bt;
    int rc = sl_loader_next(j->ld, &bt);
    if (rc == SL_EEND) return;
    if (rc) SL_FAIL("next: %s", sl_strerror(rc));
    atomic_fetch_add(&j->samples, sl_batch_len(bt));
    if (sums) fprintf(sums, "%llu\n", (unsigned long long)sl_batch_checksum(bt));
    if (sc->step_ms) bx_sleep_ms(sc->step_ms);
    sl_loader_release(j->ld, bt);
}

/* The governor's moves; returns how many. */
static size_t print_events(sl_budget *b) {
    sl_budget_event ev[64];
    size_t nev = sl_budget_events(b, 0, ev, 64);
    for (size_t i = 0; i < nev; i++)
        printf("event %5.2f s: %llu -> %llu MiB: %s\n", ev[i].t, (unsigned long long)(ev[i].old_limit >> 20),
               (unsigned long long)(ev[i].new_limit >> 20), ev[i].reason);
    return nev;
}

static int run_job(const char *cg, int v, const char *data, const scenario *sc) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows in order with any failure on stderr */
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (write_file(cg, "cgroup.procs", pid)) SL_FAIL("cannot move into %s", cg);
    /* The hog is forked now, while this process is small: forked later it
     * would share the loader's pages copy-on-write and be charged for every
     * page the loader writes after. It waits on a pipe for the start. */
    int start[2];
    CHECK(pipe(start) == 0);
    pid_t h = fork();
    CHECK(h >= 0);
    if (h == 0) {
        close(start[1]);
        hog(start[0]);
    }
    close(start[0]);
    FILE *sums = sc->sums ? fopen(sc->sums, "w") : NULL;
    CHECK(!sc->sums || sums);
    job j = {cg, v, NULL, NULL, 0, 0, 0, UINT64_MAX, UINT32_MAX, 0, 0};
    CHECK_OK(sl_budget_create(sc->ceiling, &j.b));
    sl_governor_opts go;
    sl_governor_opts_init(&go);
    go.margin = 96 * MIB;
    char err[512] = "";
    if (sl_budget_govern(j.b, &go, err, sizeof err)) SL_FAIL("govern: %s", err);
    sl_config cfg = job_cfg(data, sc, j.b);
    if (sl_loader_create(&cfg, &j.ld, err, sizeof err)) SL_FAIL("create: %s", err);
    j.t0 = bx_now_s();
    pthread_t ts;
    CHECK_EQ(pthread_create(&ts, NULL, sampler, &j), 0);
    uint64_t kills0 = oom_kills(cg, v);
    int hog_status = -1, hog_started = 0;
    double t_done = 0;
    for (;;) {
        consume(&j, sc, sums);
        double t = bx_now_s() - j.t0;
        sl_budget_info st;
        sl_budget_stats(j.b, &st);
        if (!hog_started && t > 1.5) {
            /* every slot filled first, so the loader's pages are resident (a
             * slot never filled is never touched: with workers slowed by a
             * busy machine the consumer keeps reusing two or three, and the
             * cgroup sees 40 MiB of the 190 MiB counted) */
            bx_fill_slots(j.ld);
            t = bx_now_s() - j.t0;
            j.hog_start = t;
            CHECK(write(start[1], "g", 1) == 1);
            hog_started = 1;
        }
        if (hog_started && !j.hog_end) {
            sl_stats ls;
            sl_loader_stats(j.ld, &ls);
            if (st.limit < j.min_limit_hog) j.min_limit_hog = st.limit;
            if (ls.slots < j.min_slots_hog) j.min_slots_hog = ls.slots;
            if (waitpid(h, &hog_status, WNOHANG) == h) j.hog_end = t;
        }
        if (j.hog_end && !t_done && st.limit == st.ceiling) t_done = t;
        if ((t_done && t > t_done + 1.0) || t > 25) break;
    }
    atomic_store(&j.stop, 1);
    pthread_join(ts, NULL);
    if (sums) CHECK(fclose(sums) == 0);
    sl_stats ls;
    sl_loader_stats(j.ld, &ls);
    size_t nev = print_events(j.b);
    printf("hog %.1f..%.1f s, lowest live limit %llu MiB, fewest slots %u of %u, back at the ceiling at %.1f s; "
           "%llu samples, %llu errors, %llu slot retirements, %llu reactivations\n",
           j.hog_start, j.hog_end, (unsigned long long)(j.min_limit_hog >> 20), j.min_slots_hog,
           ls.slots + ls.slots_retired, t_done, (unsigned long long)atomic_load(&j.samples),
           (unsigned long long)ls.errors, (unsigned long long)ls.slot_retirements,
           (unsigned long long)ls.slot_reactivations);
    CHECK(WIFEXITED(hog_status) && WEXITSTATUS(hog_status) == 0); /* not OOM-killed */
    CHECK_EQ(oom_kills(cg, v), kills0);
    CHECK_EQ(ls.errors, 0);
    CHECK_LE(j.min_limit_hog, sc->ceiling - 64 * MIB); /* the governor made room for the hog */
    CHECK(t_done > 0);                                 /* and gave it back after */
    CHECK(nev >= 2);
    sl_loader_destroy(j.ld);
    sl_budget_destroy(j.b);
    fflush(stdout);
    return 0;
}

/* A fresh memory cgroup, the job in a child moved into it; skips cleanly
 * where there is none (returns 0 then). Unused under a sanitizer, whose
 * builds skip the cgroup cases. */
static __attribute__((unused)) int in_cgroup(const char *data, const scenario *sc) {
    char cg[256];
    int v = geteuid() == 0 ? make_cgroup(cg, sizeof cg) : 0;
    if (!v) {
        printf("skipped: no writable memory cgroup here (needs root and cgroup v1 memory or v2 memory)\n");
        return 0;
    }
    fflush(stdout);
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) _exit(run_job(cg, v, data, sc));
    int st;
    CHECK(waitpid(p, &st, 0) == p);
    for (int i = 0; i < 50 && rmdir(cg) != 0; i++) bx_sleep_ms(100);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    return 1;
}

TEST(governor_makes_room_for_a_hog_in_a_memory_cgroup) {
#if BX_SANITIZED
    printf("skipped: sanitizer shadow memory would be charged to the cgroup\n");
    return;
#else
    char root[256];
    snprintf(root, sizeof root, "/tmp/sl_gov_XXXXXX");
    if (!mkdtemp(root)) SL_FAIL("mkdtemp");
    fx_track(root);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/c0", root);
    CHECK(mkdir(dir, 0755) == 0);
    for (int k = 0; k < 6; k++) {
        unsigned long n;
        unsigned char *jpg = bx_jpeg(3000, 2000, BX_PROGRESSIVE_444, (uint64_t)k, &n);
        char path[400];
        snprintf(path, sizeof path, "%s/img_%d.jpg", dir, k);
        fx_write(path, jpg, n);
        free(jpg);
    }
    /* decoder growth: 4 workers of 36 MB each, given back as each sample ends */
    scenario sc = {2, 224, 4, 0, 1, CEILING, 0, NULL};
    in_cgroup(root, &sc);
#endif
}

/*
 * Prefetch is what goes: batch slots of 19 MiB (32 samples of 3x448x448),
 * 10 of them, 2 fixed, a consumer that takes 60 ms a batch (so prefetch is
 * full and every slot resident). Budget + hog pass the cgroup's limit
 * unless the loader retires slots; it must, nobody is OOM-killed, and the
 * batches are the same bytes as a run without the hog (and the slots come
 * back after it).
 */
TEST(governor_retires_slots_for_a_hog) {
#if BX_SANITIZED
    printf("skipped: sanitizer shadow memory would be charged to the cgroup\n");
    return;
#else
    fx_dataset *d = fx_new(96, 0, 200, 300);
    char sums[300];
    snprintf(sums, sizeof sums, "%s.sums", d->root);
    fx_track(sums);
    scenario sc = {32, 448, 2, 10, 2, 320 * MIB, 60, sums};
    if (!in_cgroup(d->root, &sc)) {
        free(d);
        return;
    }
    /* the same batches as a run without the hog: a reference here, outside the cgroup */
    FILE *f = fopen(sums, "r");
    CHECK(f != NULL);
    sl_budget *b;
    CHECK_OK(sl_budget_create(sc.ceiling, &b));
    sc.sums = NULL;
    sl_config cfg = job_cfg(d->root, &sc, b);
    cfg.flags = SL_FLAG_CHECKSUM;
    sl_loader *ld = fx_open(&cfg);
    unsigned long long want;
    uint32_t n = 0;
    while (fscanf(f, "%llu", &want) == 1) {
        sl_batch *bt;
        int rc;
        while ((rc = sl_loader_next(ld, &bt)) == SL_EEND) {
        }
        CHECK_OK(rc);
        if (sl_batch_checksum(bt) != want) SL_FAIL("batch %u differs from the run without the hog", n);
        sl_loader_release(ld, bt);
        n++;
    }
    fclose(f);
    printf("%u batches delivered under the hog, each the same bytes as without it\n", n);
    CHECK(n > 10);
    sl_loader_destroy(ld);
    sl_budget_destroy(b);
    free(d);
#endif
}
