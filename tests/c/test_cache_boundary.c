/* ctest: tsan */
/*
 * The node cache at its process boundaries (issue 17; the node cache's
 * ordinary life is test_cache_shm.c). Liveness is a kernel-held fact
 * (each attached process holds an OFD lock on its slot): a rank at its
 * descriptor limit, or one in another PID namespace, never frees what a
 * live rank pins, and every byte a rank reads equals the sample's own
 * bytes (what a run without the cache reads). A segment that is not this
 * user's, or whose header does not describe its file, is refused with
 * its path and the command that removes it; a half-created one (its
 * creator died) is reclaimed at once. Shrinking punches pages out of
 * /dev/shm without the node-wide mutex, and what other processes write
 * meanwhile keeps its bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_fixture.h"
#include "cache/segment.h"
#include "procs.h"

#define VAL 8192   /* bytes a value: two 4 KiB blocks */
#define KEYS 16384
#define FAR (1ull << 40)

/* Each newcomer is used sooner than every resident (keys are inserted in
 * increasing order): admitted at once, evicting the oldest. */
static int fifo_next(void *ctx, uint32_t k, uint64_t now, uint64_t *next) {
    (void)ctx;
    *next = now + FAR - k;
    return 0;
}

static void seg_name(char *out, size_t len, const char *what) {
    snprintf(out, len, "/sluice-cache-test-%ld-%s", (long)getpid(), what);
}

static void seg_path(char *out, size_t len, const char *name) { snprintf(out, len, "/dev/shm%s", name); }

static int seg_exists(const char *name) {
    char path[160];
    seg_path(path, sizeof path, name);
    return access(path, F_OK) == 0;
}

static sl__cache *open_fifo(sl__budget *b, const char *name, uint64_t capacity, char *err, size_t errlen, int *rc) {
    sl__cache_opts o = {.capacity = capacity, .keys = KEYS, .max_entries = 64, .next_use = fifo_next,
                        .shm_name = name, .block_size = 4096};
    sl__cache *c = NULL;
    *rc = sl__cache_create(b, &o, &c, err, errlen);
    return c;
}

static sl__cache *must_fifo(sl__budget *b, const char *name) {
    char err[400] = "";
    int rc;
    sl__cache *c = open_fifo(b, name, 1 << 20, err, sizeof err, &rc);
    if (rc) SL_FAIL("%s: %s", name, err);
    return c;
}

/* Bytes of a pinned value that differ from sample k's own bytes. */
static size_t wrong_bytes(sl__cache *c, const sl__cache_ref *ref, uint32_t k) {
    uint8_t got[VAL], want[VAL];
    if (ref->size != VAL) return VAL;
    sl__cache_read(c, ref, got);
    cf_fill(want, VAL, k);
    size_t n = 0;
    for (size_t i = 0; i < VAL; i++) n += got[i] != want[i];
    return n;
}

/* Insert keys [lo, hi), each its own bytes. */
static void insert_range(sl__cache *c, uint32_t lo, uint32_t hi) {
    uint8_t v[VAL];
    for (uint32_t k = lo; k < hi; k++) {
        cf_fill(v, VAL, k);
        sl__cache_insert(c, k, 0, v, VAL);
    }
}

/* Every key of [lo, hi) the cache holds reads as its own bytes. */
static void check_all(sl__cache *c, uint32_t lo, uint32_t hi) {
    uint8_t v[VAL];
    for (uint32_t k = lo; k < hi; k++) {
        size_t len;
        if (sl__cache_get(c, k, 0, v, sizeof v, &len) == 1 && (len != VAL || !cf_check(v, len, k)))
            SL_FAIL("key %u read wrong bytes", k);
    }
}

/* ---- liveness ------------------------------------------------------------------ */

/* A rank holding a pin on key 0, its only entry (the first evicted). */
static sl__cache *pinned_reader(sl__budget *b, const char *name, sl__cache_ref *ref) {
    CHECK_OK(sl__budget_init(b, 1 << 20));
    sl__cache *c = must_fifo(b, name);
    insert_range(c, 0, 1);
    CHECK_EQ(sl__cache_lookup(c, 0, 0, ref), 1);
    return c;
}

/* A rank at its descriptor limit (it cannot open /proc/PID/stat, nor
 * anything) makes more than 4096 inserts, so it reaps at least once,
 * beside a rank that holds a pin on an entry those inserts evict. The
 * pinned entry keeps every one of its bytes, and nobody was reaped. */
