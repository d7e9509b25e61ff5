/*
 * The budget and its accounting allocator (think Redis zmalloc, SQLite
 * heap limits). Every byte the library holds is counted here: real
 * allocations (sl__alloc, page-rounded mmap for large ones) and
 * reservations for memory a third-party decoder allocates itself.
 *
 * Invariants
 *  - used <= limit at all times: a request that does not fit fails (try)
 *    or waits (wait); nothing is ever counted past the limit.
 *  - fixed bytes (reserved at create and held for the loader's life) never
 *    come back, so a wait for more than limit - fixed fails at once with
 *    SL_EBUDGET: waiting cannot help it.
 *  - Waiters are served first-come first-served; while anyone waits, try
 *    requests fail, so a large request is never starved by small ones.
 *  - A thread that waits must hold nothing it could give back (the caller's
 *    protocol: release growth, then wait), so waits cannot deadlock.
 */
#ifndef SL_MEM_H
#define SL_MEM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* A thread waiting for budget: a node on its own stack, in the queue. */
typedef struct sl__waiter {
    struct sl__waiter *next;
} sl__waiter;

typedef struct sl__budget {
    uint64_t limit;
    _Atomic uint64_t used;
    _Atomic uint64_t peak;
    _Atomic uint64_t fixed;
    _Atomic uint64_t cat[SL_MEM__COUNT];
    _Atomic uint64_t cat_peak[SL_MEM__COUNT];
    _Atomic uint64_t wait_ns;
    _Atomic int waiters;
    pthread_mutex_t mu;     /* protects queue and closed */
    pthread_cond_t cv;
    sl__waiter *queue;      /* waiters, first come first; only the head may take */
    int closed;             /* set by sl__budget_close: waits return SL_ESTATE */
} sl__budget;

int sl__budget_init(sl__budget *b, uint64_t limit);
void sl__budget_fini(sl__budget *b);
/* Wake every waiter with SL_ESTATE; later waits fail at once. */
void sl__budget_close(sl__budget *b);

/* Count n bytes under cat if they fit and nobody waits: 0 or SL_EBUDGET. */
int sl__budget_try(sl__budget *b, uint64_t n, int cat);
/* Count n bytes, waiting first-come first-served until they fit.
 * SL_EBUDGET at once if n > limit - fixed; SL_ESTATE if closed. */
int sl__budget_wait(sl__budget *b, uint64_t n, int cat);
void sl__budget_release(sl__budget *b, uint64_t n, int cat);
/* Move n already-counted bytes into the fixed part (held for life). */
void sl__budget_fix(sl__budget *b, uint64_t n);
void sl__budget_unfix(sl__budget *b, uint64_t n);
/* Bytes that could ever be granted to one waiter. */
uint64_t sl__budget_headroom(const sl__budget *b);
int sl__budget_has_waiters(const sl__budget *b);

/* Accounting allocator. The try-flavour: NULL when the budget or the
 * system refuses (the budget is left unchanged). Blocks of 64 KiB and more
 * are page-rounded anonymous mappings, so freeing them returns the memory
 * to the system at once; smaller ones come from malloc and are counted at
 * their usable size. sl__free takes NULL. */
void *sl__alloc(sl__budget *b, size_t n, int cat);
void *sl__calloc(sl__budget *b, size_t count, size_t size, int cat);
void *sl__realloc(sl__budget *b, void *p, size_t n, int cat);
void sl__free(sl__budget *b, void *p);
/* Allocate waiting for budget (sl__budget_wait), for pipeline buffers. On
 * failure returns NULL and sets *err. */
void *sl__alloc_wait(sl__budget *b, size_t n, int cat, int *err);
/* Bytes the budget counts for p, a block from sl__alloc and kin (at
 * least sl__alloc_cost of its request: malloc may give a little more). */
size_t sl__alloc_counted(const void *p);
/* Bytes sl__alloc(n) counts. */
size_t sl__alloc_cost(size_t n);
char *sl__strdup(sl__budget *b, const char *s, int cat);
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
