/* The budget and accounting allocator. See mem.h for the invariants. */
#include "base/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"

#define SL_MMAP_MIN ((size_t)64 << 10)
#define SL_HDR 32 /* keeps the payload 16-byte aligned; page-aligned +32 for mmap */
#define SL_MAGIC_MALLOC 0x736c6d61u
#define SL_MAGIC_MMAP 0x736c6d6du

typedef struct hdr {
    uint32_t magic;
    uint32_t cat;
    uint64_t counted; /* bytes counted against the budget */
    uint64_t mapped;  /* mmap length, 0 for malloc */
    uint64_t size;    /* the caller's request, bytes after the header */
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
    atomic_store(&b->limit, limit);
    atomic_store(&b->ceiling, limit);
    b->stall_ns = SL_BUDGET_STALL_NS;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return SL_ESYS;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* parked waits time out on it */
    int rc = pthread_mutex_init(&b->mu, NULL) ? SL_ESYS : 0;
    if (rc == 0 && pthread_cond_init(&b->cv, &ca)) {
        pthread_mutex_destroy(&b->mu);
        rc = SL_ESYS;
    }
    if (rc == 0 && pthread_mutex_init(&b->cmu, NULL)) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        rc = SL_ESYS;
    }
    pthread_condattr_destroy(&ca);
    return rc;
}

static sl__budget *root_of(const sl__budget *b) { return b->parent ? b->parent : (sl__budget *)b; }

static void note_peak(_Atomic uint64_t *peak, uint64_t v) {
    uint64_t p = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {
    }
}

/* Count n on b alone if it fits b's own limit. */
static int take_one(sl__budget *b, uint64_t n, int cat) {
    uint64_t u = atomic_load(&b->used);
    for (;;) {
        uint64_t nu;
        if (sl__add(u, n, &nu) || nu > atomic_load(&b->limit)) return SL_EBUDGET;
        if (atomic_compare_exchange_weak(&b->used, &u, nu)) {
            note_peak(&b->peak, nu);
            note_peak(&b->cat_peak[cat], atomic_fetch_add(&b->cat[cat], n) + n);
            return 0;
        }
    }
}

/* The category before the total, as take_one adds the total before the
 * category: the categories never sum past used, so no category's peak
 * passes the limit (a give between another thread's two adds did). */
static void give_one(sl__budget *b, uint64_t n, int cat) {
    atomic_fetch_sub(&b->cat[cat], n);
    atomic_fetch_sub(&b->used, n);
}

