/* ctest: tsan */
/*
 * The sample cache through the loader (issue 12; the cache alone is
 * test_cache*.c): the hit rate of shuffled epochs against the optimum
 * c/N with an LRU of the same bytes beside it, delivered bytes and error
 * records identical with and without a cache (private, node, decoded) for
 * 1 and 8 workers and across a jump, ranks sharing a node cache while one
 * is SIGKILLed mid-epoch, the budget's refusal, the governor shedding the
 * cache first, and the resident bound with the cache full.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>

#include "bigimg.h"
#include "threads.h" /* tx_stat_state */

#include "cache/cache.h"

typedef unsigned long long ull;
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static uint64_t file_size(const char *p) {
    struct stat st;
    CHECK(stat(p, &st) == 0);
    return (uint64_t)st.st_size;
}

static uint64_t dataset_bytes(const fx_dataset *d, uint64_t *sizes) {
    uint64_t sum = 0;
    for (uint32_t k = 0; k < d->files; k++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", d->root, d->rel[k]);
        sizes[k] = file_size(p);
        sum += sizes[k];
    }
    return sum;
}

static void base_config(sl_config *c, const fx_dataset *d, uint32_t workers) {
    sl_config_init(c);
    c->source = d->root;
    c->batch_size = 8;
    c->size = 32;
    c->workers = workers;
    c->budget = (uint64_t)96 << 20;
    c->flags |= SL_FLAG_CHECKSUM;
    c->max_error_rate = 1;
}

/* ---- hit rate against the optimum and LRU ------------------------------------------ */

/* An LRU of cap bytes over keys [0, n): doubly linked by index. */
typedef struct lru {
    uint64_t cap, used;
    int32_t *prev, *next;
    uint8_t *in;
    int32_t head, tail; /* head: most recent */
    const uint64_t *size;
} lru;

static void lru_unlink(lru *l, int32_t k) {
    if (l->prev[k] >= 0) l->next[l->prev[k]] = l->next[k];
    else l->head = l->next[k];
    if (l->next[k] >= 0) l->prev[l->next[k]] = l->prev[k];
    else l->tail = l->prev[k];
}

/* Use k: 1 on a hit. */
static int lru_use(lru *l, int32_t k) {
    int hit = l->in[k];
    if (hit) lru_unlink(l, k);
    else {
        if (l->size[k] > l->cap) return 0;
        while (l->used + l->size[k] > l->cap) {
            int32_t old = l->tail;
            lru_unlink(l, old);
            l->in[old] = 0;
            l->used -= l->size[old];
        }
        l->in[k] = 1;
        l->used += l->size[k];
    }
    l->prev[k] = -1;
    l->next[k] = l->head;
    if (l->head >= 0) l->prev[l->head] = k;
    l->head = k;
    if (l->tail < 0) l->tail = k;
    return hit;
}

#define HR_FILES 1000
#define HR_EPOCHS 5

/* 5 shuffled epochs with a private cache of `fraction` of the dataset's
 * bytes (values; the index on top), counted from the second epoch: uses
 * that hit, and bytes served from the cache (the bytes delivered less
 * those read from storage). Files differ in size, so the bytes are what
 * c/N bounds; the uses are checked too, with room for which files happen
 * to be cached. The LRU runs over the very order the loader delivered. */
