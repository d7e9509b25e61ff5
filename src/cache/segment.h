/*
 * The cache's region: its layout, its invariants, and every operation
 * that touches it below the policy. For a private cache the region is the
 * index, one budgeted allocation; for a node cache it is the whole
 * /dev/shm segment (index, value blocks, process table). cache.c (the
 * policy and the private cache) reaches the region only through this
 * header and index.h; index.c (layout, formatting, the eviction heap: pure functions
 * of the region) and shm.c (records and the lock, and the segment:
 * attach, processes, blocks, recovery) implement it and never call the
 * policy; shm.c uses index.c, never the reverse.
 *
 * Everything in the region is addressed by offsets and indices, never
 * pointers, so every process may map it anywhere:
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
 *  - Shared: a block is in exactly one record's chain, on one free stack
 *    (warm: its page resident; cold: maybe punched, fallocated before
 *    use), or on one process's punch chain (sl__cproc.punch).
 */
#ifndef SL_CACHE_SEGMENT_H
#define SL_CACHE_SEGMENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SL_CACHE_MAGIC 0x31656863616373ull /* "scache1" */
#define SL_CACHE_VERSION 2 /* 2: liveness by OFD locks on the slots, not pids */
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

/* A process slot. Its owner holds an OFD lock on the slot's lock byte
 * (shm.c) from before it marks the slot until after it clears it: the
 * slot is live exactly while that lock is held. */
typedef struct sl__cproc {
    int32_t pid;        /* 0: slot free; else the owner's pid in its own PID namespace, for display
                           (sluice top), never to judge whether it lives */
    uint32_t npins;     /* used entries of pin[] are those != SL_NONE */
    uint32_t punch;     /* this process is punching a chain of free blocks out of /dev/shm: its
                           first block + 1 (0: none; see sl__seg_punch_mark) */
    uint32_t pad;
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

/* A process's view of a region. Private: h alone. Shared: the segment's
 * file, held open (with flock(LOCK_SH)) for as long as it is attached. */
typedef struct sl__seg {
    sl__chdr *h;
    int shared;
    int fd;             /* shared: the segment, flock(LOCK_SH) held for life; else -1 */
    uint64_t map_len;   /* shared: bytes mapped */
    uint32_t proc;      /* shared: this process's slot */
    char name[64];      /* shared: "/sluice-cache-..." */
    pthread_mutex_t punch_mu; /* shared: one punch at a time in this process (its slot names one chain) */
} sl__seg;

/* What a node cache is made of: every process attaching must ask for the
 * same. */
typedef struct sl__seg_geom {
    uint64_t capacity;  /* the region's bytes at most (opts.capacity) */
    uint64_t nblocks;
    uint64_t epoch_len;
    uint32_t keys, entries, block_size;
} sl__seg_geom;

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

/* ---- records and the lock (shm.c) ---------------------------------------------- */
/* Free record r and, in a node cache, its blocks (mu held). A private
 * record's value is its owner's to free first. The state goes first: a
 * node cache's recovery must never see a half-cleared record as live. */
void sl__seg_rec_free(sl__seg *s, uint32_t r);

/* Lock mu; in a node cache whose last holder died holding it, rebuild
 * the index first. */
void sl__seg_lock(sl__seg *s);
void sl__seg_unlock(sl__seg *s);

/* ---- the node cache's segment (shm.c) ------------------------------------------ */
/* Open or create the segment name (/sluice-cache-...) for geometry g and
 * attach this process (s->h, fd, proc set). 0, or SL_EINVAL, SL_ENOMEM,
 * SL_ESTATE, SL_ESYS with a sentence in err; then s holds nothing. */
int sl__seg_attach(sl__seg *s, const char *name, const sl__seg_geom *g, char *err, size_t errlen);
/* Detach (giving back this process's pins and slot); the last process
 * out unlinks the segment. */
void sl__seg_detach(sl__seg *s);
/* Rebuild the index after a process died holding mu (mu held, EOWNERDEAD). */
void sl__seg_recover(sl__seg *s);
/* Free the pins and WRITING records of dead processes; returns how many
 * processes were reaped. mu held. */
uint32_t sl__seg_reap(sl__seg *s);
/* Process slot proc's owner is gone (mu held). */
int sl__seg_owner_dead(sl__seg *s, uint32_t proc);
/* Processes attached (mu held). */
uint32_t sl__seg_processes(sl__seg *s);
/* Blocks (mu held): take a chain of n blocks (fallocating cold ones
 * first) into *first: 0, or SL_ENOMEM (nothing taken). */
int sl__seg_blocks_take(sl__seg *s, uint64_t n, uint64_t *first);
/* Give a chain back (warm; mu held). */
void sl__seg_blocks_give(sl__seg *s, uint64_t first);
/* Punching freed pages out of /dev/shm without mu (after a shrink), in
 * three steps: mark (mu held; punch_mu held across all three): every
 * warm free block leaves the free stacks for this process's punch chain,
 * returned (BLK_END: none); punch (mu NOT held): the chain's pages go;
 * done (mu held): its blocks go on the cold stack. A block on a punch
 * chain is on no free stack and in no record's chain, so nothing else
 * touches it until it comes back cold (shm.c says why that is enough). */
uint64_t sl__seg_punch_mark(sl__seg *s);
void sl__seg_punch(sl__seg *s, uint64_t first);
void sl__seg_punch_done(sl__seg *s);
/* This process's pin table (mu held): record r in a free entry (its
 * index; SL_NONE if full); drop entry slot; entry slot still names r. */
uint32_t sl__seg_pin_add(sl__seg *s, uint32_t r);
void sl__seg_pin_drop(sl__seg *s, uint32_t slot);
int sl__seg_pin_holds(sl__seg *s, uint32_t slot, uint32_t r);

#endif
