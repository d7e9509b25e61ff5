/* The budget and accounting allocator. See mem.h for the invariants. */
#include "mem.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util.h"

#define SL_MMAP_MIN ((size_t)64 << 10)
#define SL_HDR 32 /* keeps the payload 16-byte aligned; page-aligned +32 for mmap */
#define SL_MAGIC_MALLOC 0x736c6d61u
#define SL_MAGIC_MMAP 0x736c6d6du

typedef struct hdr {
    uint32_t magic;
    uint32_t cat;
    uint64_t counted; /* bytes counted against the budget */
    uint64_t mapped;  /* mmap length, 0 for malloc */
    uint64_t pad;
} hdr;
_Static_assert(sizeof(hdr) == SL_HDR, "header size");

static _Atomic long fail_countdown = -1;

void sl__mem_fail_after(long n) { atomic_store(&fail_countdown, n); }

static int injected_failure(void) {
    long v = atomic_load(&fail_countdown);
    while (v >= 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &v, v - 1)) return v == 0;
    }
    return 0;
}

int sl__budget_init(sl__budget *b, uint64_t limit) {
    memset(b, 0, sizeof *b);
    b->limit = limit;
    if (pthread_mutex_init(&b->mu, NULL)) return SL_ESYS;
    if (pthread_cond_init(&b->cv, NULL)) {
        pthread_mutex_destroy(&b->mu);
        return SL_ESYS;
    }
    return 0;
}

void sl__budget_fini(sl__budget *b) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