TEST(emfile_inserter_beside_pinned_reader) {
    char name[96];
    seg_name(name, sizeof name, "emfile");
    sl__budget b;
    sl__cache_ref ref;
    sl__cache *a = pinned_reader(&b, name, &ref);
    int go[2];
    CHECK_OK(pipe(go));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sl__budget cb;
        sl__budget_init(&cb, 1 << 20);
        sl__cache *c = must_fifo(&cb, name);
        int low = open("/dev/null", O_RDONLY); /* the lowest free descriptor: the limit goes there */
        CHECK(low >= 0);
        close(low);
        struct rlimit rl;
        CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
        rl.rlim_cur = (rlim_t)low;
        CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
        int probe = open("/proc/self/stat", O_RDONLY);
        if (probe >= 0 || errno != EMFILE) SL_FAIL("the inserter can still open files (fd %d, %s)", probe, strerror(errno));
        insert_range(c, 1, 2 * 4096 + 200);
        check_all(c, 1, 2 * 4096 + 200);
        sl__cache_stats st;
        sl__cache_stats_get(c, &st);
        put_byte(go[1], (char)('0' + (st.reaped > 9 ? 9 : st.reaped)));
        sl__cache_destroy(c);
        _exit(0);
    }
    close(go[1]);
    char reaped = get_byte(go[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    size_t wrong = wrong_bytes(a, &ref, 0);
    if (wrong) SL_FAIL("the pinned entry read %zu of %d wrong bytes", wrong, VAL);
    if (reaped != '0') SL_FAIL("the inserter at its descriptor limit reaped %c live processes", reaped);
    sl__cache_release(a, &ref);
    check_all(a, 0, 2 * 4096 + 200);
    sl__cache_stats st;
    sl__cache_stats_get(a, &st);
    CHECK_EQ(st.reaped, 0);
    CHECK(st.evictions > 4096);
    sl__cache_destroy(a);
    CHECK(!seg_exists(name));
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* The rank in the other namespace: attach (the other rank is not in its
 * /proc), churn the cache until the other's pinned entry would be reused,
 * pin an entry of its own, then wait while the other rank attaches again
 * and churns, and read its pinned entry. Reports on out: 'r' ready,
 * then its wrong byte count as text and 'e' (or 's' + a reason: skipped). */
typedef struct rank_args {
    const char *name;
    int out, in;
} rank_args;

static void namespace_rank(void *arg) {
    const rank_args *a = arg;
    const char *name = a->name;
    int out = a->out, in = a->in;
    sl__budget b;
    sl__budget_init(&b, 1 << 20);
    sl__cache *c = must_fifo(&b, name);
    if (getpid() != 1) SL_FAIL("not pid 1 in the new namespace (%ld)", (long)getpid());
    insert_range(c, 1, 300);
    insert_range(c, 500, 501);
    sl__cache_ref ref;
    CHECK_EQ(sl__cache_lookup(c, 500, 0, &ref), 1);
    put_byte(out, 'r');
    if (get_byte(in) != 'g') _exit(91);
    char line[64];
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    int n = snprintf(line, sizeof line, "%zu %llu\n", wrong_bytes(c, &ref, 500), (unsigned long long)st.reaped);
    if (write(out, line, (size_t)n) != n) _exit(92);
    sl__cache_release(c, &ref);
    check_all(c, 0, 2000);
    sl__cache_destroy(c);
    _exit(0);
}

/* Two ranks of one node in different PID namespaces (containers sharing
 * the host's IPC but not its PIDs): neither takes the other for dead,
 * whichever attaches or reaps; every pinned byte stays right. Needs root
 * (CI is root): skipped with the reason elsewhere. */
TEST(ranks_in_two_pid_namespaces) {
    char name[96];
    seg_name(name, sizeof name, "pidns");
    sl__budget b;
    sl__cache_ref ref;
    sl__cache *a = pinned_reader(&b, name, &ref);
    int up[2], down[2];
    CHECK_OK(pipe(up));
    CHECK_OK(pipe(down));
    rank_args ra = {name, up[1], down[0]};
    pid_t pid = fork_in_pid_namespace(1, up[1], namespace_rank, &ra); /* unshare --pid --fork --mount-proc */
    CHECK(pid >= 0);
    close(up[1]);
    char first = first_report(up[0], pid);
    if (!first) {
        sl__cache_release(a, &ref);
        sl__cache_destroy(a);
        sl__budget_fini(&b);
        return;
    }
    CHECK_EQ(first, 'r');
    /* the other rank attached beside our pin and churned */
    size_t wrong = wrong_bytes(a, &ref, 0);
    if (wrong) SL_FAIL("after the other namespace's rank attached, our pinned entry read %zu of %d wrong bytes",
                       wrong, VAL);
    /* a fresh attach here reaps, then churns past the other rank's pin */
    sl__cache *again = must_fifo(&b, name);
    insert_range(again, 1000, 1300);
    check_all(again, 0, 2000);
    put_byte(down[1], 'g');
    char line[64] = "";
    ssize_t n = read(up[0], line, sizeof line - 1);
    CHECK(n > 0);
    line[n] = 0;
    unsigned long long theirs = 0, their_reaped = 0;
    CHECK_EQ(sscanf(line, "%llu %llu", &theirs, &their_reaped), 2);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (theirs) SL_FAIL("the other namespace's pinned entry read %llu of %d wrong bytes", theirs, VAL);
    CHECK_EQ(their_reaped, 0);
    sl__cache_stats s;
    sl__cache_stats_get(again, &s);
    CHECK_EQ(s.reaped, 0);
    sl__cache_release(a, &ref);
    sl__cache_destroy(again);
    sl__cache_destroy(a);
    CHECK(!seg_exists(name));
    sl__budget_fini(&b);
}

/* ---- a process stopped at a test hook -------------------------------------------------- */

static int stop_fd, stop_go, stop_stage, stop_at, stop_calls;

/* At the stop_at-th call of stage stop_stage: tell the parent, then wait
 * for its go (or its SIGKILL). */
static void stop_hook(int stage) {
    if (stage != stop_stage || ++stop_calls != stop_at) return;
    put_byte(stop_fd, 's');
    if (get_byte(stop_go) != 'g') _exit(99);
}

typedef struct stopped {
    pid_t pid;
    int go; /* 'g' lets it go on */
} stopped;

/* Run child(name) in a forked process and return once it stands at the
 * at-th call of hook stage. */
static stopped stop_child(int stage, int at, void (*child)(const char *name), const char *name) {
    int up[2], down[2];
    CHECK_OK(pipe(up));
    CHECK_OK(pipe(down));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(up[0]), close(down[1]);
        stop_fd = up[1], stop_go = down[0], stop_stage = stage, stop_at = at;
        sl__cache_test_hook = stop_hook;
        child(name);
        _exit(0);
    }
    close(up[1]), close(down[0]);
    CHECK_EQ(get_byte(up[0]), 's');
    close(up[0]);
    return (stopped){pid, down[1]};
}

static void kill_stopped(stopped s) {
    kill(s.pid, SIGKILL);
    CHECK_EQ(waitpid(s.pid, NULL, 0), s.pid);
    close(s.go);
}

static void resume_stopped(stopped s) {
    put_byte(s.go, 'g');
    int st;
    CHECK_EQ(waitpid(s.pid, &st, 0), s.pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) SL_FAIL("the stopped process ended with status %d", st);
    close(s.go);
}

/* Stop child(name) at the at-th call of hook stage and SIGKILL it there. */
static void kill_at(int stage, int at, void (*child)(const char *name), const char *name) {
    kill_stopped(stop_child(stage, at, child, name));
}

/* Pin key 5, then insert keys 100.. (the hook stops the third). */
static void pin_then_insert(const char *name) {
    sl__budget b;
    sl__budget_init(&b, 1 << 20);
    sl__cache *c = must_fifo(&b, name);
    sl__cache_ref pin;
    CHECK_EQ(sl__cache_lookup(c, 5, 0, &pin), 1);
    insert_range(c, 100, 110);
}

/* A rank SIGKILLed between writing an entry's bytes and publishing it,
 * holding a pin: the survivors reclaim both (its slot's lock went with
 * it), read only right bytes, and the last of them to leave unlinks the
 * segment. */
TEST(sigkill_mid_write_then_last_rank_leaves) {
    char name[96];
    seg_name(name, sizeof name, "kill");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *a = must_fifo(&b, name);
    sl__cache *z = must_fifo(&b, name); /* a second rank, in this process: its own slot */
    insert_range(a, 0, 10);
    kill_at(SL_CACHE_HOOK_WRITTEN, 3, pin_then_insert, name);
    sl__cache_stats st;
    sl__cache_stats_get(a, &st);
    CHECK_EQ(st.processes, 3); /* the dead one's slot until reaped */
    /* its unpublished key 102: the first insert to meet it reaps the writer */
    uint8_t v[VAL];
    cf_fill(v, VAL, 102);
    CHECK_EQ(sl__cache_insert(a, 102, 0, v, VAL), 1);
    sl__cache_stats_get(a, &st);
    CHECK_EQ(st.reaped, 1);
    CHECK_EQ(st.processes, 2);
    insert_range(z, 200, 400); /* churn past the dead rank's pin: it was reaped, its entry goes */
    check_all(a, 0, 400);
    check_all(z, 0, 400);
    sl__cache_destroy(a);
    CHECK(seg_exists(name));
    sl__cache_destroy(z); /* the last one out */
    CHECK(!seg_exists(name));
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* ---- segments that are not this process's to join ------------------------------------ */

/* A finished node cache's bytes: made under name, copied out, then gone. */
static uint8_t *segment_image(const char *name, size_t *len) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *c = must_fifo(&b, name);
    insert_range(c, 0, 20);
    char path[160];
    seg_path(path, sizeof path, name);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat st;
    CHECK_OK(fstat(fd, &st));
    uint8_t *img = malloc((size_t)st.st_size);
    CHECK(img != NULL);
    CHECK_EQ(pread(fd, img, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    sl__cache_destroy(c);
    sl__budget_fini(&b);
    CHECK(!seg_exists(name));
    *len = (size_t)st.st_size;
    return img;
}

/* Put bytes at name with mode; with hold, keep flock(LOCK_SH) on it as a
 * process using it would (then nobody may reclaim it). Made under another
 * name and renamed into place, whole and locked: a node cache attaching
 * meanwhile (another test) must not find it half made. The open
 * descriptor, or -1 when not held. */
static int plant(const char *name, const void *bytes, size_t len, mode_t mode, int hold) {
    char path[160], tmp[160];
    seg_path(path, sizeof path, name);
    snprintf(tmp, sizeof tmp, "/dev/shm/.sl-plant-%ld", (long)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, bytes, len, 0), (ssize_t)len);
    CHECK_OK(fchmod(fd, mode));
    if (hold) CHECK_OK(flock(fd, LOCK_SH));
    CHECK_OK(rename(tmp, path));
    if (hold) return fd;
    close(fd);
    return -1;
}

/* Attaching to name is refused (SL_ESTATE) with why, the path and the
 * command that removes it; the file is left as it was (len bytes of img,
 * when img is given). */
static void expect_refused(const char *name, const char *why, const uint8_t *img, size_t len) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    char err[512] = "", path[160], rm[200], rmr[200];
    int rc;
    sl__cache *c = open_fifo(&b, name, 1 << 20, err, sizeof err, &rc);
    printf("%s\n", err);
    CHECK_EQ(rc, SL_ESTATE);
    CHECK(c == NULL);
    seg_path(path, sizeof path, name);
    snprintf(rm, sizeof rm, "rm %s", path);
    snprintf(rmr, sizeof rmr, "rm -r %s", path);
    CHECK_STR_CONTAINS(err, why);
    if (!strstr(err, rm) && !strstr(err, rmr)) SL_FAIL("\"%s\" does not say how to remove %s", err, path);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    if (!img) return;
    int fd = open(path, O_RDONLY | O_NOFOLLOW);
    CHECK(fd >= 0);
    uint8_t *now = malloc(len + 1);
    CHECK(now != NULL);
    CHECK_EQ(pread(fd, now, len + 1, 0), (ssize_t)len);
    if (memcmp(now, img, len) != 0) SL_FAIL("the refused segment %s was written", path);
    free(now);
    close(fd);
}

static void remove_planted(const char *name, int held) {
    char path[160];
    seg_path(path, sizeof path, name);
    if (held >= 0) close(held);
    CHECK_OK(unlink(path));
}

/* One change to a finished segment's header, then refused. */
static void malformed_case(const uint8_t *good, size_t len, const char *name, void (*change)(sl__chdr *h),
                           size_t cut, const char *why) {
    uint8_t *img = malloc(len);
    CHECK(img != NULL);
    memcpy(img, good, len);
    change((sl__chdr *)img);
    int fd = plant(name, img, len - cut, 0600, 1);
    expect_refused(name, why, img, len - cut);
    remove_planted(name, fd);
    free(img);
}

static void other_version(sl__chdr *h) { h->version = 1; }
static void more_blocks(sl__chdr *h) { h->nblocks++; }
static void moved_records(sl__chdr *h) { h->off_recs += 64; }
static void odd_blocks(sl__chdr *h) { h->block_size = 3000; }
static void past_heap(sl__chdr *h) { h->heap_len = h->max_entries + 5; }
static void no_change(sl__chdr *h) { (void)h; }

/* A segment whose header does not describe its file, or was made by
 * another version, is refused before anything in it is used, and left
 * untouched: a held one (a process keeps it open) is never reclaimed. */
TEST(malformed_segment_refused) {
    char name[96];
    seg_name(name, sizeof name, "malformed");
    size_t len;
    uint8_t *good = segment_image(name, &len);
    malformed_case(good, len, name, other_version, 0, "another version of sluice (segment version 1");
    malformed_case(good, len, name, more_blocks, 0, "do not follow from its 16384 samples, 64 entries");
    malformed_case(good, len, name, moved_records, 0, "do not follow from its");
    malformed_case(good, len, name, odd_blocks, 0, "not a node cache's");
    malformed_case(good, len, name, no_change, 4096, "bytes in a file of"); /* cut short */
    malformed_case(good, len, name, past_heap, 0, "counts exceed its sizes");
    /* the same bytes, unchanged: joined, and every value right */
    int fd = plant(name, good, len, 0600, 1);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *c = must_fifo(&b, name);
    check_all(c, 0, 20);
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 20);
    sl__cache_destroy(c);
    sl__budget_fini(&b);
    remove_planted(name, fd);
    free(good);
}

