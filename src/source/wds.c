/*
 * WebDataset on top of the tar scanner: members grouped into samples by
 * name, and brace patterns for shard lists. The rules are in tar.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/util.h"
#include "source/index.h"
#include "source/jsonrow.h"
#include "source/wds.h"

typedef unsigned long long ull;

/* ---- names ---------------------------------------------------------------- */

int sl__wds_split(const char *name, size_t len, size_t *prefix_len, size_t *key_off) {
    size_t file = len;
    while (file > 0 && name[file - 1] != '/') file--; /* file part starts here */
    const char *dot = memchr(name + file, '.', len - file);
    if (!dot || dot == name + file || dot + 1 == name + len) return -1; /* no prefix, or no key */
    *prefix_len = (size_t)(dot - name);
    *key_off = *prefix_len + 1;
    return 0;
}

/* ---- the set of prefixes already emitted ---------------------------------- */

static int set_grow(sl__wds_grouper *g) {
    uint64_t cap = g->table_cap ? g->table_cap * 2 : 256;
    uint64_t *t = sl__calloc(g->b, (size_t)cap, sizeof *t, SL_MEM_INDEX);
    if (!t) return sl__nomem_code(g->b, cap * sizeof *t);
    for (uint64_t i = 0; i < g->table_cap; i++) {
        if (!g->table[i]) continue;
        const char *s = g->arena + g->table[i] - 1;
        uint64_t j = sl__hash64(s, strlen(s), 0) & (cap - 1);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = g->table[i];
    }
    sl__free(g->b, g->table);
    g->table = t;
    g->table_cap = cap;
    return 0;
}

/* Slot of prefix p[0, n) in the table: its entry, or the empty slot where
 * it would go. */
static uint64_t set_slot(const sl__wds_grouper *g, const char *p, size_t n) {
    uint64_t j = sl__hash64(p, n, 0) & (g->table_cap - 1);
    while (g->table[j]) {
        const char *s = g->arena + g->table[j] - 1;
        if (strlen(s) == n && !memcmp(s, p, n)) return j;
        j = (j + 1) & (g->table_cap - 1);
    }
    return j;
}

static int set_has(const sl__wds_grouper *g, const char *p, size_t n) {
    return g->table_cap && g->table[set_slot(g, p, n)] != 0;
}

static int set_add(sl__wds_grouper *g, const char *p, size_t n) {
    int rc;
    if ((g->table_used + 1) * 2 > g->table_cap && (rc = set_grow(g))) return rc;
    uint64_t need;
    if (sl__add(g->arena_len, n + 1, &need)) return SL_EOVERFLOW;
    if (need > g->arena_cap) {
        uint64_t cap = g->arena_cap ? g->arena_cap : 4096;
        while (cap < need) cap *= 2;
        char *a = sl__realloc(g->b, g->arena, (size_t)cap, SL_MEM_INDEX);
        if (!a) return sl__nomem_code(g->b, cap);
        g->arena = a;
        g->arena_cap = cap;
    }
    memcpy(g->arena + g->arena_len, p, n);
    g->arena[g->arena_len + n] = 0;
    g->table[set_slot(g, p, n)] = g->arena_len + 1;
    g->arena_len = need;
    g->table_used++;
    return 0;
}

/* ---- grouping ------------------------------------------------------------- */

void sl__wds_group_init(sl__wds_grouper *g, sl__budget *b, sl__wds_sample_fn emit, void *ctx) {
    memset(g, 0, sizeof *g);
    g->b = b;
    g->emit = emit;
    g->ctx = ctx;
}

void sl__wds_group_free(sl__wds_grouper *g) {
    sl__free(g->b, g->arena);
    sl__free(g->b, g->table);
    g->arena = NULL;
    g->table = NULL;
    g->arena_len = g->arena_cap = g->table_cap = g->table_used = 0;
}

/* Emit the sample gathered so far and remember its prefix. */
static int flush(sl__wds_grouper *g, char *err, size_t errlen) {
    if (g->n == 0) return 0;
    int rc = g->emit(g->ctx, g->prefix, g->prefix_len, g->m, g->n, err, errlen);
    if (rc) return rc;
    if ((rc = set_add(g, g->prefix, g->prefix_len))) {
        sl__msg(err, errlen, "tar: no memory for the sample names (%s)", sl_strerror(rc));
        return rc;
    }
    g->samples++;
    g->n = 0;
    return 0;
}

