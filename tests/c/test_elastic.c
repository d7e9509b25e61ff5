/* ctest: tsan */
/*
 * Resuming on another number of ranks (issue 21, item 4) and order ranges
 * (issue 22), end to end over real JPEG folders (fixture.h), tar shards
 * and a node cache. Ranks are loaders with rank = r in one process, or
 * forked processes where they share a node cache.
 *
 * The exactness check: over every run of an epoch, each sample is tried
 * once, plus once for every padding entry that repeats it (entries past
 * the end of a span, which wrap round it); a good sample tried is
 * delivered, with the bytes an uninterrupted loader gives it, and a bad
 * one is an error record. The padding is computed here by brute force
 * from the merged states and the permutation. And with several ranks a
 * rank whose bad samples used up its share pads its batches with its own
 * samples again (refill.c): it delivers its share's size exactly, so the
 * extra deliveries of a run to the epoch's end are as many as the
 * failures it recorded.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "check.h"
#include "fixture.h"
#include "pipeline/sampler.h"
#include "sluice.h"

typedef unsigned long long ull;

#define MAXN 256
#define MAXR 4

/* What the runs of one epoch did with each sample. */
typedef struct tally {
    uint64_t padded;       /* deliveries that pad for a bad sample (runs to an epoch's end, ranks > 1) */
    uint32_t seen[MAXN];   /* deliveries */
    uint32_t failed[MAXN]; /* error records */
    uint32_t want[MAXN];   /* tries expected: 1 + the padding entries that repeat it */
    uint64_t hash[MAXN];   /* its image's bytes as delivered (0: not yet) */
} tally;

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void base_cfg(sl_config *c, const char *source, uint32_t rank, uint32_t world) {
    sl_config_init(c);
    c->source = source;
    c->batch_size = 3;
    c->size = 24;
    c->workers = 2;
    c->seed = 11;
    c->budget = 64u << 20;
    c->rank = rank;
    c->world_size = world;
}

/* One rank's run: from `from` (NULL: the start), `max` batches of the
 * epoch at most (to its end otherwise), every delivery and error record
 * into t; its state after, if asked (the gone list copied into gone[]). */
typedef struct run {
    uint64_t batches, samples;
    int ended;
    sl_state st;
    uint32_t gone[MAXN];
} run;

static void run_rank(const sl_config *c, const sl_state *from, uint64_t max, tally *t, run *out) {
    sl_loader *ld = fx_open(c);
    if (from) {
        char why[512];
        int rc = sl_loader_set_state(ld, from);
        if (rc) {
            sl_loader_check_state(ld, from, why, sizeof why);
            SL_FAIL("rank %u of %u: set_state: %s (%s)", c->rank, c->world_size, sl_strerror(rc), why);
        }
    }
    memset(out, 0, sizeof *out);
    sl_state at;
    CHECK_OK(sl_loader_get_state(ld, &at));
    CHECK_EQ(at.batch, 0); /* runs start at a span's start */
    uint64_t share = at.tail;
    sl_batch *b;
    int rc = 0;
    while (out->batches < max && (rc = sl_loader_next(ld, &b)) == 0) {
        sl_field img, idx;
        CHECK_OK(sl_batch_find(b, "image", &img));
        CHECK_OK(sl_batch_find(b, "index", &idx));
        size_t one = (size_t)img.nbytes / sl_batch_len(b);
        for (uint32_t j = 0; j < sl_batch_len(b); j++) {
            int64_t k = ((int64_t *)idx.data)[j];
            CHECK(k >= 0 && k < MAXN);
            uint64_t h = fnv((uint8_t *)img.data + j * one, one);
            if (t->hash[k] && t->hash[k] != h)
                SL_FAIL("sample %lld: other bytes than at its other delivery", (long long)k);
            t->hash[k] = h;
            t->seen[k]++;
        }
        out->samples += sl_batch_len(b);
        out->batches++;
        sl_loader_release(ld, b);
    }
    if (out->batches < max) {
        CHECK_EQ(rc, SL_EEND);
        out->ended = 1;
    }
    sl_error_record recs[MAXN];
    size_t nr = sl_loader_errors(ld, 0, recs, MAXN);
    for (size_t i = 0; i < nr; i++) t->failed[recs[i].index]++;
    if (out->ended && c->world_size > 1) { /* the share's size exactly: padded for each failure */
        CHECK_EQ(out->samples, share);
        t->padded += nr;
    }
    CHECK_OK(sl_loader_get_state(ld, &out->st));
    CHECK(out->st.gone_count <= MAXN);
    if (out->st.gone_count) memcpy(out->gone, out->st.gone, out->st.gone_count * 4);
    out->st.gone = out->gone;
    sl_loader_destroy(ld);
}

/* W ranks of configuration c (rank and world_size set here), one after
 * another: run_rank for each, from `from`, `max` batches. */
static void run_world(const sl_config *c, uint32_t W, const sl_state *from, uint64_t max, tally *t, run *runs) {
    for (uint32_t r = 0; r < W; r++) {
        sl_config rc = *c;
        rc.rank = r;
        rc.world_size = W;
        run_rank(&rc, from, max, t, &runs[r]);
    }
}

/* Merge the runs' states (rank order); the gone list into gone[]. */
static sl_state merge(run *runs, uint32_t world, uint32_t *gone) {
    const sl_state *ptr[MAXR];
    for (uint32_t r = 0; r < world; r++) ptr[r] = &runs[r].st;
    sl_state m;
    char why[512] = "";
    int rc = sl_state_merge(ptr, world, &m, gone, MAXN, why, sizeof why);
    if (rc) SL_FAIL("sl_state_merge: %s (%s)", sl_strerror(rc), why);
    CHECK_EQ(m.world_size, 0);
    CHECK_EQ(m.batch, 0);
    return m;
}

