/*
 * Manifests: CSV (`path,label`, RFC 4180) and JSONL ({"path": ..., "label":
 * ...} per line). Both parsers are strict, allocate nothing (decoded paths
 * go through a PATH_MAX stack buffer: a longer path could not be opened
 * anyway) and report the first error with its line number. They run on
 * hostile input (fuzzed: tests/fuzz/fuzz_manifest.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/util.h"
#include "source_impl.h"

typedef unsigned long long ull;

/* A bounded output buffer: bytes past cap-1 are dropped and noted. */
typedef struct obuf {
    char *p;
    size_t cap, len;
    int trunc;
} obuf;

static inline void put(obuf *o, char c) {
    if (o->len + 1 < o->cap) o->p[o->len++] = c;
    else o->trunc = 1;
}

int sl__parse_int(const char *s, size_t n, int64_t *out) {
    size_t i = 0;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    if (i == n) return -1;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (lim - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Checks every parser makes of a decoded path. NULL if fine. */
static const char *bad_path(const obuf *o) {
    if (o->trunc) return "path longer than PATH_MAX";
    if (o->len == 0) return "empty path";
    if (memchr(o->p, 0, o->len)) return "path contains a NUL byte";
    return NULL;
}

/* ---- CSV --------------------------------------------------------------- */

int sl__manifest_parse_csv(const char *t, size_t n, sl__manifest_row_fn add, void *ctx, char *err,
                           size_t errlen) {
    char pbuf[PATH_MAX], lbuf[32];
    size_t i = 0;
    uint64_t line = 1;
    int first = 1;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) i = 3; /* UTF-8 BOM */
    while (i < n) {
        /* A blank line (spaces, tabs, CR only) is skipped. */
        size_t j = i;
        while (j < n && (t[j] == ' ' || t[j] == '\t' || t[j] == '\r')) j++;
        if (j == n) break;
        if (t[j] == '\n') {
            i = j + 1;
            line++;
            continue;
        }
        uint64_t rec_line = line;
        obuf f[2] = {{pbuf, sizeof pbuf, 0, 0}, {lbuf, sizeof lbuf, 0, 0}};
        int nf = 0;
        for (;;) { /* one field per turn, starting at i */
            obuf dummy = {NULL, 0, 0, 0};
            obuf *o = nf < 2 ? &f[nf] : &dummy;
            if (i < n && t[i] == '"') {
                uint64_t qline = line;
                i++;
                for (;;) {
                    if (i >= n) {
                        sl__msg(err, errlen, "line %llu: quoted field never closed", (ull)qline);
                        return SL_EPARSE;
                    }
                    char c = t[i];
                    if (c == '"') {
                        if (i + 1 < n && t[i + 1] == '"') {
                            put(o, '"');
                            i += 2;
                            continue;
                        }
                        i++;
                        break;
                    }
                    if (c == '\n') line++;
                    put(o, c);
                    i++;
                }
                if (i < n && t[i] == '\r' && (i + 1 == n || t[i + 1] == '\n')) i++;
                if (i < n && t[i] != ',' && t[i] != '\n') {
                    sl__msg(err, errlen, "line %llu: unexpected character after a closing quote", (ull)line);
                    return SL_EPARSE;
                }
            } else {
                while (i < n && t[i] != ',' && t[i] != '\n') {
                    if (t[i] == '"') {
                        sl__msg(err, errlen, "line %llu: quote inside an unquoted field (quote the whole field)",
                                (ull)line);
                        return SL_EPARSE;
                    }
                    if (t[i] == '\r' && (i + 1 == n || t[i + 1] == '\n')) {
                        i++; /* CRLF: the CR ends the field */
                        break;
                    }
                    put(o, t[i]);
                    i++;
                }
            }
            nf++;
            if (i < n && t[i] == ',') {
                i++;
                continue;
            }
            break; /* at '\n' or the end */
        }
        if (i < n) { /* the '\n' */
            i++;
            line++;
        }
        if (nf != 2) {
            sl__msg(err, errlen, "line %llu: expected 2 fields (path,label), found %d", (ull)rec_line, nf);
            return SL_EPARSE;
        }
        int64_t label;
        int is_int = !f[1].trunc && sl__parse_int(lbuf, f[1].len, &label) == 0;
        if (!is_int && first) { /* a header row */
            first = 0;
            continue;
        }
        first = 0;
        if (!is_int) {
            sl__msg(err, errlen, "line %llu: label \"%.*s%s\" is not a 64-bit integer", (ull)rec_line,
                    (int)SL_MIN(f[1].len, 24), lbuf, f[1].trunc || f[1].len > 24 ? "..." : "");
            return SL_EPARSE;
        }
        const char *why = bad_path(&f[0]);
        if (why) {
            sl__msg(err, errlen, "line %llu: %s", (ull)rec_line, why);
            return SL_EPARSE;
        }
        int rc = add(ctx, pbuf, f[0].len, label);
        if (rc) return rc;
    }
    return 0;
}

/* ---- JSONL ------------------------------------------------------------- */

/* A cursor over one line [p, e). why is set on the first error. */
typedef struct jcur {
    const char *p, *e;
    const char *why;
} jcur;

static void ws(jcur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r')) c->p++;
}

static int fail(jcur *c, const char *why) {
    if (!c->why) c->why = why;
    return -1;
}

static int hex4(const char *s, const char *e, unsigned *out) {
    if (e - s < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = s[k];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(obuf *o, unsigned cp) {
    if (cp < 0x80) put(o, (char)cp);
    else if (cp < 0x800) {
        put(o, (char)(0xC0 | (cp >> 6)));
        put(o, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        put(o, (char)(0xE0 | (cp >> 12)));
        put(o, (char)(0x80 | ((cp >> 6) & 0x3F)));
        put(o, (char)(0x80 | (cp & 0x3F)));
    } else {
        put(o, (char)(0xF0 | (cp >> 18)));
        put(o, (char)(0x80 | ((cp >> 12) & 0x3F)));
        put(o, (char)(0x80 | ((cp >> 6) & 0x3F)));
        put(o, (char)(0x80 | (cp & 0x3F)));
    }
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlongs,
 * no surrogates, at most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, const unsigned char *e) {
    unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if ((size_t)(e - s) < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return n;
}

/* A JSON string at c->p (which is '"'), decoded into o (NULL: validate
 * only). */
static int jstring(jcur *c, obuf *o) {
    obuf sink = {NULL, 0, 0, 0};
    if (!o) o = &sink;
    c->p++;
    for (;;) {
        if (c->p >= c->e) return fail(c, "string never closed");
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            c->p++;
            return 0;
        }
        if (ch < 0x20) return fail(c, "control character in a string (escape it)");
        if (ch == '\\') {
            if (c->e - c->p < 2) return fail(c, "string never closed");
            char esc = c->p[1];
            c->p += 2;
            switch (esc) {
            case '"': put(o, '"'); break;
            case '\\': put(o, '\\'); break;
            case '/': put(o, '/'); break;
            case 'b': put(o, '\b'); break;
            case 'f': put(o, '\f'); break;
            case 'n': put(o, '\n'); break;
            case 'r': put(o, '\r'); break;
            case 't': put(o, '\t'); break;
            case 'u': {
                unsigned cp, lo;
                if (hex4(c->p, c->e, &cp)) return fail(c, "bad \\u escape (4 hex digits expected)");
                c->p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(c, "lone low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (c->e - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || hex4(c->p + 2, c->e, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return fail(c, "high surrogate not followed by a low surrogate");
                    c->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                put_utf8(o, cp);
                break;
            }
            default: return fail(c, "unknown escape in a string");
            }
            continue;
        }
        if (ch < 0x80) {
            put(o, (char)ch);
            c->p++;
            continue;
        }
        size_t k = utf8_len((const unsigned char *)c->p, (const unsigned char *)c->e);
        if (!k) return fail(c, "invalid UTF-8 in a string");
        for (size_t q = 0; q < k; q++) put(o, c->p[q]);
        c->p += k;
    }
}

/* A JSON number (RFC 8259 grammar). *is_int: no fraction, no exponent. */
static int jnumber(jcur *c, int *is_int) {
    const char *p = c->p;
    *is_int = 1;
    if (p < c->e && *p == '-') p++;
    if (p >= c->e || *p < '0' || *p > '9') return fail(c, "bad number");
    if (*p == '0') p++;
    else
        while (p < c->e && *p >= '0' && *p <= '9') p++;
    if (p < c->e && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= c->e || *p < '0' || *p > '9') return fail(c, "bad number");
        while (p < c->e && *p >= '0' && *p <= '9') p++;
    }
    if (p < c->e && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < c->e && (*p == '+' || *p == '-')) p++;
        if (p >= c->e || *p < '0' || *p > '9') return fail(c, "bad number");
        while (p < c->e && *p >= '0' && *p <= '9') p++;
    }
    c->p = p;
    return 0;
}

static int jliteral(jcur *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, word, n) != 0) return fail(c, "unexpected character");
    c->p += n;
    return 0;
}

#define JSON_MAX_DEPTH 64

/* Any JSON value at c->p (after blanks), checked and skipped. */
static int jskip(jcur *c, int depth) {
    ws(c);
    if (c->p >= c->e) return fail(c, "value expected");
    int is_int;
    switch (*c->p) {
    case '"': return jstring(c, NULL);
    case 't': return jliteral(c, "true");
    case 'f': return jliteral(c, "false");
    case 'n': return jliteral(c, "null");
    case '{':
    case '[': {
        if (depth >= JSON_MAX_DEPTH) return fail(c, "nesting deeper than 64");
        char close = *c->p == '{' ? '}' : ']';
        c->p++;
        ws(c);
        if (c->p < c->e && *c->p == close) {
            c->p++;
            return 0;
        }
        for (;;) {
            if (close == '}') {
                ws(c);
                if (c->p >= c->e || *c->p != '"') return fail(c, "object key (a string) expected");
                if (jstring(c, NULL)) return -1;
                ws(c);
                if (c->p >= c->e || *c->p != ':') return fail(c, "':' expected after an object key");
                c->p++;
            }
            if (jskip(c, depth + 1)) return -1;
            ws(c);
            if (c->p < c->e && *c->p == ',') {
                c->p++;
                continue;
            }
            if (c->p < c->e && *c->p == close) {
                c->p++;
                return 0;
            }
            return fail(c, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    default:
        if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) return jnumber(c, &is_int);
        return fail(c, "unexpected character");
    }
}

/* "label": a JSON integer in int64 range. */
static int jlabel(jcur *c, int64_t *out) {
    ws(c);
    const char *s = c->p;
    int is_int;
    if (c->p >= c->e || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9')))
        return fail(c, "\"label\" must be an integer");
    if (jnumber(c, &is_int)) return -1;
    if (!is_int) return fail(c, "\"label\" must be an integer (no fraction or exponent)");
    if (sl__parse_int(s, (size_t)(c->p - s), out)) return fail(c, "\"label\" outside the 64-bit integer range");
    return 0;
}

/* One line holding an object: path into o, label into *label. */
static int jline(jcur *c, obuf *o, int64_t *label) {
    char kbuf[8];
    int have_path = 0, have_label = 0;
    if (*c->p != '{') return fail(c, "a JSON object expected");
    c->p++;
    ws(c);
    if (c->p < c->e && *c->p == '}') c->p++;
    else {
        for (;;) {
            ws(c);
            if (c->p >= c->e || *c->p != '"') return fail(c, "object key (a string) expected");
            obuf k = {kbuf, sizeof kbuf, 0, 0};
            if (jstring(c, &k)) return -1;
            ws(c);
            if (c->p >= c->e || *c->p != ':') return fail(c, "':' expected after an object key");
            c->p++;
            ws(c);
            int is_path = !k.trunc && k.len == 4 && memcmp(kbuf, "path", 4) == 0;
            int is_label = !k.trunc && k.len == 5 && memcmp(kbuf, "label", 5) == 0;
            if (is_path) {
                if (have_path) return fail(c, "duplicate key \"path\"");
                if (c->p >= c->e || *c->p != '"') return fail(c, "\"path\" must be a string");
                if (jstring(c, o)) return -1;
                have_path = 1;
            } else if (is_label) {
                if (have_label) return fail(c, "duplicate key \"label\"");
                if (jlabel(c, label)) return -1;
                have_label = 1;
            } else if (jskip(c, 1)) {
                return -1;
            }
            ws(c);
            if (c->p < c->e && *c->p == ',') {
                c->p++;
                continue;
            }
            if (c->p < c->e && *c->p == '}') {
                c->p++;
                break;
            }
            return fail(c, "',' or '}' expected");
        }
    }
    ws(c);
    if (c->p != c->e) return fail(c, "characters after the object");
    if (!have_path) return fail(c, "missing \"path\"");
    if (!have_label) return fail(c, "missing \"label\"");
    const char *why = bad_path(o);
    if (why) return fail(c, why);
    return 0;
}

int sl__manifest_parse_jsonl(const char *t, size_t n, sl__manifest_row_fn add, void *ctx, char *err,
                             size_t errlen) {
    char pbuf[PATH_MAX];
    size_t i = 0;
    uint64_t line = 0;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) i = 3;
    while (i < n) {
        line++;
        const char *nl = memchr(t + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - t) : n;
        jcur c = {t + i, t + e, NULL};
        i = nl ? e + 1 : n;
        ws(&c);
        if (c.p == c.e) continue; /* blank line */
        obuf o = {pbuf, sizeof pbuf, 0, 0};
        int64_t label = 0;
        if (jline(&c, &o, &label)) {
            sl__msg(err, errlen, "line %llu: %s", (ull)line, c.why ? c.why : "syntax error");
            return SL_EPARSE;
        }
        int rc = add(ctx, pbuf, o.len, label);
        if (rc) return rc;
    }
    return 0;
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

int sl__manifest_index(sl__source *s, const char *path, int kind, char *err, size_t errlen) {
    sl__budget *b = s->b;
    char nb[4][32];
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
                sl__fmt_bytes(b->limit, nb[2], 32), sl__fmt_bytes(atomic_load(&b->used), nb[3], 32),
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
                    (ull)cnt.rows, sl__fmt_bytes(need, nb[0], 32), sl__fmt_bytes(b->limit, nb[1], 32),
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