int sl__wds_group_add(void *grouper, const sl__tar_member *m, char *err, size_t errlen) {
    sl__wds_grouper *g = grouper;
    size_t plen, koff;
    if (sl__wds_split(m->name, m->name_len, &plen, &koff)) {
        g->skipped++;
        return 0;
    }
    size_t klen = m->name_len - koff;
    if (klen > SL_WDS_KEY_MAX) {
        sl__msg(err, errlen, "tar: key of %zu bytes in member '%.60s' (limit %d)", klen, m->name, SL_WDS_KEY_MAX);
        return SL_ELIMIT;
    }
    int rc;
    if (g->n > 0 && (plen != g->prefix_len || memcmp(m->name, g->prefix, plen)) && (rc = flush(g, err, errlen)))
        return rc;
    if (g->n == 0) {
        if (set_has(g, m->name, plen)) {
            sl__msg(err, errlen,
                    "tar: sample '%.*s' comes back at offset %llu after other samples "
                    "(WebDataset needs a sample's members contiguous)",
                    (int)SL_MIN(plen, 60), m->name, (ull)m->header_offset);
            return SL_ECORRUPT;
        }
        memcpy(g->prefix, m->name, plen);
        g->prefix[plen] = 0;
        g->prefix_len = plen;
    }
    if (g->n == SL_WDS_MAX_MEMBERS) {
        sl__msg(err, errlen, "tar: sample '%.60s' has more than %d members", g->prefix, SL_WDS_MAX_MEMBERS);
        return SL_ELIMIT;
    }
    char *key = g->keys[g->n];
    for (size_t i = 0; i < klen; i++) key[i] = (char)tolower((unsigned char)m->name[koff + i]);
    key[klen] = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        if (g->m[i].key_len == klen && !memcmp(g->m[i].key, key, klen)) {
            sl__msg(err, errlen, "tar: key '%.40s' twice in sample '%.60s' (second at offset %llu)", key, g->prefix,
                    (ull)m->header_offset);
            return SL_ECORRUPT;
        }
    }
    g->m[g->n] = (sl__wds_member){key, klen, m->offset, m->size};
    g->n++;
    return 0;
}

int sl__wds_group_finish(sl__wds_grouper *g, char *err, size_t errlen) { return flush(g, err, errlen); }

/* ---- one shard ------------------------------------------------------------ */

/* A shard's scan: the trailer is set aside, every other member goes to
 * the grouper, and nothing may follow the trailer. */
typedef struct shard_scan {
    sl__wds_grouper *g;
    int trailer;                            /* seen */
    uint64_t t_header, t_offset, t_size;    /* its header, data and size */
    sl__tar_member_fn tap;                  /* sees what the grouper gets (may be NULL) */
    void *tap_ctx;
} shard_scan;

static int shard_member(void *ctx, const sl__tar_member *m, char *err, size_t errlen) {
    shard_scan *s = ctx;
    if (s->trailer) {
        sl__msg(err, errlen, "tar: member '%.60s' at offset %llu comes after the shard trailer %s (written to after "
                "it was finished?)", m->name, (ull)m->header_offset, SL_WDS_TRAILER);
        return SL_ECORRUPT;
    }
    if (m->name_len == sizeof SL_WDS_TRAILER - 1 && !memcmp(m->name, SL_WDS_TRAILER, m->name_len)) {
        s->trailer = 1;
        s->t_header = m->header_offset, s->t_offset = m->offset, s->t_size = m->size;
        return 0;
    }
    int rc = s->tap ? s->tap(s->tap_ctx, m, err, errlen) : 0;
    return rc ? rc : sl__wds_group_add(s->g, m, err, errlen);
}

/* A non-negative integer member of the trailer's row, or -1. */
static int64_t trailer_num(const sl__jrow *row, const char *key) {
    const sl__jmember *m = sl__jrow_find(row, key);
    int64_t v;
    return m && sl__jrow_int(row, m, &v) == 0 && v >= 0 ? v : -1;
}

/* The trailer's line against what the shard holds before it. */
static int check_trailer(sl__tar_read_fn read, void *rctx, sl__budget *b, const shard_scan *s, uint64_t samples,
                         char *err, size_t errlen) {
    char line[SL_WDS_TRAILER_MAX];
    if (s->t_size == 0 || s->t_size > SL_WDS_TRAILER_MAX) {
        sl__msg(err, errlen, "tar: the shard trailer %s holds %llu bytes (1 to %d)", SL_WDS_TRAILER, (ull)s->t_size,
                SL_WDS_TRAILER_MAX);
        return SL_ECORRUPT;
    }
    size_t n = (size_t)s->t_size;
    char failed[200];
    int rrc = read(rctx, s->t_offset, line, n, failed, sizeof failed);
    if (rrc) {
        sl__msg(err, errlen, "tar: reading the shard trailer at offset %llu failed: %s", (ull)s->t_offset,
                strncmp(failed, "tar: ", 5) ? failed : failed + 5);
        return rrc;
    }
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    sl__jrow *row = sl__alloc(b, sizeof *row, SL_MEM_INDEX); /* ~10 KiB: not on a small stack */
    if (!row) {
        int rc = sl__nomem_code(b, sizeof *row);
        sl__msg(err, errlen, "tar: no memory to read the shard trailer (%s)", sl_strerror(rc));
        return rc;
    }
    char why[160];
    int64_t ns = -1, nb = -1;
    int ok = sl__jrow_parse(line, n, row, why, sizeof why) == 0;
    if (ok) ns = trailer_num(row, "samples"), nb = trailer_num(row, "bytes");
    sl__free(b, row);
    if (ns < 0 || nb < 0) {
        sl__msg(err, errlen, "tar: the shard trailer %s at offset %llu is not {\"samples\": N, \"bytes\": B}%s%s",
                SL_WDS_TRAILER, (ull)s->t_header, ok ? "" : ": ", ok ? "" : why);
        return SL_ECORRUPT;
    }
    if ((uint64_t)ns != samples || (uint64_t)nb != s->t_header) {
        sl__msg(err, errlen, "tar: the shard trailer says %lld samples in %lld bytes, the shard holds %llu samples in "
                "%llu bytes before it (damaged or edited after it was written)", (long long)ns, (long long)nb,
                (ull)samples, (ull)s->t_header);
        return SL_ECORRUPT;
    }
    return 0;
}

