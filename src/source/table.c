/*
 * Table sources: a `.jsonl` manifest whose rows name a sample's values
 * (DESIGN.md, "Samples with fields"):
 *
 *   {"blur": "a/0001_blur.npy", "sharp": "a/0001_sharp.npy", "label": 3}
 *   {"scans": ["s/0.bin", "s/1.bin"], "target": [0.5, 1.0, 2.5]}
 *
 * Only the keys the schema asks for are indexed; each must be present in
 * every row with the type asked for (a path string, a list of path strings,
 * an integer, a number or a list of numbers). A row that breaks this stops
 * the index with its line number: a manifest is data the user wrote, and a
 * typo in it should not become a silent run of error records.
 *
 * Rows are parsed by jansson. Its objects live for one row and are freed
 * before the next (jansson allocates with malloc; nothing of it outlives the
 * row), and the values are copied into the table, whose every byte is
 * counted under SL_MEM_INDEX. Paths are relative to the manifest's folder
 * unless absolute.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/util.h"
#include "source_impl.h"

typedef unsigned long long ull;

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

void sl__table_free(sl__budget *b, sl__table *t) {
    if (!t) return;
    sl__free(b, t->arena);
    sl__free(b, t->vals);
    sl__free(b, t->types);
    sl__free(b, t);
}

/* The first key of the ';'-separated alternatives present in row. */
static json_t *lookup(json_t *row, const char *keys, const char **which, size_t *which_len) {
    const char *k = keys;
    for (;;) {
        const char *semi = strchr(k, ';');
        size_t n = semi ? (size_t)(semi - k) : strlen(k);
        json_t *v = n ? json_object_getn(row, k, n) : NULL;
        if (v) {
            *which = k;
            *which_len = n;
            return v;
        }
        if (!semi) return NULL;
        k = semi + 1;
    }
}

/* A path string into a FILE record (not yet appended). */
static int path_rec(sl__budget *b, sl__table *t, json_t *v, sl__rec *r, const char **why) {
    size_t n = json_string_length(v);
    const char *p = json_string_value(v);
    if (n == 0) return *why = "an empty path", SL_EPARSE;
    if (n >= PATH_MAX) return *why = "a path longer than PATH_MAX", SL_EPARSE;
    if (memchr(p, 0, n)) return *why = "a path with a NUL byte", SL_EPARSE;
    uint64_t off;
    int rc = sl__table_put(b, t, p, n, 0, &off);
    if (rc) return rc;
    *r = (sl__rec){off, (uint32_t)n, p[0] == '/' ? SL__DIR_NONE : 0};
    return 0;
}

/* Convert row value v to the column's type and append it. SL_EPARSE with
 * *why for a value of the wrong shape. */
static int add_value(sl__budget *b, sl__table *t, int type, json_t *v, const char **why) {
    sl__rec r = {0, 0, 0};
    int rc = 0;
    switch (type) {
    case SL__VAL_FILE:
        if (!json_is_string(v)) return *why = "is not a path string", SL_EPARSE;
        if ((rc = path_rec(b, t, v, &r, why))) return rc;
        break;
    case SL__VAL_FILES: {
        if (!json_is_array(v)) return *why = "is not a list of path strings", SL_EPARSE;
        size_t n = json_array_size(v);
        if (n == 0 || n > (1u << 20)) return *why = "is an empty list or has over 2^20 paths", SL_EPARSE;
        /* paths first, then their records in one aligned run */
        sl__rec tmp[64], *recs = n <= 64 ? tmp : sl__alloc(b, n * sizeof(sl__rec), SL_MEM_SCRATCH);
        if (!recs) return sl__nomem_code(b, n * sizeof(sl__rec));
        for (size_t k = 0; k < n && !rc; k++) {
            json_t *e = json_array_get(v, k);
            if (!json_is_string(e)) rc = (*why = "has an element that is not a path string", SL_EPARSE);
            else rc = path_rec(b, t, e, &recs[k], why);
        }
        uint64_t off = 0;
        if (!rc) rc = sl__table_put(b, t, recs, n * sizeof(sl__rec), 1, &off);
        if (recs != tmp) sl__free(b, recs);
        if (rc) return rc;
        r = (sl__rec){off, (uint32_t)n, 0};
        break;
    }
    case SL__VAL_INT:
        if (!json_is_integer(v)) return *why = "is not an integer", SL_EPARSE;
        r.off = (uint64_t)json_integer_value(v);
        break;
    case SL__VAL_NUMBERS: {
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        if (!json_is_array(v) && !json_is_number(v)) return *why = "is neither a number nor a list of numbers", SL_EPARSE;
        if (n > (1u << 20)) return *why = "has over 2^20 numbers", SL_EPARSE;
        uint64_t off = (t->arena_len + 7) & ~(uint64_t)7, end;
        if (sl__add(off, (uint64_t)n * 8, &end)) return SL_EOVERFLOW;
        if ((rc = grow(b, (void **)&t->arena, &t->arena_cap, end, 1, 4096))) return rc;
        for (size_t k = 0; k < n; k++) {
            json_t *e = json_is_array(v) ? json_array_get(v, k) : v;
            if (!json_is_number(e)) return *why = "has an element that is not a number", SL_EPARSE;
            double d = json_number_value(e);
            memcpy(t->arena + off + k * 8, &d, 8);
        }
        t->arena_len = end;
        r = (sl__rec){off, (uint32_t)n, 0};
        break;
    }
    default: return *why = "has an unknown column type", SL_EINVAL;
    }
    return sl__table_add(b, t, r);
}

