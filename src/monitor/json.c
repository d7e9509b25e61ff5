/* Minimal JSON writer and path reader. See json.h. */
#include "monitor/json.h"

#include <stdlib.h>
#include <string.h>

#include "sluice.h"

void sl__json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

typedef struct cur {
    const char *s, *e;
    int depth;
} cur;

static void ws(cur *c) {
    while (c->s < c->e && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r')) c->s++;
}

/* Skip a string at c->s ('"' expected); sets [*b, *be) to its raw body. */
static int str(cur *c, const char **b, const char **be) {
    if (c->s >= c->e || *c->s != '"') return SL_EPARSE;
    c->s++;
    *b = c->s;
    while (c->s < c->e && *c->s != '"') c->s += (*c->s == '\\') ? 2 : 1;
    if (c->s >= c->e) return SL_EPARSE;
    *be = c->s++;
    return 0;
}

static int skip(cur *c);

static int skip_container(cur *c, char open, char close) {
    if (++c->depth > 64) return SL_EPARSE;
    c->s++; /* open */
    ws(c);
    if (c->s < c->e && *c->s == close) {
        c->s++;
        c->depth--;
        return 0;
    }
    for (;;) {
        ws(c);
        if (open == '{') {
            const char *b, *be;
            if (str(c, &b, &be)) return SL_EPARSE;
            ws(c);
            if (c->s >= c->e || *c->s != ':') return SL_EPARSE;
            c->s++;
        }
        if (skip(c)) return SL_EPARSE;
        ws(c);
        if (c->s >= c->e) return SL_EPARSE;
        if (*c->s == ',') {
            c->s++;
            continue;
        }
        if (*c->s != close) return SL_EPARSE;
        c->s++;
        c->depth--;
        return 0;
    }
}

/* Skip one value. */
static int skip(cur *c) {
    ws(c);
    if (c->s >= c->e) return SL_EPARSE;
    const char *b, *be;
    switch (*c->s) {
    case '{': return skip_container(c, '{', '}');
    case '[': return skip_container(c, '[', ']');
    case '"': return str(c, &b, &be);
    default:
        b = c->s;
        while (c->s < c->e && strchr("0123456789+-.eEtruefalsn", *c->s)) c->s++;
        return c->s > b ? 0 : SL_EPARSE;
    }
}

/* Move c to the value at path (see sl__json_number). 0, SL_ENOENT, SL_EPARSE. */
static int seek(cur *c, const char *path) {
    while (*path) {
        const char *dot = strchr(path, '.');
        size_t kl = dot ? (size_t)(dot - path) : strlen(path);
        ws(c);
        if (c->s >= c->e) return SL_EPARSE;
        int found = 0;
        if (*c->s == '{') {
            c->s++;
            for (;;) {
                ws(c);
                if (c->s < c->e && *c->s == '}') break;
                const char *b, *be;
                if (str(c, &b, &be)) return SL_EPARSE;
                ws(c);
                if (c->s >= c->e || *c->s != ':') return SL_EPARSE;
                c->s++;
                if ((size_t)(be - b) == kl && !memcmp(b, path, kl)) {
                    found = 1;
                    break;
                }
                if (skip(c)) return SL_EPARSE;
                ws(c);
                if (c->s < c->e && *c->s == ',') c->s++;
                else break;
            }
        } else if (*c->s == '[') {
            char *end;
            long want = strtol(path, &end, 10);
            if (end != path + kl || want < 0) return SL_ENOENT;
            c->s++;
            for (long i = 0;; i++) {
                ws(c);
                if (c->s < c->e && *c->s == ']') break;
                if (i == want) {
                    found = 1;
                    break;
                }
                if (skip(c)) return SL_EPARSE;
                ws(c);
                if (c->s < c->e && *c->s == ',') c->s++;
                else break;
            }
        }
        if (!found) return SL_ENOENT;
        path += kl + (dot ? 1 : 0);
    }
    ws(c);
    return c->s < c->e ? 0 : SL_EPARSE;
}

int sl__json_number(const char *s, size_t len, const char *path, double *out) {
    cur c = {s, s + len, 0};
    int rc = seek(&c, path);
    if (rc) return rc;
    if (!strchr("0123456789-", *c.s)) return SL_ENOENT; /* null, string, object */
    char num[64];
    size_t n = 0;
    while (c.s < c.e && n < sizeof num - 1 && strchr("0123456789+-.eE", *c.s)) num[n++] = *c.s++;
    num[n] = 0;
    char *end;
    *out = strtod(num, &end);
    return end == num ? SL_EPARSE : 0;
}

int sl__json_string(const char *s, size_t len, const char *path, char *out, size_t cap) {
    cur c = {s, s + len, 0};
    int rc = seek(&c, path);
    if (rc) return rc;
    const char *b, *be;
    if (*c.s != '"') return SL_ENOENT;
    if (str(&c, &b, &be)) return SL_EPARSE;
    size_t n = 0;
    for (const char *p = b; p < be && n + 1 < cap; p++) {
        char ch = *p;
        if (ch == '\\' && p + 1 < be) {
            char e = *++p;
            ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
            if (e == 'u') { /* \uXXXX: ASCII as itself, the rest as '?' */
                char hex[5] = {0};
                for (int k = 0; k < 4 && p + 1 < be; k++) hex[k] = *++p;
                long v = strtol(hex, NULL, 16);
                ch = v > 0 && v < 0x80 ? (char)v : '?';
            }
        }
        out[n++] = ch;
    }
    if (cap) out[n] = 0;
    return 0;
}
