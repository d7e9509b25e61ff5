/* The job's key and the node's CPUs shared by demand. See node.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLK */
#endif
#include "base/node.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "sluice.h"

void sl__node_job_key(char *out, size_t len) {
    const char *run = getenv("TORCHELASTIC_RUN_ID"), *addr = getenv("MASTER_ADDR"),
               *port = getenv("MASTER_PORT"), *job = getenv("SLUICE_CACHE_JOB");
    unsigned uid = (unsigned)geteuid();
    if (run && *run) snprintf(out, len, "run:%s;uid:%u", run, uid);
    else if (addr && *addr && port && *port) snprintf(out, len, "master:%s:%s;uid:%u", addr, port, uid);
    else if (job && *job) snprintf(out, len, "job:%s;uid:%u", job, uid);
    else snprintf(out, len, "ppid:%ld;uid:%u", (long)getppid(), uid);
}

/* ---- the CPU share ------------------------------------------------------------- */

#define MAGIC 0x70636c73u /* "slcp" */
#define VERSION 1u
#define PAGE 4096
/* The locks, on bytes past the page (never data): the open/close lock, then a byte a slot. */
#define LOCK_OPEN ((off_t)1 << 40)
#define LOCK_SLOT(i) (LOCK_OPEN + 1 + (off_t)(i))

typedef struct share_page {
    _Atomic uint32_t magic;  /* MAGIC once set up (under the open lock) */
    uint32_t version;
    _Atomic uint32_t demand[SL_CPUSHARE_SLOTS]; /* milli-CPUs; 0: none yet */
} share_page;
_Static_assert(sizeof(share_page) <= PAGE, "the share is one page");

static int lock_bytes(int fd, off_t at, off_t n, short type, int wait) {
    struct flock l;
    memset(&l, 0, sizeof l); /* l_pid must be 0 for OFD locks */
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = at;
    l.l_len = n;
    int rc;
    do rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l);
    while (rc != 0 && wait && errno == EINTR);
    return rc;
}

/* The first byte of [at, at + n) another description holds a lock on
 * (its offset), or -1 for none. An error asking counts as held. */
static off_t held_from(int fd, off_t at, off_t n) {
    struct flock l;
    memset(&l, 0, sizeof l);
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    l.l_start = at;
    l.l_len = n;
    if (fcntl(fd, F_OFD_GETLK, &l) != 0) return at;
    return l.l_type == F_UNLCK ? -1 : (l.l_start > at ? l.l_start : at);
}

/* Clear the demands of slots nobody holds (their loaders died without
 * closing): only a slot with a demand weighs anything. A loader claiming
 * the slot meanwhile writes its own demand, which a stale value's
 * compare-and-swap leaves alone. */
static void clear_dead(sl__cpushare *s) {
    share_page *p = s->map;
    for (uint32_t i = 0; i < SL_CPUSHARE_SLOTS; i++) {
        uint32_t v = atomic_load_explicit(&p->demand[i], memory_order_relaxed);
        if (i != s->slot && v && held_from(s->fd, LOCK_SLOT(i), 1) < 0)
            atomic_compare_exchange_strong(&p->demand[i], &v, 0);
    }
}

static void share_name(char *out, size_t len) {
    char job[512];
    sl__node_job_key(job, sizeof job);
    snprintf(out, len, "/sluice-cpus-%u-%016llx", (unsigned)geteuid(),
             (unsigned long long)sl__hash64(job, strlen(job), 0));
}

/* One try: 1 when the name was unlinked under us (open again), else 0 or
 * a failure. The open lock is held on return 0. */
