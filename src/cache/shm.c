/*
 * The node cache's segment: one /dev/shm file per (dataset, job), shared
 * by the ranks of a node. Its name, its creation and attachment, the
 * process table, value blocks, and recovery when a process dies.
 *
 * Lifetime. Every process attached holds flock(LOCK_SH) on the segment
 * for as long as it is attached (the kernel drops it when the process
 * dies, however it dies). The creator holds LOCK_EX while it initializes,
 * so joiners wait for a complete segment. A segment on which LOCK_EX can
 * be taken at once, and whose process slots are all unlocked, is stale:
 * whoever starts a node cache next unlinks it. The last process to
 * detach unlinks it too.
 *
 * Processes. Each attached process has a slot: its pid (for display
 * only) and the records it has pinned. Liveness is a fact the kernel
 * holds: a process holds an open-file-description lock (F_OFD_SETLK) on
 * its slot's lock byte of the segment's file from before it marks the
 * slot until after it clears it, and the kernel drops the lock when the
 * process dies, however it dies. A slot is dead if and only if its lock
 * can be taken: no /proc, so no mistake for a process at its descriptor
 * limit, in another PID namespace, or under a reused pid; a check that
 * fails for any reason counts the slot as alive (a dead process's pins
 * then wait; a live one's bytes are never freed). A dead process's pins
 * and unpublished writes are reclaimed (sl__seg_reap) when found: at
 * attach, when an insert meets a record its dead writer never published,
 * every 4096 inserts, and in a recovery. A child of fork() shares its
 * parent's open file description, so the parent's slot stays held while
 * the child keeps the descriptor (the safe direction).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/node.h"
#include "base/sys/cgroup.h"
#include "base/sys/procfs.h"
#include "base/util.h"
#include "cache/node.h"
#include "cache/index.h"
#include "cache/segment.h"

#define SHM_DIR "/dev/shm"
#define SHM_PREFIX "sluice-cache-"
#define RETRY 1      /* join_segment: the segment went away; start over */
#define UNFINISHED 2 /* join_segment: no complete header (its creator died, or not a node cache) */

/* ---- the name ----------------------------------------------------------------- */

/* The job: torchrun's run id, else the rendezvous address, else an
 * explicit key, else the launcher (the parent process); and the user (a
 * segment is its user's alone: another user's job never meets it). */
int sl__cache_shm_name(char *out, size_t len, const char *source, uint64_t seed, const char *variant,
                       char *err, size_t errlen) {
    char real[PATH_MAX], id[PATH_MAX + 256], job[512];
    struct stat st;
    if (source && strstr(source, "://")) { /* a URL: its name; the caller's variant holds its version */
        snprintf(id, sizeof id, "%s|%llu|%s", source, (unsigned long long)seed, variant ? variant : "");
    } else if (!source || !realpath(source, real) || stat(real, &st) != 0) {
        sl__msg(err, errlen, "node cache: cannot read the source %s: %s", source ? source : "(null)", strerror(errno));
        return SL_ENOENT;
    } else {
        snprintf(id, sizeof id, "%s|%lld|%lld.%09ld|%llu|%llu|%llu|%s", real, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)st.st_ino,
                 (unsigned long long)st.st_dev, (unsigned long long)seed, variant ? variant : "");
    }
    sl__node_job_key(job, sizeof job);
    snprintf(out, len, "/" SHM_PREFIX "%016llx-%016llx", (unsigned long long)sl__hash64(id, strlen(id), 0),
             (unsigned long long)sl__hash64(job, strlen(job), 0));
    return 0;
}

/* ---- processes -------------------------------------------------------------------- */

/* Slot i's lock: one byte at SLOT_LOCK + i of the segment's file, past
 * the end of any segment (a lock, never data). */
#define SLOT_LOCK ((off_t)1 << 62)

static struct flock slot_lock(uint32_t first, uint32_t n, short type) {
    struct flock l;
    memset(&l, 0, sizeof l); /* l_pid must be 0 for OFD locks */
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = SLOT_LOCK + (off_t)first;
    l.l_len = (off_t)n;
    return l;
}

/* Some open file description other than fd's holds a lock on slots
 * [first, first + n). Any error while asking counts as held. */
static int slots_held(int fd, uint32_t first, uint32_t n) {
    struct flock l = slot_lock(first, n, F_WRLCK);
    return fcntl(fd, F_OFD_GETLK, &l) != 0 || l.l_type != F_UNLCK;
}

/* Slot i is marked and its process is gone (mu held). Our own slot never is. */
static int slot_dead(sl__seg *s, uint32_t i) {
    return i != s->proc && sl__cprocs(s->h)[i].pid != 0 && !slots_held(s->fd, i, 1);
}

int sl__seg_owner_dead(sl__seg *s, uint32_t proc) { return proc < SL_CACHE_PROCS && slot_dead(s, proc); }

uint32_t sl__seg_processes(sl__seg *s) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++) n += sl__cprocs(s->h)[i].pid != 0;
    return n;
}

static void release_proc(sl__seg *s, uint32_t i);

/* Take a process slot for this process (mu held): the first whose lock
 * we can take; one still marked was a dead process's, reaped first. */
