/* ctest: tsan */
/*
 * Remote sources through the loader (docs/remote.md), against the
 * in-process HTTP server of httpd.h: the same batches (checksums) from
 * http:// shards and local shards for 1 and 8 workers, and from a manifest
 * whose files are URLs; resume across local and remote; with a tenth of
 * the requests failed (503, cut bodies, resets) the same bytes and no
 * error record; an object deleted is one error record naming its URL;
 * create's refusals; read-ahead serving the workers; a loader destroyed
 * while every request stalls returns. (s3:// through moto, and the fault
 * proxy in front of it: tests/python/test_remote.py.)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "fixture.h"
#include "httpd.h"
#include "io/engine.h"
#include "shards_fixture.h"
#include "sluice.h"
#include "source/index.h"
#include "tarw.h"

/* The dataset's files as nshards shards, written to dir and served at
 * /shards/s-00000N.tar too. */
static void shards(const fx_dataset *d, const char *dir, int nshards, hd_server *srv) {
    sf_write_shards(d, dir, nshards);
    for (int s = 0; s < nshards; s++) {
        char path[512], url[64];
        buf b = {0};
        snprintf(path, sizeof path, "%s/s-%06d.tar", dir, s);
        sf_read_all(path, &b);
        snprintf(url, sizeof url, "/shards/s-%06d.tar", s);
        hd_put(srv, url, b.p, b.n);
        free(b.p);
    }
}

/* The dataset's files at /ds/REL and a manifest /ds/m.csv naming them in
 * index order, relative to it. */
static void serve_folder(const fx_dataset *d, hd_server *srv) {
    buf m = {0};
    for (uint32_t k = 0; k < d->files; k++) {
        char path[512], url[300], line[128];
        buf img = {0};
        snprintf(path, sizeof path, "%s/%s", d->root, d->rel[k]);
        sf_read_all(path, &img);
        snprintf(url, sizeof url, "/ds/%s", d->rel[k]);
        hd_put(srv, url, img.p, img.n);
        free(img.p);
        int n = snprintf(line, sizeof line, "%s,%d\n", d->rel[k], d->label[k]);
        b_put(&m, line, (size_t)n);
    }
    hd_put(srv, "/ds/m.csv", m.p, m.n);
    free(m.p);
}

static void cfg_for(sl_config *c, const char *source, uint32_t workers) {
    sf_cfg(c, source, workers);
    c->io_requests = 8;
}

typedef struct setup {
    fx_dataset *d;
    hd_server *srv;
    char dir[256], local[300], remote[300];
    char manifest[300]; /* the URL of /ds/m.csv */
} setup;

static char records[256]; /* the node's records of shard scans, a folder of the test's own */

/* Every case needs libcurl; without it URLs are refused (test_io has the
 * refusal), and a case has nothing to run. */
static int have_curl(void) {
    char v[96];
    sl__io_version(v, sizeof v);
    return strcmp(v, "off") != 0;
}

/* A case's dataset of n good files and `corrupt` bad ones, local and served
 * (shards and folder); 0 without libcurl (the case has nothing to run). */
static int up(setup *s, uint32_t n, uint32_t corrupt) {
    if (!have_curl()) return 0;
    unsetenv("AWS_PROFILE"); /* http needs no AWS configuration; make sure none breaks it */
    fx_empty_dir(records, sizeof records);
    setenv("SLUICE_INDEX_CACHE", records, 1);
    s->d = calloc(1, sizeof *s->d);
    fx_simple(s->d, n, corrupt, 48, 200);
    s->srv = hd_start();
    fx_empty_dir(s->dir, sizeof s->dir);
    shards(s->d, s->dir, 3, s->srv);
    serve_folder(s->d, s->srv);
    snprintf(s->local, sizeof s->local, "%s/s-{000000..000002}.tar", s->dir);
    hd_url(s->srv, "/shards/s-{000000..000002}.tar", s->remote, sizeof s->remote);
    hd_url(s->srv, "/ds/m.csv", s->manifest, sizeof s->manifest);
    return 1;
}