static void wake(sl__budget *r) {
    if (atomic_load(&r->waiters) > 0) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

/* Count n on b and its root: both or neither. No queue check. */
static int take(sl__budget *b, uint64_t n, int cat) {
    if (!b->parent) return take_one(b, n, cat);
    if (take_one(b->parent, n, cat)) return SL_EBUDGET;
    if (take_one(b, n, cat) == 0) return 0;
    give_one(b->parent, n, cat);
    wake(b->parent);
    return SL_EBUDGET;
}

void sl__budget_attach(sl__budget *child, sl__budget *root) {
    pthread_mutex_lock(&root->mu);
    child->parent = root;
    child->sibling = root->children;
    root->children = child;
    atomic_fetch_add(&root->fixed, atomic_load(&child->fixed));
    pthread_mutex_unlock(&root->mu);
}

/* A root's room: its children's largest. r->mu held. */
static void update_room(sl__budget *r) {
    uint64_t m = 0;
    for (sl__budget *c = r->children; c; c = c->sibling) m = SL_MAX(m, atomic_load(&c->room));
    atomic_store(&r->room, m);
}

void sl__budget_set_room(sl__budget *b, uint64_t room) {
    atomic_store(&b->room, room);
    sl__budget *r = b->parent;
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    update_room(r);
    pthread_mutex_unlock(&r->mu);
}

uint64_t sl__budget_floor(const sl__budget *b) {
    const sl__budget *r = root_of(b);
    uint64_t fixed = atomic_load(&r->fixed), room = atomic_load(&r->room), ceiling = atomic_load(&r->ceiling);
    uint64_t floor = room > UINT64_MAX - fixed ? UINT64_MAX : fixed + room;
    return SL_MIN(floor, SL_MAX(ceiling, fixed));
}

void sl__budget_unbind_limit(sl__budget *child) {
    atomic_store(&child->limit, UINT64_MAX);
    atomic_store(&child->ceiling, UINT64_MAX);
}

void sl__budget_fini(sl__budget *b) {
    sl__budget *r = b->parent;
    if (r) {
        pthread_mutex_lock(&r->mu);
        sl__budget **pp = &r->children;
        while (*pp && *pp != b) pp = &(*pp)->sibling;
        if (*pp) *pp = b->sibling;
        atomic_fetch_sub(&r->fixed, atomic_load(&b->fixed));
        update_room(r);
        for (int c = 0; c < SL_MEM__COUNT; c++) /* whatever the child still counts leaves with it */
            give_one(r, atomic_load(&b->cat[c]), c);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        b->parent = NULL;
    }
    pthread_mutex_destroy(&b->cmu);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

void sl__budget_close(sl__budget *b) {
    sl__budget *r = root_of(b);
    pthread_mutex_lock(&r->mu);
    b->closed = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int sl__budget_try(sl__budget *b, uint64_t n, int cat) {
    if (atomic_load(&root_of(b)->waiters) > 0) return SL_EBUDGET;
    return take(b, n, cat);
}

static uint64_t room_under(uint64_t limit, uint64_t fixed) { return fixed >= limit ? 0 : limit - fixed; }

uint64_t sl__budget_headroom(const sl__budget *b) {
    const sl__budget *r = root_of(b);
    uint64_t h = room_under(atomic_load(&r->limit), atomic_load(&r->fixed));
    if (b != r) h = SL_MIN(h, room_under(atomic_load(&b->limit), atomic_load(&b->fixed)));
    return h;
}

/* What could ever be granted to one waiter: under the ceiling. */
static uint64_t ceiling_room(const sl__budget *b) {
    const sl__budget *r = root_of(b);
    uint64_t h = room_under(atomic_load(&r->ceiling), atomic_load(&r->fixed));
    if (b != r) h = SL_MIN(h, room_under(atomic_load(&b->limit), atomic_load(&b->fixed)));
    return h;
}

uint64_t sl__budget_limit(const sl__budget *b) {
    const sl__budget *r = root_of(b);
    return SL_MIN(atomic_load(&b->limit), atomic_load(&r->limit));
}

int sl__budget_has_waiters(const sl__budget *b) {
    sl__budget *r = root_of(b);
    return atomic_load(&r->waiters) > 0 || atomic_load(&r->used) > atomic_load(&r->limit);
}

int sl__budget_over(const sl__budget *b) {
    sl__budget *r = root_of(b);
    return atomic_load(&r->used) > atomic_load(&r->limit);
}

/* The first waiter in the queue that could fit under the limit now (the
 * parked ones do not hold the others up). r->mu held. */
static sl__waiter *first_fitting(sl__budget *r) {
    uint64_t h = sl__budget_headroom(r);
    for (sl__waiter *w = r->queue; w; w = w->next)
        if (w->n <= h) return w;
    return NULL;
}

static void park(sl__budget *r, uint64_t until_ns) {
    struct timespec ts = {(time_t)(until_ns / 1000000000u), (long)(until_ns % 1000000000u)};
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* Queue self at r's tail and wait until it takes n, or fails. r->mu held. */
static int queue_and_wait(sl__budget *b, sl__budget *r, sl__waiter *self, int cat) {
    sl__waiter **pp = &r->queue;
    while (*pp) pp = &(*pp)->next;
    *pp = self;
    atomic_fetch_add(&r->waiters, 1);
    uint64_t parked = 0;
    int rc;
    for (;;) {
        if (b->closed || r->closed) {
            rc = SL_ESTATE;
            break;
        }
        if (self->n > ceiling_room(b)) {
            rc = SL_EBUDGET;
            break;
        }
        if (self->n > sl__budget_headroom(b)) { /* the limit was lowered under it */
            uint64_t now = sl__now_ns();
            if (!parked) parked = now;
            if (now - parked >= r->stall_ns) {
                rc = SL_EBUDGET;
                break;
            }
            park(r, parked + r->stall_ns);
            continue;
        }
        parked = 0;
        if (first_fitting(r) == self && take(b, self->n, cat) == 0) {
            rc = 0;
            break;
        }
        pthread_cond_wait(&r->cv, &r->mu);
    }
    /* leave the queue wherever we are in it, so an early leaver never
     * blocks the ones behind */
    for (pp = &r->queue; *pp != self; pp = &(*pp)->next) {
    }
    *pp = self->next;
    atomic_fetch_sub(&r->waiters, 1);
    pthread_cond_broadcast(&r->cv);
    return rc;
}

int sl__budget_wait(sl__budget *b, uint64_t n, int cat) {
    sl__budget *r = root_of(b);
    if (n > ceiling_room(b)) return SL_EBUDGET;
    if (atomic_load(&r->waiters) == 0 && take(b, n, cat) == 0) return 0;
    uint64_t t0 = sl__now_ns();
    sl__waiter self = {NULL, n};
    pthread_mutex_lock(&r->mu);
    int rc = queue_and_wait(b, r, &self, cat);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&b->wait_ns, sl__now_ns() - t0);
    if (b != r) atomic_fetch_add(&r->wait_ns, sl__now_ns() - t0);
    return rc;
}

void sl__budget_release(sl__budget *b, uint64_t n, int cat) {
    if (!n) return;
    give_one(b, n, cat);
    if (b->parent) give_one(b->parent, n, cat);
    wake(root_of(b));
}

/* Would fixing n more on b pass b's limit? */
static int fix_passes(const sl__budget *b, uint64_t n) {
    uint64_t f;
    return sl__add(atomic_load(&b->fixed), n, &f) || f > atomic_load(&b->limit);
}

/* n into b's fixed part and its root's. The root's mu held. */
static void add_fixed(sl__budget *b, uint64_t n) {
    atomic_fetch_add(&b->fixed, n);
    if (b->parent) atomic_fetch_add(&b->parent->fixed, n);
}

int sl__budget_fix(sl__budget *b, uint64_t n) {
    sl__budget *r = root_of(b);
    pthread_mutex_lock(&r->mu);
    int rc = fix_passes(r, n) || (b != r && fix_passes(b, n)) ? SL_EBUDGET : 0;
    if (!rc) add_fixed(b, n);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void sl__budget_fix_stuck(sl__budget *b, uint64_t n) {
    sl__budget *r = root_of(b);
    pthread_mutex_lock(&r->mu);
    add_fixed(b, n);
    pthread_mutex_unlock(&r->mu);
}

void sl__budget_unfix(sl__budget *b, uint64_t n) {
    sl__budget *r = root_of(b);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_sub(&b->fixed, n);
    if (b->parent) atomic_fetch_sub(&b->parent->fixed, n);
    pthread_cond_broadcast(&r->cv); /* headroom grew */
    pthread_mutex_unlock(&r->mu);
}

void sl__budget_forget_waiters(sl__budget *b) {
    atomic_store(&b->waiters, 0);
    atomic_store(&root_of(b)->waiters, 0);
}

/* Ask consumers for what is over the limit, or tell them of room. */
static void notify(sl__budget *r, int grew) {
    pthread_mutex_lock(&r->cmu);
    /* the list holds the shed_first consumers first (add_consumer): room
     * goes to the others, then to them */
    for (int pass = 0; grew && pass < 2; pass++)
        for (sl__consumer *c = r->consumers; c; c = c->next)
            if (c->room && c->shed_first == pass) c->room(c->ctx);
    for (sl__consumer *c = r->consumers; c && !grew; c = c->next) {
        uint64_t u = atomic_load(&r->used), l = atomic_load(&r->limit);
        if (u <= l) break;
        c->give_back(c->ctx, u - l);
    }
    pthread_mutex_unlock(&r->cmu);
}

int sl__budget_set_limit(sl__budget *b, uint64_t limit, int user, char *err, size_t errlen) {
    if (b->parent) return SL_EINVAL;
    char x[32], y[32];
    pthread_mutex_lock(&b->mu);
    uint64_t fixed = atomic_load(&b->fixed), old = atomic_load(&b->limit);
    if (limit < fixed) {
        pthread_mutex_unlock(&b->mu);
        sl__msg(err, errlen, "limit %s is below the %s its loaders hold for life (their minimum working sets)",
                sl__fmt_bytes(limit, x, sizeof x), sl__fmt_bytes(fixed, y, sizeof y));
        return SL_EBUDGET;
    }
    if (user) atomic_store(&b->ceiling, limit);
    else limit = SL_MIN(limit, atomic_load(&b->ceiling));
    atomic_store(&b->limit, limit);
    pthread_cond_broadcast(&b->cv); /* waiters re-evaluate: fit, park or give up */
    pthread_mutex_unlock(&b->mu);
    if (limit != old) notify(b, limit > old);
    return 0;
}

void sl__budget_add_consumer(sl__budget *b, sl__consumer *c) {
    sl__budget *r = root_of(b);
    pthread_mutex_lock(&r->cmu);
    sl__consumer **at = &r->consumers;
    while (!c->shed_first && *at && (*at)->shed_first) at = &(*at)->next;
    c->next = *at;
    *at = c;
    pthread_mutex_unlock(&r->cmu);
}

void sl__budget_forget_consumer(sl__budget *b, sl__consumer *c) {
    sl__consumer **pp = &root_of(b)->consumers;
    while (*pp && *pp != c) pp = &(*pp)->next;
    if (*pp) *pp = c->next;
}

void sl__budget_remove_consumer(sl__budget *b, sl__consumer *c) {
    sl__budget *r = root_of(b);
    pthread_mutex_lock(&r->cmu);
    sl__budget_forget_consumer(b, c);
    pthread_mutex_unlock(&r->cmu);
}

size_t sl__page_size(void) {
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
        size_t ps = sl__page_size();
        return (t + ps - 1) / ps * ps;
    }
    /* malloc: the usable size of the chunk glibc cuts for t (8 bytes of
     * size field, 16-byte granules, 32 at least). A formula, not
     * malloc_usable_size: that also holds the slack of a larger free chunk
     * reused unsplit (under 32 bytes), which depends on the heap's history,
     * and the budget's decisions (create's minimum, the cache's capacity)
     * must not. */
    size_t chunk = (t + 8 + 15) & ~(size_t)15;
    return (chunk < 32 ? 32 : chunk) - 8;
}

/* Allocate a block of cost bytes (sl__alloc_cost of the request), already counted under
 * cat. On failure the cost is given back and NULL returned. */
static void *alloc_counted(sl__budget *b, size_t n, size_t cost, int cat) {
    if (cost >= SL_MMAP_MIN) {
        void *m = mmap(NULL, cost, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            sl__budget_release(b, cost, cat);
            return NULL;
        }
        hdr *h = m;
        *h = (hdr){SL_MAGIC_MMAP, (uint32_t)cat, cost, cost, n};
        return (char *)m + SL_HDR;
    }
    hdr *h = malloc(cost);
    if (!h) {
        sl__budget_release(b, cost, cat);
        return NULL;
    }
    *h = (hdr){SL_MAGIC_MALLOC, (uint32_t)cat, cost, 0, n};
    return h + 1;
}

void *sl__alloc(sl__budget *b, size_t n, int cat) {
    size_t cost = sl__alloc_cost(n);
    if (cost == SIZE_MAX) return NULL;
    if (injected_failure()) return NULL;
    if (sl__budget_try(b, cost, cat)) return NULL;
    return alloc_counted(b, n, cost, cat);
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
    void *p = alloc_counted(b, n, cost, cat);
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

int sl__alloc_parts(sl__budget *b, const sl__part *parts, size_t n, int cat, void **block) {
    uint64_t off = 0, len;
    *block = NULL;
    for (size_t i = 0; i < n; i++) { /* each array starts 16-aligned; its end rounded so the next does */
        if (sl__mul(parts[i].count, parts[i].size, &len) || len > UINT64_MAX - 15 ||
            sl__add(off, (len + 15) & ~(uint64_t)15, &off))
            return SL_EOVERFLOW;
    }
    size_t size = off ? (size_t)off : 1, cost = off > SIZE_MAX ? SIZE_MAX : sl__alloc_cost(size);
    if (cost == SIZE_MAX) return SL_EOVERFLOW;
    if (injected_failure()) return SL_ENOMEM;
    if (sl__budget_try(b, cost, cat)) return SL_EBUDGET;
    uint8_t *p = alloc_counted(b, size, cost, cat);
    if (!p) return SL_ENOMEM;
    memset(p, 0, size);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        void *at = p + off;
        memcpy(parts[i].at, &at, sizeof at);
        off += ((uint64_t)parts[i].count * parts[i].size + 15) & ~(uint64_t)15;
    }
    *block = p;
    return 0;
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
    size_t old = h->size;
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
    size_t ps = sl__page_size();
    if (n > SIZE_MAX - ps) return SIZE_MAX;
    return (n + ps - 1) / ps * ps;
}

void sl__budget_recat(sl__budget *b, uint64_t n, int from, int to) {
    for (; b; b = b->parent) {
        atomic_fetch_sub(&b->cat[from], n);
        note_peak(&b->cat_peak[to], atomic_fetch_add(&b->cat[to], n) + n);
    }
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
