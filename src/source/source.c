/*
 * The source layer's front: picks the indexer (folder, manifest, table,
 * shards), looks samples up, opens and reads them. The chunk arrays every
 * index is made of are index.c's.
 * See source.h for the contract and index.h for the layout.
 */
#define _GNU_SOURCE
#include "source/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "io/url.h"
#include "source/folder.h"
#include "source/index.h"
#include "source/manifest.h"
#include "source/remote.h"
#include "source/shards.h"
#include "source/table.h"

/* ---- open / close ------------------------------------------------------ */

static int has_suffix_ci(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

/* Keep path (without trailing slashes, "/" stays) as the display base. */
static int set_base(sl__source *s, const char *path, size_t n, char *err, size_t errlen) {
    while (n > 1 && path[n - 1] == '/') n--;
    s->base = sl__alloc(s->b, n + 1, SL_MEM_INDEX);
    if (!s->base) {
        int rc = sl__nomem_code(s->b, n + 1);
        sl__msg(err, errlen, "%s: no memory for the index (%s)", path, sl_strerror(rc));
        return rc;
    }
    memcpy(s->base, path, n);
    s->base[n] = 0;
    s->base_len = n;
    s->basefd = open(n ? s->base : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (s->basefd < 0) {
        int e = errno;
        sl__msg(err, errlen, "%s: cannot open folder: %s", n ? s->base : ".", strerror(e));
        return e == ENOENT ? SL_ENOENT : SL_EIO;
    }
    return 0;
}

/* Map column requests onto a folder's or a path,label manifest's values. */
static int map_legacy(sl__source *s, const char *path, const sl__colreq *req, uint32_t nreq, char *err,
                      size_t errlen) {
    int have_file = 0, have_label = 0;
    if (nreq > sizeof s->colmap) {
        sl__msg(err, errlen, "%s: %u columns requested", path, nreq);
        return SL_EINVAL;
    }
    for (uint32_t k = 0; k < nreq; k++) {
        int *have = req[k].type == SL__VAL_FILE ? &have_file : req[k].type == SL__VAL_INT ? &have_label : NULL;
        if (!have || (*have)++) {
            sl__msg(err, errlen,
                    "%s: a %s has one file and one label per sample; the schema asks for more (\"%s\": use a "
                    ".jsonl manifest that names each value)",
                    path, s->kind == SL__KIND_FOLDER ? "folder" : "path,label manifest", req[k].key);
            return SL_EINVAL;
        }
        s->colmap[k] = req[k].type == SL__VAL_FILE ? SL__COL_FILE : SL__COL_LABEL;
    }
    s->ncols = nreq;
    return 0;
}

int sl__source_open(sl__budget *b, const char *path, uint32_t threads, sl__source **out, char *err,
                    size_t errlen) {
    return sl__source_open_io(b, path, threads, NULL, 0, NULL, out, err, errlen);
}

int sl__source_open_cols(sl__budget *b, const char *path, uint32_t threads, const sl__colreq *req, uint32_t nreq,
                         sl__source **out, char *err, size_t errlen) {
    return sl__source_open_io(b, path, threads, req, nreq, NULL, out, err, errlen);
}

/* A manifest's URL as the base its relative paths resolve against. */
static int set_url_base(sl__source *s, const char *url, char *err, size_t errlen) {
    if (!(s->base = sl__strdup(s->b, url, SL_MEM_INDEX))) {
        int rc = sl__nomem_code(s->b, strlen(url) + 1);
        sl__msg(err, errlen, "%s: no memory for the index (%s)", url, sl_strerror(rc));
        return rc;
    }
    s->base_len = strlen(url);
    s->url_base = 1;
    return 0;
}

/* What a URL source is, by its name alone (no request): *kind SL__KIND_TAR
 * with *form (a .tar, a brace pattern, an s3:// prefix: SL__SHARDS_*), or
 * SL__KIND_CSV / SL__KIND_JSONL. SL_EINVAL with a sentence for anything
 * else (an http "folder" cannot be listed). */
static int url_kind(const char *url, int *kind, int *form, char *err, size_t errlen) {
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

static int is_url(const char *p, size_t n) {
    return (n >= 5 && !strncasecmp(p, "s3://", 5)) || (n >= 7 && !strncasecmp(p, "http://", 7)) ||
           (n >= 8 && !strncasecmp(p, "https://", 8));
}

/* 1 when a manifest or table source (already indexed) names a URL in a
 * file value: it then needs an engine though its own path is local. */
static int names_urls(const sl__source *s) {
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

int sl__source_open_io(sl__budget *b, const char *path, uint32_t threads, const sl__colreq *req, uint32_t nreq,
                       const sl__io_opts *io, sl__source **out, char *err, size_t errlen) {
    *out = NULL;
    if (!path || !*path) {
        sl__msg(err, errlen, "no dataset path given");
        return SL_EINVAL;
    }
    struct stat st;
    int remote = sl__url_scheme(path) != SL__URL_NONE, form = 0, kind;
    if (remote) {
        int rc = url_kind(path, &kind, &form, err, errlen);
        if (rc) return rc;
    } else {
        form = sl__shards_form(path, err, errlen);
        if (form < 0) return form;
        if (!form && stat(path, &st) != 0) {
            int e = errno;
            sl__msg(err, errlen, "%s: %s", path, e == ENOENT ? "no such file or folder" : strerror(e));
            return e == ENOENT || e == ENOTDIR ? SL_ENOENT : SL_EIO;
        }
        int named = has_suffix_ci(path, ".csv") || has_suffix_ci(path, ".jsonl") || has_suffix_ci(path, ".tar");
        if (form) kind = SL__KIND_TAR;
        else if (S_ISDIR(st.st_mode)) kind = SL__KIND_FOLDER;
        else if (S_ISREG(st.st_mode) && has_suffix_ci(path, ".csv")) kind = SL__KIND_CSV;
        else if (S_ISREG(st.st_mode) && has_suffix_ci(path, ".jsonl")) kind = SL__KIND_JSONL;
        else if (named) { /* the right name on a FIFO, a device, a socket: never opened (it could block or never end) */
            sl__msg(err, errlen, "%s is a %s, not a regular file: a manifest or a shard is read from a file", path,
                    S_ISFIFO(st.st_mode) ? "FIFO" : S_ISCHR(st.st_mode) ? "character device" : S_ISBLK(st.st_mode) ? "block device"
                    : S_ISSOCK(st.st_mode) ? "socket" : "special file");
            return SL_EINVAL;
        } else {
            sl__msg(err, errlen, "%s: neither a folder, a .csv/.jsonl manifest nor .tar shards", path);
            return SL_EINVAL;
        }
    }

    sl__source *s = sl__calloc(b, 1, sizeof *s, SL_MEM_INDEX);
    if (!s) {
        int rc = sl__nomem_code(b, sizeof *s);
        sl__msg(err, errlen, "%s: no memory for the index (%s)", path, sl_strerror(rc));
        return rc;
    }
    s->b = b;
    s->kind = kind;
    s->basefd = -1;
    int rc = remote ? sl__io_new(b, io, &s->io, err, errlen) : 0;
    if (rc) {
        /* the engine's own sentence, naming the dataset */
        char why[300];
        snprintf(why, sizeof why, "%s", err);
        sl__msg(err, errlen, "%.300s: %s", path, why);
    } else if (kind == SL__KIND_TAR) {
        rc = sl__shards_index(s, path, form, req, nreq, err, errlen);
    } else if (kind == SL__KIND_FOLDER) {
        /* The make_imagenet_like.py layout: DIR/train holds the classes. */
        char sub[PATH_MAX];
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') n--;
        int w = snprintf(sub, sizeof sub, "%.*s/train", (int)n, path);
        struct stat ts;
        const char *root = path;
        size_t root_len = strlen(path);
        if (w > 0 && (size_t)w < sizeof sub && stat(sub, &ts) == 0 && S_ISDIR(ts.st_mode)) {
            root = sub;
            root_len = (size_t)w;
        }
        rc = set_base(s, root, root_len, err, errlen);
        for (uint32_t k = 0; req && k < nreq; k++)
            if (req[k].type == SL__VAL_FILE) s->media = req[k].media;
        if (!rc) rc = sl__folder_index(s, s->base, threads, err, errlen);
    } else {
        const char *slash = strrchr(path, '/');
        size_t n = slash ? (size_t)(slash - path) : 0;
        if (slash && n == 0) n = 1; /* "/m.csv": base "/" */
        rc = remote ? set_url_base(s, path, err, errlen) : set_base(s, path, n, err, errlen);
        if (!rc && req && (kind == SL__KIND_JSONL || kind == SL__KIND_CSV)) {
            rc = sl__table_index(s, path, kind, req, nreq, err, errlen);
        } else if (!rc) {
            rc = sl__manifest_index(s, path, kind, err, errlen);
        }
        /* a local manifest may name URLs: an engine for them */
        if (!rc && !s->io && names_urls(s)) rc = sl__io_new(b, io, &s->io, err, errlen);
    }
    if (!rc && req && !s->tab) rc = map_legacy(s, path, req, nreq, err, errlen);
    if (rc) {
        sl__source_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void sl__source_close(sl__source *s) {
    if (!s) return;
    sl__budget *b = s->b;
    if (s->chunks) {
        for (uint32_t i = 0; i < s->nchunks; i++) sl__chunk_free(b, &s->chunks[i]);
        sl__free(b, s->chunks);
    }
    sl__table_free(b, s->tab);
    sl__shards_free(b, s->shards);
    if (s->basefd >= 0) close(s->basefd);
    sl__free(b, s->base);
    sl__io_free(s->io);
    sl__free(b, s);
}

sl__io *sl__source_io(const sl__source *s) { return s ? s->io : NULL; }
uint64_t sl__source_version(const sl__source *s) { return s ? s->version : 0; }

void sl__source_cancel_io(sl__source *s) {
    if (s && s->io) sl__io_cancel(s->io);
}

/* The URL a value's path rel names (itself, or resolved against the
 * manifest's URL): 1 with it in out, 0 when it names a local file, or
 * SL_EOVERFLOW. */
static int url_name(const sl__source *s, const char *rel, char *out, size_t len) {
    if (sl__url_scheme(rel)) {
        size_t n = strlen(rel);
        if (n >= len) return SL_EOVERFLOW;
        memcpy(out, rel, n + 1);
        return 1;
    }
    if (!s->url_base) return 0;
    int n = sl__url_resolve(s->base, rel, out, len);
    return n < 0 ? SL_EOVERFLOW : 1;
}

/* ---- lookup ------------------------------------------------------------ */

uint64_t sl__source_count(const sl__source *s) { return s->count; }
uint32_t sl__source_num_classes(const sl__source *s) { return s->num_classes; }

/* The chunk holding sample i < count: the last chunk whose first <= i
 * (empty chunks share their first with the next one, so the last of equal
 * firsts is the one holding i). */
static const sl__chunk *find_chunk(const sl__source *s, uint64_t i) {
    uint32_t lo = 0, hi = s->nchunks; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->chunks[mid].first <= i) lo = mid;
        else hi = mid;
    }
    return &s->chunks[lo];
}

int64_t sl__source_label(const sl__source *s, uint64_t i) {
    if (i >= s->count || s->tab) return SL_EINVAL;
    const sl__chunk *c = find_chunk(s, i);
    return c->labels ? c->labels[i - c->first] : c->label;
}

/* Path of sample i relative to the base (or absolute) into buf: its length,
 * or SL_EOVERFLOW. *absolute says which. */
static int rel_path(const sl__source *s, uint64_t i, char *buf, size_t len, int *absolute) {
    const sl__chunk *c = find_chunk(s, i);
    const sl__rec *r = &c->recs[i - c->first];
    size_t n = 0;
    *absolute = r->dir == SL__DIR_NONE;
    if (!*absolute) {
        const sl__rec *d = &c->dirs[r->dir];
        if (d->len) {
            if ((size_t)d->len + 1 >= len) return SL_EOVERFLOW;
            memcpy(buf, c->arena + d->off, d->len);
            buf[d->len] = '/';
            n = d->len + 1;
        }
    }
    if (r->len >= len - n) return SL_EOVERFLOW;
    memcpy(buf + n, c->arena + r->off, r->len);
    n += r->len;
    buf[n] = 0;
    return (int)n;
}

int sl__source_path(const sl__source *s, uint64_t i, char *buf, size_t len) {
    if (i >= s->count) return SL_EINVAL;
    if (s->kind == SL__KIND_TAR) return sl__shards_path(s, i, -1, buf, len);
    if (s->kind == SL__KIND_TABLE) { /* the first file of the row */
        for (uint32_t c = 0; c < s->tab->ncols; c++)
            if (s->tab->types[c] == SL__VAL_FILE || s->tab->types[c] == SL__VAL_FILES)
                return sl__source_file_path(s, i, c, 0, buf, len);
        return SL_EINVAL;
    }
    if (!buf || len == 0 || len > INT_MAX) return SL_EOVERFLOW;
    size_t pre = 0;
    int absolute = 0;
    const sl__chunk *c = find_chunk(s, i);
    if (s->io) { /* a URL, or relative to one */
        char rel[PATH_MAX];
        int n = rel_path(s, i, rel, sizeof rel, &absolute), u;
        if (n < 0) return n;
        if ((u = url_name(s, rel, buf, len)) != 0) return u < 0 ? u : (int)strlen(buf);
    }
    if (c->recs[i - c->first].dir != SL__DIR_NONE && s->base_len) {
        int sep = s->base[s->base_len - 1] != '/';
        if (s->base_len + sep >= len) return SL_EOVERFLOW;
        memcpy(buf, s->base, s->base_len);
        pre = s->base_len;
        if (sep) buf[pre++] = '/';
    }
    int n = rel_path(s, i, buf + pre, len - pre, &absolute);
    return n < 0 ? n : (int)pre + n;
}

/* ---- samples ----------------------------------------------------------- */

static const char *errno_reason(int e, char *tmp, size_t n) {
    switch (e) {
    case ENOENT: return "no such file";
    case EACCES: return "permission denied";
    case EISDIR: return "is a directory";
    case ENOTDIR: return "a path component is not a directory";
    case ENAMETOOLONG: return "path too long";
    case ELOOP: return "too many symbolic links";
    default: return strerror_r(e, tmp, n);
    }
}

int sl__source_gone(const sl__source *s) {
    struct stat st;
    return s->basefd >= 0 && fstat(s->basefd, &st) == 0 && st.st_nlink == 0;
}

/* Open path (relative to the base unless absolute) as a sample file. */
static int open_at(const sl__source *s, const char *path, int absolute, sl__sample_file *f, char *reason,
                   size_t rlen) {
    char tmp[64];
    /* O_NONBLOCK: a FIFO named x.jpg must not hang a worker in open();
     * it has no effect on reads of regular files. */
    int fd = openat(absolute ? AT_FDCWD : s->basefd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (e == ENXIO && fstatat(absolute ? AT_FDCWD : s->basefd, path, &st, 0) == 0 && S_ISSOCK(st.st_mode))
            sl__msg(reason, rlen, "not a regular file (a socket)");
        else
            sl__msg(reason, rlen, "%s", errno_reason(e, tmp, sizeof tmp));
        return e == ENOENT || e == ENOTDIR ? SL_ENOENT : sl__transient(e) ? SL_EAGAIN : SL_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        sl__msg(reason, rlen, "stat failed: %s", errno_reason(e, tmp, sizeof tmp));
        return SL_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        sl__msg(reason, rlen, "not a regular file (%s)",
                S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device");
        return SL_EIO;
    }
    f->fd = fd;
    f->size = (uint64_t)st.st_size;
    return 0;
}

int sl__source_open_sample(const sl__source *s, uint64_t i, sl__sample_file *f, char *reason,
                           size_t rlen) {
    return sl__source_open_file(s, i, 0, 0, f, reason, rlen);
}

/* ---- values ------------------------------------------------------------ */

/* The table record of a FILE or FILES element: copied out of the arena. */
static int table_file(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, sl__rec *out) {
    const sl__table *t = s->tab;
    const sl__rec *r = sl__table_at(t, i, col);
    if (t->types[col] == SL__VAL_FILE && elem == 0) {
        *out = *r;
        return 0;
    }
    if (t->types[col] != SL__VAL_FILES || elem >= r->len) return SL_EINVAL;
    memcpy(out, t->arena + r->off + (uint64_t)elem * sizeof(sl__rec), sizeof *out);
    return 0;
}

/* Path of a file value relative to the base (or absolute) into buf: its
 * length, or SL_EOVERFLOW / SL_EINVAL. */
static int value_rel_path(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, char *buf, size_t len,
                          int *absolute) {
    if (i >= s->count || !buf || len == 0 || len > INT_MAX) return SL_EINVAL;
    if (s->kind != SL__KIND_TABLE) {
        int c = s->ncols ? (col < s->ncols ? s->colmap[col] : -1) : (int)col;
        if (c != SL__COL_FILE || elem) return SL_EINVAL;
        return rel_path(s, i, buf, len, absolute);
    }
    sl__rec r;
    if (col >= s->tab->ncols || table_file(s, i, col, elem, &r)) return SL_EINVAL;
    if (r.len >= len) return SL_EOVERFLOW;
    memcpy(buf, s->tab->arena + r.off, r.len);
    buf[r.len] = 0;
    *absolute = r.dir == SL__DIR_NONE;
    return (int)r.len;
}

int sl__source_open_file(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, sl__sample_file *f,
                         char *reason, size_t rlen) {
    f->fd = -1;
    f->offset = f->size = 0;
    f->obj = NULL;
    f->own = NULL;
    if (i >= s->count) {
        sl__msg(reason, rlen, "sample %llu out of range", (unsigned long long)i);
        return SL_EINVAL;
    }
    if (s->kind == SL__KIND_TAR) return sl__shards_open_file(s, i, col, elem, f, reason, rlen);
    char path[PATH_MAX];
    int absolute = 0, n = value_rel_path(s, i, col, elem, path, sizeof path, &absolute);
    if (n == SL_EOVERFLOW) {
        sl__msg(reason, rlen, "path too long");
        return SL_EIO;
    }
    if (n < 0) {
        sl__msg(reason, rlen, "column %u element %u of sample %llu is not a file", col, elem, (unsigned long long)i);
        return SL_EINVAL;
    }
    if (s->io) {
        char name[SL__URL_MAX];
        int u = url_name(s, path, name, sizeof name);
        if (u < 0) {
            sl__msg(reason, rlen, "URL too long");
            return SL_EIO;
        }
        if (u) return sl__remote_open(s, name, f, reason, rlen);
    }
    return open_at(s, path, absolute, f, reason, rlen);
}

int sl__source_remote(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, const sl__obj **obj,
                      uint64_t *off, uint64_t *size, char *name, size_t len) {
    *obj = NULL;
    *off = *size = 0;
    if (!s->io || i >= s->count) return 0;
    if (s->kind == SL__KIND_TAR) return elem ? SL_EINVAL : sl__shards_remote(s, i, col, obj, off, size) ? SL_EINVAL : 1;
    char rel[PATH_MAX];
    int absolute = 0, n = value_rel_path(s, i, col, elem, rel, sizeof rel, &absolute);
    if (n < 0) return n;
    int u = url_name(s, rel, name, len);
    return u < 0 ? u : u ? 2 : 0;
}

int sl__source_file_path(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, char *buf, size_t len) {
    if (s->kind == SL__KIND_TAR) return elem ? SL_EINVAL : sl__shards_path(s, i, (int)col, buf, len);
    char rel[PATH_MAX];
    int absolute = 0, n = value_rel_path(s, i, col, elem, rel, sizeof rel, &absolute), u;
    if (n < 0) return n;
    if (s->io && (u = url_name(s, rel, buf, len)) != 0) return u < 0 ? u : (int)strlen(buf);
    size_t pre = 0;
    if (!absolute && s->base_len) {
        int sep = s->base[s->base_len - 1] != '/';
        if (s->base_len + sep >= len) return SL_EOVERFLOW;
        memcpy(buf, s->base, s->base_len);
        pre = s->base_len;
        if (sep) buf[pre++] = '/';
    }
    if ((size_t)n >= len - pre) return SL_EOVERFLOW;
    memcpy(buf + pre, rel, (size_t)n + 1);
    return (int)pre + n;
}

int sl__source_value(const sl__source *s, uint64_t i, uint32_t col, int *type, uint32_t *count, int64_t *ival) {
    if (i >= s->count) return SL_EINVAL;
    if (!s->tab) {
        int c = s->ncols ? (col < s->ncols ? s->colmap[col] : -1) : (int)col;
        if (c == SL__COL_FILE) *type = SL__VAL_FILE, *count = 1, *ival = 0;
        else if (c == SL__COL_LABEL) *type = SL__VAL_INT, *count = 1, *ival = sl__source_label(s, i);
        else return SL_EINVAL;
        return 0;
    }
    if (col >= s->ncols) return SL_EINVAL; /* a tar table has a hidden last column */
    const sl__rec *r = sl__table_at(s->tab, i, col);
    *type = s->tab->types[col];
    *count = *type == SL__VAL_FILES || *type == SL__VAL_NUMBERS ? r->len : 1;
    *ival = *type == SL__VAL_INT ? (int64_t)r->off : 0;
    return 0;
}

int sl__source_numbers(const sl__source *s, uint64_t i, uint32_t col, uint32_t first, double *out, uint32_t n) {
    int type;
    uint32_t count;
    int64_t iv;
    int rc = sl__source_value(s, i, col, &type, &count, &iv);
    if (rc) return rc;
    if (type == SL__VAL_INT) {
        if (n && first == 0) out[0] = (double)iv;
        return 1;
    }
    if (type != SL__VAL_NUMBERS) return SL_EINVAL;
    const sl__rec *r = sl__table_at(s->tab, i, col);
    if (first < count) memcpy(out, s->tab->arena + r->off + (uint64_t)first * 8, (size_t)SL_MIN(n, count - first) * 8);
    return (int)count;
}

int sl__sample_pread(const sl__sample_file *f, void *buf, uint64_t n, uint64_t off, char *reason, size_t rlen) {
    if (f->obj) {
        int rc = sl__obj_read(f->obj, off, buf, n, reason, rlen);
        return rc == 0 || rc == SL_ENOENT || rc == SL_ESTATE ? rc : SL_EIO;
    }
    sl__sample_file part = {.fd = f->fd, .offset = off, .size = n};
    return sl__sample_read(&part, buf, reason, rlen);
}

int sl__sample_read(const sl__sample_file *f, void *buf, char *reason, size_t rlen) {
    if (f->obj) return sl__sample_pread(f, buf, f->size, f->offset, reason, rlen);
    char *p = buf, tmp[64];
    uint64_t got = 0;
    while (got < f->size) {
        uint64_t want = f->size - got;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        ssize_t r = pread(f->fd, p + got, (size_t)want, (off_t)(f->offset + got));
        if (r < 0) {
            int e = errno;
            if (e == EINTR) continue;
            sl__msg(reason, rlen, "read failed after %llu of %llu bytes: %s", (unsigned long long)got,
                    (unsigned long long)f->size, errno_reason(e, tmp, sizeof tmp));
            return sl__transient(e) ? SL_EAGAIN : SL_EIO;
        }
        if (r == 0) {
            sl__msg(reason, rlen, "file shrank while reading (%llu of %llu bytes)", (unsigned long long)got,
                    (unsigned long long)f->size);
            return SL_EIO;
        }
        got += (uint64_t)r;
    }
    return 0;
}

void sl__sample_close(sl__sample_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->own) sl__remote_close(f);
    f->obj = NULL;
}
