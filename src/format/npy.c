/*
 * .npy headers and raw array declarations: see array.h. The dict parser
 * is a strict recogniser for the literal numpy writes, not a Python
 * evaluator: tokens are strings without escapes, True/False, and tuples of
 * decimal integers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "format/array.h"

typedef unsigned long long ull;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG 1
#else
#define HOST_BIG 0
#endif

/* ---- dtypes --------------------------------------------------------------- */

static const struct {
    int code;
    char kind;
    uint32_t size;
    const char *name;
} dtypes[] = {
    {SL_DTYPE_BOOL, 'b', 1, "bool"},     {SL_DTYPE_INT8, 'i', 1, "int8"},
    {SL_DTYPE_INT16, 'i', 2, "int16"},   {SL_DTYPE_INT32, 'i', 4, "int32"},
    {SL_DTYPE_INT64, 'i', 8, "int64"},   {SL_DTYPE_UINT8, 'u', 1, "uint8"},
    {SL_DTYPE_UINT16, 'u', 2, "uint16"}, {SL_DTYPE_UINT32, 'u', 4, "uint32"},
    {SL_DTYPE_UINT64, 'u', 8, "uint64"}, {SL_DTYPE_FLOAT16, 'f', 2, "float16"},
    {SL_DTYPE_FLOAT32, 'f', 4, "float32"}, {SL_DTYPE_FLOAT64, 'f', 8, "float64"},
};
#define NDTYPES (sizeof dtypes / sizeof *dtypes)


/* A descr string s[0, n): "<f4", "|u1", "=i8", "b1"... */
static int parse_descr(const char *s, size_t n, sl__array_info *a, char *reason, size_t rlen) {
    char order = '=';
    size_t i = 0;
    if (n && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) order = s[i++];
    if (i < n && strchr("cUSOVMma", s[i])) {
        sl__msg(reason, rlen, "npy dtype '%.*s' is not a real numeric type (complex, string, object, "
                "void and datetime arrays are not supported)", (int)n, s);
        return SL_EUNSUPPORTED;
    }
    uint32_t size = 0;
    if (i + 2 == n && s[i + 1] >= '1' && s[i + 1] <= '8') size = (uint32_t)(s[i + 1] - '0');
    for (size_t k = 0; size && k < NDTYPES; k++) {
        if (dtypes[k].kind != s[i] || dtypes[k].size != size) continue;
        if (order == '|' && size != 1) break; /* "not applicable" only fits one-byte types */
        a->dtype = dtypes[k].code;
        a->itemsize = size;
        a->swap = size > 1 && ((order == '>' && !HOST_BIG) || (order == '<' && HOST_BIG));
        return 0;
    }
    sl__msg(reason, rlen, "npy dtype '%.*s' is not one of b1, i1-i8, u1-u8, f2-f8 (with <, >, | or =)",
            (int)SL_MIN(n, 40), s);
    return n > i && (s[i] == 'f' || s[i] == 'i' || s[i] == 'u' || s[i] == 'b') ? SL_EUNSUPPORTED : SL_ECORRUPT;
}

/* ---- the header dict ------------------------------------------------------ */

/* The dict's text [start, end); p is the next byte. hit_end: some token
 * ran into the end (a longer header might have held the rest). */
typedef struct lex {
    const char *start, *p, *end;
    char *reason;
    size_t rlen;
    int hit_end;
} lex;

static void skip_ws(lex *l) {
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\r' || *l->p == '\n')) l->p++;
    if (l->p >= l->end) l->hit_end = 1;
}

static int expect(lex *l, char c) {
    skip_ws(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return 0;
    }
    sl__msg(l->reason, l->rlen, "npy header: expected '%c' at byte %zu of the dict", c, (size_t)(l->p - l->start));
    return SL_ECORRUPT;
}