/* The permutation of epoch e (the global order's positions -> samples). */
static void permutation(uint32_t n, uint64_t seed, uint64_t e, uint32_t *perm) {
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, n, 0, 1, 1, 0, seed));
    sl__sampler_fill(&s, e, perm, NULL);
}

/* Padding entries the world of `world` ranks (progress in runs, or the
 * whole epoch when final) tried over the span of st: each repeats a sample
 * of the span; add those tries to t->want. */
static void count_padding(tally *t, const sl_state *st, uint32_t n, const uint32_t *perm, uint32_t world, uint32_t B,
                          const run *runs, int final) {
    uint32_t L[MAXN];
    uint64_t m = 0, g = 0, lo = st->span_begin, hi = st->span_end;
    if (lo == hi) lo = 0, hi = n; /* a merged state of an epoch over: the whole order */
    for (uint64_t p = lo; p < hi; p++) {
        if (g < st->gone_count && st->gone[g] == p) g++;
        else L[m++] = (uint32_t)p;
    }
    uint64_t per = (m + world - 1) / world;
    for (uint32_t r = 0; r < world; r++)
        for (uint64_t i = 0; i < per; i++) {
            uint64_t j = r + i * world;
            int tried = final || i < runs[r].st.batch * B || i >= runs[r].st.tail;
            if (j >= m && tried) t->want[perm[L[j % m]]]++;
        }
}

/* Every sample tried as often as wanted: delivered if good (with the
 * reference bytes), recorded if bad. */
static void check_tally(const tally *t, const fx_dataset *d, const tally *ref, const char *what) {
    uint64_t extra = 0;
    for (uint32_t k = 0; k < d->files; k++) {
        uint32_t want = t->want[k] + 1;
        int bad = d->kind[k] != FX_GOOD;
        if (t->seen[k] < (bad ? 0 : want) || (bad && t->seen[k]) || t->failed[k] != (bad ? want : 0))
            SL_FAIL("%s: sample %u (%s) delivered %u times, recorded bad %u times; expected %u tries", what, k,
                    bad ? "bad" : "good", t->seen[k], t->failed[k], want);
        if (!bad) extra += t->seen[k] - want;
        if (!bad && t->hash[k] != ref->hash[k])
            SL_FAIL("%s: sample %u has other bytes than in an uninterrupted run", what, k);
    }
    if (extra != t->padded)
        SL_FAIL("%s: %llu deliveries beyond each sample's tries, and %llu pads for bad samples", what, (ull)extra,
                (ull)t->padded);
}

/* The reference: one rank over the whole epoch (bytes of every good sample). */
static tally *reference(const char *source) {
    tally *ref = calloc(1, sizeof *ref);
    CHECK(ref != NULL);
    sl_config c;
    base_cfg(&c, source, 0, 1);
    run r;
    run_rank(&c, NULL, UINT64_MAX, ref, &r);
    CHECK(r.ended);
    return ref;
}

/*
 * W ranks run `stop` batches of epoch 0, their states are merged, and W2
 * ranks resume the merged state to the epoch's end: every sample of the
 * epoch is tried once (plus padding), in phase 1 or phase 2. With W3, the
 * W2 ranks stop after stop2 batches and W3 ranks finish (a second resize
 * in the same epoch: the states then carry a gone list).
 */
static void resize_case(const char *source, const fx_dataset *d, uint32_t W, uint64_t stop, uint32_t W2,
                        uint64_t stop2, uint32_t W3) {
    tally *ref = reference(source), *t = calloc(1, sizeof *t);
    CHECK(t != NULL);
    uint32_t perm[MAXN], gone1[MAXN], gone2[MAXN];
    permutation(d->files, 11, 0, perm);
    run runs[MAXR], runs2[MAXR], fin[MAXR];
    sl_config c;
    base_cfg(&c, source, 0, 1);
    run_world(&c, W, NULL, stop, t, runs);
    for (uint32_t r = 0; r < W; r++) {
        CHECK(!runs[r].ended);
        CHECK_EQ(runs[r].st.span_begin, 0);
        CHECK_EQ(runs[r].st.span_end, d->files);
    }
    sl_state whole = runs[0].st;
    whole.span_begin = 0, whole.span_end = d->files, whole.gone_count = 0;
    count_padding(t, &whole, d->files, perm, W, 3, runs, 0);
    sl_state m = merge(runs, W, gone1);
    if (W3) {
        run_world(&c, W2, &m, stop2, t, runs2);
        for (uint32_t r = 0; r < W2; r++) CHECK(!runs2[r].ended);
        count_padding(t, &m, d->files, perm, W2, 3, runs2, 0);
        m = merge(runs2, W2, gone2);
        W2 = W3;
    }
    uint64_t nb = 0;
    run_world(&c, W2, &m, UINT64_MAX, t, fin);
    for (uint32_t r = 0; r < W2; r++) {
        CHECK(fin[r].ended);
        if (r == 0) nb = fin[r].batches;
        if (fin[r].batches != nb) SL_FAIL("rank %u ran %llu batches, rank 0 %llu", r, (ull)fin[r].batches, (ull)nb);
        /* the epoch is over: every rank stands at the next one's start, over the whole order */
        CHECK_EQ(fin[r].st.epoch, 1);
        CHECK_EQ(fin[r].st.batch, 0);
        CHECK_EQ(fin[r].st.span_end, d->files);
    }
    count_padding(t, &m, d->files, perm, W2, 3, fin, 1);
    char what[96];
    snprintf(what, sizeof what, "%u ranks, then %u%s", W, W3 ? W3 : W2, W3 ? " via another" : "");
    check_tally(t, d, ref, what);
    printf("%s: resumed over [%llu, %llu) less %llu gone, %llu batches a rank, %llu pads\n", what,
           (ull)m.span_begin, (ull)m.span_end, (ull)m.gone_count, (ull)nb, (ull)t->padded);
    free(ref), free(t);
}

