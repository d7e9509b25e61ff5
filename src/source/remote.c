/*
 * Remote data as a source (remote.h; docs/remote.md):
 * the shards under an s3:// prefix, a manifest's text,
 * a shard's scan through windows of ranged reads, and the files a
 * manifest names. The requests themselves are the I/O layer's (io/).
 *
 * A shard is scanned in windows (SL__SCAN_WINDOW bytes, two of them,
 * counted under SL_MEM_INDEX while it runs): the tar scanner asks for
 * headers in order; a read inside the window is a copy, one past it moves
 * the window. While the reads run on densely (members smaller than a
 * window), the next window is fetched while the scanner works on this one,
 * so a shard of small members streams at the speed of one connection; a
 * read that jumps far ahead (a large member's data skipped) stops that, and
 * each header then costs one request of its own, never the member's bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/util.h"
#include "io/engine.h"
#include "io/s3.h"
#include "io/url.h"
#include "source/remote.h"
#include "source/tar.h"
#include "source/wds.h"

typedef unsigned long long ull;

/* ---- shards under an s3:// prefix ------------------------------------------------ */

typedef struct lister {
    int (*add)(void *ctx, const char *name, size_t len);
    void *ctx;
    char bucket[80];  /* "s3://bucket/" */
    char sub[128];    /* the first subfolder met */
    char name[SL__URL_MAX];
} lister;

static int list_entry(void *ctx, const sl__s3_entry *e) {
    lister *l = ctx;
    size_t n = e->key_len;
    if (n <= 4 || strcasecmp(e->key + n - 4, ".tar")) return 0; /* other objects: ignored, as in a folder */
    int w = snprintf(l->name, sizeof l->name, "%s%s", l->bucket, e->key);
    if (w < 0 || (size_t)w >= sizeof l->name) return SL_ELIMIT;
    return l->add(l->ctx, l->name, (size_t)w);
}

static int list_sub(void *ctx, const char *p, size_t n) {
    lister *l = ctx;
    if (!l->sub[0]) snprintf(l->sub, sizeof l->sub, "%.*s", (int)SL_MIN(n, (size_t)120), p);
    return 0;
}

int sl__remote_list_shards(sl__source *s, const char *prefix, int (*add)(void *ctx, const char *name, size_t len),
                           void *ctx, char *err, size_t errlen) {
    sl__url u;
    if (sl__url_parse(prefix, &u, err, errlen)) return SL_EINVAL;
    lister l = {.add = add, .ctx = ctx};
    snprintf(l.bucket, sizeof l.bucket, "s3://%.*s/", (int)u.auth_len, u.auth);
    /* the prefix as a folder: "s3://b/dir" lists "dir/" */
    char p[SL__URL_MAX];
    size_t n = strlen(prefix);
    int w = snprintf(p, sizeof p, "%s%s", prefix, n && prefix[n - 1] != '/' && u.path_len > 1 ? "/" : "");
    if (w < 0 || (size_t)w >= sizeof p) return SL_EOVERFLOW;
    int rc = sl__obj_list(s->io, p, 1, s->b, SL_MEM_INDEX, list_entry, list_sub, &l, err, errlen);
    if (rc == SL_ELIMIT) sl__msg(err, errlen, "%.300s: a shard's name is longer than %d bytes", prefix, SL__URL_MAX);
    if (!rc && l.sub[0]) {
        sl__msg(err, errlen,
                "%.300s holds subfolders (%s...): a folder of class folders (ImageFolder) is not read over S3; "
                "write a .jsonl/.csv manifest of its files, or pack it into shards (sluice pack)",
                p, l.sub);
        rc = SL_EINVAL;
    }
    return rc;
}

/* ---- a manifest's text ------------------------------------------------------------ */

int sl__remote_text(sl__source *s, const char *url, char **text, uint64_t *size, char *err, size_t errlen) {
    sl__obj o;
    int rc = sl__obj_read_all(s->io, url, s->b, SL_MEM_INDEX, SIZE_MAX / 2, text, size, err, errlen, &o);
    if (!rc) sl__remote_note_version(s, &o);
    return rc;
}

