/*
 * cache_io: the sample cache on real files, without the loader. R ranks
 * (forked processes of one node, in step epoch by epoch), T reader
 * threads each, E shuffled epochs over the files listed in LIST (the
 * sampler's order: the same permutation for every rank, rank r taking
 * positions r, r+R, ...). Each sample is taken from the cache or read
 * from storage and, with --decode, decoded by the train preset at 224.
 *
 *   none    every sample read from storage
 *   sluice  the sample cache (src/cache): private with one rank, one node
 *           cache in /dev/shm shared by the ranks with more
 *   lru     an LRU of the same total size: one per rank, cache / R each
 *
 * One JSON line per epoch: seconds, samples, hits, bytes the loop asked
 * for, and storage bytes (/proc/self/io read_bytes summed over the ranks:
 * what reached the device, page cache hits excluded). --drop evicts each
 * file from the page cache after reading it (posix_fadvise DONTNEED), as
 * if the dataset were far larger than memory; or run it inside a memory
 * cgroup (bench/cache_bench.sh).
 *
 *   cc -O2 -Iinclude -Isrc bench/cache_io.c build/libsluice.a -ljpeg -lspng -lpthread -lm -o build/cache_io
 *   build/cache_io LIST --policy sluice --cache 2G --ranks 2 --threads 8 --epochs 4 [--decode] [--drop]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"
#include "cache/cache.h"
#include "pipeline/nextuse.h"
#include "pipeline/sampler.h"
#include "sluice.h"

enum { NONE, SLUICE, LRU };

typedef struct opts {
    const char *list;
    int policy, ranks, threads, epochs, decode, drop;
    uint64_t cache, seed;
    char shm[96]; /* the node cache's name, made once before the ranks fork */
} opts;

/* Shared by the ranks: a barrier and the epoch's sums. */
typedef struct shared {
    pthread_barrier_t bar;
    _Atomic uint64_t samples, hits, asked, storage;
} shared;

/* ---- an LRU of a byte capacity (one lock; the reference, not a design) ---- */
typedef struct lru {
    pthread_mutex_t mu;
    uint64_t cap, used;
    uint32_t n, head, tail;
    uint32_t *prev, *next;
    uint8_t **val;
    size_t *len;
} lru;

static void lru_init(lru *l, uint32_t n, uint64_t cap) {
    pthread_mutex_init(&l->mu, NULL);
    l->cap = cap, l->used = 0, l->n = n, l->head = l->tail = n;
    l->prev = calloc(n, 4), l->next = calloc(n, 4), l->val = calloc(n, sizeof *l->val), l->len = calloc(n, sizeof *l->len);
    if (!l->prev || !l->next || !l->val || !l->len) abort();
}

static void lru_unlink(lru *l, uint32_t k) {
    if (l->prev[k] != l->n) l->next[l->prev[k]] = l->next[k];
    else l->head = l->next[k];
    if (l->next[k] != l->n) l->prev[l->next[k]] = l->prev[k];
    else l->tail = l->prev[k];
}

static void lru_front(lru *l, uint32_t k) {
    l->prev[k] = l->n, l->next[k] = l->head;
    if (l->head != l->n) l->prev[l->head] = k;
    l->head = k;
    if (l->tail == l->n) l->tail = k;
}

static size_t lru_get(lru *l, uint32_t k, uint8_t *dst, size_t cap) {
    pthread_mutex_lock(&l->mu);
    size_t n = 0;
    if (l->val[k] && l->len[k] <= cap) {
        lru_unlink(l, k);
        lru_front(l, k);
        memcpy(dst, l->val[k], n = l->len[k]);
    }
    pthread_mutex_unlock(&l->mu);
    return n;
}

static void lru_put(lru *l, uint32_t k, const uint8_t *src, size_t n) {
    if (n > l->cap || !n) return;
    uint8_t *copy = malloc(n);
    if (!copy) return;
    memcpy(copy, src, n);
    pthread_mutex_lock(&l->mu);
    if (l->val[k]) {
        pthread_mutex_unlock(&l->mu);
        free(copy);
        return;
    }
    while (l->used + n > l->cap) {
        uint32_t v = l->tail;
        lru_unlink(l, v);
        l->used -= l->len[v];
        free(l->val[v]);
        l->val[v] = NULL;
    }
    l->val[k] = copy, l->len[k] = n, l->used += n;
    lru_front(l, k);
    pthread_mutex_unlock(&l->mu);
}