/* 48 samples, 4 ranks of 12, batches of 3: stopped after 2 batches (24
 * delivered), the 24 left are 12 each on 2 ranks and 8 each on 3: each
 * sample exactly once. */
TEST(four_ranks_resume_on_two_and_three) {
    fx_dataset *d = fx_new(48, 0, 48, 160);
    resize_case(d->root, d, 4, 2, 2, 0, 0);
    resize_case(d->root, d, 4, 2, 3, 0, 0);
    resize_case(d->root, d, 4, 3, 1, 0, 0);
    free(d);
}

/* Bad files: refilled from each rank's tail in phase 1, so what the 4 ranks
 * leave is not a prefix of the order; merged, and resumed on 2 and 3 ranks
 * (with padding where the rest does not divide), every bad sample is
 * recorded once and every good one delivered once (plus padding). */
TEST(bad_files_resume_on_two_and_three) {
    fx_dataset *d = fx_new(42, 10, 48, 160);
    resize_case(d->root, d, 4, 2, 2, 0, 0);
    resize_case(d->root, d, 4, 1, 3, 0, 0);
    resize_case(d->root, d, 4, 3, 3, 0, 0);
    free(d);
}

/* Two resizes in one epoch: 4 -> 3 -> 2 and 4 -> 2 -> 3, with bad files:
 * the second merge is of states over what the first world left. */
TEST(resize_twice_in_one_epoch) {
    fx_dataset *d = fx_new(44, 8, 48, 160);
    resize_case(d->root, d, 4, 1, 3, 2, 2);
    resize_case(d->root, d, 4, 2, 2, 1, 3);
    free(d);
}

/* Tar shards (sluice pack writes them from the folder): the same. */
TEST(shards_resume_on_two_and_three) {
    fx_dataset *d = fx_new(45, 3, 48, 160);
    char shards[300], out[4096], args[700];
    snprintf(shards, sizeof shards, "%s.shards", d->root);
    fx_track(shards);
    snprintf(args, sizeof args, "pack %s %s --samples-per-shard 8 2>&1", d->root, shards);
    int rc = fx_sluice(args, out, sizeof out);
    if (rc != 0) SL_FAIL("sluice %s: exit %d: %s", args, rc, out);
    resize_case(shards, d, 4, 2, 2, 0, 0);
    resize_case(shards, d, 4, 2, 3, 1, 2);
    free(d);
}

/* ---- a node cache shared by forked ranks ------------------------------------------------ */

typedef struct shared {
    tally t[MAXR];
    run runs[MAXR];
} shared;

static void node_cfg(sl_config *c, const char *source, uint32_t r, uint32_t W) {
    base_cfg(c, source, r, W);
    c->cache = 8u << 20;
    c->cache_share = SL_CACHE_NODE;
    c->local_rank = r;
    c->local_world_size = W;
}

/* W forked ranks on one node cache, each from `from`, `max` batches. */
static void node_phase(const char *source, uint32_t W, const sl_state *from, uint64_t max, shared *sh) {
    pid_t pid[MAXR];
    memset(sh, 0, sizeof *sh);
    for (uint32_t r = 0; r < W; r++) {
        pid[r] = fork();
        CHECK(pid[r] >= 0);
        if (pid[r] == 0) {
            sl_config c;
            node_cfg(&c, source, r, W);
            run_rank(&c, from, max, &sh->t[r], &sh->runs[r]);
            sl_loader *ld = fx_open(&c); /* the cache served: its segment was the node's */
            sl_stats st;
            CHECK_OK(sl_loader_stats(ld, &st));
            CHECK(st.cache_shared);
            sl_loader_destroy(ld);
            _exit(0);
        }
    }
    for (uint32_t r = 0; r < W; r++) {
        int st;
        CHECK_EQ(waitpid(pid[r], &st, 0), pid[r]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) SL_FAIL("rank %u of %u ended with status %d", r, W, st);
    }
}

static void add_tally(tally *t, const tally *u) {
    t->padded += u->padded;
    for (int k = 0; k < MAXN; k++) {
        t->seen[k] += u->seen[k];
        t->failed[k] += u->failed[k];
        if (u->hash[k]) {
            if (t->hash[k] && t->hash[k] != u->hash[k]) SL_FAIL("sample %d: other bytes on another rank", k);
            t->hash[k] = u->hash[k];
        }
    }
}

TEST(node_cache_four_ranks_resume_on_two_and_three) {
    fx_dataset *d = fx_new(46, 2, 48, 160);
    char job[64];
    snprintf(job, sizeof job, "test-elastic-%ld", (long)getpid());
    setenv("SLUICE_CACHE_JOB", job, 1);
    tally *ref = reference(d->root);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    uint32_t perm[MAXN], gone[MAXN];
    permutation(d->files, 11, 0, perm);
    for (uint32_t W2 = 2; W2 <= 3; W2++) {
        tally *t = calloc(1, sizeof *t);
        CHECK(t != NULL);
        node_phase(d->root, 4, NULL, 2, sh);
        run runs[MAXR];
        for (uint32_t r = 0; r < 4; r++) {
            add_tally(t, &sh->t[r]);
            runs[r] = sh->runs[r];
            runs[r].st.gone = runs[r].gone;
        }
        sl_state whole = runs[0].st;
        count_padding(t, &whole, d->files, perm, 4, 3, runs, 0);
        sl_state m = merge(runs, 4, gone); /* gone: this process's, inherited by the forked ranks */
        node_phase(d->root, W2, &m, UINT64_MAX, sh);
        for (uint32_t r = 0; r < W2; r++) {
            add_tally(t, &sh->t[r]);
            runs[r] = sh->runs[r];
            CHECK(runs[r].ended);
        }
        count_padding(t, &m, d->files, perm, W2, 3, runs, 1);
        check_tally(t, d, ref, W2 == 2 ? "node cache, 4 ranks then 2" : "node cache, 4 ranks then 3");
        free(t);
    }
    munmap(sh, sizeof *sh);
    free(ref);
    free(d);
}

