/*
 * Table sources: manifests whose rows name a sample's values (DESIGN.md,
 * "Samples with fields"):
 *
 *   .jsonl  {"blur": "a/0001_blur.npy", "sharp": "a/0001_sharp.npy", "label": 3}
 *           {"scans": ["s/0.bin", "s/1.bin"], "target": [0.5, 1.0, 2.5]}
 *   .csv    blur,sharp,label          (the header names the fields)
 *           a/0001_blur.npy,a/0001_sharp.npy,3
 *
 * Only the keys the schema asks for are indexed; each must be present in
 * every row with the type asked for (a path string, a list of path strings,
 * an integer, a number or a list of numbers; a .csv cell holds a path, an
 * integer or one number: lists need .jsonl). A row that breaks this stops
 * the index with its line number: a manifest is data the user wrote, and a
 * typo in it should not become a silent run of error records.
 *
 * Rows are parsed by the row tokenizer (jsonrow.h: a stated grammar, not
 * JSON) and CSV records by manifest.c's reader, through bounded stack
 * buffers; the values are copied into the table, whose every byte is
 * counted under SL_MEM_INDEX. Paths are relative to the manifest's folder
 * unless absolute.
 */
#define _GNU_SOURCE
#include "source/table.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "source/jsonrow.h"
#include "source/manifest.h"
#include "source/remote.h"

typedef unsigned long long ull;

#define MAX_LIST (1u << 20)

/* Grow *p to hold need elements of sz bytes (doubling). */
static int grow(sl__budget *b, void **p, uint64_t *cap, uint64_t need, size_t sz, uint64_t first) {
    if (need <= *cap) return 0;
    uint64_t nc = *cap ? *cap : first, bytes;
    while (nc < need)
        if (sl__mul(nc, 2, &nc)) return SL_EOVERFLOW;
    if (sl__mul(nc, sz, &bytes) || bytes > SIZE_MAX / 2) return SL_EOVERFLOW;
    void *q = sl__realloc(b, *p, (size_t)bytes, SL_MEM_INDEX);
    if (!q) return sl__nomem_code(b, bytes);
    *p = q;
    *cap = nc;
    return 0;
}

int sl__table_put(sl__budget *b, sl__table *t, const void *src, size_t n, int align, uint64_t *off) {
    uint64_t start = align ? (t->arena_len + 7) & ~(uint64_t)7 : t->arena_len, end;
    if (sl__add(start, n, &end)) return SL_EOVERFLOW;
    int rc = grow(b, (void **)&t->arena, &t->arena_cap, end, 1, 4096);
    if (rc) return rc;
    if (n) memcpy(t->arena + start, src, n);
    *off = start;
    t->arena_len = end;
    return 0;
}

int sl__table_add(sl__budget *b, sl__table *t, sl__rec r) {
    int rc = grow(b, (void **)&t->vals, &t->val_cap, t->nvals + 1, sizeof(sl__rec), 256);
    if (rc) return rc;
    t->vals[t->nvals++] = r;
    return 0;
}

int sl__table_new(sl__budget *b, uint32_t ncols, sl__table **out) {
    sl__table *t = sl__calloc(b, 1, sizeof *t, SL_MEM_INDEX);
    if (!t || !(t->types = sl__calloc(b, ncols, sizeof(int), SL_MEM_INDEX))) {
        sl__free(b, t);
        return sl__nomem_code(b, ncols * sizeof(int) + sizeof *t);
    }
    t->ncols = ncols;
    *out = t;
    return 0;
}

/* Give back the slack of doubling (a smaller block, or the same one when
 * the system cannot move it). */
void sl__table_shrink(sl__budget *b, sl__table *t) {
    void *q;
    if (t->arena_cap > t->arena_len && t->arena_len && (q = sl__realloc(b, t->arena, (size_t)t->arena_len, SL_MEM_INDEX)))
        t->arena = q, t->arena_cap = t->arena_len;
    if (t->val_cap > t->nvals && t->nvals && (q = sl__realloc(b, t->vals, (size_t)t->nvals * sizeof(sl__rec), SL_MEM_INDEX)))
        t->vals = q, t->val_cap = t->nvals;
}