static int register_self(sl__seg *s, char *err, size_t errlen) {
    sl__cproc *procs = sl__cprocs(s->h);
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++) {
        struct flock l = slot_lock(i, 1, F_WRLCK);
        if (fcntl(s->fd, F_OFD_SETLK, &l) != 0) {
            if (errno == EAGAIN || errno == EACCES) continue; /* a live process's */
            sl__msg(err, errlen, "node cache %s: cannot lock a process slot (%s; open file description locks "
                    "need Linux 3.15 or later)", s->name, strerror(errno));
            return SL_ESYS;
        }
        if (procs[i].pid) { /* it died after the last reap */
            release_proc(s, i);
            atomic_fetch_add(&s->h->reaped, 1);
        }
        procs[i].npins = 0;
        procs[i].punch = 0;
        for (int k = 0; k < SL_CACHE_PINS; k++) procs[i].pin[k] = SL_NONE;
        procs[i].pid = (int32_t)getpid();
        s->proc = i;
        return 0;
    }
    sl__msg(err, errlen, "node cache %s already serves %d processes", s->name, SL_CACHE_PROCS);
    return SL_ESTATE;
}

/* Clear our slot, then let its lock go (mu held). */
static void unregister_self(sl__seg *s) {
    release_proc(s, s->proc);
    struct flock l = slot_lock(s->proc, 1, F_UNLCK);
    fcntl(s->fd, F_OFD_SETLK, &l);
    s->proc = SL_NONE;
}

uint32_t sl__seg_pin_add(sl__seg *s, uint32_t r) {
    sl__cproc *p = &sl__cprocs(s->h)[s->proc];
    for (uint32_t k = 0; k < SL_CACHE_PINS; k++) { /* lowest free entry: the few in use stay in front */
        if (p->pin[k] != SL_NONE) continue;
        p->pin[k] = r;
        p->npins++;
        return k;
    }
    return SL_NONE;
}

void sl__seg_pin_drop(sl__seg *s, uint32_t slot) {
    sl__cproc *p = &sl__cprocs(s->h)[s->proc];
    p->pin[slot] = SL_NONE;
    p->npins--;
}

int sl__seg_pin_holds(sl__seg *s, uint32_t slot, uint32_t r) {
    return slot < SL_CACHE_PINS && sl__cprocs(s->h)[s->proc].pin[slot] == r;
}

static void punch_to_cold(sl__chdr *h, sl__cproc *p);

/* Give back what process slot i held: its pins, its unpublished records,
 * the blocks it was punching. */
static void release_proc(sl__seg *s, uint32_t i) {
    sl__chdr *h = s->h;
    sl__cproc *p = &sl__cprocs(h)[i];
    sl__crec *R = sl__crecs(h);
    for (uint32_t k = 0; k < SL_CACHE_PINS; k++) {
        uint32_t r = p->pin[k];
        if (r == SL_NONE || r >= h->max_entries || R[r].pins == 0) continue;
        R[r].pins--;
        if (R[r].state == REC_DOOMED && R[r].pins == 0) sl__seg_rec_free(s, r);
    }
    for (uint32_t r = 0; r < h->max_entries; r++) {
        if (R[r].state != REC_WRITING || R[r].owner != i) continue;
        if (sl__ckeys(h)[R[r].key] == r) sl__ckeys(h)[R[r].key] = SL_NONE;
        sl__seg_rec_free(s, r);
    }
    punch_to_cold(h, p); /* it died punching: its chain may be part punched */
    memset(p, 0, sizeof *p);
}

uint32_t sl__seg_reap(sl__seg *s) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++) {
        if (!slot_dead(s, i)) continue;
        release_proc(s, i);
        n++;
    }
    if (n) atomic_fetch_add(&s->h->reaped, n);
    return n;
}

/* ---- blocks ------------------------------------------------------------------------- */

int sl__seg_blocks_take(sl__seg *s, uint64_t n, uint64_t *first) {
    sl__chdr *h = s->h;
    uint32_t *links = sl__clinks(h);
    if (h->nwarm + h->ncold < n) return SL_ENOMEM;
    uint64_t head = BLK_END, bs = h->block_size;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t b;
        if (h->nwarm) {
            b = sl__cwarm(h)[--h->nwarm];
        } else {
            b = sl__ccold(h)[h->ncold - 1];
            /* punched earlier: take the page back from /dev/shm first, so a
             * full /dev/shm refuses here instead of a SIGBUS on write */
            if (fallocate(s->fd, 0, (off_t)(h->off_blocks + b * bs), (off_t)bs) != 0) {
                if (head != BLK_END) sl__seg_blocks_give(s, head);
                return SL_ENOMEM;
            }
            h->ncold--;
        }
        links[b] = (uint32_t)head;
        head = b;
    }
    *first = head;
    return 0;
}

void sl__seg_blocks_give(sl__seg *s, uint64_t first) {
    sl__chdr *h = s->h;
    uint32_t *links = sl__clinks(h);
    for (uint64_t b = first; b != BLK_END;) {
        uint64_t next = links[b];
        links[b] = BLK_WARM;
        sl__cwarm(h)[h->nwarm++] = (uint32_t)b;
        b = next;
    }
}