void sl__remote_note_version(sl__source *s, const sl__obj *o) {
    uint64_t v[2] = {s->version, o->size};
    s->version = sl__hash64(o->etag, strlen(o->etag), sl__hash64(v, sizeof v, 0x5e1));
}

/* ---- scanning a shard through windows --------------------------------------------- */

struct sl__scan_rd {
    sl__source *s;
    sl__obj *o;
    uint64_t size, win;
    uint8_t *buf[2];
    int cur;                  /* buf[cur] holds [beg, beg + len) */
    uint64_t beg, len;
    sl__io_req pre;           /* the next window, into buf[!cur] (pre_on) */
    int pre_on;
};

/* Fetch [off, off + win) (or to the end) into buf[cur]. */
static int fetch(sl__scan_rd *rd, uint64_t off, char *err, size_t errlen) {
    uint64_t n = SL_MIN(rd->win, rd->size - off);
    int rc = sl__obj_read(rd->o, off, rd->buf[rd->cur], n, err, errlen);
    if (rc) return rc;
    rd->beg = off, rd->len = n;
    return 0;
}

static void prefetch(sl__scan_rd *rd) {
    uint64_t at = rd->beg + rd->len;
    if (at >= rd->size) return;
    memset(&rd->pre, 0, sizeof rd->pre);
    rd->pre.name = rd->o->name;
    rd->pre.off = at;
    rd->pre.len = SL_MIN(rd->win, rd->size - at);
    rd->pre.dst = rd->buf[!rd->cur];
    rd->pre.etag = rd->o->etag;
    sl__io_submit(rd->o->io, &rd->pre);
    rd->pre_on = 1;
}

static void prefetch_drop(sl__scan_rd *rd) {
    if (rd->pre_on) sl__io_abandon(rd->o->io, &rd->pre);
    rd->pre_on = 0;
}

/* Make the window hold off. */
static int move_to(sl__scan_rd *rd, uint64_t off, char *err, size_t errlen) {
    uint64_t end = rd->beg + rd->len;
    if (rd->pre_on && off >= rd->pre.off && off < rd->pre.off + rd->pre.len) {
        int rc = sl__io_wait(rd->o->io, &rd->pre);
        rd->pre_on = 0;
        if (rc) {
            sl__msg(err, errlen, "%.300s: %s", rd->o->name, rd->pre.reason);
            return rc;
        }
        rd->cur = !rd->cur;
        rd->beg = rd->pre.off, rd->len = rd->pre.len;
        prefetch(rd);
        return 0;
    }
    prefetch_drop(rd);
    int rc = fetch(rd, off, err, errlen);
    if (rc) {
        char why[200];
        snprintf(why, sizeof why, "%s", err);
        sl__msg(err, errlen, "%.300s: %s", rd->o->name, why);
        return rc;
    }
    if (off < end + rd->win / 2) prefetch(rd); /* dense: stream on */
    return 0;
}

static int scan_read(void *arg, uint64_t off, void *buf, size_t n, char *err, size_t errlen) {
    sl__scan_rd *rd = arg;
    uint8_t *p = buf;
    while (n) {
        if (off < rd->beg || off >= rd->beg + rd->len) {
            int rc = move_to(rd, off, err, errlen);
            if (rc) return rc;
            if (rd->len == 0) return SL_EIO;
        }
        size_t k = (size_t)SL_MIN((uint64_t)n, rd->beg + rd->len - off);
        memcpy(p, rd->buf[rd->cur] + (off - rd->beg), k);
        p += k, off += k, n -= k;
    }
    return 0;
}

