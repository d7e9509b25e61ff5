/*
 * The sample cache: dataset sample index -> bytes (the encoded file by
 * default, or a decoded field before random augmentation; opaque here),
 * one copy for every worker thread of a process, or (shared) for every
 * process of a node through a /dev/shm segment.
 *
 * Policy: the order of future uses is known (nextuse.h), so the cache
 * evicts the entry whose next use is farthest (Belady), and admits a
 * newcomer only if it can make room without evicting an entry used as soon
 * as or sooner than the newcomer (if the newcomer's next use is farther
 * than every resident's, it is not admitted). Under fresh random
 * permutations this reaches the best hit rate possible, cache/dataset;
 * LRU gets about (cache/dataset)^2 / 2. Time is the consumer's position in
 * the global order (sl__sampler_time), passed with each call; an entry's
 * next use is recomputed whenever it is used, and every entry's at the
 * first call of each epoch (opts.epoch_len).
 *
 * Memory. capacity covers the values and the index together. Private: the
 * index is one allocation and each value its own, all under SL_MEM_CACHE
 * in the given budget (sl__budget_try: a full budget refuses admission,
 * never waits), so the budget counts exactly what the cache holds. Shared:
 * a segment of capacity bytes in /dev/shm, reserved whole at creation
 * (fallocate, so a full /dev/shm is a clear error at create, never a
 * SIGBUS later), counted once for the node and in no rank's budget; the
 * process-local handle is counted in the rank's budget.
 *
 * Concurrency. One mutex (robust and process-shared for a node cache)
 * protects the index: key table, entry records, the eviction heap, free
 * lists. It is held for O(log entries) steps, never while bytes are
 * copied or anything is decoded: a hit pins the entry under the mutex,
 * the caller copies out without it, then releases the pin. An evicted
 * entry that is pinned leaves the index at once and frees its bytes when
 * the last pin goes. An insert reserves room and a record under the mutex
 * (invisible to lookups: state WRITING), copies the bytes without it, and
 * publishes under it: an entry is visible only once its bytes are
 * complete.
 *
 * Crash safety (shared). A process killed outside the mutex leaves at most
 * WRITING records and pins, both tagged with its process slot: they are
 * reclaimed when a survivor finds the owner dead (at attach, when it
 * meets a dead owner's record, and periodically). Dead means the kernel
 * dropped the slot's lock (shm.c), never a guess from /proc. A
 * process killed inside the mutex leaves it EOWNERDEAD: the next locker
 * rebuilds the whole index from the records (keeping only complete
 * entries with valid block chains, recounting pins from the live
 * processes' pin tables) before marking it consistent. A segment whose
 * users are all gone (no flock held on it) is stale and is unlinked by
 * the next job that starts a node cache.
 *
 * Failures are not cached: the worker inserts only bytes it read (or, for
 * decoded values, only successful decodes). A file whose bytes were
 * cached but fail to decode fails again from the cached bytes, the same
 * way; a failed read is retried from storage on each use. Either way the
 * delivered result for a sample is the same with or without the cache.
 */
#ifndef SL_CACHE_H
#define SL_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "cache/node.h"

typedef struct sl__cache sl__cache;

/* The time of key's next use after now (> now), SL_CACHE_NEVER for none
 * within what is known, or a negative code when now lies past what the
 * oracle holds (the cache then admits nothing and keeps its order).
 * Called with the cache's mutex held: must not call the cache. */
typedef int (*sl__next_use_fn)(void *ctx, uint32_t key, uint64_t now, uint64_t *next);
#define SL_CACHE_NEVER UINT64_MAX

typedef struct sl__cache_opts {
    uint64_t capacity;       /* bytes: values and index together */
    uint32_t keys;           /* key space [0, keys): the dataset size */
    uint32_t max_entries;    /* 0: min(keys, capacity / 1 KiB + 64) */
    uint64_t epoch_len;      /* global positions per epoch (sampler total); 0: no refresh */
    sl__next_use_fn next_use;
    void *ctx;
    const char *shm_name;    /* NULL: private; else the node cache's segment
                                (sl__cache_shm_name), "/name" */
    uint32_t block_size;     /* shared: values are chains of blocks of this
                                many bytes, a power of two, 512..1 MiB (0: 4096) */
} sl__cache_opts;