/* A quoted string without escapes: *s, *n point into the header. */
static int lex_string(lex *l, const char **s, size_t *n) {
    skip_ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) {
        sl__msg(l->reason, l->rlen, "npy header: expected a quoted string");
        return SL_ECORRUPT;
    }
    char q = *l->p++;
    const char *b = l->p;
    while (l->p < l->end && *l->p != q) {
        if (*l->p == '\\' || (unsigned char)*l->p < 0x20 || (unsigned char)*l->p > 0x7E) {
            sl__msg(l->reason, l->rlen, "npy header: escape or non-printable byte in a string");
            return SL_ECORRUPT;
        }
        l->p++;
    }
    if (l->p >= l->end) {
        l->hit_end = 1;
        sl__msg(l->reason, l->rlen, "npy header: unterminated string");
        return SL_ECORRUPT;
    }
    *s = b;
    *n = (size_t)(l->p - b);
    l->p++;
    return 0;
}

static int lex_word(lex *l, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, w, n)) {
        l->p += n;
        return 1;
    }
    return 0;
}

static int parse_bool(lex *l, int *v) {
    skip_ws(l);
    if (lex_word(l, "True")) *v = 1;
    else if (lex_word(l, "False")) *v = 0;
    else {
        sl__msg(l->reason, l->rlen, "npy header: fortran_order is neither True nor False");
        return SL_ECORRUPT;
    }
    return 0;
}

/* "(a, b, ...)": a one-element tuple needs its trailing comma. */
static int parse_shape(lex *l, sl__array_info *a) {
    int rc = expect(l, '(');
    if (rc) {
        sl__msg(l->reason, l->rlen, "npy header: shape is not a tuple");
        return rc;
    }
    int comma = 0;
    for (;;) {
        skip_ws(l);
        if (l->p < l->end && *l->p == ')') break;
        if (a->ndim && !comma) {
            sl__msg(l->reason, l->rlen, "npy header: shape entries must be separated by commas");
            return SL_ECORRUPT;
        }
        if (l->p < l->end && *l->p == '-') {
            sl__msg(l->reason, l->rlen, "npy header: negative dimension in the shape");
            return SL_ECORRUPT;
        }
        uint64_t v = 0;
        const char *b = l->p;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
            if (v > ((uint64_t)INT64_MAX - 9) / 10) {
                sl__msg(l->reason, l->rlen, "npy header: a dimension is 2^63 or more");
                return SL_EOVERFLOW;
            }
            v = v * 10 + (uint64_t)(*l->p++ - '0');
        }
        if (l->p == b) {
            sl__msg(l->reason, l->rlen, "npy header: a shape entry is not a non-negative integer");
            return SL_ECORRUPT;
        }
        if (l->p < l->end && *l->p == 'L') l->p++; /* Python 2 long, in old v1 files */
        if (a->ndim == SL_ARRAY_MAX_DIMS) {
            sl__msg(l->reason, l->rlen, "npy array has more than %d dimensions", SL_ARRAY_MAX_DIMS);
            return SL_EUNSUPPORTED;
        }
        a->shape[a->ndim++] = v;
        skip_ws(l);
        comma = l->p < l->end && *l->p == ',';
        if (comma) l->p++;
    }
    l->p++;
    if (a->ndim == 1 && !comma) {
        sl__msg(l->reason, l->rlen, "npy header: shape '(n)' is not a tuple (a 1-d shape is written '(n,)')");
        return SL_ECORRUPT;
    }
    return 0;
}