/* ---- the state's rules -------------------------------------------------------------------- */

/* A mid-epoch state of one rank resumes that rank only; the library says
 * to merge. A state at its span's start (every epoch's end) resumes any
 * world. A merged state resumes any world, rank or batch size. */
TEST(which_states_resume_where) {
    fx_dataset *d = fx_new(30, 0, 48, 120);
    sl_config c;
    tally *t = calloc(1, sizeof *t);
    run a[2];
    base_cfg(&c, d->root, 0, 1);
    run_world(&c, 2, NULL, 2, t, a);
    base_cfg(&c, d->root, 0, 3);
    sl_loader *ld = fx_open(&c);
    char why[1024];
    CHECK_EQ(sl_loader_set_state(ld, &a[0].st), SL_ESTATE);
    CHECK_EQ(sl_loader_check_state(ld, &a[0].st, why, sizeof why), SL_ESTATE);
    CHECK_STR_CONTAINS(why, "rank 0's of 2 ranks");
    CHECK_STR_CONTAINS(why, "merge the states of all 2 ranks");
    /* another batch size on the same world: the same */
    sl_loader_destroy(ld);
    base_cfg(&c, d->root, 0, 2);
    c.batch_size = 4;
    ld = fx_open(&c);
    CHECK_EQ(sl_loader_check_state(ld, &a[0].st, why, sizeof why), SL_ESTATE);
    /* the merged state: any batch size, drop_last */
    uint32_t gone[MAXN];
    sl_state m = merge(a, 2, gone);
    CHECK_EQ(m.span_begin, 12); /* 2 ranks x 2 batches x 3 */
    CHECK_EQ(m.span_end, 30);
    CHECK_EQ(m.gone_count, 0);
    CHECK_OK(sl_loader_check_state(ld, &m, why, sizeof why));
    CHECK_OK(sl_loader_set_state(ld, &m));
    sl_state s;
    CHECK_OK(sl_loader_get_state(ld, &s));
    CHECK_EQ(s.span_begin, 12);
    CHECK_EQ(s.batch, 0);
    CHECK_EQ(s.tail, 9); /* 18 left, 9 a rank */
    sl_batch *b;
    uint64_t nb = 0;
    while (sl_loader_next(ld, &b) == 0) {
        nb++;
        sl_loader_release(ld, b);
    }
    CHECK_EQ(nb, 3); /* 9 in batches of 4: the resumed epoch has its own length */
    CHECK_OK(sl_loader_get_state(ld, &s));
    CHECK_EQ(s.epoch, 1);
    CHECK_EQ(s.span_begin, 0);
    CHECK_EQ(s.span_end, 30);
    CHECK_EQ(s.tail, 15);
    sl_loader_destroy(ld);
    /* the end-of-epoch state of one rank: any world */
    base_cfg(&c, d->root, 2, 3);
    ld = fx_open(&c);
    CHECK_OK(sl_loader_set_state(ld, &s));
    CHECK_OK(sl_loader_get_state(ld, &s));
    CHECK_EQ(s.epoch, 1);
    CHECK_EQ(s.tail, 10);
    sl_loader_destroy(ld);
    /* drop_last with a rest smaller than a batch for each rank: the epoch is over */
    base_cfg(&c, d->root, 1, 3);
    c.drop_last = 1;
    c.batch_size = 7;
    ld = fx_open(&c);
    CHECK_OK(sl_loader_set_state(ld, &m)); /* 18 left: 6 a rank, less than a batch of 7 */
    CHECK_OK(sl_loader_get_state(ld, &s));
    CHECK_EQ(s.epoch, 1);
    CHECK_EQ(s.batch, 0);
    CHECK_EQ(s.span_begin, 0);
    CHECK_EQ(sl_loader_next(ld, &b), 0);
    CHECK_EQ(sl_batch_epoch(b), 1);
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
    free(t);
    free(d);
}