void sl__table_free(sl__budget *b, sl__table *t) {
    if (!t) return;
    sl__free(b, t->arena);
    sl__free(b, t->vals);
    sl__free(b, t->types);
    sl__free(b, t);
}

/* ---- values ------------------------------------------------------------------- */

/* A decoded path into a FILE record (its bytes put in the arena). */
static int path_rec(sl__budget *b, sl__table *t, const char *p, size_t n, int trunc, sl__rec *r, const char **why) {
    if (trunc || n >= PATH_MAX) return *why = "a path longer than PATH_MAX", SL_EPARSE;
    if (n == 0) return *why = "an empty path", SL_EPARSE;
    if (memchr(p, 0, n)) return *why = "a path with a NUL byte", SL_EPARSE;
    uint64_t off;
    int rc = sl__table_put(b, t, p, n, 0, &off);
    if (rc) return rc;
    *r = (sl__rec){off, (uint32_t)n, p[0] == '/' ? SL__DIR_NONE : 0};
    return 0;
}

/* The list of paths of member m: their FILE records in one aligned run. */
static int paths_rec(sl__budget *b, sl__table *t, const sl__jrow *row, const sl__jmember *m, sl__rec *r,
                     const char **why) {
    if (m->type != SL__JV_STRINGS) return *why = "is not a list of path strings", SL_EPARSE;
    uint32_t n = m->count;
    if (n > MAX_LIST) return *why = "has over 2^20 paths", SL_EPARSE;
    sl__rec tmp[64], *recs = n <= 64 ? tmp : sl__alloc(b, (size_t)n * sizeof(sl__rec), SL_MEM_SCRATCH);
    if (!recs) return sl__nomem_code(b, (uint64_t)n * sizeof(sl__rec));
    char pbuf[PATH_MAX];
    sl__jiter it;
    sl__jrow_iter(row, m, &it);
    int rc = 0;
    for (uint32_t k = 0; k < n && !rc; k++) {
        sl__obuf o = {pbuf, sizeof pbuf, 0, 0};
        sl__jiter_string(&it, &o);
        rc = path_rec(b, t, pbuf, o.len, o.trunc, &recs[k], why);
    }
    uint64_t off = 0;
    if (!rc) rc = sl__table_put(b, t, recs, (size_t)n * sizeof(sl__rec), 1, &off);
    if (recs != tmp) sl__free(b, recs);
    if (!rc) *r = (sl__rec){off, n, 0};
    return rc;
}

/* n numbers (doubles) into the arena, 8-aligned: their record. */
static int numbers_rec(sl__budget *b, sl__table *t, const double *v, uint32_t n, sl__rec *r) {
    uint64_t off;
    int rc = sl__table_put(b, t, v, (size_t)n * 8, 1, &off);
    if (!rc) *r = (sl__rec){off, n, 0};
    return rc;
}

/* The numbers of member m (a number or a list of them). */
static int jnumbers_rec(sl__budget *b, sl__table *t, const sl__jrow *row, const sl__jmember *m, sl__rec *r,
                        const char **why) {
    if (m->type != SL__JV_NUMBER && m->type != SL__JV_NUMBERS && m->type != SL__JV_EMPTY)
        return *why = "is neither a number nor a list of numbers", SL_EPARSE;
    if (m->count > MAX_LIST) return *why = "has over 2^20 numbers", SL_EPARSE;
    uint64_t off = (t->arena_len + 7) & ~(uint64_t)7, end;
    if (sl__add(off, (uint64_t)m->count * 8, &end)) return SL_EOVERFLOW;
    int rc = grow(b, (void **)&t->arena, &t->arena_cap, end, 1, 4096);
    if (rc) return rc;
    sl__jiter it;
    sl__jrow_iter(row, m, &it);
    for (uint32_t k = 0; k < m->count; k++) {
        double d = sl__jiter_number(&it);
        if (!isfinite(d)) /* 1e400: past a double, as the CSV reader refuses it */
            return *why = "holds a number beyond a double's range (about 1.8e308)", SL_EPARSE;
        memcpy(t->arena + off + (uint64_t)k * 8, &d, 8);
    }
    t->arena_len = end;
    *r = (sl__rec){off, m->count, 0};
    return 0;
}

/* Member m of a .jsonl row as the column's type, appended. SL_EPARSE with
 * *why for a value of the wrong shape. */