static void down(setup *s) {
    hd_stop(s->srv);
    free(s->d);
}

/* The local shards by 2 workers, and the same shards over http by
 * remote_workers. */
static void local_and_remote(const setup *s, sl_config *local, sl_config *remote, uint32_t remote_workers) {
    cfg_for(local, s->local, 2);
    cfg_for(remote, s->remote, remote_workers);
}

TEST(http_shards_equal_local_for_1_and_8_workers) {
    setup s;
    if (!up(&s, 23, 3)) return;
    for (int preset = SL_PRESET_TRAIN; preset <= SL_PRESET_VAL; preset++) {
        sl_config local, r1, r8;
        cfg_for(&local, s.local, 2);
        cfg_for(&r1, s.remote, 1);
        cfg_for(&r8, s.remote, 8);
        local.preset = r1.preset = r8.preset = preset;
        uint64_t n0, n1, n8, want = fx_epoch_sum(&local, &n0);
        CHECK_EQ(fx_epoch_sum(&r1, &n1), want);
        CHECK_EQ(fx_epoch_sum(&r8, &n8), want);
        CHECK(n0 == 23 && n1 == 23 && n8 == 23); /* the 3 corrupt ones skipped in each */
    }
    /* paths name the URL; the corrupt members are error records; the bytes came over the network */
    sl_config c;
    cfg_for(&c, s.remote, 2);
    sl_loader *ld = fx_open(&c);
    char path[512];
    CHECK(sl_loader_sample_path(ld, 20, path, sizeof path) != NULL);
    char want[300];
    hd_url(s.srv, "/shards/s-000002.tar:k00020", want, sizeof want);
    CHECK(!strcmp(path, want));
    fx_finish_epoch(ld);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 3);
    CHECK(st.net_requests > 0 && st.net_bytes > 0);
    CHECK_EQ(st.net_failures, 0);
    CHECK(st.mem[SL_MEM_IO] >= sl__io_reserve(8));
    CHECK_LE(st.peak_accounted_bytes, c.budget);
    sl_loader_destroy(ld);
    down(&s);
}

TEST(resume_across_local_and_remote) {
    setup s;
    if (!up(&s, 30, 0)) return;
    sl_config local, remote;
    local_and_remote(&s, &local, &remote, 4);
    fx_check_resume(&local, &remote, 2); /* the state says nothing of where the bytes come from */
    fx_check_resume(&remote, &local, 3);
    down(&s);
}

TEST(faults_same_bytes_no_error_record) {
    setup s;
    if (!up(&s, 40, 0)) return;
    sl_config local, remote;
    local_and_remote(&s, &local, &remote, 3);
    remote.io_retries = 20;
    remote.io_hedge = -1; /* every fault then shows as a retry (a hedge may otherwise finish first) */
    uint64_t want = fx_epoch_sum(&local, NULL);
    hd_faults(s.srv, HD_MIX, 10, 0); /* a tenth of the requests: 503 SlowDown, a cut body, a reset in turn */
    sl_loader *ld = fx_open(&remote);
    uint64_t h = fx_loader_sum(ld, NULL);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    sl_loader_destroy(ld);
    CHECK_EQ(h, want);
    CHECK_EQ(st.errors, 0);
    CHECK(st.net_retries > 0);
    CHECK(hd_faulted(s.srv) > 0);
    down(&s);
}

TEST(manifest_files_over_http_and_a_deleted_object) {
    setup s;
    if (!up(&s, 20, 0)) return;
    sl_config folder, r1, r4;
    cfg_for(&folder, s.d->root, 2);
    cfg_for(&r1, s.manifest, 1);
    cfg_for(&r4, s.manifest, 4);
    uint64_t want = fx_epoch_sum(&folder, NULL);
    CHECK_EQ(fx_epoch_sum(&r1, NULL), want);
    CHECK_EQ(fx_epoch_sum(&r4, NULL), want);
    /* one object deleted: one error record, naming its URL */
    char gone[300];
    snprintf(gone, sizeof gone, "/ds/%s", s.d->rel[7]);
    hd_remove(s.srv, gone);
    sl_loader *ld = fx_open(&r4);
    fx_finish_epoch(ld);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 1);
    sl_error_record rec;
    CHECK_EQ(sl_loader_errors(ld, 0, &rec, 1), 1);
    CHECK_EQ(rec.index, 7);
    CHECK_EQ(rec.code, SL_ENOENT);
    CHECK_STR_CONTAINS(rec.reason, "HTTP 404 NoSuchKey");
    char path[512], url[400];
    CHECK(sl_loader_sample_path(ld, rec.index, path, sizeof path) != NULL);
    CHECK(!strcmp(path, hd_url(s.srv, gone, url, sizeof url)));
    sl_loader_destroy(ld);
    down(&s);
}