static void hit_rate_at(const fx_dataset *d, const uint64_t *sizes, uint64_t total, double fraction) {
    sl_config c;
    base_config(&c, d, 4);
    /* capacity covers the index too: find its cost, then ask for fraction x total of values */
    uint64_t values = (uint64_t)(fraction * (double)total);
    c.cache = values + (HR_FILES * 80 + 16384);
    sl_loader *ld = fx_open(&c);
    sl_stats st, at1;
    CHECK_OK(sl_loader_stats(ld, &st));
    sl_loader_destroy(ld);
    c.cache = values + (c.cache - st.cache_capacity);
    ld = fx_open(&c);
    lru l = {0};
    l.prev = calloc(HR_FILES, sizeof *l.prev), l.next = calloc(HR_FILES, sizeof *l.next);
    l.in = calloc(HR_FILES, 1), l.size = sizes, l.head = l.tail = -1;
    CHECK_OK(sl_loader_stats(ld, &st));
    l.cap = st.cache_capacity;
    uint64_t lru_hits = 0, lru_uses = 0, lru_bytes_hit = 0, bytes_used = 0;
    for (int e = 0; e < HR_EPOCHS; e++) {
        sl_batch *b;
        int rc;
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            sl_field ix;
            CHECK_OK(sl_batch_find(b, "index", &ix));
            for (uint32_t i = 0; i < sl_batch_len(b); i++) {
                int32_t k = (int32_t)((int64_t *)ix.data)[i];
                int hit = lru_use(&l, k);
                if (e > 0) lru_hits += (uint64_t)hit, lru_uses++, lru_bytes_hit += hit ? sizes[k] : 0;
                if (e > 0) bytes_used += sizes[k];
            }
            sl_loader_release(ld, b);
        }
        CHECK_EQ(rc, SL_EEND);
        if (e == 0) CHECK_OK(sl_loader_stats(ld, &at1));
    }
    CHECK_OK(sl_loader_stats(ld, &st));
    /* the workers run a few batches ahead of the counts taken at the epochs' ends */
    uint64_t hits = st.cache_hits - at1.cache_hits, looks = hits + st.cache_misses - at1.cache_misses;
    uint64_t read = st.storage_bytes_read - at1.storage_bytes_read;
    CHECK(looks > lru_uses * 9 / 10 && looks < lru_uses * 11 / 10);
    double rate = (double)hits / (double)looks, lru_rate = (double)lru_hits / (double)lru_uses;
    double bytes_rate = read < bytes_used ? 1 - (double)read / (double)bytes_used : 0;
    double lru_bytes_rate = (double)lru_bytes_hit / (double)bytes_used;
    double optimum = MIN(1.0, (double)st.cache_capacity / (double)total);
    printf("cache %.3f of the dataset (%llu of %llu bytes): bytes served sluice %.4f, LRU %.4f; uses hit sluice "
           "%.4f, LRU %.4f; %llu evictions\n",
           optimum, (ull)st.cache_capacity, (ull)total, bytes_rate, lru_bytes_rate, rate, lru_rate,
           (ull)st.cache_evictions);
    if (bytes_rate < 0.95 * optimum) SL_FAIL("bytes served %.4f below 0.95 x the optimum %.4f", bytes_rate, optimum);
    if (rate < 0.8 * optimum) SL_FAIL("uses hit %.4f below 0.8 x the optimum %.4f", rate, optimum);
    if (fraction < 1 && !(lru_bytes_rate < bytes_rate / 2))
        SL_FAIL("LRU %.4f is not far below sluice %.4f", lru_bytes_rate, bytes_rate);
    CHECK_LE(st.peak_accounted_bytes, c.budget);
    sl_loader_destroy(ld);
    free(l.prev), free(l.next), free(l.in);
}

static void hit_rate_case(double fraction) {
    fx_opts o;
    fx_defaults(&o);
    o.images = HR_FILES;
    o.min_side = 48, o.max_side = 128;
    fx_dataset *d = calloc(1, sizeof *d);
    fx_make(&o, d);
    uint64_t *sizes = calloc(HR_FILES, sizeof *sizes);
    uint64_t total = dataset_bytes(d, sizes);
    hit_rate_at(d, sizes, total, fraction);
    free(sizes);
    free(d);
}

TEST(hit_rate_0_05) { hit_rate_case(0.05); }
TEST(hit_rate_0_17) { hit_rate_case(0.17); }
TEST(hit_rate_0_50) { hit_rate_case(0.50); }
TEST(hit_rate_1_00) { hit_rate_case(1.00); }