static int add_json(sl__budget *b, sl__table *t, int type, const sl__jrow *row, const sl__jmember *m, const char **why) {
    sl__rec r = {0, 0, 0};
    int rc = 0;
    switch (type) {
    case SL__VAL_FILE: {
        if (m->type != SL__JV_STRING) return *why = "is not a path string", SL_EPARSE;
        char pbuf[PATH_MAX];
        sl__obuf o = {pbuf, sizeof pbuf, 0, 0};
        sl__jiter it;
        sl__jrow_iter(row, m, &it);
        sl__jiter_string(&it, &o);
        rc = path_rec(b, t, pbuf, o.len, o.trunc, &r, why);
        break;
    }
    case SL__VAL_FILES: rc = paths_rec(b, t, row, m, &r, why); break;
    case SL__VAL_INT: {
        int64_t v;
        if (m->type != SL__JV_NUMBER || !m->is_int) return *why = "is not an integer", SL_EPARSE;
        if (sl__jrow_int(row, m, &v)) return *why = "is outside the 64-bit integer range", SL_EPARSE;
        r.off = (uint64_t)v;
        break;
    }
    case SL__VAL_NUMBERS: rc = jnumbers_rec(b, t, row, m, &r, why); break;
    default: return *why = "has an unknown column type", SL_EINVAL;
    }
    return rc ? rc : sl__table_add(b, t, r);
}

/* A .csv cell as the column's type, appended. */
static int add_cell(sl__budget *b, sl__table *t, int type, const char *s, const sl__csv_field *f, const char **why) {
    sl__rec r = {0, 0, 0};
    int rc = 0;
    int64_t v;
    if (f->trunc && f->len < PATH_MAX) return *why = "does not fit: a record's cells hold at most 20 KiB", SL_EPARSE;
    if (type == SL__VAL_FILE) {
        rc = path_rec(b, t, s, f->len, f->trunc, &r, why);
    } else if (type == SL__VAL_INT) {
        if (f->trunc || f->len > 32 || sl__parse_int(s, f->len, &v)) return *why = "is not a 64-bit integer", SL_EPARSE;
        r.off = (uint64_t)v;
    } else if (type == SL__VAL_NUMBERS) {
        char num[72], *end;
        if (f->trunc || f->len == 0 || f->len >= sizeof num) return *why = "is not a number", SL_EPARSE;
        memcpy(num, s, f->len);
        num[f->len] = 0;
        double d = strtod(num, &end);
        while (*end == ' ' || *end == '\t') end++;
        if (end == num || *end || !isfinite(d)) return *why = "is not a number", SL_EPARSE;
        rc = numbers_rec(b, t, &d, 1, &r);
    } else {
        return *why = "has an unknown column type", SL_EINVAL;
    }
    return rc ? rc : sl__table_add(b, t, r);
}

static const char *type_name(int type) {
    switch (type) {
    case SL__VAL_FILE: return "a path";
    case SL__VAL_FILES: return "a list of paths";
    case SL__VAL_INT: return "an integer";
    default: return "numbers";
    }
}

/* The message for a value that failed to be added, at byte done of the
 * manifest's total. */
static int value_error(const sl__source *s, const char *path, uint64_t line, const char *key, int rc, const char *why,
                       uint64_t done, uint64_t total, char *err, size_t errlen) {
    char room[160];
    if (rc == SL_EPARSE) sl__msg(err, errlen, "%s: line %llu: \"%s\" %s", path, (ull)line, key, why);
    else
        sl__msg(err, errlen, "%s: line %llu: indexing needs more memory than the budget leaves: %s (%s)", path,
                (ull)line, sl__index_room(s->b, done, total, room, sizeof room), sl_strerror(rc));
    return rc;
}

/* ---- .jsonl ------------------------------------------------------------------- */