TEST(readahead_serves_the_workers) {
    setup s;
    if (!up(&s, 40, 0)) return;
    sl_config c;
    cfg_for(&c, s.manifest, 2);
    sl_loader *ld = fx_open(&c);
    for (int e = 0; e < 2; e++) fx_finish_epoch(ld);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK(st.readahead_started > 0);
    CHECK(st.readahead_hits > 0);
    CHECK_LE(st.readahead_hits + st.readahead_dropped, st.readahead_started);
    CHECK_LE(st.peak_accounted_bytes, c.budget);
    sl_loader_destroy(ld);
    /* off: nothing read ahead, the same bytes */
    sl_config off = c;
    off.io_readahead = SL_READAHEAD_OFF;
    CHECK_EQ(fx_epoch_sum(&off, NULL), fx_epoch_sum(&c, NULL));
    down(&s);
}

TEST(create_refusals_say_which_and_what_to_do) {
    setup s;
    if (!up(&s, 10, 0)) return;
    sl_config c;
    char err[512], url[300];
    cfg_for(&c, hd_url(s.srv, "/shards/s-{000000..000003}.tar", url, sizeof url), 1);
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_ENOENT);
    CHECK_STR_CONTAINS(err, "s-000003.tar: HTTP 404 NoSuchKey: no such object");
    cfg_for(&c, hd_url(s.srv, "/shards/", url, sizeof url), 1);
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "an http server has no listing");
    cfg_for(&c, hd_url(s.srv, "/ds/none.jsonl", url, sizeof url), 1);
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_ENOENT);
    CHECK_STR_CONTAINS(err, "none.jsonl: HTTP 404");
    cfg_for(&c, "s3://x/shard.tar", 1);
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "is not an S3 bucket name");
    /* a port nobody listens on */
    hd_server *gone = hd_start();
    char dead[300];
    hd_url(gone, "/x.tar", dead, sizeof dead);
    hd_stop(gone);
    cfg_for(&c, dead, 1);
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EIO);
    CHECK_STR_CONTAINS(err, "cannot reach the server");
    /* a budget too small for the requests in flight */
    cfg_for(&c, s.remote, 1);
    c.io_requests = 1024;
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "cannot hold 1024 requests in flight");
    down(&s);
}

static void *destroy_it(void *arg) {
    sl_loader_destroy(arg);
    return NULL;
}

TEST(destroy_while_every_request_stalls) {
    setup s;
    if (!up(&s, 30, 0)) return;
    sl_config c;
    cfg_for(&c, s.manifest, 3);
    c.io_timeout_ms = 600000; /* nothing but the cancel can end the reads */
    sl_loader *ld = fx_open(&c);
    hd_faults(s.srv, HD_STALL, 1, 0);
    /* consume until requests stall (progress, not a clock: the 10 ms is a poll) */
    sl_batch *b;
    while (atomic_load(&s.srv->stalled) == 0)
        if (sl_loader_next_timeout(ld, &b, 10) == 0) sl_loader_release(ld, b);
    pthread_t t;
    pthread_create(&t, NULL, destroy_it, ld);
    pthread_join(t, NULL); /* returns: the engine failed the stalled reads */
    down(&s);
}

/* Open the remote shards as a source: its sample count and how many shards
 * came from the node's records. */