static int remote_scan(sl__source *s, const char *name, sl__obj *o,
                       int (*scan)(void *ctx, sl__scan_rd *rd, uint64_t size, char *err, size_t errlen), void *ctx,
                       char *err, size_t errlen) {
    sl__scan_rd rd;
    memset(&rd, 0, sizeof rd);
    rd.s = s;
    rd.o = o;
    memset(o, 0, sizeof *o);
    o->io = s->io;
    o->name = name;
    /* two windows, smaller ones when the budget is tight */
    for (rd.win = SL__SCAN_WINDOW; rd.win >= (64 << 10); rd.win /= 4) {
        rd.buf[0] = sl__alloc(s->b, (size_t)rd.win, SL_MEM_INDEX);
        rd.buf[1] = rd.buf[0] ? sl__alloc(s->b, (size_t)rd.win, SL_MEM_INDEX) : NULL;
        if (rd.buf[1]) break;
        sl__free(s->b, rd.buf[0]);
        rd.buf[0] = NULL;
    }
    if (!rd.buf[1]) {
        sl__msg(err, errlen, "%.300s: no room in the budget to read the shard's headers (two windows of 64 KiB)", name);
        return SL_EBUDGET;
    }
    /* the first window: it tells the size and the version too */
    sl__io_req r;
    memset(&r, 0, sizeof r);
    r.name = name;
    r.len = rd.win;
    r.dst = rd.buf[0];
    r.upto = 1;
    r.retries = 3;
    sl__io_submit(s->io, &r);
    int rc = sl__io_wait(s->io, &r);
    if (rc) {
        sl__obj_explain(s->io, name, &r, err, errlen);
    } else {
        o->size = rd.size = r.size;
        snprintf(o->etag, sizeof o->etag, "%s", r.etag_out);
        sl__remote_note_version(s, o);
        rd.beg = 0, rd.len = r.got;
        if (rd.len == rd.win) prefetch(&rd);
        rc = scan(ctx, &rd, rd.size, err, errlen);
    }
    prefetch_drop(&rd);
    sl__free(s->b, rd.buf[0]);
    sl__free(s->b, rd.buf[1]);
    return rc;
}

/* ---- the node's records of shard scans ---------------------------------------------
 * A record holds what the tar scanner reported for one version of one shard
 * (every regular member: name, header offset, data offset, size) and the
 * bytes of the members of at most SL__RECORD_INLINE bytes (the labels
 * an index reads), so that a rank that finds it replays the scan through
 * the same grouper without reading the shard. Its file, in the folder
 * SLUICE_INDEX_CACHE names (default $XDG_CACHE_HOME/sluice/index, else
 * ~/.cache/sluice/index; "off": no records), is named by a hash of the
 * shard's URL, size and ETag (a shard without an ETag gets no record: its
 * version could not be told), written to a temporary name and renamed, and
 * checked whole before use (magic, the version it names, every length and
 * offset inside the file and the shard, a checksum): anything else is
 * ignored and the shard scanned again. An flock on NAME.lock is held while
 * a shard is looked up or scanned, so the ranks of a node that start
 * together scan each shard once (the kernel drops the lock of a rank that
 * dies). The layout is this machine's (native byte order): records are not
 * carried between machines.
 *
 *   "SLIDX002" | u64 size | char etag[96] | u32 url_len | url | u32 trailer |
 *   u64 members | { u32 name_len, u32 inline_len, u64 header_offset,
 *   u64 offset, u64 size, name, inline bytes } ... | u64 hash of all before
 * (trailer: the shard ended with sluice pack's trailer, which the scan
 * checked; members: those the grouper got, the trailer not among them). */
#define SL__RECORD_INLINE 32
#define RECORD_MAGIC "SLIDX002"
#define RECORD_MAX ((uint64_t)256 << 20)

typedef struct record {
    int on;                   /* records are kept */
    int lockfd;               /* the lock held (-1: none) */
    char path[4096];          /* NAME.idx */
    /* the scan's record being written (budgeted) */
    uint8_t *buf;
    uint64_t len, cap;
    int failed;               /* no room to record: the scan goes on unrecorded */
} record;

static int record_dir(char *out, size_t len) {
    const char *d = getenv("SLUICE_INDEX_CACHE");
    if (d && (!*d || !strcmp(d, "off") || !strcmp(d, "0"))) return -1;
    int n;
    if (d) n = snprintf(out, len, "%s", d);
    else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME")) n = snprintf(out, len, "%s/sluice/index", getenv("XDG_CACHE_HOME"));
    else if (getenv("HOME") && *getenv("HOME")) n = snprintf(out, len, "%s/.cache/sluice/index", getenv("HOME"));
    else return -1;
    if (n < 0 || (size_t)n >= len) return -1;
    /* mkdir -p, 0700 */
    for (char *p = out + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(out, 0700);
            *p = '/';
        }
    struct stat st;
    return mkdir(out, 0700) == 0 || (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) ? 0 : -1;
}