int sl__wds_scan(int fd, uint64_t file_size, sl__budget *b, sl__wds_sample_fn emit, void *ctx, sl__wds_stats *st,
                 char *err, size_t errlen) {
    return sl__wds_scan_read(sl__tar_pread, &fd, file_size, b, emit, ctx, NULL, NULL, st, err, errlen);
}

int sl__wds_scan_read(sl__tar_read_fn read, void *rctx, uint64_t file_size, sl__budget *b, sl__wds_sample_fn emit,
                      void *ctx, sl__tar_member_fn tap, void *tap_ctx, sl__wds_stats *st, char *err, size_t errlen) {
    /* ~14 KiB: too much for a small thread stack, so from the budget */
    sl__wds_grouper *g = sl__alloc(b, sizeof *g, SL_MEM_INDEX);
    if (!g) {
        int rc = sl__nomem_code(b, sizeof *g);
        sl__msg(err, errlen, "tar: no memory to group members (%s)", sl_strerror(rc));
        return rc;
    }
    sl__wds_group_init(g, b, emit, ctx);
    shard_scan s = {g, 0, 0, 0, 0, tap, tap_ctx};
    uint64_t end = 0;
    int rc = sl__tar_scan_read(read, rctx, file_size, shard_member, &s, &end, err, errlen);
    if (!rc) rc = sl__wds_group_finish(g, err, errlen);
    if (!rc && end == UINT64_MAX) {
        sl__msg(err, errlen, "tar: the file stops at byte %llu without tar's end-of-archive block: the shard was cut "
                "short (an interrupted write or copy?)", (ull)file_size);
        rc = SL_ECORRUPT;
    }
    if (!rc && s.trailer) rc = check_trailer(read, rctx, b, &s, g->samples, err, errlen);
    if (st) *st = (sl__wds_stats){g->samples, g->skipped, !rc && s.trailer};
    sl__wds_group_free(g);
    sl__free(b, g);
    return rc;
}

/* ---- brace patterns ------------------------------------------------------- */

#define BRACE_GROUPS 16

typedef struct brace_group {
    size_t lit, lit_len;   /* literal text before the group (pattern span) */
    size_t body, body_len; /* between the braces */
    int range;             /* 1: {lo..hi}, 0: a comma list */
    uint64_t lo, hi, count;
    int width;             /* zero padding of a range (0: none) */
    size_t max_len;        /* longest alternative */
} brace_group;

/* Decimal in s[0, n) below 10^18; *lead_zero when written "0..." with more digits. */
static int brace_num(const char *s, size_t n, uint64_t *v, int *lead_zero) {
    if (n == 0 || n > 18) return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    *lead_zero = n > 1 && s[0] == '0';
    return 0;
}