/* Rebuild both free stacks from the links (free blocks hold BLK_WARM or
 * BLK_COLD; any other value is a used block). */
static void restack_free(sl__chdr *h) {
    uint32_t *links = sl__clinks(h);
    h->nwarm = h->ncold = 0;
    for (uint64_t b = 0; b < h->nblocks; b++) {
        if (links[b] == BLK_WARM) sl__cwarm(h)[h->nwarm++] = (uint32_t)b;
        else if (links[b] == BLK_COLD) sl__ccold(h)[h->ncold++] = (uint32_t)b;
    }
}

/* ---- punching freed pages out of /dev/shm, without mu -------------------------------
 *
 * A shrink frees blocks whose pages should go back to the system. The
 * punch (fallocate PUNCH_HOLE) may take long, so it runs without mu, in
 * three steps: mark (mu held: every warm free block leaves the warm stack
 * for this process's punch chain, linked in block order, and the slot
 * names the chain: punch = first + 1), punch (mu not held: one fallocate a
 * run of consecutive blocks), done (mu held: each block of the chain goes
 * onto the cold stack, and the slot's punch follows along).
 *
 * Why it is safe: a block on a punch chain is on no free stack and in no
 * record's chain, so nobody takes it or reads it while its pages go; only
 * its process reads or writes its link word until done; and it comes back
 * only as cold, so whoever takes it next reserves its page again
 * (fallocate) before writing. A process that dies punching leaves its
 * chain named in its slot: the reaper puts it on the cold stack, and a
 * recovery claims a live process's chain and makes every unclaimed free
 * block cold. One punch at a time a process (punch_mu, taken before mu). */

uint64_t sl__seg_punch_mark(sl__seg *s) {
    sl__chdr *h = s->h;
    uint32_t *links = sl__clinks(h);
    uint64_t head = BLK_END;
    for (uint64_t b = h->nblocks; b-- > 0;)
        if (links[b] == BLK_WARM) { /* the warm stack holds exactly these */
            links[b] = (uint32_t)head;
            head = b;
        }
    h->nwarm = 0;
    sl__cprocs(h)[s->proc].punch = head == BLK_END ? 0 : (uint32_t)head + 1;
    return head;
}

void sl__seg_punch(sl__seg *s, uint64_t first) {
    sl__chdr *h = s->h;
    const uint32_t *links = sl__clinks(h);
    uint64_t bs = h->block_size;
    for (uint64_t b = first; b < h->nblocks;) { /* runs of consecutive blocks, one call each */
        uint64_t e = b, next = links[b];
        while (next == e + 1 && next < h->nblocks) e = next, next = links[e];
        fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(h->off_blocks + b * bs),
                  (off_t)((e - b + 1) * bs));
        b = next; /* BLK_END ends it (so would a damaged link) */
    }
}

/* Put the chain p names on the cold stack, block by block, p following
 * (mu held). A broken chain (only a damaged index has one) stops it. */
static void punch_to_cold(sl__chdr *h, sl__cproc *p) {
    uint32_t *links = sl__clinks(h);
    for (uint64_t steps = 0; p->punch && steps < h->nblocks; steps++) {
        uint64_t b = p->punch - 1u, next = b < h->nblocks ? links[b] : BLK_END;
        if (b >= h->nblocks || (next != BLK_END && next >= h->nblocks)) break;
        links[b] = BLK_COLD;
        sl__ccold(h)[h->ncold++] = (uint32_t)b;
        p->punch = next == BLK_END ? 0 : (uint32_t)next + 1;
    }
    p->punch = 0;
}

void sl__seg_punch_done(sl__seg *s) { punch_to_cold(s->h, &sl__cprocs(s->h)[s->proc]); }

/* ---- recovery --------------------------------------------------------------------------- */

/* Claim r's chain in claim[] (one entry a block, SL_NONE: unclaimed).
 * 1 if it is whole: the right number of blocks, in range, claimed by no
 * other record, ending in BLK_END; else its claims are undone, 0. */
static int claim_chain(sl__chdr *h, uint32_t r, uint32_t *claim) {
    sl__crec *rec = &sl__crecs(h)[r];
    uint32_t *links = sl__clinks(h);
    uint64_t bs = h->block_size, want = rec->charge / bs, got = 0, b = rec->loc;
    int ok = rec->charge == (rec->size + bs - 1) / bs * bs && rec->key < h->keys;
    while (ok && b != BLK_END) { /* a cycle meets its own claim: it ends */
        if (b >= h->nblocks || got >= want || claim[b] != SL_NONE) {
            ok = 0;
            break;
        }
        claim[b] = r;
        got++;
        b = links[b];
    }
    if (ok && got == want) return 1;
    for (b = rec->loc; got-- > 0; b = links[b]) claim[b] = SL_NONE; /* the first got blocks were ours */
    return 0;
}

/* Claim the chain a live process is punching (as far as it is whole). */
static void claim_punch(sl__chdr *h, sl__cproc *p, uint32_t *claim) {
    uint32_t *links = sl__clinks(h);
    for (uint64_t b = p->punch ? p->punch - 1u : BLK_END; b < h->nblocks && claim[b] == SL_NONE; b = links[b])
        claim[b] = SL_NONE - 1; /* no record's index: a punch's */
}