/* States are hostile input: every field is checked before use. */
TEST(state_checks) {
    fx_dataset *d = fx_new(20, 0, 48, 100);
    sl_config c;
    base_cfg(&c, d->root, 0, 1);
    sl_loader *ld = fx_open(&c);
    sl_state good, s;
    CHECK_OK(sl_loader_get_state(ld, &good));
    CHECK_EQ(good.version, 2);
    char why[1024];
    uint32_t up[] = {5, 9}, down[] = {9, 5}, out[] = {5, 25};
#define REFUSED(mutate, needle)                                               \
    do {                                                                       \
        s = good;                                                              \
        mutate;                                                                \
        CHECK_EQ(sl_loader_set_state(ld, &s), SL_ESTATE);                      \
        CHECK_EQ(sl_loader_check_state(ld, &s, why, sizeof why), SL_ESTATE);   \
        CHECK_STR_CONTAINS(why, needle);                                       \
    } while (0)
    REFUSED(s.version = 3, "version is 3");
    REFUSED(s.version = 0, "version is 0");
    REFUSED(s.seed = 5, "seed 5");
    REFUSED(s.dataset_size = 21, "21 samples");
    REFUSED(s.dataset_size = 0, "dataset_size 0");
    REFUSED(s.flags = 8, "flags 0x8");
    REFUSED(s.flags = 0, "shuffle off");
    REFUSED((s.span_begin = 4, s.span_end = 3), "span [4, 3)");
    REFUSED((s.span_end = 21), "span [0, 21)");
    REFUSED((s.gone = down, s.gone_count = 2), "not ascending");
    REFUSED((s.gone = out, s.gone_count = 2), "not ascending inside it");
    REFUSED((s.gone = NULL, s.gone_count = 2), "less 2 positions");
    REFUSED((s.gone = up, s.gone_count = 20), "less 20 positions");
    REFUSED(s.batch = 7, "batch 7");                 /* past the epoch (7 batches of 3) */
    REFUSED((s.batch = 2, s.tail = 6), "tail 6");     /* leaves batch 2 nothing */
    REFUSED(s.tail = 21, "tail 21");
    REFUSED((s.rank = 1), "rank 1 of world_size 1");
    REFUSED((s.world_size = 0, s.batch = 1), "merged state");
    REFUSED((s.world_size = 0, s.batch_size = 3), "merged state");
    /* a span inside the order, with positions gone: this rank resumes it exactly */
    s = good;
    s.span_begin = 2, s.span_end = 18, s.gone = up, s.gone_count = 2, s.tail = 14;
    CHECK_OK(sl_loader_check_state(ld, &s, why, sizeof why));
    CHECK_OK(sl_loader_set_state(ld, &s));
    up[0] = 6; /* the caller's list was copied */
    sl_state now;
    CHECK_OK(sl_loader_get_state(ld, &now));
    CHECK_EQ(now.gone_count, 2);
    CHECK_EQ(now.gone[0], 5);
    CHECK_EQ(now.tail, 14);
    /* a caller of 0.1's size (0.1's calls, by name): the state where it
     * needs no span, SL_EUNSUPPORTED rather than a wrong one where it does */
    sl_state v1;
    CHECK_EQ((sl_loader_get_state)(ld, &v1), SL_EUNSUPPORTED);
    CHECK_EQ(sl_loader_get_state_sized(ld, &v1, 0), SL_EINVAL);
    CHECK_OK(sl_loader_set_epoch(ld, 1));
    memset(&v1, 0xAB, sizeof v1);
    CHECK_OK((sl_loader_get_state)(ld, &v1));
    CHECK_EQ(v1.version, SL_STATE_VERSION);
    CHECK_EQ(v1.epoch, 1);
    CHECK_EQ(v1.span_begin, 0xABABABABABABABABull); /* not written past 0.1's state */
    v1.epoch = 0;
    v1.batch = 1;
    CHECK_OK((sl_loader_set_state)(ld, &v1)); /* reads no span: the whole order */
    CHECK_OK(sl_loader_get_state(ld, &now));
    CHECK_EQ(now.batch, 1);
    CHECK_EQ(now.span_end, 20);
    /* a state of version 1 names the whole order whatever follows its flags */
    v1.version = 1;
    CHECK_OK(sl_loader_set_state(ld, &v1));
    /* zeros past the flags: 0.1's meaning too (the loader's order, nothing padded) */
    s = good;
    s.span_end = 0;
    s.batch = 2;
    CHECK_OK(sl_loader_set_state(ld, &s));
    /* a field of a newer header set: refused, not ignored */
    struct {
        sl_state st;
        uint64_t newer;
    } big = {.st = good, .newer = 1};
    CHECK_EQ(sl_loader_set_state_sized(ld, &big.st, sizeof big), SL_EUNSUPPORTED);
    CHECK_EQ(sl_loader_check_state_sized(ld, &big.st, sizeof big, why, sizeof why), SL_EUNSUPPORTED);
    CHECK_STR_CONTAINS(why, "newer libsluice");
    sl_loader_destroy(ld);
    /* an order range refuses a span outside it, and version-1 states (the whole order) */
    c.order_begin = 4, c.order_end = 16;
    ld = fx_open(&c);
    REFUSED((void)0, "not inside this loader's order range [4, 16)");
    CHECK_EQ(sl_loader_set_state(ld, &v1), SL_ESTATE); /* version 1: the whole order */
    sl_loader_destroy(ld);
#undef REFUSED
    free(d);
}