/* ---- the same bytes with and without ------------------------------------------------ */

#define RUN_MAX 256

/* What a run delivered: each batch's checksum, and the error records. */
typedef struct run_out {
    uint32_t nb;
    uint64_t sums[RUN_MAX];
    uint32_t nerr;
    sl_error_record errs[64];
    sl_stats st;
} run_out;

/* 3 epochs, then a jump back to epoch 1 resumed at its batch 2. */
static void run_loader(const sl_config *c, run_out *out) {
    memset(out, 0, sizeof *out);
    sl_loader *ld = fx_open(c);
    sl_state at;
    memset(&at, 0, sizeof at);
    for (int e = 0; e < 4; e++) {
        if (e == 3) CHECK_OK(sl_loader_set_state(ld, &at));
        sl_batch *b;
        int rc;
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            CHECK(out->nb < RUN_MAX);
            out->sums[out->nb++] = sl_batch_checksum(b);
            uint64_t k = sl_batch_index(b);
            sl_loader_release(ld, b);
            if (e == 1 && k == 1) CHECK_OK(sl_loader_get_state(ld, &at));
        }
        CHECK_EQ(rc, SL_EEND);
    }
    out->nerr = (uint32_t)sl_loader_errors(ld, 0, out->errs, 64);
    CHECK_OK(sl_loader_stats(ld, &out->st));
    sl_loader_destroy(ld);
}

static void same_runs(const run_out *a, const run_out *b, const char *what) {
    CHECK_EQ(a->nb, b->nb);
    for (uint32_t i = 0; i < a->nb; i++)
        if (a->sums[i] != b->sums[i]) SL_FAIL("%s: batch %u differs", what, i);
    CHECK_EQ(a->nerr, b->nerr);
    for (uint32_t i = 0; i < a->nerr; i++) {
        CHECK_EQ(a->errs[i].index, b->errs[i].index);
        CHECK_EQ(a->errs[i].code, b->errs[i].code);
        if (strcmp(a->errs[i].reason, b->errs[i].reason))
            SL_FAIL("%s: record %u: '%s' vs '%s'", what, i, a->errs[i].reason, b->errs[i].reason);
    }
}

static void same_bytes(uint32_t workers) {
    fx_dataset *d = fx_new(96, 6, 48, 160); /* truncated, garbage and empty files among them */
    uint64_t *sizes = calloc(d->files, sizeof *sizes);
    uint64_t total = dataset_bytes(d, sizes);
    static run_out plain, cached;
    sl_config c;
    base_config(&c, d, workers);
    run_loader(&c, &plain);
    CHECK(plain.nerr > 0);
    CHECK_EQ(plain.st.cache_capacity, 0);
    /* a private cache of a third, a node cache of a third, and everything */
    uint64_t caps[3] = {total / 3 + 65536, total / 3 + (1 << 20), total * 2 + (1 << 20)};
    char job[64];
    snprintf(job, sizeof job, "test-same-bytes-%ld-%u", (long)getpid(), workers);
    setenv("SLUICE_CACHE_JOB", job, 1);
    for (int i = 0; i < 3; i++) {
        c.cache = caps[i];
        c.cache_share = i == 1 ? SL_CACHE_NODE : SL_CACHE_PRIVATE;
        run_loader(&c, &cached);
        printf("%u workers, %s cache of %llu: %llu hits, %llu misses, %llu read\n", workers,
               i == 1 ? "node" : "private", (ull)caps[i], (ull)cached.st.cache_hits, (ull)cached.st.cache_misses,
               (ull)cached.st.storage_bytes_read);
        CHECK(cached.st.cache_hits > 0);
        CHECK(cached.st.storage_bytes_read < plain.st.storage_bytes_read);
        same_runs(&plain, &cached, i == 1 ? "node cache" : "private cache");
    }
    /* val outputs cached decoded: the same pixels, the failures still fail */
    c.preset = SL_PRESET_VAL;
    c.cache = 0;
    run_loader(&c, &plain);
    c.cache = (uint64_t)8 << 20;
    c.cache_share = SL_CACHE_PRIVATE;
    c.cache_what = SL_CACHE_DECODED;
    run_loader(&c, &cached);
    CHECK(cached.st.cache_hits > 0);
    same_runs(&plain, &cached, "decoded");
    free(sizes);
    free(d);
}

