/*
 * The node cache (src/cache/shm.c): two and four processes sharing one
 * segment (forked ranks of one node, in near lock step), the hit rate of
 * the node's merged order, a rank killed with SIGKILL after writing an
 * entry's bytes but before publishing it, and one killed holding the
 * mutex; the survivors finish and never see a torn entry. Stale segments
 * are reclaimed, a /dev/shm too small is a clear error, mismatched
 * settings are refused, shrinking punches blocks out and growing takes
 * them back, a dead process's pins are reaped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_fixture.h"

#define N 2000
#define EPOCHS 4
#define BS 512
static const cf_sizes SIZES = {500, 8000};

static uint64_t charged(uint32_t k) { return (cf_size(SIZES, k) + BS - 1) / BS * BS; }

static void seg_name(char *out, size_t len, const char *what) {
    snprintf(out, len, "/sluice-cache-test-%ld-%s", (long)getpid(), what);
}

static int seg_exists(const char *name) {
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

/* ---- the ranks of one node --------------------------------------------------- */

typedef struct node {
    int P;                        /* ranks */
    int victim, stage, at;        /* rank killed at hook stage on its at-th insert (victim -1: none) */
    double fraction;
    char name[96];
    _Atomic uint64_t progress[8]; /* samples done by each rank (UINT64_MAX: finished or dead) */
    uint64_t uses[8], hits[8];    /* from epoch 1 on */
    sl__cache_stats end;          /* rank 0's view of the node at the end, after a re-attach */
    int fd[2];                    /* victim -> parent: "I stopped at the hook" */
} node;

static node *the_node;
static int hook_calls;

static void victim_hook(int stage) {
    if (stage != the_node->stage || ++hook_calls != the_node->at) return;
    if (write(the_node->fd[1], "x", 1) != 1) _exit(3);
    for (;;) pause(); /* SIGKILL comes */
}

/* Wait while this rank is more than 16 samples ahead of the slowest live one. */
static void lock_step(node *nd, int r, uint64_t done) {
    for (;;) {
        uint64_t slowest = UINT64_MAX;
        for (int q = 0; q < nd->P; q++) {
            uint64_t p = atomic_load(&nd->progress[q]);
            if (q != r && p < slowest) slowest = p;
        }
        if (slowest == UINT64_MAX || done <= slowest + 16) return;
        usleep(50);
    }
}

static sl__cache_opts node_opts(node *nd, cf_order *o) {
    return (sl__cache_opts){.capacity = 64 << 20, .keys = N, .max_entries = N, .epoch_len = o->s.total,
                            .next_use = sl__nextuse_fn, .ctx = &o->nu, .shm_name = nd->name, .block_size = BS};
}

static int rank_main(node *nd, int r) {
    cf_order o;
    cf_order_init(&o, N, (uint32_t)r, (uint32_t)nd->P, 0, (uint32_t)nd->P, 7);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20)); /* the node cache is not in it: only the handle */
    sl__cache_opts opts = node_opts(nd, &o);
    sl__cache *c;
    char err[300];
    if (sl__cache_create(&b, &opts, &c, err, sizeof err)) SL_FAIL("rank %d: %s", r, err);
    uint64_t total = 0;
    for (uint32_t k = 0; k < N; k++) total += charged(k);
    if (r == 0) CHECK_OK(sl__cache_set_capacity(c, (uint64_t)(nd->fraction * (double)total)));
    if (r == nd->victim) sl__cache_test_hook = victim_hook;
    uint8_t buf[8000];
    uint64_t done = 0;
    for (uint32_t e = 0; e < EPOCHS; e++) {
        cf_order_epoch(&o, e);
        for (uint64_t i = 0; i < o.s.per_rank; i++, done++) {
            lock_step(nd, r, done);
            uint32_t k = o.seq[i];
            uint64_t t = sl__sampler_time(&o.s, e, i);
            size_t len = cf_size(SIZES, k), got;
            int hit = sl__cache_get(c, k, t, buf, sizeof buf, &got);
            if (hit == 1 && (got != len || !cf_check(buf, len, k))) SL_FAIL("rank %d: sample %u torn or wrong", r, k);
            if (hit != 1) {
                cf_fill(buf, len, k);
                sl__cache_insert(c, k, t, buf, len);
                sl__cache_note_read(c, len);
            }
            if (e > 0) nd->uses[r]++, nd->hits[r] += hit == 1;
            atomic_store(&nd->progress[r], done + 1);
        }
    }
    atomic_store(&nd->progress[r], UINT64_MAX);
    if (r == 0) { /* the node seen by a fresh attach (which reaps the dead), then every entry checked */
        sl__cache *again;
        CHECK_OK(sl__cache_create(&b, &opts, &again, err, sizeof err));
        sl__cache_stats_get(again, &nd->end);
        for (uint32_t k = 0; k < N; k++) {
            size_t got;
            if (sl__cache_get(again, k, EPOCHS * o.s.total, buf, sizeof buf, &got) == 1 &&
                (got != cf_size(SIZES, k) || !cf_check(buf, got, k)))
                SL_FAIL("sample %u torn in the cache", k);
        }
        sl__cache_destroy(again);
    }
    sl__cache_destroy(c);
    CHECK_EQ(atomic_load(&b.used), 0);
    cf_order_fini(&o);
    return 0;
}