/* Merging: the states of one world at one epoch, in rank order. */
TEST(merge_checks) {
    fx_dataset *d = fx_new(24, 8, 48, 100);
    sl_config c;
    tally *t = calloc(1, sizeof *t);
    run a[3], e[2];
    base_cfg(&c, d->root, 0, 1);
    run_world(&c, 3, NULL, 1, t, a);
    run_world(&c, 2, NULL, UINT64_MAX, t, e);
    const sl_state *ptr[3] = {&a[0].st, &a[1].st, &a[2].st};
    sl_state m;
    char why[640];
    uint32_t gone[MAXN];
    CHECK_EQ(sl_state_merge(ptr, 2, &m, gone, MAXN, why, sizeof why), SL_ESTATE);
    CHECK_STR_CONTAINS(why, "world of 3 ranks, and 2 states");
    const sl_state *swapped[3] = {&a[1].st, &a[0].st, &a[2].st};
    CHECK_EQ(sl_state_merge(swapped, 3, &m, gone, MAXN, why, sizeof why), SL_ESTATE);
    CHECK_STR_CONTAINS(why, "rank order");
    sl_state later = a[2].st;
    later.epoch = 1;
    const sl_state *mixed[3] = {&a[0].st, &a[1].st, &later};
    CHECK_EQ(sl_state_merge(mixed, 3, &m, gone, MAXN, why, sizeof why), SL_ESTATE);
    CHECK_STR_CONTAINS(why, "epoch 1 and rank 0's in epoch 0");
    sl_state far = a[1].st;
    far.batch = 40;
    const sl_state *unreachable[3] = {&a[0].st, &far, &a[2].st};
    CHECK_EQ(sl_state_merge(unreachable, 3, &m, gone, MAXN, why, sizeof why), SL_ESTATE);
    CHECK_STR_CONTAINS(why, "batch 40");
    CHECK_EQ(sl_state_merge(NULL, 3, &m, gone, MAXN, why, sizeof why), SL_EINVAL);
    CHECK_EQ(sl_state_merge_sized(ptr, 3, &m, offsetof(sl_state, pad), gone, MAXN, why, sizeof why), SL_EINVAL);
    /* the count first, then the list */
    CHECK_OK(sl_state_merge(ptr, 3, &m, gone, MAXN, why, sizeof why));
    CHECK(m.gone_count > 0); /* bad files: each rank refilled from its own tail */
    uint64_t need = m.gone_count;
    CHECK_EQ(sl_state_merge(ptr, 3, &m, NULL, 0, why, sizeof why), SL_EOVERFLOW);
    CHECK_EQ(m.gone_count, need);
    CHECK(m.gone == NULL);
    /* a merged state is not merged again */
    CHECK_OK(sl_state_merge(ptr, 3, &m, gone, MAXN, why, sizeof why));
    const sl_state *again[1] = {&m};
    CHECK_EQ(sl_state_merge(again, 1, &m, gone, MAXN, why, sizeof why), SL_ESTATE);
    CHECK_STR_CONTAINS(why, "merged state already");
    /* ranks whose epoch is over: the next epoch's start, over the resuming loader's range */
    const sl_state *over[2] = {&e[0].st, &e[1].st};
    CHECK_OK(sl_state_merge(over, 2, &m, gone, MAXN, why, sizeof why));
    CHECK_EQ(m.epoch, 1);
    CHECK_EQ(m.span_begin, 0);
    CHECK_EQ(m.span_end, d->files);
    free(t);
    free(d);
}

/* set_epoch(e) at the start of a resumed epoch keeps what is left (the
 * usual loop calls it); anywhere else it restarts e whole. */
TEST(set_epoch_and_resumed_epochs) {
    fx_dataset *d = fx_new(30, 0, 48, 120);
    sl_config c;
    tally *t = calloc(1, sizeof *t);
    run a[2];
    base_cfg(&c, d->root, 0, 1);
    run_world(&c, 2, NULL, 1, t, a);
    uint32_t gone[MAXN];
    sl_state m = merge(a, 2, gone);
    base_cfg(&c, d->root, 0, 1);
    sl_loader *ld = fx_open(&c);
    CHECK_OK(sl_loader_set_state(ld, &m));
    CHECK_OK(sl_loader_set_epoch(ld, 0)); /* already there */
    sl_state s;
    CHECK_OK(sl_loader_get_state(ld, &s));
    CHECK_EQ(s.span_begin, 6);
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    sl_loader_release(ld, b);
    CHECK_OK(sl_loader_set_epoch(ld, 0)); /* restart epoch 0: all of it */
    CHECK_OK(sl_loader_get_state(ld, &s));
    CHECK_EQ(s.span_begin, 0);
    CHECK_EQ(s.tail, 30);
    uint64_t n = 0;
    while (sl_loader_next(ld, &b) == 0) {
        n += sl_batch_len(b);
        sl_loader_release(ld, b);
    }
    CHECK_EQ(n, 30);
    sl_loader_destroy(ld);
    free(t);
    free(d);
}

/* ---- order ranges -------------------------------------------------------------------------- */

/* One loader's samples of epoch e, in order, with their image bytes. */
typedef struct seqrun {
    uint32_t n;
    int64_t idx[MAXN * 2];
    uint64_t hash[MAXN * 2];
    uint32_t failed[MAXN];
    uint64_t batches;
} seqrun;

static void run_seq(const sl_config *c, uint64_t epoch, seqrun *o) {
    memset(o, 0, sizeof *o);
    sl_loader *ld = fx_open(c);
    CHECK_OK(sl_loader_set_epoch(ld, epoch));
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        sl_field img, idx;
        CHECK_OK(sl_batch_find(b, "image", &img));
        CHECK_OK(sl_batch_find(b, "index", &idx));
        size_t one = (size_t)img.nbytes / sl_batch_len(b);
        for (uint32_t j = 0; j < sl_batch_len(b); j++) {
            CHECK(o->n < MAXN * 2);
            o->idx[o->n] = ((int64_t *)idx.data)[j];
            o->hash[o->n++] = fnv((uint8_t *)img.data + j * one, one);
        }
        o->batches++;
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    sl_error_record recs[MAXN];
    size_t nr = sl_loader_errors(ld, 0, recs, MAXN);
    for (size_t i = 0; i < nr; i++) o->failed[recs[i].index]++;
    sl_loader_destroy(ld);
}

/* Ranges that cut the order into pieces deliver, one after another, the
 * whole loader's samples in its order with the same bytes; with shuffle
 * off, a range is the indices [begin, end). */