static uint64_t open_count(const char *url, uint64_t *from_records) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 64 << 20));
    sl__source *src;
    char err[512];
    if (sl__source_open(&b, url, 1, &src, err, sizeof err)) SL_FAIL("open %s: %s", url, err);
    uint64_t n = sl__source_count(src);
    *from_records = src->records_used;
    sl__source_close(src);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    return n;
}

/* The one record file of the folder whose name ends in suffix. */
static void record_path(const char *suffix, char *out, size_t len, int nth) {
    DIR *d = opendir(records);
    CHECK(d != NULL);
    struct dirent *e;
    int k = 0;
    out[0] = 0;
    while ((e = readdir(d)))
        if (strlen(e->d_name) > strlen(suffix) && !strcmp(e->d_name + strlen(e->d_name) - strlen(suffix), suffix) &&
            k++ == nth)
            snprintf(out, len, "%s/%s", records, e->d_name);
    closedir(d);
    CHECK(out[0]);
}

TEST(records_spare_the_next_scan) {
    setup s;
    if (!up(&s, 30, 0)) return;
    uint64_t used, n = open_count(s.remote, &used);
    CHECK_EQ(n, 30);
    CHECK_EQ(used, 0); /* scanned, recorded */
    int before = atomic_load(&s.srv->requests);
    CHECK_EQ(open_count(s.remote, &used), 30);
    CHECK_EQ(used, 3);
    CHECK_EQ(atomic_load(&s.srv->requests) - before, 3); /* one size-and-version request a shard, no scan */
    sl_config a, b;
    local_and_remote(&s, &a, &b, 3);
    CHECK_EQ(fx_epoch_sum(&b, NULL), fx_epoch_sum(&a, NULL)); /* the same samples, labels, bytes */
    /* a record damaged by a byte: ignored, the shard scanned again and recorded anew */
    char idx[512];
    record_path(".idx", idx, sizeof idx, 1);
    int fd = open(idx, O_RDWR);
    CHECK(fd >= 0);
    uint8_t c;
    CHECK_EQ(pread(fd, &c, 1, 200), 1);
    c ^= 0x20;
    CHECK_EQ(pwrite(fd, &c, 1, 200), 1);
    close(fd);
    CHECK_EQ(open_count(s.remote, &used), 30);
    CHECK_EQ(used, 2);
    CHECK_EQ(open_count(s.remote, &used), 30);
    CHECK_EQ(used, 3);
    /* a shard replaced: another version, another record */
    buf b3 = {0};
    member(&b3, "k99999.jpg", "not an image");
    member(&b3, "k99999.cls", "1\n");
    end(&b3);
    hd_put(s.srv, "/shards/s-000002.tar", b3.p, b3.n);
    free(b3.p);
    CHECK_EQ(open_count(s.remote, &used), 21); /* 10 + 10 + the new shard's 1 */
    CHECK_EQ(used, 2);
    down(&s);
}

TEST(ranks_starting_together_scan_each_shard_once) {
    setup s;
    if (!up(&s, 30, 0)) return;
    int before = atomic_load(&s.srv->requests);
    enum { RANKS = 4 };
    pid_t kids[RANKS];
    setenv("SL_RANK_URL", s.remote, 1);
    for (int r = 0; r < RANKS; r++) {
        if ((kids[r] = fork()) == 0) { /* a rank: a fresh process, as torchrun starts them (exec: no
                                           threads of this one carried over, which TSan refuses) */
            execl("/proc/self/exe", "test_remote", "rank_opens_the_source", (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < RANKS; r++) {
        int st;
        CHECK(waitpid(kids[r], &st, 0) == kids[r]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    /* each rank asks for the 3 shards' sizes; the shards (one window each) are read once */
    CHECK_EQ(atomic_load(&s.srv->requests) - before, RANKS * 3 + 3);
    down(&s);
}

/* The rank of ranks_starting_together_scan_each_shard_once (nothing to do
 * when run on its own). */
TEST(rank_opens_the_source) {
    const char *url = getenv("SL_RANK_URL");
    if (!url) return;
    uint64_t used;
    CHECK_EQ(open_count(url, &used), 30);
}