TEST(same_bytes_1_worker) { same_bytes(1); }
TEST(same_bytes_8_workers) { same_bytes(8); }

/* ---- ranks sharing a node cache, one killed ------------------------------------------- */

#define NODE_EPOCHS 3

typedef struct node_out {
    char segment[72]; /* the node cache's name, as rank 0 found it */
    uint32_t nb[8];
    uint64_t sums[8][RUN_MAX];
    uint64_t hits[8], misses[8], processes[8];
    _Atomic int victim_pid; /* set by the victim just before it kills itself */
    _Atomic int attached;   /* ranks on the segment (their loaders made) */
    _Atomic int counted;    /* ranks that read the segment's processes with every rank on it */
    _Atomic int abort;      /* a rank ended as it should not: the others stop waiting (the parent sets it) */
} node_out;

/* Wait until *v reaches n, other ranks' progress: 1, or 0 once the parent
 * says one of them ended before it could get there. */
static int wait_ranks(node_out *out, _Atomic int *v, int n) {
    while (atomic_load(v) < n)
        if (atomic_load(&out->abort)) return 0;
        else usleep(1000);
    return 1;
}

/* Whether pid has exited and closed its files (so its lock on the segment
 * is gone): gone, or a zombie with no thread left but itself. A killed
 * process's leader reads as a zombie while its other threads, which share
 * the file table, are still being torn down; each thread drops the table
 * before it leaves /proc/PID/task. */
static int exited(int pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    char state = tx_stat_state(path);
    if (state == 0) return 1;
    if (state != 'Z' && state != 'X') return 0;
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return 1;
    int threads = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') threads++;
    closedir(d);
    return threads <= 1;
}

static void node_config(sl_config *c, const fx_dataset *d, int r, int P, uint64_t cache) {
    base_config(c, d, 3);
    c->rank = (uint32_t)r;
    c->world_size = (uint32_t)P;
    c->local_rank = (uint32_t)r;
    c->local_world_size = (uint32_t)P;
    c->cache = cache;
    c->cache_share = cache ? SL_CACHE_NODE : SL_CACHE_PRIVATE;
}

/* Name the segment this process is attached to (sluice top's reading). */
static void out_segment(node_out *out) {
    sl__cache_seg segs[16];
    size_t n = sl__cache_shm_list(segs, 16);
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < segs[i].processes; j++)
            if (segs[i].pids[j] == (int32_t)getpid()) memcpy(out->segment, segs[i].name, sizeof out->segment);
}

/* A rank: NODE_EPOCHS epochs; the victim kills itself (SIGKILL, its
 * workers mid-read or mid-insert) in the middle of the second. */