TEST(order_ranges_concatenate_to_the_epoch) {
    fx_dataset *d = fx_new(40, 0, 48, 120);
    seqrun *whole = calloc(1, sizeof *whole), *part = calloc(1, sizeof *part);
    CHECK(whole && part);
    const uint64_t cuts[] = {0, 7, 8, 20, 33, 40};
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        sl_config c;
        base_cfg(&c, d->root, 0, 1);
        run_seq(&c, epoch, whole);
        CHECK_EQ(whole->n, 40);
        uint32_t at = 0;
        for (int i = 0; i + 1 < 6; i++) {
            c.order_begin = cuts[i], c.order_end = cuts[i + 1];
            c.workers = 1 + (uint32_t)i % 3;
            run_seq(&c, epoch, part);
            CHECK_EQ(part->n, cuts[i + 1] - cuts[i]);
            for (uint32_t j = 0; j < part->n; j++, at++) {
                if (part->idx[j] != whole->idx[at] || part->hash[j] != whole->hash[at])
                    SL_FAIL("epoch %llu range [%llu, %llu) entry %u: sample %lld, the whole order has %lld there%s",
                            (ull)epoch, (ull)cuts[i], (ull)cuts[i + 1], j, (long long)part->idx[j],
                            (long long)whole->idx[at], part->idx[j] == whole->idx[at] ? " (other bytes)" : "");
            }
        }
        CHECK_EQ(at, 40);
    }
    sl_config c;
    base_cfg(&c, d->root, 0, 1);
    c.shuffle = 0;
    c.order_begin = 9, c.order_end = 17;
    run_seq(&c, 3, part);
    CHECK_EQ(part->n, 8);
    for (uint32_t j = 0; j < 8; j++) CHECK_EQ(part->idx[j], 9 + j);
    free(whole), free(part), free(d);
}

/* Bad files in ranges: a hole is refilled from the range's own end, so a
 * range delivers its good samples once and records its bad ones once;
 * together the ranges cover the epoch. A range shared by 2 ranks pads as
 * an epoch does. */
TEST(order_ranges_refill_inside) {
    fx_dataset *d = fx_new(36, 9, 48, 120);
    uint32_t perm[MAXN];
    permutation(d->files, 11, 1, perm);
    seqrun *part = calloc(1, sizeof *part);
    uint32_t seen[MAXN] = {0}, failed[MAXN] = {0};
    const uint64_t cuts[] = {0, 10, 11, 30, 45};
    for (int i = 0; i + 1 < 5; i++) {
        sl_config c;
        base_cfg(&c, d->root, 0, 1);
        c.order_begin = cuts[i], c.order_end = cuts[i + 1];
        run_seq(&c, 1, part);
        uint8_t mine[MAXN] = {0};
        for (uint64_t p = cuts[i]; p < cuts[i + 1]; p++) mine[perm[p]] = 1;
        for (uint32_t j = 0; j < part->n; j++) {
            if (!mine[part->idx[j]]) SL_FAIL("range [%llu, %llu) delivered sample %lld of another range",
                                             (ull)cuts[i], (ull)cuts[i + 1], (long long)part->idx[j]);
            seen[part->idx[j]]++;
        }
        for (uint32_t k = 0; k < d->files; k++) {
            if (part->failed[k] && !mine[k])
                SL_FAIL("range [%llu, %llu) recorded sample %u of another range", (ull)cuts[i], (ull)cuts[i + 1], k);
            failed[k] += part->failed[k];
        }
    }
    for (uint32_t k = 0; k < d->files; k++) {
        int bad = d->kind[k] != FX_GOOD;
        if (seen[k] != (bad ? 0u : 1u) || failed[k] != (bad ? 1u : 0u))
            SL_FAIL("sample %u (%s): delivered %u, recorded %u", k, bad ? "bad" : "good", seen[k], failed[k]);
    }
    /* 2 ranks share [3, 20): 17 positions, 9 each (position 3 twice), in 3
     * batches each whatever their bad samples (a rank pads for each one) */
    uint32_t seen2[MAXN] = {0};
    uint64_t padded = 0, extra = 0;
    for (uint32_t r = 0; r < 2; r++) {
        sl_config c;
        base_cfg(&c, d->root, r, 2);
        c.order_begin = 3, c.order_end = 20;
        sl_loader *ld = fx_open(&c);
        CHECK_EQ(sl_loader_num_samples(ld), 9);
        CHECK_EQ(sl_loader_len(ld), 3);
        sl_loader_destroy(ld);
        run_seq(&c, 1, part);
        CHECK_EQ(part->batches, 3);
        CHECK_EQ(part->n, 9);
        for (uint32_t j = 0; j < part->n; j++) seen2[part->idx[j]]++;
        for (uint32_t k = 0; k < d->files; k++) padded += part->failed[k];
    }
    CHECK(padded > 0);
    for (uint64_t p = 0; p < d->files; p++) {
        uint32_t k = perm[p];
        int bad = d->kind[k] != FX_GOOD, in = p >= 3 && p < 20;
        uint32_t want = bad || !in ? 0 : 1 + (p == 3); /* entry 17 wraps to position 3 */
        if (seen2[k] < want || (want == 0 && seen2[k]))
            SL_FAIL("shared range: sample %u at position %llu delivered %u times, expected %u", k, (ull)p, seen2[k],
                    want);
        extra += seen2[k] - want;
    }
    CHECK_EQ(extra, padded);
    free(part), free(d);
}

/* Range loaders' states, merged, resume on another world of the range
 * (sharing what is left of it), not on a loader of another range. */
