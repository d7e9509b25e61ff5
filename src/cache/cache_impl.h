/*
 * The cache's private structures, shared by cache.c (the policy and the
 * private cache) and shm.c (the node cache's segment, its blocks, its
 * processes and its recovery). See cache.h for the design.
 *
 * One region holds the whole index: for a private cache one budgeted
 * allocation, for a node cache the head of the /dev/shm segment (the
 * value blocks follow it). Everything in it is addressed by offsets and
 * indices, never pointers, so every process may map it anywhere:
 *
 *   header | key table: keys x u32 record (NONE: absent)
 *          | records: max_entries x sl__crec | heap: max_entries x u32
 *          | free records: max_entries x u32 (a stack)
 *   shared only:
 *          | block links: nblocks x u32 (next block of a chain; free
 *            blocks hold BLK_WARM or BLK_COLD) | warm and cold free-block
 *            stacks: nblocks x u32 each | process table: procs x sl__cproc
 *          | blocks: nblocks x block_size (aligned to the block size)
 *
 * Invariants (mu held to read or write any of it; the counters are
 * atomics, read without it):
 *  - key table[k] == r  <=>  records[r].key == k and r is WRITING or READY.
 *  - READY records are exactly the heap's members; heap_pos is the
 *    position; the heap is a max-heap on next_use.
 *  - charged = sum of charge over WRITING, READY and DOOMED records <=
 *    capacity, except after a shrink until the pinned DOOMED go.
 *  - A record's value (loc, size) never changes between its reservation
 *    and its freeing; a pinned record (pins > 0) is never freed: eviction
 *    makes it DOOMED (out of the key table and the heap), the last
 *    release frees it.
 *  - Shared: pins = the number of live process-table entries naming the
 *    record; a WRITING record names its writer's process slot (owner).
 */
#ifndef SL_CACHE_IMPL_H
#define SL_CACHE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/cache.h"

#define SL_CACHE_MAGIC 0x31656863616373ull /* "scache1" */
#define SL_CACHE_VERSION 1
#define SL_CACHE_PROCS 64   /* processes a node cache admits */
#define SL_CACHE_PINS 512   /* pins one process may hold at once (one per thread in a lookup) */
#define SL_NONE UINT32_MAX
#define BLK_END 0xFFFFFFFFu  /* last block of a chain */
#define BLK_WARM 0xFFFFFFFEu /* free, its page resident */
#define BLK_COLD 0xFFFFFFFDu /* free, punched out of /dev/shm: fallocate before use */
#define SL_CACHE_MAX_BLOCKS 0xFFFFFFF0ull

enum { REC_FREE = 0, REC_WRITING, REC_READY, REC_DOOMED };

typedef struct sl__crec {
    uint64_t next_use; /* READY: time of the next use (heap key) */
    uint64_t loc;      /* private: the value's address; shared: its first block (BLK_END if empty) */
    uint64_t size;     /* value bytes */
    uint64_t charge;   /* bytes counted against capacity */
    uint32_t key;
    uint32_t heap_pos;
    uint32_t pins;
    uint32_t state;    /* REC_* */
    uint32_t owner;    /* WRITING in a node cache: the writer's process slot */
    uint32_t pad;
} sl__crec;

typedef struct sl__cproc {
    int32_t pid;        /* 0: slot free */
    uint32_t npins;     /* used entries of pin[] are those != SL_NONE */
    uint64_t start;     /* the process's start time (/proc/PID/stat), against PID reuse */
    uint32_t pin[SL_CACHE_PINS]; /* records pinned by this process, SL_NONE for none */
} sl__cproc;

typedef struct sl__chdr {
    _Atomic uint64_t magic;  /* SL_CACHE_MAGIC once initialized: stored last */
    uint32_t version, crec_size, cproc_size, shared;
    uint64_t region_bytes;   /* private: the index; shared: the whole segment */
    uint64_t total_capacity; /* opts.capacity */
    uint32_t keys, max_entries, block_size, procs;
    uint64_t nblocks;
    uint64_t index_bytes;
    uint64_t off_keys, off_recs, off_heap, off_frec, off_links, off_warm, off_cold, off_procs, off_blocks;
    /* mu protects everything below up to the counters */
    pthread_mutex_t mu;
    uint64_t cap_max, capacity, charged;
    uint32_t entries, heap_len, nfrec, pad;
    uint64_t nwarm, ncold;
    uint64_t epoch_len;
    _Atomic uint64_t refresh_epoch; /* next uses refreshed for this epoch (SL_CACHE_NEVER: none yet);
                                       written under mu, read without it */
    _Atomic uint64_t hits, misses, admitted, refused, evictions, storage_read, recoveries, reaped;
} sl__chdr;