/* Not this user's, open to other users, a symbolic link or a folder:
 * refused with the path and the command that removes it. The owner test
 * needs root (CI is root). */
TEST(foreign_segment_refused) {
    char name[96], path[160];
    seg_name(name, sizeof name, "foreign");
    seg_path(path, sizeof path, name);
    size_t len;
    uint8_t *good = segment_image(name, &len);
    int fd = plant(name, good, len, 0644, 1);
    expect_refused(name, "has mode 0644", good, len);
    remove_planted(name, fd);
    /* a link to a finished segment of this user */
    char target[96], tpath[160];
    seg_name(target, sizeof target, "target");
    seg_path(tpath, sizeof tpath, target);
    fd = plant(target, good, len, 0600, 1);
    CHECK_OK(symlink(tpath, path));
    expect_refused(name, "is a symbolic link", NULL, 0);
    CHECK_OK(unlink(path));
    remove_planted(target, fd);
    CHECK_OK(mkdir(path, 0700));
    expect_refused(name, "is a folder", NULL, 0);
    CHECK_OK(rmdir(path));
    if (geteuid() != 0) {
        printf("skipped the owner cases: not root (uid %u)\n", (unsigned)geteuid());
        free(good);
        return;
    }
    /* another user's segment, readable here (root may open it) */
    fd = plant(name, good, len, 0600, 1);
    CHECK_OK(fchown(fd, 65534, 65534));
    expect_refused(name, "belongs to uid 65534, not to this user (uid 0)", good, len);
    expect_refused(name, "its owner or root can remove it", good, len);
    remove_planted(name, fd);
    /* root's segment, seen by another user (who cannot open it) */
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__cache *c = must_fifo(&b, name);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(96);
        expect_refused(name, "belongs to uid 0, not to this user (uid 65534)", NULL, 0);
        _exit(0);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    check_all(c, 0, 20);
    sl__cache_destroy(c);
    sl__budget_fini(&b);
    CHECK(!seg_exists(name));
    free(good);
}