TEST(order_range_states) {
    fx_dataset *d = fx_new(50, 4, 48, 120);
    tally *t = calloc(1, sizeof *t);
    run a[2], f[3];
    sl_config c;
    base_cfg(&c, d->root, 0, 1);
    c.order_begin = 10, c.order_end = 40;
    run_world(&c, 2, NULL, 2, t, a);
    for (uint32_t r = 0; r < 2; r++) {
        CHECK_EQ(a[r].st.span_begin, 10);
        CHECK_EQ(a[r].st.span_end, 40);
    }
    uint32_t gone[MAXN], perm[MAXN];
    sl_state m = merge(a, 2, gone);
    CHECK(m.span_begin >= 22 && m.span_end <= 40);
    /* 3 ranks of the range share what the 2 left of it */
    run_world(&c, 3, &m, UINT64_MAX, t, f);
    for (uint32_t r = 0; r < 3; r++) {
        CHECK(f[r].ended);
        CHECK_EQ(f[r].st.span_begin, 10); /* the next epoch: the range again */
    }
    /* exactly: each position of the range tried once, plus the 3-rank
     * resume's wrap padding; extra deliveries pad for the bad samples */
    permutation(d->files, 11, 0, perm);
    sl_state whole = a[0].st;
    whole.span_begin = 10, whole.span_end = 40, whole.gone_count = 0;
    count_padding(t, &whole, d->files, perm, 2, 3, a, 0);
    count_padding(t, &m, d->files, perm, 3, 3, f, 1);
    uint64_t extra = 0;
    for (uint64_t p = 0; p < d->files; p++) {
        uint32_t k = perm[p];
        int bad = d->kind[k] != FX_GOOD, in = p >= 10 && p < 40;
        uint32_t want = in ? 1 + t->want[k] : 0, got = bad ? t->failed[k] : t->seen[k];
        if (got < want || (bad && got != want) || (!in && (t->seen[k] || t->failed[k])))
            SL_FAIL("position %llu (sample %u): tried %u times, expected %u", (ull)p, k, got, want);
        if (!bad) extra += got - want;
    }
    CHECK_EQ(extra, t->padded);
    /* a loader of another range refuses it */
    base_cfg(&c, d->root, 0, 1);
    c.order_begin = 30, c.order_end = 50;
    sl_loader *ld = fx_open(&c);
    CHECK_EQ(sl_loader_set_state(ld, &m), SL_ESTATE);
    sl_loader_destroy(ld);
    free(t), free(d);
}

TEST(order_range_config_checks) {
    fx_dataset *d = fx_new(12, 0, 48, 100);
    sl_config c;
    char err[512];
    base_cfg(&c, d->root, 0, 1);
    c.order_begin = 5, c.order_end = 5;
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "order range [5, 5) is empty");
    c.order_begin = 5, c.order_end = 13;
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "not inside the dataset's order of 12 samples");
    c.order_begin = 3, c.order_end = 0;
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EINVAL);
    base_cfg(&c, d->root, 0, 4);
    c.drop_last = 1;
    c.order_begin = 5, c.order_end = 8;
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EEMPTY);
    CHECK_STR_CONTAINS(err, "leaves rank 0 of 4 nothing");
    /* the plan sizes the range */
    base_cfg(&c, d->root, 0, 1);
    c.order_begin = 2, c.order_end = 9;
    sl_plan p;
    CHECK_OK(sl_loader_plan(&c, &p, err, sizeof err));
    CHECK_EQ(p.samples_per_rank, 7);
    CHECK_EQ(p.batches, 3);
    CHECK_EQ(p.dataset_size, 12);
    free(d);
}

/* ---- padding for bad samples (world_size > 1) ------------------------------------------ */

/* Checksums of the next `want` batches (epoch ends passed over). */
static void take_sums(sl_loader *ld, uint32_t want, uint64_t *sums, uint32_t *lens) {
    for (uint32_t n = 0; n < want;) {
        sl_batch *b;
        int rc = sl_loader_next(ld, &b);
        if (rc == SL_EEND) continue;
        CHECK_OK(rc);
        sums[n] = sl_batch_checksum(b);
        if (lens) lens[n] = sl_batch_len(b);
        n++;
        sl_loader_release(ld, b);
    }
}

/* Ranks with many bad files: each takes the same batches of the same sizes
 * (its share's), padding once its tail is used up; a state saved after any
 * batch, pads under way included, resumes that rank exactly (with another
 * worker count), into the next epoch too. Checksums only: with decode AUTO
 * on a GPU host the images are device memory (the checksums cover them). */
static void padding_case(int decode) {
    fx_dataset *d = fx_new(26, 14, 48, 120); /* 40 files: 14 a rank, batches of 3 3 3 3 2 */
    uint64_t padded_states = 0;
    for (uint32_t r = 0; r < 3; r++) {
        sl_config c;
        base_cfg(&c, d->root, r, 3);
        c.flags = SL_FLAG_CHECKSUM;
        c.max_error_rate = 1;
        c.decode = decode;
        uint64_t sums[10], got[10];
        uint32_t lens[10];
        sl_loader *ld = fx_open(&c);
        take_sums(ld, 10, sums, lens);
        sl_batch *b;
        CHECK_EQ(sl_loader_next(ld, &b), SL_EEND);
        sl_loader_destroy(ld);
        for (uint32_t k = 0; k < 10; k++) CHECK_EQ(lens[k], k % 5 == 4 ? 2 : 3);
        for (uint32_t k = 0; k < 10; k++) {
            c.workers = 2;
            ld = fx_open(&c);
            take_sums(ld, k, got, NULL);
            sl_state st;
            CHECK_OK(sl_loader_get_state(ld, &st));
            padded_states += st.pad > 0;
            sl_loader_destroy(ld);
            c.workers = 1 + k % 3;
            ld = fx_open(&c);
            CHECK_OK(sl_loader_set_state(ld, &st));
            take_sums(ld, 10 - k, got, NULL);
            for (uint32_t i = 0; i < 10 - k; i++)
                if (got[i] != sums[k + i])
                    SL_FAIL("rank %u resumed after %u batches (tail %llu pad %llu): batch %u differs", r, k,
                            (ull)st.tail, (ull)st.pad, k + i);
            CHECK_EQ(sl_loader_next(ld, &b), SL_EEND);
            sl_loader_destroy(ld);
        }
    }
    CHECK(padded_states > 0); /* states were saved while ranks padded */
    free(d);
}

TEST(padding_ranks_resume_exactly) { padding_case(SL_DECODE_CPU); }
/* The GPU engine where the machine has one (the CPU workers elsewhere). */
TEST(padding_ranks_resume_exactly_decode_auto) { padding_case(SL_DECODE_AUTO); }
