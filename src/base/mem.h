/*
 * The budget and its accounting allocator (think Redis zmalloc, SQLite
 * heap limits). Every byte the library holds is counted here: real
 * allocations (sl__alloc, page-rounded mmap for large ones) and
 * reservations for memory a decoder arena maps.
 *
 * A budget is a root (a loader's private budget, or the core of a shared
 * sl_budget) or a child attached to a root (a loader drawing on a shared
 * budget). A child counts its own use (per-loader stats) and every grant
 * is taken from its root too; the root's limit is the one that binds, its
 * queue is where every waiter of every child waits.
 *
 * Invariants
 *  - Nothing is granted past the limit: a request that does not fit fails
 *    (try) or waits (wait). The limit is live (sl__budget_set_limit): after
 *    a shrink, used may stand over it until consumers give back (they are
 *    asked, see sl__consumer); no new grant is made until it is under.
 *  - fixed bytes (reserved at create and held for a loader's life) never
 *    come back; a root's fixed is the sum of its children's. The limit is
 *    never set below fixed, and fixed never grows past the limit, but for
 *    pages that cannot be given back (sl__budget_fix_stuck).
 *  - Waits. A request over ceiling - fixed can never be granted: SL_EBUDGET
 *    at once (the ceiling is the limit the user set; the governor moves the
 *    limit below it). A request over limit - fixed but under ceiling - fixed
 *    (the limit was lowered by the governor) is parked: it does not block
 *    the queue, and waits for the limit to grow back at most stall_ns, then
 *    fails with SL_EBUDGET. Other waiters are served first-come
 *    first-served: only the first waiter that could fit may take, and while
 *    anyone waits, try requests fail, so a large request is never starved
 *    by small ones.
 *  - A thread that waits must hold nothing it could give back (the caller's
 *    protocol: release growth, then wait), so waits cannot deadlock.
 *    sl__budget_has_waiters tells holders of growth to give it back: it is
 *    true while anyone waits or while the budget is over its limit.
 *
 * Locks: a root's mu protects its queue, closed flags, children, the
 * limit's writers and the fixed parts' writers (its own and its
 * children's); cmu (taken before any loader lock, never under mu)
 * serializes consumer notifications with consumer removal. Counters are
 * atomics.
 */
#ifndef SL_MEM_H
#define SL_MEM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* The memory categories this library counts (SL_MEM_* of sluice.h): the
 * mem_count its stats report, within their SL_MEM_CAPACITY entries. */
#define SL_MEM__COUNT (SL_MEM_IO + 1)
_Static_assert(SL_MEM__COUNT <= SL_MEM_CAPACITY, "a memory category past the stats' capacity");

/* A thread waiting for budget: a node on its own stack, in the root's queue. */
typedef struct sl__waiter {
    struct sl__waiter *next;
    uint64_t n;
} sl__waiter;

/* Something holding budget it can give back (a loader's free slots and
 * scratch, a cache's entries), registered with a root. */
typedef struct sl__consumer {
    /* The budget is want bytes over its limit: release what can go now
     * (through sl__budget_release or sl__free) and return how much; the
     * rest as it comes free. Called on the thread that moved the limit,
     * with no budget lock held, never twice at once for one budget. */
    uint64_t (*give_back)(void *ctx, uint64_t want);
    /* The limit grew: room may be taken again. May be NULL. */
    void (*room)(void *ctx);
    void *ctx;
    struct sl__consumer *next;
    int shed_first;  /* 1: asked to give back before the others, told of room after them (a
                        sample cache: the first thing shed, the last grown) */
} sl__consumer;