/* Fork the ranks, kill the victim when it stops at its hook, and wait. */
static node *run_node(int P, double fraction, int victim, int stage, int at) {
    node *nd = mmap(NULL, sizeof *nd, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(nd != MAP_FAILED);
    memset(nd, 0, sizeof *nd);
    nd->P = P, nd->fraction = fraction, nd->victim = victim, nd->stage = stage, nd->at = at;
    seg_name(nd->name, sizeof nd->name, "node");
    CHECK_OK(pipe(nd->fd));
    the_node = nd;
    pid_t pid[8];
    for (int r = 0; r < P; r++) {
        pid[r] = fork();
        CHECK(pid[r] >= 0);
        if (pid[r] == 0) _exit(rank_main(nd, r));
    }
    close(nd->fd[1]); /* a victim that fails before its hook ends the read */
    if (victim >= 0) {
        char x;
        CHECK_EQ(read(nd->fd[0], &x, 1), 1);
        kill(pid[victim], SIGKILL);
        int st;
        CHECK_EQ(waitpid(pid[victim], &st, 0), pid[victim]);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        atomic_store(&nd->progress[victim], UINT64_MAX); /* the others stop waiting for it */
    }
    for (int r = 0; r < P; r++) {
        int st;
        if (r == victim) continue;
        CHECK_EQ(waitpid(pid[r], &st, 0), pid[r]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            SL_FAIL("rank %d ended with status %d", r, st);
        }
    }
    CHECK(!seg_exists(nd->name)); /* the last to leave unlinked it */
    return nd;
}

static double node_hit_rate(node *nd) {
    uint64_t uses = 0, hits = 0;
    for (int r = 0; r < nd->P; r++)
        if (r != nd->victim) uses += nd->uses[r], hits += nd->hits[r];
    double h = (double)hits / (double)uses;
    printf("%d ranks, fraction %.2f: node hit rate %.4f; evictions %llu, admitted %llu, refused %llu, "
           "recoveries %llu, reaped %llu\n", nd->P, nd->fraction, h, (unsigned long long)nd->end.evictions,
           (unsigned long long)nd->end.admitted, (unsigned long long)nd->end.refused,
           (unsigned long long)nd->end.recoveries, (unsigned long long)nd->end.reaped);
    return h;
}

/* One copy for the node: the merged order's hit rate reaches 0.95 x the
 * cache's share of the dataset, as one process would. */
TEST(two_processes_share) {
    node *nd = run_node(2, 0.3, -1, 0, 0);
    CHECK(node_hit_rate(nd) >= 0.95 * 0.3 * 0.97); /* lock step within 16 samples: near the global order */
    CHECK(nd->end.processes >= 2 && nd->end.processes <= 3); /* rank 0 twice, rank 1 if not gone yet */
    CHECK(nd->end.storage_bytes_read > 0);
    CHECK_EQ(nd->end.recoveries, 0);
}

TEST(four_processes_share) {
    node *nd = run_node(4, 0.17, -1, 0, 0);
    CHECK(node_hit_rate(nd) >= 0.95 * 0.17 * 0.97);
    CHECK(nd->end.processes >= 2 && nd->end.processes <= 5);
}

/* A rank killed after copying an entry's bytes, before publishing them:
 * the entry never shows, nothing stays locked, the others finish, and the
 * dead rank's reservation is reclaimed. */
TEST(killed_before_publish) {
    node *nd = run_node(4, 0.3, 2, SL_CACHE_HOOK_WRITTEN, 60);
    node_hit_rate(nd);
    CHECK(nd->end.reaped >= 1);
    CHECK_EQ(nd->end.recoveries, 0);
}

/* A rank killed holding the mutex, in the middle of a reservation: the
 * next locker rebuilds the index; the others finish. */
TEST(killed_holding_the_lock) {
    node *nd = run_node(3, 0.3, 1, SL_CACHE_HOOK_RESERVED, 60);
    node_hit_rate(nd);
    CHECK_EQ(nd->end.recoveries, 1);
    CHECK_LE(nd->end.bytes, nd->end.capacity);
}

/* ---- segments --------------------------------------------------------------------------- */

static int fixed_next(void *ctx, uint32_t k, uint64_t now, uint64_t *next) {
    (void)ctx;
    *next = now + 1 + k;
    return 0;
}

static sl__cache *open_named(sl__budget *b, const char *name, uint64_t capacity, char *err, size_t errlen, int *rc) {
    sl__cache_opts o = {.capacity = capacity, .keys = 64, .next_use = fixed_next, .shm_name = name};
    sl__cache *c = NULL;
    *rc = sl__cache_create(b, &o, &c, err, errlen);
    return c;
}

static sl__cache *must_open(sl__budget *b, const char *name, uint64_t capacity) {
    char err[300] = "";
    int rc;
    sl__cache *c = open_named(b, name, capacity, err, sizeof err, &rc);
    if (rc) SL_FAIL("%s: %s", name, err);
    return c;
}

/* A child makes a segment and dies without detaching. The segment is
 * checked while the child lives: once it is dead, any node cache opened on
 * the machine (another test running beside this one) may reclaim it. */
static void leave_stale(const char *name) {
    int fd[2];
    CHECK_OK(pipe(fd));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sl__budget b;
        sl__budget_init(&b, 1 << 20);
        int rc;
        sl__cache *c = open_named(&b, name, 1 << 20, NULL, 0, &rc);
        uint8_t v[100] = {1};
        if (rc == 0) sl__cache_insert(c, 3, 0, v, sizeof v);
        if (write(fd[1], rc == 0 ? "y" : "n", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char x;
    CHECK_EQ(read(fd[0], &x, 1), 1);
    CHECK_EQ(x, 'y');
    CHECK(seg_exists(name));
    kill(pid, SIGKILL);
    CHECK_EQ(waitpid(pid, NULL, 0), pid);
    close(fd[0]), close(fd[1]);
}

/* The next node cache started on the machine unlinks segments whose
 * processes are all dead, of any dataset or job; the same name starts
 * afresh. */
TEST(stale_segment_reclaimed) {
    char a[96], bname[96];
    seg_name(a, sizeof a, "stale");
    seg_name(bname, sizeof bname, "other");
    leave_stale(a);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *c = must_open(&b, bname, 1 << 20);
    CHECK(!seg_exists(a));
    sl__cache_destroy(c);
    CHECK(!seg_exists(bname));

    leave_stale(a);
    c = must_open(&b, a, 1 << 20);
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 0);
    CHECK_EQ(st.processes, 1);
    sl__cache_destroy(c);
    CHECK(!seg_exists(a));
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* A cache larger than /dev/shm's free space: refused at create, with both
 * numbers, and nothing left behind. */
TEST(dev_shm_too_small) {
    struct statvfs v;
    CHECK_OK(statvfs("/dev/shm", &v));
    uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
    char name[96], err[300] = "";
    seg_name(name, sizeof name, "big");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    int rc;
    sl__cache *c = open_named(&b, name, avail + (1ull << 30), err, sizeof err, &rc);
    CHECK_EQ(rc, SL_ENOMEM);
    CHECK(c == NULL);
    CHECK_STR_CONTAINS(err, "/dev/shm has");
    CHECK_STR_CONTAINS(err, "the cache needs");
    CHECK(!seg_exists(name));
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* Every rank must pass the same settings; the same ones attach. */
TEST(settings_must_match) {
    char name[96], err[300] = "";
    seg_name(name, sizeof name, "match");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    int rc;
    sl__cache *c = open_named(&b, name, 1 << 20, err, sizeof err, &rc);
    CHECK_OK(rc);
    sl__cache *d = open_named(&b, name, 2 << 20, err, sizeof err, &rc);
    CHECK_EQ(rc, SL_ESTATE);
    CHECK(d == NULL);
    CHECK_STR_CONTAINS(err, "every rank must pass the same cache settings");
    d = open_named(&b, name, 1 << 20, err, sizeof err, &rc);
    CHECK_OK(rc);
    uint8_t v[3000], w[3000];
    cf_fill(v, sizeof v, 5);
    CHECK_EQ(sl__cache_insert(c, 5, 0, v, sizeof v), 1);
    size_t len;
    CHECK_EQ(sl__cache_get(d, 5, 0, w, sizeof w, &len), 1); /* one copy, seen by both */
    CHECK(len == sizeof v && cf_check(w, len, 5));
    sl__cache_stats st;
    sl__cache_stats_get(d, &st);
    CHECK_EQ(st.processes, 2);
    CHECK_EQ(st.shared, 1);
    CHECK_EQ(st.budget_bytes, atomic_load(&b.used) / 2); /* two handles; the segment is in no budget */
    sl__cache_destroy(c);
    CHECK(seg_exists(name));
    sl__cache_destroy(d);
    CHECK(!seg_exists(name));
    sl__budget_fini(&b);
}

static uint64_t allocated(const char *name) {
    char path[160];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    CHECK_OK(stat(path, &st));
    return (uint64_t)st.st_blocks * 512;
}

/* Shrinking evicts by the policy and punches the freed blocks out of
 * /dev/shm; growing again takes them back (fallocate) and admits. */
TEST(shrink_punches_and_regrows) {
    char name[96];
    seg_name(name, sizeof name, "shrink");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *c = must_open(&b, name, 4 << 20);
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    uint64_t full = st.capacity, before = allocated(name);
    static uint8_t v[40000];
    for (uint32_t k = 0; k < 64; k++) {
        cf_fill(v, sizeof v, k);
        CHECK_EQ(sl__cache_insert(c, k, 0, v, sizeof v), 1);
    }
    CHECK_OK(sl__cache_set_capacity(c, 10 * 40960));
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 10);
    CHECK_EQ(st.evictions, 54);
    CHECK_LE(st.bytes, st.capacity);
    uint64_t after = allocated(name);
    CHECK(before - after >= 54ull * 40960); /* the evicted entries' pages went back */
    for (uint32_t k = 0; k < 64; k++) {
        size_t len;
        int hit = sl__cache_get(c, k, 0, v, sizeof v, &len);
        CHECK_EQ(hit, k < 10); /* the soonest used stayed */
        if (hit) CHECK(cf_check(v, len, k));
    }
    CHECK_OK(sl__cache_set_capacity(c, full));
    for (uint32_t k = 10; k < 64; k++) {
        cf_fill(v, sizeof v, k);
        CHECK_EQ(sl__cache_insert(c, k, 0, v, sizeof v), 1);
    }
    for (uint32_t k = 0; k < 64; k++) {
        size_t len;
        CHECK_EQ(sl__cache_get(c, k, 0, v, sizeof v, &len), 1);
        CHECK(cf_check(v, len, k));
    }
    CHECK(allocated(name) >= after + 54ull * 40960);
    sl__cache_destroy(c);
    sl__budget_fini(&b);
}

/* A process that dies holding a pin: the entry it pinned, once evicted,
 * stays until the pin is reaped (here by the next attach), then goes. */
TEST(dead_pins_reaped) {
    char name[96];
    seg_name(name, sizeof name, "pins");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *c = must_open(&b, name, 1 << 20);
    uint8_t v[5000];
    cf_fill(v, sizeof v, 9);
    CHECK_EQ(sl__cache_insert(c, 9, 0, v, sizeof v), 1);
    int fd[2];
    CHECK_OK(pipe(fd));
    pid_t pid = fork();
    if (pid == 0) {
        sl__budget cb;
        sl__budget_init(&cb, 1 << 20);
        int crc;
        sl__cache *cc = open_named(&cb, name, 1 << 20, NULL, 0, &crc);
        sl__cache_ref ref;
        int ok = crc == 0 && sl__cache_lookup(cc, 9, 0, &ref) == 1;
        if (write(fd[1], ok ? "y" : "n", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char x;
    CHECK_EQ(read(fd[0], &x, 1), 1);
    CHECK_EQ(x, 'y');
    CHECK(seg_exists(name));
    kill(pid, SIGKILL);
    CHECK_EQ(waitpid(pid, NULL, 0), pid);
    CHECK_OK(sl__cache_set_capacity(c, 0));
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 0);
    CHECK_EQ(st.bytes, 8192); /* evicted, but pinned by the dead: still held */
    sl__cache *d = must_open(&b, name, 1 << 20);
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.bytes, 0);
    CHECK_EQ(st.reaped, 1);
    sl__cache_destroy(d);
    sl__cache_destroy(c);
    CHECK(!seg_exists(name));
    sl__budget_fini(&b);
}

/* The name: the same dataset, seed, variant and job give the same name;
 * any of them changed gives another. */
TEST(segment_name) {
    char a[96], b2[96], err[300] = "";
    char dir[] = "/tmp/sl_cache_name_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    unsetenv("MASTER_ADDR"), unsetenv("SLUICE_CACHE_JOB");
    setenv("TORCHELASTIC_RUN_ID", "job1", 1);
    CHECK_OK(sl__cache_shm_name(a, sizeof a, dir, 1, "encoded", err, sizeof err));
    CHECK(strncmp(a, "/sluice-cache-", 14) == 0 && strlen(a) == 14 + 16 + 1 + 16);
    CHECK_OK(sl__cache_shm_name(b2, sizeof b2, dir, 1, "encoded", err, sizeof err));
    CHECK(strcmp(a, b2) == 0);
    CHECK_OK(sl__cache_shm_name(b2, sizeof b2, dir, 2, "encoded", err, sizeof err));
    CHECK(strcmp(a, b2) != 0);
    CHECK_OK(sl__cache_shm_name(b2, sizeof b2, dir, 1, "decoded 224", err, sizeof err));
    CHECK(strcmp(a, b2) != 0);
    setenv("TORCHELASTIC_RUN_ID", "job2", 1);
    CHECK_OK(sl__cache_shm_name(b2, sizeof b2, dir, 1, "encoded", err, sizeof err));
    CHECK(strcmp(a, b2) != 0 && strncmp(a, b2, 31) == 0); /* same dataset part, another job */
    CHECK_EQ(sl__cache_shm_name(b2, sizeof b2, "/no/such/dir", 1, "encoded", err, sizeof err), SL_ENOENT);
    CHECK_STR_CONTAINS(err, "/no/such/dir");
    rmdir(dir);
}

/* A memory cgroup without room for the segment: refused at create with
 * the cgroup and the numbers (a tmpfs page past the limit would be an OOM
 * kill). The process runs in a child cgroup without a limit of its own,
 * so the parent's binds through the walk up the path. Needs a writable
 * memory cgroup (root, v1 or v2): skipped where there is none. */
TEST(memory_cgroup_too_small) {
    char cg[128], inner[160], name[96], path[200];
    int v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
    snprintf(cg, sizeof cg, "%s/sluice-cache-test-%ld", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory", (long)getpid());
    if (mkdir(cg, 0755) != 0) {
        printf("skipped: cannot make a memory cgroup (%s)\n", strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/%s", cg, v2 ? "memory.max" : "memory.limit_in_bytes");
    FILE *f = fopen(path, "w");
    int ok = f && fprintf(f, "%d\n", 64 << 20) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        rmdir(cg);
        printf("skipped: cannot set a memory limit in %s\n", cg);
        return;
    }
    snprintf(inner, sizeof inner, "%s/inner", cg);
    if (v2) { /* a v2 child gets the memory controller from its parent's subtree_control */
        snprintf(path, sizeof path, "%s/cgroup.subtree_control", cg);
        FILE *sc = fopen(path, "w");
        if (sc) fputs("+memory\n", sc), fclose(sc);
    }
    CHECK_EQ(mkdir(inner, 0755), 0);
    seg_name(name, sizeof name, "cgroup");
    pid_t pid = fork();
    if (pid == 0) { /* into the child cgroup, then ask for twice the parent's limit */
        snprintf(path, sizeof path, "%s/cgroup.procs", inner);
        FILE *p = fopen(path, "w");
        if (!p || fprintf(p, "%ld\n", (long)getpid()) <= 0 || fclose(p) != 0) _exit(3);
        sl__budget b;
        sl__budget_init(&b, 1 << 20);
        char err[400] = "";
        int rc;
        sl__cache *c = open_named(&b, name, 128 << 20, err, sizeof err, &rc);
        printf("%s\n", err);
        fflush(stdout);
        _exit(rc == SL_ENOMEM && !c && strstr(err, "memory cgroup") && strstr(err, "limit 64.0 MiB") &&
                      !strstr(err, "/inner")
                  ? 0
                  : 1);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    rmdir(inner);
    rmdir(cg);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    CHECK(!seg_exists(name));
}