typedef struct sl__cache_stats {
    uint64_t hits, misses;
    uint64_t admitted;         /* inserts that were cached */
    uint64_t refused;          /* inserts not admitted (policy, room or budget) */
    uint64_t evictions;
    uint64_t bytes;            /* value bytes charged now (blocks or allocations) */
    uint64_t entries;          /* complete entries now */
    uint64_t capacity;         /* value bytes allowed now */
    uint64_t index_bytes;      /* the index: key table, records, heap (private: and the handle) */
    uint64_t budget_bytes;     /* what this handle holds in its budget (private: bytes + index_bytes;
                                  shared: the handle alone) */
    uint64_t storage_bytes_read; /* reported by the workers (sl__cache_note_read) */
    uint64_t recoveries;       /* index rebuilds after a process died holding the mutex */
    uint64_t reaped;           /* dead processes whose pins and writes were reclaimed */
    uint32_t shared;           /* 1: a node cache */
    uint32_t processes;        /* processes attached now (1 for a private cache) */
} sl__cache_stats;

/* A pinned hit: the entry's bytes stay valid and unchanged until
 * sl__cache_release. */
typedef struct sl__cache_ref {
    uint32_t rec;
    uint32_t pin;            /* shared: the slot in this process's pin table */
    uint64_t size;           /* value bytes */
    const void *data;        /* private: the bytes themselves; shared: NULL (use sl__cache_read) */
} sl__cache_ref;

/* Create a private cache, or create or attach to the node cache named
 * opts->shm_name (every process must pass the same capacity, keys,
 * max_entries and block_size: SL_ESTATE otherwise). On success *out owns
 * the handle (sl__cache_destroy). Fails with SL_EINVAL (bad options, or a
 * capacity too small for its index, with the numbers), SL_EBUDGET (the
 * budget cannot hold the private index or the handle), SL_ENOMEM (the
 * system refused memory, or /dev/shm has less free than the segment
 * needs: the sentence names both), SL_ESYS (a system call failed), and
 * then holds nothing. */
int sl__cache_create(sl__budget *b, const sl__cache_opts *opts, sl__cache **out, char *err, size_t errlen);

/* Detach and free the handle; the last process to leave a node cache
 * unlinks its segment. No pin may be held. NULL is ignored. */
void sl__cache_destroy(sl__cache *c);

/* Look key up at time now. 1: a hit, pinned into *ref (release it);
 * 0: a miss (*ref untouched). Never blocks on another thread's copy. */
int sl__cache_lookup(sl__cache *c, uint32_t key, uint64_t now, sl__cache_ref *ref);
/* 1 when key's bytes are cached now (no pin, no count, no next-use
 * update: for read-ahead, which skips what the cache will serve). */
int sl__cache_holds(sl__cache *c, uint32_t key);
/* Copy a pinned hit's ref->size bytes to dst. */
void sl__cache_read(const sl__cache *c, const sl__cache_ref *ref, void *dst);
void sl__cache_release(sl__cache *c, sl__cache_ref *ref);
/* Lookup, read and release in one: 1 and *len = size when a hit fits in
 * cap bytes; 0 on a miss; SL_EOVERFLOW (nothing copied, *len = size) when
 * it does not fit. */
int sl__cache_get(sl__cache *c, uint32_t key, uint64_t now, void *dst, size_t cap, size_t *len);

/* Offer key's bytes, used at time now. 1: cached (a copy; data stays the
 * caller's), 0: not admitted (the policy, no room free of sooner-used
 * entries, the budget, already cached or being cached). Never fails
 * otherwise. */
int sl__cache_insert(sl__cache *c, uint32_t key, uint64_t now, const void *data, size_t len);

/* Set the value bytes allowed (at most what creation allowed): a lower
 * value evicts by the same policy at once (a node cache then punches the
 * freed blocks out of /dev/shm, without holding the node's mutex).
 * SL_EINVAL above the creation size. */
int sl__cache_set_capacity(sl__cache *c, uint64_t value_bytes);

/* Recompute every entry's next use for time now (after a jump in the
 * order: set_epoch, resume). Done by itself at each new epoch. */
void sl__cache_refresh(sl__cache *c, uint64_t now);

/* Count bytes a worker read from storage (for the stats). */
void sl__cache_note_read(sl__cache *c, uint64_t bytes);

void sl__cache_stats_get(const sl__cache *c, sl__cache_stats *out);

/* Tests: called at the named points of an insert or a node cache's
 * shrink, in the calling process (NULL: off). */
enum { SL_CACHE_HOOK_RESERVED = 1, /* inside the mutex, room taken, record not yet WRITING-complete */
       SL_CACHE_HOOK_WRITTEN = 2,  /* bytes copied, mutex not held, not yet published */
       SL_CACHE_HOOK_PUNCHING = 3  /* a node cache's shrink: freed blocks marked, mutex not held, not yet punched */ };
extern void (*sl__cache_test_hook)(int stage);

#endif