typedef struct sl__budget {
    _Atomic uint64_t limit;   /* live limit (a child: UINT64_MAX once attached, the root binds) */
    _Atomic uint64_t ceiling; /* the limit the user set; the governor moves limit below it */
    _Atomic uint64_t used;
    _Atomic uint64_t peak;
    _Atomic uint64_t fixed;
    _Atomic uint64_t room;    /* kept free above fixed for one sample's growth: a loader's per-sample
                                 room (sl__sample_cap); a root's, its children's largest (mu) */
    _Atomic uint64_t cat[SL_MEM__COUNT];
    _Atomic uint64_t cat_peak[SL_MEM__COUNT];
    _Atomic uint64_t wait_ns;
    _Atomic int waiters;
    uint64_t stall_ns;        /* how long a parked waiter waits for the limit to grow back */
    struct sl__budget *parent;   /* the root this child draws on; NULL: a root */
    struct sl__budget *children; /* a root's attached children (mu) */
    struct sl__budget *sibling;
    pthread_mutex_t mu;       /* a root's: queue, closed flags, children */
    pthread_cond_t cv;
    sl__waiter *queue;        /* a root's waiters, first come first */
    int closed;               /* set by sl__budget_close: its waits return SL_ESTATE */
    pthread_mutex_t cmu;      /* a root's: consumers and their notification */
    sl__consumer *consumers;
} sl__budget;

#define SL_BUDGET_STALL_NS ((uint64_t)10 * 1000000000u)

int sl__budget_init(sl__budget *b, uint64_t limit);
/* Detaches a child (its fixed part leaves the root's) and destroys. */
void sl__budget_fini(sl__budget *b);
/* Make child (initialized, nothing counted yet) draw on root: from now on
 * every grant is taken from both; the child's own limit stays as set
 * (sl__budget_unbind_limit lifts it). */
void sl__budget_attach(sl__budget *child, sl__budget *root);
/* A child's own limit off: only its root's binds. */
void sl__budget_unbind_limit(sl__budget *child);
/* Keep room bytes free above b's fixed part for one sample's growth (its
 * root keeps its children's largest). The governor never moves the limit
 * under fixed + room (sl__budget_floor): a need a loader promised to grant
 * in the end (at most its room) must still fit, or which samples fail
 * would depend on when the container was short. */
void sl__budget_set_room(sl__budget *b, uint64_t room);
/* b's root's fixed part plus its room, at most its ceiling. */
uint64_t sl__budget_floor(const sl__budget *b);
/* Wake every waiter of b (of a child: its own, in the root's queue) with
 * SL_ESTATE; its later waits fail at once. */
void sl__budget_close(sl__budget *b);

/* Count n bytes under cat if they fit and nobody waits: 0 or SL_EBUDGET. */
int sl__budget_try(sl__budget *b, uint64_t n, int cat);
/* Count n bytes, waiting as stated above. SL_EBUDGET (never fits, or
 * parked past stall_ns), SL_ESTATE if closed. */
int sl__budget_wait(sl__budget *b, uint64_t n, int cat);
void sl__budget_release(sl__budget *b, uint64_t n, int cat);
/* Move n already-counted bytes into the fixed part (held for life),
 * under the root's mu, the lock sl__budget_set_limit checks fixed under:
 * so a limit is never stored below fixed, and fixed never passes the
 * limit. 0, or SL_EBUDGET (nothing moved) when b's or its root's fixed
 * part would pass its limit (lowered after the bytes were granted). */
int sl__budget_fix(sl__budget *b, uint64_t n);
/* The same for bytes that cannot be given back whatever the limit says
 * (pinned or locked pages): always moved, so the fixed part may stand
 * over a limit lowered before; set_limit and the governor never go under it. */
void sl__budget_fix_stuck(sl__budget *b, uint64_t n);
void sl__budget_unfix(sl__budget *b, uint64_t n);
/* In a child of fork() only: nobody waits on b or its root (the waiters
 * were the parent's threads), so releases wake no one and take no lock
 * (a parent's thread may have held the root's at the fork). */
void sl__budget_forget_waiters(sl__budget *b);
/* Bytes that could ever be granted to one waiter now: limit - fixed of
 * the root. */
