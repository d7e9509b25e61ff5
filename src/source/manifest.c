/*
 * Manifests: CSV (`path,label`, RFC 4180; lines end with LF, CRLF or a
 * lone CR) and JSONL ({"path": ..., "label": ...} per line, rows in
 * jsonrow.h's grammar). Both parsers are strict,
 * allocate nothing (decoded paths go through a PATH_MAX stack buffer: a
 * longer path could not be opened anyway) and report the first error with
 * its line number. They run on hostile input (fuzzed:
 * tests/fuzz/fuzz_manifest.c).
 */
#define _GNU_SOURCE
#include "source/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "source/jsonrow.h"
#include "source/remote.h"

typedef unsigned long long ull;

/* Checks every parser makes of a decoded path. NULL if fine. */
static const char *bad_path(const sl__obuf *o) {
    if (o->trunc) return "path longer than PATH_MAX";
    if (o->len == 0) return "empty path";
    if (memchr(o->p, 0, o->len)) return "path contains a NUL byte";
    return NULL;
}

/* ---- CSV --------------------------------------------------------------- */

/* Line ends: LF, CRLF, or a lone CR (old Mac files, some spreadsheet
 * exports). Bytes of the line end at t[i] (a CR or an LF). */
static size_t eol_len(const char *t, size_t i, size_t n) {
    return t[i] == '\r' && i + 1 < n && t[i + 1] == '\n' ? 2 : 1;
}

int sl__csv_record(const char *t, size_t n, size_t *pos, uint64_t *line, uint64_t *rec_line, sl__csv_field *f,
                   uint32_t maxf, uint32_t *nf, char *buf, size_t cap, char *err, size_t errlen) {
    size_t i = *pos, used = 0;
    for (;;) { /* a blank line (spaces and tabs only) is skipped */
        size_t j = i;
        while (j < n && (t[j] == ' ' || t[j] == '\t')) j++;
        if (j == n) {
            *pos = n;
            return 1;
        }
        if (t[j] != '\n' && t[j] != '\r') break;
        i = j + eol_len(t, j, n);
        ++*line;
    }
    *rec_line = *line;
    *nf = 0;
    for (;;) { /* one field per turn, starting at i */
        sl__obuf dummy = {NULL, 0, 0, 0}, field = {buf + used, cap - used, 0, 0};
        sl__obuf *o = *nf < maxf ? &field : &dummy;
        if (i < n && t[i] == '"') {
            uint64_t qline = *line;
            i++;
            for (;;) {
                if (i >= n) {
                    sl__msg(err, errlen, "line %llu: quoted field never closed", (ull)qline);
                    return SL_EPARSE;
                }
                char c = t[i];
                if (c == '"') {
                    if (i + 1 < n && t[i + 1] == '"') {
                        sl__obuf_put(o, '"');
                        i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                if (c == '\n') ++*line;
                sl__obuf_put(o, c);
                i++;
            }
            if (i < n && t[i] != ',' && t[i] != '\n' && t[i] != '\r') {
                sl__msg(err, errlen, "line %llu: unexpected character after a closing quote", (ull)*line);
                return SL_EPARSE;
            }
        } else {
            while (i < n && t[i] != ',' && t[i] != '\n' && t[i] != '\r') {
                if (t[i] == '"') {
                    sl__msg(err, errlen, "line %llu: quote inside an unquoted field (quote the whole field)",
                            (ull)*line);
                    return SL_EPARSE;
                }
                sl__obuf_put(o, t[i]);
                i++;
            }
        }
        if (*nf < maxf) {
            f[*nf] = (sl__csv_field){used, field.len, field.trunc};
            used += field.len;
        }
        ++*nf;
        if (i < n && t[i] == ',') {
            i++;
            continue;
        }
        break; /* at a line end or the end */
    }
    if (i < n) { /* the line end */
        i += eol_len(t, i, n);
        ++*line;
    }
    *pos = i;
    return 0;
}

int sl__manifest_parse_csv(const char *t, size_t n, sl__manifest_row_fn add, void *ctx, char *err,
                           size_t errlen) {
    char buf[PATH_MAX + 32];
    size_t i = 0;
    uint64_t line = 1, rec_line;
    int first = 1;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) i = 3; /* UTF-8 BOM */
    for (;;) {
        sl__csv_field f[2];
        uint32_t nf;
        int rc = sl__csv_record(t, n, &i, &line, &rec_line, f, 2, &nf, buf, sizeof buf, err, errlen);
        if (rc) return rc == 1 ? 0 : rc;
        if (nf != 2) {
            sl__msg(err, errlen, "line %llu: expected 2 fields (path,label), found %u", (ull)rec_line, nf);
            return SL_EPARSE;
        }
        int64_t label;
        const char *lab = buf + f[1].off;
        int is_int = !f[1].trunc && f[1].len < 32 && sl__parse_int(lab, f[1].len, &label) == 0;
        if (!is_int && first) { /* a header row */
            first = 0;
            continue;
        }
        first = 0;
        if (!is_int) {
            sl__msg(err, errlen, "line %llu: label \"%.*s%s\" is not a 64-bit integer", (ull)rec_line,
                    (int)SL_MIN(f[1].len, 24), lab, f[1].trunc || f[1].len > 24 ? "..." : "");
            return SL_EPARSE;
        }
        sl__obuf path = {buf, PATH_MAX, f[0].len, f[0].trunc || f[0].len >= PATH_MAX};
        const char *why = bad_path(&path);
        if (why) {
            sl__msg(err, errlen, "line %llu: %s", (ull)rec_line, why);
            return SL_EPARSE;
        }
        if ((rc = add(ctx, buf, f[0].len, label))) return rc;
    }
}

/* ---- JSONL ------------------------------------------------------------- */

/* One row's path (into o) and label, by the row grammar (jsonrow.h). */
static const char *path_label(const sl__jrow *row, sl__obuf *o, int64_t *label) {
    const sl__jmember *p = sl__jrow_find(row, "path"), *l = sl__jrow_find(row, "label");
    if (!p) return "missing \"path\"";
    if (!l) return "missing \"label\"";
    if (p->type != SL__JV_STRING) return "\"path\" must be a string";
    if (l->type != SL__JV_NUMBER || !l->is_int) return "\"label\" must be an integer (no fraction or exponent)";
    if (sl__jrow_int(row, l, label)) return "\"label\" outside the 64-bit integer range";
    sl__jiter it;
    sl__jrow_iter(row, p, &it);
    sl__jiter_string(&it, o);
    return bad_path(o);
}

int sl__manifest_parse_jsonl(const char *t, size_t n, sl__manifest_row_fn add, void *ctx, char *err,
                             size_t errlen) {
    char pbuf[PATH_MAX], why[256];
    sl__jrow row[1]; /* ~10 KiB of stack: manifests are indexed on the caller's thread */
    size_t i = 0;
    uint64_t line = 0;
    int rc = 0;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) i = 3;
    while (i < n && !rc) {
        line++;
        size_t next, e = sl__jrow_line(t, n, i, &next), j = i;
        while (j < e && (t[j] == ' ' || t[j] == '\t')) j++;
        const char *start = t + i;
        i = next;
        if (j == e) continue; /* blank line */
        sl__obuf o = {pbuf, sizeof pbuf, 0, 0};
        int64_t label = 0;
        const char *bad = NULL;
        if (sl__jrow_parse(start, (size_t)(t + e - start), row, why, sizeof why)) bad = why;
        else bad = path_label(row, &o, &label);
        if (bad) {
            sl__msg(err, errlen, "line %llu: %s", (ull)line, bad);
            rc = SL_EPARSE;
        } else {
            rc = add(ctx, pbuf, o.len, label);
        }
    }
    return rc;
}