/* Keep r if it is whole and (READY, WRITING) first for its key. */
static int keep_record(sl__chdr *h, uint32_t r, uint32_t *claim) {
    sl__crec *rec = &sl__crecs(h)[r];
    sl__cproc *procs = sl__cprocs(h);
    if (rec->state == REC_WRITING && (rec->owner >= SL_CACHE_PROCS || !procs[rec->owner].pid)) return 0;
    if (rec->state != REC_READY && rec->state != REC_WRITING && rec->state != REC_DOOMED) return 0;
    if (rec->state != REC_DOOMED && (rec->key >= h->keys || sl__ckeys(h)[rec->key] != SL_NONE)) return 0;
    if (!claim_chain(h, r, claim)) return 0;
    if (rec->state != REC_DOOMED) sl__ckeys(h)[rec->key] = r;
    return 1;
}

/* Pins from the live processes' tables; stale entries are dropped. */
static void recount_pins(sl__chdr *h) {
    sl__crec *R = sl__crecs(h);
    for (uint32_t r = 0; r < h->max_entries; r++) R[r].pins = 0;
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++) {
        sl__cproc *p = &sl__cprocs(h)[i];
        if (!p->pid) continue;
        p->npins = 0;
        for (uint32_t k = 0; k < SL_CACHE_PINS; k++) {
            uint32_t r = p->pin[k];
            if (r == SL_NONE) continue;
            if (r < h->max_entries && (R[r].state == REC_READY || R[r].state == REC_DOOMED)) {
                R[r].pins++;
                p->npins++;
            } else {
                p->pin[k] = SL_NONE;
            }
        }
    }
}

/* The index from the records alone. The warm stack serves as the claim
 * map (it is rebuilt last, from the links). */
void sl__seg_recover(sl__seg *s) {
    sl__chdr *h = s->h;
    sl__crec *R = sl__crecs(h);
    uint32_t *claim = sl__cwarm(h), *links = sl__clinks(h);
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++)
        if (slot_dead(s, i)) memset(&sl__cprocs(h)[i], 0, sizeof(sl__cproc));
    for (uint64_t b = 0; b < h->nblocks; b++) claim[b] = SL_NONE;
    for (uint64_t k = 0; k < h->keys; k++) sl__ckeys(h)[k] = SL_NONE;
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++) /* live processes punching: their chains stay theirs */
        if (sl__cprocs(h)[i].pid) claim_punch(h, &sl__cprocs(h)[i], claim);
    for (uint32_t r = 0; r < h->max_entries; r++)
        if (R[r].state != REC_FREE && !keep_record(h, r, claim)) memset(&R[r], 0, sizeof R[r]);
    recount_pins(h);
    h->nfrec = h->heap_len = h->entries = 0;
    h->charged = 0;
    for (uint32_t r = h->max_entries; r-- > 0;) {
        if (R[r].state == REC_DOOMED && R[r].pins == 0) { /* nobody reads it any more */
            for (uint64_t b = R[r].loc; b != BLK_END; b = links[b]) claim[b] = SL_NONE;
            memset(&R[r], 0, sizeof R[r]);
        }
        if (R[r].state == REC_FREE) {
            sl__cfrec(h)[h->nfrec++] = r;
            continue;
        }
        h->charged += R[r].charge;
        if (R[r].state == REC_READY) {
            sl__cheap(h)[h->heap_len++] = r;
            h->entries++;
        }
    }
    sl__seg_heap_build(h);
    for (uint64_t b = 0; b < h->nblocks; b++) /* unclaimed blocks are free: cold, since a dead puncher */
        if (claim[b] == SL_NONE) links[b] = BLK_COLD; /* may have left any of them without its page */
    restack_free(h);
    atomic_fetch_add(&h->recoveries, 1);
}

/* ---- the segment ---------------------------------------------------------------------------- */

/* The segment's file under /dev/shm still is this fd's file. */
static int same_file(const char *name, int fd) {
    char path[128];
    struct stat a, b;
    snprintf(path, sizeof path, SHM_DIR "%s", name);
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* Nobody uses the segment: no flock on it (every attached process holds
 * one; a creator holds it exclusively until it has registered) and no
 * process slot locked. Kernel facts alone: its bytes are not read. */
static int unused(int fd) {
    return flock(fd, LOCK_EX | LOCK_NB) == 0 && !slots_held(fd, 0, SL_CACHE_PROCS);
}

/* A segment of this user that nobody uses is stale, complete or not: a
 * creator that died before it finished leaves one nobody will ever
 * finish (a live creator holds LOCK_EX from before it sizes the file;
 * one caught between its open and its lock finds the file unlinked and
 * starts again). Takes the flock when it says yes. */
static int stale(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_uid == geteuid() && S_ISREG(st.st_mode) && unused(fd);
}

/* Unlink every stale node cache segment in /dev/shm (any dataset, any job). */
static void reclaim_stale(void) {
    DIR *d = opendir(SHM_DIR);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0) continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
        if (fd < 0) continue;
        if (stale(fd) && same_file(name, fd)) shm_unlink(name);
        close(fd); /* drops the lock */
    }
    closedir(d);
}