int sl__remote_records_on(void) {
    char dir[3000];
    return record_dir(dir, sizeof dir) == 0;
}

/* Look up the record of shard name (o: its size and ETag) with its lock
 * held. rec->on 0: no record will be kept (no folder, no ETag). */
static void record_lock(const char *name, const sl__obj *o, record *rec) {
    memset(rec, 0, sizeof *rec);
    rec->lockfd = -1;
    char dir[3000];
    if (!o->etag[0] || record_dir(dir, sizeof dir)) return;
    uint64_t h = sl__hash64(name, strlen(name), 0x1dc5);
    h = sl__hash64(&o->size, sizeof o->size, h);
    h = sl__hash64(o->etag, strlen(o->etag), h);
    char lock[4096];
    snprintf(rec->path, sizeof rec->path, "%s/%016llx.idx", dir, (ull)h);
    snprintf(lock, sizeof lock, "%s/%016llx.lock", dir, (ull)h);
    rec->lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (rec->lockfd < 0) return;
    int rc;
    do rc = flock(rec->lockfd, LOCK_EX);
    while (rc && errno == EINTR);
    if (rc) {
        close(rec->lockfd);
        rec->lockfd = -1;
        return;
    }
    rec->on = 1;
}

static void record_unlock(sl__source *s, record *rec) {
    if (rec->lockfd >= 0) {
        flock(rec->lockfd, LOCK_UN);
        close(rec->lockfd);
    }
    rec->lockfd = -1;
    sl__free(s->b, rec->buf);
    rec->buf = NULL;
}

static int record_put(sl__source *s, record *rec, const void *p, size_t n) {
    if (rec->failed) return 0;
    if (rec->len + n > rec->cap) {
        uint64_t cap = rec->cap ? rec->cap : 64 << 10;
        while (cap < rec->len + n) cap *= 2;
        uint8_t *q = cap <= RECORD_MAX ? sl__realloc(s->b, rec->buf, (size_t)cap, SL_MEM_INDEX) : NULL;
        if (!q) { /* a record is a saving, never a requirement */
            rec->failed = 1;
            return 0;
        }
        rec->buf = q;
        rec->cap = cap;
    }
    memcpy(rec->buf + rec->len, p, n);
    rec->len += n;
    return 0;
}

/* The scan, recorded: each member the grouper gets goes to the record too
 * (sl__wds_scan_read's tap). */
typedef struct tap {
    sl__source *s;
    record *rec;
    sl__scan_rd *rd;
    uint64_t members;
} tap;

static int tap_member(void *arg, const sl__tar_member *m, char *err, size_t errlen) {
    tap *t = arg;
    if (!t->rec->on) return 0;
    uint8_t small[SL__RECORD_INLINE];
    uint32_t hdr[2] = {(uint32_t)m->name_len, m->size <= SL__RECORD_INLINE ? (uint32_t)m->size : 0};
    uint64_t at[3] = {m->header_offset, m->offset, m->size};
    if (hdr[1] && scan_read(t->rd, m->offset, small, hdr[1], err, errlen)) return SL_EIO;
    record_put(t->s, t->rec, hdr, sizeof hdr);
    record_put(t->s, t->rec, at, sizeof at);
    record_put(t->s, t->rec, m->name, m->name_len);
    record_put(t->s, t->rec, small, hdr[1]);
    t->members++;
    return 0;
}

typedef struct shard_job {
    sl__source *s;
    record *rec;
    sl__wds_sample_fn emit;
    void *ctx;
    sl__tar_read_fn *read;
    void **rctx;
    sl__wds_stats *st;
} shard_job;