/* ---- into a source ----------------------------------------------------- */

typedef struct count_ctx {
    uint64_t rows, bytes;
} count_ctx;

static int count_row(void *arg, const char *path, size_t n, int64_t label) {
    (void)path;
    (void)label;
    count_ctx *k = arg;
    k->rows++;
    k->bytes += n;
    return 0;
}

typedef struct add_ctx {
    sl__source *s;
    sl__chunk *c;
} add_ctx;

static int add_row(void *arg, const char *path, size_t n, int64_t label) {
    add_ctx *a = arg;
    sl__budget *b = a->s->b;
    uint64_t off;
    int rc = sl__chunk_add_label(b, a->c, label);
    if (!rc) rc = sl__chunk_put(b, a->c, path, n, &off);
    if (!rc) rc = sl__chunk_add_rec(b, a->c, off, (uint32_t)n, path[0] == '/' ? SL__DIR_NONE : 0);
    return rc;
}

static int parse_text(sl__source *s, const char *path, int kind, char *text, uint64_t size, char *err,
                      size_t errlen);

int sl__manifest_index(sl__source *s, const char *path, int kind, char *err, size_t errlen) {
    sl__budget *b = s->b;
    char nb[4][32];
    if (s->url_base) { /* a manifest at a URL (remote.c) */
        char *text;
        uint64_t size;
        int rc = sl__remote_text(s, path, &text, &size, err, errlen);
        return rc ? rc : parse_text(s, path, kind, text, size, err, errlen);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        sl__msg(err, errlen, "%s: %s", path, e == ENOENT ? "no such file" : strerror(e));
        return e == ENOENT ? SL_ENOENT : SL_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        sl__msg(err, errlen, "%s: not a regular file", path);
        return SL_EINVAL;
    }
    /* The whole text is held while parsing (counted, freed at the end):
     * CSV fields may span lines, so it cannot be cut at any newline. */
    uint64_t size = (uint64_t)st.st_size;
    char *text = size < SIZE_MAX ? sl__alloc(b, (size_t)size + 1, SL_MEM_INDEX) : NULL;
    if (!text) {
        int rc = size < SIZE_MAX ? sl__nomem_code(b, size + 1) : SL_EOVERFLOW;
        close(fd);
        sl__msg(err, errlen, "%s: reading the %s manifest needs %s but the budget is %s (%s in use)%s", path,
                sl__fmt_bytes(size, nb[0], 32), sl__fmt_bytes(sl__alloc_cost(size + 1), nb[1], 32),
                sl__fmt_bytes(sl__budget_limit(b), nb[2], 32), sl__fmt_bytes(atomic_load(&b->used), nb[3], 32),
                rc == SL_EBUDGET ? "" : " (the system refused)");
        return rc;
    }
    uint64_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, text + got, (size_t)(size - got), (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (uint64_t)r;
    }
    close(fd);
    if (got != size) {
        sl__free(b, text);
        sl__msg(err, errlen, "%s: read failed (%llu of %llu bytes)", path, (ull)got, (ull)size);
        return SL_EIO;
    }
    text[size] = 0;
    return parse_text(s, path, kind, text, size, err, errlen);
}

