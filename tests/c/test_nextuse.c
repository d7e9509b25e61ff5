/* ctest: tsan */
/*
 * The sampler's next-use answers (sampler.c inverse permutations,
 * nextuse.c the two-epoch oracle) against a brute-force search of the
 * global order; the time of a rank's samples; the budget it counts; and
 * queries racing an advance (TSan). Also the CPU share helper (cpus.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cpus.h"
#include "base/mem.h"
#include "check.h"
#include "pipeline/nextuse.h"
#include "pipeline/sampler.h"

/* The padded global order of epoch e (total entries). */
static uint32_t *global_order(const sl__sampler *s, uint64_t e) {
    sl__sampler one;
    CHECK_OK(sl__sampler_init(&one, s->n, 0, 1, s->shuffle, 0, s->seed));
    uint32_t *perm = malloc(s->n * 4), *g = malloc(s->total * 4);
    CHECK(perm && g);
    sl__sampler_fill(&one, e, perm, NULL);
    for (uint64_t p = 0; p < s->total; p++) g[p] = perm[p % s->n];
    free(perm);
    return g;
}

TEST(inverse_inverts) {
    const uint64_t ns[] = {1, 2, 3, 17, 1000, 65537};
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
        sl__sampler s;
        CHECK_OK(sl__sampler_init(&s, ns[t], 0, 1, 1, 0, 99));
        uint32_t *perm = malloc(ns[t] * 4), *inv = malloc(ns[t] * 4);
        for (uint64_t e = 0; e < 3; e++) {
            sl__sampler_fill(&s, e, perm, NULL);
            CHECK_OK(sl__sampler_inverse(&s, e, inv));
            for (uint64_t p = 0; p < ns[t]; p++) CHECK_EQ(inv[perm[p]], p);
        }
        free(perm), free(inv);
    }
    sl__sampler big = {.n = 1ull << 31, .total = 1ull << 31, .world = 1, .per_rank = 1ull << 31};
    CHECK_EQ(sl__sampler_inverse(&big, 0, NULL), SL_EINVAL); /* needs bit 31 free */
}

/* Rank r's i-th sample sits at time e * total + r + i * world of the
 * global order. */
TEST(rank_time_is_global_position) {
    const uint32_t worlds[] = {1, 2, 3, 8};
    for (int w = 0; w < 4; w++)
        for (uint32_t r = 0; r < worlds[w]; r++) {
            sl__sampler s;
            CHECK_OK(sl__sampler_init(&s, 101, r, worlds[w], 1, 0, 4));
            uint32_t *seq = malloc(s.per_rank * 4), *tmp = malloc((s.total + s.n) * 4);
            for (uint64_t e = 0; e < 2; e++) {
                uint32_t *g = global_order(&s, e);
                sl__sampler_fill(&s, e, seq, tmp);
                for (uint64_t i = 0; i < s.per_rank; i++)
                    CHECK_EQ(seq[i], g[sl__sampler_time(&s, e, i) - e * s.total]);
                free(g);
            }
            free(seq), free(tmp);
        }
}

/* Brute force: the first time after now at which k is used by a rank of
 * [lo, lo+cnt), scanning the held epochs' global orders. */
static uint64_t brute(const sl__sampler *s, uint32_t *const g[2], uint64_t e0, uint32_t k, uint64_t now,
                      uint32_t lo, uint32_t cnt) {
    for (int i = 0; i < 2; i++) {
        uint64_t base = (e0 + i) * s->total;
        for (uint64_t p = 0; p < s->total; p++) {
            uint64_t t = base + p, r = p % s->world;
            if (t > now && g[i][p] == k && r >= lo && r < lo + cnt) return t;
        }
    }
    return SL_NEXTUSE_NEVER;
}