static int node_rank(const fx_dataset *d, int r, int P, int victim, uint64_t cache, node_out *out) {
    sl_config c;
    node_config(&c, d, r, P, cache);
    sl_loader *ld = fx_open(&c);
    if (r == 0) out_segment(out);
    /* every rank reads the segment's processes with all P on it, before
     * the victim may die: not left to how the ranks' epochs interleave (a
     * late victim, fast once started, could attach after a survivor's
     * first epoch end and die before its second) */
    atomic_fetch_add(&out->attached, 1);
    if (!wait_ranks(out, &out->attached, P)) return 1;
    sl_stats st;
    sl_loader_stats(ld, &st);
    out->processes[r] = st.cache_processes;
    atomic_fetch_add(&out->counted, 1);
    for (int e = 0; e < NODE_EPOCHS; e++) {
        sl_batch *b;
        int rc;
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            if (out->nb[r] < RUN_MAX) out->sums[r][out->nb[r]++] = sl_batch_checksum(b);
            if (r == victim && e == 1 && sl_batch_index(b) == sl_loader_len(ld) / 2) {
                if (!wait_ranks(out, &out->counted, P)) return 1;
                atomic_store(&out->victim_pid, (int)getpid());
                raise(SIGKILL); /* a batch held */
            }
            sl_loader_release(ld, b);
        }
        if (rc != SL_EEND) return 1;
        sl_loader_stats(ld, &st);
        if (st.cache_processes > out->processes[r]) out->processes[r] = st.cache_processes;
    }
    sl_loader_stats(ld, &st);
    out->hits[r] = st.cache_hits, out->misses[r] = st.cache_misses;
    /* A survivor may finish before the victim reaches its kill: it leaves
     * after the victim is dead, so the last one out is a survivor (a
     * segment a dead rank held last is stale, for the next job to reclaim). */
    while (!atomic_load(&out->victim_pid) || !exited(atomic_load(&out->victim_pid)))
        if (atomic_load(&out->abort)) return 1;
        else usleep(1000);
    sl_loader_destroy(ld);
    return 0;
}