/* Index the manifest's text (size bytes and a NUL, counted in s->b; freed
 * here). */
static int parse_text(sl__source *s, const char *path, int kind, char *text, uint64_t size, char *err,
                      size_t errlen) {
    sl__budget *b = s->b;
    char nb[4][32];

    /* Two passes: the first counts rows and path bytes without allocating,
     * so the index is sized exactly, checked against the budget once, and
     * never grows by doubling (which would need twice its size for a
     * moment); the second fills it. */
    typedef int (*parse_fn)(const char *, size_t, sl__manifest_row_fn, void *, char *, size_t);
    parse_fn parse = kind == SL__KIND_CSV ? sl__manifest_parse_csv : sl__manifest_parse_jsonl;
    char perr[200] = "";
    count_ctx cnt = {0, 0};
    uint64_t need = 0, rec_bytes = 0, lab_bytes = 0;
    int rc = parse(text, size, count_row, &cnt, perr, sizeof perr);
    if (rc == SL_EPARSE) sl__msg(err, errlen, "%s: %s", path, perr);
    if (!rc && (sl__mul(cnt.rows, sizeof(sl__rec), &rec_bytes) || sl__mul(cnt.rows, sizeof(int64_t), &lab_bytes) ||
                sl__add(rec_bytes, lab_bytes, &need) || sl__add(need, cnt.bytes, &need) || need > SIZE_MAX / 2)) {
        sl__msg(err, errlen, "%s: %llu rows: the index size overflows", path, (ull)cnt.rows);
        rc = SL_EOVERFLOW;
    }
    if (!rc && cnt.rows) {
        uint64_t used0 = atomic_load(&b->used); /* the text and what others hold */
        s->chunks = sl__calloc(b, 1, sizeof(sl__chunk), SL_MEM_INDEX);
        sl__chunk *c = s->chunks;
        if (c) {
            s->nchunks = 1;
            c->arena = sl__alloc(b, (size_t)cnt.bytes, SL_MEM_INDEX);
            c->recs = sl__alloc(b, (size_t)rec_bytes, SL_MEM_INDEX);
            c->labels = sl__alloc(b, (size_t)lab_bytes, SL_MEM_INDEX);
            c->arena_cap = cnt.bytes;
            c->rec_cap = c->label_cap = cnt.rows;
        }
        uint64_t off;
        if (!c || !c->arena || !c->recs || !c->labels || sl__chunk_put(b, c, "", 0, &off) ||
            sl__chunk_add_dir(b, c, 0, 0, SL__DIR_NONE)) {
            /* dirs[0] above: the manifest's folder, the base itself. */
            rc = sl__nomem_code(b, need);
            sl__msg(err, errlen, "%s: the index of %llu samples needs %s; the budget is %s with %s in use%s", path,
                    (ull)cnt.rows, sl__fmt_bytes(need, nb[0], 32), sl__fmt_bytes(sl__budget_limit(b), nb[1], 32),
                    sl__fmt_bytes(used0, nb[2], 32),
                    rc == SL_EBUDGET ? " (including the manifest text while it is parsed)" : " (the system refused)");
        } else {
            add_ctx a = {s, c};
            rc = parse(text, size, add_row, &a, perr, sizeof perr);
            if (rc || c->nrec != cnt.rows) { /* the same text twice: cannot differ */
                sl__msg(err, errlen, "%s: the second pass disagrees with the first", path);
                rc = rc ? rc : SL_ESTATE;
            }
            s->count = c->nrec;
        }
    }
    sl__free(b, text);
    if (!rc && s->count == 0) {
        sl__msg(err, errlen, "%s: the manifest lists no samples", path);
        rc = SL_EEMPTY;
    }
    return rc;
}