static int open_once(sl__cpushare *s, const char *name) {
    int fd = shm_open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return SL_ESYS;
    struct stat st;
    if (lock_bytes(fd, LOCK_OPEN, 1, F_WRLCK, 1) != 0 || fstat(fd, &st) != 0) {
        close(fd);
        return SL_ESYS;
    }
    if (st.st_nlink == 0) { /* the last loader removed it after we opened it */
        close(fd);
        return 1;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_size != 0 && st.st_size != PAGE) ||
        (st.st_size == 0 && ftruncate(fd, PAGE) != 0)) {
        close(fd);
        return SL_ESYS;
    }
    void *map = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        close(fd);
        return SL_ESYS;
    }
    share_page *p = map;
    if (atomic_load(&p->magic) == 0) { /* a fresh page: we hold the open lock, no one else sets it up */
        p->version = VERSION;
        atomic_store(&p->magic, MAGIC);
    } else if (atomic_load(&p->magic) != MAGIC || p->version != VERSION) {
        munmap(map, PAGE);
        close(fd);
        return SL_ESYS;
    }
    s->fd = fd;
    s->map = map;
    return 0;
}

int sl__cpushare_open(sl__cpushare *s, uint32_t cpus) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->cpus = cpus ? cpus : 1;
    char name[64];
    share_name(name, sizeof name);
    int rc = 1;
    for (int tries = 0; tries < 8 && rc == 1; tries++) rc = open_once(s, name);
    if (rc) return SL_ESYS;
    share_page *p = s->map;
    int claimed = 0;
    for (uint32_t i = 0; i < SL_CPUSHARE_SLOTS && !claimed; i++)
        if (lock_bytes(s->fd, LOCK_SLOT(i), 1, F_WRLCK, 0) == 0) {
            s->slot = i;
            claimed = 1;
        }
    if (claimed) atomic_store(&p->demand[s->slot], 0);
    if (claimed) clear_dead(s);
    lock_bytes(s->fd, LOCK_OPEN, 1, F_UNLCK, 0);
    if (!claimed) { /* every slot taken: on our own share */
        munmap(s->map, PAGE);
        close(s->fd);
        s->fd = -1;
        s->map = NULL;
        return SL_ESYS;
    }
    return 0;
}

void sl__cpushare_close(sl__cpushare *s) {
    if (!s->map) return;
    share_page *p = s->map;
    char name[64];
    share_name(name, sizeof name);
    lock_bytes(s->fd, LOCK_OPEN, 1, F_WRLCK, 1);
    atomic_store(&p->demand[s->slot], 0);
    lock_bytes(s->fd, LOCK_SLOT(s->slot), 1, F_UNLCK, 0);
    struct stat st;
    /* the last one out removes the name, unless it names another file by now */
    if (held_from(s->fd, LOCK_SLOT(0), SL_CPUSHARE_SLOTS) < 0 && fstat(s->fd, &st) == 0 && st.st_nlink > 0)
        shm_unlink(name);
    lock_bytes(s->fd, LOCK_OPEN, 1, F_UNLCK, 0);
    munmap(s->map, PAGE);
    close(s->fd);
    s->fd = -1;
    s->map = NULL;
}

void sl__cpushare_forget(sl__cpushare *s) {
    if (!s->map) return;
    munmap(s->map, PAGE);
    close(s->fd); /* its locks are the parent's description's: they stay the parent's */
    s->fd = -1;
    s->map = NULL;
}

void sl__cpushare_set(sl__cpushare *s, double cpus) {
    if (!s->map) return;
    share_page *p = s->map;
    double m = cpus * 1000.0;
    uint32_t v = m <= 0 ? 0 : m >= (double)s->cpus * 1000.0 ? s->cpus * 1000u : (uint32_t)m;
    if (cpus > 0 && v == 0) v = 1; /* a demand, however small, counts the slot */
    atomic_store_explicit(&p->demand[s->slot], v, memory_order_relaxed);
}

double sl__cpushare_total(const sl__cpushare *s, uint32_t *loaders) {
    *loaders = 0;
    if (!s->map) return 0;
    const share_page *p = s->map;
    double sum = 0;
    for (uint32_t i = 0; i < SL_CPUSHARE_SLOTS; i++) {
        uint32_t v = atomic_load_explicit(&p->demand[i], memory_order_relaxed);
        if (v > s->cpus * 1000u) v = s->cpus * 1000u; /* another process's word: only a weight */
        if (!v) continue;
        sum += v / 1000.0;
        (*loaders)++;
    }
    return sum;
}

void sl__cpushare_refresh(sl__cpushare *s) {
    if (s->map) clear_dead(s);
}