static void no_magic(sl__chdr *h) { h->magic = 0; }

/* What a creator killed before it finished leaves (the file sized, its
 * header without the magic stored last; or still empty), with nobody
 * holding it: the next attach reclaims it at once and starts afresh.
 * Held open by a process, it is refused with a message instead of
 * waited on. */
TEST(half_created_segment) {
    char name[96];
    seg_name(name, sizeof name, "half");
    size_t len;
    uint8_t *img = segment_image(name, &len);
    no_magic((sl__chdr *)img);
    for (int empty = 0; empty < 2; empty++) {
        plant(name, img, empty ? 0 : len, 0600, 0);
        sl__budget b;
        CHECK_OK(sl__budget_init(&b, 1 << 20));
        sl__cache *c = must_fifo(&b, name);
        sl__cache_stats st;
        sl__cache_stats_get(c, &st);
        CHECK_EQ(st.entries, 0);
        CHECK_EQ(st.processes, 1);
        insert_range(c, 0, 5);
        check_all(c, 0, 5);
        sl__cache_destroy(c);
        CHECK(!seg_exists(name));
        sl__budget_fini(&b);
    }
    int fd = plant(name, img, len, 0600, 1);
    expect_refused(name, "holds no complete node cache", img, len);
    remove_planted(name, fd);
    free(img);
}