static const char *type_name(int type) {
    switch (type) {
    case SL__VAL_FILE: return "a path";
    case SL__VAL_FILES: return "a list of paths";
    case SL__VAL_INT: return "an integer";
    default: return "numbers";
    }
}

/* Index every row of text [0, n). */
static int index_rows(sl__source *s, const char *path, const char *text, size_t n, const sl__colreq *req,
                      uint32_t nreq, char *err, size_t errlen) {
    sl__table *t = s->tab;
    uint64_t line = 0;
    size_t i = 0;
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) i = 3;
    while (i < n) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - text) : n;
        line++;
        size_t j = i;
        while (j < end && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
        if (j == end) { /* blank line */
            i = end + 1;
            continue;
        }
        json_error_t je;
        json_t *row = json_loadb(text + i, end - i, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        if (!row || !json_is_object(row)) {
            sl__msg(err, errlen, "%s: line %llu: %s", path, (ull)line, row ? "not a JSON object" : je.text);
            json_decref(row);
            return SL_EPARSE;
        }
        for (uint32_t k = 0; k < nreq; k++) {
            const char *key = NULL, *why = NULL;
            size_t klen = 0;
            json_t *v = lookup(row, req[k].key, &key, &klen);
            int rc;
            if (!v) {
                sl__msg(err, errlen, "%s: line %llu: no \"%s\" key (%s wanted)", path, (ull)line, req[k].key,
                        type_name(req[k].type));
                rc = SL_EPARSE;
            } else if ((rc = add_value(s->b, t, req[k].type, v, &why)) == SL_EPARSE) {
                sl__msg(err, errlen, "%s: line %llu: \"%.*s\" %s", path, (ull)line, (int)klen, key, why);
            } else if (rc) {
                sl__msg(err, errlen, "%s: line %llu: indexing needs more memory than the budget leaves (%s)", path,
                        (ull)line, sl_strerror(rc));
            }
            if (rc) {
                json_decref(row);
                return rc;
            }
        }
        json_decref(row);
        t->nrows++;
        i = end + 1;
    }
    return 0;
}

int sl__table_index(sl__source *s, const char *path, const sl__colreq *req, uint32_t nreq, char *err,
                    size_t errlen) {
    sl__budget *b = s->b;
    if (nreq == 0 || nreq > 64) {
        sl__msg(err, errlen, "%s: %u columns requested (1 to 64)", path, nreq);
        return SL_EINVAL;
    }
    int rc = sl__table_new(b, nreq, &s->tab);
    if (rc) {
        sl__msg(err, errlen, "%s: no memory for the index", path);
        return rc;
    }
    for (uint32_t k = 0; k < nreq; k++) s->tab->types[k] = req[k].type;
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
    size_t size = (size_t)st.st_size;
    char *text = sl__alloc(b, size + 1, SL_MEM_INDEX);
    if (!text) {
        close(fd);
        rc = sl__nomem_code(b, size + 1);
        sl__msg(err, errlen, "%s: reading the manifest needs %llu bytes (%s)", path, (ull)size + 1, sl_strerror(rc));
        return rc;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, text + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    rc = got == size ? 0 : SL_EIO;
    if (rc) sl__msg(err, errlen, "%s: read failed (%llu of %llu bytes)", path, (ull)got, (ull)size);
    if (!rc) rc = index_rows(s, path, text, size, req, nreq, err, errlen);
    sl__free(b, text);
    if (rc) return rc;
    if (s->tab->nrows == 0) {
        sl__msg(err, errlen, "%s: the manifest lists no samples", path);
        return SL_EEMPTY;
    }
    s->count = s->tab->nrows;
    s->ncols = nreq;
    return 0;
}