static int scan_recorded(void *arg, sl__scan_rd *rd, uint64_t size, char *err, size_t errlen) {
    shard_job *j = arg;
    *j->read = scan_read; /* labels read through the windows */
    *j->rctx = rd;
    if (j->rec->on) { /* the record's head: the version it names; the trailer flag and the count, set at the end */
        uint32_t ul = (uint32_t)strlen(rd->o->name), zero4 = 0;
        uint64_t zero = 0;
        record_put(j->s, j->rec, RECORD_MAGIC, 8);
        record_put(j->s, j->rec, &size, 8);
        record_put(j->s, j->rec, rd->o->etag, sizeof rd->o->etag);
        record_put(j->s, j->rec, &ul, 4);
        record_put(j->s, j->rec, rd->o->name, ul);
        record_put(j->s, j->rec, &zero4, 4);
        record_put(j->s, j->rec, &zero, 8);
    }
    uint64_t count_at = j->rec->len - 8;
    tap t = {j->s, j->rec, rd, 0};
    int rc = sl__wds_scan_read(scan_read, rd, size, j->s->b, j->emit, j->ctx, tap_member, &t, j->st, err, errlen);
    if (!rc && j->rec->on && !j->rec->failed) {
        uint32_t trailer = (uint32_t)j->st->trailer;
        memcpy(j->rec->buf + count_at - 4, &trailer, 4);
        memcpy(j->rec->buf + count_at, &t.members, 8);
    }
    return rc;
}