static void check_oracle(uint64_t n, uint32_t world, uint32_t lo, uint32_t cnt, int drop_last) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 28));
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, n, 0, world, 1, drop_last, 31));
    sl__nextuse o;
    CHECK_OK(sl__nextuse_init(&o, &b, &s, lo, cnt));
    for (uint64_t e = 3; e < 5; e++) {
        sl__nextuse_advance(&o, e);
        uint32_t *g[2] = {global_order(&s, e), global_order(&s, e + 1)};
        for (uint64_t now = e * s.total; now < (e + 1) * s.total; now += 1 + now % 3)
            for (uint32_t k = 0; k < n; k += 1 + (uint32_t)(n / 40)) {
                uint64_t got, want = brute(&s, g, e, k, now, lo, cnt);
                CHECK_OK(sl__nextuse_query(&o, k, now, &got));
                if (got != want)
                    SL_FAIL("n %llu world %u ranks [%u,+%u) drop %d: k %u now %llu: %llu, brute force %llu",
                            (unsigned long long)n, world, lo, cnt, drop_last, k, (unsigned long long)now,
                            (unsigned long long)got, (unsigned long long)want);
            }
        free(g[0]), free(g[1]);
    }
    sl__nextuse_fini(&o);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

TEST(next_use_matches_brute_force) {
    check_oracle(50, 1, 0, 1, 0);
    check_oracle(50, 4, 0, 4, 0);  /* a node of every rank: the global order */
    check_oracle(50, 4, 2, 2, 0);  /* the second node of two */
    check_oracle(51, 4, 1, 1, 0);  /* one rank, with padding */
    check_oracle(51, 4, 0, 2, 1);  /* drop_last: the tail is never used */
    check_oracle(3, 8, 0, 8, 0);   /* more ranks than samples: several uses an epoch */
    check_oracle(3, 8, 4, 4, 0);
}

/* Held epochs: nothing before the first advance; past the held epochs,
 * SL_ESTATE; before them, answers from the oldest held on. */
TEST(held_epochs) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, 10, 0, 1, 1, 0, 2));
    sl__nextuse o;
    CHECK_OK(sl__nextuse_init(&o, &b, &s, 0, 1));
    uint64_t t;
    CHECK_EQ(sl__nextuse_query(&o, 0, 0, &t), SL_ESTATE);
    sl__nextuse_advance(&o, 5);
    CHECK_EQ(sl__nextuse_query(&o, 0, 7 * 10, &t), SL_ESTATE); /* epoch 7: not held */
    CHECK_OK(sl__nextuse_query(&o, 0, 6 * 10 + 9, &t));
    CHECK_EQ(t, SL_NEXTUSE_NEVER); /* the last position of the last held epoch */
    CHECK_OK(sl__nextuse_query(&o, 4, 0, &t)); /* epoch 0: from epoch 5 on */
    CHECK(t >= 50 && t < 60);
    CHECK_EQ(sl__nextuse_query(&o, 10, 55, &t), SL_EINVAL); /* no such sample */
    sl__nextuse_advance(&o, 6);                               /* keeps 6, makes 7 */
    CHECK_OK(sl__nextuse_query(&o, 0, 7 * 10, &t));
    sl__nextuse_fini(&o);
    sl__budget_fini(&b);
}

/* Two inverse buffers of 4n bytes, counted under SL_MEM_INDEX; a budget
 * that cannot hold them refuses; bad ranges are refused. */
TEST(budget_and_init_rejects) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 24));
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, 100000, 1, 4, 1, 0, 2));
    sl__nextuse o;
    CHECK_OK(sl__nextuse_init(&o, &b, &s, 0, 4));
    CHECK_EQ(sl__nextuse_bytes(&o), 800000);
    CHECK_EQ(atomic_load(&b.cat[SL_MEM_INDEX]), 2 * sl__alloc_cost(400000));
    sl__nextuse_fini(&o);
    CHECK_EQ(atomic_load(&b.used), 0);
    CHECK_EQ(sl__nextuse_init(&o, &b, &s, 0, 0), SL_EINVAL);
    CHECK_EQ(sl__nextuse_init(&o, &b, &s, 3, 2), SL_EINVAL); /* ranks 3, 4 of 4 */
    CHECK_EQ(sl__nextuse_init(&o, &b, &s, 4, 1), SL_EINVAL);
    sl__budget small;
    CHECK_OK(sl__budget_init(&small, 600000)); /* holds one buffer, not two */
    CHECK_EQ(sl__nextuse_init(&o, &small, &s, 0, 4), SL_EBUDGET);
    CHECK_EQ(atomic_load(&small.used), 0);
    sl__budget_fini(&small);
    sl__budget_fini(&b);
}