/* ---- a rank --------------------------------------------------------------- */
typedef struct rank {
    const opts *o;
    shared *sh;
    char **paths;
    uint32_t n;
    sl__sampler s;
    sl__nextuse nu;
    uint32_t *seq;
    uint64_t epoch;
    _Atomic uint64_t next;
    sl__cache *cache;
    lru lru;
} rank;

static uint64_t storage_read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* Read path into *buf (grown as needed): its size, or 0 on failure. */
static size_t read_file(const char *path, uint8_t **buf, size_t *cap, int drop) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (n > *cap) {
        free(*buf);
        *cap = n * 2;
        *buf = malloc(*cap);
        if (!*buf) abort();
    }
    while (got < n) {
        ssize_t r = read(fd, *buf + got, n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (drop) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return got;
}

static void *reader(void *arg) {
    rank *rk = arg;
    const opts *o = rk->o;
    size_t cap = 1 << 20;
    uint8_t *buf = malloc(cap), *out = malloc(3 * 224 * 224);
    uint64_t samples = 0, hits = 0, asked = 0;
    for (uint64_t i; (i = atomic_fetch_add(&rk->next, 1)) < rk->s.per_rank;) {
        uint32_t k = rk->seq[i];
        uint64_t t = sl__sampler_time(&rk->s, rk->epoch, i);
        size_t len = 0;
        int hit = 0;
        if (o->policy == SLUICE) hit = sl__cache_get(rk->cache, k, t, buf, cap, &len) == 1;
        else if (o->policy == LRU) hit = (len = lru_get(&rk->lru, k, buf, cap)) > 0;
        if (!hit) {
            len = read_file(rk->paths[k], &buf, &cap, o->drop);
            if (o->policy == SLUICE && len) sl__cache_insert(rk->cache, k, t, buf, len);
            if (o->policy == LRU) lru_put(&rk->lru, k, buf, len);
        }
        if (o->decode && len) {
            sl_decode_opts d;
            sl_decode_opts_init(&d);
            d.preset = SL_PRESET_TRAIN, d.size = 224, d.seed = o->seed, d.epoch = rk->epoch, d.index = k;
            sl_image_decode(buf, len, &d, out, 3 * 224 * 224, NULL, 0);
        }
        samples++, hits += hit, asked += len;
    }
    atomic_fetch_add(&rk->sh->samples, samples);
    atomic_fetch_add(&rk->sh->hits, hits);
    atomic_fetch_add(&rk->sh->asked, asked);
    free(buf), free(out);
    return NULL;
}

static int open_cache(rank *rk, int r) {
    const opts *o = rk->o;
    if (o->policy == LRU) lru_init(&rk->lru, rk->n, o->cache / (uint64_t)o->ranks);
    if (o->policy != SLUICE) return 0;
    static sl__budget b;
    sl__budget_init(&b, (uint64_t)1 << 50); /* the bench measures the cache, not the budget */
    char err[300];
    sl__cache_opts co = {.capacity = o->cache, .keys = rk->n, .epoch_len = rk->s.total, .next_use = sl__nextuse_fn,
                         .ctx = &rk->nu, .shm_name = o->ranks > 1 ? o->shm : NULL};
    if (sl__cache_create(&b, &co, &rk->cache, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", r, err);
        return 1;
    }
    return 0;
}

static void report(const opts *o, shared *sh, uint64_t e, double sec, sl__cache *c) {
    uint64_t n = atomic_exchange(&sh->samples, 0), hits = atomic_exchange(&sh->hits, 0);
    uint64_t asked = atomic_exchange(&sh->asked, 0), storage = atomic_exchange(&sh->storage, 0);
    static const char *names[] = {"none", "sluice", "lru"};
    printf("{\"policy\": \"%s\", \"ranks\": %d, \"threads\": %d, \"cache_bytes\": %llu, \"decode\": %d, "
           "\"epoch\": %llu, \"seconds\": %.3f, \"samples\": %llu, \"samples_per_s\": %.1f, \"hits\": %llu, "
           "\"hit_rate\": %.4f, \"asked_bytes\": %llu, \"storage_bytes\": %llu",
           names[o->policy], o->ranks, o->threads, (unsigned long long)o->cache, o->decode, (unsigned long long)e, sec,
           (unsigned long long)n, n / sec, (unsigned long long)hits, n ? (double)hits / n : 0.0,
           (unsigned long long)asked, (unsigned long long)storage);
    if (c) {
        sl__cache_stats st;
        sl__cache_stats_get(c, &st);
        printf(", \"cache_held\": %llu, \"cache_capacity\": %llu, \"evictions\": %llu", (unsigned long long)st.bytes,
               (unsigned long long)st.capacity, (unsigned long long)st.evictions);
    }
    printf("}\n");
    fflush(stdout);
}

static int rank_main(const opts *o, shared *sh, char **paths, uint32_t n, int r) {
    rank rk = {.o = o, .sh = sh, .paths = paths, .n = n};
    static sl__budget ob;
    sl__budget_init(&ob, (uint64_t)1 << 50);
    if (sl__sampler_init(&rk.s, n, (uint32_t)r, (uint32_t)o->ranks, 1, 0, o->seed) ||
        sl__nextuse_init(&rk.nu, &ob, &rk.s, 0, (uint32_t)o->ranks) || open_cache(&rk, r))
        return 1;
    rk.seq = malloc(rk.s.per_rank * 4);
    uint32_t *tmp = malloc((rk.s.total + n) * 4);
    pthread_t *th = calloc((size_t)o->threads, sizeof *th);
    for (int e = 0; e < o->epochs; e++) {
        sl__nextuse_advance(&rk.nu, (uint64_t)e);
        sl__sampler_fill(&rk.s, (uint64_t)e, rk.seq, tmp);
        rk.epoch = (uint64_t)e;
        atomic_store(&rk.next, 0);
        pthread_barrier_wait(&sh->bar);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t io0 = storage_read_bytes();
        for (int i = 0; i < o->threads; i++) pthread_create(&th[i], NULL, reader, &rk);
        for (int i = 0; i < o->threads; i++) pthread_join(th[i], NULL);
        atomic_fetch_add(&sh->storage, storage_read_bytes() - io0);
        pthread_barrier_wait(&sh->bar);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (r == 0) report(o, sh, (uint64_t)e, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, rk.cache);
    }
    pthread_barrier_wait(&sh->bar); /* rank 0 reported before anyone detaches */
    sl__cache_destroy(rk.cache);
    sl__nextuse_fini(&rk.nu);
    return 0;
}

static char **read_list(const char *list, uint32_t *n) {
    FILE *f = fopen(list, "r");
    if (!f) return NULL;
    size_t cap = 1024, len = 0;
    char **p = malloc(cap * sizeof *p), line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) continue;
        if (len == cap) p = realloc(p, (cap *= 2) * sizeof *p);
        p[len++] = strdup(line);
    }
    fclose(f);
    *n = (uint32_t)len;
    return p;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.policy = SLUICE, .ranks = 1, .threads = 8, .epochs = 4, .cache = 1ull << 30};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--decode")) o->decode = 1;
        else if (!strcmp(a, "--drop")) o->drop = 1;
        else if (!v && a[0] == '-') return 1;
        else if (!strcmp(a, "--policy")) o->policy = !strcmp(v, "none") ? NONE : !strcmp(v, "lru") ? LRU : SLUICE, i++;
        else if (!strcmp(a, "--cache")) sl_parse_size(v, &o->cache), i++;
        else if (!strcmp(a, "--ranks")) o->ranks = atoi(v), i++;
        else if (!strcmp(a, "--threads")) o->threads = atoi(v), i++;
        else if (!strcmp(a, "--epochs")) o->epochs = atoi(v), i++;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10), i++;
        else if (a[0] != '-') o->list = a;
        else return 1;
    }
    return !o->list || o->ranks < 1 || o->ranks > 64 || o->threads < 1 || o->epochs < 1;
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: cache_io LIST [--policy none|sluice|lru] [--cache 1G] [--ranks R] [--threads T]\n"
                        "                [--epochs E] [--seed S] [--decode] [--drop]\n");
        return 2;
    }
    uint32_t n = 0;
    char **paths = read_list(o.list, &n);
    if (!paths || !n) {
        fprintf(stderr, "cache_io: no files listed in %s\n", o.list);
        return 1;
    }
    char err[300];
    if (o.policy == SLUICE && o.ranks > 1 && sl__cache_shm_name(o.shm, sizeof o.shm, o.list, o.seed, "cache_io", err, sizeof err)) {
        fprintf(stderr, "cache_io: %s\n", err);
        return 1;
    }
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->bar, &ba, (unsigned)o.ranks);
    pid_t pid[64];
    for (int r = 1; r < o.ranks; r++)
        if ((pid[r] = fork()) == 0) _exit(rank_main(&o, sh, paths, n, r));
    int rc = rank_main(&o, sh, paths, n, 0);
    for (int r = 1; r < o.ranks; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) rc = 1;
    }
    return rc;
}