/* The dict's entries, in any order, each key once. */
static int dict_body(lex *l, sl__array_info *a) {
    int rc, seen = 0; /* bits: 1 descr, 2 fortran_order, 4 shape */
    skip_ws(l);
    if (l->p >= l->end || *l->p != '{') {
        sl__msg(l->reason, l->rlen, "npy header does not start with a dict");
        return SL_ECORRUPT;
    }
    l->p++;
    for (;;) {
        skip_ws(l);
        if (l->p < l->end && *l->p == '}') break;
        const char *k;
        size_t kn;
        if ((rc = lex_string(l, &k, &kn)) || (rc = expect(l, ':'))) {
            if (rc && l->p >= l->end) sl__msg(l->reason, l->rlen, "npy header: the dict is not closed");
            return rc;
        }
        int bit = kn == 5 && !memcmp(k, "descr", 5) ? 1 : kn == 13 && !memcmp(k, "fortran_order", 13) ? 2
                : kn == 5 && !memcmp(k, "shape", 5) ? 4 : 0;
        if (!bit || (seen & bit)) {
            sl__msg(l->reason, l->rlen, "npy header: %s key '%.*s'", bit ? "repeated" : "unexpected", (int)SL_MIN(kn, 40), k);
            return SL_ECORRUPT;
        }
        seen |= bit;
        if (bit == 1) {
            const char *d;
            size_t dn;
            if ((rc = lex_string(l, &d, &dn))) {
                if (l->p < l->end && *l->p == '[')
                    sl__msg(l->reason, l->rlen, "npy structured dtypes are not supported");
                return l->p < l->end && *l->p == '[' ? SL_EUNSUPPORTED : rc;
            }
            if ((rc = parse_descr(d, dn, a, l->reason, l->rlen))) return rc;
        } else if (bit == 2) {
            if ((rc = parse_bool(l, &a->fortran))) return rc;
        } else if ((rc = parse_shape(l, a))) {
            return rc;
        }
        skip_ws(l);
        if (l->p < l->end && *l->p == ',') l->p++;
        else if (!(l->p < l->end && *l->p == '}')) {
            sl__msg(l->reason, l->rlen, "npy header: %s", l->p < l->end ? "entries must be separated by commas"
                                                                 : "the dict is not closed");
            return SL_ECORRUPT;
        }
    }
    if (seen != 7) {
        sl__msg(l->reason, l->rlen, "npy header lacks '%s'", !(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape");
        return SL_ECORRUPT;
    }
    l->p++; /* the closing brace */
    return 0;
}

/* The dict at the start of text[0, n): fills a; *used is where it ends;
 * *hit_end on failure: the text ended inside the dict. */
static int parse_dict(const char *text, size_t n, sl__array_info *a, size_t *used, int *hit_end, char *reason,
                      size_t rlen) {
    lex l = {text, text, text + n, reason, rlen, 0};
    int rc = dict_body(&l, a);
    *hit_end = l.hit_end;
    if (rc) return rc;
    *used = (size_t)(l.p - text);
    return 0;
}
static int only_space(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') return 0;
    return 1;
}

/* ---- prelude and sizes ---------------------------------------------------- */

/* Magic, version and header length from the first bytes (at least 12 or
 * the whole file): *dict is where the dict starts, *data_off the data. */
static int parse_prelude(const uint8_t *d, size_t len, uint64_t file_size, size_t *dict, uint64_t *data_off,
                         char *reason, size_t rlen) {
    if (len < 6 || memcmp(d, "\x93NUMPY", 6) != 0) {
        sl__msg(reason, rlen, "not an .npy file (no \\x93NUMPY magic)");
        return SL_EFORMAT;
    }
    if (len < 10) {
        sl__msg(reason, rlen, "npy file truncated in its prelude (%zu bytes)", len);
        return SL_ECORRUPT;
    }
    int major = d[6], minor = d[7];
    uint64_t hlen;
    if (major == 1 && minor == 0) {
        hlen = (uint64_t)d[8] | (uint64_t)d[9] << 8;
        *dict = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12) {
            sl__msg(reason, rlen, "npy file truncated in its prelude (%zu bytes)", len);
            return SL_ECORRUPT;
        }
        hlen = (uint64_t)d[8] | (uint64_t)d[9] << 8 | (uint64_t)d[10] << 16 | (uint64_t)d[11] << 24;
        *dict = 12;
    } else {
        sl__msg(reason, rlen, "npy format version %d.%d is not 1.0, 2.0 or 3.0", major, minor);
        return SL_EUNSUPPORTED;
    }
    if (hlen > SL_NPY_MAX_HEADER) {
        sl__msg(reason, rlen, "npy header of %llu bytes (limit %u)", (ull)hlen, SL_NPY_MAX_HEADER);
        return SL_ELIMIT;
    }
    *data_off = *dict + hlen;
    if (*data_off > file_size) {
        sl__msg(reason, rlen, "npy header length %llu runs past the end of the %llu-byte file", (ull)hlen,
                (ull)file_size);
        return SL_ECORRUPT;
    }
    return 0;
}

/* count and data_bytes from the shape; the data must fill the rest. */
static int check_sizes(sl__array_info *a, uint64_t file_size, const char *what, char *reason, size_t rlen) {
    uint64_t count = 1, bytes;
    for (uint32_t i = 0; i < a->ndim; i++) {
        if (sl__mul(count, a->shape[i], &count)) {
            sl__msg(reason, rlen, "%s shape's element count overflows 64 bits", what);
            return SL_EOVERFLOW;
        }
    }
    if (sl__mul(count, a->itemsize, &bytes)) {
        sl__msg(reason, rlen, "%s holds %llu elements of %u bytes: the size overflows 64 bits", what, (ull)count,
                a->itemsize);
        return SL_EOVERFLOW;
    }
    uint64_t have = file_size - a->data_offset;
    if (bytes != have) {
        sl__msg(reason, rlen, "%s: the shape needs %llu bytes of data (%llu elements of %u bytes), the file holds %llu%s",
                what, (ull)bytes, (ull)count, a->itemsize, (ull)have, bytes > have ? " (truncated)" : " (trailing bytes)");
        return SL_ECORRUPT;
    }
    a->count = count;
    a->data_bytes = bytes;
    return 0;
}

int sl__npy_parse(const uint8_t *data, size_t len, uint64_t file_size, sl__array_info *out, char *reason,
                  size_t rlen) {
    memset(out, 0, sizeof *out);
    if (!data && len) return SL_EINVAL;
    size_t dict;
    uint64_t off;
    int rc = parse_prelude(data, SL_MIN((uint64_t)len, file_size), file_size, &dict, &off, reason, rlen);
    if (rc) return rc;
    if (off > len) {
        sl__msg(reason, rlen, "npy header needs %llu bytes, %zu given", (ull)off, len);
        return SL_EINVAL;
    }
    size_t used;
    int hit_end;
    if ((rc = parse_dict((const char *)data + dict, (size_t)off - dict, out, &used, &hit_end, reason, rlen)))
        return rc;
    if (!only_space(data + dict + used, (size_t)off - dict - used)) {
        sl__msg(reason, rlen, "npy header: bytes other than padding after the dict");
        return SL_ECORRUPT;
    }
    out->data_offset = off;
    return check_sizes(out, file_size, "npy", reason, rlen);
}

static int pread_all(const sl__sample_file *f, void *buf, size_t n, uint64_t off, char *reason, size_t rlen) {
    if (f->obj) { /* a remote object: one ranged read */
        char why[160];
        int rc = sl__sample_pread(f, buf, n, off, why, sizeof why);
        if (rc) sl__msg(reason, rlen, "npy header read failed at offset %llu: %s", (ull)off, why);
        return rc == SL_ENOENT || rc == SL_ESTATE ? rc : rc ? SL_EIO : 0;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(f->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            sl__msg(reason, rlen, "npy header read failed at offset %llu: %s", (ull)(off + got),
                    r < 0 ? strerror(errno) : "file shorter than its size");
            return SL_EIO;
        }
        got += (size_t)r;
    }
    return 0;
}

int sl__npy_read_header(int fd, uint64_t offset, uint64_t size, sl__array_info *out, char *reason,
                        size_t rlen) {
    sl__sample_file f = {.fd = fd, .offset = offset, .size = size};
    return sl__npy_read_header_file(&f, out, reason, rlen);
}

int sl__npy_read_header_file(const sl__sample_file *f, sl__array_info *out, char *reason, size_t rlen) {
    uint64_t offset = f->offset, size = f->size;
    uint8_t buf[SL_NPY_DICT_MAX];
    memset(out, 0, sizeof *out);
    size_t n = (size_t)SL_MIN((uint64_t)sizeof buf, size), dict;
    uint64_t off;
    int rc = pread_all(f, buf, n, offset, reason, rlen);
    if (rc || (rc = parse_prelude(buf, n, size, &dict, &off, reason, rlen))) return rc;
    size_t in_buf = (size_t)SL_MIN((uint64_t)n, off), used;
    int hit_end;
    rc = parse_dict((const char *)buf + dict, in_buf - dict, out, &used, &hit_end, reason, rlen);
    if (rc && hit_end && off > n) {
        sl__msg(reason, rlen, "npy header dict does not end within its first %d bytes", SL_NPY_DICT_MAX);
        return SL_ELIMIT;
    }
    if (rc) return rc;
    if (!only_space(buf + dict + used, in_buf - dict - used)) {
        sl__msg(reason, rlen, "npy header: bytes other than padding after the dict");
        return SL_ECORRUPT;
    }
    for (uint64_t at = n; at < off;) { /* the rest of a long header: padding only */
        size_t k = (size_t)SL_MIN((uint64_t)sizeof buf, off - at);
        if ((rc = pread_all(f, buf, k, offset + at, reason, rlen))) return rc;
        if (!only_space(buf, k)) {
            sl__msg(reason, rlen, "npy header: bytes other than padding after the dict");
            return SL_ECORRUPT;
        }
        at += k;
    }
    out->data_offset = off;
    return check_sizes(out, size, "npy", reason, rlen);
}

int sl__raw_info(int dtype, int big_endian, const int64_t *shape, uint32_t ndim, uint64_t file_size,
                 sl__array_info *out, char *reason, size_t rlen) {
    memset(out, 0, sizeof *out);
    out->itemsize = (uint32_t)sl_dtype_size(dtype);
    if (!out->itemsize || ndim > SL_ARRAY_MAX_DIMS) {
        sl__msg(reason, rlen, "raw array: %s", !out->itemsize ? "unknown dtype" : "too many dimensions");
        return SL_EINVAL;
    }
    out->dtype = dtype;
    out->swap = out->itemsize > 1 && big_endian != HOST_BIG;
    out->ndim = ndim;
    int free_axis = -1;
    uint64_t row = out->itemsize; /* bytes of one step along the free axis */
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] < -1 || (shape[i] == -1 && free_axis >= 0)) {
            sl__msg(reason, rlen, "raw array: shape entry %lld (each is >= 0, at most one is -1)", (long long)shape[i]);
            return SL_EINVAL;
        }
        if (shape[i] == -1) free_axis = (int)i;
        else if (sl__mul(row, (uint64_t)shape[i], &row)) {
            sl__msg(reason, rlen, "raw array: declared shape overflows 64 bits");
            return SL_EOVERFLOW;
        }
        out->shape[i] = shape[i] < 0 ? 0 : (uint64_t)shape[i];
    }
    if (free_axis >= 0) {
        if (row == 0) {
            sl__msg(reason, rlen, "raw array: a free axis (-1) beside a zero dimension is undetermined");
            return SL_EINVAL;
        }
        if (file_size % row) {
            sl__msg(reason, rlen, "raw array: %llu bytes is not a whole number of %llu-byte rows (%llu left over)",
                    (ull)file_size, (ull)row, (ull)(file_size % row));
            return SL_ECORRUPT;
        }
        out->shape[free_axis] = file_size / row;
    }
    return check_sizes(out, file_size, "raw array", reason, rlen);
}