static int segment_exists(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

static void node_case(int P) {
    fx_dataset *d = fx_new(160, 0, 48, 160);
    uint64_t *sizes = calloc(d->files, sizeof *sizes);
    uint64_t total = dataset_bytes(d, sizes);
    node_out *out = mmap(NULL, sizeof *out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(out != MAP_FAILED);
    memset(out, 0, sizeof *out);
    char job[64];
    snprintf(job, sizeof job, "test-node-%ld-%d", (long)getpid(), P);
    setenv("SLUICE_CACHE_JOB", job, 1);
    int victim = P - 1;
    uint64_t cache = total / 2 + (1 << 20);
    pid_t pid[8];
    for (int r = 0; r < P; r++) {
        pid[r] = fork();
        CHECK(pid[r] >= 0);
        if (pid[r] == 0) _exit(node_rank(d, r, P, victim, cache, out));
    }
    /* reaped as they end: one that ends as it should not (the victim only
     * by its own SIGKILL) stops the others' waits, and all are reaped */
    int bad = -1, bad_st = 0;
    for (int left = P; left > 0; left--) {
        int st, r = 0;
        pid_t p = waitpid(-1, &st, 0);
        CHECK(p > 0);
        while (r < P && pid[r] != p) r++;
        CHECK(r < P);
        int ok = r == victim ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && atomic_load(&out->victim_pid) == p
                             : WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok && bad < 0) bad = r, bad_st = st;
        if (!ok) atomic_store(&out->abort, 1);
    }
    if (bad >= 0) SL_FAIL("rank %d ended with status %d", bad, bad_st);
    CHECK(out->segment[0] == '/');
    if (segment_exists(out->segment)) {
        /* The last rank out could not take the lock at once (the killed rank's
         * files were still closing): the segment is stale, and the next node
         * cache made on this machine reclaims it. */
        char next_job[80];
        snprintf(next_job, sizeof next_job, "%s-next", job);
        setenv("SLUICE_CACHE_JOB", next_job, 1);
        sl_config c;
        node_config(&c, d, 0, 1, cache);
        sl_loader_destroy(fx_open(&c));
        setenv("SLUICE_CACHE_JOB", job, 1);
    }
    CHECK(!segment_exists(out->segment)); /* the last rank to leave, or the next job, unlinked it */
    /* each survivor's bytes against the same rank without a cache */
    for (int r = 0; r < P; r++) {
        if (r == victim) continue;
        sl_config c;
        node_config(&c, d, r, P, 0);
        run_out *plain = calloc(1, sizeof *plain);
        sl_loader *ld = fx_open(&c);
        for (int e = 0; e < NODE_EPOCHS; e++) {
            sl_batch *b;
            while (sl_loader_next(ld, &b) == 0) {
                plain->sums[plain->nb++] = sl_batch_checksum(b);
                sl_loader_release(ld, b);
            }
        }
        sl_loader_destroy(ld);
        CHECK_EQ(out->nb[r], plain->nb);
        for (uint32_t i = 0; i < plain->nb; i++)
            if (out->sums[r][i] != plain->sums[i]) SL_FAIL("rank %d batch %u differs from the uncached run", r, i);
        printf("%d ranks: rank %d %llu hits, %llu misses (%.3f), up to %llu processes on the cache\n", P, r,
               (ull)out->hits[r], (ull)out->misses[r],
               (double)out->hits[r] / (double)(out->hits[r] + out->misses[r]), (ull)out->processes[r]);
        CHECK(out->hits[r] > 0);
        CHECK_EQ(out->processes[r], (uint64_t)P); /* one segment, every rank on it */
        free(plain);
    }
    munmap(out, sizeof *out);
    free(sizes);
    free(d);
}

TEST(node_cache_two_ranks_one_killed) { node_case(2); }
TEST(node_cache_four_ranks_one_killed) { node_case(4); }

/* ---- the budget -------------------------------------------------------------------- */

TEST(budget_refuses_cache_beside_pipeline) {
    fx_dataset *d = fx_new(24, 0, 48, 96);
    sl_config c;
    base_config(&c, d, 2);
    c.budget = fx_min_budget(c);
    sl_loader_destroy(fx_open(&c)); /* the pipeline alone fits */
    c.cache = (uint64_t)8 << 20;
    sl_loader *ld = NULL;
    char err[512] = "";
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "sample cache of 8.0 MiB");
    CHECK_STR_CONTAINS(err, "cache_share=node");
    sl_plan p;
    CHECK_OK(sl_loader_plan(&c, &p, NULL, 0));
    CHECK(p.min_budget >= c.budget + c.cache);
    c.budget = p.min_budget;
    sl_loader_destroy(fx_open(&c)); /* what plan says is enough */
    /* a node cache is outside the budget: the pipeline's minimum plus its oracle */
    c.cache_share = SL_CACHE_NODE;
    setenv("SLUICE_CACHE_JOB", "test-budget-node", 1);
    uint64_t node_min = fx_min_budget(c);
    CHECK(node_min < p.min_budget - c.cache);
    /* bad settings */
    c.cache_share = 7;
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "cache_share 7");
    c.cache_share = SL_CACHE_NODE;
    c.local_rank = 2, c.local_world_size = 2;
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "local rank 2 of 2");
    free(d);
}

/* The governor's first lever: a lower limit takes the cache's bytes before
 * anything else; raised again, the cache may grow back. */
TEST(governor_sheds_cache_first) {
    fx_dataset *d = fx_new(120, 0, 96, 200);
    uint64_t *sizes = calloc(d->files, sizeof *sizes);
    uint64_t total = dataset_bytes(d, sizes);
    sl_budget *bud;
    uint64_t limit = (uint64_t)64 << 20;
    CHECK_OK(sl_budget_create(limit, &bud));
    sl_config c;
    base_config(&c, d, 2);
    c.shared_budget = bud;
    c.cache = total + (1 << 20);
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    while (sl_loader_next(ld, &b) == 0) sl_loader_release(ld, b);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    uint64_t full = st.cache_bytes, slots = st.mem[SL_MEM_BATCHES];
    CHECK(full > total / 2);
    char err[256];
    CHECK_OK(sl_budget_set_limit(bud, st.accounted_bytes - full / 2, err, sizeof err));
    CHECK_OK(sl_loader_stats(ld, &st));
    printf("cache %llu bytes, then %llu after the limit fell by %llu; slots %llu -> %llu\n", (ull)full,
           (ull)st.cache_bytes, (ull)(full / 2), (ull)slots, (ull)st.mem[SL_MEM_BATCHES]);
    CHECK_LE(st.cache_bytes, full - full / 2);
    CHECK_EQ(st.mem[SL_MEM_BATCHES], slots); /* the slots were not asked */
    while (sl_loader_next(ld, &b) == 0) sl_loader_release(ld, b); /* runs on */
    CHECK_OK(sl_budget_set_limit(bud, limit, err, sizeof err));
    for (int e = 0; e < 2; e++)
        while (sl_loader_next(ld, &b) == 0) sl_loader_release(ld, b);
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.cache_bytes > full - full / 2); /* grown back */
    sl_loader_destroy(ld);
    sl_budget_destroy(bud);
    free(sizes);
    free(d);
}