/* ---- punching without the node's mutex ---------------------------------------------- */

#define BIG 40000 /* ten 4 KiB blocks */

/* Keys of 1000 and up are used sooner than any below. */
static int mod_next(void *ctx, uint32_t k, uint64_t now, uint64_t *next) {
    (void)ctx;
    *next = now + 1 + k % 1000;
    return 0;
}

static sl__cache *open_mod(sl__budget *b, const char *name) {
    sl__cache_opts o = {.capacity = 4 << 20, .keys = 2048, .next_use = mod_next, .shm_name = name};
    sl__cache *c = NULL;
    char err[400] = "";
    if (sl__cache_create(b, &o, &c, err, sizeof err)) SL_FAIL("%s: %s", name, err);
    return c;
}

/* Insert keys [lo, hi) of BIG bytes each: every one admitted. */
static void insert_big(sl__cache *c, uint32_t lo, uint32_t hi) {
    static uint8_t v[BIG];
    for (uint32_t k = lo; k < hi; k++) {
        cf_fill(v, BIG, k);
        if (sl__cache_insert(c, k, 0, v, BIG) != 1) SL_FAIL("key %u not admitted", k);
    }
}

/* A node cache of 4 MiB holding keys 0..63; *full: its value capacity. */
static sl__cache *open_full(sl__budget *b, const char *name, uint64_t *full) {
    sl__cache *c = open_mod(b, name);
    insert_big(c, 0, 64);
    sl__cache_stats st;
    sl__cache_stats_get(c, &st);
    *full = st.capacity;
    return c;
}