/* Write the record (a temporary name, then renamed: readers see it whole or not at all). */
static void record_write(sl__source *s, record *rec) {
    if (!rec->on || rec->failed || !rec->buf) return;
    uint64_t h = sl__hash64(rec->buf, (size_t)rec->len, 0x1dc5);
    record_put(s, rec, &h, 8);
    if (rec->failed) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", rec->path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    uint64_t done = 0;
    while (done < rec->len) {
        ssize_t w = write(fd, rec->buf + done, (size_t)(rec->len - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (uint64_t)w;
    }
    if (close(fd) == 0 && done == rec->len) rename(tmp, rec->path);
    else unlink(tmp);
}

/* A record read back: its members in turn (inline bytes for the labels). */
typedef struct replay {
    const uint8_t *p, *end;
    const char *name;
    uint64_t size;
} replay;

/* Label reads during a replay: the member's inline bytes. */
typedef struct replay_rd {
    const uint8_t *base;      /* the record */
    int trailer;              /* the shard ends with a trailer (checked when it was scanned) */
    uint64_t n;               /* members */
    const uint8_t *first;     /* the first member's entry */
    const uint8_t *end;
} replay_rd;

/* Walk the entries from e: the one whose data starts at off with its inline bytes. */
static int replay_read(void *arg, uint64_t off, void *buf, size_t n, char *err, size_t errlen) {
    replay_rd *r = arg;
    const uint8_t *e = r->first;
    for (uint64_t k = 0; k < r->n; k++) {
        uint32_t hdr[2];
        uint64_t at[3];
        memcpy(hdr, e, 8);
        memcpy(at, e + 8, 24);
        if (at[1] == off && hdr[1] >= n) {
            memcpy(buf, e + 32 + hdr[0], n);
            return 0;
        }
        e += 32 + hdr[0] + hdr[1];
    }
    sl__msg(err, errlen, "tar: the record holds no bytes at offset %llu", (ull)off);
    return SL_EIO;
}

/* Check the record at rec->path whole: 0 with its bytes (counted, the
 * caller frees) and where its members begin, or -1 (no record, or one to
 * ignore). */
static int record_load(sl__source *s, const record *rec, const char *name, const sl__obj *o, uint8_t **out,
                       uint64_t *len, replay_rd *rr) {
    int fd = open(rec->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < 8 + 8 + 96 + 4 + 8 + 8 ||
        (uint64_t)st.st_size > RECORD_MAX) {
        close(fd);
        return -1;
    }
    uint64_t n = (uint64_t)st.st_size, got = 0;
    uint8_t *b = sl__alloc(s->b, (size_t)n, SL_MEM_INDEX);
    while (b && got < n) {
        ssize_t r = read(fd, b + got, (size_t)(n - got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (uint64_t)r;
    }
    close(fd);
    if (!b || got != n) {
        sl__free(s->b, b);
        return -1;
    }
    /* the whole of it checked before a member is used */
    uint64_t h, size, members;
    uint32_t ul;
    const uint8_t *p = b, *end = b + n - 8;
    memcpy(&h, end, 8);
    int ok = h == sl__hash64(b, (size_t)(n - 8), 0x1dc5) && !memcmp(p, RECORD_MAGIC, 8);
    uint32_t trailer = 0;
    if (ok) {
        memcpy(&size, p + 8, 8);
        memcpy(&ul, p + 16 + 96, 4);
        ok = size == o->size && !memcmp(p + 16, o->etag, sizeof o->etag) && ul == strlen(name) &&
             (uint64_t)(end - p) >= 16 + 96 + 4 + (uint64_t)ul + 12 && !memcmp(p + 16 + 96 + 4, name, ul);
    }
    if (ok) {
        p += 16 + 96 + 4 + ul;
        memcpy(&trailer, p, 4);
        memcpy(&members, p + 4, 8);
        p += 12;
        ok = trailer <= 1;
        rr->trailer = (int)trailer;
        rr->base = b, rr->n = members, rr->first = p, rr->end = end;
        uint64_t last = 0;
        for (uint64_t k = 0; ok && k < members; k++) {
            uint32_t hdr[2];
            uint64_t at[3];
            if ((uint64_t)(end - p) < 32) { ok = 0; break; }
            memcpy(hdr, p, 8);
            memcpy(at, p + 8, 24);
            ok = hdr[0] > 0 && hdr[0] <= SL_TAR_NAME_MAX && hdr[1] <= SL__RECORD_INLINE &&
                 (uint64_t)(end - p) >= 32 + (uint64_t)hdr[0] + hdr[1] && at[0] >= last && at[0] < at[1] &&
                 at[1] <= size && at[2] <= size - at[1] && (hdr[1] == 0 || hdr[1] == at[2]) &&
                 !memchr(p + 32, 0, hdr[0]);
            last = at[1] + at[2];
            p += 32 + hdr[0] + hdr[1];
        }
        ok = ok && p == end;
    }
    if (!ok) {
        sl__free(s->b, b);
        return -1;
    }
    *out = b;
    *len = n;
    return 0;
}

/* Replay a checked record through the grouper (the members it got when
 * the shard was scanned, whose end block and trailer were checked then). */
static int record_replay(sl__source *s, shard_job *j, replay_rd *rr, char *err, size_t errlen) {
    *j->read = replay_read;
    *j->rctx = rr;
    sl__wds_grouper *g = sl__alloc(s->b, sizeof *g, SL_MEM_INDEX);
    if (!g) {
        int rc = sl__nomem_code(s->b, sizeof *g);
        sl__msg(err, errlen, "tar: no memory to group members (%s)", sl_strerror(rc));
        return rc;
    }
    sl__wds_group_init(g, s->b, j->emit, j->ctx);
    char name[SL_TAR_NAME_MAX + 1];
    const uint8_t *p = rr->first;
    int rc = 0;
    for (uint64_t k = 0; k < rr->n && !rc; k++) {
        uint32_t hdr[2];
        uint64_t at[3];
        memcpy(hdr, p, 8);
        memcpy(at, p + 8, 24);
        memcpy(name, p + 32, hdr[0]);
        name[hdr[0]] = 0;
        sl__tar_member m = {name, hdr[0], at[0], at[1], at[2]};
        rc = sl__wds_group_add(g, &m, err, errlen);
        p += 32 + hdr[0] + hdr[1];
    }
    if (!rc) rc = sl__wds_group_finish(g, err, errlen);
    *j->st = (sl__wds_stats){g->samples, g->skipped, !rc && rr->trailer};
    sl__wds_group_free(g);
    sl__free(s->b, g);
    return rc;
}

int sl__remote_index_shard(sl__source *s, const char *name, sl__obj *o, sl__wds_sample_fn emit, void *ctx,
                           sl__tar_read_fn *read, void **rctx, sl__wds_stats *st, char *err, size_t errlen) {
    record rec;
    shard_job j = {s, &rec, emit, ctx, read, rctx, st};
    memset(st, 0, sizeof *st);
    record_lock(name, o, &rec); /* o's size and ETag: from sl__remote_stat_all */
    uint8_t *b = NULL;
    uint64_t n = 0;
    replay_rd rr;
    int rc;
    if (rec.on && record_load(s, &rec, name, o, &b, &n, &rr) == 0) {
        o->io = s->io;
        o->name = name;
        sl__remote_note_version(s, o);
        rc = record_replay(s, &j, &rr, err, errlen);
        sl__free(s->b, b);
        s->records_used++;
    } else {
        char etag[96];
        snprintf(etag, sizeof etag, "%s", o->etag);
        rc = remote_scan(s, name, o, scan_recorded, &j, err, errlen);
        /* a version other than the one the record was named by: keep no record of it */
        if (!rc && rec.on && !strcmp(etag, o->etag)) record_write(s, &rec);
    }
    record_unlock(s, &rec);
    return rc;
}

/* Sizes and ETags of the shards, all asked at once (as many in flight as
 * the engine allows): the names of their records. */
int sl__remote_stat_all(sl__source *s, sl__obj *objs, const char *const *names, uint32_t n, char *err,
                        size_t errlen) {
    sl__io_req *r = sl__calloc(s->b, n ? n : 1, sizeof *r, SL_MEM_INDEX);
    if (!r) {
        sl__msg(err, errlen, "no memory to ask for %u shards' sizes", n);
        return sl__nomem_code(s->b, (uint64_t)n * sizeof *r);
    }
    for (uint32_t i = 0; i < n; i++) {
        r[i].name = names[i];
        r[i].probe = 1;
        r[i].retries = 3;
        sl__io_submit(s->io, &r[i]);
    }
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        int x = sl__io_wait(s->io, &r[i]);
        if (x && !rc) {
            rc = x;
            sl__obj_explain(s->io, names[i], &r[i], err, errlen);
        }
        if (!x) {
            objs[i].size = r[i].size;
            snprintf(objs[i].etag, sizeof objs[i].etag, "%s", r[i].etag_out);
        }
    }
    sl__free(s->b, r);
    return rc;
}

/* ---- files a manifest names -------------------------------------------------------- */

typedef struct rfile {
    sl__obj o;
    sl__budget *b;
    char name[];
} rfile;

int sl__remote_open(const sl__source *s, const char *name, sl__sample_file *f, char *reason, size_t rlen) {
    f->fd = -1;
    f->obj = NULL;
    f->own = NULL;
    if (!s->io) {
        sl__msg(reason, rlen, "a URL, but the source has no I/O engine");
        return SL_EINVAL;
    }
    size_t n = strlen(name);
    rfile *rf = sl__alloc(s->b, sizeof *rf + n + 1, SL_MEM_IO);
    if (!rf) {
        sl__msg(reason, rlen, "no memory for the request now");
        return SL_EAGAIN;
    }
    rf->b = s->b;
    memcpy(rf->name, name, n + 1);
    sl__io_req r;
    memset(&r, 0, sizeof r);
    r.name = rf->name;
    r.probe = 1;
    sl__io_submit(s->io, &r);
    int rc = sl__io_wait(s->io, &r);
    if (rc) {
        sl__msg(reason, rlen, "%s", r.reason);
        sl__free(s->b, rf);
        return rc == SL_ENOENT || rc == SL_ESTATE ? rc : SL_EIO;
    }
    memset(&rf->o, 0, sizeof rf->o);
    rf->o.io = s->io;
    rf->o.name = rf->name;
    rf->o.size = r.size;
    snprintf(rf->o.etag, sizeof rf->o.etag, "%s", r.etag_out);
    f->offset = 0;
    f->size = r.size;
    f->obj = &rf->o;
    f->own = rf;
    return 0;
}

void sl__remote_close(sl__sample_file *f) {
    rfile *rf = f->own;
    if (rf) sl__free(rf->b, rf);
    f->own = NULL;
    f->obj = NULL;
}