static int index_jsonl(sl__source *s, const char *path, const char *text, size_t n, const sl__colreq *req,
                       uint32_t nreq, char *err, size_t errlen) {
    sl__table *t = s->tab;
    sl__jrow row[1]; /* ~10 KiB of stack: tables are indexed on the caller's thread */
    char why_row[256], key[80];
    uint64_t line = 0;
    size_t i = n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    while (i < n) {
        size_t next, end = sl__jrow_line(text, n, i, &next), j = i;
        line++;
        while (j < end && (text[j] == ' ' || text[j] == '\t')) j++;
        const char *start = text + i;
        i = next;
        if (j == end) continue; /* blank line */
        if (sl__jrow_parse(start, (size_t)(text + end - start), row, why_row, sizeof why_row)) {
            sl__msg(err, errlen, "%s: line %llu: %s", path, (ull)line, why_row);
            return SL_EPARSE;
        }
        for (uint32_t k = 0; k < nreq; k++) {
            const sl__jmember *m = sl__jrow_find(row, req[k].key);
            const char *why = NULL;
            if (!m) {
                sl__msg(err, errlen, "%s: line %llu: no \"%s\" key (%s wanted)", path, (ull)line, req[k].key,
                        type_name(req[k].type));
                return SL_EPARSE;
            }
            int rc = add_json(s->b, t, req[k].type, row, m, &why);
            if (rc) {
                sl__jrow_key(row, m, key, sizeof key);
                return value_error(s, path, line, key, rc, why, i, n, err, errlen);
            }
        }
        t->nrows++;
    }
    return 0;
}

/* ---- .csv ---------------------------------------------------------------------- */

/* The header's column for each request (its alternatives in turn). */
static int csv_columns(const char *path, const char *buf, const sl__csv_field *h, uint32_t nh, const sl__colreq *req,
                       uint32_t nreq, uint32_t *col, char *err, size_t errlen) {
    for (uint32_t k = 0; k < nreq; k++) {
        const char *alt = req[k].key;
        int found = -1;
        while (found < 0) {
            size_t n = strcspn(alt, ";");
            for (uint32_t c = 0; c < nh && found < 0; c++)
                if (n && h[c].len == n && !memcmp(buf + h[c].off, alt, n)) found = (int)c;
            if (!alt[n]) break;
            alt += n + 1;
        }
        if (found < 0) {
            sl__msg(err, errlen, "%s: line 1: the header names no column for \"%s\"", path, req[k].key);
            return SL_EPARSE;
        }
        if (req[k].type == SL__VAL_FILES) {
            sl__msg(err, errlen, "%s: \"%s\" wants a list of paths; a .csv cell holds one value (use .jsonl)", path,
                    req[k].key);
            return SL_EINVAL;
        }
        col[k] = (uint32_t)found;
    }
    return 0;
}

#define CSV_COLS 256
#define CSV_RECORD (16384 + PATH_MAX) /* bytes of a record's cells */

static int index_csv(sl__source *s, const char *path, const char *text, size_t n, const sl__colreq *req,
                     uint32_t nreq, char *err, size_t errlen) {
    char buf[CSV_RECORD]; /* the header, then each record's cells (~27 KiB of stack in all) */
    char key[80];
    sl__csv_field f[CSV_COLS];
    uint32_t col[SL__MAX_COLS], nh, nf;
    uint64_t line = 1, rec_line;
    size_t i = n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    int rc = sl__csv_record(text, n, &i, &line, &rec_line, f, CSV_COLS, &nh, buf, sizeof buf, err, errlen);
    if (rc == 1) return 0; /* empty: no rows */
    if (rc) return rc;
    if (nh > CSV_COLS) {
        sl__msg(err, errlen, "%s: line 1: the header has %u columns (at most %d)", path, nh, CSV_COLS);
        return SL_ELIMIT;
    }
    if ((rc = csv_columns(path, buf, f, nh, req, nreq, col, err, errlen))) return rc;
    /* the header's cells, kept for messages past the buffer's reuse */
    char names[SL__MAX_COLS][64];
    for (uint32_t k = 0; k < nreq; k++)
        snprintf(names[k], sizeof names[k], "%.*s", (int)SL_MIN(f[col[k]].len, 63), buf + f[col[k]].off);
    while ((rc = sl__csv_record(text, n, &i, &line, &rec_line, f, CSV_COLS, &nf, buf, sizeof buf, err, errlen)) == 0) {
        if (nf != nh) {
            sl__msg(err, errlen, "%s: line %llu: %u fields, the header has %u", path, (ull)rec_line, nf, nh);
            return SL_EPARSE;
        }
        for (uint32_t k = 0; k < nreq; k++) {
            const char *why = NULL;
            const sl__csv_field *c = &f[col[k]];
            if ((rc = add_cell(s->b, s->tab, req[k].type, buf + c->off, c, &why))) {
                snprintf(key, sizeof key, "%s", names[k]);
                return value_error(s, path, rec_line, key, rc, why, i, n, err, errlen);
            }
        }
        s->tab->nrows++;
    }
    if (rc == SL_EPARSE) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", err);
        sl__msg(err, errlen, "%s: %s", path, tmp);
    }
    return rc == 1 ? 0 : rc;
}