static int check_room(uint64_t bytes, char *err, size_t errlen) {
    struct statvfs v;
    if (statvfs(SHM_DIR, &v) != 0) return 0; /* fallocate will tell */
    uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
    if (avail >= bytes) return 0;
    char a[32], b[32];
    sl__msg(err, errlen, "node cache: " SHM_DIR " has %s free, the cache needs %s: give it less (cache=) "
            "or /dev/shm more (docker --shm-size, mount -o remount,size=)", sl__fmt_bytes(avail, a, sizeof a),
            sl__fmt_bytes(bytes, b, sizeof b));
    return SL_ENOMEM;
}

/* ---- the memory cgroup ------------------------------------------------------ */

/* Room left under one cgroup folder's memory limit, counting its
 * reclaimable page cache (file pages less shmem) as room; -1 where the
 * folder sets no limit or its files do not read. */
static int folder_room(const char *dir, int v1, uint64_t *room, uint64_t *limit) {
    char p[PATH_MAX + 64], buf[8192]; /* memory.stat: about 2 KiB */
    size_t len;
    int lim;
    uint64_t use, file = 0, shmem = 0;
    snprintf(p, sizeof p, "%s/%s", dir, v1 ? "memory.limit_in_bytes" : "memory.max");
    if (sl__read_text(p, buf, sizeof buf, &len) || sl__cgroup_parse_limit(buf, &lim, limit) || !lim) return -1;
    snprintf(p, sizeof p, "%s/%s", dir, v1 ? "memory.usage_in_bytes" : "memory.current");
    if (sl__read_text(p, buf, sizeof buf, &len) || sl__cgroup_parse_limit(buf, &lim, &use) || !lim) return -1;
    snprintf(p, sizeof p, "%s/memory.stat", dir);
    if (sl__read_text(p, buf, sizeof buf, &len) == 0) { /* absent keys stay 0 */
        sl__cgroup_parse_kv(buf, len, v1 ? "total_cache" : "file", &file);
        sl__cgroup_parse_kv(buf, len, v1 ? "total_shmem" : "shmem", &shmem);
    }
    uint64_t reclaimable = file > shmem ? file - shmem : 0;
    *room = use - SL_MIN(use, reclaimable) >= *limit ? 0 : *limit - (use - SL_MIN(use, reclaimable));
    return 0;
}

/* The least room under the memory limits of this process's cgroup and its
 * ancestors up to the hierarchy's mount point (v2 where it has the memory
 * controller, else v1); *room = UINT64_MAX where none is set. where names
 * the tightest folder. */
static void cgroup_room(uint64_t *room, uint64_t *limit, char *where, size_t len) {
    char dir[PATH_MAX], mnt[PATH_MAX];
    int version;
    *room = *limit = UINT64_MAX;
    if (sl__cgroup_dir("/proc", 0, "memory", &version, dir, mnt, sizeof dir)) return;
    do {
        uint64_t r, l;
        if (folder_room(dir, version == 1, &r, &l) == 0 && r < *room) {
            *room = r, *limit = l;
            snprintf(where, len, "%s", dir);
        }
    } while (sl__cgroup_up(dir, mnt));
}

/* /dev/shm and the memory cgroup must both hold the segment: a tmpfs page
 * past a cgroup's limit is an OOM kill, not an error. */
static int check_cgroup(uint64_t bytes, char *err, size_t errlen) {
    uint64_t room, limit;
    char where[PATH_MAX] = "", a[32], b[32], c[32];
    cgroup_room(&room, &limit, where, sizeof where);
    if (room >= bytes) return 0;
    sl__msg(err, errlen, "node cache: the memory cgroup %s (limit %s) has %s of room, the cache needs %s: "
            "give it less (cache=)", where, sl__fmt_bytes(limit, a, sizeof a), sl__fmt_bytes(room, b, sizeof b),
            sl__fmt_bytes(bytes, c, sizeof c));
    return SL_ENOMEM;
}

static int init_mutex(pthread_mutex_t *mu) {
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a)) return SL_ESYS;
    int rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) ||
             pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) || pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
    return rc ? SL_ESYS : 0;
}

/* Size, reserve, map and initialize a segment we just created (LOCK_EX
 * held), and register in it. */