uint64_t sl__budget_headroom(const sl__budget *b);
/* The limit that binds b (its root's, or its own if lower). */
uint64_t sl__budget_limit(const sl__budget *b);
/* Someone waits, or the budget is over its limit: give growth back. */
int sl__budget_has_waiters(const sl__budget *b);
/* The total of b's root stands over its limit (a lowered limit that has
 * not been given back to yet). */
int sl__budget_over(const sl__budget *b);

/* Move a root's live limit. user: the user's own setting, which is also
 * the new ceiling; otherwise (the governor) limit <= ceiling is kept. 0,
 * or SL_EBUDGET with a reason when limit < fixed (the minimum working
 * sets of its loaders). Waiters are re-evaluated at once; consumers are
 * asked to give back what is over, or told there is room. */
int sl__budget_set_limit(sl__budget *b, uint64_t limit, int user, char *err, size_t errlen);
/* Register or remove a consumer (on the root). Removal waits for a
 * notification in progress to end. Give-backs ask the shed_first
 * consumers first, room goes to them last; otherwise newest first. */
void sl__budget_add_consumer(sl__budget *b, sl__consumer *c);
void sl__budget_remove_consumer(sl__budget *b, sl__consumer *c);
/* In a child of fork() only (one thread, the parent's threads may have held
 * cmu at the fork): unlink c without taking a lock. */
void sl__budget_forget_consumer(sl__budget *b, sl__consumer *c);

/* Accounting allocator. The try-flavour: NULL when the budget or the
 * system refuses (the budget is left unchanged). Blocks of 64 KiB and more
 * are page-rounded anonymous mappings, so freeing them returns the memory
 * to the system at once; smaller ones come from malloc and are counted at
 * the usable size of the chunk glibc cuts for them (a formula of the
 * request: the same count whatever the heap's state). sl__free takes NULL. */
void *sl__alloc(sl__budget *b, size_t n, int cat);
void *sl__calloc(sl__budget *b, size_t count, size_t size, int cat);
void *sl__realloc(sl__budget *b, void *p, size_t n, int cat);
void sl__free(sl__budget *b, void *p);
/* Allocate waiting for budget (sl__budget_wait), for pipeline buffers. On
 * failure returns NULL and sets *err. */
void *sl__alloc_wait(sl__budget *b, size_t n, int cat, int *err);
/* Bytes the budget counts for p, a block from sl__alloc and kin
 * (sl__alloc_cost of its request). */
size_t sl__alloc_counted(const void *p);
/* Bytes sl__alloc(n) counts. */
size_t sl__alloc_cost(size_t n);
char *sl__strdup(sl__budget *b, const char *s, int cat);
/* One array of a table set (sl__alloc_parts): count elements of size
 * bytes; at is the address of the pointer to set (e.g. &e->work). */
typedef struct sl__part {
    void *at;
    size_t count, size;
} sl__part;
/* Several arrays as one zeroed allocation counted in b under cat, each
 * 16-byte aligned: *parts[i].at points at array i and *block at the whole,
 * which owns them all (sl__free(b, *block) releases every array at once).
 * 0, or with nothing held and no array pointer set: SL_EOVERFLOW (a size
 * overflows), SL_EBUDGET (the budget cannot hold it), SL_ENOMEM (the
 * system refused). */
int sl__alloc_parts(sl__budget *b, const sl__part *parts, size_t n, int cat, void **block);
/* The system's page size. */
size_t sl__page_size(void);
/* Page-rounded size of a mapping of n bytes. */
size_t sl__map_cost(size_t n);
/* Move n counted bytes from one category to another. */
void sl__budget_recat(sl__budget *b, uint64_t n, int from, int to);
/* A private anonymous mapping of n bytes whose cost (sl__map_cost(n)) the
 * caller has already counted with sl__budget_try/wait: for buffers that
 * grow under the wait protocol. */
void *sl__map_prepaid(size_t n);
void sl__unmap_prepaid(void *p, size_t n);

/* Tests: make the allocation after the next n succeed fail (n < 0: off).
 * Process-wide; tests run each in its own process. */
void sl__mem_fail_after(long n);

#endif