/* Queries from 4 threads while the loader's thread advances epoch after
 * epoch: every answer is a held epoch's truth or SL_ESTATE (TSan run). */
typedef struct race {
    sl__nextuse *o;
    sl__sampler *s;
    _Atomic uint64_t epoch;
    _Atomic int stop;
} race;

static void *querier(void *arg) {
    race *r = arg;
    uint64_t n = 0;
    while (!atomic_load(&r->stop)) {
        uint64_t e = atomic_load(&r->epoch), t;
        uint32_t k = (uint32_t)(n++ % r->s->n);
        int rc = sl__nextuse_query(r->o, k, e * r->s->total + n % r->s->total, &t);
        CHECK(rc == 0 || rc == SL_ESTATE);
        if (rc == 0 && t != SL_NEXTUSE_NEVER) CHECK(t > e * r->s->total);
    }
    return NULL;
}

TEST(queries_race_advance) {
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 24));
    sl__sampler s;
    CHECK_OK(sl__sampler_init(&s, 5000, 0, 1, 1, 0, 8));
    sl__nextuse o;
    CHECK_OK(sl__nextuse_init(&o, &b, &s, 0, 1));
    race r = {&o, &s, 0, 0};
    sl__nextuse_advance(&o, 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) CHECK_OK(pthread_create(&th[i], NULL, querier, &r));
    for (uint64_t e = 1; e < 30; e++) {
        sl__nextuse_advance(&o, e);
        atomic_store(&r.epoch, e);
    }
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    sl__nextuse_fini(&o);
    sl__budget_fini(&b);
}

/* This rank's share with the local ranks of env LOCAL_WORLD_SIZE. */
static uint32_t local_share(void) {
    uint32_t cores, node;
    sl__rank_cpus(0, &cores, &node);
    return cores;
}

TEST(cpu_share) {
    CHECK_EQ(sl__cpu_share(16, 0, 1), 16);
    CHECK_EQ(sl__cpu_share(16, 0, 8), 2);
    CHECK_EQ(sl__cpu_share(16, 4, 2), 2);  /* a quota of 4 CPUs over 2 ranks */
    CHECK_EQ(sl__cpu_share(16, 32, 2), 8); /* a quota above the mask changes nothing */
    CHECK_EQ(sl__cpu_share(2, 0, 8), 1);   /* at least one */
    CHECK_EQ(sl__cpu_share(0, 0, 0), 1);
    cpu_set_t set;
    CHECK_OK(sched_getaffinity(0, sizeof set, &set));
    uint32_t mine = (uint32_t)CPU_COUNT(&set);
    unsetenv("LOCAL_WORLD_SIZE");
    uint32_t all = local_share();
    CHECK(all >= 1 && all <= mine);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    CHECK_EQ(local_share(), all / 2 ? all / 2 : 1);
    setenv("LOCAL_WORLD_SIZE", "1000", 1);
    CHECK_EQ(local_share(), 1);
    setenv("LOCAL_WORLD_SIZE", "two", 1); /* not a number: one rank */
    CHECK_EQ(local_share(), all);
    setenv("LOCAL_WORLD_SIZE", "0", 1);
    CHECK_EQ(local_share(), all);
}

/* A rank's CPUs (sl__cpu_plan): the job's CPUs divided by its ranks where
 * they run anywhere, split by demand; a rank pinned to CPUs of its own
 * (the 4-GPU host's bench pinned each of 4 ranks to 16 of 64 CPUs, and
 * each saw 16 node CPUs for 4 ranks: 4 workers) keeps them, divided among
 * the ranks likely to share its mask. */