static int create_segment(sl__seg *s, const sl__seg_geom *g, char *err, size_t errlen) {
    sl__chdr t;
    memset(&t, 0, sizeof t);
    sl__seg_layout(&t, g->keys, g->entries, g->nblocks, g->block_size, 1);
    int rc = check_room(t.region_bytes, err, errlen);
    if (rc == 0) rc = check_cgroup(t.region_bytes, err, errlen);
    if (rc) return rc;
    rc = posix_fallocate(s->fd, 0, (off_t)t.region_bytes);
    if (rc) {
        char a[32];
        sl__msg(err, errlen, "node cache: cannot reserve %s in " SHM_DIR ": %s",
                sl__fmt_bytes(t.region_bytes, a, sizeof a), strerror(rc));
        return rc == ENOSPC ? SL_ENOMEM : SL_ESYS;
    }
    sl__chdr *h = mmap(NULL, (size_t)t.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (h == MAP_FAILED) {
        sl__msg(err, errlen, "node cache: mmap of %s failed: %s", s->name, strerror(errno));
        return SL_ESYS;
    }
    s->h = h;
    s->map_len = t.region_bytes;
    memcpy(h, &t, sizeof t);
    if (init_mutex(&h->mu)) return SL_ESYS;
    sl__seg_format(h);
    h->total_capacity = g->capacity;
    h->cap_max = h->capacity = g->nblocks * g->block_size;
    h->epoch_len = g->epoch_len;
    h->refresh_epoch = UINT64_MAX; /* SL_CACHE_NEVER: none yet */
    rc = register_self(s, err, errlen); /* an empty table: fails only without OFD locks */
    if (rc) return rc;
    atomic_store_explicit(&h->magic, SL_CACHE_MAGIC, memory_order_release);
    return 0;
}

/* The segment another process made must match what we would make. */
static int check_geometry(sl__seg *s, const sl__chdr *h, const sl__seg_geom *g, char *err, size_t errlen) {
    if (h->total_capacity == g->capacity && h->keys == g->keys && h->max_entries == g->entries &&
        h->nblocks == g->nblocks && h->block_size == g->block_size && h->epoch_len == g->epoch_len)
        return 0;
    sl__msg(err, errlen, "node cache %s was made for capacity %llu, %u samples, %u-byte blocks; this process asks "
            "for capacity %llu, %u samples, %u-byte blocks: every rank must pass the same cache settings",
            s->name, (unsigned long long)h->total_capacity, h->keys, h->block_size,
            (unsigned long long)g->capacity, g->keys, g->block_size);
    return SL_ESTATE;
}

/* A segment this process must not use: the reason, that it is not
 * joined, and how to remove it (how: "remove it: rm", ...). */
static int refuse(const char *name, const char *how, char *err, size_t errlen, const char *why) {
    sl__msg(err, errlen, "node cache " SHM_DIR "%s %s: it is not joined. If no job uses it, %s " SHM_DIR "%s",
            name, why, how, name);
    return SL_ESTATE;
}
#define RM "remove it: rm"

/* The file itself: a regular file of this user that no other user may
 * read or write. */
static int check_file(const char *name, const struct stat *st, char *err, size_t errlen) {
    char why[160];
    if (S_ISDIR(st->st_mode)) return refuse(name, "remove it: rm -r", err, errlen, "is a folder");
    if (!S_ISREG(st->st_mode)) return refuse(name, RM, err, errlen, "is not a regular file");
    if (st->st_uid != geteuid()) {
        snprintf(why, sizeof why, "belongs to uid %u, not to this user (uid %u)", (unsigned)st->st_uid,
                 (unsigned)geteuid());
        return refuse(name, "its owner or root can remove it: rm", err, errlen, why);
    }
    if (st->st_mode & 077) {
        snprintf(why, sizeof why, "has mode %04o: other users may read or write it (a node cache is 0600)",
                 (unsigned)(st->st_mode & 07777));
        return refuse(name, RM, err, errlen, why);
    }
    return 0;
}

/* The header h (a copy) describes a file of file_bytes: this version, and
 * every offset and size what the layout of its own parameters gives, the
 * region exactly the file. NULL, or what is wrong. */
static const char *bad_header(const sl__chdr *h, uint64_t file_bytes, char *why, size_t len) {
    if (h->version != SL_CACHE_VERSION) {
        snprintf(why, len, "was made by another version of sluice (segment version %u; this one reads %u)",
                 h->version, SL_CACHE_VERSION);
        return why;
    }
    uint32_t bs = h->block_size;
    if (h->crec_size != sizeof(sl__crec) || h->cproc_size != sizeof(sl__cproc) || h->shared != 1 ||
        h->procs != SL_CACHE_PROCS || !h->keys || !h->max_entries || h->max_entries > h->keys || bs < 512 ||
        bs > (1u << 20) || (bs & (bs - 1)) || !h->nblocks || h->nblocks > SL_CACHE_MAX_BLOCKS) {
        snprintf(why, len, "has a header that is not a node cache's (%u samples, %u entries, %llu blocks of %u bytes)",
                 h->keys, h->max_entries, (unsigned long long)h->nblocks, bs);
        return why;
    }
    sl__chdr t;
    memset(&t, 0, sizeof t);
    sl__seg_layout(&t, h->keys, h->max_entries, h->nblocks, bs, 1);
    if (t.off_keys != h->off_keys || t.off_recs != h->off_recs || t.off_heap != h->off_heap ||
        t.off_frec != h->off_frec || t.off_links != h->off_links || t.off_warm != h->off_warm ||
        t.off_cold != h->off_cold || t.off_procs != h->off_procs || t.off_blocks != h->off_blocks ||
        t.index_bytes != h->index_bytes || t.region_bytes != h->region_bytes || h->total_capacity < h->region_bytes ||
        h->cap_max != h->nblocks * bs) {
        snprintf(why, len, "has a header whose offsets and sizes do not follow from its %u samples, %u entries "
                 "and %llu blocks", h->keys, h->max_entries, (unsigned long long)h->nblocks);
        return why;
    }
    if (h->region_bytes != file_bytes) {
        snprintf(why, len, "has a header for %llu bytes in a file of %llu", (unsigned long long)h->region_bytes,
                 (unsigned long long)file_bytes);
        return why;
    }
    return NULL;
}

/* The index's counters (mu held) are within the header's sizes. */
static int counts_sane(const sl__chdr *h) {
    return h->heap_len <= h->max_entries && h->nfrec <= h->max_entries && h->entries == h->heap_len &&
           h->nwarm <= h->nblocks && h->ncold <= h->nblocks - h->nwarm && h->capacity <= h->cap_max &&
           h->charged <= h->cap_max;
}

/* Wait for the creator (LOCK_SH), check the file and its header, map,
 * check and register. RETRY when the segment was unlinked meanwhile;
 * UNFINISHED when it holds no complete header (a creator holds LOCK_EX
 * until it has stored its magic, so one that died, or not a node cache). */
static int join_segment(sl__seg *s, const sl__seg_geom *g, char *err, size_t errlen) {
    struct stat st;
    if (flock(s->fd, LOCK_SH) != 0 || fstat(s->fd, &st) != 0) return SL_ESYS;
    if (st.st_nlink == 0) return RETRY;
    int rc = check_file(s->name, &st, err, errlen);
    if (rc) return rc;
    sl__chdr hc;
    if ((uint64_t)st.st_size < sizeof hc || pread(s->fd, &hc, sizeof hc, 0) != (ssize_t)sizeof hc ||
        hc.magic != SL_CACHE_MAGIC)
        return UNFINISHED;
    char why[200];
    if (bad_header(&hc, (uint64_t)st.st_size, why, sizeof why)) return refuse(s->name, RM, err, errlen, why);
    if ((rc = check_geometry(s, &hc, g, err, errlen))) return rc;
    sl__chdr *h = mmap(NULL, (size_t)hc.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (h == MAP_FAILED) return SL_ESYS;
    s->h = h; /* this user's alone (checked above): its header is checked once */
    s->map_len = hc.region_bytes;
    sl__seg_lock(s);
    if (!counts_sane(h)) {
        sl__seg_unlock(s);
        return refuse(s->name, RM, err, errlen, "has an index whose counts exceed its sizes");
    }
    sl__seg_reap(s);
    rc = register_self(s, err, errlen);
    sl__seg_unlock(s);
    return rc;
}

/* The segment exists but cannot be opened: say why in its terms. */
static int open_refused(const char *name, char *err, size_t errlen) {
    int e = errno;
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, SHM_DIR "%s", name);
    if (e == ELOOP) return refuse(name, RM, err, errlen, "is a symbolic link");
    if (lstat(path, &st) == 0 && check_file(name, &st, err, errlen)) return SL_ESTATE;
    sl__msg(err, errlen, "node cache %s: %s", path, strerror(e));
    return e == EMFILE || e == ENFILE ? SL_EAGAIN : SL_ESYS;
}

static void close_segment(sl__seg *s) {
    if (s->h) munmap(s->h, (size_t)s->map_len);
    if (s->fd >= 0) close(s->fd);
    s->h = NULL;
    s->fd = -1;
}

/* Create or join s->name; 0 with this process registered. */
static int open_segment(sl__seg *s, const sl__seg_geom *g, char *err, size_t errlen) {
    reclaim_stale();
    /* A segment can vanish between our open and our lock (its last rank
     * left, or a failed creator unlinked it): try again, with a short
     * sleep between tries (1 ms doubling to 50 ms), for up to 10 s: a
     * burst of instant retries ran out while a slow creator (a sanitizer
     * build on a busy machine) was still at work. */
    uint64_t give_up = sl__now_ns() + 10ull * 1000000000u;
    useconds_t pause = 1000;
    int unfinished = 0;
    for (int attempt = 0; attempt == 0 || sl__now_ns() < give_up; attempt++) {
        if (attempt) {
            usleep(pause);
            pause = pause * 2 > 50000 ? 50000 : pause * 2;
        }
        s->fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        int created = s->fd >= 0, rc;
        if (created) {
            struct stat st;
            rc = flock(s->fd, LOCK_EX) || fstat(s->fd, &st) ? SL_ESYS : st.st_nlink == 0 ? RETRY : 0;
            if (rc == 0) rc = fchmod(s->fd, 0600) ? SL_ESYS : 0; /* whatever the umask left */
            if (rc == 0) rc = create_segment(s, g, err, errlen);
            if (rc == 0) rc = flock(s->fd, LOCK_SH) ? SL_ESYS : 0; /* registered: never taken for stale */
            if (rc && rc != RETRY) shm_unlink(s->name);
        } else if (errno == EEXIST) {
            s->fd = shm_open(s->name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
            rc = s->fd >= 0 ? join_segment(s, g, err, errlen) : errno == ENOENT ? RETRY : open_refused(s->name, err, errlen);
        } else {
            rc = open_refused(s->name, err, errlen);
        }
        if (rc == 0) return 0;
        close_segment(s);
        if (rc == UNFINISHED && ++unfinished < 8) rc = RETRY; /* a dead creator's: reclaim_stale takes it */
        if (rc == UNFINISHED)
            return refuse(s->name, RM, err, errlen, "holds no complete node cache (its creator died, or it is not "
                          "sluice's) and another process keeps it open");
        if (rc == RETRY) {
            reclaim_stale();
            continue;
        }
        if (rc == SL_ESYS && (!err || !*err))
            sl__msg(err, errlen, "node cache " SHM_DIR "%s: %s", s->name, strerror(errno));
        return rc;
    }
    sl__msg(err, errlen, "node cache " SHM_DIR "%s: the segment kept vanishing while attaching", s->name);
    return SL_ESYS;
}

int sl__seg_attach(sl__seg *s, const char *name, const sl__seg_geom *g, char *err, size_t errlen) {
    s->proc = SL_NONE; /* not registered yet: reaping spares no slot as ours */
    if (strlen(name) >= sizeof s->name || name[0] != '/' || strchr(name + 1, '/')) {
        sl__msg(err, errlen, "node cache name \"%s\" is not \"/name\" (under %zu bytes)", name, sizeof s->name);
        return SL_EINVAL;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    if (pthread_mutex_init(&s->punch_mu, NULL)) return SL_ESYS;
    int rc = open_segment(s, g, err, errlen);
    if (rc) pthread_mutex_destroy(&s->punch_mu);
    return rc;
}

void sl__seg_detach(sl__seg *s) {
    sl__seg_lock(s);
    unregister_self(s);
    sl__seg_unlock(s);
    pthread_mutex_destroy(&s->punch_mu);
    munmap(s->h, (size_t)s->map_len);
    s->h = NULL;
    flock(s->fd, LOCK_UN);
    /* last one out: nobody else holds a lock on it */
    if (unused(s->fd) && same_file(s->name, s->fd)) shm_unlink(s->name);
    close_segment(s);
}

/* ---- seen from outside (sluice top) ----------------------------------------------- */

/* One segment's counters, mapped read-only and read without its lock (a
 * snapshot for display: the plain fields may be mid-update). 0, or -1 for
 * a segment that is not (yet) a node cache. */
static int peek(int fd, const char *name, sl__cache_seg *s) {
    struct stat st;
    sl__chdr hc;
    char why[200];
    size_t nlen = strlen(name);
    if (nlen >= sizeof s->name || fstat(fd, &st) != 0 || (uint64_t)st.st_size < sizeof hc ||
        pread(fd, &hc, sizeof hc, 0) != (ssize_t)sizeof hc || hc.magic != SL_CACHE_MAGIC ||
        bad_header(&hc, (uint64_t)st.st_size, why, sizeof why))
        return -1;
    sl__chdr *h = mmap(NULL, (size_t)hc.region_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return -1;
    memset(s, 0, sizeof *s);
    memcpy(s->name, name, nlen + 1);
    s->segment_bytes = (uint64_t)st.st_size;
    s->resident_bytes = (uint64_t)st.st_blocks * 512;
    s->capacity = h->capacity, s->bytes = h->charged, s->entries = h->entries;
    s->hits = atomic_load(&h->hits), s->misses = atomic_load(&h->misses);
    s->evictions = atomic_load(&h->evictions), s->storage_bytes_read = atomic_load(&h->storage_read);
    const sl__cproc *procs = (const sl__cproc *)((const char *)h + hc.off_procs); /* the checked offset */
    for (uint32_t i = 0; i < SL_CACHE_PROCS; i++)
        if (procs[i].pid && slots_held(fd, i, 1) && s->processes < SL_CACHE_SEG_PIDS)
            s->pids[s->processes++] = procs[i].pid;
    munmap(h, (size_t)hc.region_bytes);
    return 0;
}

size_t sl__cache_shm_list(sl__cache_seg *out, size_t max) {
    DIR *d = opendir(SHM_DIR);
    if (!d) return 0;
    size_t n = 0;
    for (struct dirent *e; n < max && (e = readdir(d));) {
        if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0) continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        int fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
        if (fd < 0) continue;
        if (peek(fd, name, &out[n]) == 0) n++;
        close(fd);
    }
    closedir(d);
    return n;
}

/* ---- records, the lock --------------------------------------------------------- */

void sl__seg_rec_free(sl__seg *s, uint32_t r) {
    sl__chdr *h = s->h;
    sl__crec *rec = &sl__crecs(h)[r];
    if (s->shared && rec->loc != BLK_END) sl__seg_blocks_give(s, rec->loc);
    h->charged -= rec->charge;
    rec->state = REC_FREE;
    atomic_thread_fence(memory_order_seq_cst);
    memset(rec, 0, sizeof *rec);
    sl__cfrec(h)[h->nfrec++] = r;
}

void sl__seg_lock(sl__seg *s) {
    int rc = pthread_mutex_lock(&s->h->mu);
    if (rc == EOWNERDEAD) { /* a process died holding it: the index may be half-changed */
        sl__seg_recover(s);
        pthread_mutex_consistent(&s->h->mu);
    }
}

void sl__seg_unlock(sl__seg *s) { pthread_mutex_unlock(&s->h->mu); }
