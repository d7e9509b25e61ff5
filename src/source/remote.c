/*
 * Remote data as a source (remote.h; docs/remote.md):
 * what a URL names, the shards under an s3:// prefix, a manifest's text,
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
#include <string.h>
#include <strings.h>

#include "base/hash.h"
#include "base/util.h"
#include "source/remote.h"
#include "source/shards.h"
#include "source/table.h"

typedef unsigned long long ull;

/* ---- what a URL names ----------------------------------------------------------- */

int sl__remote_kind(const char *url, int *kind, int *form, char *err, size_t errlen) {
    sl__url u;
    *form = 0;
    if (sl__url_parse(url, &u, err, errlen)) return SL_EINVAL;
    if (strchr(url, '{') && strchr(url, '}')) *kind = SL__KIND_TAR, *form = SL__SHARDS_PATTERN;
    else if (sl__url_has_suffix(url, ".tar")) *kind = SL__KIND_TAR, *form = SL__SHARDS_FILE;
    else if (sl__url_has_suffix(url, ".csv")) *kind = SL__KIND_CSV;
    else if (sl__url_has_suffix(url, ".jsonl")) *kind = SL__KIND_JSONL;
    else if (u.scheme == SL__URL_S3) *kind = SL__KIND_TAR, *form = SL__SHARDS_FOLDER;
    else {
        sl__msg(err, errlen,
                "%.300s: an http(s) URL must name a .tar shard, a brace pattern of shards "
                "(train-{000000..000099}.tar) or a .csv/.jsonl manifest: an http server has no listing",
                url);
        return SL_EINVAL;
    }
    return 0;
}

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

int sl__remote_scan_read(void *arg, uint64_t off, void *buf, size_t n, char *err, size_t errlen) {
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

int sl__remote_scan(sl__source *s, const char *name, sl__obj *o,
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

/* ---- does a local manifest name URLs? ------------------------------------------------ */

static int is_url(const char *p, size_t n) {
    return (n >= 5 && !strncasecmp(p, "s3://", 5)) || (n >= 7 && !strncasecmp(p, "http://", 7)) ||
           (n >= 8 && !strncasecmp(p, "https://", 8));
}

int sl__source_names_urls(const sl__source *s) {
    for (uint32_t c = 0; s->chunks && c < s->nchunks; c++) {
        const sl__chunk *k = &s->chunks[c];
        for (uint64_t i = 0; i < k->nrec; i++)
            if (is_url(k->arena + k->recs[i].off, k->recs[i].len)) return 1;
    }
    const sl__table *t = s->tab;
    if (!t || s->kind != SL__KIND_TABLE) return 0;
    for (uint64_t row = 0; row < t->nrows; row++)
        for (uint32_t col = 0; col < t->ncols; col++) {
            const sl__rec *r = sl__table_at(t, row, col);
            if (t->types[col] == SL__VAL_FILE && is_url(t->arena + r->off, r->len)) return 1;
            if (t->types[col] == SL__VAL_FILES)
                for (uint32_t e = 0; e < r->len; e++) {
                    sl__rec x;
                    memcpy(&x, t->arena + r->off + (uint64_t)e * sizeof x, sizeof x);
                    if (is_url(t->arena + x.off, x.len)) return 1;
                }
        }
    return 0;
}