TEST(cpu_plan_keeps_a_pinned_ranks_cpus) {
    uint32_t cores, node;
    sl__cpu_plan(64, 64, 0, 4, &cores, &node);
    CHECK(cores == 16 && node == 64); /* anywhere: a quarter each, split by demand */
    sl__cpu_plan(16, 64, 0, 4, &cores, &node);
    CHECK(cores == 16 && node == 0); /* pinned to its own 16 */
    sl__cpu_plan(32, 64, 0, 4, &cores, &node);
    CHECK(cores == 16 && node == 0); /* a NUMA node's 32 for two of the four ranks */
    sl__cpu_plan(60, 64, 0, 4, &cores, &node);
    CHECK(cores == 15 && node == 0); /* 4 CPUs kept out of every mask: still four ranks on them */
    sl__cpu_plan(16, 64, 8, 4, &cores, &node);
    CHECK(cores == 2 && node == 0); /* a quota of 8 CPUs for the job's four ranks */
    sl__cpu_plan(64, 64, 8, 4, &cores, &node);
    CHECK(cores == 2 && node == 8);
    sl__cpu_plan(1, 2, 0, 1, &cores, &node);
    CHECK(cores == 1 && node == 0);
    sl__cpu_plan(0, 0, 0, 0, &cores, &node);
    CHECK(cores == 1 && node == 0);
    /* this process, pinned to one of its CPUs in a child (2 local ranks): its own, no split;
     * that child's child, which inherits the pin, shares it by demand */
    cpu_set_t set;
    CHECK_OK(sched_getaffinity(0, sizeof set, &set));
    if (CPU_COUNT(&set) < 2) {
        printf("SKIP: one CPU\n");
        return;
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        uint32_t c2, n2, c1, n1;
        sl__rank_cpus(2, &c2, &n2);
        int first = 0;
        while (!CPU_ISSET(first, &set)) first++;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        if (sched_setaffinity(0, sizeof one, &one)) _exit(3);
        sl__rank_cpus(2, &c1, &n1);
        uint32_t all = (uint32_t)CPU_COUNT(&set);
        /* its own child inherits the one CPU, as the ranks of `taskset -c 0 torchrun` do: the
         * launcher's mask, which the ranks share by demand */
        pid_t g = fork();
        if (g < 0) _exit(4);
        if (g == 0) {
            uint32_t ci, ni;
            sl__rank_cpus(2, &ci, &ni);
            if (ci != 1 || ni != 1) fprintf(stderr, "inherited %u/%u\n", ci, ni);
            _exit(ci == 1 && ni == 1 ? 0 : 1);
        }
        int gst;
        int inherited_ok = waitpid(g, &gst, 0) == g && WIFEXITED(gst) && WEXITSTATUS(gst) == 0;
        /* the first child inherits the test's mask: two ranks anywhere in it (a CPU quota may
         * cap the node's part) */
        int ok = n2 >= 1 && n2 <= all && c2 == (n2 / 2 ? n2 / 2 : 1) && c1 == 1 && n1 == 0 && inherited_ok;
        if (!ok) fprintf(stderr, "anywhere %u/%u, pinned %u/%u of %u\n", c2, n2, c1, n1, all);
        _exit(ok ? 0 : 1);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A CPU quota on a parent of the process's cgroup binds it (the tool a
 * job's scheduler sets: a slice or a job folder, the process in a step or
 * task folder below it). The child here runs in an unlimited folder under
 * one whose quota is a single CPU: its share is 1, where reading only the
 * hierarchy's root (unlimited) gave it every CPU. Needs a writable CPU
 * controller (root, v1 or v2) and two CPUs: skipped where there is none. */
TEST(cpu_quota_of_a_parent_cgroup_binds) {
    cpu_set_t set;
    CHECK_OK(sched_getaffinity(0, sizeof set, &set));
    if (CPU_COUNT(&set) < 2) {
        printf("SKIP: one CPU\n");
        return;
    }
    int v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
    char cg[128], inner[160], path[200];
    snprintf(cg, sizeof cg, "%s/sluice-quota-test-%ld", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/cpu", (long)getpid());
    if (mkdir(cg, 0755) != 0) {
        printf("SKIP: cannot make a CPU cgroup (%s)\n", strerror(errno));
        return;
    }
    int ok = 1;
    if (v2) { /* the child gets the controller from its parent's subtree_control */
        snprintf(path, sizeof path, "%s/cgroup.subtree_control", cg);
        FILE *f = fopen(path, "w");
        ok = f && fputs("+cpu\n", f) >= 0;
        if (f && fclose(f) != 0) ok = 0;
    }
    snprintf(path, sizeof path, "%s/%s", cg, v2 ? "cpu.max" : "cpu.cfs_quota_us");
    FILE *f = ok ? fopen(path, "w") : NULL;
    ok = f && fputs(v2 ? "100000 100000\n" : "100000\n", f) >= 0; /* v1's period is 100000 by default */
    if (f && fclose(f) != 0) ok = 0;
    snprintf(inner, sizeof inner, "%s/inner", cg);
    if (!ok || mkdir(inner, 0755) != 0) {
        rmdir(cg);
        printf("SKIP: cannot set a CPU quota in %s\n", cg);
        return;
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        snprintf(path, sizeof path, "%s/cgroup.procs", inner);
        FILE *p = fopen(path, "w");
        if (!p || fprintf(p, "%ld\n", (long)getpid()) <= 0 || fclose(p) != 0) _exit(3);
        uint32_t cores, node;
        sl__rank_cpus(1, &cores, &node);
        if (cores != 1) fprintf(stderr, "a 1-CPU quota on the parent: %u cores\n", cores);
        _exit(cores == 1 ? 0 : 1);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    rmdir(inner);
    rmdir(cg);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Spans: an order range every epoch, and one epoch resumed over what an
 * earlier world left. Time is the entry of the epoch's span; the brute
 * force walks the spans' entries (padded by wrapping). */
static uint64_t brute_span(const sl__sampler *s, uint64_t e0, uint32_t k, uint64_t now, uint32_t lo, uint32_t cnt) {
    for (uint64_t e = e0; e < e0 + 2; e++) {
        const sl__span *sp = sl__sampler_span(s, e);
        sl__sampler one;
        CHECK_OK(sl__sampler_init(&one, s->n, 0, 1, s->shuffle, 0, s->seed));
        uint32_t *perm = malloc(s->n * 4), *L = malloc(s->n * 4);
        CHECK(perm && L);
        sl__sampler_fill(&one, e, perm, NULL);
        uint64_t m = 0, g = 0;
        for (uint64_t p = sp->lo; p < sp->hi; p++) {
            if (g < sp->ngone && sp->gone[g] == p) g++;
            else L[m++] = (uint32_t)p;
        }
        uint64_t found = SL_NEXTUSE_NEVER;
        for (uint64_t j = 0; j < sp->total && found == SL_NEXTUSE_NEVER; j++) {
            uint64_t t = e * s->total + j, r = j % s->world;
            if (t > now && perm[L[j % m]] == k && r >= lo && r < lo + cnt) found = t;
        }
        free(perm), free(L);
        if (found != SL_NEXTUSE_NEVER) return found;
    }
    return SL_NEXTUSE_NEVER;
}

TEST(next_use_in_spans) {
    const uint32_t gone[] = {12, 13, 20, 31};
    for (int drop_last = 0; drop_last < 2; drop_last++)
        for (uint32_t world = 1; world <= 4; world += 3) {
            sl__budget b;
            CHECK_OK(sl__budget_init(&b, 1 << 28));
            sl__sampler s;
            CHECK_OK(sl__sampler_init(&s, 60, 0, world, 1, drop_last, 17));
            CHECK_OK(sl__sampler_range(&s, 5, 45));
            sl__span sp;
            CHECK_OK(sl__span_shape(&sp, 11, 38, gone, 4, world, drop_last));
            sl__sampler_resume(&s, 3, &sp);
            sl__nextuse o;
            CHECK_OK(sl__nextuse_init(&o, &b, &s, 0, world > 1 ? 2 : 1));
            for (uint64_t e = 2; e < 4; e++) {
                sl__nextuse_advance(&o, e);
                for (uint64_t now = e * s.total; now < (e + 1) * s.total; now++)
                    for (uint32_t k = 0; k < 60; k++) {
                        uint64_t got, want = brute_span(&s, e, k, now, 0, world > 1 ? 2 : 1);
                        CHECK_OK(sl__nextuse_query(&o, k, now, &got));
                        if (got != want)
                            SL_FAIL("world %u drop %d: k %u now %llu: %llu, brute force %llu", world, drop_last, k,
                                    (unsigned long long)now, (unsigned long long)got, (unsigned long long)want);
                    }
            }
            sl__nextuse_fini(&o);
            sl__budget_fini(&b);
        }
}