/* A .csv whose first record is a path,label row (two fields, an integer
 * second): no header. */
static int csv_headerless(const char *text, size_t n) {
    char buf[PATH_MAX + 64], err[8];
    sl__csv_field f[2];
    uint32_t nf;
    uint64_t line = 1, rec_line;
    size_t i = n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    int64_t v;
    if (sl__csv_record(text, n, &i, &line, &rec_line, f, 2, &nf, buf, sizeof buf, err, sizeof err)) return 0;
    return nf == 2 && !f[1].trunc && f[1].len < 32 && sl__parse_int(buf + f[1].off, f[1].len, &v) == 0;
}

/* ---- the manifest -------------------------------------------------------------- */

/* The manifest's text, whole, in budgeted memory (*size bytes + a NUL). */
static int read_text(sl__budget *b, const char *path, char **out, size_t *size, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        sl__msg(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT ? SL_ENOENT : SL_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size >= SIZE_MAX / 2) {
        close(fd);
        sl__msg(err, errlen, "%s: not a regular file", path);
        return SL_EINVAL;
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *text = sl__alloc(b, n + 1, SL_MEM_INDEX);
    if (!text) {
        close(fd);
        int rc = sl__nomem_code(b, n + 1);
        sl__msg(err, errlen, "%s: reading the manifest needs %llu bytes (%s)", path, (ull)n + 1, sl_strerror(rc));
        return rc;
    }
    while (got < n) {
        ssize_t r = pread(fd, text + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        sl__free(b, text);
        sl__msg(err, errlen, "%s: read failed (%llu of %llu bytes)", path, (ull)got, (ull)n);
        return SL_EIO;
    }
    text[n] = 0;
    *out = text;
    *size = n;
    return 0;
}

int sl__table_index(sl__source *s, const char *path, int kind, const sl__colreq *req, uint32_t nreq, char *err,
                    size_t errlen) {
    sl__budget *b = s->b;
    if (nreq == 0 || nreq > SL__MAX_COLS) {
        sl__msg(err, errlen, "%s: %u columns requested (1 to %d)", path, nreq, SL__MAX_COLS);
        return SL_EINVAL;
    }
    char *text = NULL;
    size_t size = 0;
    int rc;
    if (s->url_base) { /* a manifest at a URL (remote.c) */
        uint64_t n = 0;
        rc = sl__remote_text(s, path, &text, &n, err, errlen);
        size = (size_t)n;
    } else {
        rc = read_text(b, path, &text, &size, err, errlen);
    }
    if (rc) return rc;
    if (kind == SL__KIND_CSV && csv_headerless(text, size)) {
        sl__free(b, text);
        s->kind = SL__KIND_CSV;
        return sl__manifest_index(s, path, SL__KIND_CSV, err, errlen);
    }
    s->kind = SL__KIND_TABLE;
    if ((rc = sl__table_new(b, nreq, &s->tab))) {
        sl__msg(err, errlen, "%s: no memory for the index", path);
    } else {
        for (uint32_t k = 0; k < nreq; k++) s->tab->types[k] = req[k].type;
        rc = kind == SL__KIND_CSV ? index_csv(s, path, text, size, req, nreq, err, errlen)
                                  : index_jsonl(s, path, text, size, req, nreq, err, errlen);
    }
    sl__free(b, text);
    if (rc) return rc;
    if (s->tab->nrows == 0) {
        sl__msg(err, errlen, "%s: the manifest lists no samples", path);
        return SL_EEMPTY;
    }
    sl__table_shrink(b, s->tab);
    s->count = s->tab->nrows;
    s->ncols = nreq;
    return 0;
}