void sl__budget_close(sl__budget *b) {
    pthread_mutex_lock(&b->mu);
    b->closed = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void note_peak(_Atomic uint64_t *peak, uint64_t v) {
    uint64_t p = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {
    }
}

/* Count n if it fits; no queue check. */
static int take(sl__budget *b, uint64_t n, int cat) {
    uint64_t u = atomic_load(&b->used);
    for (;;) {
        uint64_t nu;
        if (sl__add(u, n, &nu) || nu > b->limit) return SL_EBUDGET;
        if (atomic_compare_exchange_weak(&b->used, &u, nu)) {
            note_peak(&b->peak, nu);
            note_peak(&b->cat_peak[cat], atomic_fetch_add(&b->cat[cat], n) + n);
            return 0;
        }
    }
}

int sl__budget_try(sl__budget *b, uint64_t n, int cat) {
    if (atomic_load(&b->waiters) > 0) return SL_EBUDGET;
    return take(b, n, cat);
}

uint64_t sl__budget_headroom(const sl__budget *b) {
    uint64_t f = atomic_load(&((sl__budget *)b)->fixed);
    return f >= b->limit ? 0 : b->limit - f;
}

int sl__budget_has_waiters(const sl__budget *b) {
    return atomic_load(&((sl__budget *)b)->waiters) > 0;
}

int sl__budget_wait(sl__budget *b, uint64_t n, int cat) {
    if (n > sl__budget_headroom(b)) return SL_EBUDGET;
    if (atomic_load(&b->waiters) == 0 && take(b, n, cat) == 0) return 0;
    uint64_t t0 = sl__now_ns();
    int rc;
    sl__waiter self = {NULL};
    pthread_mutex_lock(&b->mu);
    /* join the queue at its tail */
    sl__waiter **pp = &b->queue;
    while (*pp) pp = &(*pp)->next;
    *pp = &self;
    atomic_fetch_add(&b->waiters, 1);
    for (;;) {
        if (b->closed) {
            rc = SL_ESTATE;
            break;
        }
        if (n > sl__budget_headroom(b)) {
            rc = SL_EBUDGET;
            break;
        }
        if (b->queue == &self && take(b, n, cat) == 0) {
            rc = 0;
            break;
        }
        pthread_cond_wait(&b->cv, &b->mu);
    }
    /* leave the queue wherever we are in it, so an early leaver never
     * blocks the ones behind */
    for (pp = &b->queue; *pp != &self; pp = &(*pp)->next) {
    }
    *pp = self.next;
    atomic_fetch_sub(&b->waiters, 1);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    atomic_fetch_add(&b->wait_ns, sl__now_ns() - t0);
    return rc;
}

void sl__budget_release(sl__budget *b, uint64_t n, int cat) {
    if (!n) return;
    atomic_fetch_sub(&b->used, n);
    atomic_fetch_sub(&b->cat[cat], n);
    if (atomic_load(&b->waiters) > 0) {
        pthread_mutex_lock(&b->mu);
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

void sl__budget_fix(sl__budget *b, uint64_t n) { atomic_fetch_add(&b->fixed, n); }
void sl__budget_unfix(sl__budget *b, uint64_t n) { atomic_fetch_sub(&b->fixed, n); }

static size_t page_size(void) {
    static size_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (size_t)v : 4096;
    }
    return ps;
}

size_t sl__alloc_cost(size_t n) {
    if (n > SIZE_MAX - SL_HDR - 65536) return SIZE_MAX;
    size_t t = n + SL_HDR;
    if (t >= SL_MMAP_MIN) {
        size_t ps = page_size();
        return (t + ps - 1) / ps * ps;
    }
    return t; /* malloc: counted at usable size, at least this */
}

/* Allocate a block of cost bytes (sl__alloc_cost of the request), already counted under
 * cat. On failure the cost is given back and NULL returned. */
static void *alloc_counted(sl__budget *b, size_t cost, int cat) {
    if (cost >= SL_MMAP_MIN) {
        void *m = mmap(NULL, cost, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            sl__budget_release(b, cost, cat);
            return NULL;
        }
        hdr *h = m;
        *h = (hdr){SL_MAGIC_MMAP, (uint32_t)cat, cost, cost, 0};
        return (char *)m + SL_HDR;
    }
    /* The request was counted first so the budget is never passed; settle
     * the difference to the usable size malloc really gave. */
    hdr *h = malloc(cost);
    if (!h) {
        sl__budget_release(b, cost, cat);
        return NULL;
    }
    size_t usable = malloc_usable_size(h);
    if (usable > cost) {
        if (take(b, usable - cost, cat) == 0) cost = usable;
    }
    *h = (hdr){SL_MAGIC_MALLOC, (uint32_t)cat, cost, 0, 0};
    return h + 1;
}

void *sl__alloc(sl__budget *b, size_t n, int cat) {
    size_t cost = sl__alloc_cost(n);
    if (cost == SIZE_MAX) return NULL;
    if (injected_failure()) return NULL;
    if (sl__budget_try(b, cost, cat)) return NULL;
    return alloc_counted(b, cost, cat);
}

void *sl__alloc_wait(sl__budget *b, size_t n, int cat, int *err) {
    size_t cost = sl__alloc_cost(n);
    if (cost == SIZE_MAX) {
        *err = SL_EOVERFLOW;
        return NULL;
    }
    int rc = sl__budget_wait(b, cost, cat);
    if (rc) {
        *err = rc;
        return NULL;
    }
    /* Counted: from here only the system can refuse (no retry: a refusal
     * by the system is SL_ENOMEM, not a reason to wait again). */
    if (injected_failure()) {
        sl__budget_release(b, cost, cat);
        *err = SL_ENOMEM;
        return NULL;
    }
    void *p = alloc_counted(b, cost, cat);
    if (!p) *err = SL_ENOMEM;
    return p;
}

void *sl__calloc(sl__budget *b, size_t count, size_t size, int cat) {
    uint64_t n;
    if (sl__mul(count, size, &n) || n > SIZE_MAX) return NULL;
    void *p = sl__alloc(b, (size_t)n, cat);
    if (p) memset(p, 0, (size_t)n); /* mmap pages are zero already; cheap either way for small */
    return p;
}

void sl__free(sl__budget *b, void *p) {
    if (!p) return;
    hdr *h = (hdr *)((char *)p - SL_HDR);
    uint64_t counted = h->counted;
    int cat = (int)h->cat;
    if (h->magic == SL_MAGIC_MMAP) {
        h->magic = 0;
        munmap(h, h->mapped);
    } else {
        h->magic = 0;
        free(h);
    }
    sl__budget_release(b, counted, cat);
}

void *sl__realloc(sl__budget *b, void *p, size_t n, int cat) {
    if (!p) return sl__alloc(b, n, cat);
    hdr *h = (hdr *)((char *)p - SL_HDR);
    size_t old = h->counted - SL_HDR; /* at least the old payload */
    void *q = sl__alloc(b, n, cat);
    if (!q) return NULL;
    memcpy(q, p, SL_MIN(old, n));
    sl__free(b, p);
    return q;
}

size_t sl__alloc_counted(const void *p) {
    return (size_t)((const hdr *)((const char *)p - SL_HDR))->counted;
}

char *sl__strdup(sl__budget *b, const char *s, int cat) {
    size_t n = strlen(s) + 1;
    char *d = sl__alloc(b, n, cat);
    if (d) memcpy(d, s, n);
    return d;
}

const char *sl__fmt_bytes(uint64_t n, char *buf, size_t len) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0) snprintf(buf, len, "%llu B", (unsigned long long)n);
    else snprintf(buf, len, "%.1f %s", v, u[i]);
    return buf;
}

const char *sl_format_size(uint64_t n, char *buf, size_t len) { return sl__fmt_bytes(n, buf, len); }

size_t sl__map_cost(size_t n) {
    size_t ps = page_size();
    if (n > SIZE_MAX - ps) return SIZE_MAX;
    return (n + ps - 1) / ps * ps;
}

void sl__budget_recat(sl__budget *b, uint64_t n, int from, int to) {
    atomic_fetch_sub(&b->cat[from], n);
    note_peak(&b->cat_peak[to], atomic_fetch_add(&b->cat[to], n) + n);
}

void *sl__map_prepaid(size_t n) {
    if (injected_failure()) return NULL;
    size_t cost = sl__map_cost(n);
    void *m = mmap(NULL, cost, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

void sl__unmap_prepaid(void *p, size_t n) {
    if (p) munmap(p, sl__map_cost(n));
}
