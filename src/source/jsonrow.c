/*
 * The row tokenizer and parser: the grammar, and what is refused, are in
 * jsonrow.h (and docs/json.md). Strings and numbers follow RFC 8259
 * exactly; the structure is a flat object, checked as it is read.
 */
#include "source/jsonrow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "source/index.h"

#define NUMBER_MAX 63

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

static void put_utf8(sl__obuf *o, unsigned cp) {
    if (cp < 0x80) sl__obuf_put(o, (char)cp);
    else if (cp < 0x800) {
        sl__obuf_put(o, (char)(0xC0 | (cp >> 6)));
        sl__obuf_put(o, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        sl__obuf_put(o, (char)(0xE0 | (cp >> 12)));
        sl__obuf_put(o, (char)(0x80 | ((cp >> 6) & 0x3F)));
        sl__obuf_put(o, (char)(0x80 | (cp & 0x3F)));
    } else {
        sl__obuf_put(o, (char)(0xF0 | (cp >> 18)));
        sl__obuf_put(o, (char)(0x80 | ((cp >> 12) & 0x3F)));
        sl__obuf_put(o, (char)(0x80 | ((cp >> 6) & 0x3F)));
        sl__obuf_put(o, (char)(0x80 | (cp & 0x3F)));
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
static int jstring(jcur *c, sl__obuf *o) {
    sl__obuf sink = {NULL, 0, 0, 0};
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
            case '"': sl__obuf_put(o, '"'); break;
            case '\\': sl__obuf_put(o, '\\'); break;
            case '/': sl__obuf_put(o, '/'); break;
            case 'b': sl__obuf_put(o, '\b'); break;
            case 'f': sl__obuf_put(o, '\f'); break;
            case 'n': sl__obuf_put(o, '\n'); break;
            case 'r': sl__obuf_put(o, '\r'); break;
            case 't': sl__obuf_put(o, '\t'); break;
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
            sl__obuf_put(o, (char)ch);
            c->p++;
            continue;
        }
        size_t k = utf8_len((const unsigned char *)c->p, (const unsigned char *)c->e);
        if (!k) return fail(c, "invalid UTF-8 in a string");
        for (size_t q = 0; q < k; q++) sl__obuf_put(o, c->p[q]);
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


/* ---- the row -------------------------------------------------------------------- */

#define GRAMMAR ": rows are flat objects of strings, numbers and lists of strings or of numbers"

/* One list element or scalar at c->p: its type (SL__JV_STRING or
 * SL__JV_NUMBER), or -1 with why (*bad: a value outside the grammar). */
static int scalar(jcur *c, int *is_int) {
    if (c->p >= c->e) return fail(c, "value expected");
    char ch = *c->p;
    if (ch == '"') return jstring(c, NULL) ? -1 : SL__JV_STRING;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        const char *s = c->p;
        if (jnumber(c, is_int)) return -1;
        if (c->p - s > NUMBER_MAX) return fail(c, "a number longer than 63 characters");
        return SL__JV_NUMBER;
    }
    if (ch == '{') return fail(c, "an object inside a row" GRAMMAR);
    if (ch == '[') return fail(c, "a list inside a list" GRAMMAR);
    if (ch == 't' || ch == 'f' || ch == 'n') return fail(c, "true, false or null" GRAMMAR);
    return fail(c, "unexpected character");
}

static int list(jcur *c, sl__jmember *m) {
    c->p++; /* '[' */
    ws(c);
    if (c->p < c->e && *c->p == ']') {
        c->p++;
        m->type = SL__JV_EMPTY;
        m->count = 0;
        return 0;
    }
    for (m->count = 0;; m->count++) {
        int is_int, t;
        ws(c);
        if ((t = scalar(c, &is_int)) < 0) return -1;
        if (m->count == 0) m->type = t == SL__JV_STRING ? SL__JV_STRINGS : SL__JV_NUMBERS;
        else if ((t == SL__JV_STRING) != (m->type == SL__JV_STRINGS)) return fail(c, "a list mixing strings and numbers" GRAMMAR);
        ws(c);
        if (c->p < c->e && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->e && *c->p == ']') {
            c->p++;
            m->count++;
            return 0;
        }
        return fail(c, "',' or ']' expected");
    }
}

static int value(jcur *c, sl__jmember *m, const char *line) {
    const char *start = c->p;
    if (c->p < c->e && *c->p == '[') {
        if (list(c, m)) return -1;
    } else {
        int t = scalar(c, &m->is_int);
        if (t < 0) return -1;
        m->type = t;
        m->count = 1;
    }
    m->val_off = (uint32_t)(start - line);
    m->val_len = (uint32_t)(c->p - start);
    return 0;
}

/* The key at c->p (a string) into the row's keys; unique. */
static int key(jcur *c, sl__jrow *row, sl__jmember *m) {
    if (c->p >= c->e || *c->p != '"') return fail(c, "object key (a string) expected");
    sl__obuf k = {row->keys + row->keys_len, SL__JROW_KEYS - row->keys_len, 0, 0};
    if (jstring(c, &k)) return -1;
    if (k.trunc) return fail(c, "the keys of a row hold more than 4096 bytes");
    m->key_off = (uint32_t)row->keys_len;
    m->key_len = (uint32_t)k.len;
    for (uint32_t j = 0; j < row->n; j++)
        if (row->m[j].key_len == k.len && !memcmp(row->keys + row->m[j].key_off, k.p, k.len))
            return fail(c, "duplicate key");
    row->keys_len += k.len;
    return 0;
}

size_t sl__jrow_line(const char *t, size_t n, size_t i, size_t *next) {
    const char *nl = memchr(t + i, '\n', n - i);
    size_t e = nl ? (size_t)(nl - t) : n;
    const char *cr = memchr(t + i, '\r', e - i); /* only inside this line: LF finds lines fast */
    if (cr) e = (size_t)(cr - t);
    *next = e + (e < n) + (cr && e + 1 < n && t[e + 1] == '\n');
    return e;
}

int sl__jrow_parse(const char *line, size_t len, sl__jrow *row, char *err, size_t errlen) {
    jcur c = {line, line + len, NULL};
    row->line = line;
    row->n = 0;
    row->keys_len = 0;
    sl__jmember *m = NULL;
    int rc = 0;
    ws(&c);
    if (c.p >= c.e || *c.p != '{') rc = fail(&c, "a JSON object expected");
    else c.p++;
    ws(&c);
    if (!rc && c.p < c.e && *c.p == '}') c.p++;
    else
        while (!rc) {
            ws(&c);
            if (row->n == SL__JROW_MEMBERS) {
                rc = fail(&c, "more than 256 keys in a row");
                break;
            }
            m = &row->m[row->n];
            memset(m, 0, sizeof *m);
            if ((rc = key(&c, row, m))) break;
            ws(&c);
            if (c.p >= c.e || *c.p != ':') {
                rc = fail(&c, "':' expected after an object key");
                break;
            }
            c.p++;
            ws(&c);
            if ((rc = value(&c, m, line))) break;
            row->n++;
            m = NULL;
            ws(&c);
            if (c.p < c.e && *c.p == ',') {
                c.p++;
                continue;
            }
            if (c.p < c.e && *c.p == '}') c.p++;
            else rc = fail(&c, "',' or '}' expected");
            break;
        }
    ws(&c);
    if (!rc && c.p != c.e) rc = fail(&c, "characters after the object");
    if (!rc) return 0;
    if (m && m->key_len) /* the error is in this member's value, or its key is a duplicate */
        sl__msg(err, errlen, "\"%.*s\": %s", (int)SL_MIN(m->key_len, 60), row->keys + m->key_off, c.why);
    else
        sl__msg(err, errlen, "%s", c.why ? c.why : "syntax error");
    return -1;
}

const sl__jmember *sl__jrow_find(const sl__jrow *row, const char *keys) {
    const char *k = keys;
    for (;;) {
        size_t n = strcspn(k, ";");
        for (uint32_t j = 0; j < row->n && n; j++)
            if (row->m[j].key_len == n && !memcmp(row->keys + row->m[j].key_off, k, n)) return &row->m[j];
        if (!k[n]) return NULL;
        k += n + 1;
    }
}

void sl__jrow_key(const sl__jrow *row, const sl__jmember *m, char *buf, size_t len) {
    snprintf(buf, len, "%.*s", (int)m->key_len, row->keys + m->key_off);
}

void sl__jrow_iter(const sl__jrow *row, const sl__jmember *m, sl__jiter *it) {
    it->p = row->line + m->val_off;
    it->e = it->p + m->val_len;
    if (it->p < it->e && *it->p == '[') it->p++;
}

/* Past blanks and one ',' after an element. */
static void iter_next(sl__jiter *it, jcur *c) {
    ws(c);
    if (c->p < c->e && *c->p == ',') c->p++;
    ws(c);
    it->p = c->p;
}

void sl__jiter_string(sl__jiter *it, sl__obuf *o) {
    jcur c = {it->p, it->e, NULL};
    ws(&c);
    jstring(&c, o);
    iter_next(it, &c);
}

double sl__jiter_number(sl__jiter *it) {
    jcur c = {it->p, it->e, NULL};
    ws(&c);
    const char *s = c.p;
    int is_int;
    jnumber(&c, &is_int);
    char num[NUMBER_MAX + 1];
    size_t n = SL_MIN((size_t)(c.p - s), (size_t)NUMBER_MAX);
    memcpy(num, s, n);
    num[n] = 0;
    iter_next(it, &c);
    return strtod(num, NULL);
}

int sl__jrow_int(const sl__jrow *row, const sl__jmember *m, int64_t *out) {
    if (m->type != SL__JV_NUMBER || !m->is_int) return -1;
    return sl__parse_int(row->line + m->val_off, m->val_len, out);
}