/* ---- resident memory with the cache full ----------------------------------------------- */

TEST(rss_bound_with_cache_full) {
    fx_opts o;
    fx_defaults(&o);
    o.images = 160;
    o.min_side = 480, o.max_side = 640;
    o.noise = 1; /* ~300 KB files: more than the cache holds */
    fx_dataset *d = calloc(1, sizeof *d);
    fx_make(&o, d);
    uint64_t *sizes = calloc(d->files, sizeof *sizes);
    uint64_t total = dataset_bytes(d, sizes);
    malloc_trim(0);
    sl_config c;
    base_config(&c, d, 8);
    c.budget = (uint64_t)96 << 20;
    c.cache = total / 2;
    int have_peak = bx_reset_peak() == 0;
    uint64_t base = bx_rss(), max_rss = 0;
    sl_loader *ld = fx_open(&c);
    for (int e = 0; e < 3; e++) {
        sl_batch *b;
        while (sl_loader_next(ld, &b) == 0) {
            sl_loader_release(ld, b);
            uint64_t r = bx_rss();
            if (r > max_rss) max_rss = r;
        }
    }
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    uint64_t hwm = have_peak ? bx_hwm() : max_rss;
    printf("dataset %llu MiB, cache %llu MiB held of %llu, budget %llu MiB: RSS +%llu MiB, peak accounted %llu MiB\n",
           (ull)(total >> 20), (ull)(st.cache_bytes >> 20), (ull)(st.cache_capacity >> 20), (ull)(c.budget >> 20),
           (ull)((hwm - base) >> 20), (ull)(st.peak_accounted_bytes >> 20));
    CHECK(st.cache_bytes > st.cache_capacity * 9 / 10); /* full */
    CHECK_LE(st.peak_accounted_bytes, c.budget);
    sl_loader_destroy(ld);
    free(sizes);
    free(d);
    if (BX_RSS_MEANINGFUL) CHECK_LE(hwm, base + c.budget + ((uint64_t)48 << 20));
}

/* ---- sluice top shows the node cache ---------------------------------------------------- */

TEST(top_shows_node_cache) {
    fx_dataset *d = fx_new(40, 0, 48, 96);
    sl_config c;
    base_config(&c, d, 2);
    c.cache = (uint64_t)2 << 20;
    c.cache_share = SL_CACHE_NODE;
    setenv("SLUICE_CACHE_JOB", "test-top-node-cache", 1);
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    while (sl_loader_next(ld, &b) == 0) sl_loader_release(ld, b);
    static char out[1 << 16];
    CHECK_EQ(fx_sluice("top --once --json", out, sizeof out), 0);
    char me[32];
    snprintf(me, sizeof me, "\"pids\":[%ld]", (long)getpid());
    CHECK_STR_CONTAINS(out, "\"node_caches\":[{\"name\":\"/sluice-cache-");
    CHECK_STR_CONTAINS(out, me);
    CHECK_EQ(fx_sluice("top --once", out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "cache   /sluice-cache-");
    sl_loader_destroy(ld);
    free(d);
}