static int ndigits(uint64_t v) {
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* Classify one group's body: a range "A..B" or a list "x,y,...". */
static int brace_body(const char *p, brace_group *g, char *err, size_t errlen) {
    const char *b = p + g->body;
    size_t n = g->body_len;
    const char *dots = NULL;
    for (size_t i = 0; i + 1 < n; i++)
        if (b[i] == '.' && b[i + 1] == '.') {
            dots = b + i;
            break;
        }
    if (!memchr(b, ',', n) && dots) {
        int z1, z2;
        size_t n1 = (size_t)(dots - b), n2 = n - n1 - 2;
        if (brace_num(b, n1, &g->lo, &z1) || brace_num(dots + 2, n2, &g->hi, &z2)) {
            sl__msg(err, errlen, "brace range '{%.*s}': endpoints must be decimal numbers below 10^18",
                    (int)SL_MIN(n, 60), b);
            return SL_EPARSE;
        }
        g->range = 1;
        g->count = (g->lo <= g->hi ? g->hi - g->lo : g->lo - g->hi) + 1;
        g->width = (z1 || z2) ? (int)SL_MAX(n1, n2) : 0;
        g->max_len = (size_t)SL_MAX(g->width, SL_MAX(ndigits(g->lo), ndigits(g->hi)));
        return 0;
    }
    if (!memchr(b, ',', n)) {
        sl__msg(err, errlen, "brace group '{%.*s}' is neither a list (a,b) nor a range (A..B)",
                (int)SL_MIN(n, 60), b);
        return SL_EPARSE;
    }
    g->count = 1;
    for (size_t i = 0, start = 0; i <= n; i++) {
        if (i == n || b[i] == ',') {
            g->max_len = SL_MAX(g->max_len, i - start);
            if (i < n) g->count++;
            start = i + 1;
        }
    }
    return 0;
}

/* Split the pattern into groups; *tail is the literal after the last. */
static int brace_parse(const char *p, brace_group *g, int *ng, size_t *tail, uint64_t *total, char *err,
                       size_t errlen) {
    size_t i = 0, lit = 0, len = 0;
    *ng = 0;
    *total = 1;
    for (; p[i]; i++) {
        if (p[i] == '}') {
            sl__msg(err, errlen, "unbalanced '}' at position %zu of the shard pattern", i);
            return SL_EPARSE;
        }
        if (p[i] != '{') continue;
        size_t j = i + 1;
        while (p[j] && p[j] != '}' && p[j] != '{') j++;
        if (p[j] != '}') {
            sl__msg(err, errlen, "%s '{' at position %zu of the shard pattern", p[j] ? "nested" : "unclosed", i);
            return SL_EPARSE;
        }
        if (*ng == BRACE_GROUPS) {
            sl__msg(err, errlen, "shard pattern has more than %d brace groups", BRACE_GROUPS);
            return SL_ELIMIT;
        }
        brace_group *b = &g[(*ng)++];
        memset(b, 0, sizeof *b);
        b->lit = lit, b->lit_len = i - lit, b->body = i + 1, b->body_len = j - i - 1;
        int rc = brace_body(p, b, err, errlen);
        if (rc) return rc;
        if (sl__mul(*total, b->count, total) || *total > SL_BRACE_MAX) {
            sl__msg(err, errlen, "shard pattern expands to more than %d names", SL_BRACE_MAX);
            return SL_ELIMIT;
        }
        len += b->lit_len + b->max_len;
        lit = j + 1;
        i = j;
    }
    *tail = lit;
    len += i - lit;
    if (len > SL_TAR_NAME_MAX) {
        sl__msg(err, errlen, "shard pattern expands to names of up to %zu bytes (limit %d)", len, SL_TAR_NAME_MAX);
        return SL_ELIMIT;
    }
    return 0;
}

/* Append alternative k of group g to out at *n. */
static void brace_put(const char *p, const brace_group *g, uint64_t k, char *out, size_t *n) {
    if (g->range) {
        uint64_t v = g->lo <= g->hi ? g->lo + k : g->lo - k;
        *n += (size_t)snprintf(out + *n, SL_TAR_NAME_MAX + 1 - *n, "%0*llu", g->width, (ull)v);
        return;
    }
    const char *b = p + g->body;
    size_t start = 0, i = 0;
    for (uint64_t item = 0;; i++) { /* the k-th comma-separated item */
        if (i == g->body_len || b[i] == ',') {
            if (item++ == k) break;
            start = i + 1;
        }
    }
    memcpy(out + *n, b + start, i - start);
    *n += i - start;
}

int sl__brace_expand(const char *pattern, sl__brace_fn emit, void *ctx, char *err, size_t errlen) {
    brace_group g[BRACE_GROUPS];
    uint64_t idx[BRACE_GROUPS] = {0}, total;
    int ng;
    size_t tail;
    if (!pattern) return SL_EINVAL;
    int rc = brace_parse(pattern, g, &ng, &tail, &total, err, errlen);
    if (rc) return rc;
    char name[SL_TAR_NAME_MAX + 1];
    for (uint64_t done = 0; done < total; done++) {
        size_t n = 0;
        for (int k = 0; k < ng; k++) {
            memcpy(name + n, pattern + g[k].lit, g[k].lit_len);
            n += g[k].lit_len;
            brace_put(pattern, &g[k], idx[k], name, &n);
        }
        size_t tl = strlen(pattern + tail);
        memcpy(name + n, pattern + tail, tl);
        n += tl;
        name[n] = 0;
        if ((rc = emit(ctx, name, n))) return rc;
        for (int k = ng - 1; k >= 0; k--) { /* odometer: the rightmost group varies fastest */
            if (++idx[k] < g[k].count) break;
            idx[k] = 0;
        }
    }
    return 0;
}