static uint64_t resident(const char *name) {
    char path[160];
    struct stat st;
    seg_path(path, sizeof path, name);
    CHECK_OK(stat(path, &st));
    return (uint64_t)st.st_blocks * 512;
}

static int big_ok(sl__cache *c, uint32_t k) {
    static uint8_t v[BIG];
    size_t len;
    return sl__cache_get(c, k, 0, v, sizeof v, &len) == 1 && len == BIG && cf_check(v, len, k);
}

static struct {
    sl__cache *other;   /* another process's view (its own slot) */
    sl__chdr *hdr;      /* the segment, mapped by the test */
    int ran, admitted;
} punching;

/* While the shrink's pages are being punched: the node's mutex is free,
 * and another process reads and inserts (the inserts evict residents and
 * take their blocks, never the ones being punched). */
static void during_punch(int stage) {
    if (stage != SL_CACHE_HOOK_PUNCHING) return;
    punching.ran++;
    int rc = pthread_mutex_trylock(&punching.hdr->mu);
    if (rc != 0) SL_FAIL("the node's mutex is held while punching (%s)", strerror(rc));
    pthread_mutex_unlock(&punching.hdr->mu);
    static uint8_t v[BIG];
    for (uint32_t k = 1000; k < 1005; k++) {
        cf_fill(v, BIG, k);
        punching.admitted += sl__cache_insert(punching.other, k, 0, v, BIG);
    }
    for (uint32_t k = 0; k < 5; k++) CHECK(big_ok(punching.other, k));
}

/* A shrink evicts and punches the freed pages out of /dev/shm with the
 * mutex released: what another process inserts meanwhile keeps every
 * byte, the pages do go, and growing back takes them again. */