struct sl__cache {
    sl__budget *b;
    sl__chdr *h;
    sl__next_use_fn next_use;
    void *ctx;
    int shared;
    int fd;                 /* shared: the segment, flock(LOCK_SH) held for life */
    uint64_t map_len;       /* shared: bytes mapped */
    uint32_t proc;          /* shared: this process's slot */
    _Atomic uint64_t calls; /* inserts, for periodic reaping */
    char name[64];
};

/* ---- region access -------------------------------------------------------- */
static inline uint32_t *sl__ckeys(sl__chdr *h) { return (uint32_t *)((char *)h + h->off_keys); }
static inline sl__crec *sl__crecs(sl__chdr *h) { return (sl__crec *)((char *)h + h->off_recs); }
static inline uint32_t *sl__cheap(sl__chdr *h) { return (uint32_t *)((char *)h + h->off_heap); }
static inline uint32_t *sl__cfrec(sl__chdr *h) { return (uint32_t *)((char *)h + h->off_frec); }
static inline uint32_t *sl__clinks(sl__chdr *h) { return (uint32_t *)((char *)h + h->off_links); }
static inline uint32_t *sl__cwarm(sl__chdr *h) { return (uint32_t *)((char *)h + h->off_warm); }
static inline uint32_t *sl__ccold(sl__chdr *h) { return (uint32_t *)((char *)h + h->off_cold); }
static inline sl__cproc *sl__cprocs(sl__chdr *h) { return (sl__cproc *)((char *)h + h->off_procs); }
static inline uint8_t *sl__cblock(sl__chdr *h, uint64_t blk) {
    return (uint8_t *)h + h->off_blocks + blk * h->block_size;
}

/* Offsets and sizes of a region for these parameters into h (not yet
 * initialized otherwise). SL_EOVERFLOW if they do not fit 64 bits. */
int sl__cache_layout(sl__chdr *h, uint32_t keys, uint32_t max_entries, uint64_t nblocks, uint32_t block_size,
                     int shared);
/* Clear the index to empty (every record free, every block warm). */
void sl__cache_format(sl__chdr *h);

/* ---- the policy (cache.c), mu held ------------------------------------------ */
void sl__cache_heap_build(sl__chdr *h);
/* Free r's value (blocks or allocation) and the record. */
void sl__cache_rec_free(sl__cache *c, uint32_t r);
/* Lock mu; after a holder died, rebuild the index first. */
void sl__cache_lock(sl__cache *c);
void sl__cache_unlock(sl__cache *c);

/* ---- the node cache (shm.c) ------------------------------------------------- */
/* Open or create opts->shm_name and attach this process (c->h, fd, proc
 * set). Errors as sl__cache_create. */
int sl__shm_attach(sl__cache *c, const sl__cache_opts *o, uint32_t entries, uint64_t nblocks, uint32_t block_size,
                   char *err, size_t errlen);
void sl__shm_detach(sl__cache *c);
/* Rebuild the index after a process died holding mu (mu held, EOWNERDEAD). */
void sl__shm_recover(sl__cache *c);
/* Free the pins and WRITING records of dead processes; returns how many
 * processes were reaped. mu held. */
uint32_t sl__shm_reap(sl__cache *c);
int sl__shm_owner_dead(sl__cache *c, uint32_t proc);
/* Blocks: take a chain of n blocks (fallocating cold ones first) into
 * *first: 0, or SL_ENOMEM (nothing taken). Give a chain back (warm). */
int sl__shm_blocks_take(sl__cache *c, uint64_t n, uint64_t *first);
void sl__shm_blocks_give(sl__cache *c, uint64_t first);
/* Punch every warm free block out of the segment (after a shrink). */
void sl__shm_punch_free(sl__cache *c);
/* Pin table of this process: record r in a free entry; SL_NONE if full. */
uint32_t sl__shm_pin_add(sl__cache *c, uint32_t r);
void sl__shm_pin_drop(sl__cache *c, uint32_t slot);
/* This process's pin table entry slot still names record r. */
int sl__shm_pin_holds(sl__cache *c, uint32_t slot, uint32_t r);
uint32_t sl__shm_processes(sl__cache *c);

#endif