TEST(punch_outside_the_mutex) {
    char name[96], path[160];
    seg_name(name, sizeof name, "punch");
    seg_path(path, sizeof path, name);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    uint64_t full;
    sl__cache *a = open_full(&b, name, &full);
    uint64_t before = resident(name);
    punching.other = open_mod(&b, name);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    punching.hdr = mmap(NULL, sizeof(sl__chdr), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(punching.hdr != MAP_FAILED);
    close(fd);
    sl__cache_test_hook = during_punch;
    CHECK_OK(sl__cache_set_capacity(a, 10 * 40960));
    sl__cache_test_hook = NULL;
    CHECK_EQ(punching.ran, 1);
    CHECK_EQ(punching.admitted, 5); /* sooner than five residents: they made room */
    uint64_t after = resident(name);
    printf("resident %llu -> %llu bytes\n", (unsigned long long)before, (unsigned long long)after);
    CHECK(before - after >= 54ull * 40960);
    for (uint32_t k = 0; k < 5; k++) CHECK(big_ok(a, k));
    for (uint32_t k = 1000; k < 1005; k++) {
        if (!big_ok(a, k) || !big_ok(punching.other, k)) SL_FAIL("key %u, inserted while punching, lost bytes", k);
    }
    sl__cache_stats st;
    sl__cache_stats_get(a, &st);
    CHECK_EQ(st.entries, 10);
    CHECK_LE(st.bytes, st.capacity);
    /* grown back: the punched blocks are reserved again before use */
    CHECK_OK(sl__cache_set_capacity(a, full));
    insert_big(a, 5, 64);
    for (uint32_t k = 0; k < 64; k++) CHECK(big_ok(punching.other, k));
    for (uint32_t k = 1000; k < 1005; k++) CHECK(big_ok(a, k));
    CHECK(resident(name) >= after + 59ull * 40960);
    munmap(punching.hdr, sizeof(sl__chdr));
    sl__cache_destroy(punching.other);
    sl__cache_destroy(a);
    CHECK(!seg_exists(name));
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

static void shrink(const char *name) {
    sl__budget b;
    sl__budget_init(&b, 1 << 20);
    sl__cache *c = open_mod(&b, name);
    CHECK_OK(sl__cache_set_capacity(c, 10 * 40960));
    sl__cache_destroy(c);
}

static void insert_soon(const char *name) {
    sl__budget b;
    sl__budget_init(&b, 1 << 20);
    insert_big(open_mod(&b, name), 1000, 1001);
}

/* A process SIGKILLed between marking its blocks and punching them: the
 * next attach reaps it and its blocks come back cold; filled again, the
 * cache holds every byte. */
TEST(killed_while_punching) {
    char name[96];
    seg_name(name, sizeof name, "diepunch");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    uint64_t full;
    sl__cache *a = open_full(&b, name, &full);
    kill_at(SL_CACHE_HOOK_PUNCHING, 1, shrink, name);
    sl__cache *d = open_mod(&b, name); /* reaps the dead: its chain goes cold */
    sl__cache_stats st;
    sl__cache_stats_get(d, &st);
    CHECK_EQ(st.reaped, 1);
    CHECK_EQ(st.entries, 10);
    CHECK_OK(sl__cache_set_capacity(d, full));
    insert_big(a, 10, 64); /* every block free again */
    for (uint32_t k = 0; k < 64; k++) CHECK(big_ok(d, k));
    sl__cache_destroy(d);
    sl__cache_destroy(a);
    CHECK(!seg_exists(name));
    sl__budget_fini(&b);
}

/* A process dies holding the node's mutex while another is punching: the
 * recovery leaves the live puncher's blocks alone (nothing inserted
 * meanwhile lands on a page being punched), and once it is done every
 * block is free or used exactly once. */
TEST(recovery_spares_a_live_punch) {
    char name[96];
    seg_name(name, sizeof name, "recpunch");
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    uint64_t full;
    sl__cache *a = open_full(&b, name, &full);
    stopped puncher = stop_child(SL_CACHE_HOOK_PUNCHING, 1, shrink, name);
    kill_at(SL_CACHE_HOOK_RESERVED, 1, insert_soon, name); /* dies holding the mutex */
    insert_big(a, 1000, 1005);                              /* the first lock recovers */
    sl__cache_stats st;
    sl__cache_stats_get(a, &st);
    CHECK_EQ(st.recoveries, 1);
    resume_stopped(puncher);
    for (uint32_t k = 1000; k < 1005; k++)
        if (!big_ok(a, k)) SL_FAIL("key %u, inserted after the recovery, lost bytes to the punch", k);
    CHECK_OK(sl__cache_set_capacity(a, full));
    insert_big(a, 5, 64);
    for (uint32_t k = 1000; k < 1005; k++) CHECK(big_ok(a, k));
    for (uint32_t k = 0; k < 64; k++) CHECK(big_ok(a, k));
    sl__cache_destroy(a);
    CHECK(!seg_exists(name));
    sl__budget_fini(&b);
}
